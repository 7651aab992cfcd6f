/* LMS's steps (lms.h). */
#include <stdlib.h>
#include "lms.h"
#include "sigma.h"

/* ∫_a^b Π_{m<k, m≠j} (τ − x_m)/(x_j − x_m) dτ by 4-point Gauss-Legendre: exact for the
 * degree 3 at most that order 4 gives. */
static double lagrange_integral(const double *x, int k, int j, double a, double b) {
    static const double node[4] = {-0.8611363115940526, -0.3399810435848563, 0.3399810435848563, 0.8611363115940526},
                        weight[4] = {0.3478548451374538, 0.6521451548625461, 0.6521451548625461, 0.3478548451374538};
    double sum = 0;
    for (int n = 0; n < 4; n++) {
        const double tau = 0.5 * (a + b) + 0.5 * (b - a) * node[n];
        double prod = 1;
        for (int m = 0; m < k; m++)
            if (m != j) prod *= (tau - x[m]) / (x[j] - x[m]);
        sum += weight[n] * prod;
    }
    return 0.5 * (b - a) * sum;
}

int tr_lms_plan(const struct tr_ddim *s, const struct tr_euler_config *e, struct tr_lms_step *steps,
                double *init_sigma, struct tr_error *err) {
    const int64_t S = s->steps;
    struct tr_euler_step *es = malloc(sizeof *es * (size_t)S);
    if (!es) return tr_error_set(err, TR_ERR_NOMEM, "lms: no memory for %lld steps", (long long)S);
    struct tr_euler_config ec = *e;
    /* LMSDiscreteScheduler's Karras ramp runs between the schedule's own ends: it has no
     * sigma_min or sigma_max (a file's are not read, as diffusers does not) */
    ec.final_sigma_min = 0, ec.ancestral = 0, ec.sigma_min = ec.sigma_max = 0;
    int rc = tr_euler_plan(s, &ec, es, init_sigma, err);
    for (int64_t i = 0; i < S && !rc; i++) {
        struct tr_lms_step *k = &steps[i];
        *k = (struct tr_lms_step){.t = es[i].t, .sigma = es[i].sigma, .c_in = es[i].c_in};
        tr_sigma_derivative(s->c.prediction, k->sigma, &k->p, &k->q);
        k->k = i + 1 < TR_LMS_ORDER ? (int)i + 1 : TR_LMS_ORDER;
        double x[TR_LMS_ORDER];
        for (int m = 0; m < k->k; m++) x[m] = es[i - m].sigma;
        for (int j = 0; j < k->k; j++) k->c[j] = lagrange_integral(x, k->k, j, es[i].sigma, es[i].sigma_next);
        const int64_t run = i - e->begin + 1; /* the derivatives there are since the first step run */
        if (run < k->k) k->k = (int)(run > 0 ? run : 1);
    }
    free(es);
    return rc;
}
