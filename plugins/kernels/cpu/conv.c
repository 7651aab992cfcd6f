/* CONV2D (ops.h) through oneDNN's convolution primitive: NHWC activations, HWIO weights.
 *
 * oneDNN is handed x and out in their own layout (nhwc) but is left to pick the weights'
 * layout (format any): its fast convolutions want blocked weights, and one reorder of w
 * per call costs little next to the convolution (KH·KW·Cin·Cout elements against
 * N·OH·OW times that many multiply-adds). Asking for hwio outright lands on slower
 * kernels. Where the pick is hwio itself the reorder is skipped.
 *
 * Primitives are cached per (shapes, stride, padding, dtype, bias) in the context, the
 * least recently used dropped past CONV_CACHE_MAX, as matmul.c does. The bias is handed
 * to oneDNN in f32 always (converted at every call: weights may change in place).
 * f16, and bf16 where oneDNN has no native bf16 GEMM (isa.c asks it), are converted to
 * f32 whole around the f32 primitive and the result rounded once, as matmul.c does. */
#include <stdlib.h>
#include <oneapi/dnnl/dnnl.h>
#include "cpu_internal.h"

#define CONV_CACHE_MAX 64

struct tr_conv_key {
    int32_t dtype; /* as oneDNN sees it (f32 or bf16) */
    int32_t has_bias;
    int64_t n, h, w, ci, co, kh, kw, oh, ow, stride, pad;
};

struct tr_conv_entry {
    struct tr_conv_key key;
    dnnl_primitive_t prim, reorder; /* reorder NULL: the primitive reads hwio itself */
    dnnl_memory_t src, wuser, wprim, dst, bias;
    void *wbuf; /* the reordered weights */
    uint64_t used;
};

static void entry_release(struct tr_conv_entry *e) {
    if (e->prim) dnnl_primitive_destroy(e->prim);
    if (e->reorder) dnnl_primitive_destroy(e->reorder);
    dnnl_memory_t m[5] = {e->src, e->wuser, e->wprim, e->dst, e->bias};
    for (int i = 0; i < 5; i++)
        if (m[i] && (i != 2 || e->wprim != e->wuser)) dnnl_memory_destroy(m[i]);
    free(e->wbuf);
    memset(e, 0, sizeof *e);
}

void tr_cpu_conv_cache_free(struct tr_kernels *k) {
    for (int i = 0; i < k->n_conv; i++) entry_release(&k->conv[i]);
    free(k->conv);
    k->conv = NULL;
    k->n_conv = 0;
}

static int create_entry(struct tr_kernels *k, const struct tr_conv_key *key, struct tr_conv_entry *e,
                        struct tr_error *err) {
    dnnl_engine_t eng = (dnnl_engine_t)k->engine;
    dnnl_data_type_t dt = key->dtype == TR_DTYPE_BF16 ? dnnl_bf16 : dnnl_f32;
    /* oneDNN's logical order is always (N,C,H,W) and (O,I,H,W); the tags give the layout */
    dnnl_dims_t sd = {key->n, key->ci, key->h, key->w}, wd = {key->co, key->ci, key->kh, key->kw};
    dnnl_dims_t dd = {key->n, key->co, key->oh, key->ow}, bd = {key->co};
    dnnl_dims_t strides = {key->stride, key->stride}, pad = {key->pad, key->pad};
    /* the bottom/right padding oneDNN wants: what the floor of OH leaves over */
    dnnl_dims_t pad_r = {(key->oh - 1) * key->stride + key->kh - key->h - key->pad,
                         (key->ow - 1) * key->stride + key->kw - key->w - key->pad};
    dnnl_memory_desc_t smd, wmd_any, wmd_user, dmd, bmd;
    dnnl_status_t st = dnnl_memory_desc_init_by_tag(&smd, 4, sd, dt, dnnl_nhwc);
    if (!st) st = dnnl_memory_desc_init_by_tag(&wmd_any, 4, wd, dt, dnnl_format_tag_any);
    if (!st) st = dnnl_memory_desc_init_by_tag(&wmd_user, 4, wd, dt, dnnl_hwio);
    if (!st) st = dnnl_memory_desc_init_by_tag(&dmd, 4, dd, dt, dnnl_nhwc);
    if (!st) st = dnnl_memory_desc_init_by_tag(&bmd, 1, bd, dnnl_f32, dnnl_x);
    dnnl_convolution_desc_t cd;
    if (!st)
        st = dnnl_convolution_forward_desc_init(&cd, dnnl_forward_inference, dnnl_convolution_direct, &smd, &wmd_any,
                                                key->has_bias ? &bmd : NULL, &dmd, strides, pad, pad_r);
    dnnl_primitive_desc_t pd = NULL;
    if (!st) st = dnnl_primitive_desc_create(&pd, &cd, NULL, eng, NULL);
    if (st)
        return tr_error_set(err, TR_ERR_UNSUPPORTED,
                            "conv2d: oneDNN has no cpu convolution for x [%lld,%lld,%lld,%lld] %s, kernel %lldx%lld, "
                            "Cout %lld, stride %lld, padding %lld (status %d)", (long long)key->n, (long long)key->h,
                            (long long)key->w, (long long)key->ci, tr_dtype_name((enum tr_dtype)key->dtype),
                            (long long)key->kh, (long long)key->kw, (long long)key->co, (long long)key->stride,
                            (long long)key->pad, (int)st);
    memset(e, 0, sizeof *e);
    e->key = *key;
    const dnnl_memory_desc_t *wmd = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    st = dnnl_primitive_create(&e->prim, pd);
    if (!st) st = dnnl_memory_create(&e->src, &smd, eng, DNNL_MEMORY_NONE);
    if (!st) st = dnnl_memory_create(&e->wuser, &wmd_user, eng, DNNL_MEMORY_NONE);
    if (!st) st = dnnl_memory_create(&e->dst, &dmd, eng, DNNL_MEMORY_NONE);
    if (!st && key->has_bias) st = dnnl_memory_create(&e->bias, &bmd, eng, DNNL_MEMORY_NONE);
    if (!st && dnnl_memory_desc_equal(wmd, &wmd_user)) {
        e->wprim = e->wuser;
    } else if (!st) {
        size_t nb = dnnl_memory_desc_get_size(wmd);
        e->wbuf = aligned_alloc(64, (nb + 63) & ~(size_t)63);
        if (!e->wbuf) st = dnnl_out_of_memory;
        if (!st) st = dnnl_memory_create(&e->wprim, wmd, eng, e->wbuf);
        dnnl_primitive_desc_t rpd = NULL;
        if (!st) st = dnnl_reorder_primitive_desc_create(&rpd, &wmd_user, eng, wmd, eng, NULL);
        if (!st) st = dnnl_primitive_create(&e->reorder, rpd);
        if (rpd) dnnl_primitive_desc_destroy(rpd);
    }
    dnnl_primitive_desc_destroy(pd);
    if (st) {
        entry_release(e);
        return tr_error_set(err, TR_ERR_DEVICE, "conv2d: oneDNN primitive creation failed (status %d)", (int)st);
    }
    return TR_OK;
}

static struct tr_conv_entry *lookup(struct tr_kernels *k, const struct tr_conv_key *key, struct tr_error *err) {
    k->conv_tick++;
    for (int i = 0; i < k->n_conv; i++) {
        if (memcmp(&k->conv[i].key, key, sizeof *key) == 0) {
            k->stats.primitive_hits++;
            k->conv[i].used = k->conv_tick;
            return &k->conv[i];
        }
    }
    k->stats.primitive_misses++;
    if (!k->conv) {
        k->conv = calloc(CONV_CACHE_MAX, sizeof *k->conv);
        if (!k->conv) {
            tr_error_set(err, TR_ERR_NOMEM, "conv2d: no memory for the primitive cache");
            return NULL;
        }
    }
    int slot = k->n_conv;
    if (slot == CONV_CACHE_MAX) {
        slot = 0;
        for (int i = 1; i < k->n_conv; i++)
            if (k->conv[i].used < k->conv[slot].used) slot = i;
    }
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

/* The checks of tr_cpu_resolve's caller already passed for arity; these are the
 * kernel's own, the same rules as graph_infer.c's (a direct call has no graph). */
static int conv_check(const struct tr_attrs *at, int n_in, const struct tr_tensor *in, const struct tr_tensor *out,
                      struct tr_conv_key *key, struct tr_error *err) {
    const char *kn = "conv2d";
    if (n_in != 2 && n_in != 3)
        return tr_error_set(err, TR_ERR_INVALID, "conv2d: %d inputs given, 2 (x, w) or 3 (with bias) expected", n_in);
    const struct tr_tensor *x = &in[0], *w = &in[1], *b = n_in == 3 ? &in[2] : NULL;
    int rc = tr_cpu_check_float(x, kn, "x", err);
    if (!rc) rc = tr_cpu_check_float(w, kn, "w", err);
    if (!rc && b) rc = tr_cpu_check_float(b, kn, "bias", err);
    if (!rc) rc = tr_cpu_check_float(out, kn, "out", err);
    if (rc) return rc;
    char d1[200], d2[200], d3[200];
    if (x->ndim != 4 || w->ndim != 4 || w->shape[2] != x->shape[3] || w->dtype != x->dtype || out->dtype != x->dtype)
        return tr_error_set(err, TR_ERR_SHAPE, "conv2d: x %s (N,H,W,Cin) and w %s (KH,KW,Cin,Cout) do not match, "
                            "or out %s has another dtype", tr_cpu_desc(x, d1, sizeof d1), tr_cpu_desc(w, d2, sizeof d2),
                            tr_cpu_desc(out, d3, sizeof d3));
    if (b && (tr_tensor_numel(b) != w->shape[3] || (b->dtype != x->dtype && b->dtype != TR_DTYPE_F32)))
        return tr_error_set(err, TR_ERR_SHAPE, "conv2d: bias %s should be [%lld] of %s or f32",
                            tr_cpu_desc(b, d1, sizeof d1), (long long)w->shape[3],
                            tr_dtype_name((enum tr_dtype)x->dtype));
    if (at->ints[0] < 1 || at->ints[1] < 0 || at->ints[2] != 1 || at->ints[3] != 1)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "conv2d: stride %lld, padding %lld, dilation %lld, groups %lld: "
                            "stride >= 1, padding >= 0, dilation 1 and groups 1 are supported",
                            (long long)at->ints[0], (long long)at->ints[1], (long long)at->ints[2],
                            (long long)at->ints[3]);
    memset(key, 0, sizeof *key);
    key->n = x->shape[0], key->h = x->shape[1], key->w = x->shape[2], key->ci = x->shape[3];
    key->kh = w->shape[0], key->kw = w->shape[1], key->co = w->shape[3];
    key->stride = at->ints[0], key->pad = at->ints[1];
    int64_t eh = key->h + 2 * key->pad - key->kh, ew = key->w + 2 * key->pad - key->kw;
    key->oh = eh < 0 ? 0 : eh / key->stride + 1;
    key->ow = ew < 0 ? 0 : ew / key->stride + 1;
    if (eh < 0 || ew < 0 || key->kh < 1 || key->kw < 1 || out->ndim != 4 || out->shape[0] != key->n ||
        out->shape[1] != key->oh || out->shape[2] != key->ow || out->shape[3] != key->co)
        return tr_error_set(err, TR_ERR_SHAPE, "conv2d: out %s should be [%lld,%lld,%lld,%lld] for x %s, w %s, stride "
                            "%lld, padding %lld", tr_cpu_desc(out, d1, sizeof d1), (long long)key->n,
                            (long long)key->oh, (long long)key->ow, (long long)key->co, tr_cpu_desc(x, d2, sizeof d2),
                            tr_cpu_desc(w, d3, sizeof d3), (long long)key->stride, (long long)key->pad);
    key->has_bias = b != NULL;
    int convert = x->dtype == TR_DTYPE_F16 || (x->dtype == TR_DTYPE_BF16 && !tr_cpu_bf16_gemm_native);
    key->dtype = convert ? TR_DTYPE_F32 : x->dtype;
    return TR_OK;
}

static size_t round16(int64_t n) { return ((size_t)n + 15) & ~(size_t)15; }

int tr_cpu_conv2d_invoke(struct tr_kernels *k, int op, const struct tr_attrs *at, int n_in,
                         const struct tr_tensor *in, struct tr_tensor *out, struct tr_error *err) {
    (void)op;
    struct tr_conv_key key;
    int rc = tr_cpu_check_ctx(k, "conv2d", err);
    if (!rc) rc = conv_check(at, n_in, in, out, &key, err);
    if (rc) return rc;
    const struct tr_tensor *x = &in[0], *w = &in[1], *b = n_in == 3 ? &in[2] : NULL;
    const int64_t nx = tr_tensor_numel(x), nw = tr_tensor_numel(w), no = tr_tensor_numel(out);
    if (no == 0) return TR_OK;
    if (nx == 0 || key.ci == 0) { /* an empty sum: out is the bias alone */
        for (int64_t i = 0; i < no; i++) {
            float v = b ? tr_cpu_get_f32(b->data, b->dtype, i % key.co) : 0.0f;
            tr_cpu_store_f32((char *)out->data + i * (int64_t)tr_dtype_size((enum tr_dtype)out->dtype), out->dtype, &v,
                             1);
        }
        return TR_OK;
    }
    struct tr_conv_entry *e = lookup(k, &key, err);
    if (!e) return err ? err->status : TR_ERR_UNSUPPORTED;
    const int convert = key.dtype != x->dtype;
    size_t rx = convert ? round16(nx) : 0, rw = convert ? round16(nw) : 0, ro = convert ? round16(no) : 0;
    size_t rb = b ? round16(key.co) : 0;
    if (rx + rw + ro + rb > 0 &&
        (rc = tr_cpu_scratch_reserve(k, sizeof(float) * (rx + rw + ro + rb), 0, "conv2d", err)) != TR_OK)
        return rc;
    float *base = tr_cpu_scratch_shared(k);
    float *tx = convert ? base : NULL, *tw = convert ? base + rx : NULL, *to = convert ? base + rx + rw : NULL;
    float *tb = b ? base + rx + rw + ro : NULL;
    if (convert) {
        to_f32(tx, x->data, x->dtype, nx);
        to_f32(tw, w->data, w->dtype, nw);
    }
    if (b) to_f32(tb, b->data, b->dtype, key.co);
    dnnl_stream_t s = (dnnl_stream_t)k->stream;
    dnnl_status_t st = dnnl_memory_set_data_handle(e->src, convert ? (void *)tx : x->data);
    if (!st) st = dnnl_memory_set_data_handle(e->wuser, convert ? (void *)tw : w->data);
    if (!st) st = dnnl_memory_set_data_handle(e->dst, convert ? (void *)to : out->data);
    if (!st && b) st = dnnl_memory_set_data_handle(e->bias, tb);
    if (!st && e->reorder) {
        dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, e->wuser}, {DNNL_ARG_TO, e->wprim}};
        st = dnnl_primitive_execute(e->reorder, s, 2, ra);
    }
    dnnl_exec_arg_t args[4] = {
        {DNNL_ARG_SRC, e->src}, {DNNL_ARG_WEIGHTS, e->wprim}, {DNNL_ARG_DST, e->dst}, {DNNL_ARG_BIAS, e->bias}};
    if (!st) st = dnnl_primitive_execute(e->prim, s, b ? 4 : 3, args);
    if (!st) st = dnnl_stream_wait(s);
    if (st) {
        char d1[200], d2[200];
        return tr_error_set(err, TR_ERR_DEVICE, "conv2d: oneDNN execution failed for x %s, w %s (status %d)",
                            tr_cpu_desc(x, d1, sizeof d1), tr_cpu_desc(w, d2, sizeof d2), (int)st);
    }
    if (convert) from_f32(out->data, out->dtype, to, no);
    return TR_OK;
}
