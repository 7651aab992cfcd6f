/* Heun as diffusers' HeunDiscreteScheduler runs it (gamma 0): Euler's schedule (euler.h:
 * its timesteps, σ, Karras option, initial σ; the last σ 0), each step but the last taken
 * twice, so 2·steps − 1 UNet runs at the timesteps t0, t1, t1, t2, t2, … and σ0, σ1, σ1, ….
 *
 * Run 2i is Euler's step from σ_i to σ_(i+1) (σ_steps = 0): the input x kept as x_i, the
 * derivative d1 = (x − x0)/σ_i kept, x' = x + (σ_(i+1) − σ_i)·d1. Run 2i+1 (the same step's
 * second, on x' at σ_(i+1)): d2 = (x' − x0)/σ_(i+1), and x = x_i + (σ_(i+1) − σ_i)·(d1 + d2)/2.
 * Each run feeds the UNet c_in·x, c_in = 1/√(σ² + 1) at its own σ, and takes x0 with that σ:
 * x − σ·o (epsilon; then d = o), −σ/√(σ²+1)·o + x/(σ²+1) (v), o (sample). */
#ifndef TRIDENT_MODELS_HEUN_H
#define TRIDENT_MODELS_HEUN_H

#include <stdint.h>
#include "euler.h"

struct tr_heun_run {
    double t, c_in;
    int second;                  /* 1: the step's second run (Heun's correction) */
    double p, q;                 /* its derivative d = p·x + q·o */
    double dt;                   /* σ_(i+1) − σ_i of its step */
    double sigma_to;             /* σ_(i+1): where the latents are after the run */
};

/* s's 2·steps − 1 runs into runs (room for 2·s->steps), *n their count, and the initial
 * noise's scale; e as Euler's (its final σ is always 0 here). */
int tr_heun_plan(const struct tr_ddim *s, const struct tr_euler_config *e, struct tr_heun_run *runs, int64_t *n,
                 double *init_sigma, struct tr_error *err);

#endif
