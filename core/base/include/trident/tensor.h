/* trident — tensors: a view of typed memory on a device.
 *
 * A struct tr_tensor never owns its data; whoever allocated `data` frees it. Shapes
 * are outermost first (row-major); strides are in elements. A tensor made with
 * tr_tensor_make is contiguous. Kernels take contiguous tensors unless their header
 * says otherwise. A 0-d tensor (ndim 0) holds one element.
 */
#ifndef TRIDENT_TENSOR_H
#define TRIDENT_TENSOR_H

#include <stdint.h>
#include <stddef.h>
#include "trident/dtype.h"
#include "trident/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TR_MAX_DIMS 8

enum tr_device_type {
    TR_DEVICE_CPU = 0,
    TR_DEVICE_CUDA = 1,
};

struct tr_tensor {
    void *data;
    int32_t dtype;                  /* enum tr_dtype */
    int32_t ndim;
    int64_t shape[TR_MAX_DIMS];
    int64_t strides[TR_MAX_DIMS];   /* elements, not bytes */
    int32_t device;                 /* enum tr_device_type */
    int32_t device_index;
};

/* A contiguous view of `data` with the given shape. Returns TR_ERR_SHAPE for ndim out
 * of range or a negative extent. */
int tr_tensor_make(struct tr_tensor *t, void *data, enum tr_dtype dtype, int ndim,
                   const int64_t *shape, struct tr_error *err);

int64_t tr_tensor_numel(const struct tr_tensor *t);
size_t tr_tensor_nbytes(const struct tr_tensor *t);
int tr_tensor_is_contiguous(const struct tr_tensor *t);
int64_t tr_shape_numel(int ndim, const int64_t *shape);
/* The most bytes one tensor may hold (256 TiB): every shape from an INI, a config.json, a
 * safetensors header or a shape rule is held to it, so no element count, byte size or
 * stride computed from a checked shape can overflow. */
#define TR_MAX_TENSOR_BYTES ((uint64_t)1 << 48)
/* *bytes = the size of a dt tensor of shape; 0 (and *bytes untouched) when an extent is
 * negative or the size, counting every extent other than 0, exceeds TR_MAX_TENSOR_BYTES
 * (so [0, 2^53, 2^53] is refused too: its strides would overflow). */
int tr_shape_bytes(int ndim, const int64_t *shape, int dtype, uint64_t *bytes);

/* 1 if the two shapes have the same rank and extents. */
int tr_shape_equal(int na, const int64_t *a, int nb, const int64_t *b);

/* Element strides of a contiguous tensor of shape s (nd axes) read broadcast,
 * numpy-style right-aligned, over `full` (nf axes): st[i] for each of the nf axes, 0
 * where s broadcasts. Returns 1, or 0 (st unspecified) if s does not broadcast to full. */
int tr_broadcast_strides(int nd, const int64_t *s, int nf, const int64_t *full, int64_t *st);

/* "[2,128,64]" into buf (always NUL-terminated); returns buf. */
const char *tr_shape_str(int ndim, const int64_t *shape, char *buf, size_t n);

/* Host memory in this dtype, 64-byte aligned, freed with tr_host_free. */
int tr_host_alloc(void **p, size_t nbytes, struct tr_error *err);
void tr_host_free(void *p);

/* Element i of a host tensor of any float dtype, as double (for references, checks). */
double tr_tensor_get_f64(const struct tr_tensor *t, int64_t i);
void tr_tensor_set_f64(struct tr_tensor *t, int64_t i, double v);

#ifdef __cplusplus
}
#endif
#endif
