/* tr_grad checked by finite differences in float64.
 *
 * Each test builds a small f64 graph, reduces its output to a scalar loss
 * SUM(out · R) with a fixed random R, applies tr_grad and evaluates the whole graph with
 * the naive reference evaluator below (one plain function per op, the forward ops and the
 * *_GRAD ops alike; it reads the graph only through the public accessors and does not
 * use the kernels library). Every gradient is compared, element by element, against
 * central differences of the loss: ‖analytic − numeric‖ / ‖numeric‖ < 1e-6.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "testutil.h"
#include "trident/autodiff.h"
#include "trident/graph.h"

#define MAXN 2048
#define FD_H 1e-6
#define FD_TOL 1e-6

/* ---- random numbers (local, so the data does not move when other code changes) ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static double urand(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}

/* in ±[0.1, 1.1): never zero, never near the kinks of relu or max */
static double nzrand(void) {
    double v = 0.1 + urand();
    return urand() < 0.5 ? -v : v;
}

/* ---- the test graph: leaves carry host values for the reference evaluator ---- */

enum fill { FILL_SIGNED, FILL_POSITIVE, FILL_DISTINCT };

struct tc {
    struct tr_graph *g;
    double *leaf[MAXN]; /* values of INPUT/PARAM nodes */
    double *v[MAXN];    /* evaluated values */
};

static struct tc *tc_new(void) {
    struct tc *t = calloc(1, sizeof *t);
    assert_non_null(t);
    assert_int_equal(tr_graph_init(&t->g, NULL), TR_OK);
    rng_state = 0x9e3779b97f4a7c15ull;
    return t;
}

static void tc_free(struct tc *t) {
    for (int i = 0; i < MAXN; i++) free(t->leaf[i]), free(t->v[i]);
    tr_graph_free(t->g);
    free(t);
}

static int64_t nel(const struct tr_graph *g, int id) { return tr_shape_numel(tr_node_ndim(g, id), tr_node_shape(g, id)); }

static int leaf(struct tc *t, const char *name, enum fill f, int nd, const int64_t *sh) {
    int id = tr_param(t->g, name, TR_DTYPE_F64, nd, sh, 0.0f, 1.0f);
    assert_true(id >= 0 && id < MAXN);
    int64_t n = nel(t->g, id);
    t->leaf[id] = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) {
        double x = nzrand();
        if (f == FILL_POSITIVE) x = fabs(x) + 0.4;
        if (f == FILL_DISTINCT) x = (double)((i * 7919) % n) * 0.05 + 0.01 * nzrand(); /* well apart: no ties */
        t->leaf[id][i] = x;
    }
    return id;
}

static int ids_input(struct tc *t, const char *name, int nd, const int64_t *sh, const int64_t *vals) {
    int id = tr_input(t->g, name, TR_DTYPE_I64, nd, sh);
    assert_true(id >= 0 && id < MAXN);
    int64_t n = nel(t->g, id);
    t->leaf[id] = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) t->leaf[id][i] = (double)vals[i];
    return id;
}

/* loss = SUM(out · R) reduced axis by axis to 0-d */
static int loss_of(struct tc *t, int out) {
    struct tr_graph *g = t->g;
    int64_t n = nel(g, out);
    double *r = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) r[i] = nzrand();
    int R = tr_const(g, NULL, TR_DTYPE_F64, tr_node_ndim(g, out), tr_node_shape(g, out), r);
    free(r);
    int x = tr_mul(g, out, R);
    while (x >= 0 && tr_node_ndim(g, x) > 0) x = tr_reduce(g, TR_OP_SUM, x, 0, 0);
    assert_true(x >= 0);
    return x;
}

/* ---- the reference evaluator ---- */

static void unravel(int64_t f, int nd, const int64_t *sh, int64_t *idx) {
    for (int i = nd - 1; i >= 0; i--) {
        idx[i] = sh[i] ? f % sh[i] : 0;
        f = sh[i] ? f / sh[i] : 0;
    }
}

/* Offset in a tensor of shape (nd, sh) broadcast against the index idx of rank ond. */
static int64_t bcast_off(int nd, const int64_t *sh, int ond, const int64_t *idx) {
    int64_t off = 0;
    for (int i = 0; i < nd; i++) off = off * sh[i] + (sh[i] == 1 ? 0 : idx[ond - nd + i]);
    return off;
}

static double gelu(double x, int tanh_form) {
    if (!tanh_form) return 0.5 * x * (1 + erf(x / sqrt(2.0)));
    double c = sqrt(2.0 / M_PI);
    return 0.5 * x * (1 + tanh(c * (x + 0.044715 * x * x * x)));
}

static double sigm(double x) { return 1 / (1 + exp(-x)); }

static double unary(int op, double x, const struct tr_attrs *a) {
    switch (op) {
    case TR_OP_GELU: return gelu(x, (int)a->ints[0]);
    case TR_OP_TANH: return tanh(x);
    case TR_OP_RELU: return x > 0 ? x : 0;
    case TR_OP_SILU: return x * sigm(x);
    case TR_OP_SIGMOID: return sigm(x);
    case TR_OP_EXP: return exp(x);
    case TR_OP_NEG: return -x;
    case TR_OP_SQRT: return sqrt(x);
    case TR_OP_RSQRT: return 1 / sqrt(x);
    case TR_OP_SCALE: return (double)a->floats[0] * x + (double)a->floats[1];
    default: fail_msg("reference: unary op %d", op); return 0;
    }
}

static double unary_deriv(int op, double x, const struct tr_attrs *a) {
    switch (op) {
    case TR_OP_GELU:
        if (!a->ints[1]) return 0.5 * (1 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) / sqrt(2 * M_PI);
        else {
            double c = sqrt(2.0 / M_PI), th = tanh(c * (x + 0.044715 * x * x * x));
            return 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * c * (1 + 3 * 0.044715 * x * x);
        }
    case TR_OP_TANH: return 1 - tanh(x) * tanh(x);
    case TR_OP_RELU: return x > 0;
    case TR_OP_SILU: return sigm(x) * (1 + x * (1 - sigm(x)));
    case TR_OP_SIGMOID: return sigm(x) * (1 - sigm(x));
    case TR_OP_EXP: return exp(x);
    case TR_OP_NEG: return -1;
    case TR_OP_SQRT: return 0.5 / sqrt(x);
    case TR_OP_RSQRT: return -0.5 * pow(x, -1.5);
    case TR_OP_SCALE: return (double)a->floats[0];
    default: fail_msg("reference: unary_grad of op %d", op); return 0;
    }
}

struct view {
    int nd;
    const int64_t *sh;
    double *d;
};

static struct view in_view(struct tc *t, int id, int k) {
    int x = tr_node_input(t->g, id, k);
    struct view v = {tr_node_ndim(t->g, x), tr_node_shape(t->g, x), t->v[x]};
    return v;
}

/* Attention, forward (which < 0) or one gradient (0 dq, 1 dk, 2 dv), accumulated into o. */
static void ref_attention(struct tc *t, int id, int which, double *o) {
    const struct tr_attrs *a = tr_node_attrs(t->g, id);
    int grad = which >= 0, n = tr_node_n_inputs(t->g, id);
    struct view q = in_view(t, id, 0), k = in_view(t, id, 1), v = in_view(t, id, 2);
    struct view dyv = grad ? in_view(t, id, 3) : (struct view){0, NULL, NULL};
    int has_mask = grad ? n == 5 : n == 4;
    struct view m = has_mask ? in_view(t, id, grad ? 4 : 3) : (struct view){0, NULL, NULL};
    int64_t B = q.sh[0], H = q.sh[1], Tq = q.sh[2], D = q.sh[3], Hk = k.sh[1], Tk = k.sh[2], Dv = v.sh[3];
    double scale = a->floats[0];
    int causal = (int)a->ints[0];
    int64_t window = a->ints[1];
    double *s = malloc(sizeof(double) * (size_t)Tk), *p = malloc(sizeof(double) * (size_t)Tk);
    double *dp = malloc(sizeof(double) * (size_t)Tk);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            int64_t hk = h / (H / Hk);
            for (int64_t i = 0; i < Tq; i++) {
                const double *qi = q.d + ((b * H + h) * Tq + i) * D;
                int64_t pos = i + Tk - Tq;
                double mx = -INFINITY;
                for (int64_t j = 0; j < Tk; j++) {
                    int seen = (!(causal || window > 0) || j <= pos) && (window == 0 || j > pos - window);
                    const double *kj = k.d + ((b * Hk + hk) * Tk + j) * D;
                    double acc = 0;
                    for (int64_t d = 0; d < D; d++) acc += qi[d] * kj[d];
                    acc *= scale;
                    if (has_mask) {
                        int64_t idx[4] = {b, h, i, j};
                        acc += m.d[bcast_off(m.nd, m.sh, 4, idx)];
                    }
                    s[j] = seen ? acc : -INFINITY;
                    if (s[j] > mx) mx = s[j];
                }
                double z = 0;
                for (int64_t j = 0; j < Tk; j++) z += p[j] = exp(s[j] - mx);
                for (int64_t j = 0; j < Tk; j++) p[j] /= z;
                if (!grad) {
                    for (int64_t e = 0; e < Dv; e++) {
                        double acc = 0;
                        for (int64_t j = 0; j < Tk; j++) acc += p[j] * v.d[((b * Hk + hk) * Tk + j) * Dv + e];
                        o[((b * H + h) * Tq + i) * Dv + e] = acc;
                    }
                    continue;
                }
                const double *dy = dyv.d + ((b * H + h) * Tq + i) * Dv;
                double pdp = 0;
                for (int64_t j = 0; j < Tk; j++) {
                    double acc = 0;
                    for (int64_t e = 0; e < Dv; e++) acc += dy[e] * v.d[((b * Hk + hk) * Tk + j) * Dv + e];
                    dp[j] = acc;
                    pdp += p[j] * acc;
                }
                for (int64_t j = 0; j < Tk; j++) {
                    double ds = p[j] * (dp[j] - pdp) * scale;
                    if (which == 0)
                        for (int64_t d = 0; d < D; d++)
                            o[((b * H + h) * Tq + i) * D + d] += ds * k.d[((b * Hk + hk) * Tk + j) * D + d];
                    else if (which == 1)
                        for (int64_t d = 0; d < D; d++) o[((b * Hk + hk) * Tk + j) * D + d] += ds * qi[d];
                    else
                        for (int64_t e = 0; e < Dv; e++) o[((b * Hk + hk) * Tk + j) * Dv + e] += p[j] * dy[e];
                }
            }
        }
    free(s), free(p), free(dp);
}

/* outer × len × inner around `axis` of (nd, sh) */
static void split(int nd, const int64_t *sh, int axis, int64_t *outer, int64_t *len, int64_t *inner) {
    *outer = *inner = 1;
    for (int i = 0; i < axis; i++) *outer *= sh[i];
    *len = sh[axis];
    for (int i = axis + 1; i < nd; i++) *inner *= sh[i];
}

static void eval_node(struct tc *t, int id) {
    const struct tr_graph *g = t->g;
    int op = tr_node_op(g, id), nd = tr_node_ndim(g, id);
    const int64_t *sh = tr_node_shape(g, id);
    const struct tr_attrs *a = tr_node_attrs(g, id);
    int64_t n = nel(g, id), idx[TR_MAX_DIMS], idx2[TR_MAX_DIMS];
    free(t->v[id]);
    double *o = t->v[id] = calloc((size_t)(n ? n : 1), sizeof(double));
    struct view x = tr_node_n_inputs(g, id) > 0 ? in_view(t, id, 0) : (struct view){0, NULL, NULL};
    struct view y = tr_node_n_inputs(g, id) > 1 ? in_view(t, id, 1) : (struct view){0, NULL, NULL};
    switch (op) {
    case TR_OP_INPUT: case TR_OP_PARAM:
        assert_non_null(t->leaf[id]);
        memcpy(o, t->leaf[id], sizeof(double) * (size_t)n);
        break;
    case TR_OP_CONST: {
        struct tr_tensor c = tr_node_tensor(g, id);
        c.data = (void *)tr_node_data(g, id);
        for (int64_t i = 0; i < n; i++) o[i] = tr_tensor_get_f64(&c, i);
        break;
    }
    case TR_OP_MATMUL: {
        int ta = (int)a->ints[0], tb = (int)a->ints[1];
        int64_t M = sh[nd - 2], N = sh[nd - 1], K = x.sh[x.nd - 1 - ta];
        for (int64_t f = 0; f < n; f++) {
            unravel(f, nd, sh, idx);
            int64_t m = idx[nd - 2], c = idx[nd - 1];
            int64_t ab = bcast_off(x.nd - 2, x.sh, nd - 2, idx), bb = bcast_off(y.nd - 2, y.sh, nd - 2, idx);
            double acc = 0;
            for (int64_t kk = 0; kk < K; kk++) {
                double av = x.d[ab * M * K + (ta ? kk * M + m : m * K + kk)];
                double bv = y.d[bb * K * N + (tb ? c * K + kk : kk * N + c)];
                acc += av * bv;
            }
            o[f] = acc * (double)a->floats[0];
        }
        break;
    }
    case TR_OP_ADD: case TR_OP_SUB: case TR_OP_MUL: case TR_OP_DIV:
        for (int64_t f = 0; f < n; f++) {
            unravel(f, nd, sh, idx);
            double p = x.d[bcast_off(x.nd, x.sh, nd, idx)], q = y.d[bcast_off(y.nd, y.sh, nd, idx)];
            o[f] = op == TR_OP_ADD ? p + q : op == TR_OP_SUB ? p - q : op == TR_OP_MUL ? p * q : p / q;
        }
        break;
    case TR_OP_GELU: case TR_OP_TANH: case TR_OP_RELU: case TR_OP_SILU: case TR_OP_SIGMOID:
    case TR_OP_EXP: case TR_OP_NEG: case TR_OP_SQRT: case TR_OP_RSQRT: case TR_OP_SCALE:
        for (int64_t f = 0; f < n; f++) o[f] = unary(op, x.d[f], a);
        break;
    case TR_OP_UNARY_GRAD:
        for (int64_t f = 0; f < n; f++) o[f] = unary_deriv((int)a->ints[0], x.d[f], a) * y.d[f];
        break;
    case TR_OP_SOFTMAX: case TR_OP_SOFTMAX_GRAD: {
        int64_t D = sh[nd - 1];
        for (int64_t r = 0; r < n / D; r++) {
            const double *xr = x.d + r * D;
            double *or = o + r * D;
            if (op == TR_OP_SOFTMAX) {
                double mx = -INFINITY, z = 0;
                for (int64_t i = 0; i < D; i++) mx = fmax(mx, xr[i]);
                for (int64_t i = 0; i < D; i++) z += or[i] = exp(xr[i] - mx);
                for (int64_t i = 0; i < D; i++) or[i] /= z;
            } else {
                const double *dr = y.d + r * D;
                double s = 0;
                for (int64_t i = 0; i < D; i++) s += dr[i] * xr[i];
                for (int64_t i = 0; i < D; i++) or[i] = xr[i] * (dr[i] - s);
            }
        }
        break;
    }
    case TR_OP_LAYER_NORM: case TR_OP_LAYER_NORM_GRAD: case TR_OP_LAYER_NORM_GRAD_GAMMA: {
        int64_t D = x.sh[x.nd - 1], rows = nel(g, tr_node_input(g, id, 0)) / D;
        double eps = a->floats[0];
        const double *gam = op == TR_OP_LAYER_NORM_GRAD_GAMMA ? NULL : y.d;
        const double *dy = op == TR_OP_LAYER_NORM_GRAD ? in_view(t, id, 2).d : op == TR_OP_LAYER_NORM_GRAD_GAMMA ? y.d : NULL;
        for (int64_t r = 0; r < rows; r++) {
            const double *xr = x.d + r * D;
            double mu = 0, var = 0;
            for (int64_t i = 0; i < D; i++) mu += xr[i];
            mu /= (double)D;
            for (int64_t i = 0; i < D; i++) var += (xr[i] - mu) * (xr[i] - mu);
            var /= (double)D;
            double rs = 1 / sqrt(var + eps);
            if (op == TR_OP_LAYER_NORM) {
                const double *bet = in_view(t, id, 2).d;
                for (int64_t i = 0; i < D; i++) o[r * D + i] = (xr[i] - mu) * rs * gam[i] + bet[i];
            } else if (op == TR_OP_LAYER_NORM_GRAD_GAMMA) {
                for (int64_t i = 0; i < D; i++) o[i] += dy[r * D + i] * (xr[i] - mu) * rs;
            } else {
                double m1 = 0, m2 = 0;
                for (int64_t i = 0; i < D; i++) {
                    double dxh = dy[r * D + i] * gam[i];
                    m1 += dxh;
                    m2 += dxh * (xr[i] - mu) * rs;
                }
                m1 /= (double)D, m2 /= (double)D;
                for (int64_t i = 0; i < D; i++)
                    o[r * D + i] = rs * (dy[r * D + i] * gam[i] - m1 - (xr[i] - mu) * rs * m2);
            }
        }
        break;
    }
    case TR_OP_EMBEDDING: {
        int64_t D = x.sh[1];
        for (int64_t r = 0; r < n / D; r++) memcpy(o + r * D, x.d + (int64_t)y.d[r] * D, sizeof(double) * (size_t)D);
        break;
    }
    case TR_OP_EMBEDDING_GRAD: {
        int64_t D = sh[1], rows = nel(g, tr_node_input(g, id, 0));
        for (int64_t r = 0; r < rows; r++)
            for (int64_t i = 0; i < D; i++) o[(int64_t)x.d[r] * D + i] += y.d[r * D + i];
        break;
    }
    case TR_OP_RESHAPE: case TR_OP_CAST:
        memcpy(o, x.d, sizeof(double) * (size_t)n);
        break;
    case TR_OP_TRANSPOSE:
        for (int64_t f = 0; f < n; f++) {
            unravel(f, nd, sh, idx);
            for (int i = 0; i < nd; i++) idx2[a->ints[i]] = idx[i];
            int64_t off = 0;
            for (int i = 0; i < nd; i++) off = off * x.sh[i] + idx2[i];
            o[f] = x.d[off];
        }
        break;
    case TR_OP_BROADCAST:
        for (int64_t f = 0; f < n; f++) {
            unravel(f, nd, sh, idx);
            o[f] = x.d[bcast_off(x.nd, x.sh, nd, idx)];
        }
        break;
    case TR_OP_SLICE: case TR_OP_SLICE_GRAD: {
        int ax = (int)a->ints[0];
        int64_t start = a->ints[1], step = a->ints[3];
        const int64_t *ssh = op == TR_OP_SLICE ? sh : x.sh; /* the sliced (small) shape */
        for (int64_t f = 0; f < nel(g, op == TR_OP_SLICE ? id : tr_node_input(g, id, 0)); f++) {
            unravel(f, nd, ssh, idx);
            idx[ax] = start + idx[ax] * step;
            int64_t off = 0;
            for (int i = 0; i < nd; i++) off = off * (op == TR_OP_SLICE ? x.sh[i] : sh[i]) + idx[i];
            if (op == TR_OP_SLICE) o[f] = x.d[off];
            else o[off] = x.d[f];
        }
        break;
    }
    case TR_OP_CONCAT: {
        int ax = (int)a->ints[0];
        int64_t base = 0;
        for (int k = 0; k < tr_node_n_inputs(g, id); k++) {
            struct view in = in_view(t, id, k);
            int64_t m = nel(g, tr_node_input(g, id, k));
            for (int64_t f = 0; f < m; f++) {
                unravel(f, nd, in.sh, idx);
                idx[ax] += base;
                int64_t off = 0;
                for (int i = 0; i < nd; i++) off = off * sh[i] + idx[i];
                o[off] = in.d[f];
            }
            base += in.sh[ax];
        }
        break;
    }
    case TR_OP_SUM: case TR_OP_MEAN: case TR_OP_MAX: case TR_OP_MAX_GRAD: {
        int64_t outer, len, inner;
        split(x.nd, x.sh, (int)a->ints[0], &outer, &len, &inner);
        for (int64_t p = 0; p < outer; p++)
            for (int64_t q = 0; q < inner; q++) {
                const double *base = x.d + p * len * inner + q;
                double acc = op == TR_OP_SUM || op == TR_OP_MEAN ? 0 : -INFINITY;
                int64_t arg = 0;
                for (int64_t l = 0; l < len; l++) {
                    double e = base[l * inner];
                    if (op == TR_OP_SUM || op == TR_OP_MEAN) acc += e;
                    else if (e > acc) acc = e, arg = l;
                }
                if (op == TR_OP_MAX_GRAD) o[p * len * inner + arg * inner + q] = y.d[p * inner + q];
                else o[p * inner + q] = op == TR_OP_MEAN ? acc / (double)len : acc;
            }
        break;
    }
    case TR_OP_ATTENTION:
        ref_attention(t, id, -1, o);
        break;
    case TR_OP_ATTENTION_GRAD:
        ref_attention(t, id, (int)a->ints[2], o);
        break;
    case TR_OP_CROSS_ENTROPY: case TR_OP_CROSS_ENTROPY_GRAD: {
        int64_t N = x.sh[0], C = x.sh[1], count = 0;
        for (int64_t r = 0; r < N; r++) count += !(a->ints[1] && (int64_t)y.d[r] == a->ints[0]);
        double dl = op == TR_OP_CROSS_ENTROPY_GRAD ? in_view(t, id, 2).d[0] : 0;
        for (int64_t r = 0; r < N; r++) {
            int64_t lab = (int64_t)y.d[r];
            if ((a->ints[1] && lab == a->ints[0]) || count == 0) continue;
            const double *xr = x.d + r * C;
            double mx = -INFINITY, z = 0;
            for (int64_t c = 0; c < C; c++) mx = fmax(mx, xr[c]);
            for (int64_t c = 0; c < C; c++) z += exp(xr[c] - mx);
            if (op == TR_OP_CROSS_ENTROPY) o[0] += (log(z) + mx - xr[lab]) / (double)count;
            else
                for (int64_t c = 0; c < C; c++)
                    o[r * C + c] = (exp(xr[c] - mx) / z - (c == lab)) * dl / (double)count;
        }
        break;
    }
    case TR_OP_UPDATE_SLICE: {
        int ax = (int)a->ints[0];
        int64_t s0 = (int64_t)in_view(t, id, 2).d[0], outer, len, inner, nu = y.sh[ax];
        split(nd, sh, ax, &outer, &len, &inner);
        assert_true(s0 >= 0 && s0 + nu <= len);
        memcpy(o, x.d, sizeof(double) * (size_t)n);
        for (int64_t b = 0; b < outer; b++)
            for (int64_t j = 0; j < nu; j++)
                for (int64_t i = 0; i < inner; i++) o[(b * len + s0 + j) * inner + i] = y.d[(b * nu + j) * inner + i];
        break;
    }
    case TR_OP_MSE: {
        int64_t m = nel(g, tr_node_input(g, id, 0));
        for (int64_t i = 0; i < m; i++) o[0] += (x.d[i] - y.d[i]) * (x.d[i] - y.d[i]) / (double)m;
        break;
    }
    default:
        fail_msg("reference evaluator: no rule for node %d %s", id, tr_op_name(op));
    }
}

static void eval_upto(struct tc *t, int last) {
    for (int id = 0; id <= last; id++) eval_node(t, id);
}

/* ---- the checker ---- */

/* Largest relative error ‖analytic − numeric‖/‖numeric‖ over the wrt nodes (leaves). */
static double grad_err(struct tc *t, int loss, int n_wrt, const int *wrt, const int *grads) {
    struct tr_error err;
    if (tr_graph_status(t->g, &err)) fail_msg("graph: %s", err.msg);
    int n = tr_graph_n_nodes(t->g);
    assert_true(n <= MAXN);
    eval_upto(t, n - 1);
    double worst = 0;
    for (int w = 0; w < n_wrt; w++) {
        assert_int_equal(tr_node_dtype(t->g, grads[w]), tr_node_dtype(t->g, wrt[w]));
        assert_int_equal(nel(t->g, grads[w]), nel(t->g, wrt[w]));
        int64_t m = nel(t->g, wrt[w]);
        double *an = malloc(sizeof(double) * (size_t)m);
        memcpy(an, t->v[grads[w]], sizeof(double) * (size_t)m);
        double num = 0, den = 0;
        for (int64_t i = 0; i < m; i++) {
            double *p = &t->leaf[wrt[w]][i], x0 = *p;
            *p = x0 + FD_H;
            eval_upto(t, loss);
            double lp = t->v[loss][0];
            *p = x0 - FD_H;
            eval_upto(t, loss);
            double lm = t->v[loss][0];
            *p = x0;
            double fd = (lp - lm) / (2 * FD_H);
            num += (an[i] - fd) * (an[i] - fd);
            den += fd * fd;
        }
        free(an);
        double e = den > 0 ? sqrt(num / den) : sqrt(num);
        if (e > worst) worst = e;
    }
    return worst;
}

/* tr_grad, then the check; names the case on failure. */
static void check(struct tc *t, const char *what, int loss, int n_wrt, const int *wrt) {
    int grads[16];
    struct tr_error err;
    assert_true(n_wrt <= 16);
    if (tr_grad(t->g, loss, n_wrt, wrt, grads, &err)) fail_msg("%s: tr_grad: %s", what, err.msg);
    for (int i = 0; i < n_wrt; i++) {
        char want[TR_NAME_MAX + 8];
        snprintf(want, sizeof want, "grad.%s", tr_node_name(t->g, wrt[i]));
        assert_int_equal(tr_graph_find(t->g, want), grads[i]);
    }
    double e = grad_err(t, loss, n_wrt, wrt, grads);
    if (getenv("AD_VERBOSE")) printf("%-40s %.3g (%d nodes)\n", what, e, tr_graph_n_nodes(t->g));
    if (!(e < FD_TOL)) fail_msg("%s: gradient relative error %.3g >= %.0e", what, e, FD_TOL);
}

#define SH(...) (const int64_t[]){__VA_ARGS__}

/* ---- op by op ---- */

static void test_binary_broadcast(void **state) {
    (void)state;
    static const int ops[] = {TR_OP_ADD, TR_OP_SUB, TR_OP_MUL, TR_OP_DIV};
    for (int i = 0; i < 4; i++) {
        struct tc *t = tc_new();
        /* both operands broadcast: (2,1,4) with (3,1) -> (2,3,4) */
        int a = leaf(t, "a", FILL_SIGNED, 3, SH(2, 1, 4));
        int b = leaf(t, "b", ops[i] == TR_OP_DIV ? FILL_POSITIVE : FILL_SIGNED, 2, SH(3, 1));
        int in[2] = {a, b};
        int y = tr_graph_add_node(t->g, ops[i], 2, in, NULL);
        int wrt[2] = {a, b};
        check(t, tr_op_name(ops[i]), loss_of(t, y), 2, wrt);
        tc_free(t);
    }
}

static void test_unaries(void **state) {
    (void)state;
    static const int ops[] = {TR_OP_GELU, TR_OP_GELU, TR_OP_TANH, TR_OP_RELU, TR_OP_SILU, TR_OP_SIGMOID,
                              TR_OP_EXP, TR_OP_NEG, TR_OP_SQRT, TR_OP_RSQRT, TR_OP_SCALE};
    for (int i = 0; i < (int)(sizeof ops / sizeof *ops); i++) {
        struct tc *t = tc_new();
        int pos = ops[i] == TR_OP_SQRT || ops[i] == TR_OP_RSQRT;
        int x = leaf(t, "x", pos ? FILL_POSITIVE : FILL_SIGNED, 2, SH(3, 5));
        int y = ops[i] == TR_OP_GELU ? tr_gelu(t->g, x, i == 1)
              : ops[i] == TR_OP_SCALE ? tr_scale(t->g, x, -1.75f, 0.5f)
                                     : tr_unary(t->g, ops[i], x);
        char what[64];
        snprintf(what, sizeof what, "%s%s", tr_op_name(ops[i]), i == 1 ? " (tanh)" : "");
        check(t, what, loss_of(t, y), 1, &x);
        tc_free(t);
    }
}

static void test_matmul(void **state) {
    (void)state;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int shared = 0; shared < 3; shared++) {
                struct tc *t = tc_new();
                int64_t M = 3, K = 4, N = 2;
                /* a batched (2,3,.,.); b 2-D shared by every batch, or (3,.,.) broadcast over axis 0;
                 * shared == 2: a 2-D shared by a batched b */
                int a = shared == 2 ? leaf(t, "a", FILL_SIGNED, 2, ta ? SH(K, M) : SH(M, K))
                                    : leaf(t, "a", FILL_SIGNED, 4, ta ? SH(2, 3, K, M) : SH(2, 3, M, K));
                int b = shared == 1 ? leaf(t, "b", FILL_SIGNED, 2, tb ? SH(N, K) : SH(K, N))
                               : leaf(t, "b", FILL_SIGNED, 3, tb ? SH(3, N, K) : SH(3, K, N));
                struct tr_attrs at;
                memset(&at, 0, sizeof at);
                at.ints[0] = ta, at.ints[1] = tb, at.floats[0] = 0.5f;
                int in[2] = {a, b};
                int y = tr_graph_add_node(t->g, TR_OP_MATMUL, 2, in, &at);
                char what[64];
                snprintf(what, sizeof what, "matmul trans_a=%d trans_b=%d %s", ta, tb,
                         shared == 0 ? "3-D b" : shared == 1 ? "2-D b" : "2-D a");
                int wrt[2] = {a, b};
                check(t, what, loss_of(t, y), 2, wrt);
                tc_free(t);
            }
}

static void test_softmax_layer_norm(void **state) {
    (void)state;
    struct tc *t = tc_new();
    int x = leaf(t, "x", FILL_SIGNED, 3, SH(2, 3, 5));
    check(t, "softmax", loss_of(t, tr_softmax(t->g, x)), 1, &x);
    tc_free(t);

    t = tc_new();
    x = leaf(t, "x", FILL_SIGNED, 3, SH(2, 3, 6));
    int gm = leaf(t, "gamma", FILL_SIGNED, 1, SH(6)), bt = leaf(t, "beta", FILL_SIGNED, 1, SH(6));
    int wrt[3] = {x, gm, bt};
    check(t, "layer_norm", loss_of(t, tr_layer_norm(t->g, x, gm, bt, 1e-5f)), 3, wrt);
    tc_free(t);
}

static void test_attention(void **state) {
    (void)state;
    struct cfg { int H, Hk, Tq, Tk, causal, window, mask; const char *what; } cases[] = {
        {2, 2, 3, 3, 0, 0, 1, "mask"},
        {2, 2, 4, 4, 1, 0, 0, "causal"},
        {4, 2, 2, 5, 1, 0, 1, "GQA, causal, mask, Tq < Tk"},
        {2, 1, 4, 4, 0, 2, 0, "window 2, GQA"},
    };
    for (int c = 0; c < 4; c++) {
        struct tc *t = tc_new();
        int64_t B = 2, D = 3, Dv = 2;
        int q = leaf(t, "q", FILL_SIGNED, 4, SH(B, cases[c].H, cases[c].Tq, D));
        int k = leaf(t, "k", FILL_SIGNED, 4, SH(B, cases[c].Hk, cases[c].Tk, D));
        int v = leaf(t, "v", FILL_SIGNED, 4, SH(B, cases[c].Hk, cases[c].Tk, Dv));
        int mask = cases[c].mask ? leaf(t, "mask", FILL_SIGNED, 4, SH(B, 1, 1, cases[c].Tk)) : -1;
        int y = tr_attention(t->g, q, k, v, mask, 0.7f, cases[c].causal, cases[c].window);
        int wrt[3] = {q, k, v};
        check(t, cases[c].what, loss_of(t, y), 3, wrt);
        tc_free(t);
    }
}

static void test_embedding(void **state) {
    (void)state;
    struct tc *t = tc_new();
    int tab = leaf(t, "table", FILL_SIGNED, 2, SH(5, 3));
    int ids = ids_input(t, "ids", 2, SH(2, 3), SH(1, 4, 1, 0, 1, 4)); /* repeated ids, row 2 and 3 unused */
    check(t, "embedding", loss_of(t, tr_embedding(t->g, tab, ids)), 1, &tab);
    tc_free(t);
}

static void test_layout(void **state) {
    (void)state;
    struct tc *t = tc_new();
    int x = leaf(t, "x", FILL_SIGNED, 3, SH(2, 7, 3));
    check(t, "slice step 3", loss_of(t, tr_slice(t->g, x, 1, 1, -1, 3)), 1, &x);
    tc_free(t);

    t = tc_new();
    int a = leaf(t, "a", FILL_SIGNED, 2, SH(2, 3)), b = leaf(t, "b", FILL_SIGNED, 2, SH(2, 1));
    int c = leaf(t, "c", FILL_SIGNED, 2, SH(2, 2));
    int xs[4] = {a, b, c, a}; /* a used twice: contributions add up */
    int wrt[3] = {a, b, c};
    check(t, "concat", loss_of(t, tr_concat(t->g, 4, xs, -1)), 3, wrt);
    tc_free(t);

    t = tc_new();
    x = leaf(t, "x", FILL_SIGNED, 3, SH(2, 3, 4));
    int perm[3] = {2, 0, 1};
    int y = tr_reshape(t->g, tr_transpose(t->g, x, 3, perm), 2, SH(4, -1));
    check(t, "transpose+reshape", loss_of(t, y), 1, &x);
    tc_free(t);

    t = tc_new();
    x = leaf(t, "x", FILL_SIGNED, 2, SH(3, 4));
    check(t, "cast f64->f64", loss_of(t, tr_cast(t->g, x, TR_DTYPE_F64)), 1, &x);
    tc_free(t);

    /* the training layout ops have rules too (BROADCAST's is a reduction, SLICE_GRAD's a slice) */
    t = tc_new();
    x = leaf(t, "x", FILL_SIGNED, 2, SH(3, 1));
    struct tr_attrs at;
    memset(&at, 0, sizeof at);
    at.n_ints = 3, at.ints[0] = 2, at.ints[1] = 3, at.ints[2] = 4;
    check(t, "broadcast", loss_of(t, tr_graph_add_node(t->g, TR_OP_BROADCAST, 1, &x, &at)), 1, &x);
    tc_free(t);

    t = tc_new();
    x = leaf(t, "x", FILL_SIGNED, 2, SH(2, 3));
    memset(&at, 0, sizeof at);
    at.n_ints = 5, at.ints[0] = 1, at.ints[1] = 1, at.ints[2] = 6, at.ints[3] = 2, at.ints[4] = 7;
    check(t, "slice_grad", loss_of(t, tr_graph_add_node(t->g, TR_OP_SLICE_GRAD, 1, &x, &at)), 1, &x);
    tc_free(t);
}

/* UPDATE_SLICE: dx is dy with the slice zeroed, dupdate dy's slice (a CONST start); with a
 * start fed at run time only dx is given and dupdate is refused by name. */
static void test_update_slice(void **state) {
    (void)state;
    for (int axis = -3; axis < 3; axis++) {
        struct tc *t = tc_new();
        int64_t xs[3] = {2, 5, 3}, us[3] = {2, 5, 3};
        int ax = axis < 0 ? axis + 3 : axis;
        us[ax] = xs[ax] == 5 ? 2 : 1;
        int x = leaf(t, "x", FILL_SIGNED, 3, xs), u = leaf(t, "update", FILL_SIGNED, 3, us);
        int32_t s0 = ax == 1 ? 3 : 1;
        int st = tr_const(t->g, "start", TR_DTYPE_I32, 1, SH(1), &s0);
        int y = tr_update_slice(t->g, x, u, st, axis);
        int y2 = tr_mul(t->g, y, y); /* dy not constant: the zeroed slice is visible */
        int wrt[2] = {x, u};
        char what[64];
        snprintf(what, sizeof what, "update_slice axis %d", axis);
        check(t, what, loss_of(t, y2), 2, wrt);
        tc_free(t);
    }

    struct tc *t = tc_new();
    int x = leaf(t, "x", FILL_SIGNED, 2, SH(6, 3)), u = leaf(t, "update", FILL_SIGNED, 2, SH(2, 3));
    int st = tr_input(t->g, "start", TR_DTYPE_I32, 0, NULL);
    t->leaf[st] = malloc(sizeof(double));
    t->leaf[st][0] = 4;
    int loss = loss_of(t, tr_update_slice(t->g, x, u, st, 0));
    check(t, "update_slice runtime start, dx", loss, 1, &x);
    int n = tr_graph_n_nodes(t->g), gr[2];
    struct tr_error err = {0};
    int wrt[2] = {x, u};
    assert_int_equal(tr_grad(t->g, loss, 2, wrt, gr, &err), TR_ERR_UNSUPPORTED);
    if (!strstr(err.msg, "update_slice: gradient needs a constant start")) fail_msg("message: %s", err.msg);
    assert_int_equal(tr_graph_n_nodes(t->g), n);
    tc_free(t);
}

static void test_reductions(void **state) {
    (void)state;
    static const int ops[] = {TR_OP_SUM, TR_OP_MEAN, TR_OP_MAX};
    for (int o = 0; o < 3; o++)
        for (int axis = -1; axis < 3; axis++)
            for (int keep = 0; keep < 2; keep++) {
                struct tc *t = tc_new();
                int x = leaf(t, "x", ops[o] == TR_OP_MAX ? FILL_DISTINCT : FILL_SIGNED, 3, SH(2, 3, 4));
                char what[64];
                snprintf(what, sizeof what, "%s axis %d keepdims %d", tr_op_name(ops[o]), axis, keep);
                check(t, what, loss_of(t, tr_reduce(t->g, ops[o], x, axis, keep)), 1, &x);
                tc_free(t);
            }
}

static void test_losses(void **state) {
    (void)state;
    struct tc *t = tc_new();
    int lg = leaf(t, "logits", FILL_SIGNED, 2, SH(5, 4));
    int lb = ids_input(t, "labels", 1, SH(5), SH(2, 0, 3, 2, 1)); /* label 2 ignored (two rows) */
    int ce = tr_cross_entropy(t->g, lg, lb, 2);
    assert_int_equal(tr_node_ndim(t->g, ce), 0);
    check(t, "cross_entropy (ignore 2)", ce, 1, &lg);
    tc_free(t);

    t = tc_new();
    lg = leaf(t, "logits", FILL_SIGNED, 2, SH(3, 4));
    lb = ids_input(t, "labels", 1, SH(3), SH(3, 0, 1));
    /* through a scaled loss, so dloss is not 1 */
    check(t, "cross_entropy", tr_scale(t->g, tr_cross_entropy(t->g, lg, lb, -1), 3.0f, 0.0f), 1, &lg);
    tc_free(t);

    t = tc_new();
    int p = leaf(t, "pred", FILL_SIGNED, 2, SH(3, 4)), tg = leaf(t, "target", FILL_SIGNED, 2, SH(3, 4));
    int wrt[2] = {p, tg};
    check(t, "mse", tr_scale(t->g, tr_mse(t->g, p, tg), -2.5f, 0.0f), 2, wrt);
    tc_free(t);
}

/* ---- small models ---- */

static void test_mlp(void **state) {
    (void)state;
    struct tc *t = tc_new();
    struct tr_graph *g = t->g;
    int x = leaf(t, "x", FILL_SIGNED, 2, SH(4, 5));
    int w1 = leaf(t, "w1", FILL_SIGNED, 2, SH(6, 5)), b1 = leaf(t, "b1", FILL_SIGNED, 1, SH(6));
    int w2 = leaf(t, "w2", FILL_SIGNED, 2, SH(6, 3)), b2 = leaf(t, "b2", FILL_SIGNED, 1, SH(3));
    int h = tr_unary(g, TR_OP_TANH, tr_add(g, tr_matmul(g, x, w1, 0, 1), b1));
    int y = tr_add(g, tr_matmul(g, h, w2, 0, 0), b2);
    int lb = ids_input(t, "labels", 1, SH(4), SH(0, 2, 1, 2));
    int wrt[5] = {w1, b1, w2, b2, x};
    check(t, "2-layer MLP", tr_cross_entropy(g, y, lb, -1), 5, wrt);
    tc_free(t);
}

static void test_bert_block(void **state) {
    (void)state;
    struct tc *t = tc_new();
    struct tr_graph *g = t->g;
    int64_t B = 2, T = 3, H = 2, Dh = 2, D = H * Dh, F = 6;
    int x = leaf(t, "x", FILL_SIGNED, 3, SH(B, T, D));
    int wqkv = leaf(t, "wqkv", FILL_SIGNED, 2, SH(D, 3 * D)), bqkv = leaf(t, "bqkv", FILL_SIGNED, 1, SH(3 * D));
    int wo = leaf(t, "wo", FILL_SIGNED, 2, SH(D, D));
    int g1 = leaf(t, "ln1.gamma", FILL_SIGNED, 1, SH(D)), be1 = leaf(t, "ln1.beta", FILL_SIGNED, 1, SH(D));
    int wi = leaf(t, "wi", FILL_SIGNED, 2, SH(D, F)), bi = leaf(t, "bi", FILL_SIGNED, 1, SH(F));
    int wf = leaf(t, "wf", FILL_SIGNED, 2, SH(F, D));
    int g2 = leaf(t, "ln2.gamma", FILL_SIGNED, 1, SH(D)), be2 = leaf(t, "ln2.beta", FILL_SIGNED, 1, SH(D));
    int mask = leaf(t, "mask", FILL_SIGNED, 4, SH(B, 1, 1, T));
    int qkv = tr_add(g, tr_matmul(g, x, wqkv, 0, 0), bqkv);
    int perm[4] = {0, 2, 1, 3};
    int heads[3];
    for (int i = 0; i < 3; i++) {
        int s = tr_slice(g, qkv, 2, i * D, (i + 1) * D, 1);
        heads[i] = tr_transpose(g, tr_reshape(g, s, 4, SH(B, T, H, Dh)), 4, perm);
    }
    int att = tr_attention(g, heads[0], heads[1], heads[2], mask, 0.7f, 0, 0);
    att = tr_reshape(g, tr_transpose(g, att, 4, perm), 3, SH(B, T, D));
    int h1 = tr_layer_norm(g, tr_add(g, tr_matmul(g, att, wo, 0, 0), x), g1, be1, 1e-5f);
    int ff = tr_matmul(g, tr_gelu(g, tr_add(g, tr_matmul(g, h1, wi, 0, 0), bi), 0), wf, 0, 0);
    int h2 = tr_layer_norm(g, tr_add(g, ff, h1), g2, be2, 1e-5f);
    int loss = tr_reduce(g, TR_OP_MEAN, tr_reshape(g, tr_mul(g, h2, h2), 1, SH(-1)), 0, 0);
    int wrt[11] = {x, wqkv, bqkv, wo, g1, be1, wi, bi, wf, g2, be2};
    check(t, "BERT-like block", loss, 11, wrt);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_int_equal(tr_graph_dump(g, f, NULL), TR_OK);
    fclose(f);
    assert_non_null(strstr(buf, "layer_norm_grad_gamma("));
    assert_non_null(strstr(buf, "attention_grad("));
    assert_non_null(strstr(buf, "unary_grad(")); /* of=gelu */
    assert_non_null(strstr(buf, "of=gelu approximate=none"));
    assert_non_null(strstr(buf, "'grad.wqkv'"));
    free(buf);
    tc_free(t);
}

/* ---- the checker and tr_grad's contract ---- */

static void test_checker_catches_wrong_rule(void **state) {
    (void)state;
    struct tc *t = tc_new();
    int x = leaf(t, "x", FILL_SIGNED, 2, SH(3, 4));
    int loss = loss_of(t, tr_unary(t->g, TR_OP_TANH, x));
    int gr;
    assert_int_equal(tr_grad(t->g, loss, 1, &x, &gr, NULL), TR_OK);
    assert_true(grad_err(t, loss, 1, &x, &gr) < FD_TOL);
    /* a rule off by 0.1%, and a rule that drops one element's contribution */
    int wrong = tr_scale(t->g, gr, 1.001f, 0.0f);
    assert_true(grad_err(t, loss, 1, &x, &wrong) > FD_TOL);
    double keep[12];
    for (int i = 0; i < 12; i++) keep[i] = i == 5 ? 0.0 : 1.0;
    int dropped = tr_mul(t->g, gr, tr_const(t->g, "keep", TR_DTYPE_F64, 2, SH(3, 4), keep));
    assert_true(grad_err(t, loss, 1, &x, &dropped) > FD_TOL);
    tc_free(t);
}

static int count_op(const struct tr_graph *g, int from, int op) {
    int c = 0;
    for (int i = from; i < tr_graph_n_nodes(g); i++) c += tr_node_op(g, i) == op;
    return c;
}

static void test_frozen_params(void **state) {
    (void)state;
    struct tc *t = tc_new();
    struct tr_graph *g = t->g;
    int x = leaf(t, "x", FILL_SIGNED, 2, SH(4, 5));
    int w1 = leaf(t, "w1", FILL_SIGNED, 2, SH(5, 6)), w2 = leaf(t, "w2", FILL_SIGNED, 2, SH(6, 3));
    int h = tr_gelu(g, tr_matmul(g, x, w1, 0, 0), 0);
    int loss = loss_of(t, tr_matmul(g, h, w2, 0, 0));
    int before = tr_graph_n_nodes(g), gr;
    assert_int_equal(tr_grad(g, loss, 1, &w2, &gr, NULL), TR_OK);
    /* only w2's gradient: one matmul (hᵀ·dy), no gelu gradient, nothing for w1 or x */
    assert_int_equal(count_op(g, before, TR_OP_MATMUL), 1);
    assert_int_equal(count_op(g, before, TR_OP_UNARY_GRAD), 0);
    assert_int_equal(tr_graph_find(g, "grad.w1"), -1);
    assert_int_equal(tr_graph_find(g, "grad.x"), -1);
    assert_int_equal(tr_graph_find(g, "grad.w2"), gr);
    assert_true(grad_err(t, loss, 1, &w2, &gr) < FD_TOL);
    int after_one = tr_graph_n_nodes(g) - before;
    tc_free(t);

    /* the same graph with every weight: strictly more nodes */
    t = tc_new();
    g = t->g;
    x = leaf(t, "x", FILL_SIGNED, 2, SH(4, 5));
    w1 = leaf(t, "w1", FILL_SIGNED, 2, SH(5, 6)), w2 = leaf(t, "w2", FILL_SIGNED, 2, SH(6, 3));
    h = tr_gelu(g, tr_matmul(g, x, w1, 0, 0), 0);
    loss = loss_of(t, tr_matmul(g, h, w2, 0, 0));
    before = tr_graph_n_nodes(g);
    int wrt[2] = {w1, w2}, grads[2];
    assert_int_equal(tr_grad(g, loss, 2, wrt, grads, NULL), TR_OK);
    assert_true(tr_graph_n_nodes(g) - before > after_one);
    assert_int_equal(count_op(g, before, TR_OP_UNARY_GRAD), 1);
    assert_int_equal(tr_graph_find(g, "grad.x"), -1);
    tc_free(t);
}

static void test_unreached_wrt_gets_zeros(void **state) {
    (void)state;
    struct tc *t = tc_new();
    int x = leaf(t, "x", FILL_SIGNED, 2, SH(2, 3));
    int z = leaf(t, "unused", FILL_SIGNED, 3, SH(2, 1, 4));
    int loss = loss_of(t, tr_unary(t->g, TR_OP_EXP, x));
    int wrt[2] = {z, x}, grads[2];
    assert_int_equal(tr_grad(t->g, loss, 2, wrt, grads, NULL), TR_OK);
    assert_int_equal(tr_node_op(t->g, grads[0]), TR_OP_CONST);
    assert_int_equal(tr_node_ndim(t->g, grads[0]), 3);
    assert_int_equal(tr_node_shape(t->g, grads[0])[2], 4);
    assert_string_equal(tr_node_name(t->g, grads[0]), "grad.unused");
    assert_true(grad_err(t, loss, 2, wrt, grads) < FD_TOL);
    for (int i = 0; i < 8; i++) assert_true(t->v[grads[0]][i] == 0.0);
    tc_free(t);
}

static void test_no_rule_is_an_error(void **state) {
    (void)state;
    struct tc *t = tc_new();
    struct tr_graph *g = t->g;
    int x = leaf(t, "x", FILL_SIGNED, 2, SH(2, 3)), dy = leaf(t, "dy", FILL_SIGNED, 2, SH(2, 3));
    struct tr_attrs a;
    memset(&a, 0, sizeof a);
    a.ints[0] = TR_OP_TANH;
    int in[2] = {x, dy};
    int ug = tr_graph_add_node(g, TR_OP_UNARY_GRAD, 2, in, &a);
    assert_true(ug >= 0);
    tr_graph_set_name(g, ug, "second.order");
    int loss = loss_of(t, ug);
    int n = tr_graph_n_nodes(g), gr = -7;
    struct tr_error err = {0};
    assert_int_equal(tr_grad(g, loss, 1, &x, &gr, &err), TR_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "unary_grad"));
    assert_non_null(strstr(err.msg, "second.order"));
    assert_int_equal(tr_graph_n_nodes(g), n); /* nothing was added */

    /* a loss that is not one element */
    assert_int_equal(tr_grad(g, x, 1, &x, &gr, &err), TR_ERR_SHAPE);
    assert_non_null(strstr(err.msg, "loss"));
    tc_free(t);
}

/* Model dtypes: the rules build (casts where the loss is f32 and the model bf16), and
 * every gradient has its wrt's dtype and shape. Numbers are the kernels' business. */
static void test_low_precision_graph_builds(void **state) {
    (void)state;
    struct tr_graph *g;
    assert_int_equal(tr_graph_init(&g, NULL), TR_OK);
    int x = tr_input(g, "x", TR_DTYPE_BF16, 2, SH(4, 5));
    int w = tr_param(g, "w", TR_DTYPE_BF16, 2, SH(5, 3), 0.0f, 0.02f);
    int lb = tr_input(g, "labels", TR_DTYPE_I32, 1, SH(4));
    int tg = tr_input(g, "target", TR_DTYPE_BF16, 2, SH(4, 3));
    int logits = tr_reduce(g, TR_OP_MEAN, tr_reshape(g, tr_matmul(g, x, w, 0, 0), 3, SH(4, 3, 1)), 2, 0);
    int loss = tr_add(g, tr_cross_entropy(g, logits, lb, 0), tr_mse(g, logits, tg));
    assert_int_equal(tr_node_dtype(g, loss), TR_DTYPE_F32);
    int wrt[2] = {w, x}, grads[2];
    struct tr_error err;
    if (tr_grad(g, loss, 2, wrt, grads, &err)) fail_msg("tr_grad: %s", err.msg);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(tr_node_dtype(g, grads[i]), TR_DTYPE_BF16);
        assert_int_equal(tr_node_ndim(g, grads[i]), 2);
        assert_int_equal(tr_node_shape(g, grads[i])[0], i == 0 ? 5 : 4);
    }
    assert_true(count_op(g, 0, TR_OP_CAST) >= 1); /* the f32 dloss of the mse, cast to bf16 */
    tr_graph_free(g);
}

/* ---- shape inference and dump of the training ops ---- */

static void expect_refused(struct tr_graph *g, int op, int n, const int *in, const struct tr_attrs *a,
                           const char *needle) {
    struct tr_graph *ok = g;
    assert_int_equal(tr_graph_add_node(ok, (enum tr_op)op, n, in, a), -1);
    struct tr_error err;
    assert_int_not_equal(tr_graph_status(g, &err), TR_OK);
    if (!strstr(err.msg, needle)) fail_msg("%s: message '%s' lacks '%s'", tr_op_name(op), err.msg, needle);
}

static void test_infer_training_ops(void **state) {
    (void)state;
    struct tr_attrs a;
    struct tr_graph *g;
    int64_t s23[2] = {2, 3};
    /* BROADCAST to a shape the input does not broadcast to */
    assert_int_equal(tr_graph_init(&g, NULL), TR_OK);
    int x = tr_input(g, "x", TR_DTYPE_F32, 2, s23);
    memset(&a, 0, sizeof a);
    a.n_ints = 2, a.ints[0] = 4, a.ints[1] = 3;
    expect_refused(g, TR_OP_BROADCAST, 1, &x, &a, "does not broadcast");
    tr_graph_free(g);

    /* SLICE_GRAD whose extent does not cover the slice */
    assert_int_equal(tr_graph_init(&g, NULL), TR_OK);
    x = tr_input(g, "x", TR_DTYPE_F32, 2, s23);
    memset(&a, 0, sizeof a);
    a.ints[0] = 1, a.ints[1] = 1, a.ints[3] = 2, a.ints[4] = 5, a.n_ints = 5; /* needs 1 + 2·2 + 1 = 6 */
    expect_refused(g, TR_OP_SLICE_GRAD, 1, &x, &a, "needs 6");
    tr_graph_free(g);

    /* CROSS_ENTROPY: labels must be integers, one per row; the loss is 0-d f32 */
    assert_int_equal(tr_graph_init(&g, NULL), TR_OK);
    int lg = tr_input(g, "logits", TR_DTYPE_BF16, 2, s23);
    int lb = tr_input(g, "labels", TR_DTYPE_I32, 1, SH(2));
    int ce = tr_cross_entropy(g, lg, lb, -1);
    assert_true(ce >= 0);
    assert_int_equal(tr_node_dtype(g, ce), TR_DTYPE_F32);
    assert_int_equal(tr_node_ndim(g, ce), 0);
    int bad = tr_input(g, "bad", TR_DTYPE_F32, 1, SH(2));
    int in[2] = {lg, bad};
    memset(&a, 0, sizeof a);
    expect_refused(g, TR_OP_CROSS_ENTROPY, 2, in, &a, "labels");
    tr_graph_free(g);

    /* ATTENTION_GRAD: shaped like the operand named by ints[2]; 3 is refused */
    assert_int_equal(tr_graph_init(&g, NULL), TR_OK);
    int q = tr_input(g, "q", TR_DTYPE_F32, 4, SH(1, 4, 3, 8));
    int k = tr_input(g, "k", TR_DTYPE_F32, 4, SH(1, 2, 5, 8));
    int v = tr_input(g, "v", TR_DTYPE_F32, 4, SH(1, 2, 5, 6));
    int dy = tr_input(g, "dy", TR_DTYPE_F32, 4, SH(1, 4, 3, 6));
    int qin[4] = {q, k, v, dy};
    memset(&a, 0, sizeof a);
    a.floats[0] = 0.5f;
    for (int w = 0; w < 3; w++) {
        a.ints[2] = w;
        int id = tr_graph_add_node(g, TR_OP_ATTENTION_GRAD, 4, qin, &a);
        assert_true(id >= 0);
        assert_int_equal(tr_node_shape(g, id)[3], w == 2 ? 6 : 8);
        assert_int_equal(tr_node_shape(g, id)[1], w == 0 ? 4 : 2);
    }
    double fl = tr_graph_flops(g);
    assert_true(fl == 2.5 * 2.0 * 1 * 4 * 3 * 5 * (8 + 6));
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_int_equal(tr_graph_dump(g, f, NULL), TR_OK);
    fclose(f);
    assert_non_null(strstr(buf, "attention_grad(%0, %1, %2, %3) dv scale=0.5"));
    free(buf);
    a.ints[2] = 3;
    expect_refused(g, TR_OP_ATTENTION_GRAD, 4, qin, &a, "which 3");
    tr_graph_free(g);

    /* UPDATE_SLICE: like x; update's dtype, rank and extents checked; start one i32 */
    assert_int_equal(tr_graph_init(&g, NULL), TR_OK);
    int cache = tr_param(g, "cache", TR_DTYPE_BF16, 4, SH(2, 3, 8, 4), 0.0f, 0.0f);
    int upd = tr_input(g, "upd", TR_DTYPE_BF16, 4, SH(2, 3, 1, 4));
    int pos = tr_input(g, "pos", TR_DTYPE_I32, 1, SH(1));
    int us = tr_update_slice(g, cache, upd, pos, -2);
    assert_true(us >= 0);
    assert_int_equal(tr_node_dtype(g, us), TR_DTYPE_BF16);
    assert_int_equal(tr_node_shape(g, us)[2], 8);
    assert_int_equal(tr_node_attrs(g, us)->ints[0], 2);
    assert_true(tr_graph_flops(g) == 0.0);
    buf = NULL, len = 0;
    f = open_memstream(&buf, &len);
    assert_int_equal(tr_graph_dump(g, f, NULL), TR_OK);
    fclose(f);
    if (!strstr(buf, "update_slice(%0, %1, %2) axis=2 : bf16[2,3,8,4]")) fail_msg("dump: %s", buf);
    free(buf);
    tr_graph_free(g);
    static const struct {
        int dt_u, ndim_u;
        int64_t su[4];
        int dt_s;
        int64_t ns;
        int axis;
        const char *needle;
    } bad_us[] = {
        {TR_DTYPE_F32, 4, {2, 3, 1, 4}, TR_DTYPE_I32, 1, 2, "expected x's dtype"},
        {TR_DTYPE_BF16, 4, {2, 3, 9, 4}, TR_DTYPE_I32, 1, 2, "except along axis 2"},
        {TR_DTYPE_BF16, 4, {2, 2, 1, 4}, TR_DTYPE_I32, 1, 2, "except along axis 2"},
        {TR_DTYPE_BF16, 3, {2, 3, 1}, TR_DTYPE_I32, 1, 2, "except along axis 2"},
        {TR_DTYPE_BF16, 4, {2, 3, 1, 4}, TR_DTYPE_I64, 1, 2, "i32 tensor of exactly one element"},
        {TR_DTYPE_BF16, 4, {2, 3, 1, 4}, TR_DTYPE_I32, 2, 2, "i32 tensor of exactly one element"},
        {TR_DTYPE_BF16, 4, {2, 3, 1, 4}, TR_DTYPE_I32, 1, 4, "axis 4 is out of range"},
    };
    for (int i = 0; i < (int)(sizeof bad_us / sizeof *bad_us); i++) {
        assert_int_equal(tr_graph_init(&g, NULL), TR_OK);
        int in3[3] = {tr_param(g, "cache", TR_DTYPE_BF16, 4, SH(2, 3, 8, 4), 0.0f, 0.0f),
                      tr_input(g, "upd", (enum tr_dtype)bad_us[i].dt_u, bad_us[i].ndim_u, bad_us[i].su),
                      tr_input(g, "pos", (enum tr_dtype)bad_us[i].dt_s, 1, &bad_us[i].ns)};
        memset(&a, 0, sizeof a);
        a.ints[0] = bad_us[i].axis;
        expect_refused(g, TR_OP_UPDATE_SLICE, 3, in3, &a, bad_us[i].needle);
        tr_graph_free(g);
    }
    /* x must be a float or i32 */
    assert_int_equal(tr_graph_init(&g, NULL), TR_OK);
    int x64 = tr_input(g, "x64", TR_DTYPE_I64, 1, SH(4)), u64 = tr_input(g, "u64", TR_DTYPE_I64, 1, SH(1));
    int in3b[3] = {x64, u64, tr_input(g, "pos", TR_DTYPE_I32, 0, NULL)};
    memset(&a, 0, sizeof a);
    expect_refused(g, TR_OP_UPDATE_SLICE, 3, in3b, &a, "or i32");
    tr_graph_free(g);

    /* f64 losses stay f64 */
    assert_int_equal(tr_graph_init(&g, NULL), TR_OK);
    int p = tr_input(g, "p", TR_DTYPE_F64, 2, s23), tg = tr_input(g, "t", TR_DTYPE_F64, 2, s23);
    int m = tr_mse(g, p, tg);
    assert_int_equal(tr_node_dtype(g, m), TR_DTYPE_F64);
    int t32 = tr_input(g, "t32", TR_DTYPE_F64, 2, SH(3, 2));
    int in2[2] = {p, t32};
    memset(&a, 0, sizeof a);
    expect_refused(g, TR_OP_MSE, 2, in2, &a, "one shape");
    tr_graph_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_binary_broadcast),
        cmocka_unit_test(test_unaries),
        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_softmax_layer_norm),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_embedding),
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_update_slice),
        cmocka_unit_test(test_reductions),
        cmocka_unit_test(test_losses),
        cmocka_unit_test(test_mlp),
        cmocka_unit_test(test_bert_block),
        cmocka_unit_test(test_checker_catches_wrong_rule),
        cmocka_unit_test(test_frozen_params),
        cmocka_unit_test(test_unreached_wrt_gets_zeros),
        cmocka_unit_test(test_no_rule_is_an_error),
        cmocka_unit_test(test_low_precision_graph_builds),
        cmocka_unit_test(test_infer_training_ops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
