/* The DDIM scheduler (diffusers' DDIMScheduler; eta 0 by default, the deterministic update
 * keras-cv's StableDiffusion also runs), on a diffusion model's noise schedule.
 *
 * betas: "scaled_linear" linspace(√beta_start, √beta_end, N)² (Stable Diffusion's),
 * "linear" linspace(beta_start, beta_end, N), or "squaredcos_cap_v2" (the cosine
 * schedule, each beta at most 0.999); rescale_zero_snr shifts and scales √ᾱ so the last
 * one is 0 (diffusers' rescale_betas_zero_snr). ᾱ_t = Π_{s<=t} (1 − β_s).
 * Timesteps (spacing, as diffusers' timestep_spacing): "leading" i·(N/steps) +
 * steps_offset (integer division), "trailing" round(N − i·N/steps) − 1, "linspace"
 * round(i·(N−1)/(steps−1)), for i = steps−1 … 0 (leading, linspace) or 0 … steps−1
 * (trailing), the largest first.
 * The update at timestep t, from the model's output o, with ᾱ_prev = ᾱ_{t − N/steps} (or,
 * below 0, 1 or ᾱ_0 as set_alpha_to_one says):
 *   x0  = x0_x·x + x0_o·o    (epsilon: (x − √(1−ᾱ_t)·o)/√ᾱ_t; v_prediction: √ᾱ_t·x −
 *                             √(1−ᾱ_t)·o; sample: o), clamped to [−clip, clip] if clip > 0
 *   ε   = e_x·x + e_o·o
 *   x_prev = √ᾱ_prev·x0 + √(1−ᾱ_prev−σ²)·ε + σ·n
 * which without the clamp is c_x·x + c_o·o + σ·n (tr_ddim_step), where with eta > 0 (the
 * pipeline's argument) σ = eta·√((1−ᾱ_prev)/(1−ᾱ_t)·(1−ᾱ_t/ᾱ_prev)) and n is fresh noise
 * (σ = 0 at eta 0). DDPM (DDPMScheduler) lands on the next timestep of the list (ᾱ_prev 1
 * after the last) with the posterior's mean and fresh noise, β = 1 − ᾱ_t/ᾱ_prev:
 *   x_prev = √ᾱ_prev·β/(1−ᾱ_t)·x0 + √(1−β)·(1−ᾱ_prev)/(1−ᾱ_t)·x + σ·n,
 *   σ² = max((1−ᾱ_prev)/(1−ᾱ_t)·β, 1e-20) (fixed_small) or β (fixed_large), 0 at t = 0.
 * Everything in double. */
#ifndef TRIDENT_MODELS_DDIM_H
#define TRIDENT_MODELS_DDIM_H

#include <stdint.h>
#include "trident/status.h"

enum tr_ddim_betas { TR_DDIM_SCALED_LINEAR, TR_DDIM_LINEAR, TR_DDIM_COSINE };
enum tr_ddim_spacing { TR_DDIM_LEADING, TR_DDIM_TRAILING, TR_DDIM_LINSPACE };
enum tr_ddim_prediction { TR_DDIM_EPSILON, TR_DDIM_V, TR_DDIM_SAMPLE };

/* A scheduler_config.json's values (Stable Diffusion v1's: 1000, 0.00085, 0.012, 1, 0,
 * scaled_linear, leading, epsilon, no rescale, no clip). */
struct tr_ddim_config {
    int64_t num_train_timesteps;
    double beta_start, beta_end;
    int64_t steps_offset;
    int set_alpha_to_one;
    enum tr_ddim_betas betas;
    enum tr_ddim_spacing spacing;
    enum tr_ddim_prediction prediction;
    int rescale_zero_snr;
    double clip;                   /* clip_sample_range where clip_sample is set, else 0 */
    int terminal_floor;            /* the zero-SNR schedule's last ᾱ 2^-24, not 0 (Euler's, so
                                      its first σ is finite) */
    double eta;                    /* the noise's weight, 0 to 1 (0: deterministic) */
    int ddpm;                      /* DDPMScheduler's ancestral step instead (below): 1 with the
                                      fixed_small variance, 2 fixed_large */
};

struct tr_ddim {
    struct tr_ddim_config c;
    int64_t steps, ratio;
    double *alphas_cumprod;        /* num_train_timesteps */
    int64_t *timesteps;            /* steps, the first one run first (largest) */
};

/* One step's coefficients (above). */
struct tr_ddim_coeffs {
    double x0_x, x0_o, e_x, e_o;   /* the predicted x0 and ε from x and the model's output */
    double p_x0, p_e;              /* x_prev from x0 and ε: √ᾱ_prev, √(1−ᾱ_prev) */
    double c_x, c_o;               /* x_prev from x and o where nothing is clamped */
    double p_n;                    /* the fresh noise's scale σ (0 at eta 0) */
};

/* The schedule for `steps` denoising steps; an error names the value that cannot be. */
int tr_ddim_init(struct tr_ddim *s, const struct tr_ddim_config *c, int64_t steps, struct tr_error *err);
void tr_ddim_free(struct tr_ddim *s);
/* ᾱ at t_prev, the timestep a step lands on: below 0, 1 or ᾱ_0 as set_alpha_to_one says. */
double tr_ddim_alpha_prev(const struct tr_ddim *s, int64_t t_prev);
/* Step i's (0 .. steps−1) timestep and update coefficients. */
void tr_ddim_step(const struct tr_ddim *s, int64_t i, int64_t *t, struct tr_ddim_coeffs *k);

#endif
