/* The synthetic inputs make_inputs fills (models.h): the same draws for the same seed and
 * input name on every machine, so that backends and runs compare. */
#include <math.h>
#include <stdlib.h>
#include "models.h"
#include "trident/rng.h"

void tr_model_fill_normal(struct tr_tensor *t, uint64_t seed, const char *name) {
    const uint64_t key = tr_hash_str(name);
    for (int64_t i = 0; i < tr_tensor_numel(t); i++) tr_tensor_set_f64(t, i, tr_rng_normal(seed, key, (uint64_t)i));
}

void tr_model_fill_image(struct tr_tensor *t, uint64_t seed, const char *name, double amp, int64_t fx, int64_t fy,
                         double noise) {
    const int64_t S = t->shape[1], C = t->shape[3];
    const uint64_t key = tr_hash_str(name);
    for (int64_t i = 0; i < tr_tensor_numel(t); i++) {
        const int64_t c = i % C, x = (i / C) % S, y = (i / (C * S)) % S, b = i / (C * S * S);
        double ph = tr_rng_uniform(seed, key, (uint64_t)(b * C + c)) * 6.283185307179586;
        tr_tensor_set_f64(t, i, amp * sin(6.283185307179586 * (double)(fx * x + fy * y) / (double)S + ph) +
                                    noise * (2.0 * tr_rng_uniform(seed, key + 1, (uint64_t)i) - 1.0));
    }
}

int tr_model_fill_torch_randn_nhwc(struct tr_tensor *t, struct tr_torch_rng *r, int64_t calls, struct tr_error *err) {
    const int64_t N = t->shape[0] / calls, H = t->shape[1], W = t->shape[2], C = t->shape[3], n = N * H * W * C;
    float *nchw = malloc(sizeof(float) * (size_t)(n ? n : 1));
    if (!nchw) return tr_error_set(err, TR_ERR_NOMEM, "no memory for %lld random values", (long long)n);
    for (int64_t k = 0; k < calls; k++) {
        tr_torch_randn(r, nchw, n);
        for (int64_t b = 0; b < N; b++)
            for (int64_t c = 0; c < C; c++)
                for (int64_t p = 0; p < H * W; p++)
                    tr_tensor_set_f64(t, k * n + (b * H * W + p) * C + c, nchw[(b * C + c) * H * W + p]);
    }
    free(nchw);
    return TR_OK;
}
