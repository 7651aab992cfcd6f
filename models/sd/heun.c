/* Heun's runs (heun.h), on Euler's schedule. */
#include <math.h>
#include <stdlib.h>
#include "heun.h"
#include "sigma.h"

int tr_heun_plan(const struct tr_ddim *s, const struct tr_euler_config *e, struct tr_heun_run *runs, int64_t *n,
                 double *init_sigma, struct tr_error *err) {
    const int64_t S = s->steps;
    struct tr_euler_config ec = *e;
    ec.final_sigma_min = 0;
    struct tr_euler_step *st = malloc(sizeof *st * (size_t)S);
    if (!st) return tr_error_set(err, TR_ERR_NOMEM, "heun: no memory for %lld steps", (long long)S);
    int rc = tr_euler_plan(s, &ec, st, init_sigma, err);
    if (rc) {
        free(st);
        return tr_error_prefix(err, "heun");
    }
    *n = 0;
    for (int64_t i = 0; i < S; i++) {
        const double sg = st[i].sigma, next = st[i].sigma_next;
        struct tr_heun_run *r = &runs[(*n)++];
        *r = (struct tr_heun_run){.t = st[i].t, .c_in = 1.0 / sqrt(sg * sg + 1.0), .dt = next - sg, .sigma_to = next};
        tr_sigma_derivative(s->c.prediction, sg, &r->p, &r->q);
        if (i + 1 == S) break; /* the last step lands on σ 0: Euler's alone */
        r = &runs[(*n)++];
        *r = (struct tr_heun_run){.t = st[i + 1].t, .c_in = 1.0 / sqrt(next * next + 1.0), .second = 1,
                                  .dt = next - sg, .sigma_to = next};
        tr_sigma_derivative(s->c.prediction, next, &r->p, &r->q);
    }
    free(st);
    return TR_OK;
}
