/* PyTorch's CPU generator (rng.h): at::mt19937 (aten/src/ATen/core/MT19937RNGEngine.h) and
 * torch.randn's two paths for a float32 tensor (aten/src/ATen/native/cpu/
 * DistributionTemplates.h, normal_kernel): from 16 values on, every value a uniform of 24
 * bits first, then Box-Muller over each block of 16 (8 pairs: value j and j + 8), and when n
 * is no multiple of 16 the last 16 drawn again and transformed over; below 16, one
 * at::normal_distribution<double> a value (two 53-bit uniforms, the sine kept for the next
 * call). */
#include <math.h>
#include "trident/rng.h"

void tr_torch_rng_seed(struct tr_torch_rng *r, uint64_t seed) {
    r->mt[0] = (uint32_t)seed; /* torch keeps the low 32 bits */
    for (int i = 1; i < 624; i++) r->mt[i] = 1812433253u * (r->mt[i - 1] ^ (r->mt[i - 1] >> 30)) + (uint32_t)i;
    r->idx = 624;
    r->has_next = 0;
    r->next = 0;
}

static uint32_t next32(struct tr_torch_rng *r) {
    if (r->idx == 624) {
        for (int i = 0; i < 624; i++) {
            uint32_t y = (r->mt[i] & 0x80000000u) | (r->mt[(i + 1) % 624] & 0x7fffffffu);
            r->mt[i] = r->mt[(i + 397) % 624] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
        }
        r->idx = 0;
    }
    uint32_t y = r->mt[r->idx++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    return y ^ (y >> 18);
}

static float uniform24(struct tr_torch_rng *r) {
    return (float)(next32(r) & 0xffffffu) * 0x1.0p-24f;
}

static double uniform53(struct tr_torch_rng *r) {
    uint64_t hi = next32(r), lo = next32(r);
    return (double)(((hi << 32) | lo) & ((1ull << 53) - 1)) * 0x1.0p-53;
}

static void box_muller16(float *d) {
    for (int j = 0; j < 8; j++) {
        const float u1 = 1.0f - d[j], u2 = d[j + 8]; /* [0,1) -> (0,1] for the log */
        const float radius = sqrtf(-2.0f * logf(u1)), theta = (float)(2.0 * 3.14159265358979323846 * (double)u2);
        d[j] = radius * cosf(theta);
        d[j + 8] = radius * sinf(theta);
    }
}

void tr_torch_randn(struct tr_torch_rng *r, float *out, int64_t n) {
    if (n < 16) {
        for (int64_t i = 0; i < n; i++) {
            if (r->has_next) {
                out[i] = (float)r->next;
                r->has_next = 0;
                continue;
            }
            const double u1 = uniform53(r), u2 = uniform53(r);
            const double radius = sqrt(-2.0 * log1p(-u2)), theta = 2.0 * 3.14159265358979323846 * u1;
            r->next = radius * sin(theta);
            r->has_next = 1;
            out[i] = (float)(radius * cos(theta));
        }
        return;
    }
    for (int64_t i = 0; i < n; i++) out[i] = uniform24(r);
    for (int64_t i = 0; i + 16 <= n; i += 16) box_muller16(out + i);
    if (n % 16) {
        for (int k = 0; k < 16; k++) out[n - 16 + k] = uniform24(r);
        box_muller16(out + n - 16);
    }
}
