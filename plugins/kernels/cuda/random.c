/* tr_k_random on a cuda context (its arguments checked by cpu/random.c first): cuRAND's
 * Philox generator, made with the context and set on its stream, reseeded and rewound
 * for each call, so that one seed gives the same bits on one device. cuRAND draws f32
 * uniforms in (0, 1] and normals in pairs (an even count): the draw goes to scratch (or
 * straight into an f32 out when it fits), uniforms are mapped onto [a, b) by one SCALE
 * (u -> b - (b - a)·u), and a bf16/f16 out is one cast. */
#include <curand.h>
#include "../cpu/cpu_internal.h"
#include "cuda_internal.h"
#include "host/cuda_entry.h"

static int rand_status(curandStatus_t s, const char *what, struct tr_error *err) {
    if (s == CURAND_STATUS_SUCCESS) return TR_OK;
    return tr_error_set(err, TR_ERR_DEVICE, "random: %s failed (curand status %d)", what, (int)s);
}

int tr_cuda_random(struct tr_kernels *k, int dist, uint64_t seed, float a, float b, struct tr_tensor *out,
                   struct tr_error *err) {
    static const char kn[] = "random";
    struct tr_cuda_ctx *c = k->cuda;
    if (!c) return tr_error_set(err, TR_ERR_INVALID, "%s: not a cuda kernels context", kn);
    int rc = tr_cpu_check_float_on(out, TR_DEVICE_CUDA, kn, "out", err);
    if (rc) return rc;
    k->stats.calls++;
    const int64_t n = tr_tensor_numel(out);
    if (n == 0) return TR_OK;
    const int uniform = dist == TR_RANDOM_UNIFORM;
    const size_t draws = uniform ? (size_t)n : ((size_t)n + 1) & ~(size_t)1;
    float *buf = NULL;
    /* cuRAND writes its normals in pairs: straight into out only when that is 8-aligned */
    if (out->dtype == TR_DTYPE_F32 && draws == (size_t)n && (uniform || ((uintptr_t)out->data & 7) == 0)) {
        buf = out->data;
    } else {
        void *p = NULL;
        if ((rc = tr_cuda_scratch(c, draws * sizeof(float), &p, err)) != TR_OK) return rc;
        buf = p;
    }
    curandGenerator_t g = (curandGenerator_t)c->curand;
    rc = rand_status(curandSetStream(g, c->stream), "curandSetStream", err);
    if (!rc) rc = rand_status(curandSetPseudoRandomGeneratorSeed(g, seed), "curandSetPseudoRandomGeneratorSeed", err);
    if (!rc) rc = rand_status(curandSetGeneratorOffset(g, 0), "curandSetGeneratorOffset", err);
    if (rc) return rc;
    if (uniform) {
        rc = rand_status(curandGenerateUniform(g, buf, draws), "curandGenerateUniform", err);
        /* (0, 1] -> [a, b): u = 1 gives a, u -> 0 approaches b */
        if (!rc) rc = tr_cu_unary(c->stream, TR_OP_SCALE, TR_DTYPE_F32, buf, buf, n, a - b, b, 0, err);
    } else {
        rc = rand_status(curandGenerateNormal(g, buf, draws, a, b), "curandGenerateNormal", err);
    }
    if (rc || buf == out->data) return rc;
    return tr_cu_cast(c->stream, buf, TR_DTYPE_F32, out->data, out->dtype, n, err);
}
