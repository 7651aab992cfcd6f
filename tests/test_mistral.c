/* Mistral against Hugging Face: the tiny preset's graph, loaded with the state_dict that
 * transformers wrote (tests/fixtures/make_mistral_fixture.py), gives MistralForCausalLM's
 * logits on every backend configuration (f32 and bf16); its sliding window (6, over 16
 * tokens) is applied as HF applies it; the 7B preset is the published model (size,
 * config.json); the KV-cache pass; bad input. */
#include <string.h>
#include "decoderutil.h"
#include "modelutil.h"
#include "models.h"
#include "trident/safetensors.h"

#define tiny() tr_test_llm_preset(&tr_model_mistral, "tiny")

static const struct tr_test_llm mistral = TR_TEST_LLM_FIXTURE(mistral);

/* MistralForCausalLM(MistralConfig(<config.json>)), counted by transformers 5.24. */
#define MISTRAL_7B_PARAMS 7241732096LL

static void test_size_7b(void **state) { tr_test_llm_check_size(&tr_model_mistral, "7b", MISTRAL_7B_PARAMS); }

static void test_preset_is_the_published_config(void **state) {
    tr_test_llm_hf_config_matches(&tr_model_mistral, "tests/fixtures/hf/mistral-7b-v0.1.json", "7b");
    assert_int_equal(tr_test_llm_preset(&tr_model_mistral, "7b")->sliding_window, 4096);
}

static void test_names_match_state_dict(void **state) { tr_test_llm_names_match(&mistral); }

static void test_interface(void **state) {
    const struct tr_decoder_config *c = tiny();
    struct tr_graph *g = tr_test_llm_build(&tr_model_mistral, c, TR_DTYPE_F32, 2, 16);
    int lg = tr_graph_output(g, 0);
    assert_int_equal(tr_graph_n_outputs(g), 1);
    assert_string_equal(tr_graph_output_name(g, 0), "logits");
    /* Untied: the logits read lm_head.weight. */
    int head = tr_graph_find(g, "lm_head.weight");
    assert_true(head >= 0);
    assert_int_equal(tr_node_input(g, lg, 1), head);
    /* Every attention node carries the window and is causal. */
    int n_attn = 0;
    for (int i = 0; i < tr_graph_n_nodes(g); i++)
        if (tr_node_op(g, i) == TR_OP_ATTENTION) {
            n_attn++;
            assert_int_equal(tr_node_attrs(g, i)->ints[0], 1);
            assert_int_equal(tr_node_attrs(g, i)->ints[1], c->sliding_window);
        }
    assert_int_equal(n_attn, c->num_hidden_layers);
    tr_test_llm_expect_init(g, "model.norm.weight", 1.0f);
    tr_graph_free(g);
}

static void test_make_inputs(void **state) { tr_test_llm_make_inputs(&tr_model_mistral); }

static void predict_matches_hf(enum tr_dtype dt) { tr_test_llm_predict_vs_hf(&mistral, tiny(), dt, "logits"); }
TR_TEST_F32_BF16(test_predict_matches_hf, predict_matches_hf)

/* The window changes the logits far beyond the tolerance, and both ways match HF: with
 * sliding_window 0 the graph gives HF's full-attention logits, not the windowed ones. */
static void test_sliding_window_applied(void **state) {
    struct tr_safetensors *io = NULL;
    struct tr_error e = {0};
    if (tr_safetensors_open(mistral.io, &io, &e)) fail_msg("%s%s", e.msg, mistral.hint);
    struct tr_tensor win, full, keep;
    assert_int_equal(tr_safetensors_get(io, "logits", &win, &e), TR_OK);
    assert_int_equal(tr_safetensors_get(io, "logits_full_attention", &full, &e), TR_OK);
    assert_int_equal(tr_safetensors_get(io, "keep", &keep, &e), TR_OK);
    double apart = tr_test_llm_kept_rel_diff(&full, &win, &keep);
    print_message("mistral tiny: HF full attention vs window %lld: %.3g apart\n",
                  (long long)tiny()->sliding_window, apart);
    assert_true(apart > 100 * tr_test_tol(TR_DTYPE_F32));
    struct tr_decoder_config c = *tiny();
    assert_true(c.sliding_window > 0 && c.sliding_window < win.shape[1]);
    c.sliding_window = 0;
    tr_test_llm_predict_vs_hf(&mistral, &c, TR_DTYPE_F32, "logits_full_attention");
    tr_safetensors_close(io);
}

static void test_kv_cache(void **state) { tr_test_llm_kv_cache(&mistral, tiny()); }

static void test_greedy_generate_matches_hf(void **state) { tr_test_llm_greedy_vs_hf_all(&mistral, tiny(), TR_DTYPE_F32); }

static void test_unknown_preset(void **state) { tr_test_llm_unknown_preset(&tr_model_mistral); }

static void test_config_errors(void **state) {
    const struct tr_model_desc *m = &tr_model_mistral;
    struct tr_decoder_config c = *tiny();
    c.hidden_size = 60; /* 60 / 4 heads = 15: odd, RoPE needs pairs */
    tr_test_llm_build_fails(m, &c, TR_TASK_PREDICT, TR_DTYPE_F32, 16, TR_ERR_INVALID, "head_dim = 15", NULL);
    tr_test_llm_build_fails(m, tiny(), TR_TASK_PREDICT, TR_DTYPE_I32, 16, TR_ERR_UNSUPPORTED, "i32", NULL);
}

/* A config.json that leaves keys out means MistralConfig's defaults for them: head_dim
 * from the width and heads, the 4096-token window, no padding row. */
static void test_hf_config_defaults(void **state) {
    (void)state;
    tr_test_hf_defaults_match(&tr_model_mistral, "{\"model_type\": \"mistral\"}", TR_SOURCE_DIR "/tests/fixtures/hf/defaults/mistral.json", 8);
}

TR_TEST_MAIN(tr_test_dir_setup, tr_test_dir_teardown, test_size_7b, test_hf_config_defaults, test_preset_is_the_published_config, test_names_match_state_dict,
             test_interface, test_make_inputs, test_predict_matches_hf_f32, test_predict_matches_hf_bf16,
             test_sliding_window_applied, test_kv_cache, test_greedy_generate_matches_hf, test_unknown_preset,
             test_config_errors)
