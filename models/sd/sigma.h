/* What the σ-parameterised schedulers (euler.h, dpm.h) share, on ddim.h's ᾱ: σ_t =
 * √((1 − ᾱ_t)/ᾱ_t), its linear interpolation in t (numpy's interp), the timestep of a σ by
 * interpolation in log σ (diffusers' _sigma_to_t) and Karras et al.'s σ (ρ = 7). */
#ifndef TRIDENT_MODELS_SIGMA_H
#define TRIDENT_MODELS_SIGMA_H

#include <stdint.h>
#include "ddim.h"
#include "trident/status.h"

/* Every ᾱ above 0 (σ finite), else an error naming the timestep and `who`. */
int tr_sigma_check(const struct tr_ddim *s, const char *who, struct tr_error *err);
double tr_sigma_at(const struct tr_ddim *s, int64_t t);
double tr_sigma_interp(const struct tr_ddim *s, double t);
double tr_sigma_to_t(const struct tr_ddim *s, double sigma);
/* The ODE derivative (x − x0)/σ of Euler and Heun at σ, with x0 from the model's output o
 * as the prediction type reads it (euler.h), as p·x + q·o. */
void tr_sigma_derivative(enum tr_ddim_prediction pred, double sigma, double *p, double *q);
/* Step i of n from hi down to lo: (hi^(1/ρ) + i/(n−1)·(lo^(1/ρ) − hi^(1/ρ)))^ρ. */
double tr_sigma_karras(double hi, double lo, int64_t i, int64_t n);

#endif
