/* trident — the shared kernels library (libtrident_kernels).
 *
 * Pure compute on device memory: no graph, no config. Every backend calls these; the
 * CPU implementation is the reference that faster and CUDA versions are tested against.
 *
 * A struct tr_kernels is one execution context on one device: it owns the device's
 * library handles (oneDNN engine and stream on the cpu), a cache of primitives keyed by
 * shape (created on first use, reused after), and scratch memory. A context is used by
 * one thread at a time; kernels parallelise inside (OpenMP on the cpu).
 *
 * Tensors passed in are contiguous unless a function says otherwise, on the context's
 * device, and `out` is preallocated with its shape and dtype set (the graph inferred
 * them). Float inputs of one call share a dtype (f32, bf16, f16; f64 where noted);
 * bf16/f16 are computed with f32 accumulation and rounded to nearest even on store.
 * Every function returns a status and fills err with the kernel's name and the shapes
 * when it refuses its arguments. On a cuda context (trident/kernels_cuda.h) every
 * function here runs its CUDA implementation, bound calls included.
 */
#ifndef TRIDENT_KERNELS_H
#define TRIDENT_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include "trident/ops.h"
#include "trident/status.h"
#include "trident/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tr_kernels;

/* Counters a context keeps, for reports. */
struct tr_kernels_stats {
    uint64_t calls;              /* kernel entry points called */
    uint64_t gemm_calls;
    uint64_t primitive_hits;     /* oneDNN primitive cache */
    uint64_t primitive_misses;
};

int tr_kernels_init(struct tr_kernels **out, int device_type, int device_index, struct tr_error *err);
void tr_kernels_free(struct tr_kernels *k);
int tr_kernels_device_type(const struct tr_kernels *k);
void tr_kernels_get_stats(const struct tr_kernels *k, struct tr_kernels_stats *st);
void tr_kernels_reset_stats(struct tr_kernels *k);
/* How GEMMs compute from now on (enum tr_math, from [run] math). The cpu computes f32
 * products in f32 and bf16 products with f32 accumulation, so DEFAULT, F32 and BF16 are
 * accepted there and TF32 is refused; cuda maps TF32 to tensor-core f32 GEMMs. */
int tr_kernels_set_math(struct tr_kernels *k, enum tr_math m, struct tr_error *err);
enum tr_math tr_kernels_math(const struct tr_kernels *k);
/* ---- the cpu's instruction set ----
 * The hot loops of the cpu kernels are compiled once per level below, each with its
 * own register tiles, and one level is used for the whole process: the highest this
 * cpu runs, or a lower one forced by the environment variable TRIDENT_CPU_ISA
 * (native | avx512 | avx2 | baseline). The same cap is given to oneDNN
 * (dnnl_set_max_cpu_isa), so a forced avx2 on an AVX-512 machine runs exactly what an
 * AVX2-only machine runs, bf16 GEMMs converted to f32 included. The level is fixed at
 * the first call that needs it (tr_kernels_init, tr_kernels_cpu_info); a value of
 * TRIDENT_CPU_ISA that is unknown, or above what the cpu runs, makes both fail. */
enum tr_cpu_isa { TR_CPU_ISA_BASELINE = 0, TR_CPU_ISA_AVX2 = 1, TR_CPU_ISA_AVX512 = 2, TR_CPU_ISA_COUNT };

struct tr_cpu_info {
    char model[64];          /* the cpu's brand string ("AMD EPYC 7B13"), "unknown" if none */
    enum tr_cpu_isa isa;     /* the level in use */
    enum tr_cpu_isa native;  /* the highest level this cpu runs */
    int forced;              /* 1 when TRIDENT_CPU_ISA named a level (even the native one:
                                oneDNN is capped to it, so avx512 on an AMX cpu drops AMX) */
    int avx512_bf16, amx;    /* the cpu has AVX512_BF16 / AMX-BF16 */
    int bf16_native;         /* oneDNN multiplies bf16 itself at this level, with the cpu's
                                own bf16 instructions on x86 (AVX512_BF16 or AMX; oneDNN's
                                emulation below them is slower than converting); 0: bf16
                                GEMMs convert their operands to f32 (tr_k_matmul) */
    char onednn_isa[32];     /* oneDNN's ISA after the cap ("avx2", "avx512_core_bf16", ...) */
    int threads;             /* the OpenMP threads a parallel region gets now */
};
/* Fills *out (the level is fixed by this call if it was not yet). */
int tr_kernels_cpu_info(struct tr_cpu_info *out, struct tr_error *err);
/* "baseline", "avx2", "avx512"; "?" for a value outside the enum. */
const char *tr_cpu_isa_name(enum tr_cpu_isa isa);

/* Whether this build has a device type (the cpu always; cuda where nvcc was found and a
 * device is present). Fills err with the reason when not. */
int tr_kernels_device_available(int device_type, struct tr_error *err);
/* What runs the kernels of a device, in words, for reports: the cpu's brand string; on
 * cuda the GPU's name, compute capability, SMs and memory ("NVIDIA H100 80GB HBM3, sm_90,
 * 132 SMs, 79.1 GiB"). Initialises the CUDA runtime on cuda: ask it where the device may
 * be touched (a child of a run that forks). Fails as tr_kernels_device_available. */
int tr_kernels_device_describe(int device_type, int device_index, char *buf, size_t n, struct tr_error *err);

/* ---- device memory (host memory on the cpu; 64-byte aligned) ---- */
int tr_kernels_alloc(struct tr_kernels *k, size_t nbytes, void **p, struct tr_error *err);
void tr_kernels_dealloc(struct tr_kernels *k, void *p);
/* Copies between host memory and the context's device, or within either. */
int tr_kernels_to_device(struct tr_kernels *k, void *dst, const void *src, size_t n, struct tr_error *err);
int tr_kernels_to_host(struct tr_kernels *k, void *dst, const void *src, size_t n, struct tr_error *err);
int tr_kernels_copy(struct tr_kernels *k, void *dst, const void *src, size_t n, struct tr_error *err);
int tr_kernels_sync(struct tr_kernels *k, struct tr_error *err);

/* ---- the dispatcher ----
 * Run one graph op on bound tensors: what an eager backend does per node, and the
 * default implementation a plugin may fall back to for ops it does not provide.
 * INPUT, PARAM and CONST are not runnable (TR_ERR_INVALID). RESHAPE copies when
 * out->data != in[0].data and does nothing when they alias. */
int tr_kernels_run(struct tr_kernels *k, int op, const struct tr_attrs *attrs, int n_in,
                   const struct tr_tensor *in, struct tr_tensor *out, struct tr_error *err);

/* 1 if tr_kernels_run takes op with outputs of dtype on this library's devices: the
 * compute ops on f32, bf16 and f16, the layout ops (INPUT PARAM CONST RESHAPE TRANSPOSE
 * SLICE CONCAT CAST) on any dtype. What a backend that runs ops through the shared
 * kernels answers from supports_op. */
int tr_kernels_supports(int op, int dtype);

/* ---- kernels ---- */

/* c = act(alpha · op(a) · op(b) + bias). a (...,M,K), b (...,K,N) or 2-D (K,N); op
 * swaps the last two axes when trans is set (the data stays as stored). Batch axes
 * broadcast. bias (N) or NULL. f32 and bf16 through oneDNN matmul, f32 accumulation. */
int tr_k_matmul(struct tr_kernels *k, const struct tr_tensor *a, const struct tr_tensor *b,
                struct tr_tensor *c, int trans_a, int trans_b, float alpha,
                const struct tr_tensor *bias, enum tr_act act, struct tr_error *err);

/* out = a op b, numpy broadcasting; op is TR_OP_ADD, SUB, MUL or DIV. */
int tr_k_binary(struct tr_kernels *k, int op, const struct tr_tensor *a, const struct tr_tensor *b,
                struct tr_tensor *out, struct tr_error *err);

/* Elementwise unary ops of ops.h (GELU TANH RELU SILU SIGMOID EXP NEG SQRT RSQRT SCALE). */
int tr_k_unary(struct tr_kernels *k, int op, const struct tr_attrs *attrs, const struct tr_tensor *x,
               struct tr_tensor *out, struct tr_error *err);

/* Softmax over the last axis (max-subtracted). */
int tr_k_softmax(struct tr_kernels *k, const struct tr_tensor *x, struct tr_tensor *out, struct tr_error *err);

/* Layer norm over the last axis D: (x - mean)/sqrt(var + eps)·gamma + beta; gamma and beta
 * (D) may be NULL (then 1 and 0). Biased variance, as PyTorch. */
int tr_k_layer_norm(struct tr_kernels *k, const struct tr_tensor *x, const struct tr_tensor *gamma,
                    const struct tr_tensor *beta, float eps, struct tr_tensor *out, struct tr_error *err);

/* out[..., :] = table[ids[...], :]; ids i32 or i64; an id outside [0,V) is TR_ERR_INVALID. */
int tr_k_embedding(struct tr_kernels *k, const struct tr_tensor *table, const struct tr_tensor *ids,
                   struct tr_tensor *out, struct tr_error *err);

/* Layout ops: any dtype (element size 2, 4 or 8). */
int tr_k_transpose(struct tr_kernels *k, const struct tr_tensor *x, const int64_t *perm,
                   struct tr_tensor *out, struct tr_error *err);
int tr_k_slice(struct tr_kernels *k, const struct tr_tensor *x, int axis, int64_t start, int64_t step,
               struct tr_tensor *out, struct tr_error *err);
int tr_k_concat(struct tr_kernels *k, int n, const struct tr_tensor *xs, int axis, struct tr_tensor *out,
                struct tr_error *err);

/* SUM, MEAN or MAX over one axis; out has that axis removed or kept as 1 (same data). */
int tr_k_reduce(struct tr_kernels *k, int op, const struct tr_tensor *x, int axis, struct tr_tensor *out,
                struct tr_error *err);

/* Convert between any two dtypes (floats round to nearest even; float to int truncates). */
int tr_k_cast(struct tr_kernels *k, const struct tr_tensor *x, struct tr_tensor *out, struct tr_error *err);

/* Scaled dot-product attention, see ATTENTION in ops.h (scale 0: 1/sqrt(D), in every
 * attention kernel here, as for the op). mask may be NULL. Tiled with an
 * online softmax: the (Tq,Tk) score matrix is never stored whole. */
int tr_k_attention(struct tr_kernels *k, const struct tr_tensor *q, const struct tr_tensor *kk,
                   const struct tr_tensor *v, const struct tr_tensor *mask, float scale, int causal,
                   int window, struct tr_tensor *out, struct tr_error *err);
/* The same pass giving ATTENTION_LSE's statistics: lse (B,H,Tq) f32, log Σ exp of each
 * query row's scaled, masked scores (+inf: the row sees no key), with the output (out)
 * or alone (out NULL); what tr_k_attention_backward reads back instead of recomputing. */
int tr_k_attention_lse(struct tr_kernels *k, const struct tr_tensor *q, const struct tr_tensor *kk,
                       const struct tr_tensor *v, const struct tr_tensor *mask, float scale, int causal, int window,
                       struct tr_tensor *out, struct tr_tensor *lse, struct tr_error *err);

/* Random fill (synthetic data, dropout masks, initialisation): out (f32, bf16, f16; f64
 * on the cpu) = uniform in [a, b) (TR_RANDOM_UNIFORM, a < b) or normal with mean a and
 * standard deviation b (TR_RANDOM_NORMAL, b >= 0), a pure function of seed and the
 * element's index on each device: the same seed gives the same bits on one device,
 * whatever the threads. The cpu draws from trident/rng.h's counter-based stream; cuda
 * from cuRAND's Philox generator on the context's stream (other values than the cpu's,
 * the same distribution). */
enum tr_random_dist { TR_RANDOM_UNIFORM = 0, TR_RANDOM_NORMAL = 1 };
int tr_k_random(struct tr_kernels *k, enum tr_random_dist dist, uint64_t seed, float a, float b, struct tr_tensor *out,
                struct tr_error *err);

/* ---- bound calls (for executors that replay a fixed schedule) ----
 * tr_kernels_bind checks one op's arguments once (everything tr_kernels_run checks),
 * resolves which kernel runs and prepares what it needs (a oneDNN primitive created for
 * the shape and owned by the call), and stores the tensors (data pointers included) in
 * the call. tr_kernels_call then runs it with no dispatch, no shape logic and no
 * allocation. The tensors' memory must stay where it was bound; rebinding is needed
 * when a pointer or a shape changes. tr_kernels_unbind releases what bind made. */
#define TR_KERNEL_CALL_MAX_IN 10 /* the attention backward's q, k, v, dy, mask, dq, dk, dv, y, lse */

struct tr_kernel_call;
typedef int (*tr_kernel_fn)(struct tr_kernels *k, const struct tr_kernel_call *c, struct tr_error *err);

struct tr_kernel_call {
    tr_kernel_fn fn;
    int op;
    int n_in;
    struct tr_attrs attrs;
    struct tr_tensor in[TR_KERNEL_CALL_MAX_IN];
    struct tr_tensor out;
    void *prepared;             /* kernel-specific state made by bind (e.g. a primitive) */
};

int tr_kernels_bind(struct tr_kernels *k, int op, const struct tr_attrs *attrs, int n_in,
                    const struct tr_tensor *in, const struct tr_tensor *out, struct tr_kernel_call *call,
                    struct tr_error *err);
static inline int tr_kernels_call(struct tr_kernels *k, const struct tr_kernel_call *c, struct tr_error *err) {
    return c->fn(k, c, err);
}
void tr_kernels_unbind(struct tr_kernels *k, struct tr_kernel_call *call);

/* ---- fused kernels (the hand-fused library of the tf backend; any backend may call) ---- */

/* out = layer_norm(x + bias + residual) over the last axis D. bias (D) and residual (x's
 * shape) may each be NULL; gamma/beta (D) as tr_k_layer_norm. One pass over x. */
int tr_k_bias_residual_layer_norm(struct tr_kernels *k, const struct tr_tensor *x, const struct tr_tensor *bias,
                                  const struct tr_tensor *residual, const struct tr_tensor *gamma,
                                  const struct tr_tensor *beta, float eps, struct tr_tensor *out,
                                  struct tr_error *err);

/* out = softmax(scale · x + mask) over the last axis; mask additive (f32 or x's dtype),
 * broadcastable to x, or NULL. */
int tr_k_scale_mask_softmax(struct tr_kernels *k, const struct tr_tensor *x, float scale, const struct tr_tensor *mask,
                            struct tr_tensor *out, struct tr_error *err);

/* out (..., D) = layer_norm(Σ_i tables[i][ids[i]]) : n gathers summed, then normalised,
 * in one pass. ids[i] (i32/i64) broadcastable to out's leading axes (a position table's
 * ids may be (T) against (B,T)). */
int tr_k_embedding_sum_layer_norm(struct tr_kernels *k, int n, const struct tr_tensor *tables,
                                  const struct tr_tensor *ids, const struct tr_tensor *gamma,
                                  const struct tr_tensor *beta, float eps, struct tr_tensor *out,
                                  struct tr_error *err);

/* ---- bound calls that are not one graph op: a GEMM with its epilogue, the fused kernels ----
 * As tr_kernels_bind: every check the matching tr_k_* function makes, with its messages,
 * made once; what the call needs prepared (a GEMM's oneDNN primitive with its post-ops,
 * the context's scratch grown for the shapes); then tr_kernels_call runs the kernel with
 * no checks and no allocation, and tr_kernels_unbind releases it. The tensors' memory
 * must stay where it was bound; the data may change between calls (weights updated in
 * place, new ids: ids are data and are still checked by every call). The call's op is
 * TR_OP_MATMUL for a GEMM (in: a, b and the bias if any; attrs: ints[0..1] the
 * transposes, floats[0] alpha) and -1 for a fused kernel (in: as many of its inputs as
 * fit, for reports only). */
int tr_kernels_bind_matmul(struct tr_kernels *k, const struct tr_tensor *a, const struct tr_tensor *b,
                           const struct tr_tensor *c, int trans_a, int trans_b, float alpha,
                           const struct tr_tensor *bias, enum tr_act act, struct tr_kernel_call *call,
                           struct tr_error *err);
int tr_kernels_bind_bias_residual_layer_norm(struct tr_kernels *k, const struct tr_tensor *x,
                                             const struct tr_tensor *bias, const struct tr_tensor *residual,
                                             const struct tr_tensor *gamma, const struct tr_tensor *beta, float eps,
                                             const struct tr_tensor *out, struct tr_kernel_call *call,
                                             struct tr_error *err);
int tr_kernels_bind_scale_mask_softmax(struct tr_kernels *k, const struct tr_tensor *x, float scale,
                                       const struct tr_tensor *mask, const struct tr_tensor *out,
                                       struct tr_kernel_call *call, struct tr_error *err);
int tr_kernels_bind_embedding_sum_layer_norm(struct tr_kernels *k, int n, const struct tr_tensor *tables,
                                             const struct tr_tensor *ids, const struct tr_tensor *gamma,
                                             const struct tr_tensor *beta, float eps, const struct tr_tensor *out,
                                             struct tr_kernel_call *call, struct tr_error *err);

/* ---- training kernels (grad.c, loss.c): the ops ops.h lists under "Training" ----
 * Float inputs f32, bf16, f16 or f64, computed in f64 (rounded once on store); the
 * arguments are the ops' attributes, read as ops.h says. */
/* dx = dy · f'(x) for the unary op `op` (GELU: approximate 0/1; SCALE: alpha). */
int tr_k_unary_grad(struct tr_kernels *k, int op, int approximate, float alpha, const struct tr_tensor *x,
                    const struct tr_tensor *dy, struct tr_tensor *dx, struct tr_error *err);
/* dx = y·(dy − Σ dy·y) over the last axis, y the softmax's output. */
int tr_k_softmax_grad(struct tr_kernels *k, const struct tr_tensor *y, const struct tr_tensor *dy,
                      struct tr_tensor *dx, struct tr_error *err);
/* dx of layer norm over the last axis D; gamma (D, x's dtype or f32) may be NULL (ones). */
int tr_k_layer_norm_grad(struct tr_kernels *k, const struct tr_tensor *x, const struct tr_tensor *gamma,
                         const struct tr_tensor *dy, float eps, struct tr_tensor *dx, struct tr_error *err);
/* dgamma (D, x's dtype or f32) = Σ over rows of dy·x̂; deterministic (parallel over columns). */
int tr_k_layer_norm_grad_gamma(struct tr_kernels *k, const struct tr_tensor *x, const struct tr_tensor *dy,
                               float eps, struct tr_tensor *dgamma, struct tr_error *err);
/* dtable (V,D) = rows of dy (ids' shape + D) added at their ids, zeros elsewhere; ids checked. */
int tr_k_embedding_grad(struct tr_kernels *k, const struct tr_tensor *ids, const struct tr_tensor *dy,
                        struct tr_tensor *dtable, struct tr_error *err);
/* dq, dk or dv (which 0, 1, 2) of tr_k_attention, recomputed block by block (no (Tq,Tk) matrix). */
int tr_k_attention_grad(struct tr_kernels *k, const struct tr_tensor *q, const struct tr_tensor *kk,
                        const struct tr_tensor *v, const struct tr_tensor *dy, const struct tr_tensor *mask,
                        float scale, int causal, int window, int which, struct tr_tensor *out, struct tr_error *err);
/* dq, dk and dv at once (any may be NULL): the row statistics once, dq's pass, and one
 * pass for dk and dv together, where three tr_k_attention_grad calls recompute the
 * statistics three times and the scores four times. With the forward's y and lse
 * (tr_k_attention_lse; both or neither) the statistics are read, not recomputed: the
 * backward then never rebuilds the output. */
int tr_k_attention_backward(struct tr_kernels *k, const struct tr_tensor *q, const struct tr_tensor *kk,
                            const struct tr_tensor *v, const struct tr_tensor *dy, const struct tr_tensor *mask,
                            const struct tr_tensor *y, const struct tr_tensor *lse, float scale, int causal,
                            int window, struct tr_tensor *dq, struct tr_tensor *dk, struct tr_tensor *dv,
                            struct tr_error *err);
/* Bound form (any of dq, dk, dv may be NULL; they travel as the call's in[5..7], y and lse
 * as in[8..9]); scale 0 is attention's default 1/sqrt(D), as for the ATTENTION_GRAD op. */
int tr_kernels_bind_attention_backward(struct tr_kernels *k, const struct tr_tensor *q, const struct tr_tensor *kk,
                                       const struct tr_tensor *v, const struct tr_tensor *dy,
                                       const struct tr_tensor *mask, const struct tr_tensor *y,
                                       const struct tr_tensor *lse, float scale, int causal, int window,
                                       const struct tr_tensor *dq, const struct tr_tensor *dk,
                                       const struct tr_tensor *dv, struct tr_kernel_call *call, struct tr_error *err);
/* Bound tr_k_attention_lse with both outputs (the ATTENTION node's and its ATTENTION_LSE's):
 * one pass for the two nodes; scale 0 is 1/sqrt(D). */
int tr_kernels_bind_attention_lse(struct tr_kernels *k, const struct tr_tensor *q, const struct tr_tensor *kk,
                                  const struct tr_tensor *v, const struct tr_tensor *mask, float scale, int causal,
                                  int window, const struct tr_tensor *out, const struct tr_tensor *lse,
                                  struct tr_kernel_call *call, struct tr_error *err);
/* ATTENTION_REL's gradients in one call: in = the op's (q, k, v, rel_h, rel_w, dy), grads
 * = dq, dk, dv, drel_h, drel_w (any NULL: not wanted), shaped and typed as those operands.
 * On the cpu one statistics pass, one pass over the query blocks (dq and both bias
 * terms), one for dk and dv together, where five ATTENTION_REL_GRAD calls run ten; on cuda
 * the statistics once, then the gradient kernels. With the forward's y and lse
 * (tr_k_attention_rel_lse; both or neither) the statistics are read, not recomputed.
 * scale 0: 1/sqrt(D). */
int tr_k_attention_rel_backward(struct tr_kernels *k, const struct tr_tensor in[6], const struct tr_tensor *y,
                                const struct tr_tensor *lse, float scale, struct tr_tensor *const grads[5],
                                struct tr_error *err);
/* Bound form: the call keeps the tensors (in[0..5] the operands, in[6..7] y and lse). */
int tr_kernels_bind_attention_rel_backward(struct tr_kernels *k, const struct tr_tensor in[6],
                                           const struct tr_tensor *y, const struct tr_tensor *lse, float scale,
                                           const struct tr_tensor *const grads[5], struct tr_kernel_call *call,
                                           struct tr_error *err);
/* ATTENTION_REL (in = q, k, v, rel_h, rel_w) in the pass that also gives its
 * ATTENTION_REL_LSE: out (B,H,Tq,Dv), lse (B,H,Tq) f32, either NULL (not both), as
 * tr_k_attention_lse for ATTENTION. scale 0: 1/sqrt(D). */
int tr_k_attention_rel_lse(struct tr_kernels *k, const struct tr_tensor in[5], float scale, struct tr_tensor *out,
                           struct tr_tensor *lse, struct tr_error *err);
/* Bound form with both outputs (the ATTENTION_REL node's and its ATTENTION_REL_LSE's). */
int tr_kernels_bind_attention_rel_lse(struct tr_kernels *k, const struct tr_tensor in[5], float scale,
                                      const struct tr_tensor *out, const struct tr_tensor *lse,
                                      struct tr_kernel_call *call, struct tr_error *err);
/* out = x broadcast to out's shape (numpy rules); any dtype. */
int tr_k_broadcast(struct tr_kernels *k, const struct tr_tensor *x, struct tr_tensor *out, struct tr_error *err);
/* dx = dy routed to the first maximum of x along axis (dy with the axis removed or kept as 1). */
int tr_k_max_grad(struct tr_kernels *k, const struct tr_tensor *x, const struct tr_tensor *dy, int axis, int keepdims,
                  struct tr_tensor *dx, struct tr_error *err);
/* dx = zeros with dy placed at start, start+step, ... along axis (dx's extent there is the full one). */
int tr_k_slice_grad(struct tr_kernels *k, const struct tr_tensor *dy, int axis, int64_t start, int64_t step,
                    struct tr_tensor *dx, struct tr_error *err);
/* out (0-d f32; f64 for f64 logits) = mean over labels not ignored of −log softmax(logits)[label]; all ignored: 0. */
int tr_k_cross_entropy(struct tr_kernels *k, const struct tr_tensor *logits, const struct tr_tensor *labels,
                       int has_ignore, int64_t ignore_index, struct tr_tensor *out, struct tr_error *err);
/* dlogits = dloss/valid·(softmax − onehot) on rows not ignored, 0 elsewhere; dloss one element of any float dtype. */
int tr_k_cross_entropy_grad(struct tr_kernels *k, const struct tr_tensor *logits, const struct tr_tensor *labels,
                            int has_ignore, int64_t ignore_index, const struct tr_tensor *dloss,
                            struct tr_tensor *dlogits, struct tr_error *err);
/* out (0-d f32; f64 for f64 inputs) = mean of (pred − target)². */
int tr_k_mse(struct tr_kernels *k, const struct tr_tensor *pred, const struct tr_tensor *target, struct tr_tensor *out,
             struct tr_error *err);

/* ---- optimizer kernels (optim.c) ---- */
/* out = ADAMW_STEP(param, m, v, lr, step) as ops.h defines it: m, v the already-updated
 * moments (f32, param's shape), lr and step one-element f32 (step >= 1, checked on each
 * call: it is data). Math in f32 (f64 for an f64 param); bf16/f16 rounded to nearest even
 * on store. out may alias param (an update in place). */
int tr_k_adamw_step(struct tr_kernels *k, const struct tr_tensor *param, const struct tr_tensor *m,
                    const struct tr_tensor *v, const struct tr_tensor *lr, const struct tr_tensor *step, float beta1,
                    float beta2, float eps, float weight_decay, struct tr_tensor *out, struct tr_error *err);
/* The whole AdamW update in one pass over its operands, as PyTorch's AdamW(fused=True):
 * m_out = β1·m + (1−β1)·grad and v_out = β2·v + (1−β2)·grad² (f32, rounded as the graph's
 * SCALE, MUL and ADD round them: on the cpu the same bits as those ops), then param_out =
 * ADAMW_STEP(param, m_out, v_out, lr, step). grad has param's shape and is f32 or param's
 * dtype (read as a CAST to f32 would); m, v f32. Each output may be its own input's memory
 * (an update in place) and must share no byte with any other operand. */
int tr_k_adamw_update(struct tr_kernels *k, const struct tr_tensor *param, const struct tr_tensor *m,
                      const struct tr_tensor *v, const struct tr_tensor *grad, const struct tr_tensor *lr,
                      const struct tr_tensor *step, float beta1, float beta2, float eps, float weight_decay,
                      struct tr_tensor *param_out, struct tr_tensor *m_out, struct tr_tensor *v_out,
                      struct tr_error *err);
/* Bound form (in[0..5] param, m, v, grad, lr, step; in[6..7] m_out, v_out; out param_out). */
int tr_kernels_bind_adamw_update(struct tr_kernels *k, const struct tr_tensor *param, const struct tr_tensor *m,
                                 const struct tr_tensor *v, const struct tr_tensor *grad, const struct tr_tensor *lr,
                                 const struct tr_tensor *step, float beta1, float beta2, float eps, float weight_decay,
                                 const struct tr_tensor *param_out, const struct tr_tensor *m_out,
                                 const struct tr_tensor *v_out, struct tr_kernel_call *call, struct tr_error *err);

/* ---- collectives (data parallelism) ----
 * The processes of a data-parallel run, as the host set them up (trident/comm_mpi.h makes
 * one from MPI). ALLREDUCE (ops.h) runs through the one set here: a process has one at a
 * time, set before any backend runs and unset (NULL) after. */
struct tr_comm {
    int rank, size;
    void *user;
    /* buf's n f32 summed over every rank, in place, the same bits on every rank; tag names
     * the collective in a message (ALLREDUCE's bucket). */
    int (*allreduce_f32)(void *user, float *buf, int64_t n, int tag, struct tr_error *err);
    /* root's nbytes at buf copied into every rank's buf */
    int (*bcast)(void *user, void *buf, size_t nbytes, int root, struct tr_error *err);
    /* every rank's nbytes at mine, into all (size × nbytes, in rank order) on every rank */
    int (*allgather)(void *user, const void *mine, void *all, size_t nbytes, struct tr_error *err);
    /* optional (NULL): what this rank is doing now ("torch, step 5"), named when a collective
     * times out; the seconds spent in collectives so far */
    void (*set_phase)(void *user, const char *what);
    double (*seconds)(void *user);
    /* optional (NULL: ALLREDUCE_START sums at once, with allreduce_f32): buf's sum begun,
     * in place, and left in flight; wait_f32 with the same buf returns when it is done
     * (the same bits as allreduce_f32). Sums are started and waited for in the same order
     * on every rank; buf is not touched between the two. */
    int (*start_allreduce_f32)(void *user, float *buf, int64_t n, int tag, struct tr_error *err);
    int (*wait_f32)(void *user, float *buf, struct tr_error *err);
};
void tr_kernels_set_comm(const struct tr_comm *c);
const struct tr_comm *tr_kernels_get_comm(void);

/* out = (Σ over the ranks of x) · scale, x and out f32 of one shape (out may be x).
 * ranks: what the caller's graph was built for, checked against the communicator's size
 * (no communicator: 1 rank). bucket: the tag of the collective. */
int tr_k_allreduce(struct tr_kernels *k, const struct tr_tensor *x, int64_t ranks, int64_t bucket, float scale,
                   struct tr_tensor *out, struct tr_error *err);
/* ALLREDUCE in halves (ops.h ALLREDUCE_START / _WAIT). start: out = x, its sum over the
 * ranks begun in out (out may be x). wait: x an ALLREDUCE_START's out, waited for; out =
 * the sum · scale (out may be x). Attributes as tr_k_allreduce's. */
int tr_k_allreduce_start(struct tr_kernels *k, const struct tr_tensor *x, int64_t ranks, int64_t bucket,
                         struct tr_tensor *out, struct tr_error *err);
int tr_k_allreduce_wait(struct tr_kernels *k, const struct tr_tensor *x, int64_t ranks, int64_t bucket, float scale,
                        struct tr_tensor *out, struct tr_error *err);

#ifdef __cplusplus
}
#endif
#endif
