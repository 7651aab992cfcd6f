/* tr_grad checked by finite differences: an f64 graph with host values at its leaves,
 * a scalar loss SUM(out · R), every node evaluated by the reference evaluator, the
 * analytic gradients against central differences of the loss (ref_fd.c). Apart from
 * ref_fd.c so that the kernels-only tests, which link no graph, can use that one. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ref.h"
#include "testutil.h"
#include "trident/autodiff.h"
#include "trident/graph.h"

#define SEED 0x9e3779b97f4a7c15ull

struct tr_ref_gx *tr_ref_gx_new(void) {
    struct tr_ref_gx *t = calloc(1, sizeof *t);
    assert_non_null(t);
    assert_int_equal(tr_graph_init(&t->g, NULL), TR_OK);
    t->rng = SEED;
    return t;
}

void tr_ref_gx_free(struct tr_ref_gx *t) {
    for (int i = 0; i < TR_REF_MAXN; i++) free(t->leaf[i]), free(t->v[i]);
    tr_graph_free(t->g);
    free(t);
}

static double urand(struct tr_ref_gx *t) {
    t->rng ^= t->rng << 13, t->rng ^= t->rng >> 7, t->rng ^= t->rng << 17;
    return (double)(t->rng >> 11) / 9007199254740992.0;
}

double tr_ref_gx_nzrand(struct tr_ref_gx *t) {
    double v = 0.1 + urand(t);
    return urand(t) < 0.5 ? -v : v;
}

static int64_t nel(const struct tr_graph *g, int id) {
    return tr_shape_numel(tr_node_ndim(g, id), tr_node_shape(g, id));
}

static double *leaf_alloc(struct tr_ref_gx *t, int id) {
    assert_true(id >= 0 && id < TR_REF_MAXN);
    int64_t n = nel(t->g, id);
    return t->leaf[id] = malloc(sizeof(double) * (size_t)(n ? n : 1));
}

int tr_ref_gx_param(struct tr_ref_gx *t, const char *name, enum tr_ref_fill f, int nd, const int64_t *sh) {
    int id = tr_param(t->g, name, TR_DTYPE_F64, nd, sh, 0.0f, 1.0f);
    double *d = leaf_alloc(t, id);
    int64_t n = nel(t->g, id);
    for (int64_t i = 0; i < n; i++) {
        double x = tr_ref_gx_nzrand(t);
        if (f == TR_REF_POSITIVE) x = fabs(x) + 0.4;
        if (f == TR_REF_DISTINCT) x = (double)((i * 7919) % n) * 0.05 + 0.01 * tr_ref_gx_nzrand(t);
        d[i] = x;
    }
    return id;
}

int tr_ref_gx_ids(struct tr_ref_gx *t, const char *name, int nd, const int64_t *sh, const int64_t *vals) {
    int id = tr_input(t->g, name, TR_DTYPE_I64, nd, sh);
    double *d = leaf_alloc(t, id);
    for (int64_t i = 0; i < nel(t->g, id); i++) d[i] = (double)vals[i];
    return id;
}

int tr_ref_gx_loss(struct tr_ref_gx *t, int out) {
    struct tr_graph *g = t->g;
    int64_t n = nel(g, out);
    double *r = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) r[i] = tr_ref_gx_nzrand(t);
    int R = tr_const(g, NULL, TR_DTYPE_F64, tr_node_ndim(g, out), tr_node_shape(g, out), r);
    free(r);
    int x = tr_mul(g, out, R);
    while (x >= 0 && tr_node_ndim(g, x) > 0) x = tr_reduce(g, TR_OP_SUM, x, 0, 0);
    assert_true(x >= 0);
    return x;
}

struct loss_ctx {
    struct tr_ref_gx *t;
    int loss;
};

static double loss_value(void *p) {
    struct loss_ctx *c = p;
    tr_ref_graph_eval_upto(c->t->g, c->loss, c->t->leaf, c->t->v);
    return c->t->v[c->loss][0];
}

double tr_ref_gx_grad_err(struct tr_ref_gx *t, int loss, int n_wrt, const int *wrt, const int *grads) {
    struct tr_error err;
    if (tr_graph_status(t->g, &err)) fail_msg("graph: %s", err.msg);
    int n = tr_graph_n_nodes(t->g);
    assert_true(n <= TR_REF_MAXN);
    tr_ref_graph_eval_upto(t->g, n - 1, t->leaf, t->v);
    double worst = 0;
    struct loss_ctx c = {t, loss};
    for (int w = 0; w < n_wrt; w++) {
        assert_int_equal(tr_node_dtype(t->g, grads[w]), tr_node_dtype(t->g, wrt[w]));
        assert_int_equal(nel(t->g, grads[w]), nel(t->g, wrt[w]));
        int64_t m = nel(t->g, wrt[w]);
        double *an = malloc(sizeof(double) * (size_t)(m ? m : 1)), *fd = malloc(sizeof(double) * (size_t)(m ? m : 1));
        memcpy(an, t->v[grads[w]], sizeof(double) * (size_t)m); /* the loss evaluations below overwrite v */
        tr_ref_fd_grad(loss_value, &c, t->leaf[wrt[w]], m, TR_REF_FD_H, fd);
        double e = tr_ref_rel_err(an, fd, m);
        if (e > worst) worst = e;
        free(an), free(fd);
    }
    return worst;
}

void tr_ref_gx_check(struct tr_ref_gx *t, const char *what, int loss, int n_wrt, const int *wrt) {
    int grads[16];
    struct tr_error err = {0};
    assert_true(n_wrt <= 16);
    if (tr_grad(t->g, loss, n_wrt, wrt, grads, &err)) fail_msg("%s: tr_grad: %s", what, err.msg);
    for (int i = 0; i < n_wrt; i++) {
        char want[TR_NAME_MAX + 8];
        snprintf(want, sizeof want, "grad.%s", tr_node_name(t->g, wrt[i]));
        assert_int_equal(tr_graph_find(t->g, want), grads[i]);
    }
    double e = tr_ref_gx_grad_err(t, loss, n_wrt, wrt, grads);
    print_message("%-52s gradient rel err %.2e (%d nodes)\n", what, e, tr_graph_n_nodes(t->g));
    if (!(e < TR_REF_FD_TOL)) fail_msg("%s: gradient relative error %.3g >= %.0e", what, e, TR_REF_FD_TOL);
}

int tr_ref_count_op(const struct tr_graph *g, int from, int op) {
    int c = 0;
    for (int i = from; i < tr_graph_n_nodes(g); i++) c += tr_node_op(g, i) == op;
    return c;
}

char *tr_ref_dump(const struct tr_graph *g) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    assert_int_equal(tr_graph_dump(g, f, NULL), TR_OK);
    fclose(f);
    return buf;
}

void tr_test_expect_refused(const char *what, struct tr_graph *g, int id, const char *const *needles) {
    assert_int_equal(id, -1);
    struct tr_error err = {0};
    assert_int_not_equal(tr_graph_status(g, &err), TR_OK);
    for (int i = 0; needles[i]; i++)
        if (!strstr(err.msg, needles[i])) fail_msg("%s: message \"%s\" lacks \"%s\"", what, err.msg, needles[i]);
    tr_graph_free(g);
}
