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

TR_CPU_CLONES
static void binary_block(int op, int dt, const void *a, int sa, const void *b, int sb, void *o, int64_t m) {
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

TR_CPU_CLONES
static void unary_block(int op, int variant, float alpha, float beta, int dt, const void *x, void *o, int64_t m) {
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
    case TR_OP_RELU: for (int64_t i = 0; i < m; i++) fo[i] = fx[i] > 0.0f ? fx[i] : 0.0f; break;
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

int tr_k_binary(struct tr_kernels *k, int op, const struct tr_tensor *a, const struct tr_tensor *b,
                struct tr_tensor *out, struct tr_error *err) {
    int st = tr_cpu_check_ctx(k, "binary", err);
    if (st) return st;
    if (!tr_op_is_elementwise_binary(op))
        return tr_error_set(err, TR_ERR_INVALID, "binary: op %d (%s) is not add, sub, mul or div", op, tr_op_name(op));
    const char *name = tr_op_name(op);
    st = tr_cpu_check_float(a, name, "a", err);
    if (!st) st = tr_cpu_check_float(b, name, "b", err);
    if (!st) st = tr_cpu_check_float(out, name, "out", err);
    if (st) return st;
    char d1[200], d2[200], d3[200];
    if (a->dtype != b->dtype || a->dtype != out->dtype)
        return tr_error_set(err, TR_ERR_SHAPE, "%s: dtypes differ: a %s, b %s, out %s", name, tr_cpu_desc(a, d1, sizeof d1),
                            tr_cpu_desc(b, d2, sizeof d2), tr_cpu_desc(out, d3, sizeof d3));
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
    int64_t n = tr_tensor_numel(out);
    if (n == 0) return TR_OK;
    /* simplify: drop extent-1 axes, merge neighbours both inputs walk contiguously (or not at all) */
    int64_t e2[TR_MAX_DIMS + 1], a2[TR_MAX_DIMS + 1], b2[TR_MAX_DIMS + 1];
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
    int64_t L = e2[m - 1], rows = n / L, nch = (L + CH - 1) / CH, units = rows * nch;
    int sai = a2[m - 1] != 0, sbi = b2[m - 1] != 0;
    size_t es = tr_dtype_size((enum tr_dtype)out->dtype);
    const char *pa = a->data, *pb = b->data;
    char *po = out->data;
    int dt = out->dtype;
#pragma omp parallel for schedule(static) if (n > TR_CPU_PAR_MIN)
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
        binary_block(op, dt, pa + oa * (int64_t)es, sai, pb + ob * (int64_t)es, sbi, po + (r * L + i0) * (int64_t)es, len);
    }
    return TR_OK;
}

/* ---- unary ---- */

int tr_k_unary(struct tr_kernels *k, int op, const struct tr_attrs *attrs, const struct tr_tensor *x,
               struct tr_tensor *out, struct tr_error *err) {
    int st = tr_cpu_check_ctx(k, "unary", err);
    if (st) return st;
    if (!tr_op_is_elementwise_unary(op))
        return tr_error_set(err, TR_ERR_INVALID, "unary: op %d (%s) is not an elementwise unary op", op, tr_op_name(op));
    const char *name = tr_op_name(op);
    st = tr_cpu_check_float(x, name, "x", err);
    if (!st) st = tr_cpu_check_float(out, name, "out", err);
    if (st) return st;
    char d1[200], d2[200];
    if (x->dtype != out->dtype || !tr_cpu_same_shape(x, out))
        return tr_error_set(err, TR_ERR_SHAPE, "%s: x %s and out %s should have the same shape and dtype", name,
                            tr_cpu_desc(x, d1, sizeof d1), tr_cpu_desc(out, d2, sizeof d2));
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
    int64_t n = tr_tensor_numel(x);
    size_t es = tr_dtype_size((enum tr_dtype)x->dtype);
    const char *px = x->data;
    char *po = out->data;
    int dt = x->dtype;
#pragma omp parallel for schedule(static) if (n > TR_CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i += CH) {
        int64_t len = n - i < CH ? n - i : CH;
        unary_block(op, variant, alpha, beta, dt, px + i * (int64_t)es, po + i * (int64_t)es, len);
    }
    return TR_OK;
}
