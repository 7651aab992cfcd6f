/* The DDIM scheduler (ddim.h). */
#include <math.h>
#include <stdlib.h>
#include "ddim.h"

int tr_ddim_init(struct tr_ddim *s, const struct tr_ddim_config *c, int64_t steps, struct tr_error *err) {
    *s = (struct tr_ddim){.c = *c, .steps = steps};
    const int64_t N = c->num_train_timesteps;
    if (N < 2)
        return tr_error_set(err, TR_ERR_INVALID, "ddim: num_train_timesteps = %lld, expected at least 2", (long long)N);
    if (steps < 1 || steps > N)
        return tr_error_set(err, TR_ERR_INVALID, "ddim: %lld inference steps, expected 1 to num_train_timesteps = %lld",
                            (long long)steps, (long long)N);
    if (!(c->beta_start > 0 && c->beta_start <= c->beta_end && c->beta_end < 1))
        return tr_error_set(err, TR_ERR_INVALID, "ddim: beta_start = %g, beta_end = %g: expected 0 < start <= end < 1",
                            c->beta_start, c->beta_end);
    s->ratio = N / steps;
    if (c->steps_offset < 0 || (steps - 1) * s->ratio + c->steps_offset >= N)
        return tr_error_set(err, TR_ERR_INVALID, "ddim: steps_offset = %lld puts the first timestep past %lld",
                            (long long)c->steps_offset, (long long)(N - 1));
    s->alphas_cumprod = malloc(sizeof(double) * (size_t)N);
    s->timesteps = malloc(sizeof(int64_t) * (size_t)steps);
    if (!s->alphas_cumprod || !s->timesteps) {
        tr_ddim_free(s);
        return tr_error_set(err, TR_ERR_NOMEM, "ddim: no memory for %lld timesteps", (long long)N);
    }
    const double a = sqrt(c->beta_start), b = sqrt(c->beta_end);
    double prod = 1.0;
    for (int64_t t = 0; t < N; t++) {
        const double r = a + (b - a) * (double)t / (double)(N - 1);
        prod *= 1.0 - r * r;
        s->alphas_cumprod[t] = prod;
    }
    for (int64_t i = 0; i < steps; i++) s->timesteps[i] = (steps - 1 - i) * s->ratio + c->steps_offset;
    return TR_OK;
}

void tr_ddim_free(struct tr_ddim *s) {
    free(s->alphas_cumprod);
    free(s->timesteps);
    s->alphas_cumprod = NULL;
    s->timesteps = NULL;
}

void tr_ddim_step(const struct tr_ddim *s, int64_t i, int64_t *t, double *c_x, double *c_eps) {
    const int64_t ti = s->timesteps[i], prev = ti - s->ratio;
    const double at = s->alphas_cumprod[ti];
    const double ap = prev >= 0 ? s->alphas_cumprod[prev] : s->c.set_alpha_to_one ? 1.0 : s->alphas_cumprod[0];
    *t = ti;
    *c_x = sqrt(ap / at);
    *c_eps = sqrt(1.0 - ap) - sqrt(ap * (1.0 - at) / at);
}
