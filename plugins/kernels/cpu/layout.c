/* Layout ops (transpose, slice, concat), reductions over one axis, and dtype casts.
 * Layout ops move elements of any dtype by size (2, 4 or 8 bytes) and never look at
 * their values. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include "cpu_internal.h"

#define TILE 32

static int same_dtype(const struct tr_tensor *a, const struct tr_tensor *b, const char *kname, struct tr_error *err) {
    char d1[200], d2[200];
    if (a->dtype != b->dtype)
        return tr_error_set(err, TR_ERR_SHAPE, "%s: x %s and out %s should have the same dtype", kname,
                            tr_cpu_desc(a, d1, sizeof d1), tr_cpu_desc(b, d2, sizeof d2));
    return TR_OK;
}

/* ---- transpose ---- */

/* One 2-D tile: out[q*os + l] = in[q + l*is] for q < nq, l < nl. */
#define TILE_COPY(T, out, in, nq, nl, os, is)                                          \
    do {                                                                              \
        T *o_ = (T *)(out);                                                           \
        const T *i_ = (const T *)(in);                                                \
        for (int64_t q_ = 0; q_ < (nq); q_++)                                         \
            for (int64_t l_ = 0; l_ < (nl); l_++) o_[q_ * (os) + l_] = i_[q_ + l_ * (is)]; \
    } while (0)

/* Output axes with x's strides, extent-1 axes dropped and axes that stay adjacent in x
 * merged: m axes. mode 0: nothing; 1: one copy; 2: rows of contiguous copies (the
 * innermost axis stays innermost); 3: tiles of the (q, last) plane. */
struct transpose_plan {
    struct tr_cpu_prepared hdr;
    int mode, m, q;
    int64_t ext[TR_MAX_DIMS], is[TR_MAX_DIMS], os[TR_MAX_DIMS];
    int64_t n, L, rows, nq, nl, tq, tl, items;
    size_t es;
    const char *px;
    char *po;
};

static int transpose_check(const struct tr_tensor *x, const int64_t *perm, const struct tr_tensor *out,
                           struct transpose_plan *pl, struct tr_error *err) {
    int rc = tr_cpu_check_tensor(x, "transpose", "x", err);
    if (!rc) rc = tr_cpu_check_tensor(out, "transpose", "out", err);
    if (!rc) rc = same_dtype(x, out, "transpose", err);
    if (rc) return rc;
    char d1[200], d2[200];
    int nd = x->ndim;
    if (!perm && nd > 0) return tr_error_set(err, TR_ERR_INVALID, "transpose: perm is NULL");
    if (out->ndim != nd)
        return tr_error_set(err, TR_ERR_SHAPE, "transpose: x %s and out %s differ in rank", tr_cpu_desc(x, d1, sizeof d1),
                            tr_cpu_desc(out, d2, sizeof d2));
    int seen[TR_MAX_DIMS] = {0};
    for (int i = 0; i < nd; i++) {
        if (perm[i] < 0 || perm[i] >= nd || seen[perm[i]]++)
            return tr_error_set(err, TR_ERR_INVALID, "transpose: perm[%d]=%lld: not a permutation of 0..%d", i,
                                (long long)perm[i], nd - 1);
    }
    for (int i = 0; i < nd; i++) {
        if (out->shape[i] != x->shape[perm[i]])
            return tr_error_set(err, TR_ERR_SHAPE, "transpose: out %s should have extent %lld on axis %d (x %s, perm[%d]=%lld)",
                                tr_cpu_desc(out, d1, sizeof d1), (long long)x->shape[perm[i]], i,
                                tr_cpu_desc(x, d2, sizeof d2), i, (long long)perm[i]);
    }
    memset(pl, 0, sizeof *pl);
    int64_t n = tr_tensor_numel(x);
    pl->n = n;
    pl->es = tr_dtype_size((enum tr_dtype)x->dtype);
    pl->px = x->data;
    pl->po = out->data;
    if (n == 0) return TR_OK;
    int64_t xs[TR_MAX_DIMS], *ext = pl->ext, *is = pl->is, *os = pl->os;
    int64_t s = 1;
    for (int i = nd - 1; i >= 0; i--) {
        xs[i] = s;
        s *= x->shape[i];
    }
    int m = 0;
    for (int i = 0; i < nd; i++) {
        int64_t e = out->shape[i], st_in = xs[perm[i]];
        if (e == 1) continue;
        if (m > 0 && is[m - 1] == st_in * e) {
            ext[m - 1] *= e;
            is[m - 1] = st_in;
            continue;
        }
        ext[m] = e;
        is[m] = st_in;
        m++;
    }
    pl->m = m;
    if (m <= 1) {
        pl->mode = 1;
        return TR_OK;
    }
    s = 1;
    for (int i = m - 1; i >= 0; i--) {
        os[i] = s;
        s *= ext[i];
    }
    if (is[m - 1] == 1) {
        pl->mode = 2;
        pl->L = ext[m - 1];
        pl->rows = n / pl->L;
        return TR_OK;
    }
    int q = 0;
    for (int i = 0; i < m; i++)
        if (is[i] == 1) q = i;
    pl->mode = 3;
    pl->q = q;
    pl->nq = ext[q];
    pl->nl = ext[m - 1];
    pl->tq = (pl->nq + TILE - 1) / TILE;
    pl->tl = (pl->nl + TILE - 1) / TILE;
    pl->items = n / (pl->nq * pl->nl) * pl->tq;
    return TR_OK;
}

static void transpose_compute(struct tr_kernels *k, const void *plan) {
    (void)k;
    const struct transpose_plan *pl = plan;
    const int64_t n = pl->n, es = (int64_t)pl->es;
    const char *px = pl->px;
    char *po = pl->po;
    const int m = pl->m;
    const int64_t *ext = pl->ext, *is = pl->is, *os = pl->os;
    if (pl->mode == 0) return;
    if (pl->mode == 1) {
        memcpy(po, px, (size_t)(n * es));
        return;
    }
    if (pl->mode == 2) { /* the innermost axis stays innermost: rows of contiguous copies */
        const int64_t L = pl->L, rows = pl->rows;
#pragma omp parallel for schedule(static) if (n > TR_CPU_PAR_MIN)
        for (int64_t r = 0; r < rows; r++) {
            int64_t off = 0, rem = r;
            for (int d = m - 2; d >= 0; d--) {
                off += (rem % ext[d]) * is[d];
                rem /= ext[d];
            }
            memcpy(po + r * L * es, px + off * es, (size_t)(L * es));
        }
        return;
    }
    /* x's innermost axis is output axis q: tile the (q, last) plane */
    const int q = pl->q;
    const int64_t nq = pl->nq, nl = pl->nl, tq = pl->tq, tl = pl->tl, items = pl->items;
#pragma omp parallel for schedule(static) if (n > TR_CPU_PAR_MIN)
    for (int64_t it = 0; it < items; it++) {
        int64_t o = it / tq, qb = (it % tq) * TILE, rem = o, oi = 0, oo = 0;
        for (int d = m - 2; d >= 0; d--) {
            if (d == q) continue;
            int64_t idx = rem % ext[d];
            rem /= ext[d];
            oi += idx * is[d];
            oo += idx * os[d];
        }
        int64_t cq = nq - qb < TILE ? nq - qb : TILE;
        for (int64_t j = 0; j < tl; j++) {
            int64_t lb = j * TILE, cl = nl - lb < TILE ? nl - lb : TILE;
            int64_t io = oi + qb + lb * is[m - 1], ooff = oo + qb * os[q] + lb;
            const char *src = px + io * es;
            char *dst = po + ooff * es;
            if (es == 2) TILE_COPY(uint16_t, dst, src, cq, cl, os[q], is[m - 1]);
            else if (es == 4) TILE_COPY(uint32_t, dst, src, cq, cl, os[q], is[m - 1]);
            else TILE_COPY(uint64_t, dst, src, cq, cl, os[q], is[m - 1]);
        }
    }
}

int tr_k_transpose(struct tr_kernels *k, const struct tr_tensor *x, const int64_t *perm, struct tr_tensor *out,
                   struct tr_error *err) {
    TR_CUDA_ROUTE(k, tr_cuda_k_transpose(k, x, perm, out, err));
    struct transpose_plan pl;
    int rc = tr_cpu_check_ctx(k, "transpose", err);
    if (!rc) rc = transpose_check(x, perm, out, &pl, err);
    return tr_cpu_compute_now(k, rc, transpose_compute, &pl);
}

int tr_cpu_transpose_bind(struct tr_kernels *k, struct tr_kernel_call *c, struct tr_error *err) {
    struct transpose_plan pl;
    int rc = tr_cpu_check_ctx_bind(k, "transpose", err);
    if (!rc) rc = transpose_check(&c->in[0], c->attrs.ints, &c->out, &pl, err);
    return rc ? rc : tr_cpu_keep_compute(c, &pl, sizeof pl, transpose_compute, "transpose", err);
}

/* ---- slice ---- */

struct slice_plan {
    struct tr_cpu_prepared hdr;
    int64_t outer, inner, cnt, dim, start, step, n; /* inner in bytes */
    const char *px;
    char *po;
};

static int slice_check(const struct tr_tensor *x, int axis, int64_t start, int64_t step, const struct tr_tensor *out,
                       struct slice_plan *pl, struct tr_error *err) {
    int rc = tr_cpu_check_tensor(x, "slice", "x", err);
    if (!rc) rc = tr_cpu_check_tensor(out, "slice", "out", err);
    if (!rc) rc = same_dtype(x, out, "slice", err);
    if (rc) return rc;
    char d1[200], d2[200];
    int ax = tr_cpu_axis(axis, x->ndim);
    if (ax < 0) return tr_error_set(err, TR_ERR_INVALID, "slice: axis %d out of range for x %s", axis, tr_cpu_desc(x, d1, sizeof d1));
    if (step < 1) return tr_error_set(err, TR_ERR_INVALID, "slice: step %lld (it must be > 0)", (long long)step);
    int ok = out->ndim == x->ndim;
    for (int i = 0; ok && i < x->ndim; i++)
        if (i != ax && out->shape[i] != x->shape[i]) ok = 0;
    if (!ok)
        return tr_error_set(err, TR_ERR_SHAPE, "slice: out %s should equal x %s except on axis %d",
                            tr_cpu_desc(out, d1, sizeof d1), tr_cpu_desc(x, d2, sizeof d2), ax);
    int64_t cnt = out->shape[ax], dim = x->shape[ax];
    if (cnt > 0 && (start < 0 || start >= dim || (dim - 1 - start) / step < cnt - 1))
        return tr_error_set(err, TR_ERR_SHAPE, "slice: %lld elements from %lld by %lld leave axis %d of x %s",
                            (long long)cnt, (long long)start, (long long)step, ax, tr_cpu_desc(x, d1, sizeof d1));
    size_t es = tr_dtype_size((enum tr_dtype)x->dtype);
    memset(pl, 0, sizeof *pl);
    pl->outer = tr_shape_numel(ax, x->shape);
    pl->inner = tr_shape_numel(x->ndim - ax - 1, x->shape + ax + 1) * (int64_t)es;
    pl->cnt = cnt;
    pl->dim = dim;
    pl->start = start;
    pl->step = step;
    pl->n = pl->outer * cnt;
    pl->px = x->data;
    pl->po = out->data;
    return TR_OK;
}

static void slice_compute(struct tr_kernels *k, const void *plan) {
    (void)k;
    const struct slice_plan *pl = plan;
    const int64_t outer = pl->outer, inner = pl->inner, cnt = pl->cnt, dim = pl->dim, start = pl->start;
    const int64_t step = pl->step, n = pl->n;
    const char *px = pl->px;
    char *po = pl->po;
    if (n == 0 || inner == 0) return;
    if (step == 1) {
#pragma omp parallel for schedule(static) if (n * inner > 4 * TR_CPU_PAR_MIN && outer > 1)
        for (int64_t o = 0; o < outer; o++)
            memcpy(po + o * cnt * inner, px + (o * dim + start) * inner, (size_t)(cnt * inner));
        return;
    }
#pragma omp parallel for schedule(static) if (n * inner > 4 * TR_CPU_PAR_MIN)
    for (int64_t r = 0; r < n; r++) {
        int64_t o = r / cnt, t = r % cnt;
        memcpy(po + r * inner, px + (o * dim + start + t * step) * inner, (size_t)inner);
    }
}

int tr_k_slice(struct tr_kernels *k, const struct tr_tensor *x, int axis, int64_t start, int64_t step,
               struct tr_tensor *out, struct tr_error *err) {
    TR_CUDA_ROUTE(k, tr_cuda_k_slice(k, x, axis, start, step, out, err));
    struct slice_plan pl;
    int rc = tr_cpu_check_ctx(k, "slice", err);
    if (!rc) rc = slice_check(x, axis, start, step, out, &pl, err);
    return tr_cpu_compute_now(k, rc, slice_compute, &pl);
}

int tr_cpu_slice_bind(struct tr_kernels *k, struct tr_kernel_call *c, struct tr_error *err) {
    struct slice_plan pl;
    const struct tr_attrs *at = &c->attrs;
    int rc = tr_cpu_check_ctx_bind(k, "slice", err);
    if (!rc) rc = slice_check(&c->in[0], (int)at->ints[0], at->ints[1], at->ints[3], &c->out, &pl, err);
    return rc ? rc : tr_cpu_keep_compute(c, &pl, sizeof pl, slice_compute, "slice", err);
}

/* ---- concat ---- */

/* The inputs' rows (bytes per outer index) are the plan's up to TR_KERNEL_CALL_MAX_IN
 * inputs (a bound call's most); tr_k_concat's longer lists read them from the inputs. */
struct concat_plan {
    struct tr_cpu_prepared hdr;
    int n, ax;
    int64_t outer, inner, orow;
    char *po;
    const char *src[TR_KERNEL_CALL_MAX_IN];
    int64_t row[TR_KERNEL_CALL_MAX_IN];
};

static int concat_check(int n, const struct tr_tensor *xs, int axis, const struct tr_tensor *out,
                        struct concat_plan *pl, struct tr_error *err) {
    int rc = tr_cpu_check_tensor(out, "concat", "out", err);
    if (rc) return rc;
    if (n < 1 || !xs) return tr_error_set(err, TR_ERR_INVALID, "concat: %d inputs (at least 1 needed)", n);
    char d1[200], d2[200], what[32];
    int ax = tr_cpu_axis(axis, out->ndim);
    if (ax < 0)
        return tr_error_set(err, TR_ERR_INVALID, "concat: axis %d out of range for out %s", axis, tr_cpu_desc(out, d1, sizeof d1));
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        snprintf(what, sizeof what, "input %d", i);
        rc = tr_cpu_check_tensor(&xs[i], "concat", what, err);
        if (!rc) rc = same_dtype(&xs[i], out, "concat", err);
        if (rc) return rc;
        int ok = xs[i].ndim == out->ndim;
        for (int d = 0; ok && d < out->ndim; d++)
            if (d != ax && xs[i].shape[d] != out->shape[d]) ok = 0;
        if (!ok)
            return tr_error_set(err, TR_ERR_SHAPE, "concat: input %d %s should equal out %s except on axis %d", i,
                                tr_cpu_desc(&xs[i], d1, sizeof d1), tr_cpu_desc(out, d2, sizeof d2), ax);
        total += xs[i].shape[ax];
    }
    if (total != out->shape[ax])
        return tr_error_set(err, TR_ERR_SHAPE, "concat: inputs add up to %lld on axis %d, out %s has %lld", (long long)total,
                            ax, tr_cpu_desc(out, d1, sizeof d1), (long long)out->shape[ax]);
    size_t es = tr_dtype_size((enum tr_dtype)out->dtype);
    memset(pl, 0, sizeof *pl);
    pl->n = n;
    pl->ax = ax;
    pl->outer = tr_shape_numel(ax, out->shape);
    pl->inner = tr_shape_numel(out->ndim - ax - 1, out->shape + ax + 1) * (int64_t)es;
    pl->orow = out->shape[ax] * pl->inner;
    pl->po = out->data;
    for (int i = 0; i < n && i < TR_KERNEL_CALL_MAX_IN; i++) {
        pl->src[i] = xs[i].data;
        pl->row[i] = xs[i].shape[ax] * pl->inner;
    }
    return TR_OK;
}

/* xs: the inputs when there are more than the plan holds, else NULL. */
static void concat_compute(const struct concat_plan *pl, const struct tr_tensor *xs) {
    const int n = pl->n, ax = pl->ax;
    const int64_t outer = pl->outer, orow = pl->orow, inner = pl->inner;
    char *po = pl->po;
    int64_t nbytes = outer * orow;
#pragma omp parallel for schedule(static) if (nbytes > 4 * TR_CPU_PAR_MIN && outer > 1)
    for (int64_t o = 0; o < outer; o++) {
        int64_t off = 0;
        for (int i = 0; i < n; i++) {
            int64_t row = xs ? xs[i].shape[ax] * inner : pl->row[i];
            const char *src = xs ? (const char *)xs[i].data : pl->src[i];
            if (row) memcpy(po + o * orow + off, src + o * row, (size_t)row);
            off += row;
        }
    }
}

static int concat_call(struct tr_kernels *k, const struct tr_kernel_call *c, struct tr_error *err) {
    (void)err;
    k->stats.calls++;
    concat_compute(c->prepared, NULL);
    return TR_OK;
}

int tr_k_concat(struct tr_kernels *k, int n, const struct tr_tensor *xs, int axis, struct tr_tensor *out,
                struct tr_error *err) {
    TR_CUDA_ROUTE(k, tr_cuda_k_concat(k, n, xs, axis, out, err));
    struct concat_plan pl;
    int rc = tr_cpu_check_ctx(k, "concat", err);
    if (!rc) rc = concat_check(n, xs, axis, out, &pl, err);
    if (rc) return rc;
    concat_compute(&pl, n > TR_KERNEL_CALL_MAX_IN ? xs : NULL);
    return TR_OK;
}

int tr_cpu_concat_bind(struct tr_kernels *k, struct tr_kernel_call *c, struct tr_error *err) {
    struct concat_plan pl;
    int rc = tr_cpu_check_ctx_bind(k, "concat", err);
    if (!rc) rc = concat_check(c->n_in, c->in, (int)c->attrs.ints[0], &c->out, &pl, err);
    return rc ? rc : tr_cpu_keep_plan(c, &pl, sizeof pl, concat_call, "concat", err);
}

/* ---- reduce ---- */

/* out[c] = op over r < R of x[r*inner + c], for c < len (f32 accumulation). f32 rows are
 * read in place: a copy of each into a buffer first was a third of the time of BERT's
 * bias-gradient sums (perf: memmove under reduce_compute, 1.1% of a fit step). */
TR_CPU_MULTI(void, reduce_cols, (int op, int dt, const char *x, int64_t R, int64_t inner, int64_t len, char *o), (op, dt, x, R, inner, len, o)) {
    size_t es = tr_dtype_size((enum tr_dtype)dt);
    float acc[TR_CPU_CHUNK], buf[TR_CPU_CHUNK];
    for (int64_t c = 0; c < len; c++) acc[c] = op == TR_OP_MAX ? -INFINITY : 0.0f;
    for (int64_t r = 0; r < R; r++) {
        const float *row = (const float *)(x + r * inner * (int64_t)es);
        if (dt != TR_DTYPE_F32) {
            tr_cpu_load_f32(buf, x + r * inner * (int64_t)es, dt, len);
            row = buf;
        }
        if (op == TR_OP_MAX)
            for (int64_t c = 0; c < len; c++) acc[c] = row[c] > acc[c] || row[c] != row[c] ? row[c] : acc[c];
        else
            for (int64_t c = 0; c < len; c++) acc[c] += row[c];
    }
    if (op == TR_OP_MEAN)
        for (int64_t c = 0; c < len; c++) acc[c] /= (float)R;
    tr_cpu_store_f32(o, dt, acc, len);
}

/* out = op over the R contiguous elements of x. */
TR_CPU_MULTI(void, reduce_row, (int op, int dt, const char *x, int64_t R, char *o), (op, dt, x, R, o)) {
    size_t es = tr_dtype_size((enum tr_dtype)dt);
    float buf[TR_CPU_CHUNK], acc = op == TR_OP_MAX ? -INFINITY : 0.0f;
    int nan = 0; /* a NaN is the max, as torch's amax says: max() itself drops it */
    for (int64_t i = 0; i < R; i += TR_CPU_CHUNK) {
        int64_t len = R - i < TR_CPU_CHUNK ? R - i : TR_CPU_CHUNK;
        tr_cpu_load_f32(buf, x + i * (int64_t)es, dt, len);
        if (op == TR_OP_MAX) {
#pragma omp simd reduction(max : acc) reduction(| : nan)
            for (int64_t c = 0; c < len; c++) {
                acc = buf[c] > acc ? buf[c] : acc;
                nan |= buf[c] != buf[c];
            }
        } else {
#pragma omp simd reduction(+ : acc)
            for (int64_t c = 0; c < len; c++) acc += buf[c];
        }
    }
    if (op == TR_OP_MEAN) acc /= (float)R;
    if (nan) acc = NAN;
    tr_cpu_store_f32(o, dt, &acc, 1);
}

struct reduce_plan {
    struct tr_cpu_prepared hdr;
    int op, dt;
    int64_t outer, R, inner;
    size_t es;
    const char *px;
    char *po;
};

static int reduce_check(int op, const struct tr_tensor *x, int axis, const struct tr_tensor *out,
                        struct reduce_plan *pl, struct tr_error *err) {
    if (op != TR_OP_SUM && op != TR_OP_MEAN && op != TR_OP_MAX)
        return tr_error_set(err, TR_ERR_INVALID, "reduce: op %d (%s) is not sum, mean or max", op, tr_op_name(op));
    const char *name = tr_op_name(op);
    int rc = tr_cpu_check_float(x, name, "x", err);
    if (!rc) rc = tr_cpu_check_float(out, name, "out", err);
    if (!rc) rc = same_dtype(x, out, name, err);
    if (rc) return rc;
    char d1[200], d2[200];
    int ax = tr_cpu_axis(axis, x->ndim);
    if (ax < 0) return tr_error_set(err, TR_ERR_INVALID, "%s: axis %d out of range for x %s", name, axis, tr_cpu_desc(x, d1, sizeof d1));
    /* out is x without the axis, or with it kept as 1 */
    int kept = out->ndim == x->ndim;
    if (!tr_cpu_is_reduced(x, ax, out, kept))
        return tr_error_set(err, TR_ERR_SHAPE, "%s: out %s should be x %s without axis %d (or with it as 1)", name,
                            tr_cpu_desc(out, d1, sizeof d1), tr_cpu_desc(x, d2, sizeof d2), ax);
    memset(pl, 0, sizeof *pl);
    pl->op = op;
    pl->dt = x->dtype;
    pl->outer = tr_shape_numel(ax, x->shape);
    pl->R = x->shape[ax];
    pl->inner = tr_shape_numel(x->ndim - ax - 1, x->shape + ax + 1);
    pl->es = tr_dtype_size((enum tr_dtype)x->dtype);
    pl->px = x->data;
    pl->po = out->data;
    if (pl->outer * pl->inner != 0 && pl->R == 0 && op == TR_OP_MAX)
        return tr_error_set(err, TR_ERR_SHAPE, "max: axis %d of x %s is empty", ax, tr_cpu_desc(x, d1, sizeof d1));
    return TR_OK;
}

static void reduce_compute(struct tr_kernels *k, const void *plan) {
    (void)k;
    const struct reduce_plan *pl = plan;
    const int64_t outer = pl->outer, R = pl->R, inner = pl->inner, es = (int64_t)pl->es;
    const int op = pl->op, dt = pl->dt;
    const char *px = pl->px;
    char *po = pl->po;
    if (outer * inner == 0) return;
    int64_t work = outer * R * inner;
    if (inner == 1) {
#pragma omp parallel for schedule(static) if (work > TR_CPU_PAR_MIN && outer > 1)
        for (int64_t o = 0; o < outer; o++) reduce_row(op, dt, px + o * R * es, R, po + o * es);
        return;
    }
    int64_t nch = (inner + TR_CPU_CHUNK - 1) / TR_CPU_CHUNK, items = outer * nch;
#pragma omp parallel for schedule(static) if (work > TR_CPU_PAR_MIN && items > 1)
    for (int64_t it = 0; it < items; it++) {
        int64_t o = it / nch, c0 = (it % nch) * TR_CPU_CHUNK, len = inner - c0 < TR_CPU_CHUNK ? inner - c0 : TR_CPU_CHUNK;
        reduce_cols(op, dt, px + (o * R * inner + c0) * es, R, inner, len, po + (o * inner + c0) * es);
    }
}

int tr_k_reduce(struct tr_kernels *k, int op, const struct tr_tensor *x, int axis, struct tr_tensor *out,
                struct tr_error *err) {
    TR_CUDA_ROUTE(k, tr_cuda_k_reduce(k, op, x, axis, out, err));
    struct reduce_plan pl;
    int rc = tr_cpu_check_ctx(k, "reduce", err);
    if (!rc) rc = reduce_check(op, x, axis, out, &pl, err);
    return tr_cpu_compute_now(k, rc, reduce_compute, &pl);
}

int tr_cpu_reduce_bind(struct tr_kernels *k, struct tr_kernel_call *c, struct tr_error *err) {
    struct reduce_plan pl;
    int rc = tr_cpu_check_ctx_bind(k, "reduce", err);
    if (!rc) rc = reduce_check(c->op, &c->in[0], (int)c->attrs.ints[0], &c->out, &pl, err);
    return rc ? rc : tr_cpu_keep_compute(c, &pl, sizeof pl, reduce_compute, "reduce", err);
}

/* ---- cast ---- */

/* f64 to f32 rounded to odd: a second rounding (to bf16 or f16) is then correct. */
static inline float f64_to_f32_odd(double d) {
    float f = (float)d;
    if (!isfinite(f) || (double)f == d) return f;
    uint32_t u;
    memcpy(&u, &f, 4);
    if (fabs((double)f) > fabs(d)) u -= 1; /* truncate toward zero */
    u |= 1;
    memcpy(&f, &u, 4);
    return f;
}

static inline double float_to_int_range(double v, double lo, double hi) {
    if (v != v) return 0.0; /* NaN */
    v = trunc(v);
    return v < lo ? lo : v > hi ? hi : v;
}

static void decode_f64(double *dst, const char *src, int dt, int64_t n) {
    switch (dt) {
    case TR_DTYPE_F32: for (int64_t i = 0; i < n; i++) dst[i] = ((const float *)src)[i]; break;
    case TR_DTYPE_BF16: for (int64_t i = 0; i < n; i++) dst[i] = tr_bf16_to_f32(((const uint16_t *)src)[i]); break;
    case TR_DTYPE_F16: for (int64_t i = 0; i < n; i++) dst[i] = tr_f16_to_f32(((const uint16_t *)src)[i]); break;
    case TR_DTYPE_I32: for (int64_t i = 0; i < n; i++) dst[i] = ((const int32_t *)src)[i]; break;
    case TR_DTYPE_I64: for (int64_t i = 0; i < n; i++) dst[i] = (double)((const int64_t *)src)[i]; break;
    default: memcpy(dst, src, (size_t)n * sizeof(double)); break;
    }
}

static void encode_f64(char *dst, int dt, const double *src, int64_t n) {
    switch (dt) {
    case TR_DTYPE_F32: for (int64_t i = 0; i < n; i++) ((float *)dst)[i] = (float)src[i]; break;
    case TR_DTYPE_BF16:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = tr_f32_to_bf16(f64_to_f32_odd(src[i]));
        break;
    case TR_DTYPE_F16:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = tr_f32_to_f16(f64_to_f32_odd(src[i]));
        break;
    case TR_DTYPE_I32:
        for (int64_t i = 0; i < n; i++) ((int32_t *)dst)[i] = (int32_t)float_to_int_range(src[i], INT32_MIN, INT32_MAX);
        break;
    case TR_DTYPE_I64:
        /* 2^63 is not an int64: the top of the range is the double just below it */
        for (int64_t i = 0; i < n; i++)
            ((int64_t *)dst)[i] = (int64_t)float_to_int_range(src[i], -9223372036854775808.0, 9223372036854774784.0);
        break;
    default: memcpy(dst, src, (size_t)n * sizeof(double)); break;
    }
}

static void cast_block(int sdt, const char *src, int ddt, char *dst, int64_t n) {
    int sf = tr_dtype_is_float((enum tr_dtype)sdt), df = tr_dtype_is_float((enum tr_dtype)ddt);
    if (!sf && !df) { /* i32 <-> i64: exact, or wrapping as C does when narrowing */
        if (sdt == TR_DTYPE_I32)
            for (int64_t i = 0; i < n; i++) ((int64_t *)dst)[i] = ((const int32_t *)src)[i];
        else
            for (int64_t i = 0; i < n; i++) ((int32_t *)dst)[i] = (int32_t)((const int64_t *)src)[i];
        return;
    }
    int s16 = sdt == TR_DTYPE_BF16 || sdt == TR_DTYPE_F16, d16 = ddt == TR_DTYPE_BF16 || ddt == TR_DTYPE_F16;
    if (sdt == TR_DTYPE_F32 && d16) { /* the common mixed-precision casts, directly */
        tr_cpu_store_f32(dst, ddt, (const float *)src, n);
        return;
    }
    if (s16 && ddt == TR_DTYPE_F32) {
        tr_cpu_load_f32((float *)dst, src, sdt, n);
        return;
    }
    double buf[TR_CPU_CHUNK];
    decode_f64(buf, src, sdt, n);
    encode_f64(dst, ddt, buf, n);
}

struct cast_plan {
    struct tr_cpu_prepared hdr;
    int sdt, ddt;
    int64_t n;
    size_t ses, des;
    const char *px;
    char *po;
};

static int cast_check(const struct tr_tensor *x, const struct tr_tensor *out, struct cast_plan *pl,
                      struct tr_error *err) {
    int rc = tr_cpu_check_tensor(x, "cast", "x", err);
    if (!rc) rc = tr_cpu_check_tensor(out, "cast", "out", err);
    if (rc) return rc;
    char d1[200], d2[200];
    if (!tr_cpu_same_shape(x, out))
        return tr_error_set(err, TR_ERR_SHAPE, "cast: x %s and out %s should have the same shape",
                            tr_cpu_desc(x, d1, sizeof d1), tr_cpu_desc(out, d2, sizeof d2));
    memset(pl, 0, sizeof *pl);
    pl->n = tr_tensor_numel(x);
    pl->ses = tr_dtype_size((enum tr_dtype)x->dtype);
    pl->des = tr_dtype_size((enum tr_dtype)out->dtype);
    pl->sdt = x->dtype;
    pl->ddt = out->dtype;
    pl->px = x->data;
    pl->po = out->data;
    return TR_OK;
}

static void cast_compute(struct tr_kernels *k, const void *plan) {
    (void)k;
    const struct cast_plan *pl = plan;
    const int64_t n = pl->n;
    const size_t ses = pl->ses, des = pl->des;
    const int sdt = pl->sdt, ddt = pl->ddt;
    const char *px = pl->px;
    char *po = pl->po;
    if (n == 0) return;
    if (sdt == ddt) {
        if (po != px) memcpy(po, px, (size_t)n * ses);
        return;
    }
#pragma omp parallel for schedule(static) if (n > TR_CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i += TR_CPU_CHUNK) {
        int64_t len = n - i < TR_CPU_CHUNK ? n - i : TR_CPU_CHUNK;
        cast_block(sdt, px + i * (int64_t)ses, ddt, po + i * (int64_t)des, len);
    }
}

int tr_k_cast(struct tr_kernels *k, const struct tr_tensor *x, struct tr_tensor *out, struct tr_error *err) {
    TR_CUDA_ROUTE(k, tr_cuda_k_cast(k, x, out, err));
    struct cast_plan pl;
    int rc = tr_cpu_check_ctx(k, "cast", err);
    if (!rc) rc = cast_check(x, out, &pl, err);
    return tr_cpu_compute_now(k, rc, cast_compute, &pl);
}

int tr_cpu_cast_bind(struct tr_kernels *k, struct tr_kernel_call *c, struct tr_error *err) {
    struct cast_plan pl;
    int rc = tr_cpu_check_ctx_bind(k, "cast", err);
    if (!rc) rc = cast_check(&c->in[0], &c->out, &pl, err);
    return rc ? rc : tr_cpu_keep_compute(c, &pl, sizeof pl, cast_compute, "cast", err);
}
