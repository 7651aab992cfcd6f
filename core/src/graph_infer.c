/* Shape and dtype inference for every op of ops.h.
 *
 * Reads the graph only through the public accessors, so it works on any graph and
 * knows nothing of how nodes are stored. Each rule writes the reason for a refusal into
 * msg with the shapes involved; graph.c puts "node N op 'name': " in front.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "graph_infer.h"

int tr_graph_infer_node(const struct tr_graph *g, int op, int n_in, const int *in, struct tr_attrs *attrs,
                        int *dtype, int *ndim, int64_t *shape, char *msg, size_t msg_size);

static void load(const struct tr_graph *g, int id, struct arg *a) {
    a->dt = tr_node_dtype(g, id);
    a->nd = tr_node_ndim(g, id);
    a->sh = tr_node_shape(g, id);
    int n = snprintf(a->str, sizeof a->str, "%s", tr_dtype_name((enum tr_dtype)a->dt));
    tr_shape_str(a->nd, a->sh, a->str + n, sizeof a->str - (size_t)n);
}

/* numpy broadcasting of the trailing-aligned shapes a and b into out. */
static int broadcast(int na, const int64_t *a, int nb, const int64_t *b, int *nout, int64_t *out) {
    int n = na > nb ? na : nb;
    for (int i = 0; i < n; i++) {
        int64_t x = i < n - na ? 1 : a[i - (n - na)];
        int64_t y = i < n - nb ? 1 : b[i - (n - nb)];
        if (x != y && x != 1 && y != 1) return -1 - i;
        out[i] = x == 1 ? y : x;
    }
    *nout = n;
    return 0;
}

static int infer_binary(struct ctx *c, const struct arg *a, int *dt, int *nd, int64_t *sh) {
    static const char *const what[] = {"a", "b"};
    int rc = same_float(c, 2, a, what);
    if (rc) return rc;
    int r = broadcast(a[0].nd, a[0].sh, a[1].nd, a[1].sh, nd, sh);
    if (r < 0) {
        int n = a[0].nd > a[1].nd ? a[0].nd : a[1].nd;
        return refuse(c, TR_ERR_SHAPE, "cannot broadcast a %s with b %s: axis %d (from the end: %d) differs", a[0].str,
                      a[1].str, -1 - r, -1 - r - n);
    }
    *dt = a[0].dt;
    return TR_OK;
}

/* Stores alpha resolved: 0 becomes 1 (tr_matmul_alpha). */
static int infer_matmul(struct ctx *c, const struct arg *a, struct tr_attrs *at, int *dt, int *nd, int64_t *sh) {
    static const char *const what[] = {"a", "b"};
    int rc = same_float(c, 2, a, what);
    if (rc) return rc;
    int64_t ta = at->ints[0], tb = at->ints[1];
    if ((ta != 0 && ta != 1) || (tb != 0 && tb != 1))
        return refuse(c, TR_ERR_INVALID, "trans_a=%lld trans_b=%lld, each must be 0 or 1", (long long)ta,
                      (long long)tb);
    if (a[0].nd < 2 || a[1].nd < 2)
        return refuse(c, TR_ERR_SHAPE, "both operands need at least 2 dimensions: a %s, b %s", a[0].str, a[1].str);
    const struct arg *A = &a[0], *B = &a[1];
    int64_t m = A->sh[A->nd - 2 + (int)ta], ka = A->sh[A->nd - 1 - (int)ta];
    int64_t kb = B->sh[B->nd - 2 + (int)tb], n = B->sh[B->nd - 1 - (int)tb];
    if (ka != kb)
        return refuse(c, TR_ERR_SHAPE, "inner dimensions differ: a %s%s (K=%lld) x b %s%s (K=%lld)", A->str,
                      ta ? "^T" : "", (long long)ka, B->str, tb ? "^T" : "", (long long)kb);
    int nbatch;
    if (broadcast(A->nd - 2, A->sh, B->nd - 2, B->sh, &nbatch, sh) < 0)
        return refuse(c, TR_ERR_SHAPE, "batch axes do not broadcast: a %s x b %s", A->str, B->str);
    if (nbatch + 2 > TR_MAX_DIMS)
        return refuse(c, TR_ERR_SHAPE, "result has more than %d dimensions: a %s x b %s", TR_MAX_DIMS, A->str, B->str);
    sh[nbatch] = m;
    sh[nbatch + 1] = n;
    *nd = nbatch + 2;
    *dt = A->dt;
    at->floats[0] = tr_matmul_alpha(at->floats[0]);
    return TR_OK;
}

static int infer_layer_norm(struct ctx *c, const struct arg *a, const struct tr_attrs *at, int *dt, int *nd,
                            int64_t *sh) {
    static const char *const what[] = {"x", "gamma", "beta"};
    int rc = same_float(c, 3, a, what);
    if (rc) return rc;
    if (a[0].nd < 1) return refuse(c, TR_ERR_SHAPE, "x %s needs at least 1 dimension", a[0].str);
    int64_t d = a[0].sh[a[0].nd - 1];
    for (int i = 1; i < 3; i++)
        if (a[i].nd != 1 || a[i].sh[0] != d)
            return refuse(c, TR_ERR_SHAPE, "%s is %s, expected [%lld] (the last axis of x %s)", what[i], a[i].str,
                          (long long)d, a[0].str);
    if (!(at->floats[0] >= 0.0f) || isinf(at->floats[0]))
        return refuse(c, TR_ERR_INVALID, "eps %g, expected a finite value >= 0", (double)at->floats[0]);
    *dt = a[0].dt;
    *nd = a[0].nd;
    memcpy(sh, a[0].sh, (size_t)a[0].nd * sizeof *sh);
    return TR_OK;
}

static int infer_embedding(struct ctx *c, const struct arg *a, const struct tr_attrs *at, int *dt, int *nd,
                           int64_t *sh) {
    const struct arg *tab = &a[0], *ids = &a[1];
    if (!is_float(tab->dt) || tab->nd != 2)
        return refuse(c, TR_ERR_SHAPE, "table %s, expected a 2-D float (V,D) table", tab->str);
    if (at->ints[0] != 0 && (at->ints[0] != 1 || at->ints[1] < 0 || at->ints[1] >= tab->sh[0]))
        return refuse(c, TR_ERR_INVALID, "padding row ints[0]=%lld ints[1]=%lld, expected ints[0] 0 (none) or 1 with "
                      "a row of table %s", (long long)at->ints[0], (long long)at->ints[1], tab->str);
    if (ids->dt != TR_DTYPE_I32 && ids->dt != TR_DTYPE_I64)
        return refuse(c, TR_ERR_SHAPE, "ids %s, expected i32 or i64", ids->str);
    if (ids->nd + 1 > TR_MAX_DIMS)
        return refuse(c, TR_ERR_SHAPE, "ids %s: the result would have more than %d dimensions", ids->str, TR_MAX_DIMS);
    memcpy(sh, ids->sh, (size_t)ids->nd * sizeof *sh);
    sh[ids->nd] = tab->sh[1];
    *nd = ids->nd + 1;
    *dt = tab->dt;
    return TR_OK;
}

static void ints_str(const int64_t *v, int n, char *buf, size_t size) {
    size_t off = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < n && off < size; i++)
        off += (size_t)snprintf(buf + off, size - off, i ? ",%lld" : "%lld", (long long)v[i]);
    if (off < size) snprintf(buf + off, size - off, "]");
}

static int infer_reshape(struct ctx *c, const struct arg *x, struct tr_attrs *at, int *nd, int64_t *sh) {
    int n = at->n_ints;
    if (n < 0 || n > TR_MAX_DIMS || n > TR_ATTR_INTS)
        return refuse(c, TR_ERR_INVALID, "new shape has %d dimensions (or none given), expected 0 to %d", n,
                      TR_MAX_DIMS);
    char want[160];
    ints_str(at->ints, n, want, sizeof want);
    int64_t known = 1, numel = tr_shape_numel(x->nd, x->sh);
    int infer = -1;
    for (int i = 0; i < n; i++) {
        int64_t e = at->ints[i];
        if (e == -1 && infer < 0) {
            infer = i;
        } else if (e < 0) {
            return refuse(c, TR_ERR_SHAPE, "new shape %s for x %s: %s", want, x->str,
                          e == -1 ? "more than one -1" : "negative extent");
        } else {
            if (e > 0 && known > INT64_MAX / e)
                return refuse(c, TR_ERR_SHAPE, "new shape %s for x %s: element count overflows", want, x->str);
            known *= e;
        }
    }
    if (infer >= 0) {
        if (known == 0 || numel % known != 0)
            return refuse(c, TR_ERR_SHAPE, "new shape %s for x %s (%lld elements): the -1 cannot be inferred", want,
                          x->str, (long long)numel);
        at->ints[infer] = numel / known;
        known = numel;
    }
    if (known != numel)
        return refuse(c, TR_ERR_SHAPE, "new shape %s has %lld elements, x %s has %lld", want, (long long)known, x->str,
                      (long long)numel);
    for (int i = 0; i < n; i++) sh[i] = at->ints[i];
    *nd = n;
    return TR_OK;
}

static int infer_transpose(struct ctx *c, const struct arg *x, const struct tr_attrs *at, int *nd, int64_t *sh) {
    int n = at->n_ints;
    char perm[160];
    ints_str(at->ints, n >= 0 && n <= TR_ATTR_INTS ? n : 0, perm, sizeof perm);
    if (n != x->nd)
        return refuse(c, TR_ERR_SHAPE, "perm %s has %d entries, x %s has %d dimensions", perm, n, x->str, x->nd);
    int seen[TR_MAX_DIMS] = {0};
    for (int i = 0; i < n; i++) {
        int64_t p = at->ints[i];
        if (p < 0 || p >= n || seen[p]++)
            return refuse(c, TR_ERR_SHAPE, "perm %s is not a permutation of 0..%d (x %s)", perm, n - 1, x->str);
        sh[i] = x->sh[p];
    }
    *nd = n;
    return TR_OK;
}

static int infer_slice(struct ctx *c, const struct arg *x, struct tr_attrs *at, int *nd, int64_t *sh) {
    int64_t axis = at->ints[0], start = at->ints[1], end = at->ints[2], step = at->ints[3];
    int rc = norm_axis(c, &axis, x->nd, "axis", x);
    if (rc) return rc;
    int64_t dim = x->sh[axis];
    if (step <= 0) return refuse(c, TR_ERR_INVALID, "step %lld, expected > 0 (x %s)", (long long)step, x->str);
    int64_t s = start < 0 ? start + dim : start, e = end < 0 ? end + dim : end;
    if (!(0 <= s && s <= e && e <= dim))
        return refuse(c, TR_ERR_SHAPE,
                      "start %lld end %lld on axis %lld of x %s (extent %lld): need 0 <= start <= end <= %lld "
                      "after negative values count from the end",
                      (long long)start, (long long)end, (long long)axis, x->str, (long long)dim, (long long)dim);
    at->ints[0] = axis;
    at->ints[1] = s;
    at->ints[2] = e;
    memcpy(sh, x->sh, (size_t)x->nd * sizeof *sh);
    sh[axis] = (e - s + step - 1) / step;
    *nd = x->nd;
    return TR_OK;
}

static int infer_concat(struct ctx *c, int n, const struct arg *a, struct tr_attrs *at, int *dt, int *nd,
                        int64_t *sh) {
    int64_t axis = at->ints[0];
    if (a[0].nd < 1) return refuse(c, TR_ERR_SHAPE, "input 0 %s has no axis to concatenate on", a[0].str);
    int rc = norm_axis(c, &axis, a[0].nd, "axis", &a[0]);
    if (rc) return rc;
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        if (a[i].dt != a[0].dt)
            return refuse(c, TR_ERR_SHAPE, "dtypes differ: input 0 %s, input %d %s", a[0].str, i, a[i].str);
        int same = a[i].nd == a[0].nd;
        for (int d = 0; same && d < a[0].nd; d++) same = d == axis || a[i].sh[d] == a[0].sh[d];
        if (!same)
            return refuse(c, TR_ERR_SHAPE, "input 0 %s and input %d %s differ outside axis %lld", a[0].str, i, a[i].str,
                          (long long)axis);
        total += a[i].sh[axis];
    }
    at->ints[0] = axis;
    memcpy(sh, a[0].sh, (size_t)a[0].nd * sizeof *sh);
    sh[axis] = total;
    *nd = a[0].nd;
    *dt = a[0].dt;
    return TR_OK;
}

static int infer_reduce(struct ctx *c, const struct arg *x, struct tr_attrs *at, int *nd, int64_t *sh) {
    static const char *const what[] = {"x"};
    int rc = same_float(c, 1, x, what);
    if (rc) return rc;
    if (x->nd < 1) return refuse(c, TR_ERR_SHAPE, "x %s has no axis to reduce", x->str);
    int64_t axis = at->ints[0], keep = at->ints[1];
    if ((rc = norm_axis(c, &axis, x->nd, "axis", x))) return rc;
    if (keep != 0 && keep != 1) return refuse(c, TR_ERR_INVALID, "keepdims %lld, expected 0 or 1", (long long)keep);
    at->ints[0] = axis;
    int k = 0;
    for (int d = 0; d < x->nd; d++) {
        if (d != axis) sh[k++] = x->sh[d];
        else if (keep) sh[k++] = 1;
    }
    *nd = k;
    return TR_OK;
}

/* Stores the scale resolved: 0 becomes 1/sqrt(D) (tr_attention_default_scale), here and
 * only here for a graph, so that every backend and device reads the same bits. */
static int infer_attention(struct ctx *c, int n, const struct arg *a, struct tr_attrs *at, int *dt, int *nd,
                           int64_t *sh) {
    static const char *const what[] = {"q", "k", "v"};
    int rc = same_float(c, 3, a, what);
    if (rc) return rc;
    const struct arg *q = &a[0], *k = &a[1], *v = &a[2];
    if (q->nd != 4 || k->nd != 4 || v->nd != 4)
        return refuse(c, TR_ERR_SHAPE, "q %s, k %s, v %s: each must be 4-D (B,H,T,D)", q->str, k->str, v->str);
    int64_t B = q->sh[0], H = q->sh[1], Tq = q->sh[2], D = q->sh[3];
    int64_t Hk = k->sh[1], Tk = k->sh[2];
    int fits = k->sh[0] == B && v->sh[0] == B && v->sh[1] == Hk && v->sh[2] == Tk && k->sh[3] == D;
    if (!fits)
        return refuse(c, TR_ERR_SHAPE,
                      "q %s, k %s, v %s: expected q (B,H,Tq,D), k (B,Hk,Tk,D), v (B,Hk,Tk,Dv) with equal B, Hk, Tk, D",
                      q->str, k->str, v->str);
    if (Hk == 0 ? H != 0 : H % Hk != 0)
        return refuse(c, TR_ERR_SHAPE, "q %s has %lld heads, not a multiple of k %s's %lld", q->str, (long long)H,
                      k->str, (long long)Hk);
    if (at->ints[0] != 0 && at->ints[0] != 1)
        return refuse(c, TR_ERR_INVALID, "causal %lld, expected 0 or 1", (long long)at->ints[0]);
    if (at->ints[1] < 0) return refuse(c, TR_ERR_INVALID, "window %lld, expected >= 0", (long long)at->ints[1]);
    if (n == 4) {
        const struct arg *m = &a[3];
        int64_t full[4] = {B, H, Tq, Tk};
        int ok = (m->dt == TR_DTYPE_F32 || m->dt == q->dt) && m->nd <= 4;
        for (int i = 0; ok && i < m->nd; i++) {
            int64_t e = m->sh[i], f = full[4 - m->nd + i];
            ok = e == 1 || e == f;
        }
        if (!ok)
            return refuse(c, TR_ERR_SHAPE,
                          "mask %s must be f32 or %s and broadcast to (B,H,Tq,Tk) [%lld,%lld,%lld,%lld]", m->str,
                          tr_dtype_name((enum tr_dtype)q->dt), (long long)B, (long long)H, (long long)Tq,
                          (long long)Tk);
    }
    sh[0] = B;
    sh[1] = H;
    sh[2] = Tq;
    sh[3] = v->sh[3];
    *nd = 4;
    *dt = q->dt;
    at->floats[0] = tr_attention_scale(at->floats[0], D);
    return TR_OK;
}

/* ---- training ops: gradients and losses ---- */

/* (x, dy) with dy shaped like x, one float dtype; result like x. */
static int infer_like_x(struct ctx *c, const struct arg *a, const char *x_name, int *dt, int *nd, int64_t *sh) {
    const char *what[] = {x_name, "dy"};
    int rc = same_float(c, 2, a, what);
    if (rc) return rc;
    if (!same_shape(&a[0], &a[1]))
        return refuse(c, TR_ERR_SHAPE, "dy %s must have the shape of %s %s", a[1].str, x_name, a[0].str);
    copy_shape(&a[0], dt, nd, sh);
    return TR_OK;
}

static int infer_unary_grad(struct ctx *c, const struct arg *a, const struct tr_attrs *at, int *dt, int *nd,
                            int64_t *sh) {
    int64_t f = at->ints[0];
    int ok = f == TR_OP_SCALE || (f >= 0 && f < TR_OP_COUNT && tr_op_is_elementwise_unary((int)f));
    if (!ok)
        return refuse(c, TR_ERR_INVALID,
                      "forward op %lld (%s) is not one of gelu tanh relu silu sigmoid exp neg sqrt rsqrt scale",
                      (long long)f, tr_op_name((int)f));
    if (f == TR_OP_GELU && at->ints[1] != 0 && at->ints[1] != 1)
        return refuse(c, TR_ERR_INVALID, "gelu approximate %lld, expected 0 (erf) or 1 (tanh)", (long long)at->ints[1]);
    return infer_like_x(c, a, "x", dt, nd, sh);
}

static int infer_layer_norm_grad(struct ctx *c, int op, const struct arg *a, const struct tr_attrs *at, int *dt,
                                 int *nd, int64_t *sh) {
    const struct arg *x = &a[0], *dy = op == TR_OP_LAYER_NORM_GRAD ? &a[2] : &a[1];
    static const char *const what3[] = {"x", "gamma", "dy"};
    static const char *const what2[] = {"x", "dy"};
    int rc = op == TR_OP_LAYER_NORM_GRAD ? same_float(c, 3, a, what3) : same_float(c, 2, a, what2);
    if (rc) return rc;
    if (x->nd < 1) return refuse(c, TR_ERR_SHAPE, "x %s needs at least 1 dimension", x->str);
    if (!same_shape(x, dy)) return refuse(c, TR_ERR_SHAPE, "dy %s must have the shape of x %s", dy->str, x->str);
    int64_t d = x->sh[x->nd - 1];
    if (op == TR_OP_LAYER_NORM_GRAD && (a[1].nd != 1 || a[1].sh[0] != d))
        return refuse(c, TR_ERR_SHAPE, "gamma is %s, expected [%lld] (the last axis of x %s)", a[1].str, (long long)d,
                      x->str);
    if (!(at->floats[0] >= 0.0f) || isinf(at->floats[0]))
        return refuse(c, TR_ERR_INVALID, "eps %g, expected a finite value >= 0", (double)at->floats[0]);
    if (op == TR_OP_LAYER_NORM_GRAD) {
        copy_shape(x, dt, nd, sh);
    } else {
        *dt = x->dt;
        *nd = 1;
        sh[0] = d;
    }
    return TR_OK;
}

static int infer_embedding_grad(struct ctx *c, const struct arg *a, const struct tr_attrs *at, int *dt, int *nd,
                                int64_t *sh) {
    const struct arg *ids = &a[0], *dy = &a[1];
    if (ids->dt != TR_DTYPE_I32 && ids->dt != TR_DTYPE_I64)
        return refuse(c, TR_ERR_SHAPE, "ids %s, expected i32 or i64", ids->str);
    if (!is_float(dy->dt)) return refuse(c, TR_ERR_SHAPE, "dy %s, expected a float dtype", dy->str);
    int ok = dy->nd == ids->nd + 1;
    for (int i = 0; ok && i < ids->nd; i++) ok = dy->sh[i] == ids->sh[i];
    if (!ok) return refuse(c, TR_ERR_SHAPE, "dy %s must be ids %s with one more axis (D)", dy->str, ids->str);
    if (at->ints[0] <= 0)
        return refuse(c, TR_ERR_INVALID, "vocabulary size V=%lld, expected > 0", (long long)at->ints[0]);
    if (at->ints[1] != 0 && (at->ints[1] != 1 || at->ints[2] < 0 || at->ints[2] >= at->ints[0]))
        return refuse(c, TR_ERR_INVALID, "padding row ints[1]=%lld ints[2]=%lld, expected ints[1] 0 (none) or 1 with "
                      "a row below V=%lld", (long long)at->ints[1], (long long)at->ints[2], (long long)at->ints[0]);
    *dt = dy->dt;
    *nd = 2;
    sh[0] = at->ints[0];
    sh[1] = dy->sh[dy->nd - 1];
    return TR_OK;
}

/* The f32 statistics of ATTENTION_LSE: f64 for f64 operands, so that finite differences
 * through them stay exact. */
static int lse_dtype(int dt) { return dt == TR_DTYPE_F64 ? TR_DTYPE_F64 : TR_DTYPE_F32; }

/* y as the attention's output (y_*), lse as y without its last axis, of lse_dtype. */
static int check_saved_stats(struct ctx *c, const struct arg *a, const struct arg *saved, int y_dt, int y_nd,
                             const int64_t *y_sh, const char *lse_op) {
    for (int s = 0; s < 2; s++) {
        const struct arg *x = &saved[s];
        int ok = x->dt == (s ? lse_dtype(y_dt) : y_dt) && x->nd == y_nd - s;
        for (int i = 0; ok && i < x->nd; i++) ok = x->sh[i] == y_sh[i];
        if (!ok)
            return refuse(c, TR_ERR_SHAPE, "%s %s must be the attention's %s%s (q %s, v %s)", s ? "lse" : "y", x->str,
                          s ? lse_op : "output", s ? ": f32 (B,H,Tq)" : "", a[0].str, a[2].str);
    }
    return TR_OK;
}

/* ATTENTION_LSE (q, k, v, [mask]) -> (B,H,Tq): ATTENTION's checks and attrs. */
static int infer_attention_lse(struct ctx *c, int n, const struct arg *a, struct tr_attrs *at, int *dt, int *nd,
                               int64_t *sh) {
    int rc = infer_attention(c, n, a, at, dt, nd, sh);
    if (rc) return rc;
    *dt = lse_dtype(*dt);
    *nd = 3;
    return TR_OK;
}

/* Stores the scale resolved as ATTENTION does (infer_attention below writes it). */
static int infer_attention_grad(struct ctx *c, int n, const struct arg *a, struct tr_attrs *at, int *dt,
                                int *nd, int64_t *sh) {
    if (n < 4 || n > 7)
        return refuse(c, TR_ERR_INVALID, "%d inputs, expected q, k, v, dy, an optional mask and optionally the "
                      "forward's y and lse (4 to 7)", n);
    const int saved = n >= 6, masked = n == 5 || n == 7;
    struct arg fwd[4] = {a[0], a[1], a[2]};
    if (masked) fwd[3] = a[4];
    int y_dt, y_nd;
    int64_t y_sh[TR_MAX_DIMS];
    int rc = infer_attention(c, 3 + masked, fwd, at, &y_dt, &y_nd, y_sh);
    if (rc) return rc;
    if (saved && (rc = check_saved_stats(c, a, &a[n - 2], y_dt, y_nd, y_sh, "ATTENTION_LSE")) != TR_OK) return rc;
    const struct arg *dy = &a[3];
    int ok = dy->dt == y_dt && dy->nd == y_nd;
    for (int i = 0; ok && i < y_nd; i++) ok = dy->sh[i] == y_sh[i];
    if (!ok) {
        char want[160];
        int k = snprintf(want, sizeof want, "%s", tr_dtype_name((enum tr_dtype)y_dt));
        tr_shape_str(y_nd, y_sh, want + k, sizeof want - (size_t)k);
        return refuse(c, TR_ERR_SHAPE, "dy %s must be the attention output's %s (q %s, v %s)", dy->str, want, a[0].str,
                      a[2].str);
    }
    int64_t which = at->ints[2];
    if (which < 0 || which > 2)
        return refuse(c, TR_ERR_INVALID, "which %lld, expected 0 (dq), 1 (dk) or 2 (dv)", (long long)which);
    copy_shape(&a[which], dt, nd, sh);
    return TR_OK;
}

/* ATTENTION_REL (q, k, v, rel_h, rel_w): q, k, v as ATTENTION's; the bias terms (B,H,Tq,Kh)
 * and (B,H,Tq,Kw) with Kh·Kw = Tk, f32 or q's dtype. */
static int infer_attention_rel(struct ctx *c, const struct arg *a, struct tr_attrs *at, int *dt, int *nd,
                               int64_t *sh) {
    at->ints[0] = at->ints[1] = 0; /* ATTENTION's causal and window: none here */
    int rc = infer_attention(c, 3, a, at, dt, nd, sh);
    if (rc) return rc;
    const struct arg *q = &a[0], *rh = &a[3], *rw = &a[4];
    int64_t B = q->sh[0], H = q->sh[1], Tq = q->sh[2], Tk = a[1].sh[2];
    int ok = rh->nd == 4 && rw->nd == 4 && (rh->dt == TR_DTYPE_F32 || rh->dt == q->dt) &&
             (rw->dt == TR_DTYPE_F32 || rw->dt == q->dt);
    for (int i = 0; ok && i < 3; i++) ok = rh->sh[i] == q->sh[i] && rw->sh[i] == q->sh[i];
    if (ok) ok = rh->sh[3] * rw->sh[3] == Tk;
    if (!ok)
        return refuse(c, TR_ERR_SHAPE,
                      "rel_h %s, rel_w %s: expected (B,H,Tq,Kh) and (B,H,Tq,Kw) of f32 or %s with B,H,Tq = "
                      "%lld,%lld,%lld (q's) and Kh·Kw = Tk = %lld (k's keys as a Kh x Kw grid)",
                      rh->str, rw->str, tr_dtype_name((enum tr_dtype)q->dt), (long long)B, (long long)H,
                      (long long)Tq, (long long)Tk);
    at->n_ints = 0;
    return TR_OK;
}

/* ATTENTION_REL_LSE (q, k, v, rel_h, rel_w) -> (B,H,Tq): ATTENTION_REL's checks and attrs. */
static int infer_attention_rel_lse(struct ctx *c, const struct arg *a, struct tr_attrs *at, int *dt, int *nd,
                                   int64_t *sh) {
    int rc = infer_attention_rel(c, a, at, dt, nd, sh);
    if (rc) return rc;
    *dt = lse_dtype(*dt);
    *nd = 3;
    return TR_OK;
}

/* ATTENTION_REL_GRAD (q, k, v, rel_h, rel_w, dy, [y, lse]) -> operand ints[0]'s gradient. */
static int infer_attention_rel_grad(struct ctx *c, int n, const struct arg *a, struct tr_attrs *at, int *dt, int *nd,
                                    int64_t *sh) {
    if (n != 6 && n != 8)
        return refuse(c, TR_ERR_INVALID, "%d inputs, expected q, k, v, rel_h, rel_w, dy (6) and optionally the "
                      "forward's y and lse (8)", n);
    const int64_t which = at->ints[0];
    if (which < 0 || which > 4)
        return refuse(c, TR_ERR_INVALID, "which %lld, expected 0 (dq), 1 (dk), 2 (dv), 3 (drel_h) or 4 (drel_w)",
                      (long long)which);
    struct tr_attrs fa = *at;
    int y_dt, y_nd;
    int64_t y_sh[TR_MAX_DIMS];
    int rc = infer_attention_rel(c, a, &fa, &y_dt, &y_nd, y_sh);
    if (rc) return rc;
    at->floats[0] = fa.floats[0];
    const struct arg *dy = &a[5];
    int ok = dy->dt == y_dt && dy->nd == y_nd;
    for (int i = 0; ok && i < y_nd; i++) ok = dy->sh[i] == y_sh[i];
    if (!ok)
        return refuse(c, TR_ERR_SHAPE, "dy %s must be the attention output's dtype and shape (q %s, v %s)", dy->str,
                      a[0].str, a[2].str);
    if (n == 8 && (rc = check_saved_stats(c, a, &a[6], y_dt, y_nd, y_sh, "ATTENTION_REL_LSE")) != TR_OK) return rc;
    copy_shape(&a[which], dt, nd, sh);
    at->n_ints = 1;
    return TR_OK;
}

static int infer_broadcast(struct ctx *c, const struct arg *x, const struct tr_attrs *at, int *dt, int *nd,
                           int64_t *sh) {
    int n = at->n_ints;
    if (n < 0 || n > TR_MAX_DIMS || n > TR_ATTR_INTS)
        return refuse(c, TR_ERR_INVALID, "target shape has %d dimensions, expected 0 to %d", n, TR_MAX_DIMS);
    char want[160];
    ints_str(at->ints, n, want, sizeof want);
    int ok = n >= x->nd;
    for (int i = 0; ok && i < n; i++) ok = at->ints[i] >= 0;
    for (int i = 0; ok && i < x->nd; i++) {
        int64_t e = x->sh[i], t = at->ints[n - x->nd + i];
        ok = e == t || e == 1;
    }
    if (!ok)
        return refuse(c, TR_ERR_SHAPE, "x %s does not broadcast to %s (numpy rules: trailing axes equal or 1)", x->str,
                      want);
    for (int i = 0; i < n; i++) sh[i] = at->ints[i];
    *nd = n;
    *dt = x->dt;
    return TR_OK;
}

static int infer_max_grad(struct ctx *c, const struct arg *a, struct tr_attrs *at, int *dt, int *nd, int64_t *sh) {
    static const char *const what[] = {"x", "dy"};
    int rc = same_float(c, 2, a, what);
    if (rc) return rc;
    int rnd = 0;
    int64_t rsh[TR_MAX_DIMS];
    if ((rc = infer_reduce(c, &a[0], at, &rnd, rsh))) return rc;
    int ok = a[1].nd == rnd;
    for (int i = 0; ok && i < rnd; i++) ok = a[1].sh[i] == rsh[i];
    if (!ok) {
        char want[160];
        tr_shape_str(rnd, rsh, want, sizeof want);
        return refuse(c, TR_ERR_SHAPE, "dy %s must be x %s reduced over axis %lld (keepdims %lld): %s", a[1].str,
                      a[0].str, (long long)at->ints[0], (long long)at->ints[1], want);
    }
    copy_shape(&a[0], dt, nd, sh);
    return TR_OK;
}

static int infer_slice_grad(struct ctx *c, const struct arg *dy, struct tr_attrs *at, int *dt, int *nd, int64_t *sh) {
    int64_t axis = at->ints[0], start = at->ints[1], step = at->ints[3], full = at->ints[4];
    int rc = norm_axis(c, &axis, dy->nd, "axis", dy);
    if (rc) return rc;
    int64_t n = dy->sh[axis];
    if (step <= 0 || start < 0)
        return refuse(c, TR_ERR_INVALID, "start %lld step %lld, expected start >= 0 and step > 0 (dy %s)",
                      (long long)start, (long long)step, dy->str);
    int64_t covered = n > 0 ? start + (n - 1) * step + 1 : 0;
    if (full < covered)
        return refuse(c, TR_ERR_SHAPE,
                      "full extent %lld on axis %lld is too small: dy %s has %lld rows there, from %lld every %lld, "
                      "which needs %lld",
                      (long long)full, (long long)axis, dy->str, (long long)n, (long long)start, (long long)step,
                      (long long)covered);
    at->ints[0] = axis;
    copy_shape(dy, dt, nd, sh);
    sh[axis] = full;
    return TR_OK;
}

/* Losses are 0-d f32, f64 for f64 inputs (finite-difference checks). */
static int loss_dtype(int dt) { return dt == TR_DTYPE_F64 ? TR_DTYPE_F64 : TR_DTYPE_F32; }

static int infer_cross_entropy(struct ctx *c, int op, int n, const struct arg *a, const struct tr_attrs *at, int *dt,
                               int *nd, int64_t *sh) {
    const struct arg *lg = &a[0], *lb = &a[1];
    if (!is_float(lg->dt) || lg->nd != 2)
        return refuse(c, TR_ERR_SHAPE, "logits %s, expected a 2-D float (N,C)", lg->str);
    if ((lb->dt != TR_DTYPE_I32 && lb->dt != TR_DTYPE_I64) || lb->nd != 1 || lb->sh[0] != lg->sh[0])
        return refuse(c, TR_ERR_SHAPE, "labels %s, expected i32 or i64 [%lld] (one per row of logits %s)", lb->str,
                      (long long)lg->sh[0], lg->str);
    if (at->ints[1] != 0 && at->ints[1] != 1)
        return refuse(c, TR_ERR_INVALID, "has_ignore %lld, expected 0 or 1", (long long)at->ints[1]);
    if (op == TR_OP_CROSS_ENTROPY_GRAD) {
        const struct arg *dl = &a[2];
        if (n != 3 || !is_float(dl->dt) || tr_shape_numel(dl->nd, dl->sh) != 1)
            return refuse(c, TR_ERR_SHAPE, "dloss %s, expected a one-element float", dl->str);
        copy_shape(lg, dt, nd, sh);
        return TR_OK;
    }
    *dt = loss_dtype(lg->dt);
    *nd = 0;
    return TR_OK;
}

static int infer_mse(struct ctx *c, const struct arg *a, int *dt, int *nd) {
    static const char *const what[] = {"pred", "target"};
    int rc = same_float(c, 2, a, what);
    if (rc) return rc;
    if (!same_shape(&a[0], &a[1]))
        return refuse(c, TR_ERR_SHAPE, "pred %s and target %s must have one shape", a[0].str, a[1].str);
    *dt = loss_dtype(a[0].dt);
    *nd = 0;
    return TR_OK;
}

/* ADAMW_STEP (param, m, v, lr, step): m and v f32 shaped like param, lr and step 0-d f32,
 * hyper-parameters in range; the result is like param. */
static int infer_adamw_step(struct ctx *c, const struct arg *a, const struct tr_attrs *at, int *dt, int *nd,
                            int64_t *sh) {
    static const char *const what[] = {"param", "m", "v", "lr", "step"};
    if (!is_float(a[0].dt))
        return refuse(c, TR_ERR_SHAPE, "param is %s, expected a float dtype (f32, bf16, f16, f64)", a[0].str);
    for (int i = 1; i < 3; i++)
        if (a[i].dt != TR_DTYPE_F32 || !same_shape(&a[i], &a[0]))
            return refuse(c, TR_ERR_SHAPE, "%s is %s, expected f32 with the shape of param %s", what[i], a[i].str,
                          a[0].str);
    for (int i = 3; i < 5; i++)
        if (a[i].dt != TR_DTYPE_F32 || a[i].nd != 0)
            return refuse(c, TR_ERR_SHAPE, "%s is %s, expected a 0-d f32", what[i], a[i].str);
    const float *f = at->floats;
    for (int i = 0; i < 2; i++)
        if (!(f[i] >= 0.0f && f[i] < 1.0f))
            return refuse(c, TR_ERR_INVALID, "beta%d %g, expected 0 <= beta%d < 1", i + 1, (double)f[i], i + 1);
    if (!(f[2] > 0.0f) || isinf(f[2]))
        return refuse(c, TR_ERR_INVALID, "eps %g, expected a finite value > 0", (double)f[2]);
    if (!(f[3] >= 0.0f) || isinf(f[3]))
        return refuse(c, TR_ERR_INVALID, "weight decay %g, expected a finite value >= 0", (double)f[3]);
    copy_shape(&a[0], dt, nd, sh);
    return TR_OK;
}

int tr_graph_infer_node(const struct tr_graph *g, int op, int n_in, const int *in, struct tr_attrs *attrs,
                        int *dtype, int *ndim, int64_t *shape, char *msg, size_t msg_size) {
    struct ctx c = {msg, msg_size};
    struct arg a[TR_MAX_INPUTS];
    msg[0] = '\0';
    for (int i = 0; i < n_in && i < TR_MAX_INPUTS; i++) load(g, in[i], &a[i]);
    static const char *const x_what[] = {"x"};
    switch (op) {
    case TR_OP_MATMUL:
        return infer_matmul(&c, a, attrs, dtype, ndim, shape);
    case TR_OP_ADD: case TR_OP_SUB: case TR_OP_MUL: case TR_OP_DIV:
        return infer_binary(&c, a, dtype, ndim, shape);
    case TR_OP_GELU: case TR_OP_TANH: case TR_OP_RELU: case TR_OP_SILU: case TR_OP_SIGMOID:
    case TR_OP_EXP: case TR_OP_NEG: case TR_OP_SQRT: case TR_OP_RSQRT: case TR_OP_SCALE:
    case TR_OP_SOFTMAX: {
        int rc = same_float(&c, 1, a, x_what);
        if (rc) return rc;
        if (op == TR_OP_GELU && attrs->ints[0] != 0 && attrs->ints[0] != 1)
            return refuse(&c, TR_ERR_INVALID, "approximate %lld, expected 0 (erf) or 1 (tanh)",
                          (long long)attrs->ints[0]);
        if (op == TR_OP_SOFTMAX && a[0].nd < 1)
            return refuse(&c, TR_ERR_SHAPE, "x %s needs at least 1 dimension", a[0].str);
        *dtype = a[0].dt;
        *ndim = a[0].nd;
        memcpy(shape, a[0].sh, (size_t)a[0].nd * sizeof *shape);
        return TR_OK;
    }
    case TR_OP_LAYER_NORM:
        return infer_layer_norm(&c, a, attrs, dtype, ndim, shape);
    case TR_OP_EMBEDDING:
        return infer_embedding(&c, a, attrs, dtype, ndim, shape);
    case TR_OP_RESHAPE:
        *dtype = a[0].dt;
        return infer_reshape(&c, &a[0], attrs, ndim, shape);
    case TR_OP_TRANSPOSE:
        *dtype = a[0].dt;
        return infer_transpose(&c, &a[0], attrs, ndim, shape);
    case TR_OP_SLICE:
        *dtype = a[0].dt;
        return infer_slice(&c, &a[0], attrs, ndim, shape);
    case TR_OP_CONCAT:
        return infer_concat(&c, n_in, a, attrs, dtype, ndim, shape);
    case TR_OP_SUM: case TR_OP_MEAN: case TR_OP_MAX:
        *dtype = a[0].dt;
        return infer_reduce(&c, &a[0], attrs, ndim, shape);
    case TR_OP_CAST:
        if (attrs->ints[0] < 0 || attrs->ints[0] >= TR_DTYPE_COUNT)
            return refuse(&c, TR_ERR_INVALID, "target dtype %lld is not a dtype (x %s)", (long long)attrs->ints[0],
                          a[0].str);
        *dtype = (int)attrs->ints[0];
        *ndim = a[0].nd;
        memcpy(shape, a[0].sh, (size_t)a[0].nd * sizeof *shape);
        return TR_OK;
    case TR_OP_ATTENTION:
        return infer_attention(&c, n_in, a, attrs, dtype, ndim, shape);
    case TR_OP_ATTENTION_LSE:
        return infer_attention_lse(&c, n_in, a, attrs, dtype, ndim, shape);
    case TR_OP_UNARY_GRAD:
        return infer_unary_grad(&c, a, attrs, dtype, ndim, shape);
    case TR_OP_SOFTMAX_GRAD:
        return infer_like_x(&c, a, "y", dtype, ndim, shape);
    case TR_OP_LAYER_NORM_GRAD: case TR_OP_LAYER_NORM_GRAD_GAMMA:
        return infer_layer_norm_grad(&c, op, a, attrs, dtype, ndim, shape);
    case TR_OP_EMBEDDING_GRAD:
        return infer_embedding_grad(&c, a, attrs, dtype, ndim, shape);
    case TR_OP_ATTENTION_GRAD:
        return infer_attention_grad(&c, n_in, a, attrs, dtype, ndim, shape);
    case TR_OP_ATTENTION_REL:
        return infer_attention_rel(&c, a, attrs, dtype, ndim, shape);
    case TR_OP_ATTENTION_REL_GRAD:
        return infer_attention_rel_grad(&c, n_in, a, attrs, dtype, ndim, shape);
    case TR_OP_ATTENTION_REL_LSE:
        return infer_attention_rel_lse(&c, a, attrs, dtype, ndim, shape);
    case TR_OP_BROADCAST:
        return infer_broadcast(&c, &a[0], attrs, dtype, ndim, shape);
    case TR_OP_MAX_GRAD:
        return infer_max_grad(&c, a, attrs, dtype, ndim, shape);
    case TR_OP_SLICE_GRAD:
        return infer_slice_grad(&c, &a[0], attrs, dtype, ndim, shape);
    case TR_OP_CROSS_ENTROPY: case TR_OP_CROSS_ENTROPY_GRAD:
        return infer_cross_entropy(&c, op, n_in, a, attrs, dtype, ndim, shape);
    case TR_OP_MSE:
        return infer_mse(&c, a, dtype, ndim);
    case TR_OP_ADAMW_STEP:
        return infer_adamw_step(&c, a, attrs, dtype, ndim, shape);
    case TR_OP_RMS_NORM: case TR_OP_RMS_NORM_GRAD: case TR_OP_RMS_NORM_GRAD_W:
        return tr_infer_rms_norm(&c, op, a, attrs, dtype, ndim, shape);
    case TR_OP_ROPE:
        return tr_infer_rope(&c, a, attrs, dtype, ndim, shape);
    case TR_OP_UPDATE_SLICE:
        return tr_infer_update_slice(&c, a, attrs, dtype, ndim, shape);
    case TR_OP_CONV2D:
        return tr_infer_conv2d(&c, n_in, a, attrs, dtype, ndim, shape);
    case TR_OP_CONV2D_GRAD_INPUT: case TR_OP_CONV2D_GRAD_WEIGHT:
        return tr_infer_conv2d_grad(&c, op, a, attrs, dtype, ndim, shape);
    case TR_OP_GROUP_NORM: case TR_OP_GROUP_NORM_GRAD: case TR_OP_GROUP_NORM_GRAD_GAMMA:
        return tr_infer_group_norm(&c, op, a, attrs, dtype, ndim, shape);
    case TR_OP_TIMESTEP_EMBEDDING:
        return tr_infer_timestep_embedding(&c, &a[0], attrs, dtype, ndim, shape);
    case TR_OP_ALLREDUCE: case TR_OP_ALLREDUCE_START: case TR_OP_ALLREDUCE_WAIT:
        return tr_infer_allreduce(&c, &a[0], attrs, dtype, ndim, shape);
    default:
        return refuse(&c, TR_ERR_UNSUPPORTED, "no shape rule for op %d", op);
    }
}
