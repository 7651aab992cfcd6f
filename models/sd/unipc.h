/* UniPC as diffusers' UniPCMultistepScheduler runs it (predict_x0, B(h) of bh1 or bh2,
 * solver_order 1 to 3), on dpm.h's schedule: its timesteps and σ (Karras ones rounded for
 * every beta schedule, as UniPC rounds them), the last σ 0 or σ_0.
 *
 * With α = 1/√(σ²+1), s = σ·α, λ = log α − log s, step i turns the model's output o into
 * the data prediction d_i as dpm.h does (from x_i as the UNet saw it), then
 *   corrector (UniC; not at the first step run, nor after a step disable_corrector names)
 *   of the order q the step before predicted with, from L, the sample that step's
 *   predictor started from:
 *     x_i ← (s_i/s_{i−1})·L − α_i·φ·d_{i−1} − α_i·B·(Σ_{k<q−1} ρ_k·D_k + ρ_{q−1}·(d_i − d_{i−1}))
 *   predictor (UniP) of order p_i = min(solver_order, runs so far counting this one, and
 *   with lower_order_final the steps left), from x_i (the next step's L):
 *     x_{i+1} = (s_{i+1}/s_i)·x_i − α_{i+1}·φ·d_i − α_{i+1}·B·Σ_{k<p_i−1} ρ'_k·D'_k
 * where, over the update's start s and end t: h = λ_t − λ_s, φ = e^{−h} − 1, B = −h (bh1)
 * or φ (bh2), r_k = (λ_{s−k} − λ_s)/h and D_k = (d_{s−k} − d_s)/r_k for the outputs before
 * s (k ≥ 1), the ρ solving R·ρ = b with R_jk = r_k^j (the last r 1) and b_j from the φ_j
 * of −h: the corrector's q×q, the predictor's leading (p−1)×(p−1) (order 2: ρ' = 1/2).
 * Where σ_{i+1} is 0, x_{i+1} = d_i (order 1 there: with a higher order diffusers' r_k are
 * 0 and its step NaN, so the plan refuses it; with bh1 its ∞·0 is NaN too, in a term that
 * is 0 here). Everything in double. */
#ifndef TRIDENT_MODELS_UNIPC_H
#define TRIDENT_MODELS_UNIPC_H

#include <stdint.h>
#include "ddim.h"
#include "dpm.h"
#include "trident/status.h"

#define TR_UNIPC_MAX_ORDER 3

struct tr_unipc_config {
    int order;                     /* solver_order: 1 to TR_UNIPC_MAX_ORDER */
    int bh1;                       /* solver_type bh1 (B = −h), else bh2 (B = e^{−h} − 1) */
    int lower_order_final;         /* the predictor's order at most the steps left */
    int karras;                    /* use_karras_sigmas */
    double sigma_min, sigma_max;   /* karras' ends; 0: the schedule's */
    int final_sigma_min;           /* final_sigmas_type sigma_min: the last σ is σ_0, not 0 */
    const char *disable_corrector; /* "i,j,..": no corrector after those steps ("" none) */
    int64_t begin;                 /* image to image: the first step run (orders count from it) */
};

struct tr_unipc_step {
    double t;                             /* the UNet's timestep */
    double sigma, sigma_next;
    double d_x, d_o;                      /* d_i = d_x·x + d_o·o */
    int corrected;                        /* the corrector runs first: */
    double k_last;                        /*   x_i ← k_last·L + Σ_j k_d[j]·d_{i−j} */
    double k_d[TR_UNIPC_MAX_ORDER + 1];
    int order;                            /* the predictor's: */
    double p_x;                           /*   x_{i+1} = p_x·x_i + Σ_{j<order} p_d[j]·d_{i−j} */
    double p_d[TR_UNIPC_MAX_ORDER];
};

/* s's steps into steps (room for s->steps); an error names what cannot be. */
int tr_unipc_plan(const struct tr_ddim *s, const struct tr_unipc_config *e, struct tr_unipc_step *steps,
                  struct tr_error *err);

#endif
