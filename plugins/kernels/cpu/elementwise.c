/* Elementwise binary ops with numpy broadcasting, and the unary ops.
 *
 * Binary: the output's axes are simplified first (extent-1 axes dropped, neighbours that
 * both inputs walk alike merged), which turns same-shape into one flat row and a bias
 * add into (rows, N) with b's row stride 0: those are the fast paths, reached without a
 * special case each. The innermost axis is then cut into blocks of TR_CPU_CHUNK, which
 * are the parallel work items and the unit bf16/f16 data is converted in. */
#include <stdlib.h>
#include "cpu_internal.h"

#define CH TR_CPU_CHUNK

/* ---- leaves (cloned per ISA) ---- */

#define BIN_LOOP(EXPR)                                                            \
    do {                                                                          \
        if (sa && sb) {                                                           \
            for (int64_t i = 0; i < m; i++) { float x = fa[i], y = fb[i]; fo[i] = (EXPR); } \
        } else if (sa) {                                                          \
            const float y = fb[0];                                                \
            for (int64_t i = 0; i < m; i++) { float x = fa[i]; fo[i] = (EXPR); } \
        } else {                                                                  \
            const float x = fa[0];                                                \
            for (int64_t i = 0; i < m; i++) { float y = fb[i]; fo[i] = (EXPR); } \
        }                                                                         \
    } while (0)

TR_CPU_MULTI(void, binary_block, (int op, int dt, const void *a, int sa, const void *b, int sb, void *o, int64_t m), (op, dt, a, sa, b, sb, o, m)) {
    float abuf[CH], bbuf[CH], obuf[CH];
    const float *fa = a, *fb = b;
    float *fo = o;
    if (dt != TR_DTYPE_F32) {
        tr_cpu_load_f32(abuf, a, dt, sa ? m : 1);
        tr_cpu_load_f32(bbuf, b, dt, sb ? m : 1);
        fa = abuf;
        fb = bbuf;
        fo = obuf;
    }
    switch (op) {
    case TR_OP_ADD: BIN_LOOP(x + y); break;
    case TR_OP_SUB: BIN_LOOP(x - y); break;
    case TR_OP_MUL: BIN_LOOP(x * y); break;
    default: BIN_LOOP(x / y); break;
    }
    if (dt != TR_DTYPE_F32) tr_cpu_store_f32(o, dt, obuf, m);
}

TR_CPU_MULTI(void, unary_block, (int op, int variant, float alpha, float beta, int dt, const void *x, void *o, int64_t m), (op, variant, alpha, beta, dt, x, o, m)) {
    float xbuf[CH], obuf[CH];
    const float *fx = x;
    float *fo = o;
    if (dt != TR_DTYPE_F32) {
        tr_cpu_load_f32(xbuf, x, dt, m);
        fx = xbuf;
        fo = obuf;
    }
    switch (op) {
    case TR_OP_GELU:
        if (variant) for (int64_t i = 0; i < m; i++) fo[i] = tr_fgelu_tanh(fx[i]);
        else for (int64_t i = 0; i < m; i++) fo[i] = tr_fgelu_erf(fx[i]);
        break;
    case TR_OP_TANH: for (int64_t i = 0; i < m; i++) fo[i] = tr_ftanh(fx[i]); break;
    case TR_OP_RELU: for (int64_t i = 0; i < m; i++) fo[i] = fx[i] < 0.0f ? 0.0f : fx[i]; break; /* NaN kept, as torch */
    case TR_OP_SILU: for (int64_t i = 0; i < m; i++) fo[i] = fx[i] * tr_fsigmoid(fx[i]); break;
    case TR_OP_SIGMOID: for (int64_t i = 0; i < m; i++) fo[i] = tr_fsigmoid(fx[i]); break;
    case TR_OP_EXP: for (int64_t i = 0; i < m; i++) fo[i] = tr_fexp(fx[i]); break;
    case TR_OP_NEG: for (int64_t i = 0; i < m; i++) fo[i] = -fx[i]; break;
    case TR_OP_SQRT: for (int64_t i = 0; i < m; i++) fo[i] = sqrtf(fx[i]); break;
    case TR_OP_RSQRT: for (int64_t i = 0; i < m; i++) fo[i] = 1.0f / sqrtf(fx[i]); break;
    default: for (int64_t i = 0; i < m; i++) fo[i] = alpha * fx[i] + beta; break; /* SCALE */
    }
    if (dt != TR_DTYPE_F32) tr_cpu_store_f32(o, dt, obuf, m);
}

/* ---- binary ---- */

/* The broadcast simplified: m axes of extent e2 with strides a2/b2 (0: broadcast), the
 * innermost cut into nch chunks; units = rows * nch work items. */
struct binary_plan {
    struct tr_cpu_prepared hdr;
    int op, dt, m, sai, sbi;
    int64_t e2[TR_MAX_DIMS + 1], a2[TR_MAX_DIMS + 1], b2[TR_MAX_DIMS + 1];
    int64_t n, L, nch, units;
    size_t es;
    const char *pa, *pb;
    char *po;
};

int tr_cpu_binary_args(int device, int op, const struct tr_tensor *a, const struct tr_tensor *b,
                       const struct tr_tensor *out, struct tr_error *err) {
    if (!tr_op_is_elementwise_binary(op))
        return tr_error_set(err, TR_ERR_INVALID, "binary: op %d (%s) is not add, sub, mul or div", op, tr_op_name(op));
    const char *name = tr_op_name(op);
    int rc = tr_cpu_check_float_on(a, device, name, "a", err);
    if (!rc) rc = tr_cpu_check_float_on(b, device, name, "b", err);
    if (!rc) rc = tr_cpu_check_float_on(out, device, name, "out", err);
    if (rc) return rc;
    char d1[200], d2[200], d3[200];
    if (a->dtype != b->dtype || a->dtype != out->dtype)
        return tr_error_set(err, TR_ERR_SHAPE, "%s: dtypes differ: a %s, b %s, out %s", name, tr_cpu_desc(a, d1, sizeof d1),
                            tr_cpu_desc(b, d2, sizeof d2), tr_cpu_desc(out, d3, sizeof d3));
    return TR_OK;
}

static int binary_check(int op, const struct tr_tensor *a, const struct tr_tensor *b, const struct tr_tensor *out,
                        struct binary_plan *pl, struct tr_error *err) {
    int rc = tr_cpu_binary_args(TR_DEVICE_CPU, op, a, b, out, err);
    if (rc) return rc;
    const char *name = tr_op_name(op);
    char d1[200], d2[200], d3[200];
    /* the broadcast shape must be out's */
    int nd = out->ndim;
    int64_t ext[TR_MAX_DIMS], sa[TR_MAX_DIMS], sb[TR_MAX_DIMS];
    int ok = a->ndim <= nd && b->ndim <= nd;
    int64_t stra = 1, strb = 1;
    for (int i = nd - 1; ok && i >= 0; i--) {
        int ia = i - (nd - a->ndim), ib = i - (nd - b->ndim);
        int64_t ea = ia >= 0 ? a->shape[ia] : 1, eb = ib >= 0 ? b->shape[ib] : 1, eo = out->shape[i];
        int64_t want = ea == 1 ? eb : ea;
        if ((ea != 1 && eb != 1 && ea != eb) || want != eo) ok = 0;
        ext[i] = eo;
        sa[i] = ea == 1 ? 0 : stra;
        sb[i] = eb == 1 ? 0 : strb;
        stra *= ea;
        strb *= eb;
    }
    if (!ok)
        return tr_error_set(err, TR_ERR_SHAPE, "%s: a %s and b %s do not broadcast to out %s", name,
                            tr_cpu_desc(a, d1, sizeof d1), tr_cpu_desc(b, d2, sizeof d2), tr_cpu_desc(out, d3, sizeof d3));
    memset(pl, 0, sizeof *pl);
    pl->op = op;
    pl->dt = out->dtype;
    pl->es = tr_dtype_size((enum tr_dtype)out->dtype);
    pl->pa = a->data;
    pl->pb = b->data;
    pl->po = out->data;
    pl->n = tr_tensor_numel(out);
    if (pl->n == 0) return TR_OK;
    /* simplify: drop extent-1 axes, merge neighbours both inputs walk contiguously (or not at all) */
    int64_t *e2 = pl->e2, *a2 = pl->a2, *b2 = pl->b2;
    int m = 0;
    for (int i = 0; i < nd; i++) {
        if (ext[i] == 1) continue;
        if (m > 0) {
            int j = m - 1;
            int ma = (a2[j] == 0 && sa[i] == 0) || (a2[j] != 0 && sa[i] != 0 && a2[j] == sa[i] * ext[i]);
            int mb = (b2[j] == 0 && sb[i] == 0) || (b2[j] != 0 && sb[i] != 0 && b2[j] == sb[i] * ext[i]);
            if (ma && mb) {
                e2[j] *= ext[i];
                a2[j] = sa[i];
                b2[j] = sb[i];
                continue;
            }
        }
        e2[m] = ext[i];
        a2[m] = sa[i];
        b2[m] = sb[i];
        m++;
    }
    if (m == 0) {
        e2[0] = 1;
        a2[0] = b2[0] = 1;
        m = 1;
    }
    pl->m = m;
    pl->L = e2[m - 1];
    pl->nch = (pl->L + CH - 1) / CH;
    pl->units = (pl->n / pl->L) * pl->nch;
    pl->sai = a2[m - 1] != 0;
    pl->sbi = b2[m - 1] != 0;
    return TR_OK;
}

static void binary_compute(struct tr_kernels *k, const void *plan) {
    (void)k;
    const struct binary_plan *pl = plan;
    if (pl->n == 0) return;
    const int m = pl->m, sai = pl->sai, sbi = pl->sbi, op = pl->op, dt = pl->dt;
    const int64_t L = pl->L, nch = pl->nch, units = pl->units, es = (int64_t)pl->es;
    const int64_t *e2 = pl->e2, *a2 = pl->a2, *b2 = pl->b2;
    const char *pa = pl->pa, *pb = pl->pb;
    char *po = pl->po;
#pragma omp parallel for schedule(static) if (pl->n > TR_CPU_PAR_MIN)
    for (int64_t u = 0; u < units; u++) {
        int64_t r = u / nch, i0 = (u % nch) * CH, len = L - i0 < CH ? L - i0 : CH;
        int64_t oa = 0, ob = 0, rem = r;
        for (int d = m - 2; d >= 0; d--) {
            int64_t idx = rem % e2[d];
            rem /= e2[d];
            oa += idx * a2[d];
            ob += idx * b2[d];
        }
        oa += sai ? i0 : 0;
        ob += sbi ? i0 : 0;
        binary_block(op, dt, pa + oa * es, sai, pb + ob * es, sbi, po + (r * L + i0) * es, len);
    }
}

int tr_k_binary(struct tr_kernels *k, int op, const struct tr_tensor *a, const struct tr_tensor *b,
                struct tr_tensor *out, struct tr_error *err) {
    TR_CUDA_ROUTE(k, tr_cuda_k_binary(k, op, a, b, out, err));
    struct binary_plan pl;
    int rc = tr_cpu_check_ctx(k, "binary", err);
    if (!rc) rc = binary_check(op, a, b, out, &pl, err);
    return tr_cpu_compute_now(k, rc, binary_compute, &pl);
}

int tr_cpu_binary_bind(struct tr_kernels *k, struct tr_kernel_call *c, struct tr_error *err) {
    struct binary_plan pl;
    int rc = tr_cpu_check_ctx_bind(k, "binary", err);
    if (!rc) rc = binary_check(c->op, &c->in[0], &c->in[1], &c->out, &pl, err);
    return rc ? rc : tr_cpu_keep_compute(c, &pl, sizeof pl, binary_compute, "binary", err);
}

/* ---- unary ---- */

struct unary_plan {
    struct tr_cpu_prepared hdr;
    int op, variant, dt;
    float alpha, beta;
    int64_t n;
    size_t es;
    const char *px;
    char *po;
};

static int unary_check(int op, const struct tr_attrs *attrs, const struct tr_tensor *x, const struct tr_tensor *out,
                       struct unary_plan *pl, struct tr_error *err) {
    if (!tr_op_is_elementwise_unary(op))
        return tr_error_set(err, TR_ERR_INVALID, "unary: op %d (%s) is not an elementwise unary op", op, tr_op_name(op));
    const char *name = tr_op_name(op);
    int rc = tr_cpu_check_float(x, name, "x", err);
    if (!rc) rc = tr_cpu_check_float(out, name, "out", err);
    if (!rc) rc = tr_cpu_check_like(name, x, "x", out, "out", err);
    if (rc) return rc;
    int variant = 0;
    float alpha = 1.0f, beta = 0.0f;
    if (attrs) {
        if (op == TR_OP_GELU) {
            if (attrs->ints[0] != 0 && attrs->ints[0] != 1)
                return tr_error_set(err, TR_ERR_INVALID, "gelu: ints[0]=%lld (0: erf form, 1: tanh approximation)",
                                    (long long)attrs->ints[0]);
            variant = (int)attrs->ints[0];
        }
        if (op == TR_OP_SCALE) {
            alpha = attrs->floats[0];
            beta = attrs->floats[1];
        }
    }
    memset(pl, 0, sizeof *pl);
    pl->op = op;
    pl->variant = variant;
    pl->alpha = alpha;
    pl->beta = beta;
    pl->dt = x->dtype;
    pl->n = tr_tensor_numel(x);
    pl->es = tr_dtype_size((enum tr_dtype)x->dtype);
    pl->px = x->data;
    pl->po = out->data;
    return TR_OK;
}

static void unary_compute(struct tr_kernels *k, const void *plan) {
    (void)k;
    const struct unary_plan *pl = plan;
    const int64_t n = pl->n, es = (int64_t)pl->es;
    const int op = pl->op, variant = pl->variant, dt = pl->dt;
    const float alpha = pl->alpha, beta = pl->beta;
    const char *px = pl->px;
    char *po = pl->po;
#pragma omp parallel for schedule(static) if (n > TR_CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i += CH) {
        int64_t len = n - i < CH ? n - i : CH;
        unary_block(op, variant, alpha, beta, dt, px + i * es, po + i * es, len);
    }
}

int tr_k_unary(struct tr_kernels *k, int op, const struct tr_attrs *attrs, const struct tr_tensor *x,
               struct tr_tensor *out, struct tr_error *err) {
    TR_CUDA_ROUTE(k, tr_cuda_k_unary(k, op, attrs, x, out, err));
    struct unary_plan pl;
    int rc = tr_cpu_check_ctx(k, "unary", err);
    if (!rc) rc = unary_check(op, attrs, x, out, &pl, err);
    return tr_cpu_compute_now(k, rc, unary_compute, &pl);
}

int tr_cpu_unary_bind(struct tr_kernels *k, struct tr_kernel_call *c, struct tr_error *err) {
    struct unary_plan pl;
    int rc = tr_cpu_check_ctx_bind(k, "unary", err);
    if (!rc) rc = unary_check(c->op, &c->attrs, &c->in[0], &c->out, &pl, err);
    return rc ? rc : tr_cpu_keep_compute(c, &pl, sizeof pl, unary_compute, "unary", err);
}
