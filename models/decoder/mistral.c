/* Mistral (Hugging Face MistralForCausalLM), the Keras 3 benchmark's mistral_7b_en: RMS
 * norms scaling by w, SwiGLU, grouped-query attention with RoPE and a sliding window,
 * an untied lm_head. */
#include "keys.h"
#include "models.h"

static const struct tr_model_key mistral_keys[] = {TR_DECODER_KEYS};

#define MISTRAL_COMMON                                                                                               \
    .family = TR_DECODER_MISTRAL, .head_dim = 0, .rms_norm_eps = 1e-5, .rope_theta = 10000.0,                       \
    .tie_word_embeddings = 0, .hidden_act = "silu", .pad_fraction = 0.125, .pad_token_id = -1,                      \
    .eos_token_id = "2",                                                                                             \
    .lora_rank = 4, .lora_alpha = 0, .lora_targets = TR_DECODER_LORA_DEFAULT

/* tiny equals MISTRAL_TINY in tests/fixtures/make_mistral_fixture.py; its window (6) is
 * shorter than the fixture's 16 tokens, so the window shows in the logits. */
static const struct tr_decoder_config mistral_tiny = {
    MISTRAL_COMMON, .vocab_size = 512, .hidden_size = 64, .intermediate_size = 128, .num_hidden_layers = 2,
    .num_attention_heads = 4, .num_key_value_heads = 2, .max_position_embeddings = 128, .sliding_window = 6,
};
static const struct tr_decoder_config mistral_small = {
    MISTRAL_COMMON, .vocab_size = 32000, .hidden_size = 256, .intermediate_size = 896, .num_hidden_layers = 4,
    .num_attention_heads = 8, .num_key_value_heads = 2, .max_position_embeddings = 1024, .sliding_window = 64,
};
/* The config.json of mistralai/Mistral-7B-v0.1. */
static const struct tr_decoder_config mistral_7b = {
    MISTRAL_COMMON, .vocab_size = 32000, .hidden_size = 4096, .intermediate_size = 14336, .num_hidden_layers = 32,
    .num_attention_heads = 32, .num_key_value_heads = 8, .max_position_embeddings = 32768, .sliding_window = 4096,
};

static const struct tr_model_preset mistral_presets[] = {
    {"tiny", &mistral_tiny, "2 layers, hidden 64, 4 heads, 2 kv heads, ffn 128, vocab 512, window 6 (tests)"},
    {"small", &mistral_small, "4 layers, hidden 256, 8 heads, 2 kv heads, ffn 896, vocab 32000, window 64 (cpu)"},
    {"7b", &mistral_7b,
     "mistralai/Mistral-7B-v0.1 (Keras mistral_7b_en): 32 layers, hidden 4096, 32 heads, 8 kv heads, ffn 14336, "
     "vocab 32000, window 4096, 7,241,732,096 parameters"},
};

const struct tr_model_desc tr_model_mistral = {
    .name = "mistral",
    .description = "MistralForCausalLM (Hugging Face names; Keras mistral_7b_en)",
    TR_DECODER_MODEL(mistral_keys, mistral_presets),
    .lora_modules = tr_decoder_lora_modules,
};
