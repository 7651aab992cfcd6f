/* The float64 oracle of every op (ref.h says what they promise). Deliberately naive:
 * the whole row, the whole score matrix, one element at a time. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "ref.h"
#include "testutil.h"
#include "trident/kernels.h"

/* ---- indexing ---- */

void tr_ref_unravel(int64_t f, int nd, const int64_t *sh, int64_t *idx) {
    for (int i = nd - 1; i >= 0; i--) {
        idx[i] = sh[i] ? f % sh[i] : 0;
        f = sh[i] ? f / sh[i] : 0;
    }
}

int64_t tr_ref_bcast_off(int nd, const int64_t *sh, int ond, const int64_t *idx) {
    int64_t off = 0;
    for (int i = 0; i < nd; i++) off = off * sh[i] + (sh[i] == 1 ? 0 : idx[ond - nd + i]);
    return off;
}

static int norm_axis(int axis, int nd) { return axis < 0 ? axis + nd : axis; }

/* outer × len × inner around axis of (nd, sh) */
static void split(int nd, const int64_t *sh, int axis, int64_t *outer, int64_t *len, int64_t *inner) {
    *outer = *inner = 1;
    for (int i = 0; i < axis; i++) *outer *= sh[i];
    *len = sh[axis];
    for (int i = axis + 1; i < nd; i++) *inner *= sh[i];
}

static double dot(const double *a, const double *b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* ---- elementwise ---- */

static double sigm(double x) { return 1 / (1 + exp(-x)); }

static double gelu(double x, int approx) {
    if (approx) return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    return 0.5 * x * (1 + erf(x / sqrt(2.0)));
}

double tr_ref_act(int act, double x) {
    switch (act) {
    case TR_ACT_GELU: return gelu(x, 0);
    case TR_ACT_GELU_TANH: return gelu(x, 1);
    case TR_ACT_RELU: return x > 0 ? x : 0;
    case TR_ACT_TANH: return tanh(x);
    case TR_ACT_SILU: return x * sigm(x);
    default: return x;
    }
}

double tr_ref_unary(int op, double x, int approx, double alpha, double beta) {
    switch (op) {
    case TR_OP_GELU: return gelu(x, approx);
    case TR_OP_TANH: return tanh(x);
    case TR_OP_RELU: return x > 0 ? x : 0;
    case TR_OP_SILU: return x * sigm(x);
    case TR_OP_SIGMOID: return sigm(x);
    case TR_OP_EXP: return exp(x);
    case TR_OP_NEG: return -x;
    case TR_OP_SQRT: return sqrt(x);
    case TR_OP_RSQRT: return 1 / sqrt(x);
    case TR_OP_SCALE: return alpha * x + beta;
    default: fail_msg("reference: unary op %d", op); return 0;
    }
}

double tr_ref_unary_grad(int op, double x, int approx, double alpha) {
    switch (op) {
    case TR_OP_GELU:
        if (approx) {
            double c = sqrt(2 / M_PI), t = tanh(c * (x + 0.044715 * x * x * x));
            return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x);
        }
        return 0.5 * (1 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) / sqrt(2 * M_PI);
    case TR_OP_TANH: return 1 - tanh(x) * tanh(x);
    case TR_OP_RELU: return x > 0 ? 1 : 0;
    case TR_OP_SILU: return sigm(x) * (1 + x * (1 - sigm(x)));
    case TR_OP_SIGMOID: return sigm(x) * (1 - sigm(x));
    case TR_OP_EXP: return exp(x);
    case TR_OP_NEG: return -1;
    case TR_OP_SQRT: return 0.5 / sqrt(x);
    case TR_OP_RSQRT: return -0.5 * pow(x, -1.5);
    case TR_OP_SCALE: return alpha;
    default: fail_msg("reference: unary_grad of op %d", op); return 0;
    }
}

double tr_ref_cast(double x, enum tr_dtype to) {
    switch (to) {
    case TR_DTYPE_F64: return x;
    case TR_DTYPE_F32: return (double)(float)x;
    case TR_DTYPE_BF16: return tr_bf16_to_f32(tr_f32_to_bf16((float)x));
    case TR_DTYPE_F16: return tr_f16_to_f32(tr_f32_to_f16((float)x));
    default: break;
    }
    /* the largest i64 a double holds below 2^63: the kernel's saturation point */
    double lo = to == TR_DTYPE_I32 ? -2147483648.0 : -9223372036854775808.0;
    double hi = to == TR_DTYPE_I32 ? 2147483647.0 : 9223372036854774784.0;
    if (isnan(x)) return 0;
    x = trunc(x);
    return x < lo ? lo : x > hi ? hi : x;
}

void tr_ref_binary(int op, struct tr_ref_view a, struct tr_ref_view b, int nd, const int64_t *sh, double *out) {
    int64_t n = tr_shape_numel(nd, sh), idx[TR_MAX_DIMS];
    for (int64_t f = 0; f < n; f++) {
        tr_ref_unravel(f, nd, sh, idx);
        double p = a.d[tr_ref_bcast_off(a.nd, a.sh, nd, idx)], q = b.d[tr_ref_bcast_off(b.nd, b.sh, nd, idx)];
        out[f] = op == TR_OP_ADD ? p + q : op == TR_OP_SUB ? p - q : op == TR_OP_MUL ? p * q : p / q;
    }
}

void tr_ref_broadcast(struct tr_ref_view x, int nd, const int64_t *sh, double *out) {
    int64_t n = tr_shape_numel(nd, sh), idx[TR_MAX_DIMS];
    for (int64_t f = 0; f < n; f++) {
        tr_ref_unravel(f, nd, sh, idx);
        out[f] = x.d[tr_ref_bcast_off(x.nd, x.sh, nd, idx)];
    }
}

/* ---- matmul ---- */

void tr_ref_matmul(struct tr_ref_view a, struct tr_ref_view b, int nd, const int64_t *sh, int ta, int tb, double alpha,
                   const double *bias, int act, double *c) {
    int64_t M = sh[nd - 2], N = sh[nd - 1], K = a.sh[a.nd - 1 - ta], n = tr_shape_numel(nd, sh), idx[TR_MAX_DIMS];
    for (int64_t f = 0; f < n; f++) {
        tr_ref_unravel(f, nd, sh, idx);
        int64_t m = idx[nd - 2], j = idx[nd - 1];
        /* the batch index (idx's first nd-2) broadcast into each operand's batch axes */
        int64_t ab = tr_ref_bcast_off(a.nd - 2, a.sh, nd - 2, idx), bb = tr_ref_bcast_off(b.nd - 2, b.sh, nd - 2, idx);
        double s = 0;
        for (int64_t kk = 0; kk < K; kk++)
            s += a.d[ab * M * K + (ta ? kk * M + m : m * K + kk)] * b.d[bb * K * N + (tb ? j * K + kk : kk * N + j)];
        c[f] = tr_ref_act(act, alpha * s + (bias ? bias[j] : 0.0));
    }
}

/* ---- rows ---- */

void tr_ref_softmax(const double *x, int64_t rows, int64_t D, double *y) {
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = x + r * D;
        double mx = -INFINITY, s = 0;
        for (int64_t i = 0; i < D; i++) mx = fmax(mx, xr[i]);
        for (int64_t i = 0; i < D; i++) s += mx == -INFINITY ? 0 : exp(xr[i] - mx);
        for (int64_t i = 0; i < D; i++) y[r * D + i] = s > 0 ? exp(xr[i] - mx) / s : 0.0;
    }
}

void tr_ref_softmax_grad(const double *y, const double *dy, int64_t rows, int64_t D, double *dx) {
    for (int64_t r = 0; r < rows; r++) {
        double s = dot(dy + r * D, y + r * D, D);
        for (int64_t i = 0; i < D; i++) dx[r * D + i] = y[r * D + i] * (dy[r * D + i] - s);
    }
}

/* Mean and 1/sqrt(var + eps) of a row. */
static void moments(const double *x, int64_t D, double eps, double *mean, double *rstd) {
    double m = 0, v = 0;
    for (int64_t i = 0; i < D; i++) m += x[i];
    m /= (double)D;
    for (int64_t i = 0; i < D; i++) v += (x[i] - m) * (x[i] - m);
    *mean = m;
    *rstd = 1 / sqrt(v / (double)D + eps);
}

void tr_ref_layer_norm(const double *x, const double *gamma, const double *beta, int64_t rows, int64_t D, double eps,
                       double *y) {
    for (int64_t r = 0; r < rows; r++) {
        double m, rs;
        moments(x + r * D, D, eps, &m, &rs);
        for (int64_t i = 0; i < D; i++)
            y[r * D + i] = (x[r * D + i] - m) * rs * (gamma ? gamma[i] : 1.0) + (beta ? beta[i] : 0.0);
    }
}

void tr_ref_layer_norm_grad(const double *x, const double *gamma, const double *dy, int64_t rows, int64_t D, double eps,
                            double *dx) {
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = x + r * D, *gr = dy + r * D;
        double m, rs, m1 = 0, m2 = 0;
        moments(xr, D, eps, &m, &rs);
        for (int64_t i = 0; i < D; i++) {
            m1 += gr[i] * gamma[i];
            m2 += gr[i] * gamma[i] * (xr[i] - m) * rs;
        }
        m1 /= (double)D, m2 /= (double)D;
        for (int64_t i = 0; i < D; i++) dx[r * D + i] = rs * (gr[i] * gamma[i] - m1 - (xr[i] - m) * rs * m2);
    }
}

void tr_ref_layer_norm_grad_gamma(const double *x, const double *dy, int64_t rows, int64_t D, double eps,
                                  double *dgamma) {
    memset(dgamma, 0, sizeof(double) * (size_t)D);
    for (int64_t r = 0; r < rows; r++) {
        double m, rs;
        moments(x + r * D, D, eps, &m, &rs);
        for (int64_t i = 0; i < D; i++) dgamma[i] += dy[r * D + i] * (x[r * D + i] - m) * rs;
    }
}

static double inv_rms(const double *x, int64_t D, double eps) { return 1 / sqrt(dot(x, x, D) / (double)D + eps); }

void tr_ref_rms_norm(const double *x, const double *w, int64_t rows, int64_t D, double eps, int add_one, double *y) {
    for (int64_t r = 0; r < rows; r++) {
        double rs = inv_rms(x + r * D, D, eps);
        for (int64_t i = 0; i < D; i++) y[r * D + i] = x[r * D + i] * rs * (w[i] + (add_one ? 1.0 : 0.0));
    }
}

void tr_ref_rms_norm_grad(const double *x, const double *w, const double *dy, int64_t rows, int64_t D, double eps,
                          int add_one, double *dx) {
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = x + r * D, *gr = dy + r * D;
        double rs = inv_rms(xr, D, eps), m = 0;
        for (int64_t i = 0; i < D; i++) m += gr[i] * (w[i] + add_one) * xr[i] * rs;
        m /= (double)D;
        for (int64_t i = 0; i < D; i++) dx[r * D + i] = rs * (gr[i] * (w[i] + add_one) - xr[i] * rs * m);
    }
}

void tr_ref_rms_norm_grad_w(const double *x, const double *dy, int64_t rows, int64_t D, double eps, double *dw) {
    memset(dw, 0, sizeof(double) * (size_t)D);
    for (int64_t r = 0; r < rows; r++) {
        double rs = inv_rms(x + r * D, D, eps);
        for (int64_t i = 0; i < D; i++) dw[i] += dy[r * D + i] * x[r * D + i] * rs;
    }
}

/* ---- rope ---- */

double tr_ref_rope_angle(int64_t p, int64_t i, int64_t R, float base, int f32_angle) {
    if (!f32_angle) return (double)p * pow((double)base, -(double)(2 * i) / (double)R);
    float theta = 1.0f / (float)pow((double)base, (double)((float)(2 * i) / (float)R));
    return (double)((float)p * theta);
}

void tr_ref_rope(const double *x, const double *pos, int pos_batched, int64_t B, int64_t H, int64_t T, int64_t D,
                 int64_t R, float base, int inverse, int f32_angle, double *y) {
    const int64_t h = R / 2;
    for (int64_t b = 0; b < B; b++)
        for (int64_t hd = 0; hd < H; hd++)
            for (int64_t t = 0; t < T; t++) {
                const double *xr = x + ((b * H + hd) * T + t) * D;
                double *yr = y + ((b * H + hd) * T + t) * D;
                int64_t p = (int64_t)pos[pos_batched ? b * T + t : t];
                for (int64_t i = 0; i < h; i++) {
                    double a = tr_ref_rope_angle(p, i, R, base, f32_angle), c = cos(a), s = inverse ? -sin(a) : sin(a);
                    yr[i] = xr[i] * c - xr[i + h] * s;
                    yr[i + h] = xr[i + h] * c + xr[i] * s;
                }
                for (int64_t i = R; i < D; i++) yr[i] = xr[i];
            }
}

/* ---- reductions and gathers ---- */

void tr_ref_reduce(int op, int nd, const int64_t *sh, const double *x, int axis, double *y) {
    int64_t outer, len, inner;
    split(nd, sh, norm_axis(axis, nd), &outer, &len, &inner);
    for (int64_t p = 0; p < outer; p++)
        for (int64_t q = 0; q < inner; q++) {
            double acc = op == TR_OP_MAX ? -INFINITY : 0;
            for (int64_t l = 0; l < len; l++) {
                double e = x[(p * len + l) * inner + q];
                acc = op == TR_OP_MAX ? fmax(acc, e) : acc + e;
            }
            y[p * inner + q] = op == TR_OP_MEAN ? acc / (double)len : acc;
        }
}

void tr_ref_max_grad(int nd, const int64_t *sh, const double *x, const double *dy, int axis, double *dx) {
    int64_t outer, len, inner;
    split(nd, sh, norm_axis(axis, nd), &outer, &len, &inner);
    memset(dx, 0, sizeof(double) * (size_t)(outer * len * inner));
    for (int64_t p = 0; p < outer; p++)
        for (int64_t q = 0; q < inner; q++) {
            int64_t arg = 0;
            for (int64_t l = 1; l < len; l++)
                if (x[(p * len + l) * inner + q] > x[(p * len + arg) * inner + q]) arg = l;
            dx[(p * len + arg) * inner + q] = dy[p * inner + q];
        }
}

void tr_ref_embedding(const double *table, int64_t D, const double *ids, int64_t n, double *out) {
    for (int64_t r = 0; r < n; r++) memcpy(out + r * D, table + (int64_t)ids[r] * D, sizeof(double) * (size_t)D);
}

void tr_ref_embedding_grad(const double *ids, int64_t n, const double *dy, int64_t V, int64_t D, double *dtable) {
    memset(dtable, 0, sizeof(double) * (size_t)(V * D));
    for (int64_t r = 0; r < n; r++)
        for (int64_t i = 0; i < D; i++) dtable[(int64_t)ids[r] * D + i] += dy[r * D + i];
}

/* ---- layout ---- */

void tr_ref_transpose(int nd, const int64_t *xsh, const double *x, const int64_t *perm, double *y) {
    int64_t ysh[TR_MAX_DIMS], idx[TR_MAX_DIMS], xidx[TR_MAX_DIMS];
    for (int i = 0; i < nd; i++) ysh[i] = xsh[perm[i]];
    int64_t n = tr_shape_numel(nd, xsh);
    for (int64_t f = 0; f < n; f++) {
        tr_ref_unravel(f, nd, ysh, idx);
        for (int i = 0; i < nd; i++) xidx[perm[i]] = idx[i];
        int64_t off = 0;
        for (int i = 0; i < nd; i++) off = off * xsh[i] + xidx[i];
        y[f] = x[off];
    }
}

/* The offset in the full shape of element idx of the sliced one. */
static int64_t slice_off(int nd, const int64_t *full, int64_t *idx, int axis, int64_t start, int64_t step) {
    idx[axis] = start + idx[axis] * step;
    int64_t off = 0;
    for (int i = 0; i < nd; i++) off = off * full[i] + idx[i];
    return off;
}

void tr_ref_slice(int nd, const int64_t *xsh, const double *x, int axis, int64_t start, int64_t step, int64_t count,
                  double *y) {
    int64_t ysh[TR_MAX_DIMS], idx[TR_MAX_DIMS];
    axis = norm_axis(axis, nd);
    memcpy(ysh, xsh, sizeof(int64_t) * (size_t)nd);
    ysh[axis] = count;
    for (int64_t f = 0; f < tr_shape_numel(nd, ysh); f++) {
        tr_ref_unravel(f, nd, ysh, idx);
        y[f] = x[slice_off(nd, xsh, idx, axis, start, step)];
    }
}

void tr_ref_slice_grad(int nd, const int64_t *dysh, const double *dy, int axis, int64_t start, int64_t step,
                       int64_t full, double *dx) {
    int64_t xsh[TR_MAX_DIMS], idx[TR_MAX_DIMS];
    axis = norm_axis(axis, nd);
    memcpy(xsh, dysh, sizeof(int64_t) * (size_t)nd);
    xsh[axis] = full;
    memset(dx, 0, sizeof(double) * (size_t)tr_shape_numel(nd, xsh));
    for (int64_t f = 0; f < tr_shape_numel(nd, dysh); f++) {
        tr_ref_unravel(f, nd, dysh, idx);
        dx[slice_off(nd, xsh, idx, axis, start, step)] = dy[f];
    }
}

/* ---- losses ---- */

double tr_ref_cross_entropy(const double *x, const double *labels, int64_t N, int64_t C, int has_ignore, int64_t ignore,
                            double dloss, double *grad) {
    double s = 0;
    int64_t nv = 0;
    for (int64_t i = 0; i < N; i++) nv += !(has_ignore && (int64_t)labels[i] == ignore);
    for (int64_t i = 0; i < N; i++) {
        const double *r = x + i * C;
        int64_t lab = (int64_t)labels[i];
        int ig = has_ignore && lab == ignore;
        double m = -INFINITY, z = 0;
        for (int64_t c = 0; c < C; c++) m = fmax(m, r[c]);
        for (int64_t c = 0; c < C; c++) z += exp(r[c] - m);
        if (!ig) s += m + log(z) - r[lab];
        if (grad)
            for (int64_t c = 0; c < C; c++)
                grad[i * C + c] = ig ? 0 : dloss / (double)nv * (exp(r[c] - m) / z - (c == lab ? 1.0 : 0.0));
    }
    return nv ? s / (double)nv : 0;
}

double tr_ref_mse(const double *p, const double *t, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (p[i] - t[i]) * (p[i] - t[i]) / (double)n;
    return s;
}

/* ---- attention ---- */

/* Query i's probabilities over the Tk keys of head h, batch b: zeros where hidden, and
 * all zeros where it sees nothing. Returns the row's log-sum-exp (+inf: sees nothing). */
static double attn_row(const struct tr_ref_attn *c, const double *q, const double *k, int64_t b, int64_t h, int64_t i,
                       double *p) {
    const int64_t hk = h / (c->H / c->Hk), at = i + c->Tk - c->Tq; /* positions aligned at the end */
    const double *qi = q + ((b * c->H + h) * c->Tq + i) * c->D;
    double mx = -INFINITY, z = 0;
    for (int64_t j = 0; j < c->Tk; j++) {
        int seen = (!(c->causal || c->window > 0) || j <= at) && (c->window <= 0 || j > at - c->window);
        double s = c->scale * dot(qi, k + ((b * c->Hk + hk) * c->Tk + j) * c->D, c->D);
        if (c->mask.d) {
            int64_t idx[4] = {b, h, i, j};
            s += c->mask.d[tr_ref_bcast_off(c->mask.nd, c->mask.sh, 4, idx)];
        }
        if (c->rel_h) {
            const int64_t r = (b * c->H + h) * c->Tq + i;
            s += c->rel_h[r * c->Kh + j / c->Kw] + c->rel_w[r * c->Kw + j % c->Kw];
        }
        p[j] = seen ? s : -INFINITY;
        mx = fmax(mx, p[j]);
    }
    for (int64_t j = 0; j < c->Tk; j++) z += p[j] = mx == -INFINITY ? 0 : exp(p[j] - mx);
    for (int64_t j = 0; j < c->Tk; j++) p[j] = z > 0 ? p[j] / z : 0;
    return z > 0 ? mx + log(z) : INFINITY;
}

void tr_ref_attention_lse(const struct tr_ref_attn *c, const double *q, const double *k, double *lse) {
    double *p = malloc(sizeof(double) * (size_t)c->Tk);
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->H; h++)
            for (int64_t i = 0; i < c->Tq; i++) lse[(b * c->H + h) * c->Tq + i] = attn_row(c, q, k, b, h, i, p);
    free(p);
}

void tr_ref_attention(const struct tr_ref_attn *c, const double *q, const double *k, const double *v, double *out) {
    double *p = malloc(sizeof(double) * (size_t)c->Tk);
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->H; h++)
            for (int64_t i = 0; i < c->Tq; i++) {
                const int64_t hk = h / (c->H / c->Hk);
                attn_row(c, q, k, b, h, i, p);
                double *oi = out + ((b * c->H + h) * c->Tq + i) * c->Dv;
                for (int64_t e = 0; e < c->Dv; e++) {
                    oi[e] = 0;
                    for (int64_t j = 0; j < c->Tk; j++) oi[e] += p[j] * v[((b * c->Hk + hk) * c->Tk + j) * c->Dv + e];
                }
            }
    free(p);
}

void tr_ref_attention_grad(const struct tr_ref_attn *c, const double *q, const double *k, const double *v,
                           const double *dy, double *dq, double *dk, double *dv) {
    tr_ref_attention_rel_grad(c, q, k, v, dy, dq, dk, dv, NULL, NULL);
}

void tr_ref_attention_rel_grad(const struct tr_ref_attn *c, const double *q, const double *k, const double *v,
                               const double *dy, double *dq, double *dk, double *dv, double *drel_h, double *drel_w) {
    const int64_t D = c->D, Dv = c->Dv, Tq = c->Tq, Tk = c->Tk;
    if (drel_h) memset(drel_h, 0, sizeof(double) * (size_t)(c->B * c->H * Tq * c->Kh));
    if (drel_w) memset(drel_w, 0, sizeof(double) * (size_t)(c->B * c->H * Tq * c->Kw));
    if (dq) memset(dq, 0, sizeof(double) * (size_t)(c->B * c->H * Tq * D));
    if (dk) memset(dk, 0, sizeof(double) * (size_t)(c->B * c->Hk * Tk * D));
    if (dv) memset(dv, 0, sizeof(double) * (size_t)(c->B * c->Hk * Tk * Dv));
    double *p = malloc(sizeof(double) * (size_t)Tk), *dp = malloc(sizeof(double) * (size_t)Tk);
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->H; h++)
            for (int64_t i = 0; i < Tq; i++) {
                const int64_t hk = h / (c->H / c->Hk), qo = ((b * c->H + h) * Tq + i);
                const double *qi = q + qo * D, *gi = dy + qo * Dv;
                attn_row(c, q, k, b, h, i, p);
                double delta = 0;
                for (int64_t j = 0; j < Tk; j++) {
                    dp[j] = dot(gi, v + ((b * c->Hk + hk) * Tk + j) * Dv, Dv);
                    delta += p[j] * dp[j];
                }
                for (int64_t j = 0; j < Tk; j++) {
                    const int64_t ko = (b * c->Hk + hk) * Tk + j;
                    const double ds = c->scale * p[j] * (dp[j] - delta);
                    if (drel_h) drel_h[qo * c->Kh + j / c->Kw] += p[j] * (dp[j] - delta);
                    if (drel_w) drel_w[qo * c->Kw + j % c->Kw] += p[j] * (dp[j] - delta);
                    for (int64_t e = 0; e < D; e++) {
                        if (dq) dq[qo * D + e] += ds * k[ko * D + e];
                        if (dk) dk[ko * D + e] += ds * qi[e];
                    }
                    if (dv)
                        for (int64_t e = 0; e < Dv; e++) dv[ko * Dv + e] += p[j] * gi[e];
                }
            }
    free(p), free(dp);
}

/* ---- vision ---- */

int64_t tr_ref_conv_oh(const struct tr_ref_conv *c) {
    return (c->H + 2 * c->pad + c->pad_end - c->KH) / c->stride + 1;
}

int64_t tr_ref_conv_ow(const struct tr_ref_conv *c) {
    return (c->W + 2 * c->pad + c->pad_end - c->KW) / c->stride + 1;
}

/* The one loop nest of the three: every (output pixel, kernel tap) pair that lands in x,
 * handing f the flat offsets into x (less ci), w (less ci) and y (less co). Forward and
 * gradients differ only in what they accumulate. */
#define CONV_TAPS(c, BODY)                                                                              \
    do {                                                                                                \
        const int64_t OH_ = tr_ref_conv_oh(c), OW_ = tr_ref_conv_ow(c);                                 \
        for (int64_t n = 0; n < (c)->N; n++)                                                            \
            for (int64_t oh = 0; oh < OH_; oh++)                                                        \
                for (int64_t ow = 0; ow < OW_; ow++)                                                    \
                    for (int64_t kh = 0; kh < (c)->KH; kh++) {                                          \
                        const int64_t ih = oh * (c)->stride - (c)->pad + kh;                            \
                        if (ih < 0 || ih >= (c)->H) continue;                                           \
                        for (int64_t kw = 0; kw < (c)->KW; kw++) {                                      \
                            const int64_t iw = ow * (c)->stride - (c)->pad + kw;                        \
                            if (iw < 0 || iw >= (c)->W) continue;                                       \
                            const int64_t xo = ((n * (c)->H + ih) * (c)->W + iw) * (c)->Ci;             \
                            const int64_t yo = ((n * OH_ + oh) * OW_ + ow) * (c)->Co;                   \
                            for (int64_t co = 0; co < (c)->Co; co++)                                    \
                                for (int64_t ci = 0; ci < (c)->Ci; ci++) {                              \
                                    const int64_t wo = ((co * (c)->Ci + ci) * (c)->KH + kh) * (c)->KW + kw; \
                                    BODY;                                                               \
                                }                                                                       \
                        }                                                                               \
                    }                                                                                   \
    } while (0)

void tr_ref_conv2d(const struct tr_ref_conv *c, const double *x, const double *w, const double *bias, double *out) {
    const int64_t ny = c->N * tr_ref_conv_oh(c) * tr_ref_conv_ow(c);
    for (int64_t p = 0; p < ny; p++)
        for (int64_t co = 0; co < c->Co; co++) out[p * c->Co + co] = bias ? bias[co] : 0.0;
    CONV_TAPS(c, out[yo + co] += x[xo + ci] * w[wo]);
}

void tr_ref_conv2d_grad_input(const struct tr_ref_conv *c, const double *dy, const double *w, double *dx) {
    memset(dx, 0, sizeof(double) * (size_t)(c->N * c->H * c->W * c->Ci));
    CONV_TAPS(c, dx[xo + ci] += dy[yo + co] * w[wo]);
}

void tr_ref_conv2d_grad_weight(const struct tr_ref_conv *c, const double *x, const double *dy, double *dw) {
    memset(dw, 0, sizeof(double) * (size_t)(c->Co * c->Ci * c->KH * c->KW));
    CONV_TAPS(c, dw[wo] += x[xo + ci] * dy[yo + co]);
}
#undef CONV_TAPS

void tr_ref_group_norm(const double *x, const double *gamma, const double *beta, int64_t N, int64_t HW, int64_t C,
                       int64_t G, double eps, int silu, double *y) {
    const int64_t cg = C / G;
    for (int64_t n = 0; n < N; n++)
        for (int64_t gi = 0; gi < G; gi++) {
            double s = 0, ss = 0;
            for (int64_t p = 0; p < HW; p++)
                for (int64_t j = 0; j < cg; j++) s += x[(n * HW + p) * C + gi * cg + j];
            const double cnt = (double)(HW * cg), mean = s / cnt;
            for (int64_t p = 0; p < HW; p++)
                for (int64_t j = 0; j < cg; j++) {
                    const double d = x[(n * HW + p) * C + gi * cg + j] - mean;
                    ss += d * d;
                }
            const double rstd = 1.0 / sqrt(ss / cnt + eps);
            for (int64_t p = 0; p < HW; p++)
                for (int64_t j = 0; j < cg; j++) {
                    const int64_t c = gi * cg + j, f = (n * HW + p) * C + c;
                    double v = (x[f] - mean) * rstd * gamma[c] + beta[c];
                    y[f] = silu ? v / (1.0 + exp(-v)) : v;
                }
        }
}

/* One group's mean and 1/std (biased variance). */
static void gn_stats(const double *x, int64_t n, int64_t gi, int64_t HW, int64_t C, int64_t cg, double eps,
                     double *mean, double *rstd) {
    double s = 0, ss = 0;
    for (int64_t p = 0; p < HW; p++)
        for (int64_t j = 0; j < cg; j++) s += x[(n * HW + p) * C + gi * cg + j];
    *mean = s / (double)(HW * cg);
    for (int64_t p = 0; p < HW; p++)
        for (int64_t j = 0; j < cg; j++) {
            const double d = x[(n * HW + p) * C + gi * cg + j] - *mean;
            ss += d * d;
        }
    *rstd = 1.0 / sqrt(ss / (double)(HW * cg) + eps);
}

void tr_ref_group_norm_grad(const double *x, const double *gamma, const double *dy, int64_t N, int64_t HW, int64_t C,
                            int64_t G, double eps, double *dx) {
    const int64_t cg = C / G;
    const double cnt = (double)(HW * cg);
    for (int64_t n = 0; n < N; n++)
        for (int64_t gi = 0; gi < G; gi++) {
            double mean, rstd, s1 = 0, s2 = 0;
            gn_stats(x, n, gi, HW, C, cg, eps, &mean, &rstd);
            for (int64_t p = 0; p < HW; p++)
                for (int64_t j = 0; j < cg; j++) {
                    const int64_t c = gi * cg + j, f = (n * HW + p) * C + c;
                    s1 += dy[f] * gamma[c];
                    s2 += dy[f] * gamma[c] * (x[f] - mean) * rstd;
                }
            for (int64_t p = 0; p < HW; p++)
                for (int64_t j = 0; j < cg; j++) {
                    const int64_t c = gi * cg + j, f = (n * HW + p) * C + c;
                    dx[f] = rstd * (dy[f] * gamma[c] - s1 / cnt - (x[f] - mean) * rstd * s2 / cnt);
                }
        }
}

void tr_ref_group_norm_grad_gamma(const double *x, const double *dy, int64_t N, int64_t HW, int64_t C, int64_t G,
                                  double eps, double *dgamma) {
    const int64_t cg = C / G;
    for (int64_t c = 0; c < C; c++) dgamma[c] = 0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t gi = 0; gi < G; gi++) {
            double mean, rstd;
            gn_stats(x, n, gi, HW, C, cg, eps, &mean, &rstd);
            for (int64_t p = 0; p < HW; p++)
                for (int64_t j = 0; j < cg; j++) {
                    const int64_t c = gi * cg + j, f = (n * HW + p) * C + c;
                    dgamma[c] += dy[f] * (x[f] - mean) * rstd;
                }
        }
}

void tr_ref_timestep_embedding(const double *t, int64_t N, int64_t D, int flip, double shift, double period,
                               double *out) {
    const int64_t h = D / 2;
    for (int64_t n = 0; n < N; n++)
        for (int64_t i = 0; i < h; i++) {
            double a = t[n] * pow(period, -(double)i / ((double)h - shift));
            out[n * D + i] = flip ? cos(a) : sin(a);
            out[n * D + h + i] = flip ? sin(a) : cos(a);
        }
}
