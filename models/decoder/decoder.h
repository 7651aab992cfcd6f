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
 *     attention_mask f32 [B,P+T] over the keys, as Hugging Face's: 1 attend, 0 hide (a
 *                                pad token); the graph makes it the attention op's
 *                                additive mask (0 / TR_DECODER_MASK_NEG); with full_mask,
 *                                f32 [B,T,P+T] instead, the same 1/0
 *     cache_pos      i32 [1]     (only with cache_slots and full_mask) the cache slot
 *                                this pass's keys and values are written at
 *     past_key_values.<l>.key, past_key_values.<l>.value   (only when P > 0), for each
 *                                layer l: [B,Hk,P,Dh], keys already rotated (as HF caches)
 *     labels         i32 [B,T]   (fit only) transformers' labels: the tokens (labels =
 *                                input_ids), TR_DECODER_IGNORE (-100, HF's ignore index)
 *                                where nothing is learnt; position t is trained to
 *                                predict labels[t + 1] (the graph shifts them, as
 *                                transformers' loss does; labels[:, 0] is never read)
 *   fit: no output; the 0-d f32 node "loss" is the causal LM cross-entropy, the mean over
 *   the labels not ignored of −log softmax(logits[b,t])[labels[b,t+1]] (what transformers
 *   computes with labels=input_ids), and core makes it the graph's output (train.h).
 *   outputs, in order (predict, decoding):
 *     logits         [B,T,V] (or [B,V], the last position's, with last_logits)
 *     present.<l>.key, present.<l>.value   (only with present): [B,Hk,T,Dh], this pass's
 *                                rotated keys and its values, for the caller's cache
 *   state (only with cache_slots): the PARAMs cache.<l>.key / .value, updated in place
 *                                (struct tr_decoder_pass below); no past, no present
 * Attention runs over concat(past, new) along the time axis (over the updated cache with
 * cache_slots and full_mask). Without full_mask the op applies causality and the sliding
 * window itself, positions aligned at the end of the keys (query i of T is at key P + i):
 * right for a prefill (P = 0) and for a cache whose P slots all hold earlier tokens. With full_mask the op applies neither and the mask
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
 * Every Linear layer is made by one function in decoder.c (proj), which adds the LoRA
 * adapters of a fit (lora.c).
 */
#ifndef TRIDENT_MODELS_DECODER_H
#define TRIDENT_MODELS_DECODER_H

#include <stdint.h>
#include "trident/model.h"

/* What the graph adds to the scores of a key that attention_mask hides. Finite, so a
 * row that sees only pad keys (a pad query) stays finite on every backend. */
#define TR_DECODER_MASK_NEG (-1e9f)

/* A label the fit loss skips (transformers' and torch's ignore_index). */
#define TR_DECODER_IGNORE (-100)

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
    int attention_bias;            /* q/k/v/o_proj carry a bias (GemmaConfig's; Mistral's never) */
    char hidden_act[64];           /* ACT2FN name (layers.h TR_NN_ACTS; Gemma reads "gelu" as the tanh form) */
    double pad_fraction;           /* synthetic batch: left padding, as BERT's */
    int64_t pad_token_id;          /* embed_tokens' padding row (no gradient); -1: none */
    char eos_token_id[64];         /* end-of-sequence ids, "1" or "1,107" (config.json's int or
                                      list); "": none. A [generate] prompt's printed text ends
                                      at the first, where transformers' generate stops */
    /* LoRA of the fit task (peft's LoraConfig, keras-hub's enable_lora). lora_rank r > 0:
     * each target Linear W (out,in) gets PARAMs "<layer>.lora_A.weight" f32 (r,in),
     * normal(0, 1/r), and "<layer>.lora_B.weight" f32 (out,r), zeros, and computes
     * x·Wᵀ + cast((lora_alpha/r)·(x·Aᵀ)·Bᵀ); only the adapters train. lora_rank 0: no
     * adapters, fit trains every parameter. lora_alpha 0 means alpha = r (scaling 1, as
     * Keras' enable_lora). lora_targets: comma-separated among q_proj, k_proj, v_proj,
     * o_proj, gate_proj, up_proj, down_proj; "" means "q_proj,v_proj". Predict and the
     * decoding passes are the plain model (the presets carry a rank for the fit benchmark),
     * unless lora_predict: then they apply the adapters too, as a PeftModel does. */
    int64_t lora_rank;
    double lora_alpha;
    char lora_targets[64];
    int lora_predict; /* predict and generate apply the adapters too (a PeftModel's outputs) */
    /* [model] hf_config = PATH is not a field: it is the descriptors' read_hf_config hook
     * (model.h), which core calls with PATH resolved against the INI's directory, the
     * file (a key it leaves out the config class's default) over the preset and the other
     * [model] lines over the file. */
};

/* c copied to out and validated: what build and generate start from. */
int tr_decoder_resolve(const struct tr_decoder_config *c, struct tr_decoder_config *out, struct tr_error *err);

/* Overwrite c's fields with the keys of the config.json at path (keys it does not have
 * are left alone; model_type must be the family's; head_dim null or absent means
 * hidden_size / num_attention_heads, sliding_window null means 0; rope_theta or
 * rope_parameters.rope_theta; a rope scaling other than "default" is refused). Errors
 * name the file and the JSON key. Gemma's and Mistral's read_hf_config. */
int tr_decoder_read_hf_config(const char *path, struct tr_decoder_config *c, struct tr_error *err);
/* The same as a descriptor's read_hf_config hook (config is a struct tr_decoder_config). */
int tr_decoder_read_hf_config_hook(void *config, const char *path, struct tr_error *err);

/* Checks c (and the pass, if not NULL) and returns a message naming the key. */
int tr_decoder_validate(const struct tr_decoder_config *c, const struct tr_build_opts *o, struct tr_error *err);

int64_t tr_decoder_head_dim(const struct tr_decoder_config *c);

/* Parameters of the model (no graph needed): what a 7B preset reports before any
 * weight is allocated. */
int64_t tr_decoder_param_count(const struct tr_decoder_config *c);

/* LoRA (lora.c). Targets, in the order of their bits in a mask. */
enum { TR_DECODER_LORA_Q, TR_DECODER_LORA_K, TR_DECODER_LORA_V, TR_DECODER_LORA_O, TR_DECODER_LORA_GATE,
       TR_DECODER_LORA_UP, TR_DECODER_LORA_DOWN, TR_DECODER_LORA_N };
#define TR_DECODER_LORA_DEFAULT "q_proj,v_proj"

/* What the LoRA keys resolve to; rank 0: no adapters. */
struct tr_decoder_lora {
    int64_t rank;
    float scale;     /* alpha / rank */
    unsigned mask;   /* bit (1u << TR_DECODER_LORA_*) per target */
};

/* Parse lora_targets and check lora_rank against each target's in and out features. */
int tr_decoder_lora_resolve(const struct tr_decoder_config *c, struct tr_decoder_lora *lr, struct tr_error *err);

/* The target index of a Linear's name ("v_proj"), -1 when it is none. */
/* The targets' module paths in a layer (tr_model_desc.lora_modules). */
extern const char *const tr_decoder_lora_modules[];
int tr_decoder_lora_target(const char *layer);

/* Inside the Linear's scope: when lr adapts target, add its adapters (PARAMs named above)
 * and return y + the adapter term (dtype dt); else return y. x is the Linear's input (dt);
 * *x32, when not NULL, caches x cast to f32 across the Linears that read x (-1: none yet). */
int tr_decoder_lora_apply(struct tr_graph *g, const struct tr_decoder_lora *lr, int target, int x, int *x32, int y,
                          int64_t in, int64_t out, enum tr_dtype dt);

/* The descriptors' trainable: with lora_rank > 0 the adapters of g, else every PARAM. */
int tr_decoder_trainable(const void *config, const struct tr_graph *g, int *ids, int max, int *n,
                         struct tr_error *err);

struct tr_decoder_pass {
    enum tr_dtype dtype;     /* f32, bf16 or f16 */
    int64_t batch;           /* B */
    int64_t seq_len;         /* T: new tokens */
    int64_t past_len;        /* P: cached tokens before them; 0: no past inputs */
    int full_mask;           /* attention_mask is [B,T,P+T] and carries causality and the window */
    int present;             /* output each layer's new keys and values */
    int last_logits;         /* logits of the last position only: [B,V] */
    const struct tr_decoder_lora *lora; /* adapters to add; NULL: none */
    int loss;                /* fit: input "labels" and the node "loss" instead of the logits output */
    /* > 0: the KV cache is state of the graph, cache_slots slots long (generate's passes;
     * past_len 0, present 0): PARAMs "cache.<l>.key" and "cache.<l>.value" [B,Hk,slots,Dh]
     * (init zeros; never trained or loaded), each updated (tr_graph_add_update) with this
     * pass's T rotated keys / values written in at a slot by UPDATE_SLICE. With full_mask
     * (decode) the slot is the INPUT "cache_pos" i32 [1] after attention_mask, the mask is
     * [B,T,slots] and attention runs over the updated cache; without (prefill) the entries
     * go to slots 0 .. T-1 and attention runs over this pass's own keys. */
    int64_t cache_slots;
};

/* Build one decoder pass (the layout above) into g, from a resolved config. The caller
 * has validated c (tr_decoder_resolve). *logits, if not NULL, gets the logits node. */
int tr_decoder_build_pass(const struct tr_decoder_config *c, const struct tr_decoder_pass *p, struct tr_graph *g,
                          int *logits, struct tr_error *err);

/* Shared parts of the two descriptors. */
int tr_decoder_build(const void *config, const struct tr_build_opts *o, struct tr_graph *g, struct tr_error *err);

/* Synthetic batch for predict and fit: tokens uniform in [1, vocab) from the seed; sample
 * b is left-padded by floor((b mod 4)·pad_fraction·T) tokens (at most T - 1): pad id 0,
 * mask 0, position 1 (HF's generate); kept tokens get mask 1 and positions 0, 1,
 * ... fit's labels: the tokens, TR_DECODER_IGNORE on pads and on a padded sample's first
 * token (which the pad position before it would predict, from a row that sees only pads). */
int tr_decoder_make_inputs(const void *config, const struct tr_build_opts *o, uint64_t seed, int n,
                           struct tr_tensor *inputs, struct tr_error *err);
int tr_decoder_pad_len(const struct tr_decoder_config *c, int64_t b, int64_t seq_len);

/* The generate task's passes and prompts (generate.c; the layout is there). */
extern const struct tr_generate_i tr_decoder_generate;

#endif
