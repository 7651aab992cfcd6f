/* The DDIM scheduler (diffusers' DDIMScheduler, eta 0: the deterministic update keras-cv's
 * StableDiffusion also runs), on Stable Diffusion's noise schedule.
 *
 * betas = linspace(√beta_start, √beta_end, num_train_timesteps)² ("scaled_linear"),
 * ᾱ_t = Π_{s<=t} (1 − β_s). With r = num_train_timesteps / steps (integer division), the
 * timesteps are i·r + steps_offset for i = steps−1 … 0 (diffusers' "leading" spacing);
 * the update at timestep t, from the noise prediction ε and with ᾱ_prev = ᾱ_{t−r} (or,
 * below 0, ᾱ_0 or 1 as set_alpha_to_one says):
 *   x0 = (x − √(1−ᾱ_t)·ε) / √ᾱ_t,   x_prev = √ᾱ_prev·x0 + √(1−ᾱ_prev)·ε
 *      = c_x·x + c_eps·ε,  c_x = √(ᾱ_prev/ᾱ_t),  c_eps = √(1−ᾱ_prev) − √(ᾱ_prev(1−ᾱ_t)/ᾱ_t).
 * Everything in double. */
#ifndef TRIDENT_MODELS_DDIM_H
#define TRIDENT_MODELS_DDIM_H

#include <stdint.h>
#include "trident/status.h"

/* Stable Diffusion v1's scheduler_config.json values. */
struct tr_ddim_config {
    int64_t num_train_timesteps;   /* 1000 */
    double beta_start, beta_end;   /* 0.00085, 0.012 */
    int64_t steps_offset;          /* 1 */
    int set_alpha_to_one;          /* 0 */
};

struct tr_ddim {
    struct tr_ddim_config c;
    int64_t steps, ratio;
    double *alphas_cumprod;        /* num_train_timesteps */
    int64_t *timesteps;            /* steps, the first one run first (largest) */
};

/* The schedule for `steps` denoising steps; an error names the value that cannot be. */
int tr_ddim_init(struct tr_ddim *s, const struct tr_ddim_config *c, int64_t steps, struct tr_error *err);
void tr_ddim_free(struct tr_ddim *s);
/* Step i's (0 .. steps−1) timestep and update coefficients. */
void tr_ddim_step(const struct tr_ddim *s, int64_t i, int64_t *t, double *c_x, double *c_eps);

#endif
