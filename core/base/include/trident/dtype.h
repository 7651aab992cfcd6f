/* trident — element types.
 *
 * bf16 is stored as the upper 16 bits of an IEEE f32; conversion from f32 rounds to
 * nearest even (NaN stays NaN). f16 is IEEE half. Arithmetic on bf16/f16 data is
 * done in f32 (f32 accumulation everywhere). f64 exists for references and gradient
 * checks, not for models.
 */
#ifndef TRIDENT_DTYPE_H
#define TRIDENT_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

enum tr_dtype {
    TR_DTYPE_F32 = 0,
    TR_DTYPE_BF16 = 1,
    TR_DTYPE_F16 = 2,
    TR_DTYPE_I32 = 3,
    TR_DTYPE_I64 = 4,
    TR_DTYPE_F64 = 5,
    TR_DTYPE_COUNT
};

size_t tr_dtype_size(enum tr_dtype t);           /* bytes per element, 0 if unknown */
const char *tr_dtype_name(enum tr_dtype t);      /* "f32", "bf16", ...; "?" if unknown */
int tr_dtype_from_name(const char *s, enum tr_dtype *out); /* TR_OK or TR_ERR_NOT_FOUND */
int tr_dtype_is_float(enum tr_dtype t);

static inline float tr_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t tr_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest, ties to even */
    return (uint16_t)(u >> 16);
}

/* How matrix products compute (the [run] key `math`): f32 exactly; tf32 (f32 data, GEMMs on
 * tensor cores with 10-bit mantissas: cuda only); bf16 (bf16 data, f32 accumulation).
 * DEFAULT means what the dtype implies (f32 for f32, bf16 for bf16). */
enum tr_math { TR_MATH_DEFAULT = 0, TR_MATH_F32 = 1, TR_MATH_TF32 = 2, TR_MATH_BF16 = 3, TR_MATH_COUNT };
const char *tr_math_name(enum tr_math m);                /* "f32", "tf32", "bf16"; "default"; "?" */
int tr_math_from_name(const char *s, enum tr_math *out); /* TR_OK or TR_ERR_NOT_FOUND */

float tr_f16_to_f32(uint16_t h);
uint16_t tr_f32_to_f16(float f);

#ifdef __cplusplus
}
#endif
#endif
