/* CONV2D and its two gradients (ops.h) through oneDNN's convolution primitives: NHWC
 * activations, torch-layout (O,I,H,W) weights.
 *
 * oneDNN is handed the activations in their own layout (nhwc) but is left to pick the
 * weights' layout (format any): its fast convolutions want blocked weights, and one
 * reorder of w per call costs little next to the convolution (KH·KW·Cin·Cout elements
 * against N·OH·OW times that many multiply-adds). Asking for oihw outright lands on slower
 * kernels. Where the pick is oihw itself the reorder is skipped. The forward and the data
 * gradient reorder w into the primitive's layout before; the weight gradient reorders dw
 * out of it after.
 *
 * Primitives are cached per (kind, shapes, stride, padding, dtype, bias) in the context,
 * the least recently used dropped past CONV_CACHE_MAX, as matmul.c does. The bias is
 * handed to oneDNN in f32 always (converted at every call: weights may change in place).
 * f16, and bf16 where oneDNN has no native bf16 GEMM (isa.c asks it), are converted to
 * f32 whole around the f32 primitive and the result rounded once, as matmul.c does. */
#include <stddef.h>
#include <stdlib.h>
#include <oneapi/dnnl/dnnl.h>
#include "cpu_internal.h"

#define CONV_CACHE_MAX 64

enum conv_kind { CONV_FWD = 0, CONV_BWD_DATA = 1, CONV_BWD_WEIGHTS = 2 };

struct tr_conv_key {
    int32_t kind;
    int32_t dtype; /* as oneDNN sees it (f32 or bf16) */
    int32_t has_bias;
    int32_t unused;
    int64_t n, h, w, ci, co, kh, kw, oh, ow, stride, pad, pad_end;
};

/* act: the activation read (x, or dy for the data gradient); act2: dy of the weight
 * gradient; out: the activation written (y or dx; NULL for the weight gradient). */
struct tr_conv_entry {
    struct tr_conv_key key;
    dnnl_primitive_t prim, reorder; /* reorder NULL: the primitive reads/writes oihw itself */
    dnnl_memory_t act, act2, out, wuser, wprim, bias;
    void *wbuf; /* the weights in the primitive's layout */
    uint64_t used;
};

static void entry_release(struct tr_conv_entry *e) {
    if (e->prim) dnnl_primitive_destroy(e->prim);
    if (e->reorder) dnnl_primitive_destroy(e->reorder);
    dnnl_memory_t m[6] = {e->act, e->act2, e->out, e->wuser, e->wprim, e->bias};
    for (int i = 0; i < 6; i++)
        if (m[i] && (i != 4 || e->wprim != e->wuser)) dnnl_memory_destroy(m[i]);
    free(e->wbuf);
    memset(e, 0, sizeof *e);
}

void tr_cpu_conv_cache_free(struct tr_kernels *k) {
    for (int i = 0; i < k->n_conv; i++) entry_release(&k->conv[i]);
    free(k->conv);
    k->conv = NULL;
    k->n_conv = 0;
}

static const char *const kind_name[3] = {"conv2d", "conv2d_grad_input", "conv2d_grad_weight"};

/* The primitive descriptor of key's kind; backward ones take the forward (training) one
 * as their hint, as oneDNN wants. */
static dnnl_status_t make_pd(dnnl_engine_t eng, const struct tr_conv_key *key, const dnnl_memory_desc_t *smd,
                             const dnnl_memory_desc_t *wmd, const dnnl_memory_desc_t *bmd,
                             const dnnl_memory_desc_t *dmd, dnnl_primitive_desc_t *pd) {
    dnnl_dims_t strides = {key->stride, key->stride}, pad = {key->pad, key->pad};
    /* the bottom/right padding oneDNN wants: what the floor of OH leaves over (pad_end in) */
    dnnl_dims_t pad_r = {(key->oh - 1) * key->stride + key->kh - key->h - key->pad,
                         (key->ow - 1) * key->stride + key->kw - key->w - key->pad};
    dnnl_convolution_desc_t fd, bd;
    dnnl_prop_kind_t prop = key->kind == CONV_FWD ? dnnl_forward_inference : dnnl_forward_training;
    dnnl_status_t st = dnnl_convolution_forward_desc_init(&fd, prop, dnnl_convolution_direct, smd, wmd,
                                                          key->has_bias ? bmd : NULL, dmd, strides, pad, pad_r);
    if (st || key->kind == CONV_FWD) return st ? st : dnnl_primitive_desc_create(pd, &fd, NULL, eng, NULL);
    dnnl_primitive_desc_t hint = NULL;
    st = dnnl_primitive_desc_create(&hint, &fd, NULL, eng, NULL);
    if (!st && key->kind == CONV_BWD_DATA)
        st = dnnl_convolution_backward_data_desc_init(&bd, dnnl_convolution_direct, smd, wmd, dmd, strides, pad, pad_r);
    else if (!st)
        st = dnnl_convolution_backward_weights_desc_init(&bd, dnnl_convolution_direct, smd, wmd, NULL, dmd, strides,
                                                         pad, pad_r);
    if (!st) st = dnnl_primitive_desc_create(pd, &bd, NULL, eng, hint);
    if (hint) dnnl_primitive_desc_destroy(hint);
    return st;
}

static int create_entry(struct tr_kernels *k, const struct tr_conv_key *key, struct tr_conv_entry *e,
                        struct tr_error *err) {
    dnnl_engine_t eng = (dnnl_engine_t)k->engine;
    dnnl_data_type_t dt = key->dtype == TR_DTYPE_BF16 ? dnnl_bf16 : dnnl_f32;
    /* oneDNN's logical order is always (N,C,H,W) and (O,I,H,W); the tags give the layout */
    dnnl_dims_t sd = {key->n, key->ci, key->h, key->w}, wd = {key->co, key->ci, key->kh, key->kw};
    dnnl_dims_t dd = {key->n, key->co, key->oh, key->ow}, bd = {key->co};
    dnnl_memory_desc_t smd, wmd_any, wmd_user, dmd, bmd;
    dnnl_status_t st = dnnl_memory_desc_init_by_tag(&smd, 4, sd, dt, dnnl_nhwc);
    if (!st) st = dnnl_memory_desc_init_by_tag(&wmd_any, 4, wd, dt, dnnl_format_tag_any);
    if (!st) st = dnnl_memory_desc_init_by_tag(&wmd_user, 4, wd, dt, dnnl_oihw);
    if (!st) st = dnnl_memory_desc_init_by_tag(&dmd, 4, dd, dt, dnnl_nhwc);
    if (!st) st = dnnl_memory_desc_init_by_tag(&bmd, 1, bd, dnnl_f32, dnnl_x);
    dnnl_primitive_desc_t pd = NULL;
    if (!st) st = make_pd(eng, key, &smd, &wmd_any, &bmd, &dmd, &pd);
    if (st)
        return tr_error_set(err, TR_ERR_UNSUPPORTED,
                            "%s: oneDNN has no cpu convolution for x [%lld,%lld,%lld,%lld] %s, kernel %lldx%lld, "
                            "Cout %lld, stride %lld, padding %lld, pad_end %lld (status %d)", kind_name[key->kind],
                            (long long)key->n, (long long)key->h, (long long)key->w, (long long)key->ci,
                            tr_dtype_name((enum tr_dtype)key->dtype), (long long)key->kh, (long long)key->kw,
                            (long long)key->co, (long long)key->stride, (long long)key->pad,
                            (long long)key->pad_end, (int)st);
    memset(e, 0, sizeof *e);
    e->key = *key;
    const int bwd_w = key->kind == CONV_BWD_WEIGHTS;
    const dnnl_memory_desc_t *wmd =
        dnnl_primitive_desc_query_md(pd, bwd_w ? dnnl_query_diff_weights_md : dnnl_query_weights_md, 0);
    st = dnnl_primitive_create(&e->prim, pd);
    /* act is x (nhwc src dims) except for the data gradient, where it is dy */
    if (!st) st = dnnl_memory_create(&e->act, key->kind == CONV_BWD_DATA ? &dmd : &smd, eng, DNNL_MEMORY_NONE);
    if (!st && bwd_w) st = dnnl_memory_create(&e->act2, &dmd, eng, DNNL_MEMORY_NONE);
    if (!st && !bwd_w)
        st = dnnl_memory_create(&e->out, key->kind == CONV_BWD_DATA ? &smd : &dmd, eng, DNNL_MEMORY_NONE);
    if (!st) st = dnnl_memory_create(&e->wuser, &wmd_user, eng, DNNL_MEMORY_NONE);
    if (!st && key->has_bias) st = dnnl_memory_create(&e->bias, &bmd, eng, DNNL_MEMORY_NONE);
    if (!st && dnnl_memory_desc_equal(wmd, &wmd_user)) {
        e->wprim = e->wuser;
    } else if (!st) {
        size_t nb = dnnl_memory_desc_get_size(wmd);
        e->wbuf = aligned_alloc(64, (nb + 63) & ~(size_t)63);
        if (!e->wbuf) st = dnnl_out_of_memory;
        if (!st) st = dnnl_memory_create(&e->wprim, wmd, eng, e->wbuf);
        dnnl_primitive_desc_t rpd = NULL;
        if (!st && bwd_w) st = dnnl_reorder_primitive_desc_create(&rpd, wmd, eng, &wmd_user, eng, NULL);
        else if (!st) st = dnnl_reorder_primitive_desc_create(&rpd, &wmd_user, eng, wmd, eng, NULL);
        if (!st) st = dnnl_primitive_create(&e->reorder, rpd);
        if (rpd) dnnl_primitive_desc_destroy(rpd);
    }
    dnnl_primitive_desc_destroy(pd);
    if (st) {
        entry_release(e);
        return tr_error_set(err, TR_ERR_DEVICE, "%s: oneDNN primitive creation failed (status %d)",
                            kind_name[key->kind], (int)st);
    }
    return TR_OK;
}

static struct tr_conv_entry *lookup(struct tr_kernels *k, const struct tr_conv_key *key, struct tr_error *err) {
    const size_t used_at = offsetof(struct tr_conv_entry, used);
    int hit = tr_cpu_cache_find(k, k->conv, k->n_conv, sizeof *k->conv, used_at, key, sizeof *key, ++k->conv_tick);
    if (hit >= 0) return &k->conv[hit];
    if (!k->conv) {
        k->conv = calloc(CONV_CACHE_MAX, sizeof *k->conv);
        if (!k->conv) {
            tr_error_set(err, TR_ERR_NOMEM, "%s: no memory for the primitive cache", kind_name[key->kind]);
            return NULL;
        }
    }
    int slot = k->n_conv;
    if (slot == CONV_CACHE_MAX) slot = tr_cpu_cache_lru(k->conv, k->n_conv, sizeof *k->conv, used_at);
    struct tr_conv_entry fresh;
    if (create_entry(k, key, &fresh, err)) return NULL;
    if (slot < k->n_conv) entry_release(&k->conv[slot]);
    else k->n_conv++;
    fresh.used = k->conv_tick;
    k->conv[slot] = fresh;
    return &k->conv[slot];
}

static void to_f32(float *dst, const void *src, int dtype, int64_t n) {
#pragma omp parallel for if (n > TR_CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i += TR_CPU_CHUNK) {
        int64_t m = n - i < TR_CPU_CHUNK ? n - i : TR_CPU_CHUNK;
        tr_cpu_load_f32(dst + i, (const char *)src + i * (int64_t)tr_dtype_size((enum tr_dtype)dtype), dtype, m);
    }
}

static void from_f32(void *dst, int dtype, const float *src, int64_t n) {
#pragma omp parallel for if (n > TR_CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i += TR_CPU_CHUNK) {
        int64_t m = n - i < TR_CPU_CHUNK ? n - i : TR_CPU_CHUNK;
        tr_cpu_store_f32((char *)dst + i * (int64_t)tr_dtype_size((enum tr_dtype)dtype), dtype, src + i, m);
    }
}

/* The three tensors of a convolution whichever the kind: x (N,H,W,Cin), w (Cout,Cin,KH,KW)
 * and y (N,OH,OW,Cout), two of them read and one written. */
struct conv_io {
    const struct tr_tensor *x, *w, *y, *bias;
};

static struct conv_io conv_io_of(int kind, int n_in, const struct tr_tensor *in, const struct tr_tensor *out) {
    if (kind == CONV_BWD_DATA) return (struct conv_io){out, &in[1], &in[0], NULL};
    if (kind == CONV_BWD_WEIGHTS) return (struct conv_io){&in[0], out, &in[1], NULL};
    return (struct conv_io){&in[0], &in[1], out, n_in == 3 ? &in[2] : NULL};
}

/* The kernel's own checks, the same rules as graph_infer.c's (a direct call has no graph). */
static int conv_check(int kind, const struct tr_attrs *at, int n_in, const struct tr_tensor *in,
                      const struct tr_tensor *out, struct tr_conv_key *key, struct tr_error *err) {
    const char *kn = kind_name[kind];
    if (kind == CONV_FWD ? n_in != 2 && n_in != 3 : n_in != 2)
        return tr_error_set(err, TR_ERR_INVALID, "%s: %d inputs given, %s expected", kn, n_in,
                            kind == CONV_FWD ? "2 (x, w) or 3 (with bias)" : kind == CONV_BWD_DATA ? "2 (dy, w)"
                                                                                                   : "2 (x, dy)");
    const struct conv_io t = conv_io_of(kind, n_in, in, out);
    int rc = tr_cpu_check_float(t.x, kn, "x", err);
    if (!rc) rc = tr_cpu_check_float(t.w, kn, "w", err);
    if (!rc) rc = tr_cpu_check_float(t.y, kn, kind == CONV_FWD ? "out" : "dy", err);
    if (!rc && t.bias) rc = tr_cpu_check_float(t.bias, kn, "bias", err);
    if (rc) return rc;
    char d1[200], d2[200], d3[200];
    if (t.x->ndim != 4 || t.w->ndim != 4 || t.y->ndim != 4 || t.w->shape[1] != t.x->shape[3] ||
        t.w->dtype != t.x->dtype || t.y->dtype != t.x->dtype)
        return tr_error_set(err, TR_ERR_SHAPE, "%s: x %s (N,H,W,Cin), w %s (Cout,Cin,KH,KW) and %s %s (N,OH,OW,Cout) "
                            "do not match, or differ in dtype", kn, tr_cpu_desc(t.x, d1, sizeof d1),
                            tr_cpu_desc(t.w, d2, sizeof d2), kind == CONV_FWD ? "out" : "dy",
                            tr_cpu_desc(t.y, d3, sizeof d3));
    if (t.bias && (tr_tensor_numel(t.bias) != t.w->shape[0] || (t.bias->dtype != t.x->dtype && t.bias->dtype != TR_DTYPE_F32)))
        return tr_error_set(err, TR_ERR_SHAPE, "%s: bias %s should be [%lld] of %s or f32", kn,
                            tr_cpu_desc(t.bias, d1, sizeof d1), (long long)t.w->shape[0],
                            tr_dtype_name((enum tr_dtype)t.x->dtype));
    if (at->ints[0] < 1 || at->ints[1] < 0 || at->ints[2] != 1 || at->ints[3] != 1 || at->ints[4] < 0)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "%s: stride %lld, padding %lld, dilation %lld, groups %lld, "
                            "pad_end %lld: stride >= 1, padding and pad_end >= 0, dilation 1 and groups 1 are "
                            "supported", kn, (long long)at->ints[0], (long long)at->ints[1], (long long)at->ints[2],
                            (long long)at->ints[3], (long long)at->ints[4]);
    memset(key, 0, sizeof *key);
    key->kind = kind;
    key->n = t.x->shape[0], key->h = t.x->shape[1], key->w = t.x->shape[2], key->ci = t.x->shape[3];
    key->co = t.w->shape[0], key->kh = t.w->shape[2], key->kw = t.w->shape[3];
    key->stride = at->ints[0], key->pad = at->ints[1], key->pad_end = at->ints[4];
    /* the gradients name the shape the floor of OH loses (x's H,W) or the kernel's */
    if ((kind == CONV_BWD_DATA && (at->ints[5] != key->h || at->ints[6] != key->w)) ||
        (kind == CONV_BWD_WEIGHTS && (at->ints[5] != key->kh || at->ints[6] != key->kw)))
        return tr_error_set(err, TR_ERR_SHAPE, "%s: ints[5..6] = %lld,%lld, expected the %s %lld,%lld of %s", kn,
                            (long long)at->ints[5], (long long)at->ints[6],
                            kind == CONV_BWD_DATA ? "H,W" : "KH,KW",
                            (long long)(kind == CONV_BWD_DATA ? key->h : key->kh),
                            (long long)(kind == CONV_BWD_DATA ? key->w : key->kw),
                            kind == CONV_BWD_DATA ? "dx" : "dw");
    int64_t eh = key->h + 2 * key->pad + key->pad_end - key->kh, ew = key->w + 2 * key->pad + key->pad_end - key->kw;
    key->oh = eh < 0 ? 0 : eh / key->stride + 1;
    key->ow = ew < 0 ? 0 : ew / key->stride + 1;
    if (eh < 0 || ew < 0 || key->kh < 1 || key->kw < 1 || t.y->shape[0] != key->n || t.y->shape[1] != key->oh ||
        t.y->shape[2] != key->ow || t.y->shape[3] != key->co)
        return tr_error_set(err, TR_ERR_SHAPE, "%s: %s %s should be [%lld,%lld,%lld,%lld] for x %s, w %s, stride "
                            "%lld, padding %lld, pad_end %lld", kn, kind == CONV_FWD ? "out" : "dy",
                            tr_cpu_desc(t.y, d1, sizeof d1), (long long)key->n, (long long)key->oh,
                            (long long)key->ow, (long long)key->co, tr_cpu_desc(t.x, d2, sizeof d2),
                            tr_cpu_desc(t.w, d3, sizeof d3), (long long)key->stride, (long long)key->pad,
                            (long long)key->pad_end);
    key->has_bias = t.bias != NULL;
    int convert = t.x->dtype == TR_DTYPE_F16 || (t.x->dtype == TR_DTYPE_BF16 && !tr_cpu_bf16_gemm_native);
    key->dtype = convert ? TR_DTYPE_F32 : t.x->dtype;
    return TR_OK;
}

static size_t round16(int64_t n) { return ((size_t)n + 15) & ~(size_t)15; }

/* An empty sum: the forward's output is the bias alone, a gradient is zeros. */
static void conv_empty(const struct tr_tensor *bias, struct tr_tensor *out, int64_t co) {
    const int64_t no = tr_tensor_numel(out);
    const size_t es = tr_dtype_size((enum tr_dtype)out->dtype);
    for (int64_t i = 0; i < no; i++) {
        float v = bias ? tr_cpu_get_f32(bias->data, bias->dtype, i % co) : 0.0f;
        tr_cpu_store_f32((char *)out->data + i * (int64_t)es, out->dtype, &v, 1);
    }
}

int tr_cpu_conv2d_invoke(struct tr_kernels *k, int op, const struct tr_attrs *at, int n_in,
                         const struct tr_tensor *in, struct tr_tensor *out, struct tr_error *err) {
    const int kind = op == TR_OP_CONV2D_GRAD_INPUT ? CONV_BWD_DATA : op == TR_OP_CONV2D_GRAD_WEIGHT ? CONV_BWD_WEIGHTS
                                                                                                     : CONV_FWD;
    struct tr_conv_key key;
    int rc = tr_cpu_check_ctx(k, kind_name[kind], err);
    if (!rc) rc = conv_check(kind, at, n_in, in, out, &key, err);
    if (rc) return rc;
    const struct tr_tensor *a = &in[0], *b = &in[1], *bias = kind == CONV_FWD && n_in == 3 ? &in[2] : NULL;
    const int64_t na = tr_tensor_numel(a), nb = tr_tensor_numel(b), no = tr_tensor_numel(out);
    if (no == 0) return TR_OK;
    if (na == 0 || nb == 0) {
        conv_empty(bias, out, key.co);
        return TR_OK;
    }
    struct tr_conv_entry *e = lookup(k, &key, err);
    if (!e) return err ? err->status : TR_ERR_UNSUPPORTED;
    const int convert = key.dtype != a->dtype;
    size_t ra = convert ? round16(na) : 0, rb = convert ? round16(nb) : 0, ro = convert ? round16(no) : 0;
    size_t rbias = bias ? round16(key.co) : 0;
    if (ra + rb + ro + rbias > 0 &&
        (rc = tr_cpu_scratch_reserve(k, sizeof(float) * (ra + rb + ro + rbias), 0, kind_name[kind], err)) != TR_OK)
        return rc;
    float *base = tr_cpu_scratch_shared(k);
    float *ta = convert ? base : NULL, *tb = convert ? base + ra : NULL, *to = convert ? base + ra + rb : NULL;
    float *tbias = bias ? base + ra + rb + ro : NULL;
    if (convert) {
        to_f32(ta, a->data, a->dtype, na);
        to_f32(tb, b->data, b->dtype, nb);
    }
    if (bias) to_f32(tbias, bias->data, bias->dtype, key.co);
    void *pa = convert ? (void *)ta : a->data, *pb = convert ? (void *)tb : b->data;
    void *po = convert ? (void *)to : out->data;
    dnnl_stream_t s = (dnnl_stream_t)k->stream;
    dnnl_status_t st = dnnl_memory_set_data_handle(e->act, pa);
    dnnl_exec_arg_t args[4];
    int n_args = 3;
    if (kind == CONV_BWD_WEIGHTS) { /* x, dy -> dw (oihw in po, through wprim) */
        if (!st) st = dnnl_memory_set_data_handle(e->act2, pb);
        if (!st) st = dnnl_memory_set_data_handle(e->wuser, po);
        args[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, e->act};
        args[1] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, e->act2};
        args[2] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_WEIGHTS, e->wprim};
    } else { /* the forward (x, w -> y) or the data gradient (dy, w -> dx) */
        if (!st) st = dnnl_memory_set_data_handle(e->wuser, pb);
        if (!st) st = dnnl_memory_set_data_handle(e->out, po);
        if (!st && bias) st = dnnl_memory_set_data_handle(e->bias, tbias);
        if (!st && e->reorder) {
            dnnl_exec_arg_t ra2[2] = {{DNNL_ARG_FROM, e->wuser}, {DNNL_ARG_TO, e->wprim}};
            st = dnnl_primitive_execute(e->reorder, s, 2, ra2);
        }
        const int fwd = kind == CONV_FWD;
        args[0] = (dnnl_exec_arg_t){fwd ? DNNL_ARG_SRC : DNNL_ARG_DIFF_DST, e->act};
        args[1] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, e->wprim};
        args[2] = (dnnl_exec_arg_t){fwd ? DNNL_ARG_DST : DNNL_ARG_DIFF_SRC, e->out};
        if (bias) args[n_args++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, e->bias};
    }
    if (!st) st = dnnl_primitive_execute(e->prim, s, n_args, args);
    if (!st && kind == CONV_BWD_WEIGHTS && e->reorder) {
        dnnl_exec_arg_t ra2[2] = {{DNNL_ARG_FROM, e->wprim}, {DNNL_ARG_TO, e->wuser}};
        st = dnnl_primitive_execute(e->reorder, s, 2, ra2);
    }
    if (!st) st = dnnl_stream_wait(s);
    if (st) {
        char d1[200], d2[200];
        return tr_error_set(err, TR_ERR_DEVICE, "%s: oneDNN execution failed for %s, %s (status %d)", kind_name[kind],
                            tr_cpu_desc(a, d1, sizeof d1), tr_cpu_desc(b, d2, sizeof d2), (int)st);
    }
    if (convert) from_f32(out->data, out->dtype, to, no);
    return TR_OK;
}
