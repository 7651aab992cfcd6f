/* The kernels context on the cpu: oneDNN engine and stream made once, device memory
 * (64-byte aligned host memory), copies, counters, and the argument checks every
 * kernel shares. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <oneapi/dnnl/dnnl.h>
#include "cpu_internal.h"

int tr_kernels_device_available(int device_type, struct tr_error *err) {
    if (device_type == TR_DEVICE_CPU) return TR_OK;
    if (device_type == TR_DEVICE_CUDA) return tr_cuda_available(0, err);
    return tr_error_set(err, TR_ERR_INVALID, "kernels: unknown device type %d (expected cpu=%d or cuda=%d)",
                        device_type, TR_DEVICE_CPU, TR_DEVICE_CUDA);
}

int tr_kernels_device_describe(int device_type, int device_index, char *buf, size_t n, struct tr_error *err) {
    if (!buf || n == 0) return tr_error_set(err, TR_ERR_INVALID, "tr_kernels_device_describe: no buffer");
    buf[0] = '\0';
    if (device_type == TR_DEVICE_CUDA) return tr_cuda_describe(device_index, buf, n, err); /* checks the index */
    int rc = tr_kernels_device_available(device_type, err);
    if (rc) return rc;
    struct tr_cpu_info info;
    if ((rc = tr_kernels_cpu_info(&info, err)) != TR_OK) return rc;
    snprintf(buf, n, "%s", info.model);
    return TR_OK;
}

int tr_kernels_init(struct tr_kernels **out, int device_type, int device_index, struct tr_error *err) {
    if (!out) return tr_error_set(err, TR_ERR_INVALID, "tr_kernels_init: out is NULL");
    *out = NULL;
    /* the cpu's level is fixed before any context uses oneDNN, whose ISA cap it sets */
    int rc = tr_cpu_isa_fix(err);
    if (!rc) rc = tr_kernels_device_available(device_type, err);
    if (rc) return rc;
    if (device_type == TR_DEVICE_CUDA) {
        struct tr_kernels *k = calloc(1, sizeof *k);
        if (!k) return tr_error_set(err, TR_ERR_NOMEM, "kernels: cannot allocate a context");
        k->device_type = device_type;
        k->device_index = device_index;
        if ((rc = tr_cuda_ctx_init(k, device_index, err)) != TR_OK) {
            free(k);
            return rc;
        }
        *out = k;
        return TR_OK;
    }
    if (device_index != 0)
        return tr_error_set(err, TR_ERR_DEVICE, "kernels: cpu device index %d does not exist (the cpu is index 0)",
                            device_index);
    struct tr_kernels *k = calloc(1, sizeof *k);
    if (!k) return tr_error_set(err, TR_ERR_NOMEM, "kernels: cannot allocate a context");
    k->device_type = device_type;
    k->device_index = device_index;
    dnnl_engine_t eng = NULL;
    dnnl_stream_t stream = NULL;
    dnnl_status_t s = dnnl_engine_create(&eng, dnnl_cpu, 0);
    if (s == dnnl_success) s = dnnl_stream_create(&stream, eng, dnnl_stream_default_flags);
    if (s != dnnl_success) {
        if (eng) dnnl_engine_destroy(eng);
        free(k);
        return tr_error_set(err, TR_ERR_DEVICE, "kernels: oneDNN cpu engine/stream creation failed (dnnl status %d)",
                            (int)s);
    }
    k->engine = eng;
    k->stream = stream;
    *out = k;
    return TR_OK;
}

int tr_kernels_set_math(struct tr_kernels *k, enum tr_math m, struct tr_error *err) {
    if (!k) return tr_error_set(err, TR_ERR_INVALID, "tr_kernels_set_math: context is NULL");
    if ((unsigned)m >= TR_MATH_COUNT)
        return tr_error_set(err, TR_ERR_INVALID, "kernels: math mode %d is not one of default, f32, tf32, bf16", (int)m);
    if (m == TR_MATH_TF32 && k->device_type != TR_DEVICE_CUDA)
        return tr_error_set(err, TR_ERR_UNSUPPORTED,
                            "kernels: math = tf32 needs device = cuda (the cpu has no tf32 GEMMs; use f32)");
    k->math = m;
    return TR_OK;
}

enum tr_math tr_kernels_math(const struct tr_kernels *k) { return k ? k->math : TR_MATH_DEFAULT; }

void tr_kernels_free(struct tr_kernels *k) {
    if (!k) return;
    if (k->cuda) tr_cuda_ctx_free(k);
    tr_cpu_matmul_cache_free(k);
    tr_cpu_conv_cache_free(k);
    tr_cpu_scratch_free(k);
    if (k->stream) dnnl_stream_destroy((dnnl_stream_t)k->stream);
    if (k->engine) dnnl_engine_destroy((dnnl_engine_t)k->engine);
    free(k);
}

int tr_kernels_device_type(const struct tr_kernels *k) { return k ? k->device_type : -1; }

void tr_kernels_get_stats(const struct tr_kernels *k, struct tr_kernels_stats *st) {
    if (st) *st = k ? k->stats : (struct tr_kernels_stats){0};
}

void tr_kernels_reset_stats(struct tr_kernels *k) {
    if (k) memset(&k->stats, 0, sizeof k->stats);
}

int tr_kernels_alloc(struct tr_kernels *k, size_t nbytes, void **p, struct tr_error *err) {
    if (!k || !p) return tr_error_set(err, TR_ERR_INVALID, "tr_kernels_alloc: context or out pointer is NULL");
    if (k->device_type == TR_DEVICE_CUDA) return tr_cuda_alloc(k, nbytes, p, err);
    return tr_host_alloc(p, nbytes, err);
}

void tr_kernels_dealloc(struct tr_kernels *k, void *p) {
    if (k && k->device_type == TR_DEVICE_CUDA) {
        tr_cuda_dealloc(k, p);
        return;
    }
    tr_host_free(p);
}

static int copy_bytes(struct tr_kernels *k, void *dst, const void *src, size_t n, const char *fn,
                      struct tr_error *err) {
    if (!k) return tr_error_set(err, TR_ERR_INVALID, "%s: context is NULL", fn);
    if (n == 0) return TR_OK;
    if (!dst || !src)
        return tr_error_set(err, TR_ERR_INVALID, "%s: %s pointer is NULL for a copy of %zu bytes", fn,
                            dst ? "source" : "destination", n);
    if (k->device_type == TR_DEVICE_CUDA) {
        int kind = strcmp(fn, "tr_kernels_to_device") == 0 ? 0 : strcmp(fn, "tr_kernels_to_host") == 0 ? 1 : 2;
        return tr_cuda_copy(k, dst, src, n, kind, err);
    }
    memmove(dst, src, n);
    return TR_OK;
}

int tr_kernels_to_device(struct tr_kernels *k, void *dst, const void *src, size_t n, struct tr_error *err) {
    return copy_bytes(k, dst, src, n, "tr_kernels_to_device", err);
}

int tr_kernels_to_host(struct tr_kernels *k, void *dst, const void *src, size_t n, struct tr_error *err) {
    return copy_bytes(k, dst, src, n, "tr_kernels_to_host", err);
}

int tr_kernels_copy(struct tr_kernels *k, void *dst, const void *src, size_t n, struct tr_error *err) {
    return copy_bytes(k, dst, src, n, "tr_kernels_copy", err);
}

int tr_kernels_sync(struct tr_kernels *k, struct tr_error *err) {
    if (!k) return tr_error_set(err, TR_ERR_INVALID, "tr_kernels_sync: context is NULL");
    if (k->device_type == TR_DEVICE_CUDA) return tr_cuda_sync(k, err);
    dnnl_status_t s = dnnl_stream_wait((dnnl_stream_t)k->stream);
    if (s != dnnl_success) return tr_error_set(err, TR_ERR_DEVICE, "kernels: oneDNN stream wait failed (status %d)", (int)s);
    return TR_OK;
}

/* ---- shared argument checks ---- */

const char *tr_cpu_desc(const struct tr_tensor *t, char *buf, size_t n) {
    char sh[160];
    if (!t) {
        snprintf(buf, n, "(null)");
        return buf;
    }
    tr_shape_str(t->ndim, t->shape, sh, sizeof sh);
    snprintf(buf, n, "%s %s", sh, tr_dtype_name((enum tr_dtype)t->dtype));
    return buf;
}

int tr_cpu_check_ctx_bind(struct tr_kernels *k, const char *kname, struct tr_error *err) {
    if (!k) return tr_error_set(err, TR_ERR_INVALID, "%s: kernels context is NULL", kname);
    if (k->device_type != TR_DEVICE_CPU)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "%s: context device %d is not the cpu", kname, k->device_type);
    return TR_OK;
}

int tr_cpu_check_ctx(struct tr_kernels *k, const char *kname, struct tr_error *err) {
    int rc = tr_cpu_check_ctx_bind(k, kname, err);
    if (rc) return rc;
    k->stats.calls++;
    return TR_OK;
}

int tr_cpu_keep_plan(struct tr_kernel_call *c, const void *plan, size_t size, tr_kernel_fn fn, const char *kname,
                     struct tr_error *err) {
    void *p = malloc(size);
    if (!p) return tr_error_set(err, TR_ERR_NOMEM, "%s: no memory (%zu bytes) for a bound call", kname, size);
    memcpy(p, plan, size);
    ((struct tr_cpu_prepared *)p)->release = free;
    c->prepared = p;
    c->fn = fn;
    return TR_OK;
}

static int compute_call(struct tr_kernels *k, const struct tr_kernel_call *c, struct tr_error *err) {
    (void)err;
    const struct tr_cpu_prepared *p = c->prepared;
    k->stats.calls++;
    p->compute(k, p);
    return TR_OK;
}

int tr_cpu_keep_compute(struct tr_kernel_call *c, const void *plan, size_t size,
                        void (*compute)(struct tr_kernels *k, const void *plan), const char *kname,
                        struct tr_error *err) {
    int rc = tr_cpu_keep_plan(c, plan, size, compute_call, kname, err);
    if (!rc) ((struct tr_cpu_prepared *)c->prepared)->compute = compute;
    return rc;
}

/* ---- scratch ---- */

static size_t round64(size_t n) { return (n + 63) & ~(size_t)63; }

int tr_cpu_scratch_reserve(struct tr_kernels *k, size_t shared, size_t per_thread, const char *kname,
                           struct tr_error *err) {
#ifdef _OPENMP
    int nt = omp_get_max_threads();
#else
    int nt = 1;
#endif
    shared = round64(shared);
    per_thread = round64(per_thread);
    if (shared <= k->scr_shared && per_thread <= k->scr_thread && nt <= k->scr_threads) return TR_OK;
    size_t s = shared > k->scr_shared ? shared : k->scr_shared;
    size_t t = per_thread > k->scr_thread ? per_thread : k->scr_thread;
    int n = nt > k->scr_threads ? nt : k->scr_threads;
    if (t && (size_t)n > (SIZE_MAX - s) / t)
        return tr_error_set(err, TR_ERR_NOMEM, "%s: scratch of %zu + %d x %zu bytes does not fit in memory", kname, s,
                            n, t);
    size_t total = s + (size_t)n * t;
    char *p = aligned_alloc(64, total ? total : 64);
    if (!p)
        return tr_error_set(err, TR_ERR_NOMEM, "%s: no memory for %zu bytes of scratch (%zu shared, %d threads x %zu)",
                            kname, total, s, n, t);
    free(k->scr);
    k->scr = p;
    k->scr_shared = s;
    k->scr_thread = t;
    k->scr_threads = n;
    return TR_OK;
}

void tr_cpu_rows(struct tr_kernels *k, int64_t rows, int64_t per, int par, tr_cpu_rows_fn fn, const void *ctx) {
    const int64_t items = (rows + per - 1) / per;
#pragma omp parallel num_threads(tr_cpu_threads(k)) if (par && items > 1)
    {
        void *buf = tr_cpu_scratch_thread(k, tr_cpu_thread_num());
#pragma omp for schedule(static)
        for (int64_t it = 0; it < items; it++) fn(ctx, it * per, it * per + per < rows ? it * per + per : rows, buf);
    }
}

void tr_cpu_scratch_free(struct tr_kernels *k) {
    free(k->scr);
    k->scr = NULL;
    k->scr_shared = k->scr_thread = 0;
    k->scr_threads = 0;
}

int tr_cpu_check_tensor_on(const struct tr_tensor *t, int device, const char *kname, const char *what,
                           struct tr_error *err) {
    char d[200];
    if (!t) return tr_error_set(err, TR_ERR_INVALID, "%s: %s is NULL", kname, what);
    if (t->ndim < 0 || t->ndim > TR_MAX_DIMS)
        return tr_error_set(err, TR_ERR_SHAPE, "%s: %s has %d dimensions (0 to %d allowed)", kname, what, t->ndim,
                            TR_MAX_DIMS);
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] < 0)
            return tr_error_set(err, TR_ERR_SHAPE, "%s: %s %s has a negative extent", kname, what,
                                tr_cpu_desc(t, d, sizeof d));
    if (tr_dtype_size((enum tr_dtype)t->dtype) == 0)
        return tr_error_set(err, TR_ERR_INVALID, "%s: %s has unknown dtype %d", kname, what, t->dtype);
    if (t->device != device)
        return tr_error_set(err, TR_ERR_DEVICE, "%s: %s %s is on device %d, not %s", kname, what,
                            tr_cpu_desc(t, d, sizeof d), t->device, device == TR_DEVICE_CPU ? "the cpu" : "cuda");
    if (!tr_tensor_is_contiguous(t))
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "%s: %s %s is not contiguous (strides given; this kernel "
                            "takes contiguous tensors)", kname, what, tr_cpu_desc(t, d, sizeof d));
    if (!t->data && tr_tensor_numel(t) > 0)
        return tr_error_set(err, TR_ERR_INVALID, "%s: %s %s has no data", kname, what, tr_cpu_desc(t, d, sizeof d));
    return TR_OK;
}

int tr_cpu_check_tensor(const struct tr_tensor *t, const char *kname, const char *what, struct tr_error *err) {
    return tr_cpu_check_tensor_on(t, TR_DEVICE_CPU, kname, what, err);
}

int tr_cpu_check_float_on(const struct tr_tensor *t, int device, const char *kname, const char *what,
                          struct tr_error *err) {
    int rc = tr_cpu_check_tensor_on(t, device, kname, what, err);
    if (rc) return rc;
    if (t->dtype != TR_DTYPE_F32 && t->dtype != TR_DTYPE_BF16 && t->dtype != TR_DTYPE_F16) {
        char d[200];
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "%s: %s %s: expected f32, bf16 or f16%s", kname, what,
                            tr_cpu_desc(t, d, sizeof d), device == TR_DEVICE_CPU ? "" : " on cuda");
    }
    return TR_OK;
}

int tr_cpu_check_float(const struct tr_tensor *t, const char *kname, const char *what, struct tr_error *err) {
    return tr_cpu_check_float_on(t, TR_DEVICE_CPU, kname, what, err);
}

int tr_cpu_same_shape(const struct tr_tensor *a, const struct tr_tensor *b) {
    if (a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

int tr_cpu_check_like(const char *kname, const struct tr_tensor *a, const char *an, const struct tr_tensor *b,
                      const char *bn, struct tr_error *err) {
    if (a->dtype == b->dtype && tr_cpu_same_shape(a, b)) return TR_OK;
    char d1[200], d2[200];
    return tr_error_set(err, TR_ERR_SHAPE, "%s: %s %s and %s %s should have the same shape and dtype", kname, an,
                        tr_cpu_desc(a, d1, sizeof d1), bn, tr_cpu_desc(b, d2, sizeof d2));
}

int tr_cpu_check_mask(const char *kname, const struct tr_tensor *mask, int dtype, const int64_t full[4], int64_t ms[4],
                      const char **data, int *mdt, struct tr_error *err) {
    if (!mask) return TR_OK;
    char d[200];
    if ((mask->dtype != TR_DTYPE_F32 && mask->dtype != dtype) || mask->ndim > 4)
        return tr_error_set(err, TR_ERR_SHAPE, "%s: mask %s should be f32 or %s with at most 4 dimensions", kname,
                            tr_cpu_desc(mask, d, sizeof d), tr_dtype_name((enum tr_dtype)dtype));
    if (!tr_broadcast_strides(mask->ndim, mask->shape, 4, full, ms))
        return tr_error_set(err, TR_ERR_SHAPE, "%s: mask %s does not broadcast to (B,H,Tq,Tk) = (%lld,%lld,%lld,%lld)",
                            kname, tr_cpu_desc(mask, d, sizeof d), (long long)full[0], (long long)full[1],
                            (long long)full[2], (long long)full[3]);
    *data = mask->data;
    *mdt = mask->dtype;
    return TR_OK;
}

int tr_cpu_check_rel_bias(const char *kname, const struct tr_tensor *q, const struct tr_tensor *kk,
                          const struct tr_tensor rel[2], struct tr_cpu_rel_bias *rb, struct tr_error *err) {
    const struct tr_tensor *h = &rel[0], *w = &rel[1];
    int ok = h->ndim == 4 && w->ndim == 4 && q->ndim == 4 && kk->ndim == 4;
    for (int i = 0; ok && i < 3; i++) ok = h->shape[i] == q->shape[i] && w->shape[i] == q->shape[i];
    ok = ok && h->shape[3] * w->shape[3] == kk->shape[2] && tr_dtype_is_float((enum tr_dtype)h->dtype) &&
         tr_dtype_is_float((enum tr_dtype)w->dtype) && (h->dtype == TR_DTYPE_F32 || h->dtype == q->dtype) &&
         (w->dtype == TR_DTYPE_F32 || w->dtype == q->dtype) && h->data && w->data;
    if (ok) {
        if (rb) *rb = (struct tr_cpu_rel_bias){h->data, w->data, h->dtype, w->dtype, h->shape[3], w->shape[3]};
        return TR_OK;
    }
    char d1[200], d2[200], d3[200], d4[200];
    return tr_error_set(err, TR_ERR_SHAPE,
                        "%s: rel_h %s and rel_w %s should be (B,H,Tq,Kh) and (B,H,Tq,Kw) of f32 or q's dtype with "
                        "Kh·Kw = Tk (q %s, k %s)",
                        kname, tr_cpu_desc(h, d1, sizeof d1), tr_cpu_desc(w, d2, sizeof d2), tr_cpu_desc(q, d3, sizeof d3),
                        tr_cpu_desc(kk, d4, sizeof d4));
}

int tr_cpu_is_reduced(const struct tr_tensor *x, int ax, const struct tr_tensor *r, int keep) {
    if (r->ndim != x->ndim - (keep ? 0 : 1)) return 0;
    for (int i = 0, j = 0; i < x->ndim; i++) {
        if (i == ax) {
            if (keep && r->shape[j++] != 1) return 0;
            continue;
        }
        if (r->shape[j++] != x->shape[i]) return 0;
    }
    return 1;
}

int tr_cpu_axis(int64_t axis, int ndim) {
    if (axis < 0) axis += ndim;
    return axis >= 0 && axis < ndim ? (int)axis : -1;
}
