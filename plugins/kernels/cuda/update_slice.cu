// UPDATE_SLICE (ops.h) on the device: out = x with [s, s+n) along an axis replaced by
// update, s read from device memory by the kernel itself (never copied to the host), so
// a captured CUDA graph replays with whatever start the step wrote there. Seen as
// (outer, dim, inner) with elements of es bytes (a byte copy: any dtype). In place
// (out == x) only the slice is written; otherwise every element of out. A start outside
// [0, dim − n] writes no slice element (out of place, out is x's copy) and leaves
// TR_CU_FLAG_UPDATE_SLICE in flag (start, n, dim), reported by tr_kernels_sync.
#include "cu_common.cuh"

__device__ __forceinline__ void flag_bad_start(long long *flag, long long s, long long n, long long dim) {
    if (atomicCAS((unsigned long long *)flag, 0ull, (unsigned long long)TR_CU_FLAG_UPDATE_SLICE) == 0ull) {
        flag[1] = n;
        flag[2] = s;
        flag[3] = dim;
    }
}

// Every element of out: the update's inside the slice, x's elsewhere.
template <typename E>
__global__ void update_slice_copy_kernel(const E *x, const E *u, const int32_t *start, E *out, int64_t outer,
                                         int64_t dim, int64_t n, int64_t inner, long long *flag) {
    const int64_t s = *start, total = outer * dim * inner;
    const bool ok = s >= 0 && s + n <= dim;
    if (!ok && blockIdx.x == 0 && threadIdx.x == 0) flag_bad_start(flag, s, n, dim);
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t c = i % inner, j = (i / inner) % dim, o = i / (inner * dim);
        out[i] = ok && j >= s && j < s + n ? u[(o * n + (j - s)) * inner + c] : x[i];
    }
}

// Only the slice (out is x's memory).
template <typename E>
__global__ void update_slice_inplace_kernel(const E *u, const int32_t *start, E *out, int64_t outer, int64_t dim,
                                            int64_t n, int64_t inner, long long *flag) {
    const int64_t s = *start, total = outer * n * inner;
    if (s < 0 || s + n > dim) {
        if (blockIdx.x == 0 && threadIdx.x == 0) flag_bad_start(flag, s, n, dim);
        return;
    }
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t c = i % inner, j = (i / inner) % n, o = i / (inner * n);
        out[(o * dim + s + j) * inner + c] = u[i];
    }
}

template <typename E>
static void launch(cudaStream_t st, const void *x, const void *u, const int32_t *start, void *out, int64_t outer,
                   int64_t dim, int64_t n, int64_t inner, long long *flag) {
    if (out == x)
        update_slice_inplace_kernel<E><<<tr_cu_blocks(outer * n * inner), 256, 0, st>>>((const E *)u, start, (E *)out,
                                                                                        outer, dim, n, inner, flag);
    else
        update_slice_copy_kernel<E><<<tr_cu_blocks(outer * dim * inner), 256, 0, st>>>(
            (const E *)x, (const E *)u, start, (E *)out, outer, dim, n, inner, flag);
}

extern "C" int tr_cu_update_slice(cudaStream_t s, size_t elem_size, const void *x, const void *u, const int32_t *start,
                                  void *out, int64_t outer, int64_t dim, int64_t n, int64_t inner, long long *flag,
                                  struct tr_error *err) {
    if (outer * dim * inner == 0) return TR_OK;
    switch (elem_size) {
    case 2: launch<uint16_t>(s, x, u, start, out, outer, dim, n, inner, flag); break;
    case 4: launch<uint32_t>(s, x, u, start, out, outer, dim, n, inner, flag); break;
    case 8: launch<uint64_t>(s, x, u, start, out, outer, dim, n, inner, flag); break;
    default:
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "update_slice: elements of %zu bytes (2, 4 or 8 on cuda)",
                            elem_size);
    }
    return TR_CU_LAUNCHED("update_slice", err);
}
