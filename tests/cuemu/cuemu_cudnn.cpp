// cuemu's stand-in for cuDNN's legacy convolution API (cudnn_cnn.h): 2-D convolutions,
// forward, backward data and backward filter, on 4-D tensors and filters of f32, bf16 or
// f16 (NCHW or NHWC, KCRS or KRSC), computed in double from the inputs as the descriptors
// lay them out (f32 rounded to TF32 first where the math type lets cuDNN use tensor
// cores) and rounded once to the output's type, out = alpha * result + beta * out (beta 0:
// out is not read). The work goes through cuemu's queue (tr_cuemu::submit), so a stream
// capture records it, with the descriptors' values as they were at the call.
//
// Each call is a sum over the filter's taps of double-precision GEMMs (the pixels a tap
// pairs, gathered), on OpenMP's threads where this file is built with them; each output
// element is summed by one thread in one order, so the result does not depend on their
// number. 2x64x64x320 by a 3x3 filter: about 1 s a call on one core (AVX2).
//
// Strict where cuDNN refuses or where a GPU would quietly go wrong, each with a line on
// stderr: descriptors that do not fit together (channels, the output's size, types) and
// an algorithm run with less workspace than the heuristic said it needs
// (CUDNN_STATUS_BAD_PARAM), an algorithm the heuristic did not offer as supported
// (CUDNN_STATUS_NOT_SUPPORTED), an output that overlaps an input or the workspace
// (CUDNN_STATUS_BAD_PARAM); the workspace is filled with 0xff bytes before each run (NaN
// to a caller that keeps data in it); cudnnCreate and cudnnDestroy while a stream
// captures (cuDNN allocates and synchronizes there) spoil the capture, as cudaMalloc does.
//
// The heuristics (cudnnGetConvolution*Algorithm_v7) answer the same three entries for any
// fitting problem, so that a caller's choice among them is exercised: [0] algo 0, no
// workspace, tensor-op math, non-deterministic; [1] an FFT algo, CUDNN_STATUS_NOT_SUPPORTED;
// [2] a second algo, deterministic, FMA math, CONV_WS_BYTES of workspace.
#ifdef TR_HAVE_CUDNN

#include "cuemu_rt.h"

#include <cudnn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <algorithm>
#include <vector>

namespace {

enum { CONV_WS_BYTES = 4096 }; // the workspace the heuristics' entry [2] needs
// Problems cuDNN refuses, so that a caller's way around them runs (test_cuda_kernels'
// test_conv): x with REFUSED_C channels, the heuristic itself answers NOT_SUPPORTED;
// with NO_ALGO_C, it lists its three entries with none that runs.
enum { REFUSED_C = 13, NO_ALGO_C = 11 };

struct dims4 {
    bool set = false;
    cudnnTensorFormat_t fmt = CUDNN_TENSOR_NCHW;
    cudnnDataType_t type = CUDNN_DATA_FLOAT;
    int n = 0, c = 0, h = 0, w = 0; // a filter's K, C, R, S
};

struct conv_params {
    bool set = false;
    int pad_h = 0, pad_w = 0, u = 1, v = 1, dil_h = 1, dil_w = 1;
    cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};

} // namespace

struct cudnnContext {
    cudaStream_t stream = nullptr;
};
struct cudnnTensorStruct {
    dims4 d;
};
struct cudnnFilterStruct {
    dims4 d;
};
struct cudnnConvolutionStruct {
    conv_params p;
};

using namespace tr_cuemu;

namespace {

const char *type_name(cudnnDataType_t t) {
    switch (t) {
    case CUDNN_DATA_FLOAT: return "f32";
    case CUDNN_DATA_BFLOAT16: return "bf16";
    case CUDNN_DATA_HALF: return "f16";
    default: return "?";
    }
}
cudaDataType cuda_type(cudnnDataType_t t) {
    return t == CUDNN_DATA_FLOAT ? CUDA_R_32F : t == CUDNN_DATA_BFLOAT16 ? CUDA_R_16BF : CUDA_R_16F;
}
size_t type_bytes(cudnnDataType_t t) { return t == CUDNN_DATA_FLOAT ? 4 : 2; }

size_t count(const dims4 &d) { return (size_t)d.n * d.c * d.h * d.w; }
size_t bytes(const dims4 &d) { return count(d) * type_bytes(d.type); }

// The element (n, c, h, w) of a tensor, or (k, c, r, s) of a filter: NCHW (KCRS) or NHWC (KRSC).
inline size_t at(const dims4 &d, int n, int c, int h, int w) {
    if (d.fmt == CUDNN_TENSOR_NCHW) return (((size_t)n * d.c + c) * d.h + h) * d.w + w;
    return (((size_t)n * d.h + h) * d.w + w) * d.c + c;
}

cudnnStatus_t set_dims(dims4 *d, cudnnTensorFormat_t fmt, cudnnDataType_t type, int n, int c, int h, int w) {
    if (fmt != CUDNN_TENSOR_NCHW && fmt != CUDNN_TENSOR_NHWC) return CUDNN_STATUS_NOT_SUPPORTED;
    if (type != CUDNN_DATA_FLOAT && type != CUDNN_DATA_BFLOAT16 && type != CUDNN_DATA_HALF)
        return CUDNN_STATUS_NOT_SUPPORTED;
    if (n < 1 || c < 1 || h < 1 || w < 1) return CUDNN_STATUS_BAD_PARAM;
    if ((int64_t)n * c * h * w > INT32_MAX) return CUDNN_STATUS_NOT_SUPPORTED; // cuDNN's limit on elements
    d->set = true;
    d->fmt = fmt;
    d->type = type;
    d->n = n;
    d->c = c;
    d->h = h;
    d->w = w;
    return CUDNN_STATUS_SUCCESS;
}

// The output's extent along one axis, or < 1 where the filter (dilated) passes the
// padded input.
int out_dim(int in, int pad, int filt, int dil, int stride) {
    const int64_t ext = (int64_t)in + 2 * (int64_t)pad - (int64_t)dil * (filt - 1) - 1;
    return ext < 0 ? 0 : (int)(ext / stride + 1);
}

// x (N, C, H, W), w (K, C, R, S) and y (N, K, P, Q) fit conv as cuDNN requires; else a
// line on stderr (fn: the call; xn, yn: what it calls x and y, dx and dy backward) and false.
bool fits(const char *fn, const dims4 &x, const dims4 &w, const conv_params &cp, const dims4 &y, const char *xn,
          const char *yn) {
    if (!x.set || !w.set || !y.set || !cp.set) {
        fprintf(stderr, "cuemu: %s: a descriptor never set:%s%s%s%s%s%s\n", fn, x.set ? "" : " ", x.set ? "" : xn,
                w.set ? "" : " the filter", y.set ? "" : " ", y.set ? "" : yn, cp.set ? "" : " the convolution");
        return false;
    }
    const int p = out_dim(x.h, cp.pad_h, w.h, cp.dil_h, cp.u), q = out_dim(x.w, cp.pad_w, w.w, cp.dil_w, cp.v);
    char what[160] = "";
    if (x.c != w.c) snprintf(what, sizeof what, "%s has %d channels, the filter %d", xn, x.c, w.c);
    else if (p < 1 || q < 1)
        snprintf(what, sizeof what, "the filter %dx%d (dilation %dx%d) is larger than the padded %s", w.h, w.w,
                 cp.dil_h, cp.dil_w, xn);
    else if (y.n != x.n) snprintf(what, sizeof what, "batch %d in %s, %d in %s", x.n, xn, y.n, yn);
    else if (y.c != w.n) snprintf(what, sizeof what, "the filter's K is %d, %s has %d channels", w.n, yn, y.c);
    else if (y.h != p || y.w != q)
        snprintf(what, sizeof what, "%s is %dx%d where the convolution makes %dx%d", yn, y.h, y.w, p, q);
    else if (x.type != w.type || x.type != y.type)
        snprintf(what, sizeof what, "types: %s %s, the filter %s, %s %s", xn, type_name(x.type), type_name(w.type), yn,
                 type_name(y.type));
    if (!what[0]) return true;
    fprintf(stderr,
            "cuemu: %s: %s %dx%dx%dx%d, filter %dx%dx%dx%d, pad %dx%d, stride %dx%d, dilation %dx%d, %s "
            "%dx%dx%dx%d (as NCHW, KCRS) do not fit: %s\n",
            fn, xn, x.n, x.c, x.h, x.w, w.n, w.c, w.h, w.w, cp.pad_h, cp.pad_w, cp.u, cp.v, cp.dil_h, cp.dil_w, yn, y.n,
            y.c, y.h, y.w, what);
    return false;
}

/* The algorithms the heuristics offer, per direction: [0] no workspace, [1] not
 * supported, [2] CONV_WS_BYTES. What the run calls check the workspace against. */
struct algo_menu {
    int ok0, unsupported, ok2;
};
const algo_menu FWD_ALGOS = {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, CUDNN_CONVOLUTION_FWD_ALGO_FFT,
                             CUDNN_CONVOLUTION_FWD_ALGO_GEMM};
const algo_menu BWD_DATA_ALGOS = {CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT,
                                  CUDNN_CONVOLUTION_BWD_DATA_ALGO_1};
const algo_menu BWD_FILTER_ALGOS = {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT,
                                    CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1};

template <typename Perf, typename Algo>
cudnnStatus_t heuristic(const char *fn, const algo_menu &menu, const dims4 &x, const dims4 &w, const conv_params &cp,
                        const dims4 &y, const char *xn, const char *yn, int requested, int *returned, Perf *perf) {
    if (!returned || !perf || requested < 1) {
        fprintf(stderr, "cuemu: %s: requestedAlgoCount %d, returnedAlgoCount %p, perfResults %p\n", fn, requested,
                (void *)returned, (void *)perf);
        if (returned) *returned = 0;
        return CUDNN_STATUS_BAD_PARAM;
    }
    *returned = 0;
    if (!fits(fn, x, w, cp, y, xn, yn)) return CUDNN_STATUS_BAD_PARAM;
    if (x.c == REFUSED_C) return CUDNN_STATUS_NOT_SUPPORTED;
    const int n = requested < 3 ? requested : 3;
    for (int i = 0; i < n; i++) {
        Perf &r = perf[i];
        memset(&r, 0, sizeof r);
        if (i == 0) {
            r.algo = (Algo)menu.ok0;
            r.status = CUDNN_STATUS_SUCCESS;
            r.time = 1.0f;
            r.memory = 0;
            r.determinism = CUDNN_NON_DETERMINISTIC;
            r.mathType = CUDNN_TENSOR_OP_MATH;
        } else if (i == 1) {
            r.algo = (Algo)menu.unsupported;
            r.status = CUDNN_STATUS_NOT_SUPPORTED;
            r.time = -1.0f;
            r.memory = 0;
            r.determinism = CUDNN_NON_DETERMINISTIC;
            r.mathType = CUDNN_DEFAULT_MATH;
        } else {
            r.algo = (Algo)menu.ok2;
            r.status = CUDNN_STATUS_SUCCESS;
            r.time = 2.0f;
            r.memory = CONV_WS_BYTES;
            r.determinism = CUDNN_DETERMINISTIC;
            r.mathType = CUDNN_FMA_MATH;
        }
        if (x.c == NO_ALGO_C) r.status = CUDNN_STATUS_NOT_SUPPORTED;
    }
    *returned = n;
    return CUDNN_STATUS_SUCCESS;
}

/* One convolution call: what it reads and writes, as the call found them. */
struct conv_call {
    dims4 x, w, y; // input, filter, output of the forward convolution
    conv_params cp;
    double alpha, beta;
    void *ws;
    size_t ws_bytes;
};

// One pointer argument: where, how many bytes, its name in cuDNN's documentation.
struct span {
    const void *p;
    size_t n;
    const char *name;
};

// The checks every run call makes: the descriptors fit (xn, yn: what the call names x
// and y), the algorithm is one the heuristic offered as supported, its workspace is
// there, and neither the output nor the workspace overlaps what the call reads, or each
// other.
cudnnStatus_t check_run(const char *fn, const algo_menu &menu, int algo, const conv_call &k, const char *xn,
                        const char *yn, const void *alpha, const void *beta, span in1, span in2, span out) {
    if (!fits(fn, k.x, k.w, k.cp, k.y, xn, yn)) return CUDNN_STATUS_BAD_PARAM;
    if (!alpha || !beta || !in1.p || !in2.p || !out.p) {
        fprintf(stderr, "cuemu: %s: a NULL pointer (alpha %p, beta %p, %s %p, %s %p, %s %p)\n", fn, alpha, beta,
                in1.name, in1.p, in2.name, in2.p, out.name, out.p);
        return CUDNN_STATUS_BAD_PARAM;
    }
    size_t need;
    if (algo == menu.ok0) need = 0;
    else if (algo == menu.ok2) need = CONV_WS_BYTES;
    else {
        fprintf(stderr, "cuemu: %s: algo %d is not supported here (the heuristic offers %d and %d)\n", fn, algo,
                menu.ok0, menu.ok2);
        return CUDNN_STATUS_NOT_SUPPORTED;
    }
    if (k.ws_bytes < need || (need && !k.ws)) {
        fprintf(stderr, "cuemu: %s: algo %d needs %zu bytes of workspace, given %zu at %p\n", fn, algo, need, k.ws_bytes,
                k.ws);
        return CUDNN_STATUS_BAD_PARAM;
    }
    const span ws = {k.ws, k.ws_bytes, "the workspace"};
    const span pairs[][2] = {{out, in1}, {out, in2}, {out, ws}, {ws, in1}, {ws, in2}};
    for (const auto &pr : pairs) {
        const uintptr_t a = (uintptr_t)pr[0].p, b = (uintptr_t)pr[1].p;
        if (a && b && pr[0].n && pr[1].n && a < b + pr[1].n && b < a + pr[0].n) {
            fprintf(stderr, "cuemu: %s: %s [%p, +%zu bytes) overlaps %s [%p, +%zu bytes)\n", fn, pr[0].name, pr[0].p,
                    pr[0].n, pr[1].name, pr[1].p, pr[1].n);
            return CUDNN_STATUS_BAD_PARAM;
        }
    }
    return CUDNN_STATUS_SUCCESS;
}

// Whether f32 inputs are rounded to TF32 first: the math types that let cuDNN take tensor
// cores for f32 (CUDNN_DEFAULT_MATH does on sm_80 and later, NVIDIA_TF32_OVERRIDE unset).
bool tf32_inputs(const conv_params &cp, cudnnDataType_t t) {
    return t == CUDNN_DATA_FLOAT && cp.math != CUDNN_FMA_MATH;
}

// out[i] = alpha * acc + beta * out[i], beta 0: out[i] not read; rounded once to the type.
inline void put(void *out, cudaDataType t, size_t i, double acc, double alpha, double beta) {
    double v = alpha * acc;
    if (beta != 0.0) v += beta * ld_elem(out, t, i);
    st_elem(out, t, i, v);
}

void fill_workspace(const conv_call &k) {
    if (k.ws && k.ws_bytes) memset(k.ws, 0xff, k.ws_bytes);
}

// An element as the convolution reads it: f32 rounded to TF32 if tf.
inline double input(const void *p, cudaDataType t, size_t i, bool tf) {
    const double e = ld_elem(p, t, i);
    return tf ? (double)nvcuda::wmma::__float_to_tf32((float)e) : e;
}

// A tensor's (n, c, h, w) as doubles ordered (n, h, w, c): pixels of C channels.
std::vector<double> load_pixels(const void *p, const dims4 &d, bool tf) {
    std::vector<double> v(count(d));
    const cudaDataType t = cuda_type(d.type);
    size_t i = 0;
    for (int n = 0; n < d.n; n++)
        for (int h = 0; h < d.h; h++)
            for (int w = 0; w < d.w; w++)
                for (int c = 0; c < d.c; c++) v[i++] = input(p, t, at(d, n, c, h, w), tf);
    return v;
}

// The filter's (k, c, r, s) as doubles ordered [r][s][c][k] (k_inner) or [r][s][k][c],
// r and s flipped for CUDNN_CONVOLUTION: per filter tap (r, s), a C x K or K x C matrix.
std::vector<double> load_taps(const void *p, const dims4 &d, const conv_params &cp, bool k_inner, bool tf) {
    std::vector<double> v(count(d));
    const cudaDataType t = cuda_type(d.type);
    const bool flip = cp.mode == CUDNN_CONVOLUTION;
    for (int k = 0; k < d.n; k++)
        for (int c = 0; c < d.c; c++)
            for (int r = 0; r < d.h; r++)
                for (int s = 0; s < d.w; s++) {
                    const size_t rs = (size_t)r * d.w + s;
                    v[k_inner ? (rs * d.c + c) * d.n + k : (rs * d.n + k) * d.c + c] =
                        input(p, t, at(d, k, c, flip ? d.h - 1 - r : r, flip ? d.w - 1 - s : s), tf);
                }
    return v;
}

// C[MT][NT] (row stride ldc) += A[MT][j0..j1) (row stride lda) B[j0..j1)[NT] (row stride
// ldb): the edges' tiles.
template <int MT, int NT>
__attribute__((always_inline)) inline void tile(const double *A, size_t lda, const double *B, size_t ldb, double *C,
                                                size_t ldc, int j0, int j1) {
    double acc[MT][NT];
    for (int i = 0; i < MT; i++)
        for (int n = 0; n < NT; n++) acc[i][n] = C[i * ldc + n];
    for (int j = j0; j < j1; j++) {
        const double *b = B + (size_t)j * ldb;
        for (int i = 0; i < MT; i++) {
            const double a = A[i * lda + j];
            for (int n = 0; n < NT; n++) acc[i][n] += a * b[n];
        }
    }
    for (int i = 0; i < MT; i++)
        for (int n = 0; n < NT; n++) C[i * ldc + n] = acc[i][n];
}

// The same for MT x 8, the tile held in registers as vectors V of doubles (two per
// 16-byte register, four per AVX2 one).
typedef double v2d __attribute__((vector_size(16)));
typedef double v4d __attribute__((vector_size(32)));
template <typename V, int MT>
__attribute__((always_inline)) inline void tile8(const double *A, size_t lda, const double *B, size_t ldb, double *C,
                                                 size_t ldc, int j0, int j1) {
    enum { NV = 8 / (sizeof(V) / sizeof(double)) };
    V acc[MT][NV];
#pragma GCC unroll 8
    for (int i = 0; i < MT; i++)
#pragma GCC unroll 8
        for (int v = 0; v < NV; v++) memcpy(&acc[i][v], C + i * ldc + v * (8 / NV), sizeof(V));
    for (int j = j0; j < j1; j++) {
        V b[NV];
#pragma GCC unroll 8
        for (int v = 0; v < NV; v++) memcpy(&b[v], B + (size_t)j * ldb + v * (8 / NV), sizeof(V));
#pragma GCC unroll 8
        for (int i = 0; i < MT; i++) {
            const double a = A[i * lda + j];
#pragma GCC unroll 8
            for (int v = 0; v < NV; v++) acc[i][v] += a * b[v];
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < MT; i++)
#pragma GCC unroll 8
        for (int v = 0; v < NV; v++) memcpy(C + i * ldc + v * (8 / NV), &acc[i][v], sizeof(V));
}

enum { GEMM_MB = 64 };

// Rows [m0, m1) of gemm_acc's C, J in blocks that keep B's in cache.
template <typename V>
__attribute__((always_inline)) inline void gemm_rows(int m0, int m1, int N, int J, const double *A, const double *B,
                                                     double *C) {
    enum { JB = 256, MT = 4, NT = 8 };
    for (int j0 = 0; j0 < J; j0 += JB) {
        const int j1 = std::min(J, j0 + JB);
        int n = 0;
        for (; n + NT <= N; n += NT) {
            int m = m0;
            for (; m + MT <= m1; m += MT)
                tile8<V, MT>(A + (size_t)m * J, J, B + n, N, C + (size_t)m * N + n, N, j0, j1);
            for (; m < m1; m++) tile8<V, 1>(A + (size_t)m * J, J, B + n, N, C + (size_t)m * N + n, N, j0, j1);
        }
        for (; n < N; n++) {
            int m = m0;
            for (; m + MT <= m1; m += MT)
                tile<MT, 1>(A + (size_t)m * J, J, B + n, N, C + (size_t)m * N + n, N, j0, j1);
            for (; m < m1; m++) tile<1, 1>(A + (size_t)m * J, J, B + n, N, C + (size_t)m * N + n, N, j0, j1);
        }
    }
}
void gemm_rows_base(int m0, int m1, int N, int J, const double *A, const double *B, double *C) {
    gemm_rows<v2d>(m0, m1, N, J, A, B, C);
}
// AVX2's wider registers where the cpu has them (the sums are double either way).
#if defined(__x86_64__) && defined(__GNUC__)
#define TR_CUEMU_AVX2 1
__attribute__((target("avx2"))) void gemm_rows_avx2(int m0, int m1, int N, int J, const double *A, const double *B,
                                                    double *C) {
    gemm_rows<v4d>(m0, m1, N, J, A, B, C);
}
#endif

// C[M][N] += A[M][J] B[J][N], row-major and dense, in double: blocks of A's rows across
// the threads, each element of C summed by one thread in one order (the same result for
// any number of threads).
void gemm_acc(int M, int N, int J, const double *A, const double *B, double *C) {
    void (*rows)(int, int, int, int, const double *, const double *, double *) = gemm_rows_base;
#ifdef TR_CUEMU_AVX2
    if (__builtin_cpu_supports("avx2")) rows = gemm_rows_avx2;
#endif
#pragma omp parallel for schedule(dynamic)
    for (int m0 = 0; m0 < M; m0 += GEMM_MB) rows(m0, std::min(M, m0 + GEMM_MB), N, J, A, B, C);
}

// dst's rows (cols wide): src's row from[i], or zeros where from[i] < 0 (a filter tap
// that falls on the padding, or between a stride's steps).
void gather_rows(double *dst, size_t rows, int cols, const double *src, const std::vector<long> &from) {
#pragma omp parallel for schedule(static)
    for (long i = 0; i < (long)rows; i++) {
        double *d = dst + (size_t)i * cols;
        if (from[i] < 0) std::fill(d, d + cols, 0.0);
        else memcpy(d, src + (size_t)from[i] * cols, (size_t)cols * sizeof(double));
    }
}

// out's elements from acc (ordered (n, h, w, c) of out's dims): alpha * acc + beta * out.
void store_pixels(void *out, const dims4 &d, const std::vector<double> &acc, double alpha, double beta) {
    const cudaDataType t = cuda_type(d.type);
#pragma omp parallel for schedule(static)
    for (int nh = 0; nh < d.n * d.h; nh++) {
        const int n = nh / d.h, h = nh % d.h;
        size_t i = (size_t)nh * d.w * d.c;
        for (int w = 0; w < d.w; w++)
            for (int c = 0; c < d.c; c++) put(out, t, at(d, n, c, h, w), acc[i++], alpha, beta);
    }
}

// The input pixel (n, ih, iw) that output pixel (n, p, q) reads through tap (r, s), or -1.
inline long tap_source(const conv_call &k, int n, int p, int q, int r, int s) {
    const conv_params &cp = k.cp;
    const int ih = p * cp.u - cp.pad_h + r * cp.dil_h, iw = q * cp.v - cp.pad_w + s * cp.dil_w;
    if (ih < 0 || ih >= k.x.h || iw < 0 || iw >= k.x.w) return -1;
    return ((long)n * k.x.h + ih) * k.x.w + iw;
}

// y = conv(x, w): y[n, k, p, q] = sum over c, r, s of x[n, c, p*u - pad_h + r*dil_h,
// q*v - pad_w + s*dil_w] * w[k, c, r, s]; per tap, (pixels of y) x C times C x K.
void run_forward(const conv_call &k, const void *x, const void *w, void *y) {
    fill_workspace(k);
    const bool tf = tf32_inputs(k.cp, k.x.type);
    const std::vector<double> X = load_pixels(x, k.x, tf), W = load_taps(w, k.w, k.cp, true, tf);
    const int C = k.x.c, K = k.w.n, R = k.w.h, S = k.w.w;
    const size_t out_px = (size_t)k.y.n * k.y.h * k.y.w;
    std::vector<double> acc(out_px * K, 0.0), cols(out_px * C);
    std::vector<long> from(out_px);
    for (int r = 0; r < R; r++)
        for (int s = 0; s < S; s++) {
            size_t i = 0;
            for (int n = 0; n < k.y.n; n++)
                for (int p = 0; p < k.y.h; p++)
                    for (int q = 0; q < k.y.w; q++) from[i++] = tap_source(k, n, p, q, r, s);
            gather_rows(cols.data(), out_px, C, X.data(), from);
            gemm_acc((int)out_px, K, C, cols.data(), &W[((size_t)r * S + s) * C * K], acc.data());
        }
    store_pixels(y, k.y, acc, k.alpha, k.beta);
}

// dx = conv's adjoint in x applied to dy: dx[n, c, h, w] = sum over k, r, s with
// h = p*u - pad_h + r*dil_h, w = q*v - pad_w + s*dil_w of dy[n, k, p, q] * w[k, c, r, s];
// per tap, (pixels of dx) x K (the dy pixel each takes through the tap) times K x C.
void run_backward_data(const conv_call &k, const void *w, const void *dy, void *dx) {
    fill_workspace(k);
    const bool tf = tf32_inputs(k.cp, k.x.type);
    const std::vector<double> DY = load_pixels(dy, k.y, tf), W = load_taps(w, k.w, k.cp, false, tf);
    const int C = k.x.c, K = k.w.n, R = k.w.h, S = k.w.w, P = k.y.h, Q = k.y.w;
    const conv_params &cp = k.cp;
    const size_t in_px = (size_t)k.x.n * k.x.h * k.x.w;
    std::vector<double> acc(in_px * C, 0.0), rows(in_px * K);
    std::vector<long> from(in_px);
    for (int r = 0; r < R; r++)
        for (int s = 0; s < S; s++) {
            size_t i = 0;
            for (int n = 0; n < k.x.n; n++)
                for (int ih = 0; ih < k.x.h; ih++)
                    for (int iw = 0; iw < k.x.w; iw++) {
                        const int tp = ih + cp.pad_h - r * cp.dil_h, tq = iw + cp.pad_w - s * cp.dil_w;
                        from[i++] = tp < 0 || tq < 0 || tp % cp.u || tq % cp.v || tp / cp.u >= P || tq / cp.v >= Q
                                        ? -1
                                        : ((long)n * P + tp / cp.u) * Q + tq / cp.v;
                    }
            gather_rows(rows.data(), in_px, K, DY.data(), from);
            gemm_acc((int)in_px, C, K, rows.data(), &W[((size_t)r * S + s) * K * C], acc.data());
        }
    store_pixels(dx, k.x, acc, k.alpha, k.beta);
}

// dw = conv's adjoint in w: dw[k, c, r, s] = sum over n, p, q of dy[n, k, p, q] *
// x[n, c, p*u - pad_h + r*dil_h, q*v - pad_w + s*dil_w]; per tap, K x (pixels of dy)
// times (the x pixel each reads through the tap) x C.
void run_backward_filter(const conv_call &k, const void *x, const void *dy, void *dw) {
    fill_workspace(k);
    const bool tf = tf32_inputs(k.cp, k.x.type);
    const std::vector<double> X = load_pixels(x, k.x, tf);
    const int C = k.x.c, K = k.w.n, R = k.w.h, S = k.w.w;
    const size_t out_px = (size_t)k.y.n * k.y.h * k.y.w;
    std::vector<double> DYT((size_t)K * out_px); // dy as K x pixels
    {
        const cudaDataType t = cuda_type(k.y.type);
        size_t i = 0;
        for (int kk = 0; kk < K; kk++)
            for (int n = 0; n < k.y.n; n++)
                for (int p = 0; p < k.y.h; p++)
                    for (int q = 0; q < k.y.w; q++) DYT[i++] = input(dy, t, at(k.y, n, kk, p, q), tf);
    }
    std::vector<double> acc((size_t)R * S * K * C, 0.0), cols(out_px * C);
    std::vector<long> from(out_px);
    for (int r = 0; r < R; r++)
        for (int s = 0; s < S; s++) {
            size_t i = 0;
            for (int n = 0; n < k.y.n; n++)
                for (int p = 0; p < k.y.h; p++)
                    for (int q = 0; q < k.y.w; q++) from[i++] = tap_source(k, n, p, q, r, s);
            gather_rows(cols.data(), out_px, C, X.data(), from);
            gemm_acc(K, C, (int)out_px, DYT.data(), cols.data(), &acc[((size_t)r * S + s) * K * C]);
        }
    const cudaDataType t = cuda_type(k.w.type);
    const bool flip = k.cp.mode == CUDNN_CONVOLUTION;
    for (int r = 0; r < R; r++)
        for (int s = 0; s < S; s++)
            for (int kk = 0; kk < K; kk++)
                for (int c = 0; c < C; c++)
                    put(dw, t, at(k.w, kk, c, flip ? R - 1 - r : r, flip ? S - 1 - s : s),
                        acc[(((size_t)r * S + s) * K + kk) * C + c], k.alpha, k.beta);
}

conv_call make_call(cudnnTensorDescriptor_t x, cudnnFilterDescriptor_t w, cudnnConvolutionDescriptor_t cd,
                    cudnnTensorDescriptor_t y, void *ws, size_t ws_bytes) {
    conv_call k;
    if (x) k.x = x->d;
    if (w) k.w = w->d;
    if (cd) k.cp = cd->p;
    if (y) k.y = y->d;
    k.alpha = k.beta = 0.0;
    k.ws = ws;
    k.ws_bytes = ws_bytes;
    return k;
}

} // namespace

extern "C" {

size_t cudnnGetVersion(void) { return CUDNN_VERSION; }

const char *cudnnGetErrorString(cudnnStatus_t s) {
    switch (s) {
#define TR_CUDNN_STATUS(x) \
    case x: return #x;
    TR_CUDNN_STATUS(CUDNN_STATUS_SUCCESS)
    TR_CUDNN_STATUS(CUDNN_STATUS_NOT_INITIALIZED)
    TR_CUDNN_STATUS(CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH)
    TR_CUDNN_STATUS(CUDNN_STATUS_SERIALIZATION_VERSION_MISMATCH)
    TR_CUDNN_STATUS(CUDNN_STATUS_DEPRECATED)
    TR_CUDNN_STATUS(CUDNN_STATUS_LICENSE_ERROR)
    TR_CUDNN_STATUS(CUDNN_STATUS_RUNTIME_IN_PROGRESS)
    TR_CUDNN_STATUS(CUDNN_STATUS_RUNTIME_FP_OVERFLOW)
    TR_CUDNN_STATUS(CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED)
    TR_CUDNN_STATUS(CUDNN_STATUS_BAD_PARAM)
    TR_CUDNN_STATUS(CUDNN_STATUS_BAD_PARAM_NULL_POINTER)
    TR_CUDNN_STATUS(CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER)
    TR_CUDNN_STATUS(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED)
    TR_CUDNN_STATUS(CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND)
    TR_CUDNN_STATUS(CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT)
    TR_CUDNN_STATUS(CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH)
    TR_CUDNN_STATUS(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH)
    TR_CUDNN_STATUS(CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES)
    TR_CUDNN_STATUS(CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE)
    TR_CUDNN_STATUS(CUDNN_STATUS_BAD_PARAM_CUDA_GRAPH_MISMATCH)
    TR_CUDNN_STATUS(CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE)
    TR_CUDNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED)
    TR_CUDNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN)
    TR_CUDNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_SHAPE)
    TR_CUDNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE)
    TR_CUDNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_LAYOUT)
    TR_CUDNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER)
    TR_CUDNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART)
    TR_CUDNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH)
    TR_CUDNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING)
    TR_CUDNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE)
    TR_CUDNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT)
    TR_CUDNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_PADDING)
    TR_CUDNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_BAD_LAUNCH_PARAM)
    TR_CUDNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_CUDA_GRAPH_NATIVE_API)
    TR_CUDNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_INVALID_DYNAMIC_SHAPE)
    TR_CUDNN_STATUS(CUDNN_STATUS_INTERNAL_ERROR)
    TR_CUDNN_STATUS(CUDNN_STATUS_INTERNAL_ERROR_COMPILATION_FAILED)
    TR_CUDNN_STATUS(CUDNN_STATUS_INTERNAL_ERROR_UNEXPECTED_VALUE)
    TR_CUDNN_STATUS(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED)
    TR_CUDNN_STATUS(CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED)
    TR_CUDNN_STATUS(CUDNN_STATUS_INTERNAL_ERROR_BAD_LAUNCH_PARAM)
    TR_CUDNN_STATUS(CUDNN_STATUS_INTERNAL_ERROR_TEXTURE_CREATION_FAILED)
    TR_CUDNN_STATUS(CUDNN_STATUS_EXECUTION_FAILED)
    TR_CUDNN_STATUS(CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER)
    TR_CUDNN_STATUS(CUDNN_STATUS_EXECUTION_FAILED_CUBLAS)
    TR_CUDNN_STATUS(CUDNN_STATUS_EXECUTION_FAILED_CUDART)
    TR_CUDNN_STATUS(CUDNN_STATUS_EXECUTION_FAILED_CURAND)
#undef TR_CUDNN_STATUS
    case 2001: return "CUDNN_STATUS_INVALID_VALUE"; // deprecated, not an alias of another
    default: return "CUDNN_UNKNOWN_STATUS_FOUND";
    }
}

// cuDNN allocates device memory here (and cudnnDestroy synchronizes the device): refused
// while a stream captures, the capture spoiled, as cudaMalloc.
cudnnStatus_t cudnnCreate(cudnnHandle_t *handle) {
    if (!handle) return CUDNN_STATUS_BAD_PARAM;
    if (refuse_in_capture("cudnnCreate")) return CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED;
    *handle = new cudnnContext;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
    if (refuse_in_capture("cudnnDestroy")) return CUDNN_STATUS_EXECUTION_FAILED_CUDART;
    delete handle;
    return CUDNN_STATUS_SUCCESS;
}
// One in-order queue in cuemu: the stream is only kept.
cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
    if (!handle) return CUDNN_STATUS_BAD_PARAM;
    handle->stream = stream;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *d) {
    if (!d) return CUDNN_STATUS_BAD_PARAM;
    *d = new cudnnTensorStruct;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t format, cudnnDataType_t type,
                                         int n, int c, int h, int w) {
    if (!d) return CUDNN_STATUS_BAD_PARAM;
    return set_dims(&d->d, format, type, n, c, h, w);
}
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d) {
    delete d;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *d) {
    if (!d) return CUDNN_STATUS_BAD_PARAM;
    *d = new cudnnFilterStruct;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t type, cudnnTensorFormat_t format,
                                         int k, int c, int h, int w) {
    if (!d) return CUDNN_STATUS_BAD_PARAM;
    return set_dims(&d->d, format, type, k, c, h, w);
}
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d) {
    delete d;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *d) {
    if (!d) return CUDNN_STATUS_BAD_PARAM;
    *d = new cudnnConvolutionStruct;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int pad_h, int pad_w, int u, int v,
                                              int dilation_h, int dilation_w, cudnnConvolutionMode_t mode,
                                              cudnnDataType_t compute) {
    if (!d || pad_h < 0 || pad_w < 0 || u < 1 || v < 1 || dilation_h < 1 || dilation_w < 1 ||
        (mode != CUDNN_CONVOLUTION && mode != CUDNN_CROSS_CORRELATION))
        return CUDNN_STATUS_BAD_PARAM;
    if (compute != CUDNN_DATA_FLOAT) return CUDNN_STATUS_NOT_SUPPORTED; // f32 accumulation only
    conv_params &p = d->p;
    p.set = true;
    p.pad_h = pad_h;
    p.pad_w = pad_w;
    p.u = u;
    p.v = v;
    p.dil_h = dilation_h;
    p.dil_w = dilation_w;
    p.mode = mode;
    return CUDNN_STATUS_SUCCESS; // the math type stays as set
}
cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t math) {
    if (!d || (math != CUDNN_DEFAULT_MATH && math != CUDNN_TENSOR_OP_MATH &&
               math != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION && math != CUDNN_FMA_MATH))
        return CUDNN_STATUS_BAD_PARAM;
    d->p.math = math;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d) {
    delete d;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t handle, const cudnnTensorDescriptor_t x,
                                                     const cudnnFilterDescriptor_t w,
                                                     const cudnnConvolutionDescriptor_t cd,
                                                     const cudnnTensorDescriptor_t y, const int requested,
                                                     int *returned, cudnnConvolutionFwdAlgoPerf_t *perf) {
    if (!handle || !x || !w || !cd || !y) return CUDNN_STATUS_BAD_PARAM;
    return heuristic<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(
        "cudnnGetConvolutionForwardAlgorithm_v7", FWD_ALGOS, x->d, w->d, cd->p, y->d, "x", "y", requested, returned, perf);
}
cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t handle, const cudnnFilterDescriptor_t w,
                                                          const cudnnTensorDescriptor_t dy,
                                                          const cudnnConvolutionDescriptor_t cd,
                                                          const cudnnTensorDescriptor_t dx, const int requested,
                                                          int *returned, cudnnConvolutionBwdDataAlgoPerf_t *perf) {
    if (!handle || !w || !dy || !cd || !dx) return CUDNN_STATUS_BAD_PARAM;
    return heuristic<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(
        "cudnnGetConvolutionBackwardDataAlgorithm_v7", BWD_DATA_ALGOS, dx->d, w->d, cd->p, dy->d, "dx", "dy", requested,
        returned, perf);
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t handle, const cudnnTensorDescriptor_t x,
                                                            const cudnnTensorDescriptor_t dy,
                                                            const cudnnConvolutionDescriptor_t cd,
                                                            const cudnnFilterDescriptor_t dw, const int requested,
                                                            int *returned, cudnnConvolutionBwdFilterAlgoPerf_t *perf) {
    if (!handle || !x || !dy || !cd || !dw) return CUDNN_STATUS_BAD_PARAM;
    return heuristic<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(
        "cudnnGetConvolutionBackwardFilterAlgorithm_v7", BWD_FILTER_ALGOS, x->d, dw->d, cd->p, dy->d, "x", "dy",
        requested, returned, perf);
}

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t handle, const void *alpha, const cudnnTensorDescriptor_t xDesc,
                                      const void *x, const cudnnFilterDescriptor_t wDesc, const void *w,
                                      const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionFwdAlgo_t algo,
                                      void *workSpace, size_t workSpaceSizeInBytes, const void *beta,
                                      const cudnnTensorDescriptor_t yDesc, void *y) {
    if (!handle || !xDesc || !wDesc || !convDesc || !yDesc) return CUDNN_STATUS_BAD_PARAM;
    conv_call k = make_call(xDesc, wDesc, convDesc, yDesc, workSpace, workSpaceSizeInBytes);
    const cudnnStatus_t st = check_run("cudnnConvolutionForward", FWD_ALGOS, algo, k, "x", "y", alpha, beta,
                                       {x, bytes(k.x), "x"}, {w, bytes(k.w), "w"}, {y, bytes(k.y), "y"});
    if (st != CUDNN_STATUS_SUCCESS) return st;
    k.alpha = *(const float *)alpha;
    k.beta = *(const float *)beta;
    submit([=]() { run_forward(k, x, w, y); });
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t handle, const void *alpha, const cudnnFilterDescriptor_t wDesc,
                                           const void *w, const cudnnTensorDescriptor_t dyDesc, const void *dy,
                                           const cudnnConvolutionDescriptor_t convDesc,
                                           cudnnConvolutionBwdDataAlgo_t algo, void *workSpace,
                                           size_t workSpaceSizeInBytes, const void *beta,
                                           const cudnnTensorDescriptor_t dxDesc, void *dx) {
    if (!handle || !wDesc || !dyDesc || !convDesc || !dxDesc) return CUDNN_STATUS_BAD_PARAM;
    conv_call k = make_call(dxDesc, wDesc, convDesc, dyDesc, workSpace, workSpaceSizeInBytes);
    const cudnnStatus_t st = check_run("cudnnConvolutionBackwardData", BWD_DATA_ALGOS, algo, k, "dx", "dy", alpha,
                                       beta, {w, bytes(k.w), "w"}, {dy, bytes(k.y), "dy"}, {dx, bytes(k.x), "dx"});
    if (st != CUDNN_STATUS_SUCCESS) return st;
    k.alpha = *(const float *)alpha;
    k.beta = *(const float *)beta;
    submit([=]() { run_backward_data(k, w, dy, dx); });
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t handle, const void *alpha,
                                             const cudnnTensorDescriptor_t xDesc, const void *x,
                                             const cudnnTensorDescriptor_t dyDesc, const void *dy,
                                             const cudnnConvolutionDescriptor_t convDesc,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void *workSpace,
                                             size_t workSpaceSizeInBytes, const void *beta,
                                             const cudnnFilterDescriptor_t dwDesc, void *dw) {
    if (!handle || !xDesc || !dyDesc || !convDesc || !dwDesc) return CUDNN_STATUS_BAD_PARAM;
    conv_call k = make_call(xDesc, dwDesc, convDesc, dyDesc, workSpace, workSpaceSizeInBytes);
    const cudnnStatus_t st = check_run("cudnnConvolutionBackwardFilter", BWD_FILTER_ALGOS, algo, k, "x", "dy",
                                       alpha, beta, {x, bytes(k.x), "x"}, {dy, bytes(k.y), "dy"},
                                       {dw, bytes(k.w), "dw"});
    if (st != CUDNN_STATUS_SUCCESS) return st;
    k.alpha = *(const float *)alpha;
    k.beta = *(const float *)beta;
    submit([=]() { run_backward_filter(k, x, dy, dw); });
    return CUDNN_STATUS_SUCCESS;
}

} // extern "C"

#endif // TR_HAVE_CUDNN
