/* The σ schedule's helpers (sigma.h). */
#include <math.h>
#include "sigma.h"

int tr_sigma_check(const struct tr_ddim *s, const char *who, struct tr_error *err) {
    for (int64_t t = 0; t < s->c.num_train_timesteps; t++)
        if (!(s->alphas_cumprod[t] > 0))
            return tr_error_set(err, TR_ERR_INVALID, "%s: timestep %lld has alpha_cumprod 0, an infinite sigma", who,
                                (long long)t);
    return TR_OK;
}

double tr_sigma_at(const struct tr_ddim *s, int64_t t) {
    const double a = s->alphas_cumprod[t];
    return sqrt((1.0 - a) / a);
}

double tr_sigma_interp(const struct tr_ddim *s, double t) {
    const int64_t N = s->c.num_train_timesteps;
    if (t <= 0) return tr_sigma_at(s, 0);
    if (t >= (double)(N - 1)) return tr_sigma_at(s, N - 1);
    const int64_t lo = (int64_t)floor(t);
    const double w = t - (double)lo;
    return (1.0 - w) * tr_sigma_at(s, lo) + w * tr_sigma_at(s, lo + 1);
}

/* log σ rises with t: the last training timestep at or below σ, and the weight to the next */
double tr_sigma_to_t(const struct tr_ddim *s, double sigma) {
    const int64_t N = s->c.num_train_timesteps;
    const double ls = log(fmax(sigma, 1e-10));
    int64_t lo = 0;
    for (int64_t t = 0; t < N; t++)
        if (ls >= log(tr_sigma_at(s, t))) lo = t;
    if (lo > N - 2) lo = N - 2;
    const double low = log(tr_sigma_at(s, lo)), high = log(tr_sigma_at(s, lo + 1));
    const double w = fmin(fmax((low - ls) / (low - high), 0.0), 1.0);
    return (1.0 - w) * (double)lo + w * (double)(lo + 1);
}

void tr_sigma_derivative(enum tr_ddim_prediction pred, double sigma, double *p, double *q) {
    const double k = sigma * sigma + 1.0;
    switch (pred) {
    case TR_DDIM_V: *p = sigma / k, *q = 1.0 / sqrt(k); break;
    case TR_DDIM_SAMPLE: *p = 1.0 / sigma, *q = -1.0 / sigma; break;
    default: *p = 0, *q = 1; break; /* x0 = x − σ·o */
    }
}

double tr_sigma_karras(double hi, double lo, int64_t i, int64_t n) {
    const double rho = 7.0, a = pow(hi, 1.0 / rho), b = pow(lo, 1.0 / rho);
    const double ramp = n == 1 ? 0.0 : (double)i / (double)(n - 1);
    return pow(a + ramp * (b - a), rho);
}
