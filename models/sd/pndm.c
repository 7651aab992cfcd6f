/* PNDM's PLMS steps (pndm.h). */
#include <math.h>
#include "pndm.h"

/* diffusers' _get_prev_sample(base, t, t_prev, o) = c_x·base + c_e·o. */
static void prev_coeffs(const struct tr_ddim *s, int64_t t, int64_t t_prev, double *c_x, double *c_e) {
    const double at = s->alphas_cumprod[t], ap = tr_ddim_alpha_prev(s, t_prev);
    const double k = (ap - at) / (at * sqrt(1.0 - ap) + sqrt(at * (1.0 - at) * ap));
    *c_x = sqrt(ap / at);
    *c_e = -k;
    if (s->c.prediction == TR_DDIM_V) { /* ε = √ᾱ_t·v + √(1−ᾱ_t)·base */
        *c_x -= k * sqrt(1.0 - at);
        *c_e = -k * sqrt(at);
    }
}

int64_t tr_pndm_timestep(const struct tr_ddim *s, int64_t i) { return s->timesteps[i < 2 ? i : i - 1]; }

int tr_pndm_plan(const struct tr_ddim *s, int64_t begin, struct tr_pndm_run *runs, int64_t *n,
                 struct tr_error *err) {
    if (s->c.prediction == TR_DDIM_SAMPLE)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "pndm: prediction_type sample is not PNDM's (epsilon or "
                            "v_prediction)");
    if (s->c.clip > 0)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "pndm: clip_sample is DDIM's; PNDM has no clamp");
    const int64_t S = s->steps, N = s->c.num_train_timesteps, r = s->ratio;
    *n = S == 1 ? 1 : S + 1;
    int ets[4], n_ets = 0;
    for (int64_t i = begin; i < *n; i++) {
        struct tr_pndm_run *u = &runs[i];
        *u = (struct tr_pndm_run){.t = tr_pndm_timestep(s, i)};
        int64_t t = u->t, t_prev = t - r;
        if (i == begin + 1) { /* diffusers' counter 1: the first step again, from its start, on the two outputs' mean */
            t = u->t + r, t_prev = u->t, u->from_start = 1;
            u->n = 2, u->idx[0] = (int)i, u->idx[1] = (int)begin, u->w[0] = u->w[1] = 0.5;
        } else {
            if (n_ets == 4) {
                for (int k = 0; k < 3; k++) ets[k] = ets[k + 1];
                n_ets = 3;
            }
            ets[n_ets++] = (int)i;
            static const double ab[4][4] = {{1}, {3.0 / 2, -1.0 / 2}, {23.0 / 12, -16.0 / 12, 5.0 / 12},
                                            {55.0 / 24, -59.0 / 24, 37.0 / 24, -9.0 / 24}};
            u->n = n_ets;
            for (int k = 0; k < n_ets; k++) u->idx[k] = ets[n_ets - 1 - k], u->w[k] = ab[n_ets - 1][k];
        }
        if (t >= N)
            return tr_error_set(err, TR_ERR_INVALID, "pndm: step %lld reaches timestep %lld, past num_train_timesteps "
                                "= %lld", (long long)i, (long long)t, (long long)N);
        prev_coeffs(s, t, t_prev, &u->c_x, &u->c_e);
    }
    return TR_OK;
}
