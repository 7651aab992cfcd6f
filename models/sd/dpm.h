/* DPM-Solver++ as diffusers' DPMSolverMultistepScheduler runs it by default ("DPM++ 2M":
 * algorithm_type dpmsolver++, solver_order 2 or 1, solver_type midpoint or heun), on
 * ddim.h's ᾱ (a zero-SNR schedule's last ᾱ 2^-24, as there).
 *
 * Timesteps, its own spacing: linspace round(linspace(0, N−1, steps+1)) and leading
 * arange(steps+1)·(N // (steps+1)) + steps_offset, each largest first without the last;
 * trailing as ddim.h's. σ = √((1−ᾱ)/ᾱ) at them; with karras the Karras et al. σ (ρ = 7)
 * between the whole schedule's σ_{N−1} and σ_0 (or sigma_max, sigma_min where > 0), each
 * one's timestep by interpolation in log σ, rounded (truncated for the cosine betas, as
 * diffusers' int64 timesteps do). The last σ
 * is 0, or σ_0 with final_sigma_min.
 *
 * With α = 1/√(σ²+1), s = σ·α, λ = log α − log s, step i turns the model's output o into
 * the data prediction d_i = (x − s_i·o)/α_i (epsilon), α_i·x − s_i·o (v), o (sample), and
 * with h = λ_{i+1} − λ_i, E = α_{i+1}(e^{−h} − 1):
 *   first order:  x' = (s_{i+1}/s_i)·x − E·d_i            (x' = d_i where σ_{i+1} = 0)
 *   second order: D1 = (d_i − d_{i−1})·h/(λ_i − λ_{i−1});
 *                 midpoint: x' = first − E/2·D1;  heun: x' = first + α_{i+1}((e^{−h} − 1)/h + 1)·D1
 * sde-dpmsolver++ ("DPM++ 2M SDE") instead, with fresh noise n each step:
 *   first order:  x' = (s_{i+1}/s_i)·e^{−h}·x + α_{i+1}(1 − e^{−2h})·d_i + s_{i+1}√(1 − e^{−2h})·n
 *   second order: + α_{i+1}(1 − e^{−2h})/2·D1 (midpoint), + α_{i+1}((1 − e^{−2h})/(−2h) + 1)·D1 (heun)
 * The first step run is first order (nothing before it), and so is the last where
 * lower_order_final holds with fewer than 15 steps, euler_at_final, or the last σ is 0.
 * The UNet sees x as it is; the initial noise is not scaled. Everything in double. */
#ifndef TRIDENT_MODELS_DPM_H
#define TRIDENT_MODELS_DPM_H

#include <stdint.h>
#include "ddim.h"
#include "trident/status.h"

struct tr_dpm_config {
    int order;                   /* solver_order: 1 or 2 */
    int heun;                    /* solver_type heun, else midpoint */
    int sde;                     /* algorithm_type sde-dpmsolver++ */
    int lower_order_final, euler_at_final;
    int karras;                  /* use_karras_sigmas */
    double sigma_min, sigma_max; /* karras' ends; 0: the schedule's */
    int final_sigma_min;         /* final_sigmas_type sigma_min: the last σ is σ_0, not 0 */
    int karras_round;            /* Karras timesteps rounded for the cosine betas too (UniPC's) */
    int final_karras_last;       /* with karras, final sigma_min is the ramp's last σ, σ_max at
                                    one step (UniPC's), not σ_0 */
    int64_t begin;               /* image to image: the first step run, first order as step 0 is */
};

struct tr_dpm_step {
    double t;                    /* the UNet's timestep */
    double sigma, sigma_next;
    double d_x, d_o;             /* d_i = d_x·x + d_o·o */
    double c_x, c_d, c_dprev;    /* x' = c_x·x + c_d·d_i + c_dprev·d_{i−1} (+ c_n·n) */
    double c_n;                  /* sde: the fresh noise n's scale, s_{i+1}·√(1 − e^{−2h}) */
};

/* s's steps into steps (room for s->steps); an error names what cannot be. */
int tr_dpm_plan(const struct tr_ddim *s, const struct tr_dpm_config *e, struct tr_dpm_step *steps,
                struct tr_error *err);

#endif
