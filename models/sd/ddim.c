/* The DDIM scheduler (ddim.h). */
#include <math.h>
#include <stdlib.h>
#include "ddim.h"

/* ᾱ of the cosine schedule at t in [0, 1] (diffusers' betas_for_alpha_bar). */
static double cosine_alpha_bar(double t) {
    const double half_pi = 1.57079632679489661923;
    const double c = cos((t + 0.008) / 1.008 * half_pi);
    return c * c;
}

static void alphas_cumprod(const struct tr_ddim_config *c, double *ac) {
    const int64_t N = c->num_train_timesteps;
    double prod = 1.0;
    for (int64_t t = 0; t < N; t++) {
        double beta;
        if (c->betas == TR_DDIM_COSINE) {
            beta = fmin(1.0 - cosine_alpha_bar((double)(t + 1) / (double)N) / cosine_alpha_bar((double)t / (double)N),
                        0.999);
        } else if (c->betas == TR_DDIM_LINEAR) {
            beta = c->beta_start + (c->beta_end - c->beta_start) * (double)t / (double)(N - 1);
        } else {
            const double a = sqrt(c->beta_start), b = sqrt(c->beta_end), r = a + (b - a) * (double)t / (double)(N - 1);
            beta = r * r;
        }
        prod *= 1.0 - beta;
        ac[t] = prod;
    }
    if (!c->rescale_zero_snr) return;
    /* √ᾱ shifted so the last is 0 and scaled so the first is kept (Lin et al. 2023) */
    const double a0 = sqrt(ac[0]), aT = sqrt(ac[N - 1]);
    for (int64_t t = 0; t < N; t++) {
        const double s = (sqrt(ac[t]) - aT) * a0 / (a0 - aT);
        ac[t] = s * s;
    }
    if (c->terminal_floor) ac[N - 1] = 0x1p-24;
}

static int64_t timestep(const struct tr_ddim *s, int64_t i) {
    const int64_t N = s->c.num_train_timesteps, steps = s->steps;
    switch (s->c.spacing) {
    case TR_DDIM_TRAILING: /* numpy: round(arange(N, 0, -N/steps)) - 1, half to even */
        return (int64_t)nearbyint((double)N - (double)i * ((double)N / (double)steps)) - 1;
    case TR_DDIM_LINSPACE:
        return steps == 1 ? 0 : (int64_t)nearbyint((double)(steps - 1 - i) * (double)(N - 1) / (double)(steps - 1));
    default: return (steps - 1 - i) * s->ratio + s->c.steps_offset;
    }
}

int tr_ddim_init(struct tr_ddim *s, const struct tr_ddim_config *c, int64_t steps, struct tr_error *err) {
    *s = (struct tr_ddim){.c = *c, .steps = steps};
    const int64_t N = c->num_train_timesteps;
    if (N < 2)
        return tr_error_set(err, TR_ERR_INVALID, "num_train_timesteps = %lld, expected at least 2", (long long)N);
    if (steps < 1 || steps > N)
        return tr_error_set(err, TR_ERR_INVALID, "%lld inference steps, expected 1 to num_train_timesteps = %lld",
                            (long long)steps, (long long)N);
    if (c->betas != TR_DDIM_COSINE && !(c->beta_start > 0 && c->beta_start <= c->beta_end && c->beta_end < 1))
        return tr_error_set(err, TR_ERR_INVALID, "beta_start = %g, beta_end = %g: expected 0 < start <= end < 1",
                            c->beta_start, c->beta_end);
    if (!(c->clip >= 0 && c->clip < INFINITY))
        return tr_error_set(err, TR_ERR_INVALID, "clip_sample_range = %g, expected a positive number", c->clip);
    s->ratio = N / steps;
    if (c->spacing == TR_DDIM_LEADING && (c->steps_offset < 0 || (steps - 1) * s->ratio + c->steps_offset >= N))
        return tr_error_set(err, TR_ERR_INVALID, "steps_offset = %lld puts the first timestep past %lld",
                            (long long)c->steps_offset, (long long)(N - 1));
    s->alphas_cumprod = malloc(sizeof(double) * (size_t)N);
    s->timesteps = malloc(sizeof(int64_t) * (size_t)steps);
    if (!s->alphas_cumprod || !s->timesteps) {
        tr_ddim_free(s);
        return tr_error_set(err, TR_ERR_NOMEM, "no memory for %lld timesteps", (long long)N);
    }
    alphas_cumprod(c, s->alphas_cumprod);
    for (int64_t i = 0; i < steps; i++) {
        const int64_t t = s->timesteps[i] = timestep(s, i);
        /* the epsilon update divides by √ᾱ_t, which the zero-SNR schedule makes 0 at its end */
        if (c->prediction == TR_DDIM_EPSILON && !(s->alphas_cumprod[t] > 0)) {
            tr_ddim_free(s);
            return tr_error_set(err, TR_ERR_INVALID, "timestep %lld has alpha_cumprod 0 (rescale_betas_zero_snr), "
                                "which prediction_type epsilon divides by: expected v_prediction", (long long)t);
        }
    }
    return TR_OK;
}

void tr_ddim_free(struct tr_ddim *s) {
    free(s->alphas_cumprod);
    free(s->timesteps);
    s->alphas_cumprod = NULL;
    s->timesteps = NULL;
}

double tr_ddim_alpha_prev(const struct tr_ddim *s, int64_t t_prev) {
    return t_prev >= 0 ? s->alphas_cumprod[t_prev] : s->c.set_alpha_to_one ? 1.0 : s->alphas_cumprod[0];
}

void tr_ddim_step(const struct tr_ddim *s, int64_t i, int64_t *t, struct tr_ddim_coeffs *k) {
    const int64_t ti = s->timesteps[i];
    const double at = s->alphas_cumprod[ti], ap = tr_ddim_alpha_prev(s, ti - s->ratio);
    const double ra = sqrt(at), rb = sqrt(1.0 - at);
    *t = ti;
    switch (s->c.prediction) {
    case TR_DDIM_V: *k = (struct tr_ddim_coeffs){.x0_x = ra, .x0_o = -rb, .e_x = rb, .e_o = ra}; break;
    case TR_DDIM_SAMPLE: *k = (struct tr_ddim_coeffs){.x0_x = 0, .x0_o = 1, .e_x = 1 / rb, .e_o = -ra / rb}; break;
    default: *k = (struct tr_ddim_coeffs){.x0_x = 1 / ra, .x0_o = -rb / ra, .e_x = 0, .e_o = 1}; break;
    }
    if (s->c.ddpm) { /* x0's coefficients as above; the posterior's mean from x0 and x itself */
        const double apn = i + 1 < s->steps ? s->alphas_cumprod[s->timesteps[i + 1]] : 1.0, beta = 1.0 - at / apn;
        k->e_x = 1, k->e_o = 0;
        k->p_x0 = sqrt(apn) * beta / (1.0 - at);
        k->p_e = sqrt(1.0 - beta) * (1.0 - apn) / (1.0 - at);
        k->p_n = ti == 0 ? 0.0 : s->c.ddpm == 2 ? sqrt(beta) : sqrt(fmax((1.0 - apn) / (1.0 - at) * beta, 1e-20));
        k->c_x = k->p_x0 * k->x0_x + k->p_e * k->e_x;
        k->c_o = k->p_x0 * k->x0_o + k->p_e * k->e_o;
        return;
    }
    /* DDIMScheduler._get_variance: 1 − ᾱ_t is 1 − 0 at a zero-SNR schedule's end, never 0 */
    const double var = s->c.eta > 0 ? (1.0 - ap) / (1.0 - at) * (1.0 - at / ap) : 0.0;
    k->p_n = s->c.eta * sqrt(fmax(var, 0.0));
    k->p_x0 = sqrt(ap);
    k->p_e = sqrt(fmax(1.0 - ap - k->p_n * k->p_n, 0.0));
    k->c_x = k->p_x0 * k->x0_x + k->p_e * k->e_x;
    k->c_o = k->p_x0 * k->x0_o + k->p_e * k->e_o;
}
