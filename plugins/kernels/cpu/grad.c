/* Kernels of the training ops of ops.h (UNARY_GRAD ... SLICE_GRAD): the vector–Jacobian
 * products reverse-mode autodiff emits, and the layout ops it needs (broadcast).
 *
 * Every kernel computes in f64 whatever the storage dtype (f32, bf16, f16 or f64): one
 * code path, exact enough for the f64 gradient checks of the autodiff work, and never
 * less than the f32 accumulation kernels.h promises; f32/bf16/f16 are rounded to nearest
 * even once, on store. Sums that gather many inputs into one output (dgamma over rows,
 * the embedding over ids, dk/dv over queries and query heads) are partitioned by output
 * element, never by input: no two threads add into one place, and the result does not
 * depend on the thread count. */
#include <stdlib.h>
#include "grad_internal.h"

#define CH TR_CPU_CHUNK

/* Short names for the helpers of grad_internal.h. */
#define load_f64 tr_grad_load
#define store_f64 tr_grad_store
#define get_f64 tr_grad_get
#define check_real tr_grad_check_real
#define check_like tr_cpu_check_like

static inline size_t esize(int dt) { return tr_dtype_size((enum tr_dtype)dt); }

/* An elementwise gradient's tensors: x (named xn), dy and dx real, dy and dx shaped as x. */
static int check_pointwise(const char *kn, const struct tr_tensor *x, const char *xn, const struct tr_tensor *dy,
                           const struct tr_tensor *dx, struct tr_error *err) {
    int rc = check_real(x, kn, xn, err);
    if (!rc) rc = check_real(dy, kn, "dy", err);
    if (!rc) rc = check_real(dx, kn, "dx", err);
    if (!rc) rc = check_like(kn, x, xn, dy, "dy", err);
    if (!rc) rc = check_like(kn, x, xn, dx, "dx", err);
    return rc;
}

/* The operands of a row kernel as its row function (tr_cpu_rows) reads them. */
struct grad_rows {
    const char *a, *g; /* rows of D: x (or y), and dy */
    char *o;
    int dt;
    int64_t D;
    double eps;
    const double *gam;             /* layer_norm_grad: gamma, 1 where absent */
    double *stats;                 /* layer_norm_grad_gamma: mean and rstd per row */
    const int64_t *start, *order;  /* embedding_grad: the positions of each id */
};

/* Scratch for a row kernel: `shared` doubles, and `per_thread` doubles of row buffers. */
static int reserve_f64(struct tr_kernels *k, int64_t shared, int64_t per_thread, const char *kn, struct tr_error *err) {
    return tr_cpu_scratch_reserve(k, sizeof(double) * (size_t)shared, sizeof(double) * (size_t)per_thread, kn, err);
}

/* ---- unary_grad: dx = dy · f'(x) ---- */

static double dgelu_erf(double x) { /* Φ(x) + x·φ(x) */
    return 0.5 * erfc(-x * 0.70710678118654752440) + x * tr_grad_exp(-0.5 * x * x) * 0.39894228040143267794;
}

static double dgelu_tanh(double x) { /* d/dx x/2·(1+tanh u), u = c(x + 0.044715x³) */
    const double c = 0.79788456080286535588, a = 0.044715;
    double t = tanh(c * (x + a * x * x * x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * a * x * x);
}

static void unary_grad_block(int op, int approx, double alpha, const double *x, double *g, int64_t m) {
    for (int64_t i = 0; i < m; i++) {
        double v = x[i], d;
        switch (op) {
        case TR_OP_GELU: d = approx ? dgelu_tanh(v) : dgelu_erf(v); break;
        case TR_OP_TANH: d = tanh(v), d = 1.0 - d * d; break;
        case TR_OP_RELU: d = v > 0.0 ? 1.0 : 0.0; break;
        case TR_OP_SILU: d = 1.0 / (1.0 + tr_grad_exp(-v)), d = d * (1.0 + v * (1.0 - d)); break;
        case TR_OP_SIGMOID: d = 1.0 / (1.0 + tr_grad_exp(-v)), d = d * (1.0 - d); break;
        case TR_OP_EXP: d = tr_grad_exp(v); break;
        case TR_OP_NEG: d = -1.0; break;
        case TR_OP_SQRT: d = 0.5 / sqrt(v); break;
        case TR_OP_RSQRT: d = -0.5 / (v * sqrt(v)); break;
        default: d = alpha; break; /* SCALE */
        }
        g[i] *= d;
    }
}

/* The same in f32 for f32, bf16 and f16 data (f64 keeps the double path above, for the
 * finite-difference checks): the forward's vector exp, erfc and tanh, a loop per op so
 * that each vectorises (the double path's libm erfc made GELU's gradient 20x its
 * forward: a tenth of BERT's fit step on the cpu). */
#define GRAD_LOOP(expr)                                                    \
    for (int64_t i = 0; i < m; i++) {                                      \
        const float v = fx[i];                                             \
        (void)v;                                                           \
        fo[i] = fg[i] * (expr);                                            \
    }
TR_CPU_MULTI(void, unary_grad_block_f32, (int op, int approx, float alpha, int dt, const void *x, const void *dy, void *dx, int64_t m), (op, approx, alpha, dt, x, dy, dx, m)) {
    float xb[CH], gb[CH], ob[CH];
    const float *fx = x, *fg = dy;
    float *fo = dx;
    if (dt != TR_DTYPE_F32) {
        tr_cpu_load_f32(xb, x, dt, m);
        tr_cpu_load_f32(gb, dy, dt, m);
        fx = xb, fg = gb, fo = ob;
    }
    switch (op) {
    case TR_OP_GELU:
        if (approx) GRAD_LOOP(tr_fdgelu_tanh(v)) else GRAD_LOOP(tr_fdgelu_erf(v))
        break;
    case TR_OP_TANH: GRAD_LOOP(1.0f - tr_ftanh(v) * tr_ftanh(v)) break;
    case TR_OP_RELU: GRAD_LOOP(v > 0.0f ? 1.0f : 0.0f) break;
    case TR_OP_SILU: GRAD_LOOP(tr_fsigmoid(v) * (1.0f + v * (1.0f - tr_fsigmoid(v)))) break;
    case TR_OP_SIGMOID: GRAD_LOOP(tr_fsigmoid(v) * (1.0f - tr_fsigmoid(v))) break;
    case TR_OP_EXP: GRAD_LOOP(tr_fexp(v)) break;
    case TR_OP_NEG: GRAD_LOOP(-1.0f) break;
    case TR_OP_SQRT: GRAD_LOOP(0.5f / sqrtf(v)) break;
    case TR_OP_RSQRT: GRAD_LOOP(-0.5f / (v * sqrtf(v))) break;
    default: GRAD_LOOP(alpha) break; /* SCALE */
    }
    (void)isa;
    if (dt != TR_DTYPE_F32) tr_cpu_store_f32(dx, dt, ob, m);
}
#undef GRAD_LOOP

int tr_k_unary_grad(struct tr_kernels *k, int op, int approximate, float alpha, const struct tr_tensor *x,
                    const struct tr_tensor *dy, struct tr_tensor *dx, struct tr_error *err) {
    TR_CUDA_ROUTE(k, tr_cuda_k_unary_grad(k, op, approximate, alpha, x, dy, dx, err));
    const char *kn = "unary_grad";
    int rc = tr_cpu_check_ctx(k, kn, err);
    if (rc) return rc;
    if (!tr_op_is_elementwise_unary(op))
        return tr_error_set(err, TR_ERR_INVALID, "unary_grad: ints[0]=%d (%s) is not one of gelu tanh relu silu sigmoid "
                            "exp neg sqrt rsqrt scale", op, tr_op_name(op));
    if (op == TR_OP_GELU && approximate != 0 && approximate != 1)
        return tr_error_set(err, TR_ERR_INVALID, "unary_grad: gelu's ints[1]=%d (0: erf form, 1: tanh approximation)",
                            approximate);
    if ((rc = check_pointwise(kn, x, "x", dy, dx, err)) != TR_OK) return rc;
    int64_t n = tr_tensor_numel(x);
    size_t es = esize(x->dtype);
    int dt = x->dtype;
    const char *px = x->data, *pg = dy->data;
    char *po = dx->data;
    if (dt != TR_DTYPE_F64) {
#pragma omp parallel for schedule(static) if (n > TR_CPU_PAR_MIN)
        for (int64_t i = 0; i < n; i += CH)
            unary_grad_block_f32(op, approximate, alpha, dt, px + i * (int64_t)es, pg + i * (int64_t)es,
                                 po + i * (int64_t)es, n - i < CH ? n - i : CH);
        return TR_OK;
    }
#pragma omp parallel for schedule(static) if (n > TR_CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i += CH) {
        double xb[CH], gb[CH];
        int64_t len = n - i < CH ? n - i : CH;
        load_f64(xb, px + i * (int64_t)es, dt, len);
        load_f64(gb, pg + i * (int64_t)es, dt, len);
        unary_grad_block(op, approximate, alpha, xb, gb, len);
        store_f64(po + i * (int64_t)es, dt, gb, len);
    }
    return TR_OK;
}

/* ---- softmax_grad: dx = y·(dy − Σ dy·y) per row ---- */

static void softmax_grad_rows(const void *ctx, int64_t r0, int64_t r1, void *buf) {
    const struct grad_rows *A = ctx;
    const int64_t D = A->D;
    const size_t es = esize(A->dt);
    double *restrict yb = buf, *restrict gb = yb + D;
    for (int64_t r = r0; r < r1; r++) {
        load_f64(yb, A->a + r * D * (int64_t)es, A->dt, D);
        load_f64(gb, A->g + r * D * (int64_t)es, A->dt, D);
        double s = 0.0;
        for (int64_t i = 0; i < D; i++) s += yb[i] * gb[i];
        for (int64_t i = 0; i < D; i++) gb[i] = yb[i] * (gb[i] - s);
        store_f64(A->o + r * D * (int64_t)es, A->dt, gb, D);
    }
}

int tr_k_softmax_grad(struct tr_kernels *k, const struct tr_tensor *y, const struct tr_tensor *dy,
                      struct tr_tensor *dx, struct tr_error *err) {
    TR_CUDA_ROUTE(k, tr_cuda_k_softmax_grad(k, y, dy, dx, err));
    const char *kn = "softmax_grad";
    int rc = tr_cpu_check_ctx(k, kn, err);
    if (!rc) rc = check_pointwise(kn, y, "y", dy, dx, err);
    if (rc) return rc;
    int64_t D = y->ndim ? y->shape[y->ndim - 1] : 1, n = tr_tensor_numel(y);
    if (n == 0 || D == 0) return TR_OK;
    int64_t rows = n / D;
    if ((rc = reserve_f64(k, 0, 2 * D, kn, err)) != TR_OK) return rc;
    const struct grad_rows A = {.a = y->data, .g = dy->data, .o = dx->data, .dt = y->dtype, .D = D};
    tr_cpu_rows(k, rows, 1, n > TR_CPU_PAR_MIN, softmax_grad_rows, &A);
    return TR_OK;
}

/* ---- layer norm backward ---- */

/* mean and 1/sqrt(var + eps) of a row, biased variance as the forward. The sums in vector
 * lanes (a row's order is fixed: the same bits whatever the threads). */
static inline __attribute__((always_inline)) void row_stats(const double *x, int64_t D, double eps, double *mean,
                                                           double *rstd) {
    double s = 0.0, v = 0.0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < D; i++) s += x[i];
    double mu = s / (double)D;
#pragma omp simd reduction(+ : v)
    for (int64_t i = 0; i < D; i++) v += (x[i] - mu) * (x[i] - mu);
    *mean = mu;
    *rstd = 1.0 / sqrt(v / (double)D + eps);
}

/* One row of dx (ln_grad_rows): xb becomes x̂, gb dx. */
static inline __attribute__((always_inline)) void ln_grad_row(const double *restrict gam, double *restrict xb,
                                                             double *restrict gb, int64_t D, double eps) {
    double mu, rs, mg = 0.0, mgx = 0.0;
    row_stats(xb, D, eps, &mu, &rs);
#pragma omp simd reduction(+ : mg, mgx)
    for (int64_t i = 0; i < D; i++) {
        xb[i] = (xb[i] - mu) * rs;
        gb[i] *= gam[i];
        mg += gb[i];
        mgx += gb[i] * xb[i];
    }
    mg /= (double)D;
    mgx /= (double)D;
    for (int64_t i = 0; i < D; i++) gb[i] = rs * (gb[i] - mg - xb[i] * mgx);
}

static int check_ln(const char *kn, const struct tr_tensor *x, const struct tr_tensor *dy, float eps,
                    struct tr_error *err) {
    int rc = check_real(x, kn, "x", err);
    if (!rc) rc = check_real(dy, kn, "dy", err);
    if (!rc) rc = check_like(kn, x, "x", dy, "dy", err);
    if (rc) return rc;
    if (x->ndim < 1) return tr_error_set(err, TR_ERR_SHAPE, "%s: x is 0-d (layer norm works on the last axis)", kn);
    if (!(eps >= 0.0f) || !isfinite(eps))
        return tr_error_set(err, TR_ERR_INVALID, "%s: eps %g should be finite and >= 0", kn, (double)eps);
    return TR_OK;
}

/* A (D) vector of x's dtype or f32, as the forward's gamma. */
static int check_vec(const char *kn, const char *what, const struct tr_tensor *t, const struct tr_tensor *x,
                     struct tr_error *err) {
    int rc = check_real(t, kn, what, err);
    if (rc) return rc;
    int64_t D = x->shape[x->ndim - 1];
    if (tr_tensor_numel(t) != D || (t->ndim && t->shape[t->ndim - 1] != D) ||
        (t->dtype != x->dtype && t->dtype != TR_DTYPE_F32)) {
        char d1[200], d2[200];
        return tr_error_set(err, TR_ERR_SHAPE, "%s: %s %s should be [%lld] of %s or f32 (x is %s)", kn, what,
                            tr_cpu_desc(t, d1, sizeof d1), (long long)D, tr_dtype_name((enum tr_dtype)x->dtype),
                            tr_cpu_desc(x, d2, sizeof d2));
    }
    return TR_OK;
}

/* dx = rstd·(g − mean(g) − x̂·mean(g·x̂)), g = dy·gamma, x̂ = (x − mean)·rstd. The rows'
 * loads and stores compile per level with the math: converting them in a baseline
 * function around an AVX-512 row took two thirds of the kernel's time (perf, BERT fit). */
TR_CPU_MULTI(void, ln_grad_rows, (const void *ctx, int64_t r0, int64_t r1, void *buf), (ctx, r0, r1, buf)) {
    (void)isa;
    const struct grad_rows *A = ctx;
    const int64_t D = A->D;
    const size_t es = esize(A->dt);
    const double *restrict gam = A->gam;
    double *restrict xb = buf, *restrict gb = xb + D;
    for (int64_t r = r0; r < r1; r++) {
        load_f64(xb, A->a + r * D * (int64_t)es, A->dt, D);
        load_f64(gb, A->g + r * D * (int64_t)es, A->dt, D);
        ln_grad_row(gam, xb, gb, D, A->eps);
        store_f64(A->o + r * D * (int64_t)es, A->dt, gb, D);
    }
}

int tr_k_layer_norm_grad(struct tr_kernels *k, const struct tr_tensor *x, const struct tr_tensor *gamma,
                         const struct tr_tensor *dy, float eps, struct tr_tensor *dx, struct tr_error *err) {
    TR_CUDA_ROUTE(k, tr_cuda_k_layer_norm_grad(k, x, gamma, dy, eps, dx, err));
    const char *kn = "layer_norm_grad";
    int rc = tr_cpu_check_ctx(k, kn, err);
    if (!rc) rc = check_ln(kn, x, dy, eps, err);
    if (!rc) rc = check_real(dx, kn, "dx", err);
    if (!rc) rc = check_like(kn, x, "x", dx, "dx", err);
    if (!rc && gamma) rc = check_vec(kn, "gamma", gamma, x, err);
    if (rc) return rc;
    int64_t D = x->shape[x->ndim - 1], n = tr_tensor_numel(x);
    if (n == 0 || D == 0) return TR_OK;
    int64_t rows = n / D;
    if ((rc = reserve_f64(k, D, 2 * D, kn, err)) != TR_OK) return rc;
    double *gam = tr_cpu_scratch_shared(k);
    for (int64_t i = 0; i < D; i++) gam[i] = gamma ? get_f64(gamma->data, gamma->dtype, i) : 1.0;
    const struct grad_rows A = {.a = x->data, .g = dy->data, .o = dx->data, .dt = x->dtype, .D = D, .eps = eps, .gam = gam};
    tr_cpu_rows(k, rows, 1, n > TR_CPU_PAR_MIN, ln_grad_rows, &A);
    return TR_OK;
}

TR_CPU_MULTI(void, ln_stats_rows, (const void *ctx, int64_t r0, int64_t r1, void *buf), (ctx, r0, r1, buf)) {
    (void)isa;
    const struct grad_rows *A = ctx;
    const size_t es = esize(A->dt);
    for (int64_t r = r0; r < r1; r++) {
        load_f64(buf, A->a + r * A->D * (int64_t)es, A->dt, A->D);
        row_stats(buf, A->D, A->eps, &A->stats[2 * r], &A->stats[2 * r + 1]);
    }
}

/* dgamma = Σ over rows of dy·x̂: row statistics first (parallel over rows), then the sum
 * over rows in blocks of columns (parallel over columns, so each column is one thread's
 * ordered sum). */
int tr_k_layer_norm_grad_gamma(struct tr_kernels *k, const struct tr_tensor *x, const struct tr_tensor *dy, float eps,
                               struct tr_tensor *dgamma, struct tr_error *err) {
    TR_CUDA_ROUTE(k, tr_cuda_k_layer_norm_grad_gamma(k, x, dy, eps, dgamma, err));
    const char *kn = "layer_norm_grad_gamma";
    int rc = tr_cpu_check_ctx(k, kn, err);
    if (!rc) rc = check_ln(kn, x, dy, eps, err);
    if (!rc) rc = check_vec(kn, "dgamma", dgamma, x, err);
    if (rc) return rc;
    int64_t D = x->shape[x->ndim - 1], n = tr_tensor_numel(x);
    if (D == 0) return TR_OK;
    int64_t rows = n / D;
    if (rows == 0) { /* a sum of nothing; all-zero bits are 0.0 in every float dtype */
        memset(dgamma->data, 0, tr_tensor_nbytes(dgamma));
        return TR_OK;
    }
    if ((rc = reserve_f64(k, 2 * rows, D, kn, err)) != TR_OK) return rc;
    double *stats = tr_cpu_scratch_shared(k);
    const struct grad_rows A = {.a = x->data, .dt = x->dtype, .D = D, .eps = eps, .stats = stats};
    tr_cpu_rows(k, rows, 1, n > TR_CPU_PAR_MIN, ln_stats_rows, &A);
    tr_grad_col_sums(x->data, dy->data, x->dtype, rows, D, stats, stats + 1, 2, dgamma->data, dgamma->dtype,
                     n > TR_CPU_PAR_MIN);
    return TR_OK;
}

#define COLS 64 /* columns per work item */

/* acc[0..len) += Σ over rows of dy·(x − mu)·rs at columns c0.., in the level's vectors. */
TR_CPU_MULTI(void, col_block, (const char *x, const char *dy, int dt, int64_t rows, int64_t D, const double *mu, const double *rs, int64_t step, int64_t c0, int64_t len, double *restrict acc), (x, dy, dt, rows, D, mu, rs, step, c0, len, acc)) {
    (void)isa;
    const size_t es = esize(dt);
    double xb[COLS], gb[COLS];
    for (int64_t r = 0; r < rows; r++) {
        load_f64(xb, x + (r * D + c0) * (int64_t)es, dt, len);
        load_f64(gb, dy + (r * D + c0) * (int64_t)es, dt, len);
        const double m = mu ? mu[r * step] : 0.0, s = rs[r * step];
        for (int64_t c = 0; c < len; c++) acc[c] += gb[c] * (xb[c] - m) * s;
    }
}

void tr_grad_col_sums(const char *x, const char *dy, int dt, int64_t rows, int64_t D, const double *mu,
                      const double *rs, int64_t step, char *out, int odt, int par) {
    const size_t oes = esize(odt);
    const int64_t items = (D + COLS - 1) / COLS;
#pragma omp parallel for schedule(static) if (par && items > 1)
    for (int64_t it = 0; it < items; it++) {
        int64_t c0 = it * COLS, len = D - c0 < COLS ? D - c0 : COLS;
        double acc[COLS] = {0};
        col_block(x, dy, dt, rows, D, mu, rs, step, c0, len, acc);
        store_f64(out + c0 * (int64_t)oes, odt, acc, len);
    }
}

/* ---- embedding_grad: dtable[v] = Σ over positions p with ids[p] = v of dy[p] ----
 * The positions are grouped by id with a counting sort (stable, so each row adds its dy
 * rows in position order), then table rows are the parallel work items. */

static int read_ids(const struct tr_tensor *ids, int64_t V, const char *kn, int64_t *out, struct tr_error *err) {
    int64_t n = tr_tensor_numel(ids);
    for (int64_t i = 0; i < n; i++) {
        int64_t id = ids->dtype == TR_DTYPE_I64 ? ((const int64_t *)ids->data)[i] : ((const int32_t *)ids->data)[i];
        if (id < 0 || id >= V)
            return tr_error_set(err, TR_ERR_INVALID, "%s: ids[%lld] = %lld is outside [0, %lld)", kn, (long long)i,
                                (long long)id, (long long)V);
        if (out) out[i] = id;
    }
    return TR_OK;
}

/* Table rows [v0, v1): each the sum of its positions' dy rows, in position order. */
static void emb_grad_rows(const void *ctx, int64_t v0, int64_t v1, void *buf) {
    const struct grad_rows *A = ctx;
    const int64_t D = A->D, *start = A->start;
    const size_t es = esize(A->dt);
    double *restrict acc = buf, *restrict rb = acc + D;
    for (int64_t v = v0; v < v1; v++) {
        char *orow = A->o + v * D * (int64_t)es;
        if (start[v] == start[v + 1]) {
            memset(orow, 0, (size_t)D * es); /* all-zero bits are 0.0 in every float dtype */
            continue;
        }
        for (int64_t c = 0; c < D; c++) acc[c] = 0.0;
        for (int64_t p = start[v]; p < start[v + 1]; p++) {
            load_f64(rb, A->g + A->order[p] * D * (int64_t)es, A->dt, D);
            for (int64_t c = 0; c < D; c++) acc[c] += rb[c];
        }
        store_f64(orow, A->dt, acc, D);
    }
}

int tr_k_embedding_grad(struct tr_kernels *k, const struct tr_tensor *ids, const struct tr_tensor *dy,
                        struct tr_tensor *dtable, struct tr_error *err) {
    TR_CUDA_ROUTE(k, tr_cuda_k_embedding_grad(k, ids, dy, dtable, err));
    const char *kn = "embedding_grad";
    int rc = tr_cpu_check_ctx(k, kn, err);
    if (!rc) rc = tr_cpu_check_tensor(ids, kn, "ids", err);
    if (!rc) rc = check_real(dy, kn, "dy", err);
    if (!rc) rc = check_real(dtable, kn, "dtable", err);
    if (rc) return rc;
    char d1[200], d2[200], d3[200];
    if (ids->dtype != TR_DTYPE_I32 && ids->dtype != TR_DTYPE_I64)
        return tr_error_set(err, TR_ERR_SHAPE, "%s: ids %s should be i32 or i64", kn, tr_cpu_desc(ids, d1, sizeof d1));
    int ok = dtable->ndim == 2 && dtable->dtype == dy->dtype && dy->ndim == ids->ndim + 1 &&
             dy->shape[ids->ndim] == dtable->shape[1];
    for (int i = 0; ok && i < ids->ndim; i++) ok = dy->shape[i] == ids->shape[i];
    if (!ok)
        return tr_error_set(err, TR_ERR_SHAPE, "%s: dy %s should be ids' shape %s plus (D), and dtable %s (V,D) of dy's dtype",
                            kn, tr_cpu_desc(dy, d1, sizeof d1), tr_cpu_desc(ids, d2, sizeof d2),
                            tr_cpu_desc(dtable, d3, sizeof d3));
    int64_t V = dtable->shape[0], D = dtable->shape[1], n = tr_tensor_numel(ids);
    if (V == 0 || D == 0) return read_ids(ids, V, kn, NULL, err);
    if ((rc = reserve_f64(k, 0, 2 * D, kn, err)) != TR_OK) return rc;
    int64_t *id = malloc(sizeof(int64_t) * (size_t)(2 * n + V + 1));
    if (!id) return tr_error_set(err, TR_ERR_NOMEM, "%s: no memory to sort %lld ids", kn, (long long)n);
    int64_t *order = id + n, *start = order + n;
    if ((rc = read_ids(ids, V, kn, id, err)) != TR_OK) {
        free(id);
        return rc;
    }
    memset(start, 0, sizeof(int64_t) * (size_t)(V + 1));
    for (int64_t i = 0; i < n; i++) start[id[i] + 1]++;
    for (int64_t v = 0; v < V; v++) start[v + 1] += start[v];
    for (int64_t i = 0; i < n; i++) order[start[id[i]]++] = i; /* start[v] now ends row v */
    for (int64_t v = V; v > 0; v--) start[v] = start[v - 1];
    start[0] = 0;
    const struct grad_rows A = {.g = dy->data, .o = dtable->data, .dt = dy->dtype, .D = D, .start = start, .order = order};
    tr_cpu_rows(k, V, 1, V * D > TR_CPU_PAR_MIN, emb_grad_rows, &A);
    free(id);
    return TR_OK;
}

/* The context, then src and dst as tensors of any dtype: the layout gradients below
 * move bytes. */
static int check_move(struct tr_kernels *k, const char *kn, const struct tr_tensor *src, const char *src_name,
                      const struct tr_tensor *dst, const char *dst_name, struct tr_error *err) {
    int rc = tr_cpu_check_ctx(k, kn, err);
    if (!rc) rc = tr_cpu_check_tensor(src, kn, src_name, err);
    if (!rc) rc = tr_cpu_check_tensor(dst, kn, dst_name, err);
    return rc;
}

/* ---- broadcast: numpy rules, any dtype ---- */

int tr_k_broadcast(struct tr_kernels *k, const struct tr_tensor *x, struct tr_tensor *out, struct tr_error *err) {
    TR_CUDA_ROUTE(k, tr_cuda_k_broadcast(k, x, out, err));
    const char *kn = "broadcast";
    int rc = check_move(k, kn, x, "x", out, "out", err);
    if (rc) return rc;
    char d1[200], d2[200];
    int nd = out->ndim;
    int64_t xs[TR_MAX_DIMS];
    if (x->dtype != out->dtype || !tr_broadcast_strides(x->ndim, x->shape, nd, out->shape, xs))
        return tr_error_set(err, TR_ERR_SHAPE, "%s: x %s does not broadcast to out %s (numpy rules, same dtype)", kn,
                            tr_cpu_desc(x, d1, sizeof d1), tr_cpu_desc(out, d2, sizeof d2));
    int64_t n = tr_tensor_numel(out);
    if (n == 0) return TR_OK;
    int64_t L = nd ? out->shape[nd - 1] : 1, rows = n / L, ls = nd ? xs[nd - 1] : 0;
    size_t es = esize(x->dtype);
    const char *px = x->data;
    char *po = out->data;
#pragma omp parallel for schedule(static) if (n > TR_CPU_PAR_MIN && rows > 1)
    for (int64_t r = 0; r < rows; r++) {
        int64_t off = 0, rem = r;
        for (int d = nd - 2; d >= 0; d--) {
            off += (rem % out->shape[d]) * xs[d];
            rem /= out->shape[d];
        }
        char *o = po + r * L * (int64_t)es;
        const char *src = px + off * (int64_t)es;
        if (ls) {
            memcpy(o, src, (size_t)L * es);
        } else {
            for (int64_t i = 0; i < L; i++) memcpy(o + i * (int64_t)es, src, es);
        }
    }
    return TR_OK;
}

/* ---- max_grad: dy routed to the first maximum along the axis ---- */

int tr_k_max_grad(struct tr_kernels *k, const struct tr_tensor *x, const struct tr_tensor *dy, int axis, int keepdims,
                  struct tr_tensor *dx, struct tr_error *err) {
    TR_CUDA_ROUTE(k, tr_cuda_k_max_grad(k, x, dy, axis, keepdims, dx, err));
    const char *kn = "max_grad";
    int rc = tr_cpu_check_ctx(k, kn, err);
    if (!rc) rc = check_real(x, kn, "x", err);
    if (!rc) rc = check_real(dy, kn, "dy", err);
    if (!rc) rc = check_real(dx, kn, "dx", err);
    if (!rc) rc = check_like(kn, x, "x", dx, "dx", err);
    if (rc) return rc;
    char d1[200], d2[200];
    int ax = tr_cpu_axis(axis, x->ndim);
    if (ax < 0)
        return tr_error_set(err, TR_ERR_INVALID, "%s: axis %d out of range for x %s", kn, axis, tr_cpu_desc(x, d1, sizeof d1));
    int keep = keepdims != 0;
    if (dy->dtype != x->dtype || !tr_cpu_is_reduced(x, ax, dy, keep))
        return tr_error_set(err, TR_ERR_SHAPE, "%s: dy %s should be x %s reduced over axis %d with keepdims %d, same dtype",
                            kn, tr_cpu_desc(dy, d1, sizeof d1), tr_cpu_desc(x, d2, sizeof d2), ax, keep);
    int64_t outer = tr_shape_numel(ax, x->shape), R = x->shape[ax];
    int64_t inner = tr_shape_numel(x->ndim - ax - 1, x->shape + ax + 1);
    if (outer * R * inner == 0) return TR_OK;
    size_t es = esize(x->dtype);
    int dt = x->dtype;
    const char *px = x->data, *pg = dy->data;
    char *po = dx->data;
#pragma omp parallel for schedule(static) if (outer * R * inner > TR_CPU_PAR_MIN && outer > 1)
    for (int64_t o = 0; o < outer; o++) {
        const int64_t base = o * R * inner;
        memset(po + base * (int64_t)es, 0, (size_t)(R * inner) * es);
        for (int64_t c = 0; c < inner; c++) {
            double best = get_f64(px, dt, base + c);
            int64_t arg = 0;
            for (int64_t r = 1; r < R; r++) {
                double v = get_f64(px, dt, base + r * inner + c);
                if (v > best || (best != best && v == v)) best = v, arg = r; /* NaN is never the max, as in MAX */
            }
            memcpy(po + (base + arg * inner + c) * (int64_t)es, pg + (o * inner + c) * (int64_t)es, es);
        }
    }
    return TR_OK;
}

/* ---- slice_grad: zeros, with dy placed at start, start+step, ... along the axis ---- */

int tr_k_slice_grad(struct tr_kernels *k, const struct tr_tensor *dy, int axis, int64_t start, int64_t step,
                    struct tr_tensor *dx, struct tr_error *err) {
    TR_CUDA_ROUTE(k, tr_cuda_k_slice_grad(k, dy, axis, start, step, dx, err));
    const char *kn = "slice_grad";
    int rc = check_move(k, kn, dy, "dy", dx, "dx", err);
    if (rc) return rc;
    char d1[200], d2[200];
    int ax = tr_cpu_axis(axis, dx->ndim);
    if (ax < 0)
        return tr_error_set(err, TR_ERR_INVALID, "%s: axis %d out of range for dx %s", kn, axis, tr_cpu_desc(dx, d1, sizeof d1));
    int ok = dy->dtype == dx->dtype && dy->ndim == dx->ndim;
    for (int i = 0; ok && i < dx->ndim; i++) ok = i == ax || dy->shape[i] == dx->shape[i];
    if (!ok)
        return tr_error_set(err, TR_ERR_SHAPE, "%s: dy %s and dx %s should differ only on axis %d (same dtype)", kn,
                            tr_cpu_desc(dy, d1, sizeof d1), tr_cpu_desc(dx, d2, sizeof d2), ax);
    int64_t cnt = dy->shape[ax], full = dx->shape[ax];
    if (start < 0 || step < 1 || (cnt > 0 && start + (cnt - 1) * step >= full))
        return tr_error_set(err, TR_ERR_INVALID, "%s: %lld elements from %lld step %lld do not fit axis %d of dx %s", kn,
                            (long long)cnt, (long long)start, (long long)step, ax, tr_cpu_desc(dx, d1, sizeof d1));
    int64_t outer = tr_shape_numel(ax, dx->shape), inner = tr_shape_numel(dx->ndim - ax - 1, dx->shape + ax + 1);
    if (outer * full * inner == 0) return TR_OK;
    size_t es = esize(dx->dtype), row = (size_t)inner * es;
    const char *pg = dy->data;
    char *po = dx->data;
#pragma omp parallel for schedule(static) if (outer * full * inner > TR_CPU_PAR_MIN && outer > 1)
    for (int64_t o = 0; o < outer; o++) {
        char *slab = po + o * full * (int64_t)row;
        memset(slab, 0, (size_t)full * row);
        for (int64_t i = 0; i < cnt; i++)
            memcpy(slab + (start + i * step) * (int64_t)row, pg + (o * cnt + i) * (int64_t)row, row);
    }
    return TR_OK;
}
