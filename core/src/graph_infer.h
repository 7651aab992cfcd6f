/* What graph_infer.c's shape rules share with graph_infer_models.c's (the decoder LLMs',
 * the vision models' and the collectives' ops): the input as a rule sees it, the refusal
 * into the caller's message, the common checks. Internal to core. */
#ifndef TRIDENT_GRAPH_INFER_H
#define TRIDENT_GRAPH_INFER_H

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "trident/graph.h"

/* One input as seen by a rule. */
struct arg {
    int dt, nd;
    const int64_t *sh;
    char str[160]; /* "bf16[2,128,768]" */
};

struct ctx {
    char *msg;
    size_t msg_size;
};

__attribute__((format(printf, 3, 4))) static inline int refuse(struct ctx *c, int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->msg, c->msg_size, fmt, ap);
    va_end(ap);
    return status;
}

static inline int is_float(int dt) { return tr_dtype_is_float((enum tr_dtype)dt); }

/* Float ops: every listed input a float, all of one dtype. */
static inline int same_float(struct ctx *c, int n, const struct arg *a, const char *const *what) {
    for (int i = 0; i < n; i++)
        if (!is_float(a[i].dt))
            return refuse(c, TR_ERR_SHAPE, "%s is %s, expected a float dtype (f32, bf16, f16, f64)", what[i], a[i].str);
    for (int i = 1; i < n; i++)
        if (a[i].dt != a[0].dt)
            return refuse(c, TR_ERR_SHAPE, "dtypes differ: %s %s, %s %s (cast one of them)", what[0], a[0].str, what[i],
                          a[i].str);
    return TR_OK;
}

static inline int norm_axis(struct ctx *c, int64_t *axis, int nd, const char *what, const struct arg *x) {
    int64_t ax = *axis;
    if (ax < -nd || ax >= nd)
        return refuse(c, TR_ERR_SHAPE, "%s %lld is out of range for %s (%d dimensions: -%d to %d)", what, (long long)ax,
                      x->str, nd, nd, nd - 1);
    *axis = ax < 0 ? ax + nd : ax;
    return TR_OK;
}

static inline int same_shape(const struct arg *a, const struct arg *b) {
    if (a->nd != b->nd) return 0;
    for (int i = 0; i < a->nd; i++)
        if (a->sh[i] != b->sh[i]) return 0;
    return 1;
}

static inline void copy_shape(const struct arg *x, int *dt, int *nd, int64_t *sh) {
    *dt = x->dt;
    *nd = x->nd;
    memcpy(sh, x->sh, (size_t)x->nd * sizeof *sh);
}

/* graph_infer_models.c */
int tr_infer_rms_norm(struct ctx *c, int op, const struct arg *a, const struct tr_attrs *at, int *dt, int *nd,
                      int64_t *sh);
int tr_infer_rope(struct ctx *c, const struct arg *a, struct tr_attrs *at, int *dt, int *nd, int64_t *sh);
int tr_infer_update_slice(struct ctx *c, const struct arg *a, struct tr_attrs *at, int *dt, int *nd, int64_t *sh);
int tr_infer_conv2d(struct ctx *c, int n, const struct arg *a, struct tr_attrs *at, int *dt, int *nd, int64_t *sh);
int tr_infer_conv2d_grad(struct ctx *c, int op, const struct arg *a, struct tr_attrs *at, int *dt, int *nd,
                         int64_t *sh);
int tr_infer_group_norm(struct ctx *c, int op, const struct arg *a, const struct tr_attrs *at, int *dt,
                        int *nd, int64_t *sh);
int tr_infer_timestep_embedding(struct ctx *c, const struct arg *t, struct tr_attrs *at, int *dt, int *nd, int64_t *sh);
int tr_infer_allreduce(struct ctx *c, const struct arg *x, const struct tr_attrs *at, int *dt, int *nd, int64_t *sh);

#endif
