/* TIMESTEP_EMBEDDING (ops.h): diffusers' get_timestep_embedding, in double. The UNet's
 * N·D values are few; SAM's random Fourier features run it on every grid point and
 * prompt coordinate (N = 131072 at the small preset's 32x32 grid), so the frequencies
 * are made once per call and the rows split among the threads. */
#include <math.h>
#include "cpu_internal.h"

int tr_cpu_timestep_embedding_invoke(struct tr_kernels *k, int op, const struct tr_attrs *at, int n_in,
                                     const struct tr_tensor *in, struct tr_tensor *out, struct tr_error *err) {
    (void)op;
    const char *kn = "timestep_embedding";
    int rc = tr_cpu_check_ctx(k, kn, err);
    if (rc) return rc;
    if (n_in != 1) return tr_error_set(err, TR_ERR_INVALID, "%s: %d inputs given, 1 expected", kn, n_in);
    const struct tr_tensor *t = &in[0];
    if ((rc = tr_cpu_check_float(t, kn, "t", err)) || (rc = tr_cpu_check_float(out, kn, "out", err))) return rc;
    const int64_t N = t->ndim == 1 ? t->shape[0] : -1, D = at->ints[0], h = D / 2;
    const double shift = at->floats[0], period = at->floats[1] == 0.0f ? 10000.0 : (double)at->floats[1];
    char d1[200], d2[200];
    if (N < 0 || D < 2 || D % 2 || out->dtype != t->dtype || out->ndim != 2 || out->shape[0] != N ||
        out->shape[1] != D)
        return tr_error_set(err, TR_ERR_SHAPE, "%s: t %s should be [N] and out %s [N,%lld] of t's dtype (dim even)",
                            kn, tr_cpu_desc(t, d1, sizeof d1), tr_cpu_desc(out, d2, sizeof d2), (long long)D);
    if (!(shift < (double)h) || !(period > 0.0))
        return tr_error_set(err, TR_ERR_INVALID, "%s: shift %g must be below dim/2 = %lld and max_period %g above 0",
                            kn, shift, (long long)h, period);
    const int64_t sin_at = at->ints[1] ? h : 0, cos_at = at->ints[1] ? 0 : h;
    if ((rc = tr_cpu_scratch_reserve(k, sizeof(double) * (size_t)h, 0, kn, err)) != TR_OK) return rc;
    double *freq = tr_cpu_scratch_shared(k);
    for (int64_t i = 0; i < h; i++) freq[i] = exp(-log(period) * (double)i / ((double)h - shift));
#pragma omp parallel for schedule(static) num_threads(tr_cpu_threads(k)) if (N * h > TR_CPU_PAR_MIN / 4)
    for (int64_t n = 0; n < N; n++) {
        const double tn = tr_tensor_get_f64(t, n);
        for (int64_t i = 0; i < h; i++) {
            const double a = tn * freq[i];
            tr_tensor_set_f64(out, n * D + sin_at + i, sin(a));
            tr_tensor_set_f64(out, n * D + cos_at + i, cos(a));
        }
    }
    return TR_OK;
}
