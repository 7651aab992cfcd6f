/* trident — the op set of the graph IR and the meaning of each op's attributes.
 *
 * Every node has exactly one output. Float ops take inputs of one float dtype and give
 * that dtype (arithmetic inside in f32 at least). Shapes are outermost first.
 * Attributes live in struct tr_attrs; the table below says which field means what.
 * This list is the single source: enum values, names and arity are generated from it.
 * Values are only ever appended (they cross the plugin ABI).
 *
 *   X(NAME, "name", n_inputs)     n_inputs -1: variadic
 *
 *   INPUT        fed per step (synthetic batch)            attrs: -
 *   PARAM        a weight; host data bound by core         floats[0]=init mean, floats[1]=init std
 *   CONST        host data held by the graph               -
 *   MATMUL       a (...,M,K) · b (...,K,N) -> (...,M,N)   ints[0]=trans_a, ints[1]=trans_b
 *                (transposes swap the last two axes of the operand). Batch axes of a and b
 *                broadcast (numpy rules), b may be 2-D and is then shared by every batch.
 *                floats[0]=alpha (the product is scaled by alpha; 0 means 1, stored
 *                resolved: tr_matmul_alpha).
 *   ADD SUB MUL DIV  numpy broadcasting of the two inputs
 *   GELU         ints[0]=0: x/2·(1+erf(x/√2)); 1: tanh approximation
 *   TANH RELU SILU SIGMOID EXP NEG SQRT RSQRT   elementwise
 *   SCALE        alpha·x + beta                            floats[0]=alpha, floats[1]=beta
 *   SOFTMAX      over the last axis
 *   LAYER_NORM   x (...,D), gamma (D), beta (D) over the last axis   floats[0]=eps
 *   EMBEDDING    table (V,D), ids (...) of i32/i64 -> (...,D); an id outside [0,V) is an
 *                error at run time (the kernel returns TR_ERR_INVALID). ints[0]=1: row
 *                ints[1] is the padding row (torch's nn.Embedding(padding_idx)): the same
 *                forward, and no gradient ever reaches that row
 *   RESHAPE      ints[0..n_ints-1] = new shape (one entry may be -1)
 *   TRANSPOSE    ints[0..ndim-1] = perm: out.shape[i] = in.shape[perm[i]]
 *   SLICE        ints[0]=axis, ints[1]=start, ints[2]=end (exclusive), ints[3]=step (>0)
 *   CONCAT       ints[0]=axis; all inputs equal elsewhere
 *   SUM MEAN MAX ints[0]=axis, ints[1]=keepdims (0/1)
 *   CAST         ints[0]=target dtype (enum tr_dtype)
 *   ATTENTION    q (B,H,Tq,D), k (B,Hk,Tk,D), v (B,Hk,Tk,Dv), [mask] -> (B,H,Tq,Dv)
 *                H a multiple of Hk (grouped-query heads). mask, optional 4th input, is
 *                additive, f32 or q's dtype, broadcastable to (B,H,Tq,Tk).
 *                floats[0]=scale (applied to q·kᵀ; 0 means 1/√D, stored resolved:
 *                tr_attention_default_scale), ints[0]=causal (0/1),
 *                ints[1]=window (0: none; else key j is seen by query i only when
 *                i - window < j <= i, positions aligned at the end of k)
 *
 *   Training: gradients and losses (reverse-mode autodiff emits these; any float dtype,
 *   f64 included, so that rules can be checked by finite differences).
 *   UNARY_GRAD   (x, dy) -> dx of the unary op ints[0] (GELU TANH RELU SILU SIGMOID EXP
 *                NEG SQRT RSQRT SCALE) taken at x; ints[1]: GELU's approximate flag;
 *                floats[0]: SCALE's alpha. RELU'(0) = 0.
 *   SOFTMAX_GRAD (y, dy) -> dx = y·(dy − Σ dy·y) over the last axis; y is softmax's output
 *   LAYER_NORM_GRAD        (x, gamma, dy) -> dx; gamma (D)             floats[0]=eps
 *   LAYER_NORM_GRAD_GAMMA  (x, dy) -> dgamma (D) = Σ over rows of dy·x̂  floats[0]=eps
 *                (dbeta is a SUM of dy over the rows)
 *   EMBEDDING_GRAD (ids, dy (...,D)) -> dtable (V,D): rows of dy added at their ids,
 *                zeros elsewhere                                          ints[0]=V;
 *                ints[1]=1: row ints[2] (the padding row) zeros whatever the ids
 *   ATTENTION_GRAD (q, k, v, dy, [mask], [y, lse]) -> dq, dk or dv (ints[2] = 0, 1 or 2,
 *                shaped like that operand); scale, causal and window as ATTENTION's
 *                attrs. With y (the ATTENTION's output) and lse (its ATTENTION_LSE) the
 *                backward reuses the forward's statistics instead of recomputing them
 *                (4 or 5 inputs: without, 6 or 7: with); the result is the same function.
 *   ATTENTION_LSE (q, k, v, [mask]) -> lse (B,H,Tq): the log-sum-exp over the keys of
 *                ATTENTION's scaled, masked scores, per query row, with ATTENTION's
 *                attrs; f32 (f64 for f64 operands); +inf for a row that sees no key (so
 *                exp(s - lse) is 0 there). Autodiff emits it beside each ATTENTION it
 *                differentiates; a backend computes both in one pass.
 *   BROADCAST    x -> the shape ints[0..n_ints-1] by numpy broadcasting
 *   MAX_GRAD     (x, dy) -> dx: dy (x reduced over ints[0], keepdims ints[1]) routed to
 *                the first maximum along that axis, zeros elsewhere
 *   SLICE_GRAD   dy -> dx: zeros, with dy placed where SLICE took it: ints[0]=axis,
 *                ints[1]=start, ints[3]=step (normalised, >= 0), ints[4]=the axis' full extent
 *   CROSS_ENTROPY      (logits (N,C), labels (N) i32/i64) -> 0-d f32: mean over the
 *                labels that are not ignored of −log softmax(logits)[label]; ints[1]=1
 *                makes ints[0] the ignore index. A label outside [0,C) is an error.
 *                Every label ignored: 0, and a zero gradient (PyTorch's mean is NaN).
 *   CROSS_ENTROPY_GRAD (logits, labels, dloss (0-d)) -> dlogits, logits' dtype and shape
 *   MSE          (pred, target) -> 0-d f32 mean of (pred − target)²
 *   ADAMW_STEP   (param, m, v, lr (0-d), step (0-d, t >= 1)) -> param': m and v are the
 *                already-updated moments (f32); param' = param − lr·(m̂/(√v̂ + eps) +
 *                wd·param) with m̂ = m/(1−β1^t), v̂ = v/(1−β2^t). floats[0]=β1, [1]=β2,
 *                [2]=eps, [3]=wd (decoupled weight decay, as torch.optim.AdamW)
 *
 *   Decoder LLMs (Gemma, Mistral):
 *   RMS_NORM     x (...,D), w (D) -> x / √(mean(x²) + eps) · w over the last axis, in f32
 *                inside; floats[0]=eps; ints[0]=1: Gemma's (1 + w) scaling instead of w
 *   RMS_NORM_GRAD   (x, w, dy) -> dx       (attrs as RMS_NORM)
 *   RMS_NORM_GRAD_W (x, dy) -> dw (D) = Σ over rows of dy·x̂ (attrs as RMS_NORM; the same
 *                for both scalings, since d(1+w) = dw)
 *   ROPE         x (B,H,T,D), pos (B,T) or (T) i32/i64 -> x rotated as Hugging Face's
 *                rotate_half layout: for i < R/2, with θ_i = base^(−2i/R) and a = pos·θ_i,
 *                y_i = x_i·cos a − x_{i+R/2}·sin a, y_{i+R/2} = x_{i+R/2}·cos a + x_i·sin a;
 *                dims ≥ R pass through. floats[0]=base (rope_theta); ints[0]=R (0: D);
 *                ints[1]=1: the inverse rotation (−a), which is ROPE's gradient.
 *                pos carries the absolute positions (decoding's offset, left padding).
 *
 *   In-place state (KV caches held as PARAMs, see tr_graph_add_update):
 *   UPDATE_SLICE (x, update, start) -> x with the slice [start, start+n) along axis
 *                replaced by update. x any float dtype or i32; update has x's dtype and
 *                shape except along axis, where it has n <= x's extent; start is an i32
 *                tensor of exactly one element, read at run time (on a device it stays
 *                in device memory, so a captured graph stays valid). ints[0]=axis
 *                (negative counts from the end; stored normalised). start < 0 or
 *                start + n > extent is an error at run time (TR_ERR_INVALID; a device
 *                kernel skips the write and raises its error flag). A backend may
 *                compute it in x's memory (tr_pir_reads_in_place), writing only the slice.
 *
 *   Vision (Stable Diffusion's UNet and VAE), activations channels last throughout:
 *   CONV2D       x (N,H,W,Cin), w (Cout,Cin,KH,KW), [bias (Cout)] -> (N,OH,OW,Cout) with
 *                OH = (H + 2·pad + pad_end − KH)/stride + 1 (floor), likewise OW: a
 *                cross-correlation as torch's conv2d on NHWC activations, its weights in
 *                torch's own (O,I,H,W) layout, so that a checkpoint's tensors bind as they
 *                are. ints[0]=stride (>= 1, both axes; 0 means 1, stored resolved),
 *                ints[1]=padding (>= 0, zeros on every side), ints[2]=dilation,
 *                ints[3]=groups: only 1 for now (0 means 1, stored resolved; other values
 *                are refused), ints[4]=pad_end (>= 0: more zeros at the bottom and right
 *                only, diffusers' Downsample2D F.pad(x, (0,1,0,1))). bias has x's dtype or
 *                is f32.
 *   GROUP_NORM   x (N,H,W,C), gamma (C), beta (C) -> x normalised over each (n, group) of
 *                C/G consecutive channels and all of H,W, then ·gamma + beta per channel
 *                (torch's group_norm on NCHW). ints[0]=G groups (C % G == 0), floats[0]=eps,
 *                ints[1]=1: SiLU applied after (the fused form the UNet uses), 0: none.
 *   CONV2D_GRAD_INPUT  (dy (N,OH,OW,Cout), w) -> dx (N,H,W,Cin): CONV2D's attrs, and
 *                ints[5]=H, ints[6]=W (the floor in OH loses them)
 *   CONV2D_GRAD_WEIGHT (x, dy) -> dw (Cout,Cin,KH,KW): CONV2D's attrs, ints[5]=KH,
 *                ints[6]=KW, ints[7]=Cout (dy's channels; stored by the shape rule).
 *                (dbias is a SUM of dy over N,H,W)
 *   GROUP_NORM_GRAD       (x, gamma, dy) -> dx: ints[0]=G, floats[0]=eps; no SiLU (the
 *                gradient of the fused form takes SiLU's gradient first)
 *   GROUP_NORM_GRAD_GAMMA (x, dy) -> dgamma (C) = Σ over N,H,W of dy·x̂: attrs as above
 *                (dbeta is a SUM of dy over N,H,W)
 *   TIMESTEP_EMBEDDING t (N) -> (N, D), t's float dtype: diffusers' sinusoidal
 *                get_timestep_embedding. With h = D/2 and f_i = exp(−ln(max_period)·i/(h −
 *                shift)), i < h, the row is [sin(t·f_0..h−1), cos(t·f_0..h−1)], or [cos, sin]
 *                with ints[1]=1 (flip_sin_to_cos), computed in double. ints[0]=D (even, >= 2),
 *                floats[0]=shift (downscale_freq_shift, < h), floats[1]=max_period (> 0; 0
 *                means 10000, stored resolved). No gradient (a timestep is not trained).
 *
 *   SegmentAnything's image encoder:
 *   ATTENTION_REL q (B,H,Tq,D), k (B,Hk,Tk,D), v (B,Hk,Tk,Dv), rel_h (B,H,Tq,Kh),
 *                rel_w (B,H,Tq,Kw) -> (B,H,Tq,Dv): attention whose scores carry a
 *                decomposed relative-position bias (MViTv2, SAM's ViT), keys laid out as a
 *                Kh x Kw grid (Tk = Kh·Kw, key j at row j / Kw, column j % Kw):
 *                s_ij = scale·q_i·k_j + rel_h[i, j / Kw] + rel_w[i, j % Kw]. The (Tq,Tk)
 *                bias is never formed: rel_h and rel_w are Kh and Kw wide (the model makes
 *                them, q·R, with MATMULs). rel_h, rel_w: q's dtype or f32.
 *                floats[0]=scale (0 means 1/√D, stored resolved). No causal mask.
 *   ATTENTION_REL_GRAD (q, k, v, rel_h, rel_w, dy, [y, lse]) -> the gradient of operand
 *                ints[0] (0 dq, 1 dk, 2 dv, 3 drel_h, 4 drel_w), shaped and typed like it;
 *                floats[0] as ATTENTION_REL's. drel_h[i, a] = Σ over the keys of row a
 *                of dS_ij, drel_w[i, b] = Σ over the keys of column b (dS the scores'
 *                gradient). With y (the ATTENTION_REL's output) and lse (its
 *                ATTENTION_REL_LSE) the backward reads the forward's statistics instead
 *                of recomputing them (6 inputs: without, 8: with); the same function.
 *   ATTENTION_REL_LSE (q, k, v, rel_h, rel_w) -> lse (B,H,Tq): ATTENTION_LSE's statistics
 *                of ATTENTION_REL's biased scores, with ATTENTION_REL's attrs; f32 (f64
 *                for f64 operands). Autodiff emits it beside each ATTENTION_REL it
 *                differentiates; a backend computes both in one pass. An op of its own,
 *                not a 5-input ATTENTION_LSE: the operands and the attrs are
 *                ATTENTION_REL's, and ATTENTION_LSE's 4th input is a mask.
 *
 *   Data parallelism (several processes; kernels.h's struct tr_comm):
 *   ALLREDUCE    x (f32, any shape) -> Σ over the ranks of x, times floats[0] (1/ranks for
 *                the mean), the same bits on every rank. ints[0] = the ranks the graph was
 *                built for (run under another count, it is refused), ints[1] = its bucket's
 *                index (for messages). Without a communicator and with ints[0] = 1 it is
 *                x·floats[0]. No gradient (the training step's last word before the optimizer).
 *   ALLREDUCE_START x -> the same sum, begun: out holds x and the sum is in flight in it
 *                (the communicator's progress thread) until the ALLREDUCE_WAIT that
 *                takes out as its input; nothing else may read out before then. Placed
 *                as soon as a gradient bucket is final, so that the sum overlaps the
 *                rest of the backward pass. Attributes as ALLREDUCE's; floats[0] is 1.
 *   ALLREDUCE_WAIT s (an ALLREDUCE_START) -> the sum begun by s, times floats[0]; ints as
 *                s's. All ranks start and wait their collectives in the same order (the
 *                graph's), as MPI's non-blocking collectives require.
 */
#ifndef TRIDENT_OPS_H
#define TRIDENT_OPS_H

#include <math.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TR_OP_LIST(X)                  \
    X(INPUT,      "input",       0)    \
    X(PARAM,      "param",       0)    \
    X(CONST,      "const",       0)    \
    X(MATMUL,     "matmul",      2)    \
    X(ADD,        "add",         2)    \
    X(SUB,        "sub",         2)    \
    X(MUL,        "mul",         2)    \
    X(DIV,        "div",         2)    \
    X(GELU,       "gelu",        1)    \
    X(TANH,       "tanh",        1)    \
    X(RELU,       "relu",        1)    \
    X(SILU,       "silu",        1)    \
    X(SIGMOID,    "sigmoid",     1)    \
    X(EXP,        "exp",         1)    \
    X(NEG,        "neg",         1)    \
    X(SQRT,       "sqrt",        1)    \
    X(RSQRT,      "rsqrt",       1)    \
    X(SCALE,      "scale",       1)    \
    X(SOFTMAX,    "softmax",     1)    \
    X(LAYER_NORM, "layer_norm",  3)    \
    X(EMBEDDING,  "embedding",   2)    \
    X(RESHAPE,    "reshape",     1)    \
    X(TRANSPOSE,  "transpose",   1)    \
    X(SLICE,      "slice",       1)    \
    X(CONCAT,     "concat",     -1)    \
    X(SUM,        "sum",         1)    \
    X(MEAN,       "mean",        1)    \
    X(MAX,        "max",         1)    \
    X(CAST,       "cast",        1)    \
    X(ATTENTION,  "attention",  -1)    \
    X(UNARY_GRAD, "unary_grad",  2)    \
    X(SOFTMAX_GRAD, "softmax_grad", 2) \
    X(LAYER_NORM_GRAD, "layer_norm_grad", 3) \
    X(LAYER_NORM_GRAD_GAMMA, "layer_norm_grad_gamma", 2) \
    X(EMBEDDING_GRAD, "embedding_grad", 2) \
    X(ATTENTION_GRAD, "attention_grad", -1) \
    X(BROADCAST,  "broadcast",   1)    \
    X(MAX_GRAD,   "max_grad",    2)    \
    X(SLICE_GRAD, "slice_grad",  1)    \
    X(CROSS_ENTROPY, "cross_entropy", 2) \
    X(CROSS_ENTROPY_GRAD, "cross_entropy_grad", 3) \
    X(MSE,        "mse",         2)    \
    X(ADAMW_STEP, "adamw_step",  5)    \
    X(RMS_NORM,   "rms_norm",    2)    \
    X(RMS_NORM_GRAD, "rms_norm_grad", 3) \
    X(RMS_NORM_GRAD_W, "rms_norm_grad_w", 2) \
    X(ROPE,       "rope",        2)    \
    X(UPDATE_SLICE, "update_slice", 3) \
    X(CONV2D,     "conv2d",     -1)    \
    X(GROUP_NORM, "group_norm",  3)    \
    X(CONV2D_GRAD_INPUT, "conv2d_grad_input", 2) \
    X(CONV2D_GRAD_WEIGHT, "conv2d_grad_weight", 2) \
    X(GROUP_NORM_GRAD, "group_norm_grad", 3) \
    X(GROUP_NORM_GRAD_GAMMA, "group_norm_grad_gamma", 2) \
    X(TIMESTEP_EMBEDDING, "timestep_embedding", 1) \
    X(ATTENTION_REL, "attention_rel", 5) \
    X(ATTENTION_REL_GRAD, "attention_rel_grad", -1) \
    X(ALLREDUCE,  "allreduce",   1)    \
    X(ALLREDUCE_START, "allreduce_start", 1) \
    X(ALLREDUCE_WAIT, "allreduce_wait", 1) \
    X(ATTENTION_LSE, "attention_lse", -1) \
    X(ATTENTION_REL_LSE, "attention_rel_lse", 5)

enum tr_op {
#define TR_OP_ENUM_(name, str, n) TR_OP_##name,
    TR_OP_LIST(TR_OP_ENUM_)
#undef TR_OP_ENUM_
    TR_OP_COUNT
};

/* An activation: a GEMM epilogue and fused ops' (kernels.h), a model's hidden_act. */
enum tr_act {
    TR_ACT_NONE = 0,
    TR_ACT_GELU = 1,       /* erf form */
    TR_ACT_GELU_TANH = 2,
    TR_ACT_RELU = 3,
    TR_ACT_TANH = 4,
    TR_ACT_SILU = 5,
};

#define TR_ATTR_INTS 8
#define TR_ATTR_FLOATS 4

struct tr_attrs {
    int64_t ints[TR_ATTR_INTS];
    float floats[TR_ATTR_FLOATS];
    int32_t n_ints;     /* how many of ints[] are meaningful (RESHAPE, TRANSPOSE) */
    int32_t reserved;
};

const char *tr_op_name(int op);        /* "matmul"; "?" for an unknown value */
int tr_op_arity(int op);               /* fixed input count, or -1 for variadic */
int tr_op_from_name(const char *s);    /* -1 if unknown */
int tr_op_is_elementwise_unary(int op);
int tr_op_is_elementwise_binary(int op);
/* 1 for the ops only a training step has (gradients, an optimizer step): a backend
 * without TR_CAP_TRAINING is not given them. */
int tr_op_is_training(int op);

/* Attribute defaults, the one definition of each. Graph build (graph_infer.c) stores them
 * resolved, so a graph's nodes always carry the value; kernels called directly
 * (tr_kernels_run, tr_kernels_bind_*) with the unset 0 resolve it through these same
 * functions, so every path gives the same bits.
 *
 * ATTENTION / ATTENTION_GRAD: scale 0 means 1/sqrt(D), D the head dimension, computed in
 * double and rounded once to float. (1.0f / sqrtf((float)D) rounds twice and differs in
 * the last bit for 242 of the D in 1..1024, 96 and 112 among them.) */
static inline float tr_attention_default_scale(int64_t d) { return (float)(1.0 / sqrt((double)d)); }
/* The scale a node or call with floats[0] = scale means over q's head dimension d; d <= 0
 * (a shape that is refused elsewhere) leaves scale as it is. */
static inline float tr_attention_scale(float scale, int64_t d) {
    return scale == 0.0f && d > 0 ? tr_attention_default_scale(d) : scale;
}
/* MATMUL: alpha 0 is an attribute left unset and means 1 (a product scaled by 0 is not
 * something a graph asks for). */
static inline float tr_matmul_alpha(float alpha) { return alpha == 0.0f ? 1.0f : alpha; }

#ifdef __cplusplus
}
#endif
#endif
