/* Euler as diffusers' EulerDiscreteScheduler runs it for Stable Diffusion (s_churn 0: the
 * deterministic step the pipelines take), on ddim.h's noise schedule (its betas and ᾱ; a
 * zero-SNR schedule's last ᾱ is 2^-24 there, not 0, as EulerDiscreteScheduler sets it).
 *
 * σ_t = √((1 − ᾱ_t)/ᾱ_t). The steps' timesteps are ddim.h's spacing in float (linspace
 * unrounded: linspace(0, N−1, steps)), σ at each by linear interpolation in t. With karras,
 * the σ of Karras et al. (ρ = 7) from the largest to the smallest of those (or sigma_max
 * and sigma_min where > 0), and each one's timestep by interpolation in log σ. The last σ
 * is 0, or σ_0 with final_sigma_min.
 *
 * The pipeline multiplies the initial noise by init_sigma (the largest σ for linspace and
 * trailing spacing, √(σ² + 1) of it for leading), feeds the UNet c_in·x (c_in = 1/√(σ² + 1))
 * at the step's timestep, and steps to σ' (the next σ) with the model's output o:
 *   x0 = x − σ·o (epsilon), −σ/√(σ²+1)·o + x/(σ²+1) (v_prediction), o (sample);
 *   x' = x + (σ' − σ)·(x − x0)/σ = c_x·x + c_o·o.
 * Ancestral (EulerAncestralDiscreteScheduler: no karras, no final σ_min, no sample
 * prediction) steps to σ_down instead and adds fresh noise n of scale σ_up:
 *   σ_up = √(σ'²(σ² − σ'²)/σ²), σ_down = √(σ'² − σ_up²),
 *   x' = x + (σ_down − σ)·(x − x0)/σ + σ_up·n = c_x·x + c_o·o + c_n·n.
 * Everything in double. */
#ifndef TRIDENT_MODELS_EULER_H
#define TRIDENT_MODELS_EULER_H

#include <stdint.h>
#include "ddim.h"
#include "trident/status.h"

struct tr_euler_config {
    int karras;                  /* use_karras_sigmas */
    double sigma_min, sigma_max; /* karras' ends; 0: the schedule's */
    int final_sigma_min;         /* final_sigmas_type sigma_min: the last σ is σ_0, not 0 */
    int ancestral;               /* EulerAncestralDiscreteScheduler's step */
    int64_t begin;               /* image to image: the first step run (lms.h counts its order from it) */
};

struct tr_euler_step {
    double t;                    /* the UNet's timestep (fractional where interpolated) */
    double sigma, sigma_next;
    double c_in, c_x, c_o;
    double c_n;                  /* ancestral: the fresh noise's scale σ_up (0 otherwise, and at the last step) */
};

/* s's steps (s->steps of them) into steps, and the initial noise's scale; s made with
 * terminal_floor where it is zero-SNR. An error names what cannot be. */
int tr_euler_plan(const struct tr_ddim *s, const struct tr_euler_config *e, struct tr_euler_step *steps,
                  double *init_sigma, struct tr_error *err);

#endif
