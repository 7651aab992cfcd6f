/* cuemu: the CUDA kernels (.cu) compiled by the host's C++ compiler and run on the cpu,
 * each GPU thread a fiber, so that a machine without a GPU runs the library's own kernels
 * and host code end to end (tests/cuemu/README.md says what it checks and what not).
 *
 * Force-included (-include) before each .cu file, after tests/cuemu/cu2cpp.sh has turned
 * `kernel<<<grid, block, smem, stream>>>(args)` into `tr_cuemu::launch(tr_cuemu::cfg(grid,
 * block, smem, stream), kernel)(args)` and `extern __shared__ T name[];` into a pointer
 * to the launch's dynamic shared memory. Everything else is the source as nvcc sees it.
 *
 * Semantics kept strict where a GPU is undefined: __syncthreads reached while another
 * thread of the block has exited or waits at a warp barrier, a warp op whose full mask
 * names a lane that exited or does not exist, WMMA pointers not 256-bit aligned or leading
 * dimensions not a multiple of 16 bytes, dynamic shared memory past 48 KiB without
 * cudaFuncAttributeMaxDynamicSharedMemorySize: each aborts with what and where. */
#ifndef TRIDENT_CUEMU_H
#define TRIDENT_CUEMU_H

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <tuple>
#include <type_traits>
#include <utility>

#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __forceinline__
#undef __launch_bounds__
#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __forceinline__ inline
#define __launch_bounds__(...)

namespace tr_cuemu {

/* The launch's geometry and the running fiber's thread index (set by the scheduler). */
struct env_t {
    dim3 grid, block;
    uint3 bid, tid;
    unsigned char *dyn_smem;
    size_t dyn_bytes;
};
extern env_t env;

[[noreturn]] void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Block and warp barriers; a shuffle deposits 8 bytes and reads lane src's. */
void syncthreads();
int syncthreads_or(int pred);
void syncwarp(unsigned mask);
uint64_t shfl(unsigned mask, uint64_t bits, int src_lane);

inline unsigned char *dyn_smem() { return env.dyn_smem; }

/* The WMMA product cache: a lane's n-th mma_sync since the block began is its warp's
 * n-th too (the warp runs them converged); get copies the product if another lane of the
 * warp made it, put stores it for them. */
bool warp_product_get(float *out, size_t bytes);
void warp_product_put(const float *out, size_t bytes);

struct cfg_t {
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;
};
inline cfg_t cfg(dim3 grid, dim3 block, size_t smem = 0, cudaStream_t stream = 0) { return cfg_t{grid, block, smem, stream}; }

/* Runs body(arg) once per thread of the grid (or records it while the stream captures);
 * arg_copy/arg_free let a capture keep the arguments. Defined in cuemu_rt.cpp. */
typedef void (*body_fn)(void *);
void run(const cfg_t &c, const void *kernel, body_fn body, void *arg, void *(*arg_copy)(const void *),
         void (*arg_free)(void *));

template <typename... P> struct launcher {
    void (*fn)(P...);
    cfg_t c;
    typedef std::pair<void (*)(P...), std::tuple<std::decay_t<P>...>> pack;
    static void body(void *a) {
        pack *pk = (pack *)a;
        std::tuple<std::decay_t<P>...> copy = pk->second; // a thread's own parameters
        std::apply(pk->first, copy);
    }
    static void *copy(const void *a) { return new pack(*(const pack *)a); }
    static void drop(void *a) { delete (pack *)a; }
    // the parameters' own types, so that the arguments convert as at a call (NULL too)
    void operator()(std::decay_t<P>... a) {
        pack pk(fn, std::tuple<std::decay_t<P>...>(a...));
        run(c, (const void *)fn, body, &pk, copy, drop);
    }
};
template <typename... P> launcher<P...> launch(cfg_t c, void (*fn)(P...)) { return launcher<P...>{fn, c}; }

/* A launch through the driver API: the kernel's parameters as pointers to each value. */
template <typename... P, size_t... I>
inline void launch_params_at(const cfg_t &c, void (*fn)(P...), void **params, std::index_sequence<I...>) {
    launch(c, fn)(*(std::decay_t<P> *)params[I]...);
}
template <typename... P> inline void launch_params(const cfg_t &c, void (*fn)(P...), void **params) {
    launch_params_at(c, fn, params, std::index_sequence_for<P...>{});
}

template <typename T> inline uint64_t to_bits(T v) {
    static_assert(sizeof(T) <= 8, "shuffle of more than 8 bytes");
    uint64_t b = 0;
    memcpy(&b, &v, sizeof v);
    return b;
}
template <typename T> inline T from_bits(uint64_t b) {
    T v;
    memcpy(&v, &b, sizeof v);
    return v;
}

inline int lane_id() {
    unsigned t = env.tid.x + env.block.x * (env.tid.y + env.block.y * env.tid.z);
    return (int)(t & 31);
}

} // namespace tr_cuemu

#undef threadIdx
#undef blockIdx
#undef blockDim
#undef gridDim
#define threadIdx (tr_cuemu::env.tid)
#define blockIdx (tr_cuemu::env.bid)
#define blockDim (tr_cuemu::env.block)
#define gridDim (tr_cuemu::env.grid)

/* nvcc's overload for a kernel (cuda_runtime.h has it for nvcc only). */
template <typename F> inline cudaError_t cudaFuncSetAttribute(F *fn, cudaFuncAttribute a, int v) {
    return ::cudaFuncSetAttribute((const void *)fn, a, v);
}

inline void __syncthreads() { tr_cuemu::syncthreads(); }
inline int __syncthreads_or(int p) { return tr_cuemu::syncthreads_or(p); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { tr_cuemu::syncwarp(mask); }

template <typename T> inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
    int lane = tr_cuemu::lane_id();
    int s = (lane & ~(width - 1)) + (src & (width - 1));
    return tr_cuemu::from_bits<T>(tr_cuemu::shfl(mask, tr_cuemu::to_bits(v), s));
}
template <typename T> inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    int lane = tr_cuemu::lane_id();
    int s = lane ^ lane_mask;
    if ((s & ~(width - 1)) != (lane & ~(width - 1))) s = lane; // outside the segment: own value
    return tr_cuemu::from_bits<T>(tr_cuemu::shfl(mask, tr_cuemu::to_bits(v), s));
}

/* Fibers switch only at barriers, so a read-modify-write is atomic as written. */
inline float atomicAdd(float *p, float v) { float o = *p; *p = o + v; return o; }
inline int atomicAdd(int *p, int v) { int o = *p; *p = o + v; return o; }
inline unsigned atomicAdd(unsigned *p, unsigned v) { unsigned o = *p; *p = o + v; return o; }
inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) {
    unsigned long long o = *p;
    *p = o + v;
    return o;
}
inline int atomicCAS(int *p, int cmp, int v) { int o = *p; if (o == cmp) *p = v; return o; }
inline unsigned long long atomicCAS(unsigned long long *p, unsigned long long cmp, unsigned long long v) {
    unsigned long long o = *p;
    if (o == cmp) *p = v;
    return o;
}
inline int atomicOr(int *p, int v) { int o = *p; *p = o | v; return o; }
inline unsigned atomicOr(unsigned *p, unsigned v) { unsigned o = *p; *p = o | v; return o; }
inline float atomicMax(float *p, float v) { float o = *p; if (v > o) *p = v; return o; }

inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
inline int __float_as_int(float f) { int i; memcpy(&i, &f, 4); return i; }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }

/* ---- WMMA: each lane holds the whole tile and computes the product itself. Loads and
 * stores are the warp's collectives: every lane arrives, each reads (or writes the same
 * values), every lane leaves, so that no lane's store lands before another's load. ---- */
namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
namespace precision {
struct tf32 {};
} // namespace precision

template <typename T> struct storage { typedef T type; };
template <> struct storage<precision::tf32> { typedef float type; };

template <typename Use, int M, int N, int K> struct dims;
template <int M, int N, int K> struct dims<matrix_a, M, N, K> { static constexpr int R = M, C = K; };
template <int M, int N, int K> struct dims<matrix_b, M, N, K> { static constexpr int R = K, C = N; };
template <int M, int N, int K> struct dims<accumulator, M, N, K> { static constexpr int R = M, C = N; };

template <typename Use, int M, int N, int K, typename T, typename Layout = void> struct fragment {
    typedef typename storage<T>::type elem;
    static constexpr int R = dims<Use, M, N, K>::R, C = dims<Use, M, N, K>::C;
    static constexpr int num_elements = R * C;
    elem x[R * C]; // row-major, logical (row, col) of the tile
    float f[std::is_same<elem, float>::value ? 1 : R * C]; // x in f32, set by the load (16-bit types)
};

template <typename F> inline const float *f32_of(const F &fr) {
    if constexpr (std::is_same<typename F::elem, float>::value) return fr.x;
    else return fr.f;
}

inline void check_ptr(const void *p, unsigned ldm, size_t esize, const char *what) {
    if ((uintptr_t)p % 32) tr_cuemu::fail("wmma::%s: pointer %p is not 256-bit aligned", what, p);
    if ((ldm * esize) % 16) tr_cuemu::fail("wmma::%s: ldm %u is not a multiple of 16 bytes", what, ldm);
}

template <typename F, typename V> inline void fill_fragment(F &f, const V &v) {
    for (int i = 0; i < F::num_elements; i++) f.x[i] = (typename F::elem)v;
}

template <typename E> inline float as_float(E v) { return (float)v; }
inline float as_float(__nv_bfloat16 v) { return __bfloat162float(v); }
inline float as_float(__half v) { return __half2float(v); }

template <typename F, typename P> inline void load_tile(F &f, const P *p, unsigned ldm, bool col) {
    check_ptr(p, ldm, sizeof(P), "load_matrix_sync");
    tr_cuemu::syncwarp(0xffffffffu);
    for (int r = 0; r < F::R; r++)
        for (int c = 0; c < F::C; c++) f.x[r * F::C + c] = col ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c];
    if constexpr (!std::is_same<typename F::elem, float>::value)
        for (int i = 0; i < F::num_elements; i++) f.f[i] = as_float(f.x[i]);
    tr_cuemu::syncwarp(0xffffffffu);
}
template <typename Use, int M, int N, int K, typename T, typename P>
inline void load_matrix_sync(fragment<Use, M, N, K, T, row_major> &f, const P *p, unsigned ldm) {
    load_tile(f, p, ldm, false);
}
template <typename Use, int M, int N, int K, typename T, typename P>
inline void load_matrix_sync(fragment<Use, M, N, K, T, col_major> &f, const P *p, unsigned ldm) {
    load_tile(f, p, ldm, true);
}
template <int M, int N, int K, typename T>
inline void load_matrix_sync(fragment<accumulator, M, N, K, T> &f, const T *p, unsigned ldm, layout_t l) {
    load_tile(f, p, ldm, l == mem_col_major);
}
template <int M, int N, int K, typename T>
inline void store_matrix_sync(T *p, const fragment<accumulator, M, N, K, T> &f, unsigned ldm, layout_t l) {
    typedef fragment<accumulator, M, N, K, T> F;
    check_ptr(p, ldm, sizeof(T), "store_matrix_sync");
    tr_cuemu::syncwarp(0xffffffffu);
    for (int r = 0; r < F::R; r++)
        for (int c = 0; c < F::C; c++) {
            if (l == mem_col_major) p[(size_t)c * ldm + r] = f.x[r * F::C + c];
            else p[(size_t)r * ldm + c] = f.x[r * F::C + c];
        }
    tr_cuemu::syncwarp(0xffffffffu);
}
template <int M, int N, int K, typename TA, typename LA, typename LB>
inline void mma_sync(fragment<accumulator, M, N, K, float> &d, const fragment<matrix_a, M, N, K, TA, LA> &a,
                     const fragment<matrix_b, M, N, K, TA, LB> &b, const fragment<accumulator, M, N, K, float> &c) {
    // Every lane holds the same tiles, so the warp's first lane at this product computes
    // it and the others copy it (tr_cuemu::warp_product says when).
    float out[M * N];
    if (!tr_cuemu::warp_product_get(out, sizeof out)) {
        const float *fa = f32_of(a), *fb = f32_of(b);
        for (int i = 0; i < M; i++) {
            float acc[N];
            for (int j = 0; j < N; j++) acc[j] = c.x[i * N + j];
            for (int k = 0; k < K; k++) {
                const float x = fa[i * K + k];
                for (int j = 0; j < N; j++) acc[j] += x * fb[k * N + j];
            }
            memcpy(out + i * N, acc, sizeof acc);
        }
        tr_cuemu::warp_product_put(out, sizeof out);
    }
    memcpy(d.x, out, sizeof out);
}

/* cvt.rna.tf32.f32: 10 mantissa bits, to nearest, ties away from zero. */
inline float __float_to_tf32(float x) {
    if (!isfinite(x)) return x;
    uint32_t u;
    memcpy(&u, &x, 4);
    u = (u + 0x1000u) & ~0x1fffu;
    memcpy(&x, &u, 4);
    return x;
}
} // namespace wmma
} // namespace nvcuda

#endif
