/* Gemma (Hugging Face GemmaForCausalLM), the Keras 3 benchmark's gemma_7b_en: embeddings
 * scaled by √hidden, RMS norms scaling by (1 + w), GeGLU with the tanh GELU, multi-query
 * (2b) or multi-head (7b) attention with RoPE, logits tied to the embedding table. */
#include "keys.h"
#include "models.h"

static const struct tr_model_key gemma_keys[] = {TR_DECODER_KEYS};

#define GEMMA_COMMON                                                                                                 \
    .family = TR_DECODER_GEMMA, .sliding_window = 0, .rms_norm_eps = 1e-6, .rope_theta = 10000.0,                   \
    .tie_word_embeddings = 1, .hidden_act = "gelu_pytorch_tanh", .pad_fraction = 0.125, .pad_token_id = 0,         \
    .eos_token_id = "1",                                                                                             \
    .lora_rank = 4, .lora_alpha = 0, .lora_targets = TR_DECODER_LORA_DEFAULT

/* tiny equals GEMMA_TINY in tests/fixtures/make_gemma_fixture.py: MQA as 2b, and
 * heads·head_dim != hidden as 7b (4·32 = 128 vs 64). */
static const struct tr_decoder_config gemma_tiny = {
    GEMMA_COMMON, .vocab_size = 512, .hidden_size = 64, .intermediate_size = 128, .num_hidden_layers = 2,
    .num_attention_heads = 4, .num_key_value_heads = 1, .head_dim = 32, .max_position_embeddings = 128,
};
static const struct tr_decoder_config gemma_small = {
    GEMMA_COMMON, .vocab_size = 16384, .hidden_size = 256, .intermediate_size = 1024, .num_hidden_layers = 4,
    .num_attention_heads = 4, .num_key_value_heads = 1, .head_dim = 64, .max_position_embeddings = 1024,
};
/* The config.json of google/gemma-2b and google/gemma-7b. */
static const struct tr_decoder_config gemma_2b = {
    GEMMA_COMMON, .vocab_size = 256000, .hidden_size = 2048, .intermediate_size = 16384, .num_hidden_layers = 18,
    .num_attention_heads = 8, .num_key_value_heads = 1, .head_dim = 256, .max_position_embeddings = 8192,
};
static const struct tr_decoder_config gemma_7b = {
    GEMMA_COMMON, .vocab_size = 256000, .hidden_size = 3072, .intermediate_size = 24576, .num_hidden_layers = 28,
    .num_attention_heads = 16, .num_key_value_heads = 16, .head_dim = 256, .max_position_embeddings = 8192,
};

static const struct tr_model_preset gemma_presets[] = {
    {"tiny", &gemma_tiny, "2 layers, hidden 64, 4 heads of 32, 1 kv head, ffn 128, vocab 512 (tests)"},
    {"small", &gemma_small, "4 layers, hidden 256, 4 heads of 64, 1 kv head, ffn 1024, vocab 16384 (cpu)"},
    {"2b", &gemma_2b,
     "google/gemma-2b: 18 layers, hidden 2048, 8 heads of 256, 1 kv head, ffn 16384, vocab 256000, "
     "2,506,172,416 parameters"},
    {"7b", &gemma_7b,
     "google/gemma-7b (Keras gemma_7b_en): 28 layers, hidden 3072, 16 heads of 256, 16 kv heads, ffn 24576, "
     "vocab 256000, 8,537,680,896 parameters"},
};

const struct tr_model_desc tr_model_gemma = {
    .name = "gemma",
    .description = "GemmaForCausalLM (Hugging Face names; Keras gemma_7b_en)",
    TR_DECODER_MODEL(gemma_keys, gemma_presets),
    .lora_modules = tr_decoder_lora_modules,
};
