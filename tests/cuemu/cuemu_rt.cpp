// cuemu's stand-ins for the CUDA libraries the kernels library links: the runtime
// (memory is host memory, every stream one in-order queue run at once, capture records
// the work and a graph replays it), cuBLASLt's matmul (its layouts, batches, transposes,
// TF32 rounding and epilogues around oneDNN's sgemm: f32 accumulation, as cuBLASLt's),
// cuRAND's generators (a counter hash: right distributions, not Philox's numbers), and
// NVRTC with the driver's modules (the host's C++ compiler and dlopen).
//
// Strict where CUDA refuses: a synchronous call or an allocation on a capturing stream
// invalidates the capture; dynamic shared memory past 48 KiB wants the kernel's
// attribute; cuRAND's normal wants an even count.
#include "cuemu_rt.h"

#include <cublasLt.h>
#include <curand.h>
#include <nvrtc.h>
#include <cuda.h>
#include <dlfcn.h>
#include <elf.h>
#include <sys/mman.h>
#include <unistd.h>
#include <regex>
#include <string>
#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <functional>
#include <map>
#include <memory>
#include <vector>

namespace tr_cuemu {
namespace {

typedef std::vector<std::function<void()>> work_list;

struct rt_state {
    std::map<const void *, int> max_smem;
    cudaError_t last = cudaSuccess;
    cudaStream_t capturing = nullptr;
    bool capture_on = false, capture_bad = false;
    work_list *capture = nullptr;
} R;
} // namespace

// Queues f: recorded while a capture is on, else run now.
void submit(std::function<void()> f) {
    if (R.capture_on) R.capture->push_back(std::move(f));
    else f();
}

// A synchronous call while a capture is on: CUDA refuses it and spoils the capture.
bool refuse_in_capture(const char *what) {
    if (!R.capture_on) return false;
    fprintf(stderr, "cuemu: %s while a stream captures: cudaErrorStreamCaptureUnsupported\n", what);
    R.capture_bad = true;
    return true;
}

double ld_elem(const void *p, cudaDataType t, size_t i) {
    if (t == CUDA_R_32F) return ((const float *)p)[i];
    if (t == CUDA_R_16BF) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    return __half2float(((const __half *)p)[i]);
}
void st_elem(void *p, cudaDataType t, size_t i, double v) {
    if (t == CUDA_R_32F) ((float *)p)[i] = (float)v;
    else if (t == CUDA_R_16BF) ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn((float)v);
    else ((__half *)p)[i] = __float2half_rn((float)v);
}

namespace {

// An opaque handle (stream, event, preference, communicator) where nothing is behind it.
template <typename H> H new_handle() { return (H) new char[1]; }
void free_handle(void *h) { delete[] (char *)h; }

struct arg_box {
    void *p;
    void (*drop)(void *);
    ~arg_box() { drop(p); }
};

// A launch now; its error is the next cudaGetLastError's.
void launch_noting(const cfg_t &c, const void *kernel, body_fn body, void *arg) {
    int e = launch_now(c, kernel, body, arg);
    if (e != cudaSuccess) R.last = (cudaError_t)e;
}

} // namespace

int rt_max_dynamic_smem(const void *kernel) {
    auto it = R.max_smem.find(kernel);
    return it == R.max_smem.end() ? 48 * 1024 : it->second;
}

void run(const cfg_t &c, const void *kernel, body_fn body, void *arg, void *(*arg_copy)(const void *),
         void (*arg_free)(void *)) {
    if (!R.capture_on) {
        launch_noting(c, kernel, body, arg);
        return;
    }
    std::shared_ptr<arg_box> box(new arg_box{arg_copy(arg), arg_free});
    R.capture->push_back([c, kernel, body, box]() { launch_noting(c, kernel, body, box->p); });
}

} // namespace tr_cuemu

using namespace tr_cuemu;

/* ---------------- runtime ---------------- */

static int dummy_handle;

cudaError_t cudaGetDeviceCount(int *n) {
    *n = 1;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : cudaErrorInvalidDevice; }
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d) {
    if (d != 0) return cudaErrorInvalidDevice;
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "cuemu (the CUDA kernels on the cpu, as an H100 SXM)");
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = 132;
    p->totalGlobalMem = (size_t)80 << 30;
    p->sharedMemPerBlock = 48 * 1024;
    p->sharedMemPerBlockOptin = RT_SMEM_OPTIN;
    p->sharedMemPerMultiprocessor = 233472;
    p->maxThreadsPerBlock = 1024;
    p->warpSize = 32;
    p->regsPerBlock = 65536;
    p->l2CacheSize = 50 << 20;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr a, int d) {
    if (d != 0) return cudaErrorInvalidDevice;
    switch (a) {
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = RT_SMEM_OPTIN; break;
    case cudaDevAttrMultiProcessorCount: *v = 132; break;
    case cudaDevAttrComputeCapabilityMajor: *v = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *v = 0; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *v = 48 * 1024; break;
    default: *v = 0; break;
    }
    return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int *v) {
    *v = CUDART_VERSION;
    return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int *v) {
    *v = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t n) {
    if (refuse_in_capture("cudaMalloc")) return cudaErrorStreamCaptureUnsupported;
    *p = aligned_alloc(256, n ? (n + 255) / 256 * 256 : 256); // a multiple of the alignment, as it wants
    if (!*p) return cudaErrorMemoryAllocation;
    memset(*p, 0xff, n); // what a kernel that reads before it writes finds: NaN, never zeros
    return cudaSuccess;
}
cudaError_t cudaFree(void *p) {
    if (refuse_in_capture("cudaFree")) return cudaErrorStreamCaptureUnsupported;
    free(p);
    return cudaSuccess;
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind) {
    if (refuse_in_capture("cudaMemcpy")) return cudaErrorStreamCaptureUnsupported;
    if (n) memmove(dst, src, n);
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind, cudaStream_t) {
    if (n) submit([=]() { memmove(dst, src, n); });
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t) {
    if (n) submit([=]() { memset(p, v, n); });
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int) {
    *s = new_handle<cudaStream_t>();
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    free_handle(s);
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) {
    if (refuse_in_capture("cudaStreamSynchronize")) return cudaErrorStreamCaptureUnsupported;
    return cudaSuccess;
}
// An event holds the host's clock (ms) when the queue reaches it: work runs at once, so
// that is when it is recorded (a captured record, when the graph replays); NaN until then.
// What tests/gpu/bench_cuda.c times its calls with.
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int) {
    char *h = new char[sizeof(double)];
    const double never = NAN;
    memcpy(h, &never, sizeof never);
    *e = (cudaEvent_t)h;
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    free_handle(e);
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
    submit([=]() {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        const double ms = (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
        memcpy((char *)e, &ms, sizeof ms);
    });
    return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    double t0, t1;
    memcpy(&t0, (const char *)a, sizeof t0);
    memcpy(&t1, (const char *)b, sizeof t1);
    if (std::isnan(t0) || std::isnan(t1)) return cudaErrorNotReady; // one never recorded
    *ms = (float)(t1 - t0);
    return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned int) { return cudaSuccess; }

cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus *st) {
    *st = R.capture_on && R.capturing == s ? (R.capture_bad ? cudaStreamCaptureStatusInvalidated
                                                            : cudaStreamCaptureStatusActive)
                                           : cudaStreamCaptureStatusNone;
    return cudaSuccess;
}
cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode) {
    if (R.capture_on) return cudaErrorIllegalState;
    R.capture_on = true;
    R.capture_bad = false;
    R.capturing = s;
    R.capture = new work_list;
    return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g) {
    if (!R.capture_on || R.capturing != s) return cudaErrorIllegalState;
    R.capture_on = false;
    if (R.capture_bad) {
        delete R.capture;
        R.capture = nullptr;
        *g = nullptr;
        return cudaErrorStreamCaptureInvalidated;
    }
    *g = (cudaGraph_t)R.capture;
    R.capture = nullptr;
    return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t g) {
    delete (work_list *)g;
    return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long) {
    *e = (cudaGraphExec_t) new work_list(*(work_list *)g);
    return cudaSuccess;
}
cudaError_t cudaGraphExecUpdate(cudaGraphExec_t e, cudaGraph_t g, cudaGraphExecUpdateResultInfo *info) {
    *(work_list *)e = *(work_list *)g;
    if (info) memset(info, 0, sizeof *info);
    return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) {
    delete (work_list *)e;
    return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t) {
    if (R.capture_on) return cudaErrorStreamCaptureUnsupported;
    for (auto &f : *(work_list *)e) f();
    return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void *fn, enum cudaFuncAttribute a, int v) {
    if (a == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (v < 0 || v > RT_SMEM_OPTIN) return cudaErrorInvalidValue;
        R.max_smem[fn] = v;
    }
    return cudaSuccess;
}
cudaError_t cudaGetLastError(void) {
    cudaError_t e = R.last;
    R.last = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError(void) { return R.last; }
const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    case cudaErrorIllegalState: return "cudaErrorIllegalState";
    default: return "cudaError (cuemu)";
    }
}
const char *cudaGetErrorString(cudaError_t e) { return cudaGetErrorName(e); }

/* ---------------- cuBLASLt ---------------- */

namespace {
struct lt_desc {
    cublasComputeType_t compute;
    cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    const void *bias = nullptr;
};
struct lt_layout {
    cudaDataType type;
    uint64_t rows, cols;
    int64_t ld, stride = 0;
    int32_t batch = 1;
};

double tf32(double v) { return nvcuda::wmma::__float_to_tf32((float)v); }

void matmul(lt_desc d, float alpha, const void *A, lt_layout la, const void *B, lt_layout lb, float beta,
            const void *C, lt_layout lc, void *D, lt_layout ld) {
    const uint64_t m = ld.rows, n = ld.cols, k = d.ta == CUBLAS_OP_N ? la.cols : la.rows;
    const bool fast = d.compute == CUBLAS_COMPUTE_32F_FAST_TF32;
    const bool has_bias = d.epi == CUBLASLT_EPILOGUE_BIAS || d.epi == CUBLASLT_EPILOGUE_RELU_BIAS ||
                          d.epi == CUBLASLT_EPILOGUE_GELU_BIAS;
    // op(A) as m rows of k and op(B) as n rows of k, f32 (exact for bf16 and f16), per batch
    std::vector<float> a(m * k), b(n * k), out(m * n);
    for (int32_t bi = 0; bi < ld.batch; bi++) {
        const size_t oa = (size_t)(la.batch > 1 ? bi * la.stride : 0), ob = (size_t)(lb.batch > 1 ? bi * lb.stride : 0);
        const size_t oc = (size_t)(lc.batch > 1 ? bi * lc.stride : 0), od = (size_t)(ld.batch > 1 ? bi * ld.stride : 0);
        for (uint64_t i = 0; i < m; i++)
            for (uint64_t p = 0; p < k; p++) {
                double x = ld_elem(A, la.type, oa + (d.ta == CUBLAS_OP_N ? i + p * la.ld : p + i * la.ld));
                a[i * k + p] = (float)(fast ? tf32(x) : x);
            }
        for (uint64_t j = 0; j < n; j++)
            for (uint64_t p = 0; p < k; p++) {
                double y = ld_elem(B, lb.type, ob + (d.tb == CUBLAS_OP_N ? p + j * lb.ld : j + p * lb.ld));
                b[j * k + p] = (float)(fast ? tf32(y) : y);
            }
        if (dnnl_sgemm('N', 'T', (dnnl_dim_t)m, (dnnl_dim_t)n, (dnnl_dim_t)k, 1.0f, a.data(), (dnnl_dim_t)k, b.data(),
                       (dnnl_dim_t)k, 0.0f, out.data(), (dnnl_dim_t)n) != dnnl_success)
            fail("cuBLASLt stand-in: oneDNN's sgemm failed (m %llu n %llu k %llu)", (unsigned long long)m,
                 (unsigned long long)n, (unsigned long long)k);
        for (uint64_t j = 0; j < n; j++)
            for (uint64_t i = 0; i < m; i++) {
                double v = alpha * (double)out[i * n + j];
                if (beta != 0.0f) v += beta * ld_elem(C, lc.type, oc + i + j * lc.ld);
                if (has_bias) v += ld_elem(d.bias, ld.type, i);
                if (d.epi == CUBLASLT_EPILOGUE_RELU || d.epi == CUBLASLT_EPILOGUE_RELU_BIAS) v = v > 0 ? v : 0;
                if (d.epi == CUBLASLT_EPILOGUE_GELU || d.epi == CUBLASLT_EPILOGUE_GELU_BIAS)
                    v = 0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
                st_elem(D, ld.type, od + i + j * ld.ld, v);
            }
    }
}
} // namespace

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
    *h = (cublasLtHandle_t)&dummy_handle;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t) { return CUBLAS_STATUS_SUCCESS; }
const char *cublasLtGetStatusString(cublasStatus_t s) {
    return s == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : s == CUBLAS_STATUS_NOT_SUPPORTED ? "CUBLAS_STATUS_NOT_SUPPORTED" : "CUBLAS_STATUS (cuemu)";
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t c, cudaDataType_t scale) {
    if (scale != CUDA_R_32F || (c != CUBLAS_COMPUTE_32F && c != CUBLAS_COMPUTE_32F_FAST_TF32))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    lt_desc *x = new lt_desc;
    x->compute = c;
    *d = (cublasLtMatmulDesc_t)x;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
    delete (lt_desc *)d;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *buf,
                                              size_t n) {
    lt_desc *x = (lt_desc *)d;
    switch (a) {
    case CUBLASLT_MATMUL_DESC_TRANSA: if (n != sizeof x->ta) return CUBLAS_STATUS_INVALID_VALUE; memcpy(&x->ta, buf, n); break;
    case CUBLASLT_MATMUL_DESC_TRANSB: if (n != sizeof x->tb) return CUBLAS_STATUS_INVALID_VALUE; memcpy(&x->tb, buf, n); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: if (n != sizeof x->epi) return CUBLAS_STATUS_INVALID_VALUE; memcpy(&x->epi, buf, n); break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: if (n != sizeof x->bias) return CUBLAS_STATUS_INVALID_VALUE; memcpy(&x->bias, buf, n); break;
    default: return CUBLAS_STATUS_NOT_SUPPORTED; // an attribute cuemu does not model
    }
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType t, uint64_t rows, uint64_t cols,
                                          int64_t ld) {
    if (ld < (int64_t)rows && rows > 0) return CUBLAS_STATUS_INVALID_VALUE;
    lt_layout *x = new lt_layout;
    x->type = t;
    x->rows = rows;
    x->cols = cols;
    x->ld = ld;
    *l = (cublasLtMatrixLayout_t)x;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
    delete (lt_layout *)l;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a,
                                                const void *buf, size_t n) {
    lt_layout *x = (lt_layout *)l;
    if (a == CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT && n == sizeof x->batch) memcpy(&x->batch, buf, n);
    else if (a == CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET && n == sizeof x->stride) memcpy(&x->stride, buf, n);
    else return CUBLAS_STATUS_NOT_SUPPORTED;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
    *p = new_handle<cublasLtMatmulPreference_t>();
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
    free_handle(p);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t,
                                                    const void *, size_t) {
    return CUBLAS_STATUS_SUCCESS;
}

static bool same_shape(const lt_layout *a, const lt_layout *b) {
    return a->rows == b->rows && a->cols == b->cols && a->batch == b->batch;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t A,
                                              cublasLtMatrixLayout_t B, cublasLtMatrixLayout_t C,
                                              cublasLtMatrixLayout_t D, cublasLtMatmulPreference_t, int req,
                                              cublasLtMatmulHeuristicResult_t *res, int *n) {
    const lt_desc *x = (const lt_desc *)d;
    const lt_layout *la = (const lt_layout *)A, *lb = (const lt_layout *)B, *lc = (const lt_layout *)C,
                    *ldd = (const lt_layout *)D;
    *n = 0;
    if (req < 1) return CUBLAS_STATUS_INVALID_VALUE;
    const uint64_t m = x->ta == CUBLAS_OP_N ? la->rows : la->cols, k = x->ta == CUBLAS_OP_N ? la->cols : la->rows;
    const uint64_t kb = x->tb == CUBLAS_OP_N ? lb->rows : lb->cols, nn = x->tb == CUBLAS_OP_N ? lb->cols : lb->rows;
    if (m != ldd->rows || nn != ldd->cols || k != kb || !same_shape(lc, ldd)) {
        fprintf(stderr, "cuemu: cuBLASLt heuristic: op(A) %llux%llu, op(B) %llux%llu, D %llux%llu do not fit\n",
                (unsigned long long)m, (unsigned long long)k, (unsigned long long)kb, (unsigned long long)nn,
                (unsigned long long)ldd->rows, (unsigned long long)ldd->cols);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (la->type != lb->type || lc->type != ldd->type) return CUBLAS_STATUS_NOT_SUPPORTED;
    memset(res, 0, sizeof *res);
    res->state = CUBLAS_STATUS_SUCCESS;
    res->wavesCount = 1.0f;
    *n = 1;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t d, const void *alpha, const void *A,
                              cublasLtMatrixLayout_t la, const void *B, cublasLtMatrixLayout_t lb, const void *beta,
                              const void *C, cublasLtMatrixLayout_t lc, void *D, cublasLtMatrixLayout_t ldd,
                              const cublasLtMatmulAlgo_t *, void *, size_t, cudaStream_t) {
    const lt_desc x = *(const lt_desc *)d; // what the descriptor holds now, as cuBLASLt reads it at the call
    const lt_layout a = *(const lt_layout *)la, b = *(const lt_layout *)lb, c = *(const lt_layout *)lc,
                    dd = *(const lt_layout *)ldd;
    const bool has_bias = x.epi == CUBLASLT_EPILOGUE_BIAS || x.epi == CUBLASLT_EPILOGUE_RELU_BIAS ||
                          x.epi == CUBLASLT_EPILOGUE_GELU_BIAS;
    if (has_bias && !x.bias) return CUBLAS_STATUS_INVALID_VALUE;
    const float al = *(const float *)alpha, be = *(const float *)beta;
    submit([=]() { matmul(x, al, A, a, B, b, be, C, c, D, dd); });
    return CUBLAS_STATUS_SUCCESS;
}

/* ---------------- cuRAND ---------------- */

namespace {
struct gen {
    unsigned long long seed = 0, offset = 0;
};
uint64_t mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
float unif(const gen &g, uint64_t i) { // (0, 1], as curand's
    return (float)(((mix(g.seed * 0x100000001b3ull ^ mix(g.offset + i)) >> 40) + 1) * (1.0 / 16777216.0));
}
} // namespace

curandStatus_t curandCreateGenerator(curandGenerator_t *g, curandRngType_t) {
    *g = (curandGenerator_t) new gen;
    return CURAND_STATUS_SUCCESS;
}
curandStatus_t curandDestroyGenerator(curandGenerator_t g) {
    delete (gen *)g;
    return CURAND_STATUS_SUCCESS;
}
curandStatus_t curandSetStream(curandGenerator_t, cudaStream_t) { return CURAND_STATUS_SUCCESS; }
curandStatus_t curandSetPseudoRandomGeneratorSeed(curandGenerator_t g, unsigned long long s) {
    ((gen *)g)->seed = s;
    return CURAND_STATUS_SUCCESS;
}
curandStatus_t curandSetGeneratorOffset(curandGenerator_t g, unsigned long long o) {
    ((gen *)g)->offset = o;
    return CURAND_STATUS_SUCCESS;
}
curandStatus_t curandGenerateUniform(curandGenerator_t g, float *out, size_t n) {
    gen G = *(gen *)g;
    ((gen *)g)->offset += n;
    submit([=]() {
        for (size_t i = 0; i < n; i++) out[i] = unif(G, i);
    });
    return CURAND_STATUS_SUCCESS;
}
curandStatus_t curandGenerateNormal(curandGenerator_t g, float *out, size_t n, float mean, float sd) {
    if (n % 2) return CURAND_STATUS_LENGTH_NOT_MULTIPLE;
    gen G = *(gen *)g;
    ((gen *)g)->offset += n;
    submit([=]() {
        for (size_t i = 0; i < n; i += 2) { // Box-Muller
            double u1 = unif(G, i), u2 = unif(G, i + 1), r = sqrt(-2.0 * log(u1));
            out[i] = (float)(mean + sd * r * cos(6.283185307179586 * u2));
            out[i + 1] = (float)(mean + sd * r * sin(6.283185307179586 * u2));
        }
    });
    return CURAND_STATUS_SUCCESS;
}

/* ---------------- NVRTC and the driver's modules ----------------
 * A program is compiled by the host's C++ compiler (TR_CUEMU_CXX) as the library's .cu
 * files are, into a shared object with one entry per __global__ function that launches it
 * from the driver's parameter array; the "cubin" is that object (an ELF too), which
 * cuModuleLoadData opens from memory. nvrtcVersion answers 0.TR_CUEMU_ABI (a hash of
 * what such an object is built against, tests/cuemu/CMakeLists.txt), so the jax backend,
 * which caches cubins under the NVRTC version, takes neither a real NVRTC's cubin for one
 * of these nor one built against another cuemu. */

namespace {
struct program {
    std::string src, name, log, image;
};

std::string run_capture(const std::string &cmd, int *status) {
    std::string out;
    FILE *p = popen((cmd + " 2>&1").c_str(), "r");
    if (!p) {
        *status = -1;
        return "popen failed";
    }
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    *status = pclose(p);
    return out;
}
} // namespace

const char *nvrtcGetErrorString(nvrtcResult r) {
    return r == NVRTC_SUCCESS ? "NVRTC_SUCCESS" : r == NVRTC_ERROR_COMPILATION ? "NVRTC_ERROR_COMPILATION" : "NVRTC error (cuemu)";
}
nvrtcResult nvrtcVersion(int *major, int *minor) {
    *major = 0;
    *minor = TR_CUEMU_ABI;
    return NVRTC_SUCCESS;
}
nvrtcResult nvrtcCreateProgram(nvrtcProgram *p, const char *src, const char *name, int, const char *const *,
                               const char *const *) {
    program *g = new program;
    g->src = src;
    g->name = name ? name : "kernel.cu";
    *p = (nvrtcProgram)g;
    return NVRTC_SUCCESS;
}
nvrtcResult nvrtcDestroyProgram(nvrtcProgram *p) {
    delete (program *)*p;
    *p = nullptr;
    return NVRTC_SUCCESS;
}
nvrtcResult nvrtcCompileProgram(nvrtcProgram pp, int, const char *const *) {
    program *g = (program *)pp;
    // NVRTC has no <stdint.h>, so generated sources typedef their own: renamed here, since
    // cuemu.h brings the C library's
    std::string src = "#define uint16_t trj_uint16_t\n#define uint32_t trj_uint32_t\n#define int32_t trj_int32_t\n"
                      "#define int64_t trj_int64_t\n#undef INFINITY\n#undef NAN\n#line 1 \"" + g->name + "\"\n";
    // extern __shared__ as tests/cuemu/cu2cpp.sh rewrites it
    static const std::regex shared_re("extern __shared__ (__align__\\([0-9]+\\) )?([A-Za-z_][A-Za-z0-9_ ]*[A-Za-z0-9_]) +"
                                      "([A-Za-z_][A-Za-z0-9_]*)\\[\\];");
    src += std::regex_replace(g->src, shared_re, "$2 *$3 = ($2 *)tr_cuemu::dyn_smem();");
    src += "\n";
    static const std::regex kernel_re("__global__\\s+void\\s+([A-Za-z_][A-Za-z0-9_]*)\\s*\\(");
    for (std::sregex_iterator it(g->src.begin(), g->src.end(), kernel_re), end; it != end; ++it)
        src += "extern \"C\" void tr_cuemu_entry_" + (*it)[1].str() + "(const tr_cuemu::cfg_t *c, void **p) { " +
               "tr_cuemu::launch_params(*c, " + (*it)[1].str() + ", p); }\n";
    const char *tmp = getenv("TMPDIR");
    std::string dir = std::string(tmp && *tmp ? tmp : "/tmp") + "/cuemu-nvrtc-XXXXXX";
    std::vector<char> d(dir.begin(), dir.end());
    d.push_back(0);
    if (!mkdtemp(d.data())) {
        g->log = "mkdtemp failed";
        return NVRTC_ERROR_COMPILATION;
    }
    std::string base = d.data(), cpp = base + "/prog.cpp", so = base + "/prog.so";
    FILE *f = fopen(cpp.c_str(), "w");
    if (!f || fwrite(src.data(), 1, src.size(), f) != src.size()) {
        if (f) fclose(f);
        g->log = "cannot write " + cpp;
        return NVRTC_ERROR_COMPILATION;
    }
    fclose(f);
    int st = 0;
    g->log = run_capture(std::string(TR_CUEMU_CXX) + " -std=c++17 -O1 -w -shared -fPIC -include " TR_CUEMU_DIR
                         "/cuemu.h -I" TR_CUEMU_CUDA_INC " -I" TR_CUEMU_DIR " " + cpp + " -o " + so, &st);
    if (st == 0) {
        FILE *in = fopen(so.c_str(), "rb");
        char buf[65536];
        size_t n;
        while (in && (n = fread(buf, 1, sizeof buf, in)) > 0) g->image.append(buf, n);
        if (in) fclose(in);
    }
    unlink(cpp.c_str());
    unlink(so.c_str());
    rmdir(base.c_str());
    return st == 0 && !g->image.empty() ? NVRTC_SUCCESS : NVRTC_ERROR_COMPILATION;
}
nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram p, size_t *n) {
    *n = ((program *)p)->log.size() + 1;
    return NVRTC_SUCCESS;
}
nvrtcResult nvrtcGetProgramLog(nvrtcProgram p, char *log) {
    memcpy(log, ((program *)p)->log.c_str(), ((program *)p)->log.size() + 1);
    return NVRTC_SUCCESS;
}
nvrtcResult nvrtcGetCUBINSize(nvrtcProgram p, size_t *n) {
    const program *g = (const program *)p;
    if (g->image.empty()) return NVRTC_ERROR_INVALID_PROGRAM;
    *n = g->image.size();
    return NVRTC_SUCCESS;
}
nvrtcResult nvrtcGetCUBIN(nvrtcProgram p, char *cubin) {
    const program *g = (const program *)p;
    if (g->image.empty()) return NVRTC_ERROR_INVALID_PROGRAM;
    memcpy(cubin, g->image.data(), g->image.size());
    return NVRTC_SUCCESS;
}

namespace {
typedef void (*entry_fn)(const cfg_t *, void **);
CUresult drv_error_name(CUresult r, const char **s) {
    *s = r == CUDA_SUCCESS ? "CUDA_SUCCESS" : "CUDA_ERROR (cuemu)";
    return CUDA_SUCCESS;
}
CUresult drv_ctx_get(CUcontext *c) {
    *c = (CUcontext)&dummy_handle;
    return CUDA_SUCCESS;
}
CUresult drv_ctx_set(CUcontext) { return CUDA_SUCCESS; }
// A loaded module: the shared object's handle and the memfd it was opened from. The fd
// stays open until cuModuleUnload because dlopen looks an object up by the name it was
// given before it opens anything, and that name is /proc/self/fd/N: closed at once, N was
// the next module's fd too, and dlopen handed back the first module (the jax backend's
// decode pass, compiled after its prefill, ran the prefill's kernels with the prefill's
// sizes and wrote past its buffers). Held open, no two loaded modules share a name.
struct module {
    void *hd;
    int fd;
};
// The image is the shared object; its section headers end it (as GCC lays it out), which
// gives its size: cuModuleLoadData is told none.
CUresult drv_load(CUmodule *m, const void *image) {
    Elf64_Ehdr h;
    memcpy(&h, image, sizeof h);
    if (memcmp(h.e_ident, ELFMAG, SELFMAG) != 0 || (h.e_machine != EM_X86_64 && h.e_machine != EM_AARCH64))
        return CUDA_ERROR_INVALID_IMAGE;
    const size_t size = (size_t)h.e_shoff + (size_t)h.e_shnum * h.e_shentsize;
    int fd = memfd_create("cuemu-module", 0);
    if (fd < 0 || write(fd, image, size) != (ssize_t)size) {
        if (fd >= 0) close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    void *hd = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!hd) {
        fprintf(stderr, "cuemu: cuModuleLoadData: %s\n", dlerror());
        close(fd);
        return CUDA_ERROR_INVALID_IMAGE;
    }
    *m = (CUmodule) new module{hd, fd};
    return CUDA_SUCCESS;
}
CUresult drv_unload(CUmodule m) {
    module *x = (module *)m;
    dlclose(x->hd); // first: the name leaves the loaded objects before N can be reused
    close(x->fd);
    delete x;
    return CUDA_SUCCESS;
}
CUresult drv_function(CUfunction *f, CUmodule m, const char *name) {
    void *e = dlsym(((module *)m)->hd, (std::string("tr_cuemu_entry_") + name).c_str());
    if (!e) return CUDA_ERROR_NOT_FOUND;
    *f = (CUfunction)e;
    return CUDA_SUCCESS;
}
CUresult drv_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                    unsigned smem, CUstream s, void **params, void **extra) {
    if (extra) return CUDA_ERROR_INVALID_VALUE;
    const cfg_t c = cfg(dim3(gx, gy, gz), dim3(bx, by, bz), smem, (cudaStream_t)s);
    entry_fn e = (entry_fn)(void *)f;
    e(&c, params); // through tr_cuemu::launch: run now, or recorded by a capture
    cudaError_t le = R.last;
    R.last = cudaSuccess;
    return le == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
} // namespace

cudaError_t cudaGetDriverEntryPointByVersion(const char *sym, void **fn, unsigned int, unsigned long long,
                                             enum cudaDriverEntryPointQueryResult *q) {
    static const struct {
        const char *name;
        void *fn;
    } table[] = {{"cuGetErrorName", (void *)drv_error_name}, {"cuGetErrorString", (void *)drv_error_name},
                 {"cuCtxGetCurrent", (void *)drv_ctx_get},   {"cuCtxSetCurrent", (void *)drv_ctx_set},
                 {"cuModuleLoadData", (void *)drv_load},     {"cuModuleUnload", (void *)drv_unload},
                 {"cuModuleGetFunction", (void *)drv_function}, {"cuLaunchKernel", (void *)drv_launch}};
    *fn = nullptr;
    for (const auto &t : table)
        if (strcmp(sym, t.name) == 0) *fn = t.fn;
    if (q) *q = *fn ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
    return cudaSuccess;
}

/* ---------------- NCCL: one rank ----------------
 * A communicator of one rank, whose sum is the rank's own data: the library's device
 * path (ALLREDUCE on the stream, captured into a CUDA graph) runs as it would with NCCL.
 * More ranks are refused: cuemu is one process. */

#ifdef TR_HAVE_NCCL
#include <nccl.h>

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    memset(id, 0, sizeof *id);
    snprintf(id->internal, sizeof id->internal, "cuemu");
    return ncclSuccess;
}
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId, int rank) {
    if (nranks != 1 || rank != 0) {
        fprintf(stderr, "cuemu: NCCL stand-in: a communicator of %d ranks (one only)\n", nranks);
        return ncclInvalidUsage;
    }
    *comm = new_handle<ncclComm_t>();
    return ncclSuccess;
}
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    free_handle(comm);
    return ncclSuccess;
}
const char *ncclGetErrorString(ncclResult_t r) { return r == ncclSuccess ? "no error" : "invalid usage (cuemu)"; }
ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                           ncclComm_t, cudaStream_t) {
    if (dt != ncclFloat32 || op != ncclSum) return ncclInvalidArgument;
    if (send != recv && count) submit([=]() { memmove(recv, send, count * 4); });
    return ncclSuccess;
}
#endif
