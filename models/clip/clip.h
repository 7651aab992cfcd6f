/* CLIPTextModel (transformers), Stable Diffusion's text encoder, as a trident model
 * `clip_text`.
 *
 * Parameters carry the names and shapes of transformers' state_dict (text_model.…), so a
 * checkpoint saved by transformers binds as it is. Pre-LN encoder, causal self-attention
 * (CLIP's text model masks the future; Stable Diffusion passes no padding mask), the
 * feed-forward's quick_gelu (x·σ(1.702x)) or gelu, a final LayerNorm.
 *
 *   predict  inputs   input_ids i32 [B,T], T = seq_len <= max_position_embeddings
 *            outputs  last_hidden_state [B,T,hidden_size] (what the UNet attends to)
 * transformers' pooler_output (the state at the end-of-text token, whose position depends
 * on the ids) is not an output: Stable Diffusion conditions on last_hidden_state alone.
 * From a seed: Linear and embedding weights normal(0, 0.02), biases normal(0, 0.02),
 * LayerNorm weights normal(1, 0.02).
 */
#ifndef TRIDENT_MODELS_CLIP_H
#define TRIDENT_MODELS_CLIP_H

#include <stdint.h>
#include "trident/model.h"

/* The keys of [model], named as transformers' CLIPTextConfig. */
struct tr_clip_text_config {
    int64_t vocab_size;
    int64_t hidden_size;
    int64_t intermediate_size;
    int64_t num_hidden_layers;
    int64_t num_attention_heads;
    int64_t max_position_embeddings;
    double layer_norm_eps;
    char hidden_act[64];        /* "quick_gelu" (CLIP's), "gelu" (OpenCLIP's), layers.h's TR_NN_ACTS */
};

/* The synthetic prompts' token ids: the start and end of text are the vocabulary's last
 * two ids (49406, 49407 in CLIP's), as CLIP's tokenizer has them; a prompt is padded
 * with end-of-text to T, as Stable Diffusion's pipeline pads. Sample b's prompt holds
 * tr_clip_prompt_len(b, T) tokens, the start and end included. */
int64_t tr_clip_prompt_len(int64_t b, int64_t T);

/* The encoder on ids, an existing i32 [B,T] node of g (B = o->batch, T = o->seq_len):
 * *out gets last_hidden_state [B,T,hidden_size] in o->dtype. Checks c and o as build does. */
struct tr_graph;
int tr_clip_text_graph(const struct tr_clip_text_config *c, const struct tr_build_opts *o, struct tr_graph *g,
                       int ids, int *out, struct tr_error *err);
/* The same, and with skip > 0 (below num_hidden_layers) *skipped too: the hidden state
 * after layer num_hidden_layers − skip through final_layer_norm, as diffusers' pipelines
 * take it for clip_skip = skip (hidden_states[−(skip + 1)]). */
int tr_clip_text_graph_skip(const struct tr_clip_text_config *c, const struct tr_build_opts *o, struct tr_graph *g,
                            int ids, int64_t skip, int *out, int *skipped, struct tr_error *err);

#endif
