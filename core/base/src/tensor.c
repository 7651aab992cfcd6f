#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "trident/tensor.h"

int64_t tr_shape_numel(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

int tr_shape_bytes(int ndim, const int64_t *shape, int dtype, uint64_t *bytes) {
    /* the bound holds for the extents other than 0 too, so that no stride overflows */
    uint64_t n = tr_dtype_size((enum tr_dtype)dtype);
    int empty = 0;
    if (n == 0) n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return 0;
        if (shape[i] == 0) empty = 1;
        else if (n > TR_MAX_TENSOR_BYTES / (uint64_t)shape[i]) return 0;
        else n *= (uint64_t)shape[i];
    }
    if (n > TR_MAX_TENSOR_BYTES) return 0;
    *bytes = empty ? 0 : n;
    return 1;
}

int tr_shape_equal(int na, const int64_t *a, int nb, const int64_t *b) {
    if (na != nb) return 0;
    for (int i = 0; i < na; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

int tr_broadcast_strides(int nd, const int64_t *s, int nf, const int64_t *full, int64_t *st) {
    if (nd > nf) return 0;
    int64_t acc = 1;
    for (int i = nf - 1; i >= 0; i--) {
        int j = i - (nf - nd);
        int64_t e = j >= 0 ? s[j] : 1;
        if (e != 1 && e != full[i]) return 0;
        st[i] = e == 1 ? 0 : acc;
        acc *= e;
    }
    return 1;
}

int tr_tensor_make(struct tr_tensor *t, void *data, enum tr_dtype dtype, int ndim, const int64_t *shape,
                   struct tr_error *err) {
    if (ndim < 0 || ndim > TR_MAX_DIMS)
        return tr_error_set(err, TR_ERR_SHAPE, "tensor: %d dimensions (at most %d)", ndim, TR_MAX_DIMS);
    memset(t, 0, sizeof *t);
    t->data = data;
    t->dtype = dtype;
    t->ndim = ndim;
    uint64_t bytes;
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0)
            return tr_error_set(err, TR_ERR_SHAPE, "tensor: negative extent %lld on axis %d", (long long)shape[i], i);
    if (!tr_shape_bytes(ndim, shape, dtype, &bytes)) {
        char buf[160];
        return tr_error_set(err, TR_ERR_SHAPE, "tensor: shape %s of %s is more than %llu bytes", tr_shape_str(ndim, shape,
                            buf, sizeof buf), tr_dtype_name(dtype), (unsigned long long)TR_MAX_TENSOR_BYTES);
    }
    int64_t stride = 1; /* no overflow: the extents' product is below 2^48 */
    for (int i = ndim - 1; i >= 0; i--) {
        t->shape[i] = shape[i];
        t->strides[i] = stride;
        stride *= shape[i];
    }
    t->device = TR_DEVICE_CPU;
    return TR_OK;
}

int64_t tr_tensor_numel(const struct tr_tensor *t) { return tr_shape_numel(t->ndim, t->shape); }

size_t tr_tensor_nbytes(const struct tr_tensor *t) {
    return (size_t)tr_tensor_numel(t) * tr_dtype_size((enum tr_dtype)t->dtype);
}

int tr_tensor_is_contiguous(const struct tr_tensor *t) {
    int64_t stride = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->strides[i] != stride) return 0;
        stride *= t->shape[i];
    }
    return 1;
}

const char *tr_shape_str(int ndim, const int64_t *shape, char *buf, size_t n) {
    size_t off = 0;
    if (n == 0) return buf;
    buf[0] = '\0';
    off += (size_t)snprintf(buf + off, n - off, "[");
    for (int i = 0; i < ndim && off < n; i++)
        off += (size_t)snprintf(buf + off, n - off, i ? ",%lld" : "%lld", (long long)shape[i]);
    if (off < n) snprintf(buf + off, n - off, "]");
    return buf;
}

int tr_host_alloc(void **p, size_t nbytes, struct tr_error *err) {
    size_t rounded = (nbytes + 63) & ~(size_t)63;
    *p = aligned_alloc(64, rounded ? rounded : 64);
    if (!*p) return tr_error_set(err, TR_ERR_NOMEM, "host allocation of %zu bytes failed", nbytes);
    return TR_OK;
}

void tr_host_free(void *p) { free(p); }

static int64_t offset_of(const struct tr_tensor *t, int64_t i) {
    int64_t off = 0;
    for (int d = t->ndim - 1; d >= 0; d--) {
        int64_t idx = i % t->shape[d];
        i /= t->shape[d];
        off += idx * t->strides[d];
    }
    return off;
}

double tr_tensor_get_f64(const struct tr_tensor *t, int64_t i) {
    int64_t o = offset_of(t, i);
    switch (t->dtype) {
    case TR_DTYPE_F32: return ((const float *)t->data)[o];
    case TR_DTYPE_BF16: return tr_bf16_to_f32(((const uint16_t *)t->data)[o]);
    case TR_DTYPE_F16: return tr_f16_to_f32(((const uint16_t *)t->data)[o]);
    case TR_DTYPE_I32: return ((const int32_t *)t->data)[o];
    case TR_DTYPE_I64: return (double)((const int64_t *)t->data)[o];
    case TR_DTYPE_F64: return ((const double *)t->data)[o];
    default: return 0.0;
    }
}

void tr_tensor_set_f64(struct tr_tensor *t, int64_t i, double v) {
    int64_t o = offset_of(t, i);
    switch (t->dtype) {
    case TR_DTYPE_F32: ((float *)t->data)[o] = (float)v; break;
    case TR_DTYPE_BF16: ((uint16_t *)t->data)[o] = tr_f32_to_bf16((float)v); break;
    case TR_DTYPE_F16: ((uint16_t *)t->data)[o] = tr_f32_to_f16((float)v); break;
    case TR_DTYPE_I32: ((int32_t *)t->data)[o] = (int32_t)v; break;
    case TR_DTYPE_I64: ((int64_t *)t->data)[o] = (int64_t)v; break;
    case TR_DTYPE_F64: ((double *)t->data)[o] = v; break;
    default: break;
    }
}
