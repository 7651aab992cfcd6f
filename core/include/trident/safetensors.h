/* trident — a reader of safetensors files (https://huggingface.co/docs/safetensors).
 *
 * Layout: 8-byte little-endian header length N, N bytes of JSON (parsed with cJSON:
 * name -> {dtype, shape, data_offsets}), then the data. The whole file is read into
 * memory; tensors are views into it. Every offset is checked against the file's size,
 * so a truncated or inconsistent file is an error naming the file and the tensor.
 * A writer is provided too (tests and tools write fixtures and outputs with it).
 */
#ifndef TRIDENT_SAFETENSORS_H
#define TRIDENT_SAFETENSORS_H

#include "trident/status.h"
#include "trident/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tr_safetensors;

int tr_safetensors_open(const char *path, struct tr_safetensors **out, struct tr_error *err);
void tr_safetensors_close(struct tr_safetensors *st);
int tr_safetensors_count(const struct tr_safetensors *st);
const char *tr_safetensors_name(const struct tr_safetensors *st, int i);
/* The header-order index of the named tensor (tr_safetensors_name's i), -1 if absent. */
int tr_safetensors_find(const struct tr_safetensors *st, const char *name);
/* A view of the named tensor (data points into st). TR_ERR_NOT_FOUND if absent. Dtypes
 * F32, BF16, F16, I32, I64, F64 are read; others are TR_ERR_UNSUPPORTED. */
int tr_safetensors_get(const struct tr_safetensors *st, const char *name, struct tr_tensor *out,
                       struct tr_error *err);
const char *tr_safetensors_path(const struct tr_safetensors *st);
/* The named tensor's bytes whatever its dtype: *dtype the file's name for it ("BOOL", "U8",
 * ...), its dimensions into ndim and shape (TR_MAX_DIMS), data pointing into st, one
 * element every elsize bytes. TR_ERR_NOT_FOUND if absent. For what tr_tensor cannot hold. */
int tr_safetensors_get_bytes(const struct tr_safetensors *st, const char *name, const char **dtype, int *ndim,
                             int64_t *shape, const void **data, struct tr_error *err);

/* Write n named host tensors to path. */
int tr_safetensors_write(const char *path, int n, const char *const *names, const struct tr_tensor *ts,
                         struct tr_error *err);

#ifdef __cplusplus
}
#endif
#endif
