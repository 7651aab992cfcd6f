/* Euler's steps (euler.h). */
#include <math.h>
#include <stdlib.h>
#include "euler.h"
#include "sigma.h"

int tr_euler_plan(const struct tr_ddim *s, const struct tr_euler_config *e, struct tr_euler_step *steps,
                  double *init_sigma, struct tr_error *err) {
    const int64_t S = s->steps, N = s->c.num_train_timesteps;
    int rc = tr_sigma_check(s, e->ancestral ? "euler_ancestral" : "euler", err);
    if (rc) return rc;
    if (e->ancestral && (e->karras || e->final_sigma_min || s->c.prediction == TR_DDIM_SAMPLE))
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "euler_ancestral: %s is not provided (nor by diffusers' "
                            "EulerAncestralDiscreteScheduler)", e->karras ? "use_karras_sigmas = true"
                            : e->final_sigma_min ? "final_sigmas_type = sigma_min" : "prediction_type = sample");
    for (int64_t i = 0; i < S; i++) {
        double t = (double)s->timesteps[i];
        if (s->c.spacing == TR_DDIM_LINSPACE) /* linspace(0, N−1, steps), largest first, unrounded */
            t = S == 1 ? 0.0 : (double)(S - 1 - i) * (double)(N - 1) / (double)(S - 1);
        steps[i] = (struct tr_euler_step){.t = t, .sigma = tr_sigma_interp(s, t)};
    }
    if (e->karras) {
        const double hi = e->sigma_max > 0 ? e->sigma_max : steps[0].sigma;
        const double lo = e->sigma_min > 0 ? e->sigma_min : steps[S - 1].sigma;
        for (int64_t i = 0; i < S; i++) {
            steps[i].sigma = tr_sigma_karras(hi, lo, i, S);
            steps[i].t = tr_sigma_to_t(s, steps[i].sigma);
        }
    }
    double max_sigma = e->final_sigma_min ? tr_sigma_at(s, 0) : 0.0;
    for (int64_t i = 0; i < S; i++) {
        struct tr_euler_step *k = &steps[i];
        const double sg = k->sigma, q = sg * sg + 1.0;
        k->sigma_next = i + 1 < S ? steps[i + 1].sigma : e->final_sigma_min ? tr_sigma_at(s, 0) : 0.0;
        /* ancestral: down to σ_down, the rest of the way to σ' by fresh noise */
        const double up = e->ancestral ? sqrt(k->sigma_next * k->sigma_next * (sg * sg - k->sigma_next * k->sigma_next)
                                              / (sg * sg)) : 0.0;
        const double dt = (e->ancestral ? sqrt(fmax(0.0, k->sigma_next * k->sigma_next - up * up)) : k->sigma_next) - sg;
        k->c_n = up;
        k->c_in = 1.0 / sqrt(q);
        double p, d; /* x' = x + dt·(p·x + d·o) */
        tr_sigma_derivative(s->c.prediction, sg, &p, &d);
        k->c_x = 1.0 + dt * p, k->c_o = dt * d;
        max_sigma = fmax(max_sigma, sg);
    }
    *init_sigma = s->c.spacing == TR_DDIM_LEADING ? sqrt(max_sigma * max_sigma + 1.0) : max_sigma;
    return TR_OK;
}
