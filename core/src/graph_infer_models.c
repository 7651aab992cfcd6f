/* Shape and dtype inference for the decoder LLMs' ops (RMS norm, RoPE, the KV cache's
 * update), the vision models' (convolution, group norm, the timestep embedding) and the
 * collectives: graph_infer.c's dispatcher calls them (graph_infer.h). */
#include "graph_infer.h"

/* ---- decoder LLM ops ---- */

/* RMS_NORM (x, w), RMS_NORM_GRAD (x, w, dy), RMS_NORM_GRAD_W (x, dy): w is (D), dy like x. */
int tr_infer_rms_norm(struct ctx *c, int op, const struct arg *a, const struct tr_attrs *at, int *dt, int *nd,
                          int64_t *sh) {
    static const char *const what_f[] = {"x", "w"};
    static const char *const what_g[] = {"x", "w", "dy"};
    static const char *const what_w[] = {"x", "dy"};
    int n = op == TR_OP_RMS_NORM_GRAD ? 3 : 2;
    const char *const *what = op == TR_OP_RMS_NORM ? what_f : op == TR_OP_RMS_NORM_GRAD ? what_g : what_w;
    int rc = same_float(c, n, a, what);
    if (rc) return rc;
    const struct arg *x = &a[0];
    if (x->nd < 1) return refuse(c, TR_ERR_SHAPE, "x %s needs at least 1 dimension", x->str);
    int64_t d = x->sh[x->nd - 1];
    if (op != TR_OP_RMS_NORM_GRAD_W && (a[1].nd != 1 || a[1].sh[0] != d))
        return refuse(c, TR_ERR_SHAPE, "w is %s, expected [%lld] (the last axis of x %s)", a[1].str, (long long)d,
                      x->str);
    const struct arg *dy = op == TR_OP_RMS_NORM_GRAD ? &a[2] : op == TR_OP_RMS_NORM_GRAD_W ? &a[1] : NULL;
    if (dy && !same_shape(x, dy))
        return refuse(c, TR_ERR_SHAPE, "dy %s must have the shape of x %s", dy->str, x->str);
    if (!(at->floats[0] >= 0.0f) || isinf(at->floats[0]))
        return refuse(c, TR_ERR_INVALID, "eps %g, expected a finite value >= 0", (double)at->floats[0]);
    if (at->ints[0] != 0 && at->ints[0] != 1)
        return refuse(c, TR_ERR_INVALID, "add_one %lld, expected 0 (x_hat*w) or 1 (Gemma's x_hat*(1 + w))",
                      (long long)at->ints[0]);
    if (op == TR_OP_RMS_NORM_GRAD_W) {
        *dt = x->dt;
        *nd = 1;
        sh[0] = d;
    } else {
        copy_shape(x, dt, nd, sh);
    }
    return TR_OK;
}

/* ROPE (x (B,H,T,D), pos (T) or (B,T) i32/i64). Stores R normalised: 0 becomes D. */
int tr_infer_rope(struct ctx *c, const struct arg *a, struct tr_attrs *at, int *dt, int *nd, int64_t *sh) {
    static const char *const what[] = {"x"};
    int rc = same_float(c, 1, a, what);
    if (rc) return rc;
    const struct arg *x = &a[0], *pos = &a[1];
    if (x->nd != 4) return refuse(c, TR_ERR_SHAPE, "x %s must be 4-D (B,H,T,D)", x->str);
    int64_t B = x->sh[0], T = x->sh[2], D = x->sh[3];
    if (pos->dt != TR_DTYPE_I32 && pos->dt != TR_DTYPE_I64)
        return refuse(c, TR_ERR_SHAPE, "pos %s, expected i32 or i64 positions", pos->str);
    int ok = (pos->nd == 1 && pos->sh[0] == T) || (pos->nd == 2 && pos->sh[0] == B && pos->sh[1] == T);
    if (!ok)
        return refuse(c, TR_ERR_SHAPE, "pos %s, expected (T) [%lld] or (B,T) [%lld,%lld] for x %s (B,H,T,D)", pos->str,
                      (long long)T, (long long)B, (long long)T, x->str);
    int64_t r = at->ints[0] == 0 ? D : at->ints[0];
    if (r < 0 || r > D || r % 2 != 0)
        return refuse(c, TR_ERR_INVALID, "rotated dims R=%lld%s for x %s: R must be even and 0 < R <= D=%lld",
                      (long long)r, at->ints[0] == 0 ? " (0: all of D)" : "", x->str, (long long)D);
    if (at->ints[1] != 0 && at->ints[1] != 1)
        return refuse(c, TR_ERR_INVALID, "inverse %lld, expected 0 (rotate by +a) or 1 (by -a, the gradient)",
                      (long long)at->ints[1]);
    if (!(at->floats[0] > 0.0f) || isinf(at->floats[0]))
        return refuse(c, TR_ERR_INVALID, "base %g (rope_theta), expected a finite value > 0", (double)at->floats[0]);
    at->ints[0] = r;
    copy_shape(x, dt, nd, sh);
    return TR_OK;
}

/* UPDATE_SLICE (x, update, start): update like x but n <= extent along axis; start one i32.
 * Stores the axis normalised. */
int tr_infer_update_slice(struct ctx *c, const struct arg *a, struct tr_attrs *at, int *dt, int *nd,
                              int64_t *sh) {
    const struct arg *x = &a[0], *u = &a[1], *start = &a[2];
    if (!is_float(x->dt) && x->dt != TR_DTYPE_I32)
        return refuse(c, TR_ERR_SHAPE, "x is %s, expected a float dtype (f32, bf16, f16, f64) or i32", x->str);
    if (u->dt != x->dt)
        return refuse(c, TR_ERR_SHAPE, "update is %s, expected x's dtype (x %s)", u->str, x->str);
    if (x->nd < 1) return refuse(c, TR_ERR_SHAPE, "x %s needs at least 1 dimension", x->str);
    int64_t axis = at->ints[0];
    int rc = norm_axis(c, &axis, x->nd, "axis", x);
    if (rc) return rc;
    int ok = u->nd == x->nd;
    for (int i = 0; ok && i < x->nd; i++)
        ok = i == axis ? u->sh[i] <= x->sh[i] : u->sh[i] == x->sh[i];
    if (!ok)
        return refuse(c, TR_ERR_SHAPE,
                      "update %s must have the shape of x %s except along axis %lld, where it may be shorter",
                      u->str, x->str, (long long)axis);
    int64_t ns = 1;
    for (int i = 0; i < start->nd; i++) ns *= start->sh[i];
    if (start->dt != TR_DTYPE_I32 || ns != 1)
        return refuse(c, TR_ERR_SHAPE, "start is %s, expected an i32 tensor of exactly one element", start->str);
    at->ints[0] = axis;
    copy_shape(x, dt, nd, sh);
    return TR_OK;
}

/* CONV2D's attributes, checked and resolved in place (0 means 1 for stride, dilation and
 * groups); only dilation 1 and groups 1 exist for now, so anything else is refused here
 * rather than computed wrongly later. */
static int conv_attrs(struct ctx *c, struct tr_attrs *at) {
    int64_t stride = at->ints[0] == 0 ? 1 : at->ints[0], pad = at->ints[1];
    int64_t dil = at->ints[2] == 0 ? 1 : at->ints[2], groups = at->ints[3] == 0 ? 1 : at->ints[3];
    if (stride < 1) return refuse(c, TR_ERR_INVALID, "stride %lld, expected >= 1", (long long)stride);
    if (pad < 0) return refuse(c, TR_ERR_INVALID, "padding %lld, expected >= 0", (long long)pad);
    if (at->ints[4] < 0) return refuse(c, TR_ERR_INVALID, "pad_end %lld, expected >= 0", (long long)at->ints[4]);
    if (dil != 1) return refuse(c, TR_ERR_UNSUPPORTED, "dilation %lld, only 1 is supported", (long long)dil);
    if (groups != 1) return refuse(c, TR_ERR_UNSUPPORTED, "groups %lld, only 1 is supported", (long long)groups);
    at->ints[0] = stride;
    at->ints[2] = dil;
    at->ints[3] = groups;
    return TR_OK;
}

/* The output extent of a convolution along one axis; < 1 when the kernel does not fit. */
static int64_t conv_out(int64_t in, int64_t k, const struct tr_attrs *at) {
    int64_t e = in + 2 * at->ints[1] + at->ints[4] - k;
    return k < 1 || e < 0 ? 0 : e / at->ints[0] + 1;
}

/* CONV2D (x (N,H,W,Cin), w (Cout,Cin,KH,KW), [bias (Cout)]). */
int tr_infer_conv2d(struct ctx *c, int n, const struct arg *a, struct tr_attrs *at, int *dt, int *nd,
                        int64_t *sh) {
    static const char *const what[] = {"x", "w"};
    if (n != 2 && n != 3)
        return refuse(c, TR_ERR_INVALID, "%d inputs, expected x, w and an optional bias", n);
    int rc = same_float(c, 2, a, what);
    if (!rc) rc = conv_attrs(c, at);
    if (rc) return rc;
    const struct arg *x = &a[0], *w = &a[1];
    if (x->nd != 4) return refuse(c, TR_ERR_SHAPE, "x %s must be 4-D (N,H,W,Cin), channels last", x->str);
    if (w->nd != 4) return refuse(c, TR_ERR_SHAPE, "w %s must be 4-D (Cout,Cin,KH,KW), torch's layout", w->str);
    if (w->sh[1] != x->sh[3])
        return refuse(c, TR_ERR_SHAPE, "w %s has Cin %lld, expected x %s's channels %lld (w is (Cout,Cin,KH,KW))",
                      w->str, (long long)w->sh[1], x->str, (long long)x->sh[3]);
    if (n == 3) {
        const struct arg *b = &a[2];
        if ((b->dt != x->dt && b->dt != TR_DTYPE_F32) || b->nd != 1 || b->sh[0] != w->sh[0])
            return refuse(c, TR_ERR_SHAPE, "bias %s, expected [%lld] (Cout of w %s) of %s or f32", b->str,
                          (long long)w->sh[0], w->str, tr_dtype_name((enum tr_dtype)x->dt));
    }
    int64_t oh = conv_out(x->sh[1], w->sh[2], at), ow = conv_out(x->sh[2], w->sh[3], at);
    if (oh < 1 || ow < 1)
        return refuse(c, TR_ERR_SHAPE, "kernel %lldx%lld of w %s does not fit x %s padded by %lld (and %lld at the end)",
                      (long long)w->sh[2], (long long)w->sh[3], w->str, x->str, (long long)at->ints[1],
                      (long long)at->ints[4]);
    at->n_ints = 5;
    *dt = x->dt;
    *nd = 4;
    sh[0] = x->sh[0];
    sh[1] = oh;
    sh[2] = ow;
    sh[3] = w->sh[0];
    return TR_OK;
}

/* CONV2D_GRAD_INPUT (dy, w) -> dx (N,H,W,Cin) and CONV2D_GRAD_WEIGHT (x, dy) -> dw
 * (Cout,Cin,KH,KW): the forward shape rule run on the shapes they name must give dy. */
int tr_infer_conv2d_grad(struct ctx *c, int op, const struct arg *a, struct tr_attrs *at, int *dt, int *nd,
                             int64_t *sh) {
    const int gi = op == TR_OP_CONV2D_GRAD_INPUT;
    static const char *const what_i[] = {"dy", "w"}, *const what_w[] = {"x", "dy"};
    int rc = same_float(c, 2, a, gi ? what_i : what_w);
    if (!rc) rc = conv_attrs(c, at);
    if (rc) return rc;
    const struct arg *dy = gi ? &a[0] : &a[1], *o = gi ? &a[1] : &a[0];
    if (dy->nd != 4 || o->nd != 4)
        return refuse(c, TR_ERR_SHAPE, "%s %s and %s %s must be 4-D", gi ? "dy" : "x", a[0].str, gi ? "w" : "dy",
                      a[1].str);
    int64_t x_sh[4], w_sh[4];
    if (gi) {
        const int64_t s[4] = {dy->sh[0], at->ints[5], at->ints[6], o->sh[1]};
        memcpy(x_sh, s, sizeof s);
        memcpy(w_sh, o->sh, sizeof w_sh);
    } else {
        const int64_t s[4] = {dy->sh[3], o->sh[3], at->ints[5], at->ints[6]};
        memcpy(x_sh, o->sh, sizeof x_sh);
        memcpy(w_sh, s, sizeof s);
        at->ints[7] = dy->sh[3];
    }
    int64_t oh = conv_out(x_sh[1], w_sh[2], at), ow = conv_out(x_sh[2], w_sh[3], at);
    if (x_sh[1] < 1 || x_sh[2] < 1 || dy->sh[0] != x_sh[0] || dy->sh[1] != oh || dy->sh[2] != ow ||
        dy->sh[3] != w_sh[0])
        return refuse(c, TR_ERR_SHAPE, "dy %s is not the output of a convolution of x [%lld,%lld,%lld,%lld] by w "
                      "[%lld,%lld,%lld,%lld] (stride %lld, padding %lld, pad_end %lld)", dy->str,
                      (long long)x_sh[0], (long long)x_sh[1], (long long)x_sh[2], (long long)x_sh[3],
                      (long long)w_sh[0], (long long)w_sh[1], (long long)w_sh[2], (long long)w_sh[3],
                      (long long)at->ints[0], (long long)at->ints[1], (long long)at->ints[4]);
    at->n_ints = 8;
    *dt = a[0].dt;
    *nd = 4;
    memcpy(sh, gi ? x_sh : w_sh, 4 * sizeof *sh);
    return TR_OK;
}

/* GROUP_NORM (x, gamma, beta), GROUP_NORM_GRAD (x, gamma, dy) and GROUP_NORM_GRAD_GAMMA
 * (x, dy): x (N,H,W,C), C divisible by the groups; the gradients have no SiLU flag. */
int tr_infer_group_norm(struct ctx *c, int op, const struct arg *a, const struct tr_attrs *at, int *dt, int *nd,
                            int64_t *sh) {
    static const char *const what_f[] = {"x", "gamma", "beta"}, *const what_g[] = {"x", "gamma", "dy"},
                             *const what_gg[] = {"x", "dy"};
    const char *const *what = op == TR_OP_GROUP_NORM ? what_f : op == TR_OP_GROUP_NORM_GRAD ? what_g : what_gg;
    const int n = op == TR_OP_GROUP_NORM_GRAD_GAMMA ? 2 : 3;
    int rc = same_float(c, n, a, what);
    if (rc) return rc;
    const struct arg *x = &a[0];
    if (x->nd != 4) return refuse(c, TR_ERR_SHAPE, "x %s must be 4-D (N,H,W,C), channels last", x->str);
    int64_t C = x->sh[3], G = at->ints[0];
    for (int i = 1; i < n; i++) {
        if (!strcmp(what[i], "dy")) {
            if (!tr_shape_equal(a[i].nd, a[i].sh, x->nd, x->sh))
                return refuse(c, TR_ERR_SHAPE, "dy %s, expected x's shape %s", a[i].str, x->str);
        } else if (a[i].nd != 1 || a[i].sh[0] != C) {
            return refuse(c, TR_ERR_SHAPE, "%s is %s, expected [%lld] (the channels of x %s)", what[i], a[i].str,
                          (long long)C, x->str);
        }
    }
    if (G < 1 || C % G != 0)
        return refuse(c, TR_ERR_INVALID, "groups %lld for x %s: expected >= 1 and dividing its %lld channels",
                      (long long)G, x->str, (long long)C);
    if (at->ints[1] != 0 && (op != TR_OP_GROUP_NORM || at->ints[1] != 1))
        return refuse(c, TR_ERR_INVALID, "silu flag ints[1]=%lld, expected %s", (long long)at->ints[1],
                      op == TR_OP_GROUP_NORM ? "0 or 1" : "0 (the gradient takes SiLU's first)");
    if (!(at->floats[0] >= 0.0f) || isinf(at->floats[0]))
        return refuse(c, TR_ERR_INVALID, "eps %g, expected a finite value >= 0", (double)at->floats[0]);
    *dt = x->dt;
    if (op == TR_OP_GROUP_NORM_GRAD_GAMMA) {
        *nd = 1;
        sh[0] = C;
        return TR_OK;
    }
    copy_shape(x, dt, nd, sh);
    return TR_OK;
}

/* TIMESTEP_EMBEDDING t (N) -> (N, D); max_period 0 resolved to 10000. */
int tr_infer_timestep_embedding(struct ctx *c, const struct arg *t, struct tr_attrs *at, int *dt, int *nd,
                                    int64_t *sh) {
    static const char *const what[] = {"t"};
    int rc = same_float(c, 1, t, what);
    if (rc) return rc;
    if (t->nd != 1) return refuse(c, TR_ERR_SHAPE, "t %s must be 1-D (one timestep per sample)", t->str);
    const int64_t D = at->ints[0];
    if (D < 2 || D % 2 != 0) return refuse(c, TR_ERR_INVALID, "dim %lld, expected an even number >= 2", (long long)D);
    if (at->floats[1] == 0.0f) at->floats[1] = 10000.0f;
    if (!(at->floats[1] > 0.0f) || isinf(at->floats[1]))
        return refuse(c, TR_ERR_INVALID, "max_period %g, expected a finite value > 0", (double)at->floats[1]);
    if (!((double)at->floats[0] < (double)(D / 2)) || isinf(at->floats[0]))
        return refuse(c, TR_ERR_INVALID, "downscale_freq_shift %g, expected a finite value below dim/2 = %lld",
                      (double)at->floats[0], (long long)(D / 2));
    if (at->ints[1] != 0 && at->ints[1] != 1)
        return refuse(c, TR_ERR_INVALID, "flip_sin_to_cos ints[1]=%lld, expected 0 or 1", (long long)at->ints[1]);
    *dt = t->dt;
    *nd = 2;
    sh[0] = t->sh[0];
    sh[1] = D;
    return TR_OK;
}

/* ALLREDUCE x: f32, like x; the rank count the graph is for is at least 1. */
int tr_infer_allreduce(struct ctx *c, const struct arg *x, const struct tr_attrs *at, int *dt, int *nd,
                           int64_t *sh) {
    if (x->dt != TR_DTYPE_F32)
        return refuse(c, TR_ERR_SHAPE, "x is %s, expected f32 (a lower precision is cast to f32 first)", x->str);
    if (at->ints[0] < 1 || at->ints[0] > (1 << 20))
        return refuse(c, TR_ERR_INVALID, "ranks ints[0]=%lld, expected 1 to 2^20", (long long)at->ints[0]);
    if (!isfinite(at->floats[0]))
        return refuse(c, TR_ERR_INVALID, "scale %g, expected a finite number", (double)at->floats[0]);
    *dt = x->dt;
    *nd = x->nd;
    memcpy(sh, x->sh, sizeof(int64_t) * (size_t)x->nd);
    return TR_OK;
}
