/* Euler's steps (euler.h). */
#include <math.h>
#include <stdlib.h>
#include "euler.h"

static double sigma_at(const struct tr_ddim *s, int64_t t) {
    const double a = s->alphas_cumprod[t];
    return sqrt((1.0 - a) / a);
}

/* numpy's interp(t, arange(N), σ): linear between the two timesteps around t. */
static double sigma_interp(const struct tr_ddim *s, double t) {
    const int64_t N = s->c.num_train_timesteps;
    if (t <= 0) return sigma_at(s, 0);
    if (t >= (double)(N - 1)) return sigma_at(s, N - 1);
    const int64_t lo = (int64_t)floor(t);
    const double w = t - (double)lo;
    return (1.0 - w) * sigma_at(s, lo) + w * sigma_at(s, lo + 1);
}

/* diffusers' _sigma_to_t: the timestep of σ by linear interpolation in log σ between the
 * training timesteps around it (log σ rises with t). */
static double sigma_to_t(const struct tr_ddim *s, double sigma) {
    const int64_t N = s->c.num_train_timesteps;
    const double ls = log(fmax(sigma, 1e-10));
    int64_t lo = 0;
    for (int64_t t = 0; t < N; t++)
        if (ls >= log(sigma_at(s, t))) lo = t;
    if (lo > N - 2) lo = N - 2;
    const double low = log(sigma_at(s, lo)), high = log(sigma_at(s, lo + 1));
    const double w = fmin(fmax((low - ls) / (low - high), 0.0), 1.0);
    return (1.0 - w) * (double)lo + w * (double)(lo + 1);
}

int tr_euler_plan(const struct tr_ddim *s, const struct tr_euler_config *e, struct tr_euler_step *steps,
                  double *init_sigma, struct tr_error *err) {
    const int64_t S = s->steps, N = s->c.num_train_timesteps;
    for (int64_t t = 0; t < N; t++)
        if (!(s->alphas_cumprod[t] > 0))
            return tr_error_set(err, TR_ERR_INVALID, "euler: timestep %lld has alpha_cumprod 0, an infinite sigma",
                                (long long)t);
    for (int64_t i = 0; i < S; i++) {
        double t = (double)s->timesteps[i];
        if (s->c.spacing == TR_DDIM_LINSPACE) /* linspace(0, N−1, steps), largest first, unrounded */
            t = S == 1 ? 0.0 : (double)(S - 1 - i) * (double)(N - 1) / (double)(S - 1);
        steps[i] = (struct tr_euler_step){.t = t, .sigma = sigma_interp(s, t)};
    }
    if (e->karras) {
        const double hi = e->sigma_max > 0 ? e->sigma_max : steps[0].sigma;
        const double lo = e->sigma_min > 0 ? e->sigma_min : steps[S - 1].sigma;
        const double rho = 7.0, a = pow(hi, 1.0 / rho), b = pow(lo, 1.0 / rho);
        for (int64_t i = 0; i < S; i++) {
            const double ramp = S == 1 ? 0.0 : (double)i / (double)(S - 1);
            steps[i].sigma = pow(a + ramp * (b - a), rho);
            steps[i].t = sigma_to_t(s, steps[i].sigma);
        }
    }
    double max_sigma = e->final_sigma_min ? sigma_at(s, 0) : 0.0;
    for (int64_t i = 0; i < S; i++) {
        struct tr_euler_step *k = &steps[i];
        const double sg = k->sigma, q = sg * sg + 1.0;
        k->sigma_next = i + 1 < S ? steps[i + 1].sigma : e->final_sigma_min ? sigma_at(s, 0) : 0.0;
        const double dt = k->sigma_next - sg;
        k->c_in = 1.0 / sqrt(q);
        switch (s->c.prediction) { /* x' = x + dt·(x − x0)/σ with x0 = x0_x·x + x0_o·o */
        case TR_DDIM_V: k->c_x = 1.0 + dt * sg / q, k->c_o = dt / sqrt(q); break;
        case TR_DDIM_SAMPLE: k->c_x = 1.0 + dt / sg, k->c_o = -dt / sg; break;
        default: k->c_x = 1.0, k->c_o = dt; break;
        }
        max_sigma = fmax(max_sigma, sg);
    }
    *init_sigma = s->c.spacing == TR_DDIM_LEADING ? sqrt(max_sigma * max_sigma + 1.0) : max_sigma;
    return TR_OK;
}
