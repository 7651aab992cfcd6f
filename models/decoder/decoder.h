/* Decoder-only LLMs of the Llama family as trident graphs: Gemma (GemmaForCausalLM) and
 * Mistral (MistralForCausalLM). The two differ only in a few traits (embedding scale,
 * RMS norm scaling, feed-forward activation, tied logits, sliding window), so they share
 * one config struct and one graph builder; gemma.c and mistral.c hold the descriptors.
 *
 * One decoder pass, for batch B, T new tokens after P cached ones (D hidden, H heads,
 * Hk key/value heads, Dh head_dim, V vocab; dtype the build's):
 *   inputs, in order:
 *     input_ids      i32 [B,T]
 *     position_ids   i32 [B,T]   absolute positions fed to RoPE (left padding: HF's
 *                                cumsum(mask) - 1, and 1 on pad tokens)
 *     attention_mask f32 [B,P+T] additive over the keys: 0 keep, a large negative (the
 *                                synthetic batch writes TR_DECODER_MASK_NEG) to hide a
 *                                pad token; with full_mask, f32 [B,T,P+T] instead
 *     past_key_values.<l>.key, past_key_values.<l>.value   (only when P > 0), for each
 *                                layer l: [B,Hk,P,Dh], keys already rotated (as HF caches)
 *   outputs, in order:
 *     logits         [B,T,V] (or [B,V], the last position's, with last_logits)
 *     present.<l>.key, present.<l>.value   (only with present): [B,Hk,T,Dh], this pass's
 *                                rotated keys and its values, for the caller's cache
 * Attention runs over concat(past, new) along the time axis. Without full_mask the op
 * applies causality and the sliding window itself, positions aligned at the end of the
 * keys (query i of T is at key P + i): right for a prefill (P = 0) and for a cache whose
 * P slots all hold earlier tokens. With full_mask the op applies neither and the mask
 * carries causality, the window and free cache slots: decoding against a preallocated
 * cache whose unwritten slots are not at its start.
 *
 * Parameters carry Hugging Face's state_dict names ("model.embed_tokens.weight",
 * "model.layers.0.self_attn.q_proj.weight", "model.layers.0.mlp.gate_proj.weight",
 * "model.norm.weight", "lm_head.weight"), Linear weights [out,in], no biases; Gemma
 * ties the logits to model.embed_tokens.weight and has no lm_head.weight. From a seed:
 * Linear and embedding weights normal(0, 0.02) (HF's initializer_range); norm weights
 * normal(0, 0.02) for Gemma (scaled by 1 + w) and normal(1, 0.02) for Mistral.
 *
 * Every Linear layer is made by one function in decoder.c (proj): that is where LoRA
 * adapters on q_proj / v_proj go when the fit task comes.
 */
#ifndef TRIDENT_MODELS_DECODER_H
#define TRIDENT_MODELS_DECODER_H

#include <stdint.h>
#include "trident/model.h"

/* What a synthetic batch writes in attention_mask to hide a pad token. Finite, so a row
 * that sees only pad keys (a pad query) stays finite on every backend. */
#define TR_DECODER_MASK_NEG (-1e9f)

/* Traits fixed by the descriptor, not keys. */
enum tr_decoder_family { TR_DECODER_GEMMA = 0, TR_DECODER_MISTRAL = 1 };

/* The keys of [model]; names and meanings as in the Hugging Face config.json. */
struct tr_decoder_config {
    enum tr_decoder_family family;
    int64_t vocab_size;
    int64_t hidden_size;
    int64_t intermediate_size;
    int64_t num_hidden_layers;
    int64_t num_attention_heads;
    int64_t num_key_value_heads;   /* divides num_attention_heads (1: MQA) */
    int64_t head_dim;              /* 0: hidden_size / num_attention_heads */
    int64_t max_position_embeddings;
    int64_t sliding_window;        /* 0: full causal attention */
    double rms_norm_eps;
    double rope_theta;
    int tie_word_embeddings;       /* logits = h · embed_tokensᵀ; no lm_head.weight */
    char hidden_act[64];           /* gelu_pytorch_tanh (Gemma; "gelu" means it too), silu */
    double pad_fraction;           /* synthetic batch: left padding, as BERT's */
    /* A Hugging Face config.json whose keys replace the ones above (preset and [model]
     * both) when the graph is built; "" none. Relative to the working directory. */
    char hf_config[64];
};

/* The resolved config: c with hf_config applied (if any), validated. */
int tr_decoder_resolve(const struct tr_decoder_config *c, struct tr_decoder_config *out, struct tr_error *err);

/* Overwrite c's fields with the keys of the config.json at path (keys it does not have
 * are left alone; model_type must be the family's; head_dim null or absent means
 * hidden_size / num_attention_heads, sliding_window null means 0; rope_theta or
 * rope_parameters.rope_theta; a rope scaling other than "default" is refused). */
int tr_decoder_read_hf_config(const char *path, struct tr_decoder_config *c, struct tr_error *err);

/* Checks c (and the pass, if not NULL) and returns a message naming the key. */
int tr_decoder_validate(const struct tr_decoder_config *c, const struct tr_build_opts *o, struct tr_error *err);

int64_t tr_decoder_head_dim(const struct tr_decoder_config *c);

/* Parameters of the model (no graph needed): what a 7B preset reports before any
 * weight is allocated. */
int64_t tr_decoder_param_count(const struct tr_decoder_config *c);

struct tr_decoder_pass {
    enum tr_dtype dtype;     /* f32, bf16 or f16 */
    int64_t batch;           /* B */
    int64_t seq_len;         /* T: new tokens */
    int64_t past_len;        /* P: cached tokens before them; 0: no past inputs */
    int full_mask;           /* attention_mask is [B,T,P+T] and carries causality and the window */
    int present;             /* output each layer's new keys and values */
    int last_logits;         /* logits of the last position only: [B,V] */
};

/* Build one decoder pass (the layout above) into g, from a resolved config. The caller
 * has validated c (tr_decoder_resolve). *logits, if not NULL, gets the logits node. */
int tr_decoder_build_pass(const struct tr_decoder_config *c, const struct tr_decoder_pass *p, struct tr_graph *g,
                          int *logits, struct tr_error *err);

/* Shared parts of the two descriptors. */
int tr_decoder_build(const void *config, const struct tr_build_opts *o, struct tr_graph *g, struct tr_error *err);

/* Synthetic batch for predict: tokens uniform in [1, vocab) from the seed; sample b is
 * left-padded by floor((b mod 4)·pad_fraction·T) tokens (at most T - 1): pad id 0, mask
 * TR_DECODER_MASK_NEG, position 1 (HF's generate); kept tokens get positions 0, 1, ... */
int tr_decoder_make_inputs(const void *config, const struct tr_build_opts *o, uint64_t seed, int n,
                           struct tr_tensor *inputs, struct tr_error *err);
int tr_decoder_pad_len(const struct tr_decoder_config *c, int64_t b, int64_t seq_len);

#endif
