/* DPM-Solver++'s multistep steps (dpm.h). */
#include <math.h>
#include <stdlib.h>
#include "dpm.h"
#include "sigma.h"

/* dpm.h's timesteps, largest first. */
static double timestep(const struct tr_ddim *s, int64_t i) {
    const int64_t N = s->c.num_train_timesteps, S = s->steps;
    switch (s->c.spacing) {
    case TR_DDIM_LINSPACE: return nearbyint((double)(S - i) * (double)(N - 1) / (double)S);
    case TR_DDIM_LEADING: return (double)((S - i) * (N / (S + 1)) + s->c.steps_offset);
    default: return (double)s->timesteps[i];
    }
}

int tr_dpm_plan(const struct tr_ddim *s, const struct tr_dpm_config *e, struct tr_dpm_step *steps,
                struct tr_error *err) {
    const int64_t S = s->steps, N = s->c.num_train_timesteps;
    int rc = tr_sigma_check(s, "dpm", err);
    if (rc) return rc;
    if (e->order != 1 && e->order != 2)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "dpm: solver_order = %d: 1 or 2 is provided", e->order);
    for (int64_t i = 0; i < S; i++) {
        const double t = timestep(s, i);
        if (!(t >= 0 && t <= (double)(N - 1)))
            return tr_error_set(err, TR_ERR_INVALID, "dpm: step %lld reaches timestep %g, outside 0 .. %lld",
                                (long long)i, t, (long long)(N - 1));
        steps[i] = (struct tr_dpm_step){.t = t, .sigma = tr_sigma_interp(s, t)};
    }
    if (e->karras) {
        const double hi = e->sigma_max > 0 ? e->sigma_max : tr_sigma_at(s, N - 1);
        const double lo = e->sigma_min > 0 ? e->sigma_min : tr_sigma_at(s, 0);
        for (int64_t i = 0; i < S; i++) {
            steps[i].sigma = tr_sigma_karras(hi, lo, i, S);
            /* rounded, but for the cosine betas; then diffusers keeps them as int64 */
            const double t = tr_sigma_to_t(s, steps[i].sigma);
            steps[i].t = s->c.betas != TR_DDIM_COSINE || e->karras_round ? nearbyint(t) : trunc(t);
        }
    }
    const double last = !e->final_sigma_min ? 0.0 : e->karras && e->final_karras_last ? steps[S - 1].sigma
                                                                                      : tr_sigma_at(s, 0);
    for (int64_t i = 0; i < S; i++) {
        struct tr_dpm_step *k = &steps[i];
        k->sigma_next = i + 1 < S ? steps[i + 1].sigma : last;
        const double a = 1.0 / sqrt(k->sigma * k->sigma + 1.0), sg = k->sigma * a;
        switch (s->c.prediction) {
        case TR_DDIM_V: k->d_x = a, k->d_o = -sg; break;
        case TR_DDIM_SAMPLE: k->d_x = 0, k->d_o = 1; break;
        default: k->d_x = 1.0 / a, k->d_o = -sg / a; break;
        }
        if (k->sigma_next == 0) { /* λ' = ∞: x' is the data prediction */
            k->c_x = 0, k->c_d = 1, k->c_dprev = 0;
            continue;
        }
        const double an = 1.0 / sqrt(k->sigma_next * k->sigma_next + 1.0), sn = k->sigma_next * an;
        const double lam = log(a) - log(sg), lam_n = log(an) - log(sn), h = lam_n - lam, E = an * (exp(-h) - 1.0);
        k->c_x = sn / sg, k->c_d = -E, k->c_dprev = 0;
        const double e2 = 1.0 - exp(-2.0 * h); /* sde: the part of the step the fresh noise takes */
        if (e->sde) k->c_x = sn / sg * exp(-h), k->c_d = an * e2, k->c_n = sn * sqrt(e2);
        const int first = e->order == 1 || i <= e->begin ||
                          (i == S - 1 && (e->euler_at_final || (e->lower_order_final && S < 15) || last == 0));
        if (first) continue;
        const double ap = 1.0 / sqrt(steps[i - 1].sigma * steps[i - 1].sigma + 1.0), sp = steps[i - 1].sigma * ap;
        const double r = (lam - (log(ap) - log(sp))) / h; /* D1 = (d_i − d_{i−1}) / r */
        const double w = e->sde ? (e->heun ? an * (e2 / (-2.0 * h) + 1.0) : 0.5 * an * e2)
                         : e->heun ? an * ((exp(-h) - 1.0) / h + 1.0) : -0.5 * E;
        k->c_d += w / r, k->c_dprev = -w / r;
    }
    return TR_OK;
}
