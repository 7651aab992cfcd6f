#include <math.h>
#include <string.h>
#include "trident/dtype.h"
#include "trident/status.h"

static const struct {
    const char *name;
    size_t size;
} dtypes[TR_DTYPE_COUNT] = {
    [TR_DTYPE_F32] = {"f32", 4}, [TR_DTYPE_BF16] = {"bf16", 2}, [TR_DTYPE_F16] = {"f16", 2},
    [TR_DTYPE_I32] = {"i32", 4}, [TR_DTYPE_I64] = {"i64", 8},   [TR_DTYPE_F64] = {"f64", 8},
};

size_t tr_dtype_size(enum tr_dtype t) {
    return (unsigned)t < TR_DTYPE_COUNT ? dtypes[t].size : 0;
}

const char *tr_dtype_name(enum tr_dtype t) {
    return (unsigned)t < TR_DTYPE_COUNT ? dtypes[t].name : "?";
}

int tr_dtype_from_name(const char *s, enum tr_dtype *out) {
    for (int i = 0; i < TR_DTYPE_COUNT; i++) {
        if (strcmp(s, dtypes[i].name) == 0) {
            *out = (enum tr_dtype)i;
            return TR_OK;
        }
    }
    /* The spellings PyTorch and NumPy users type. */
    static const struct { const char *alias; enum tr_dtype t; } aliases[] = {
        {"float32", TR_DTYPE_F32}, {"bfloat16", TR_DTYPE_BF16}, {"float16", TR_DTYPE_F16},
        {"int32", TR_DTYPE_I32},   {"int64", TR_DTYPE_I64},     {"float64", TR_DTYPE_F64},
    };
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++) {
        if (strcmp(s, aliases[i].alias) == 0) {
            *out = aliases[i].t;
            return TR_OK;
        }
    }
    return TR_ERR_NOT_FOUND;
}

int tr_dtype_is_float(enum tr_dtype t) {
    return t == TR_DTYPE_F32 || t == TR_DTYPE_BF16 || t == TR_DTYPE_F16 || t == TR_DTYPE_F64;
}

float tr_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    float f;
    if (exp == 0) {
        f = ldexpf((float)man, -24); /* zero and subnormals */
        return sign ? -f : f;
    }
    uint32_t u = exp == 31 ? (sign | 0x7f800000u | (man << 13)) : (sign | ((exp + 112) << 23) | (man << 13));
    memcpy(&f, &u, 4);
    return f;
}

uint16_t tr_f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7e00u;          /* NaN */
    if (a >= 0x477ff000u) return sign | 0x7c00u;         /* overflow rounds to inf */
    if (a < 0x38800000u) {                               /* subnormal or zero in f16 */
        float v;
        memcpy(&v, &a, 4);
        return sign | (uint16_t)lrintf(v * 16777216.0f); /* 2^24, ties to even */
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u);          /* round to nearest even */
    return sign | (uint16_t)((r - 0x38000000u) >> 13);
}

static const char *const math_names[TR_MATH_COUNT] = {
    [TR_MATH_DEFAULT] = "default", [TR_MATH_F32] = "f32", [TR_MATH_TF32] = "tf32", [TR_MATH_BF16] = "bf16"};

const char *tr_math_name(enum tr_math m) { return (unsigned)m < TR_MATH_COUNT ? math_names[m] : "?"; }

int tr_math_from_name(const char *s, enum tr_math *out) {
    for (int i = 0; i < TR_MATH_COUNT; i++) {
        if (strcmp(s, math_names[i]) == 0) {
            *out = (enum tr_math)i;
            return TR_OK;
        }
    }
    return TR_ERR_NOT_FOUND;
}
