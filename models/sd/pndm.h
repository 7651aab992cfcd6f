/* PNDM as diffusers' PNDMScheduler runs it for Stable Diffusion (skip_prk_steps: the
 * pseudo linear multistep steps alone, "PLMS"), the scheduler of the SD v1.x pipelines'
 * own scheduler_config.json; on ddim.h's schedule (its betas, spacing and ᾱ).
 *
 * With D the schedule's timesteps (largest first, as ddim.h's) and r = N / steps (integer
 * division), the UNet runs steps + 1 times, at D0, D1, D1, D2, …, D(steps−1) (one run for
 * one step). Run i gives the model output e_i; the update is
 *   x_next = c_x · base + c_e · Σ_k w_k · e_(idx_k)
 * (diffusers' _get_prev_sample at (t, t_prev), linear in both; with v prediction the
 * output is turned into ε on base first). Run 0: base the latents, t = D0, t_prev = D0 − r,
 * the output e_0 alone. Run 1: base the latents run 0 started from, t = D1 + r, t_prev = D1,
 * (e_1 + e_0)/2. Run i ≥ 2: base the latest latents, t = its timestep, t_prev = t − r, the
 * Adams-Bashforth combination of e_i and up to three outputs before it from the list
 * [e_0, e_2, e_3, …] (e_1 never enters it): (3,−1)/2, (23,−16,5)/12, (55,−59,37,−9)/24.
 * Image to image from run b (diffusers' timesteps[t_start:] of that list of runs, its
 * counter from 0 there) is the same with the runs counted from b: run b as run 0 at its
 * timestep T_b, run b + 1 as run 1 (base run b's latents, t = T_(b+1) + r, t_prev =
 * T_(b+1)), the list of outputs from run b's. */
#ifndef TRIDENT_MODELS_PNDM_H
#define TRIDENT_MODELS_PNDM_H

#include <stdint.h>
#include "ddim.h"
#include "trident/status.h"

struct tr_pndm_run {
    int64_t t;             /* the UNet's timestep */
    int from_start;        /* 1: base is the latents run 0 started from (run 1) */
    double c_x, c_e;
    int n;                 /* outputs combined, the newest first */
    int idx[4];
    double w[4];
};

/* The steps + 1 runs (steps = 1: one) of s's schedule into runs (room for s->steps + 1),
 * those from run `begin` on filled (0: all); *n gets their count (begin's too). s's
 * prediction must be epsilon or v_prediction, and its clamp off; an error names what is
 * not. */
int tr_pndm_plan(const struct tr_ddim *s, int64_t begin, struct tr_pndm_run *runs, int64_t *n,
                 struct tr_error *err);

/* Run i's timestep (T_i above). */
int64_t tr_pndm_timestep(const struct tr_ddim *s, int64_t i);

#endif
