/* LMS as diffusers' LMSDiscreteScheduler runs it (order 4, the pipeline's default), on
 * euler.h's σ schedule (its timesteps, the Karras option, the last σ 0, the initial
 * noise's scale and c_in). Each step turns the model's output o into the derivative
 * d_i = (x − x0)/σ_i = p·x + q·o (sigma.h) and takes the linear multistep
 *   x' = x + Σ_{j<k} c_ij·d_{i−j},  k = min(i + 1, 4),
 *   c_ij = ∫_{σ_i}^{σ_{i+1}} Π_{m<k, m≠j} (τ − σ_{i−m})/(σ_{i−j} − σ_{i−m}) dτ,
 * integrated exactly (a polynomial of degree k − 1 at most; diffusers' quadrature is
 * exact to rounding there). Image to image (begin > 0) keeps those coefficients and sums
 * the derivatives since the first step run alone, min(k, i + 1 − begin) of them, as
 * diffusers' zip of the two lists does. Everything in double. */
#ifndef TRIDENT_MODELS_LMS_H
#define TRIDENT_MODELS_LMS_H

#include <stdint.h>
#include "ddim.h"
#include "euler.h"
#include "trident/status.h"

#define TR_LMS_ORDER 4

struct tr_lms_step {
    double t, sigma, c_in;
    double p, q;                 /* d_i = p·x + q·o */
    int k;                       /* how many derivatives the step combines */
    double c[TR_LMS_ORDER];      /* c[j] weighs d_{i−j} */
};

/* s's steps into steps (s->steps of them) and the initial noise's scale; karras, sigma_min
 * and sigma_max as euler.h's (LMS has no final σ_min). An error names what cannot be. */
int tr_lms_plan(const struct tr_ddim *s, const struct tr_euler_config *e, struct tr_lms_step *steps,
                double *init_sigma, struct tr_error *err);

#endif
