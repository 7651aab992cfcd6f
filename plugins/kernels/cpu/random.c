/* tr_k_random on the cpu: value i of out is drawn from trident/rng.h's counter-based
 * stream (seed, key of this kernel, i), so the fill is a pure function of the seed and
 * the index (threads and chunking change nothing), computed in f64 and rounded once on
 * store. A cuda context routes to cuRAND (cuda/random.c) after the shared checks. */
#include "cpu_internal.h"
#include "trident/rng.h"

/* a fixed key: tr_k_random's stream is not the weights' (tr_hash_str of their names) */
#define TR_RANDOM_KEY 0x72616e646f6dull /* "random" */

static int random_check(enum tr_random_dist dist, float a, float b, const struct tr_tensor *out,
                        struct tr_error *err) {
    static const char kn[] = "random";
    if (!out) return tr_error_set(err, TR_ERR_INVALID, "%s: out is NULL", kn);
    if (dist != TR_RANDOM_UNIFORM && dist != TR_RANDOM_NORMAL)
        return tr_error_set(err, TR_ERR_INVALID, "%s: distribution %d is not uniform (0) or normal (1)", kn, (int)dist);
    if (!isfinite(a) || !isfinite(b))
        return tr_error_set(err, TR_ERR_INVALID, "%s: parameters a=%g, b=%g should be finite", kn, (double)a,
                            (double)b);
    if (dist == TR_RANDOM_UNIFORM && !(a < b))
        return tr_error_set(err, TR_ERR_INVALID, "%s: uniform in [a, b) needs a < b (a=%g, b=%g)", kn, (double)a,
                            (double)b);
    if (dist == TR_RANDOM_NORMAL && !(b >= 0.0f))
        return tr_error_set(err, TR_ERR_INVALID, "%s: normal needs a standard deviation b >= 0 (b=%g)", kn, (double)b);
    return TR_OK;
}

int tr_k_random(struct tr_kernels *k, enum tr_random_dist dist, uint64_t seed, float a, float b, struct tr_tensor *out,
                struct tr_error *err) {
    static const char kn[] = "random";
    if (!k) return tr_error_set(err, TR_ERR_INVALID, "%s: kernels context is NULL", kn);
    int rc = random_check(dist, a, b, out, err);
    if (rc) return rc;
    TR_CUDA_ROUTE(k, tr_cuda_random(k, (int)dist, seed, a, b, out, err));
    rc = tr_cpu_check_ctx(k, kn, err);
    if (!rc) rc = tr_cpu_check_tensor(out, kn, "out", err);
    if (rc) return rc;
    if (out->dtype != TR_DTYPE_F32 && out->dtype != TR_DTYPE_BF16 && out->dtype != TR_DTYPE_F16 &&
        out->dtype != TR_DTYPE_F64) {
        char d[200];
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "%s: out %s: expected f32, bf16, f16 or f64", kn,
                            tr_cpu_desc(out, d, sizeof d));
    }
    const int64_t n = tr_tensor_numel(out);
    const double lo = a, span = (double)b - (double)a;
    const int uniform = dist == TR_RANDOM_UNIFORM;
    const int dt = out->dtype;
    void *data = out->data;
#pragma omp parallel for schedule(static) if (n >= TR_CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        double y = uniform ? lo + span * tr_rng_uniform(seed, TR_RANDOM_KEY, (uint64_t)i)
                           : lo + (double)b * tr_rng_normal(seed, TR_RANDOM_KEY, (uint64_t)i);
        if (dt == TR_DTYPE_F64) {
            ((double *)data)[i] = y;
        } else {
            float f = (float)y;
            /* [a, b): rounding to f32 may reach b itself */
            if (uniform && f >= b) f = nextafterf(b, a);
            if (dt == TR_DTYPE_F32)
                ((float *)data)[i] = f;
            else
                ((uint16_t *)data)[i] = dt == TR_DTYPE_BF16 ? tr_f32_to_bf16(f) : tr_f32_to_f16(f);
        }
    }
    return TR_OK;
}
