/* Gemma against Hugging Face: the tiny preset's graph, loaded with the state_dict that
 * transformers wrote (tests/fixtures/make_gemma_fixture.py), gives GemmaForCausalLM's
 * logits on every backend configuration (f32 and bf16); the 7B and 2B presets are the
 * published models (sizes, config.json); the KV-cache pass; bad input. */
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "decoderutil.h"
#include "modelutil.h"
#include "models.h"
#include "trident/bench.h"
#include "trident/safetensors.h"

#define tiny() tr_test_llm_preset(&tr_model_gemma, "tiny")

static const struct tr_test_llm gemma = TR_TEST_LLM_FIXTURE(gemma);

/* GemmaForCausalLM(GemmaConfig(<config.json>)), counted by transformers 5.24:
 * sum(p.numel() for p in model.parameters()), the tied table once. */
#define GEMMA_7B_PARAMS 8537680896LL
#define GEMMA_2B_PARAMS 2506172416LL

static void test_size_7b(void **state) { tr_test_llm_check_size(&tr_model_gemma, "7b", GEMMA_7B_PARAMS); }
static void test_size_2b(void **state) { tr_test_llm_check_size(&tr_model_gemma, "2b", GEMMA_2B_PARAMS); }

static void test_presets_are_the_published_configs(void **state) {
    tr_test_llm_hf_config_matches(&tr_model_gemma, "tests/fixtures/hf/gemma-7b.json", "7b");
    tr_test_llm_hf_config_matches(&tr_model_gemma, "tests/fixtures/hf/gemma-2b.json", "2b");
}

/* The errors name the file and the JSON key; through an INI, the line too. */
/* tr_decoder_read_hf_config of json, written to a file of its own for the call. */
static int read_json(const char *json, struct tr_decoder_config *c, struct tr_error *e) {
    char path[128];
    snprintf(path, sizeof path, "/tmp/trident_gemma_%d.json", (int)getpid());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(json, f);
    fclose(f);
    int rc = tr_decoder_read_hf_config(path, c, e);
    unlink(path);
    return rc;
}

static void test_hf_config_errors(void **state) {
    struct tr_decoder_config c = *tiny();
    struct tr_error e = {0};
    assert_int_equal(tr_decoder_read_hf_config("tests/fixtures/hf/none.json", &c, &e), TR_ERR_IO);
    assert_non_null(strstr(e.msg, "none.json"));
    assert_int_equal(tr_decoder_read_hf_config("tests/fixtures/hf/mistral-7b-v0.1.json", &c, &e), TR_ERR_INVALID);
    if (!strstr(e.msg, "model_type") || !strstr(e.msg, "mistral") || !strstr(e.msg, "gemma"))
        fail_msg("error lacks model_type: %s", e.msg);
    assert_int_equal(tr_decoder_read_hf_config("tests/fixtures/hf/README.md", &c, &e), TR_ERR_FORMAT);
    assert_non_null(strstr(e.msg, "not valid JSON"));
    /* a config.json is held to [model]'s bounds (issue 18: a 2^32-wide table once overran
     * its buffer; a million layers built for minutes) */
    static const struct {
        const char *json, *needle;
        int rc;
    } bad[] = {{"{\"model_type\": \"gemma\", \"hidden_size\": 4294967296}", "\"hidden_size\" is not an integer from 1 to 65536", TR_ERR_FORMAT},
               {"{\"model_type\": \"gemma\", \"num_hidden_layers\": 1000000}", "\"num_hidden_layers\" is not an integer from 1 to 1024", TR_ERR_FORMAT},
               {"{\"model_type\": \"gemma\", \"vocab_size\": 0}", "\"vocab_size\" is not an integer from 1", TR_ERR_FORMAT},
               /* GemmaConfig's switch of another attention (bidirectional); a bias is a bool */
               {"{\"model_type\": \"gemma\", \"attention_bias\": 1}", "\"attention_bias\" is not true or false", TR_ERR_FORMAT},
               {"{\"model_type\": \"gemma\", \"use_bidirectional_attention\": true}", "\"use_bidirectional_attention\" = true", TR_ERR_UNSUPPORTED},
               {"{\"model_type\": \"gemma\", \"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 2}}", "rope_type = linear", TR_ERR_UNSUPPORTED},
               /* transformers 4.x's key, named as the file has it */
               {"{\"model_type\": \"gemma\", \"rope_scaling\": {\"type\": \"linear\", \"factor\": 2}}", "rope_scaling.type = linear", TR_ERR_UNSUPPORTED}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = read_json(bad[i].json, &c, &e);
        assert_int_equal(rc, bad[i].rc);
        tr_assert_msg_has(&e, bad[i].needle);
    }
    /* hidden_act, as transformers 5.x reads it; hidden_activation (4.x's) is not read: absent
     * hidden_act, GemmaConfig's default gelu_pytorch_tanh (a warning says so) */
    static const struct {
        const char *json, *act;
    } acts[] = {{"{\"hidden_act\": \"silu\", \"hidden_activation\": \"gelu_pytorch_tanh\"}", "silu"},
                {"{\"hidden_act\": \"gelu\", \"hidden_activation\": \"gelu_pytorch_tanh\"}", "gelu_pytorch_tanh"},
                {"{\"hidden_activation\": \"silu\"}", "gelu_pytorch_tanh"}};
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++) {
        c = *tiny();
        int rc = read_json(acts[i].json, &c, &e);
        if (rc) fail_msg("%s: %s", acts[i].json, e.msg);
        assert_string_equal(c.hidden_act, acts[i].act);
    }
    /* GemmaConfig's attention_bias: q/k/v/o_proj's biases, counted as transformers counts */
    c = *tiny();
    if (read_json("{\"model_type\": \"gemma\", \"attention_bias\": true}", &c, &e)) fail_msg("%s", e.msg);
    assert_int_equal(c.attention_bias, 1);
    struct tr_decoder_config nb = c;
    nb.attention_bias = 0;
    const int64_t plain = tr_decoder_param_count(&nb), dh = tr_decoder_head_dim(&c);
    assert_int_equal(tr_decoder_param_count(&c), plain + c.num_hidden_layers * (c.num_attention_heads * dh +
                                                  2 * c.num_key_value_heads * dh + c.hidden_size));
    static struct tr_config cfg;
    const char *ini = "[run]\nmodel = gemma\npreset = tiny\n[model]\nhf_config = tests/fixtures/hf/none.json\n";
    assert_int_equal(tr_config_load_string(ini, "t.ini", &cfg, &e), TR_OK);
    struct tr_task_graph tg;
    assert_int_equal(tr_task_graph_build(&cfg, tr_builtin_models, &tg, &e), TR_ERR_IO);
    tr_assert_msg_has(&e, "t.ini:5: [model] hf_config = tests/fixtures/hf/none.json: ");
    tr_assert_msg_has(&e, "cannot open 'tests/fixtures/hf/none.json'");
}

/* hf_config is the base and the [model] lines the edits, whatever their order. */
static void test_model_keys_win_over_hf_config(void **state) {
    const char *ini = "[run]\nmodel = gemma\npreset = tiny\nbatch = 1\nseq_len = 8\n"
                      "[model]\nnum_hidden_layers = 3\nhf_config = tests/fixtures/hf/gemma-2b.json\nhead_dim = 128\n";
    struct tr_config cfg;
    struct tr_error e = {0};
    if (tr_config_load_string(ini, "edit.ini", &cfg, &e)) fail_msg("%s", e.msg);
    struct tr_task_graph tg;
    if (tr_task_graph_build(&cfg, tr_builtin_models, &tg, &e)) fail_msg("%s", e.msg);
    struct tr_decoder_config c;
    assert_int_equal(tr_decoder_resolve(tg.config, &c, &e), TR_OK);
    assert_int_equal(c.num_hidden_layers, 3);            /* [model] */
    assert_int_equal(c.head_dim, 128);                   /* [model] */
    assert_int_equal(c.vocab_size, 256000);              /* the file */
    assert_int_equal(c.hidden_size, 2048);               /* the file */
    assert_int_equal(c.max_position_embeddings, 8192);   /* the file */
    assert_int_equal(c.lora_rank, 4);                    /* the preset: not in the file */
    /* the graph is that model: 2b with 3 layers and heads of 128 */
    assert_int_equal(tr_test_param_count(tg.graph), tr_decoder_param_count(&c));
    assert_int_equal(tr_node_shape(tg.graph, tr_graph_find(tg.graph, "model.layers.2.self_attn.q_proj.weight"))[0],
                     8 * 128);
    assert_int_equal(tr_graph_find(tg.graph, "model.layers.3.self_attn.q_proj.weight"), -1);
    tr_task_graph_free(&tg);
    /* Read alone, the file replaces every key it has. */
    struct tr_decoder_config bare = *tiny();
    bare.num_hidden_layers = 3;
    assert_int_equal(tr_decoder_read_hf_config("tests/fixtures/hf/gemma-2b.json", &bare, &e), TR_OK);
    assert_int_equal(bare.num_hidden_layers, 18);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) fail_msg("cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

/* The hidden size an INI's hf_config gives, loaded from the file ini while the working
 * directory is elsewhere. */
static int64_t hidden_from(const char *ini) {
    static struct tr_config cfg;
    struct tr_error e = {0};
    if (tr_config_load(ini, &cfg, &e)) fail_msg("%s", e.msg);
    struct tr_task_graph tg;
    if (tr_task_graph_build(&cfg, tr_builtin_models, &tg, &e)) fail_msg("%s: %s", ini, e.msg);
    struct tr_decoder_config c;
    assert_int_equal(tr_decoder_resolve(tg.config, &c, &e), TR_OK);
    assert_int_equal(c.num_hidden_layers, 1); /* [model], before hf_config in the file */
    assert_int_equal(c.vocab_size, 1000);     /* the file */
    tr_task_graph_free(&tg);
    return c.hidden_size;
}

/* hf_config is taken from the INI's directory, as [run] weights is, not from the working
 * directory, and a path may be longer than 63 characters (issue 17: it was a 64-byte
 * [model] string read from the working directory). */
static void test_hf_config_next_to_ini(void **state) {
    static const char long_name[] = "a_directory_whose_name_alone_is_longer_than_sixty_three_characters";
    char dir[512], sub[640], path[768], cwd[1024];
    snprintf(dir, sizeof dir, "%s/test_gemma_hf_%d", TR_BINARY_DIR, (int)getpid());
    snprintf(sub, sizeof sub, "%s/%s", dir, long_name);
    assert_int_equal(mkdir(dir, 0755), 0);
    assert_int_equal(mkdir(sub, 0755), 0);
    const char *json = "{\"model_type\": \"gemma\", \"vocab_size\": 1000, \"hidden_size\": %d, "
                       "\"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"head_dim\": 16, "
                       "\"intermediate_size\": 128, \"num_hidden_layers\": 5}";
    char text[1024];
    snprintf(text, sizeof text, json, 96);
    snprintf(path, sizeof path, "%s/cfg.json", dir);
    write_text(path, text);
    snprintf(text, sizeof text, json, 160);
    snprintf(path, sizeof path, "%s/cfg.json", sub);
    write_text(path, text);
    static const char head[] = "[run]\nmodel = gemma\npreset = tiny\nbatch = 1\nseq_len = 8\n[model]\n"
                               "num_hidden_layers = 1\nhf_config = ";
    char ini_near[768], ini_rel[768], ini_abs[768];
    snprintf(ini_near, sizeof ini_near, "%s/near.ini", dir);
    snprintf(text, sizeof text, "%scfg.json\n", head);
    write_text(ini_near, text);
    snprintf(ini_rel, sizeof ini_rel, "%s/rel.ini", dir);
    snprintf(text, sizeof text, "%s%s/cfg.json\n", head, long_name);
    assert_true(strlen(long_name) + strlen("/cfg.json") > 63);
    write_text(ini_rel, text);
    snprintf(ini_abs, sizeof ini_abs, "%s/abs.ini", dir);
    snprintf(text, sizeof text, "%s%s\n", head, path);
    write_text(ini_abs, text);

    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(sub), 0); /* where a cfg.json of another size lies */
    int64_t near = hidden_from(ini_near), rel = hidden_from(ini_rel), abs_ = hidden_from(ini_abs);
    assert_int_equal(chdir(cwd), 0);
    assert_int_equal(near, 96);
    assert_int_equal(rel, 160);
    assert_int_equal(abs_, 160);

    const char *files[] = {ini_near, ini_rel, ini_abs, path};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) unlink(files[i]);
    snprintf(path, sizeof path, "%s/cfg.json", dir);
    unlink(path);
    rmdir(sub);
    rmdir(dir);
}

static void test_names_match_state_dict(void **state) { tr_test_llm_names_match(&gemma); }

static void test_interface(void **state) {
    const struct tr_decoder_config *c = tiny();
    struct tr_graph *g = tr_test_llm_build(&tr_model_gemma, c, TR_DTYPE_BF16, 3, 20);
    const char *names[3] = {"input_ids", "position_ids", "attention_mask"};
    const int dts[3] = {TR_DTYPE_I32, TR_DTYPE_I32, TR_DTYPE_F32};
    tr_test_expect_inputs(g, 3, names, dts, 3, 20);
    assert_int_equal(tr_graph_n_outputs(g), 1);
    int lg = tr_graph_output(g, 0);
    assert_string_equal(tr_graph_output_name(g, 0), "logits");
    assert_int_equal(tr_node_dtype(g, lg), TR_DTYPE_BF16);
    assert_int_equal(tr_node_ndim(g, lg), 3);
    assert_int_equal(tr_node_shape(g, lg)[2], c->vocab_size);
    /* Tied: no lm_head; the logits read the embedding table. */
    assert_int_equal(tr_graph_find(g, "lm_head.weight"), -1);
    assert_int_equal(tr_node_input(g, lg, 1), tr_graph_find(g, "model.embed_tokens.weight"));
    /* Norm weights are drawn around 0: the model scales by 1 + w. */
    tr_test_llm_expect_init(g, "model.layers.1.input_layernorm.weight", 0.0f);
    tr_graph_free(g);
}

static void test_make_inputs(void **state) { tr_test_llm_make_inputs(&tr_model_gemma); }

static void predict_matches_hf(enum tr_dtype dt) { tr_test_llm_predict_vs_hf(&gemma, tiny(), dt, "logits"); }
TR_TEST_F32_BF16(test_predict_matches_hf, predict_matches_hf)

static void test_kv_cache(void **state) { tr_test_llm_kv_cache(&gemma, tiny()); }

static void test_greedy_generate_matches_hf(void **state) { tr_test_llm_greedy_vs_hf_all(&gemma, tiny(), TR_DTYPE_F32); }

static void test_unknown_preset(void **state) { tr_test_llm_unknown_preset(&tr_model_gemma); }

static void test_config_errors(void **state) {
    const struct tr_model_desc *m = &tr_model_gemma;
    /* past max_position_embeddings, as transformers allows: RoPE has no table */
    tr_graph_free(tr_test_llm_build(m, tiny(), TR_DTYPE_F32, 2, 129));
    struct tr_decoder_config c = *tiny();
    c.num_key_value_heads = 3;
    tr_test_llm_build_fails(m, &c, TR_TASK_PREDICT, TR_DTYPE_F32, 16, TR_ERR_INVALID, "num_attention_heads = 4",
                            "num_key_value_heads = 3");
    c = *tiny();
    snprintf(c.hidden_act, sizeof c.hidden_act, "relu2");
    tr_test_llm_build_fails(m, &c, TR_TASK_PREDICT, TR_DTYPE_F32, 16, TR_ERR_UNSUPPORTED, "relu2", NULL);
    c = *tiny();
    snprintf(c.lora_targets, sizeof c.lora_targets, "q_proj,x_proj"); /* more of fit's keys in test_llm_fit.c */
    tr_test_llm_build_fails(m, &c, TR_TASK_FIT, TR_DTYPE_F32, 16, TR_ERR_INVALID, "lora_targets", "'x_proj'");
}

/* A config.json that leaves keys out means GemmaConfig's defaults for them (gemma-7b's
 * sizes), not the tiny preset's. */
static void test_hf_config_defaults(void **state) {
    (void)state;
    tr_test_hf_defaults_match(&tr_model_gemma, "{\"model_type\": \"gemma\"}", TR_SOURCE_DIR "/tests/fixtures/hf/defaults/gemma.json", 8);
}

/* A tied config (gemma's) over a checkpoint with an lm_head.weight of its own: untied
 * where the two differ, as from_pretrained does (it will "NOT tie them"); tied where they
 * are equal, or where [model] tie_word_embeddings says so. */
static void test_untie_own_head(void **state) {
    (void)state;
    const struct tr_decoder_config *tiny = tr_model_gemma.presets[0].config;
    const int64_t sh[2] = {tiny->vocab_size, tiny->hidden_size};
    const char *names[2] = {"model.embed_tokens.weight", "lm_head.weight"};
    for (int k = 0; k < 3; k++) {
        struct tr_tensor ts[2] = {tr_test_tensor(TR_DTYPE_F32, 2, sh), tr_test_tensor(TR_DTYPE_F32, 2, sh)};
        tr_test_randn(&ts[0], 71, 1.0);
        tr_test_randn(&ts[1], k == 1 ? 71 : 72, 1.0); /* k 1: the same values */
        char path[512], ini[1024];
        struct tr_error e = {0};
        snprintf(path, sizeof path, "%s/own_head.safetensors", tr_test_dir);
        assert_int_equal(tr_safetensors_write(path, 2, names, ts, &e), TR_OK);
        tr_test_tensors_free(2, ts);
        snprintf(ini, sizeof ini, "[run]\nmodel = gemma\npreset = %s\nweights = %s\n%s", tr_model_gemma.presets[0].name,
                 path, k == 2 ? "[model]\ntie_word_embeddings = true\n" : "");
        static struct tr_config cfg;
        if (tr_config_load_string(ini, "m.ini", &cfg, &e)) fail_msg("%s", e.msg);
        struct tr_decoder_config c;
        if (tr_model_resolve(&tr_model_gemma, cfg.preset, &cfg, &c, &e)) fail_msg("%s", e.msg);
        assert_int_equal(c.tie_word_embeddings, k != 0);
    }
}

TR_TEST_MAIN(tr_test_dir_setup, tr_test_dir_teardown, test_untie_own_head, test_size_7b, test_hf_config_defaults, test_size_2b, test_presets_are_the_published_configs, test_hf_config_errors,
             test_model_keys_win_over_hf_config, test_hf_config_next_to_ini, test_names_match_state_dict, test_interface, test_make_inputs,
             test_predict_matches_hf_f32, test_predict_matches_hf_bf16, test_kv_cache,
             test_greedy_generate_matches_hf, test_unknown_preset, test_config_errors)
