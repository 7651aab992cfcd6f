/* The [model] keys and the descriptor slots of the decoder LLMs, shared by gemma.c and
 * mistral.c. */
#ifndef TRIDENT_MODELS_DECODER_KEYS_H
#define TRIDENT_MODELS_DECODER_KEYS_H

#include <stddef.h>
#include "decoder.h"

#define DEC_KEY_(field, type, lo, hi, doc) {#field, type, offsetof(struct tr_decoder_config, field), lo, hi, doc}

#define TR_DECODER_KEYS                                                                                              \
    DEC_KEY_(vocab_size, TR_KEY_INT, 1, 2147483647.0, "rows of the token embedding table"),                          \
    DEC_KEY_(hidden_size, TR_KEY_INT, 1, 65536, "model width D"),                                                    \
    DEC_KEY_(intermediate_size, TR_KEY_INT, 1, 1e6, "width of the gated feed-forward block"),                        \
    DEC_KEY_(num_hidden_layers, TR_KEY_INT, 1, 1024, "decoder layers"),                                              \
    DEC_KEY_(num_attention_heads, TR_KEY_INT, 1, 4096, "query heads H"),                                             \
    DEC_KEY_(num_key_value_heads, TR_KEY_INT, 1, 4096, "key/value heads; divides num_attention_heads (1: MQA)"),    \
    DEC_KEY_(head_dim, TR_KEY_INT, 0, 4096, "per-head width; 0: hidden_size / num_attention_heads"),                 \
    DEC_KEY_(max_position_embeddings, TR_KEY_INT, 1, 1e7, "the trained length (seq_len may pass it, as in transformers)"),            \
    DEC_KEY_(sliding_window, TR_KEY_INT, 0, 1e7, "attention sees the last sliding_window keys; 0: all"),             \
    DEC_KEY_(rms_norm_eps, TR_KEY_FLOAT, 0, 1, "epsilon of every RMS norm"),                                         \
    DEC_KEY_(rope_theta, TR_KEY_FLOAT, 1e-6, 1e12, "RoPE base"),                                                     \
    DEC_KEY_(tie_word_embeddings, TR_KEY_BOOL, 0, 0, "logits from the embedding table (no lm_head.weight)"),         \
    DEC_KEY_(attention_bias, TR_KEY_BOOL, 0, 0, "q_proj, k_proj, v_proj and o_proj carry a bias (Gemma only)"),       \
    DEC_KEY_(hidden_act, TR_KEY_STRING, 0, 0, "feed-forward gate's activation (ACT2FN's name): gelu_pytorch_tanh (GeGLU), silu (SwiGLU), ..."),     \
    DEC_KEY_(pad_fraction, TR_KEY_FLOAT, 0, 1,                                                                       \
             "synthetic batch: sample b left-pads floor((b mod 4) * pad_fraction * seq_len) tokens"),                \
    DEC_KEY_(pad_token_id, TR_KEY_INT, -1, 2147483647.0,                                                             \
             "embed_tokens' padding row (transformers' padding_idx: no gradient reaches it); -1: none"),             \
    DEC_KEY_(eos_token_id, TR_KEY_STRING, 0, 0,                                                                      \
             "end-of-sequence ids, comma-separated: a [generate] prompt's text ends at the first; empty: none"),      \
    DEC_KEY_(lora_rank, TR_KEY_INT, 0, 65536,                                                                        \
             "fit: LoRA rank r of the adapters on lora_targets; 0: no adapters, every weight trains"),               \
    DEC_KEY_(lora_alpha, TR_KEY_FLOAT, 0, 1e6,                                                                       \
             "fit: LoRA alpha; adapter outputs are scaled by lora_alpha / lora_rank; 0: alpha = rank"),              \
    DEC_KEY_(lora_targets, TR_KEY_STRING, 0, 0,                                                                      \
             "fit: comma-separated Linears with adapters, among q_proj, k_proj, v_proj, o_proj, gate_proj, "         \
             "up_proj, down_proj (default q_proj,v_proj)"),                                                           \
    DEC_KEY_(lora_predict, TR_KEY_BOOL, 0, 0,                                                                        \
             "predict and generate apply the adapters too (a peft adapter beside the weights: what its PeftModel "   \
             "computes); false: the plain model, the benchmark's")


/* A decoder family's descriptor slots, all but its name and description: the tables,
 * the decoder's graph, training and generate, and the config.json reader (whose
 * model_type check follows the preset's family). */
#define TR_DECODER_MODEL(keys_, presets_)                                                                            \
    .config_size = sizeof(struct tr_decoder_config), TR_MODEL_TABLES(keys_, presets_),                               \
    .tasks = 1u << TR_TASK_PREDICT | 1u << TR_TASK_FIT | 1u << TR_TASK_GENERATE, .build = tr_decoder_build,          \
    .trainable = tr_decoder_trainable, .make_inputs = tr_decoder_make_inputs, .generate = &tr_decoder_generate,      \
    .read_hf_config = tr_decoder_read_hf_config_hook

#endif
