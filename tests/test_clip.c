/* CLIPTextModel against transformers: the tiny preset's graph, loaded with the
 * state_dict transformers wrote (tests/fixtures/make_clip_fixture.py, the reference in
 * float64), must give transformers' last_hidden_state on every backend configuration in
 * f32, bf16 and f16. Also: parameter names and counts as transformers has them (sd-v1-4's
 * text encoder in full), the causal mask, config errors, and the synthetic prompts. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "modelutil.h"
#include "clip/clip.h"
#include "clip/tokenizer.h"
#include "hf_json.h"
#include "models.h"
#include "trident/graph.h"
#include "trident/safetensors.h"
#include "trident/weights.h"

#define FIXTURE TR_SOURCE_DIR "/tests/fixtures/sd_tiny/text_encoder/model.safetensors"
#define FIXTURE_IO TR_SOURCE_DIR "/tests/fixtures/clip_tiny_io.safetensors"
#define HINT " (regenerate with: python3 tests/fixtures/make_clip_fixture.py)"

/* CLIPTextModel(CLIPTextConfig(<CompVis/stable-diffusion-v1-4 text_encoder/config.json>)),
 * counted by transformers 5.x: sum(p.numel() for p in model.parameters()). */
#define SD_CLIP_PARAMS 123060480
/* ... and stabilityai/stable-diffusion-2-1's text_encoder/config.json, the same way. */
#define SD21_CLIP_PARAMS 340387840

static const struct tr_model_desc *const M = &tr_model_clip_text;
#define preset(name) ((const struct tr_clip_text_config *)tr_test_preset(M, name))

static void test_param_counts(void **state) {
    tr_test_expect_param_counts(M, "sd-v1-4", 1, 77, SD_CLIP_PARAMS, 0);
    tr_test_expect_param_counts(M, "sd-2-1", 1, 77, SD21_CLIP_PARAMS, 0);
    tr_test_expect_io_counts(M, FIXTURE_IO, 2, 8, SD_CLIP_PARAMS, HINT);
    struct tr_graph *g = tr_test_model_build(M, preset("sd-v1-4"), TR_TASK_PREDICT, TR_DTYPE_F32, 1, 77);
    assert_int_equal(tr_graph_n_params(g), 2 + 12 * 16 + 2);
    tr_graph_free(g);
}

/* Every PARAM is in the state_dict with its shape, and every state_dict entry is a PARAM.
 * transformers 5 saves CLIPTextModel without its base prefix ("embeddings.…"); the graph
 * has the names of the published checkpoints ("text_model.embeddings.…") and the loader
 * takes either (weights.h). */
#define PREFIX "text_model."
static void test_names_match_state_dict(void **state) {
    struct tr_graph *g = tr_test_model_build(M, preset("tiny"), TR_TASK_PREDICT, TR_DTYPE_F32, 2, 16);
    tr_test_expect_state_dict(g, FIXTURE, PREFIX, HINT);
    /* the interface */
    const char *in_names[1] = {"input_ids"};
    const int in_dt[1] = {TR_DTYPE_I32};
    tr_test_expect_inputs(g, 1, in_names, in_dt, 2, 16);
    assert_int_equal(tr_graph_n_outputs(g), 1);
    assert_string_equal(tr_graph_output_name(g, 0), "last_hidden_state");
    const int64_t want[3] = {2, 16, 64};
    int out = tr_graph_output(g, 0);
    assert_true(tr_shape_equal(tr_node_ndim(g, out), tr_node_shape(g, out), 3, want));
    tr_graph_free(g);
}

static void test_config_errors(void **state) {
    struct tr_clip_text_config c = *preset("tiny");
    struct tr_build_opts o = {.task = TR_TASK_PREDICT, .dtype = TR_DTYPE_F32, .batch = 2, .seq_len = 17};
    struct tr_graph *g = NULL;
    struct tr_error e = {0};
    assert_int_equal(tr_graph_init(&g, &e), TR_OK);
    assert_int_equal(M->build(&c, &o, g, &e), TR_ERR_INVALID);
    tr_assert_msg_has(&e, "seq_len = 17, expected 1 to max_position_embeddings = 16");
    tr_graph_free(g);
    static const struct tr_test_refusal r[] = {
        {TR_TASK_PREDICT, {{"num_attention_heads", "5"}}, {"hidden_size = 64", "num_attention_heads = 5"}},
        {TR_TASK_PREDICT, {{"hidden_act", "relu2"}}, {"hidden_act = 'relu2'", "quick_gelu, relu"}},
        {TR_TASK_FIT, {{NULL}}, {"fit", "offers: predict"}},
    };
    TR_TEST_EXPECT_REFUSALS(M, "tiny", r);
    assert_int_equal(M->tasks, 1u << TR_TASK_PREDICT);
}

static void test_make_inputs(void **state) {
    const struct tr_clip_text_config *c = preset("small");
    const int64_t B = 5, T = 77, sh[2] = {B, T};
    struct tr_build_opts o = {.task = TR_TASK_PREDICT, .dtype = TR_DTYPE_F32, .batch = B, .seq_len = T};
    struct tr_tensor a = tr_test_tensor(TR_DTYPE_I32, 2, sh), b = tr_test_tensor(TR_DTYPE_I32, 2, sh);
    tr_test_poison(&a);
    tr_test_poison(&b);
    struct tr_error e = {0};
    assert_int_equal(M->make_inputs(c, &o, 42, 1, &a, &e), TR_OK);
    assert_int_equal(M->make_inputs(c, &o, 42, 1, &b, &e), TR_OK);
    assert_memory_equal(a.data, b.data, tr_tensor_nbytes(&a));
    assert_int_equal(M->make_inputs(c, &o, 43, 1, &b, &e), TR_OK);
    assert_memory_not_equal(a.data, b.data, tr_tensor_nbytes(&a));
    const int32_t *ids = a.data, bos = 49406, eos = 49407;
    for (int64_t bi = 0; bi < B; bi++) {
        const int64_t len = tr_clip_prompt_len(bi, T);
        assert_true(len >= 2 && len <= T);
        assert_int_equal(ids[bi * T], bos);
        for (int64_t t = 1; t < T; t++) {
            int32_t v = ids[bi * T + t];
            if (t < len - 1) assert_true(v >= 0 && v < bos);
            else assert_int_equal(v, eos);
        }
    }
    const int64_t kept[5] = {77, 58, 39, 20, 77};
    for (int i = 0; i < 5; i++) assert_int_equal(tr_clip_prompt_len(i, T), kept[i]);
    struct tr_tensor f = tr_test_tensor(TR_DTYPE_F32, 2, sh);
    assert_int_equal(M->make_inputs(c, &o, 42, 1, &f, &e), TR_ERR_SHAPE);
    tr_assert_msg_has(&e, "input_ids");
    tr_test_tensor_free(&a);
    tr_test_tensor_free(&b);
    tr_test_tensor_free(&f);
}

static void predict_matches_hf(enum tr_dtype dt) {
    tr_test_fixture_predict(M, preset("tiny"), dt, FIXTURE, FIXTURE_IO, 1, (const char *[]){"input_ids"},
                            (const int[]){TR_DTYPE_I32}, 0, 1, "transformers", HINT);
}

TR_TEST_F32_BF16_F16(test_predict_matches_hf, predict_matches_hf)

/* A token reaches the positions after it and none before it. */
static void test_causal(void **state) {
    const struct tr_clip_text_config *c = preset("tiny");
    const int64_t B = 1, T = 12, D = c->hidden_size, sh[2] = {B, T}, at = 7;
    struct tr_graph *g = tr_test_model_build(M, c, TR_TASK_PREDICT, TR_DTYPE_F32, B, T);
    struct tr_weights *w = NULL;
    struct tr_error e = {0};
    assert_int_equal(tr_weights_from_seed(g, 3, &w, &e), TR_OK);
    struct tr_tensor ids = tr_test_tensor(TR_DTYPE_I32, 2, sh), h1, h2;
    struct tr_build_opts o = {.task = TR_TASK_PREDICT, .dtype = TR_DTYPE_F32, .batch = B, .seq_len = T};
    assert_int_equal(M->make_inputs(c, &o, 3, 1, &ids, &e), TR_OK);
    tr_test_run_backend(&tr_test_backends[0], NULL, g, &ids, 1, &h1, NULL);
    int32_t *v = ids.data;
    v[at] = (v[at] + 17) % 998;
    tr_test_run_backend(&tr_test_backends[0], NULL, g, &ids, 1, &h2, NULL);
    const float *a = h1.data, *b = h2.data;
    for (int64_t t = 0; t < T; t++) {
        double d = 0;
        for (int64_t k = 0; k < D; k++) d = fmax(d, fabs((double)a[t * D + k] - b[t * D + k]));
        if (t < at && d != 0) fail_msg("position %lld changed by %.3g when token %lld did", (long long)t, d, (long long)at);
        if (t >= at && !(d > 1e-3)) fail_msg("position %lld did not see token %lld", (long long)t, (long long)at);
    }
    tr_test_tensor_free(&ids);
    tr_test_tensor_free(&h1);
    tr_test_tensor_free(&h2);
    tr_weights_free(w);
    tr_graph_free(g);
}

/* dir's expected.json ({prompt: ids at 16}) against the tokenizer read from dir. */
static int tokenizer_expected(const char *dir) {
    struct tr_clip_tokenizer *t = NULL;
    struct tr_error e = {0};
    if (tr_clip_tokenizer_load(dir, &t, &e)) fail_msg("%s", e.msg);
    char path[512];
    snprintf(path, sizeof path, "%s/expected.json", dir);
    cJSON *root = NULL;
    if (tr_hf_json_load(path, &root, &e)) fail_msg("%s", e.msg);
    const cJSON *p;
    int n = 0;
    cJSON_ArrayForEach(p, root) {
        int32_t ids[16];
        for (int i = 0; i < 16; i++) ids[i] = -7; /* poisoned */
        assert_int_equal(tr_clip_tokenize(t, p->string, ids, 16, &e), TR_OK);
        assert_int_equal(cJSON_GetArraySize(p), 16);
        for (int i = 0; i < 16; i++)
            if (ids[i] != (int32_t)cJSON_GetArrayItem(p, i)->valuedouble)
                fail_msg("%s: '%s': id %d is %d, transformers says %d", dir, p->string, i, (int)ids[i],
                         (int)cJSON_GetArrayItem(p, i)->valuedouble);
        n++;
    }
    cJSON_Delete(root);
    tr_clip_tokenizer_free(t);
    return n;
}

/* The tokenizer against transformers' CLIPTokenizer on a toy vocabulary of CLIP's layout
 * (tests/fixtures/make_clip_tokenizer_fixture.py): contractions, case, tabs and runs of
 * spaces, punctuation, digits, truncation and padding to 16; Unicode as the tokenizer's
 * normalizer and pattern have it (NFC, lowering, letters, numbers and spaces beyond
 * ASCII, emoji); and transformers 5's save_pretrained (tokenizer.json alone) with Stable
 * Diffusion 2's pad token "!". */
static void test_tokenizer(void **state) {
    (void)state;
    int n = tokenizer_expected(TR_SOURCE_DIR "/tests/fixtures/clip_tokenizer");
    assert_true(n >= 18);
    int n_pad = tokenizer_expected(TR_SOURCE_DIR "/tests/fixtures/clip_tokenizer_pad");
    assert_true(n_pad >= 4);
    print_message("tokenizer: %d prompts (vocab.json, merges.txt) and %d (tokenizer.json, pad \"!\") as "
                  "transformers' CLIPTokenizer makes them\n", n, n_pad);
    struct tr_clip_tokenizer *t = NULL;
    struct tr_error e = {0};
    assert_int_equal(tr_clip_tokenizer_load("/nonexistent", &t, &e), TR_ERR_IO);
    tr_assert_msg_has(&e, "'/nonexistent' has neither vocab.json and merges.txt nor tokenizer.json");
    assert_null(t);
    /* text that is not UTF-8 is refused, not tokenized byte by byte */
    assert_int_equal(tr_clip_tokenizer_load(TR_SOURCE_DIR "/tests/fixtures/clip_tokenizer", &t, &e), TR_OK);
    int32_t ids[16];
    assert_int_equal(tr_clip_tokenize(t, "caf\xe9", ids, 16, &e), TR_ERR_INVALID);
    tr_assert_msg_has(&e, "not UTF-8");
    tr_clip_tokenizer_free(t);
    /* an id that is not an integer (CLIPTokenizer's int() would refuse it) */
    char dir[600], path[700];
    snprintf(dir, sizeof dir, "%s/frac_tok", tr_test_dir);
    assert_int_equal(mkdir(dir, 0700), 0);
    snprintf(path, sizeof path, "%s/vocab.json", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"<|startoftext|>\": 0, \"<|endoftext|>\": 1, \"a</w>\": 1.5}", f);
    fclose(f);
    snprintf(path, sizeof path, "%s/merges.txt", dir);
    assert_non_null(f = fopen(path, "w"));
    fputs("#version: 0.2\n", f);
    fclose(f);
    t = NULL;
    assert_int_not_equal(tr_clip_tokenizer_load(dir, &t, &e), TR_OK);
    tr_assert_msg_has(&e, "vocab.json': \"a</w>\" is not a token id");
    assert_null(t);
}

/* A config.json that leaves keys out means CLIPTextConfig's defaults for them; a
 * CLIPConfig without its text_config too. */
static void test_hf_config_defaults(void **state) {
    (void)state;
    tr_test_hf_defaults_match(&tr_model_clip_text, "{\"model_type\": \"clip_text_model\"}", TR_SOURCE_DIR "/tests/fixtures/hf/defaults/clip_text.json", 5);
    tr_test_hf_defaults_match(&tr_model_clip_text, "{\"model_type\": \"clip\", \"text_config\": {}}", TR_SOURCE_DIR "/tests/fixtures/hf/defaults/clip_text.json", 5);
    /* use_attention_mask: the pipeline would mask the text encoder's padding; refused */
    char path[600];
    snprintf(path, sizeof path, "%s/um.json", tr_test_dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"model_type\": \"clip_text_model\", \"use_attention_mask\": true}", f);
    fclose(f);
    struct tr_clip_text_config c;
    memcpy(&c, tr_model_clip_text.presets[0].config, sizeof c);
    struct tr_error e = {0};
    assert_int_equal(tr_model_clip_text.read_hf_config(&c, path, &e), TR_ERR_UNSUPPORTED);
    tr_assert_msg_has(&e, "use_attention_mask = true");
    /* what from_pretrained's json.load refuses: more after the object ("Extra data"); a
     * string key of another type, said as what it is */
    tr_test_dir_file("tail.json", "{\"model_type\": \"clip_text_model\"} {\"hidden_size\": 8", path, sizeof path);
    assert_int_equal(tr_model_clip_text.read_hf_config(&c, path, &e), TR_ERR_FORMAT);
    tr_assert_msg_has(&e, "tail.json' is not valid JSON: more follows the value that ends at byte 34");
    tr_test_dir_file("act.json", "{\"model_type\": \"clip_text_model\", \"hidden_act\": 3}", path, sizeof path);
    assert_int_equal(tr_model_clip_text.read_hf_config(&c, path, &e), TR_ERR_FORMAT);
    tr_assert_msg_has(&e, "act.json': \"hidden_act\" is a number, expected a string");
}

TR_TEST_MAIN(tr_test_dir_setup, tr_test_dir_teardown, test_tokenizer, test_param_counts, test_hf_config_defaults, test_names_match_state_dict,
             test_config_errors, test_make_inputs, test_predict_matches_hf_f32, test_predict_matches_hf_bf16,
             test_predict_matches_hf_f16, test_causal)
