/* BERT against Hugging Face: the tiny preset's graph, loaded with the state_dict that
 * transformers wrote (tests/fixtures/make_bert_fixture.py), run by the torch backend,
 * must give transformers' logits, last_hidden_state and pooler_output (f32 and bf16).
 * Also: parameter names and counts as in BertForSequenceClassification, the graph's
 * interface, config errors, and the synthetic batch. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "modelutil.h"
#include "bert/bert.h"
#include "models.h"
#include "trident/bench.h"
#include "trident/graph.h"
#include "trident/loader.h"
#include "trident/safetensors.h"
#include "trident/weights.h"

#define FIXTURE TR_SOURCE_DIR "/tests/fixtures/bert_tiny.safetensors"
#define FIXTURE_IO TR_SOURCE_DIR "/tests/fixtures/bert_tiny_io.safetensors"
#define HINT " (regenerate with: python3 tests/fixtures/make_bert_fixture.py)"

/* BertForSequenceClassification(BertConfig(<bert-base-cased's config.json>, num_labels=2)),
 * counted by transformers 5.x: sum(p.numel() for p in model.parameters()). */
#define BERT_BASE_PARAMS 108311810

#define preset(name) ((const struct tr_bert_config *)tr_test_preset(&tr_model_bert, name))

static struct tr_graph *build(const struct tr_bert_config *c, enum tr_dtype dt, int64_t B, int64_t T) {
    return tr_test_model_build(&tr_model_bert, c, TR_TASK_PREDICT, dt, B, T);
}

#define param_count tr_test_param_count

static void test_param_count_base(void **state) {
    struct tr_graph *g = build(preset("base"), TR_DTYPE_F32, 1, 512);
    assert_int_equal(param_count(g), BERT_BASE_PARAMS);
    assert_int_equal(tr_graph_n_params(g), 5 + 12 * 16 + 4);
    tr_graph_free(g);
}

/* Every PARAM is in the state_dict with its shape, and every state_dict entry is a PARAM. */
static void test_names_match_state_dict(void **state) {
    struct tr_graph *g = build(preset("tiny"), TR_DTYPE_F32, 2, 16);
    tr_test_expect_state_dict(g, FIXTURE, "", HINT);
    struct tr_safetensors *io = tr_test_open(FIXTURE_IO, HINT);
    assert_int_equal(param_count(g), tr_test_io_count(io, 0, HINT));
    tr_safetensors_close(io);
    tr_graph_free(g);
}

static void test_interface(void **state) {
    const struct tr_bert_config *c = preset("tiny");
    struct tr_graph *g = build(c, TR_DTYPE_BF16, 3, 20);
    const char *in_names[3] = {"input_ids", "attention_mask", "token_type_ids"};
    const int in_dt[3] = {TR_DTYPE_I32, TR_DTYPE_F32, TR_DTYPE_I32};
    tr_test_expect_inputs(g, 3, in_names, in_dt, 3, 20);
    const char *out_names[3] = {"logits", "last_hidden_state", "pooler_output"};
    const int64_t out_shapes[3][3] = {{3, 2}, {3, 20, 64}, {3, 64}};
    const int out_nd[3] = {2, 3, 2};
    assert_int_equal(tr_graph_n_outputs(g), 3);
    for (int i = 0; i < 3; i++) {
        int id = tr_graph_output(g, i);
        assert_string_equal(tr_graph_output_name(g, i), out_names[i]);
        assert_int_equal(tr_node_dtype(g, id), TR_DTYPE_BF16);
        assert_int_equal(tr_node_ndim(g, id), out_nd[i]);
        for (int d = 0; d < out_nd[i]; d++) assert_int_equal(tr_node_shape(g, id)[d], out_shapes[i][d]);
    }
    for (int i = 0; i < tr_graph_n_params(g); i++)
        assert_int_equal(tr_node_dtype(g, tr_graph_param(g, i)), TR_DTYPE_BF16);
    /* Inits: biases random, LayerNorm weights around 1. */
    const struct tr_attrs *a = tr_node_attrs(g, tr_graph_find(g, "bert.encoder.layer.1.output.dense.bias"));
    assert_true(a->floats[0] == 0.0f && a->floats[1] == 0.02f);
    a = tr_node_attrs(g, tr_graph_find(g, "bert.embeddings.LayerNorm.weight"));
    assert_true(a->floats[0] == 1.0f && a->floats[1] == 0.02f);
    tr_graph_free(g);
}

static void expect_build_error(const struct tr_bert_config *c, enum tr_task task, int64_t T, int status,
                               const char *const *words) {
    struct tr_build_opts o = {.task = task, .dtype = TR_DTYPE_F32, .batch = 2, .seq_len = T};
    struct tr_graph *g = NULL;
    struct tr_error e = {0};
    assert_int_equal(tr_graph_init(&g, &e), TR_OK);
    assert_int_equal(tr_model_bert.build(c, &o, g, &e), status);
    for (; *words; words++)
        if (!strstr(e.msg, *words)) fail_msg("error lacks '%s': %s", *words, e.msg);
    tr_graph_free(g);
}

static void test_config_errors(void **state) {
    struct tr_bert_config c = *preset("tiny");
    const char *long_seq[] = {"seq_len", "129", "max_position_embeddings", "128", NULL};
    expect_build_error(&c, TR_TASK_PREDICT, 129, TR_ERR_INVALID, long_seq);
    c.hidden_size = 100;
    c.num_attention_heads = 3;
    const char *heads[] = {"hidden_size", "100", "num_attention_heads", "3", NULL};
    expect_build_error(&c, TR_TASK_PREDICT, 16, TR_ERR_INVALID, heads);
    c = *preset("tiny");
    const char *gen[] = {"generate", "predict, fit", NULL};
    expect_build_error(&c, TR_TASK_GENERATE, 16, TR_ERR_UNSUPPORTED, gen);
    assert_int_equal(tr_model_bert.tasks, 1u << TR_TASK_PREDICT | 1u << TR_TASK_FIT);
    /* what fit cannot train: a cross-entropy over one class (always 0), an unknown
     * problem_type; the same config predicts (its logits do not depend on the loss) */
    static const struct tr_test_refusal r[] = {
        {TR_TASK_FIT, {{"num_labels", "1"}, {"problem_type", "single_label_classification"}},
         {"num_labels = 1", "nothing would train", "regression"}},
        {TR_TASK_FIT, {{"problem_type", "regresion"}}, {"'regresion'", "multi_label_classification"}},
        {TR_TASK_PREDICT, {{"problem_type", "ranking"}}, {"'ranking'", "not one of"}},
        {TR_TASK_PREDICT, {{"hidden_act", "relu2"}}, {"hidden_act = 'relu2'", "gelu_new"}},
    };
    TR_TEST_EXPECT_REFUSALS(&tr_model_bert, "tiny", r);
    c = *preset("tiny");
    c.num_labels = 1;
    snprintf(c.problem_type, sizeof c.problem_type, "single_label_classification");
    struct tr_build_opts o = {.task = TR_TASK_PREDICT, .dtype = TR_DTYPE_F32, .batch = 2, .seq_len = 8};
    struct tr_graph *g = NULL;
    struct tr_error e = {0};
    assert_int_equal(tr_graph_init(&g, &e), TR_OK);
    if (tr_model_bert.build(&c, &o, g, &e)) fail_msg("predict with one label: %s", e.msg);
    tr_graph_free(g);
}

/* fit's labels for each problem_type, as transformers takes them (one label regresses on
 * labels [B]), and the synthetic batch's labels: classes in range, regression targets in
 * [0,1], multi-label targets 0 or 1, not all alike. */
static void test_fit_labels(void **state) {
    (void)state;
    static const struct {
        const char *problem;
        int64_t labels;
        int dtype, ndim;
    } cases[] = {
        {"", 3, TR_DTYPE_I32, 1},
        {"", 1, TR_DTYPE_F32, 1},
        {"single_label_classification", 2, TR_DTYPE_I32, 1},
        {"regression", 1, TR_DTYPE_F32, 1},
        {"regression", 3, TR_DTYPE_F32, 2},
        {"multi_label_classification", 4, TR_DTYPE_F32, 2},
        {"multi_label_classification", 1, TR_DTYPE_F32, 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct tr_bert_config c = *preset("tiny");
        c.num_labels = cases[i].labels;
        snprintf(c.problem_type, sizeof c.problem_type, "%s", cases[i].problem);
        const int64_t B = 8, T = 6;
        struct tr_build_opts o = {.task = TR_TASK_FIT, .dtype = TR_DTYPE_BF16, .batch = B, .seq_len = T};
        struct tr_graph *g = NULL;
        struct tr_error e = {0};
        int loss = -1;
        assert_int_equal(tr_graph_init(&g, &e), TR_OK);
        if (tr_bert_build_classifier_loss(&c, &o, g, &loss, &e))
            fail_msg("'%s' with %lld labels: %s", cases[i].problem, (long long)cases[i].labels, e.msg);
        assert_int_equal(tr_node_dtype(g, loss), TR_DTYPE_F32);
        assert_int_equal(tr_node_ndim(g, loss), 0);
        assert_int_equal(tr_graph_n_inputs(g), 4);
        const int lab = tr_graph_input(g, 3);
        assert_string_equal(tr_node_name(g, lab), "labels");
        assert_int_equal(tr_node_dtype(g, lab), cases[i].dtype);
        assert_int_equal(tr_node_ndim(g, lab), cases[i].ndim);
        assert_int_equal(tr_node_shape(g, lab)[0], B);
        if (cases[i].ndim == 2) assert_int_equal(tr_node_shape(g, lab)[1], cases[i].labels);

        struct tr_tensor in[4];
        void *buf[4];
        for (int k = 0; k < 4; k++) {
            int id = tr_graph_input(g, k);
            struct tr_tensor shape = tr_node_tensor(g, id);
            buf[k] = malloc(tr_tensor_nbytes(&shape));
            assert_non_null(buf[k]);
            tr_tensor_make(&in[k], buf[k], (enum tr_dtype)shape.dtype, shape.ndim, shape.shape, NULL);
        }
        if (tr_model_bert.make_inputs(&c, &o, 7, 4, in, &e)) fail_msg("make_inputs: %s", e.msg);
        double lo = 1e9, hi = -1e9;
        for (int64_t k = 0; k < tr_tensor_numel(&in[3]); k++) {
            double v = tr_tensor_get_f64(&in[3], k);
            lo = v < lo ? v : lo, hi = v > hi ? v : hi;
            if (cases[i].dtype == TR_DTYPE_I32) assert_true(v >= 0 && v < (double)cases[i].labels);
            else if (!strcmp(cases[i].problem, "multi_label_classification")) assert_true(v == 0 || v == 1);
            else assert_true(v >= 0 && v <= 1);
        }
        assert_true(hi > lo); /* a batch of one label teaches nothing */
        for (int k = 0; k < 4; k++) free(buf[k]);
        tr_graph_free(g);
    }
}

/* [model] hf_config: bert-base-cased's config.json over the tiny preset is the base preset,
 * and its graph has the base model's parameter count; a classifier's id2label sets
 * num_labels; trident's own keys (LoRA, pad_fraction) are never taken from the file; what
 * trident's BERT is not is refused by its key. */
static void test_hf_config(void **state) {
    static const char *const files[] = {TR_SOURCE_DIR "/tests/fixtures/hf/bert-base-cased.json",
                                        TR_SOURCE_DIR "/tests/fixtures/hf/bert-base-cased-saved.json"};
    static struct tr_config cfg;
    struct tr_error e = {0};
    for (int f = 0; f < 2; f++) {
        struct tr_bert_config c = *preset("tiny");
        if (tr_model_bert.read_hf_config(&c, files[f], &e)) fail_msg("%s", e.msg);
        const struct tr_bert_config *b = preset("base");
        assert_int_equal(c.vocab_size, b->vocab_size);
        assert_int_equal(c.hidden_size, b->hidden_size);
        assert_int_equal(c.num_hidden_layers, b->num_hidden_layers);
        assert_int_equal(c.num_attention_heads, b->num_attention_heads);
        assert_int_equal(c.intermediate_size, b->intermediate_size);
        assert_int_equal(c.max_position_embeddings, b->max_position_embeddings);
        assert_int_equal(c.type_vocab_size, b->type_vocab_size);
        assert_int_equal(c.num_labels, b->num_labels);
        assert_int_equal(c.pad_token_id, b->pad_token_id);
        assert_true(c.layer_norm_eps == b->layer_norm_eps);
        char ini[512];
        snprintf(ini, sizeof ini, "[run]\nmodel = bert\npreset = tiny\nseq_len = 16\n[model]\nhf_config = %s\n", files[f]);
        if (tr_config_load_string(ini, "hf.ini", &cfg, &e)) fail_msg("%s", e.msg);
        struct tr_task_graph tg;
        if (tr_task_graph_build(&cfg, tr_builtin_models, &tg, &e)) fail_msg("%s", e.msg);
        assert_int_equal(param_count(tg.graph), BERT_BASE_PARAMS);
        tr_task_graph_free(&tg);
    }
    static const struct {
        const char *json, *needle;
        int64_t labels, pad;
    } cases[] = {
        {"{\"model_type\": \"bert\", \"id2label\": {\"0\": \"a\", \"1\": \"b\", \"2\": \"c\"}, \"pad_token_id\": null, \"lora_rank\": 8}",
         NULL, 3, -1},
        {"{\"model_type\": \"roberta\"}", "model_type", 0, 0},
        {"{\"problem_type\": null, \"hidden_act\": \"gelu_new\"}", NULL, 2, 0},
        {"{\"hidden_act\": \"relu2\"}", "hidden_act", 0, 0},
        {"{\"position_embedding_type\": \"relative_key\"}", "position_embedding_type", 0, 0},
        {"{\"is_decoder\": true}", "is_decoder", 0, 0},
        {"{\"hidden_size\": 4294967296}", "hidden_size", 0, 0},
        {"{\"id2label\": {}}", "id2label", 0, 0},
        /* num_labels against an id2label of another length: num_labels, as transformers */
        {"{\"num_labels\": 5, \"id2label\": {\"0\": \"a\", \"1\": \"b\", \"2\": \"c\"}}", NULL, 5, 0},
        {"{\"num_labels\": 3, \"id2label\": {\"0\": \"a\", \"1\": \"b\", \"2\": \"c\"}}", NULL, 3, 0},
    };
    char path[512];
    snprintf(path, sizeof path, "%s/bert_hf_case_%d.json", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        FILE *fp = fopen(path, "w");
        assert_non_null(fp);
        fputs(cases[i].json, fp);
        fclose(fp);
        struct tr_bert_config c = *preset("tiny");
        int rc = tr_model_bert.read_hf_config(&c, path, &e);
        if (!cases[i].needle) {
            if (rc) fail_msg("%s: %s", cases[i].json, e.msg);
            assert_int_equal(c.num_labels, cases[i].labels);
            assert_int_equal(c.pad_token_id, cases[i].pad);
            assert_int_equal(c.lora_rank, preset("tiny")->lora_rank); /* trident's own keys are not the file's */
        } else {
            if (rc == TR_OK) fail_msg("%s was accepted", cases[i].json);
            if (!strstr(e.msg, cases[i].needle)) fail_msg("%s: error lacks '%s': %s", cases[i].json, cases[i].needle, e.msg);
        }
    }
    remove(path);
}

#define alloc_inputs(g, in) tr_test_input_tensors(g, 3, in)

static void test_make_inputs(void **state) {
    const struct tr_bert_config *c = preset("tiny");
    const int64_t B = 5, T = 16;
    struct tr_graph *g = build(c, TR_DTYPE_F32, B, T);
    struct tr_build_opts o = {.task = TR_TASK_PREDICT, .dtype = TR_DTYPE_F32, .batch = B, .seq_len = T};
    struct tr_tensor a[3], b[3], d[3];
    alloc_inputs(g, a);
    alloc_inputs(g, b);
    alloc_inputs(g, d);
    struct tr_error e = {0};
    assert_int_equal(tr_model_bert.make_inputs(c, &o, 42, 3, a, &e), TR_OK);
    assert_int_equal(tr_model_bert.make_inputs(c, &o, 42, 3, b, &e), TR_OK);
    assert_int_equal(tr_model_bert.make_inputs(c, &o, 43, 3, d, &e), TR_OK);
    for (int i = 0; i < 3; i++) assert_memory_equal(a[i].data, b[i].data, tr_tensor_nbytes(&a[i]));
    assert_memory_not_equal(a[0].data, d[0].data, tr_tensor_nbytes(&a[0]));
    const int32_t *ids = a[0].data, *types = a[2].data;
    const float *keep = a[1].data;
    const int64_t kept[5] = {16, 14, 12, 10, 16}; /* T - (b mod 4)·T/8 */
    int distinct = 0;
    for (int64_t bi = 0; bi < B; bi++) {
        assert_int_equal(tr_bert_tokens_kept(c, bi, T), kept[bi]);
        for (int64_t t = 0; t < T; t++) {
            int64_t i = bi * T + t;
            assert_true(ids[i] >= 0 && ids[i] < c->vocab_size);
            distinct += i > 0 && ids[i] != ids[i - 1];
            assert_true(keep[i] == (t < kept[bi] ? 1.0f : 0.0f));
            assert_int_equal(types[i], t < T / 2 ? 0 : 1);
        }
    }
    assert_true(distinct > B * T / 2);
    /* A wrong input is refused by name. */
    struct tr_tensor swapped[3] = {a[1], a[0], a[2]};
    assert_int_equal(tr_model_bert.make_inputs(c, &o, 42, 3, swapped, &e), TR_ERR_SHAPE);
    assert_non_null(strstr(e.msg, "input_ids"));
    tr_test_tensors_free(3, a);
    tr_test_tensors_free(3, b);
    tr_test_tensors_free(3, d);
    tr_graph_free(g);
}

/* Run g once on the torch backend (cpu): outputs allocated here, poisoned first. */
static void run_torch(struct tr_graph *g, const struct tr_tensor *in, struct tr_tensor *out) {
    tr_test_run_backend(&tr_test_backends[0], NULL, g, in, 1, out, NULL);
}

static void predict_matches_hf(enum tr_dtype dt) {
    struct tr_test_bert b;
    tr_test_bert_open(&b, dt, HINT);
    struct tr_tensor out[3];
    run_torch(b.g, b.in, out);
    tr_test_expect_bert_hf(b.io, b.g, out, dt, "bert tiny", HINT);
    tr_test_tensors_free(3, out);
    tr_test_bert_close(&b);
}

static void test_predict_matches_hf_f32(void **state) { predict_matches_hf(TR_DTYPE_F32); }
static void test_predict_matches_hf_bf16(void **state) { predict_matches_hf(TR_DTYPE_BF16); }

/* With seeded weights and a synthetic batch: tokens behind the mask do not reach the
 * kept positions, and do reach their own. */
static void test_mask_hides_padding(void **state) {
    const struct tr_bert_config *c = preset("tiny");
    const int64_t B = 2, T = 16, D = c->hidden_size;
    struct tr_graph *g = build(c, TR_DTYPE_F32, B, T);
    struct tr_build_opts o = {.task = TR_TASK_PREDICT, .dtype = TR_DTYPE_F32, .batch = B, .seq_len = T};
    struct tr_weights *w = NULL;
    struct tr_error e = {0};
    assert_int_equal(tr_weights_from_seed(g, 5, &w, &e), TR_OK);
    struct tr_tensor in[3], out1[3], out2[3];
    alloc_inputs(g, in);
    assert_int_equal(tr_model_bert.make_inputs(c, &o, 5, 3, in, &e), TR_OK);
    run_torch(g, in, out1);
    int64_t kept = tr_bert_tokens_kept(c, 1, T);
    assert_true(kept < T);
    int32_t *ids = in[0].data;
    for (int64_t t = kept; t < T; t++) ids[T + t] = (ids[T + t] + 17) % (int32_t)c->vocab_size;
    run_torch(g, in, out2);
    const float *h1 = out1[1].data, *h2 = out2[1].data;
    double seen = 0, leaked = 0;
    for (int64_t t = 0; t < T; t++)
        for (int64_t d = 0; d < D; d++) {
            double diff = fabs((double)h1[(T + t) * D + d] - h2[(T + t) * D + d]);
            if (t < kept) leaked = fmax(leaked, diff);
            else seen = fmax(seen, diff);
        }
    assert_true(leaked < 1e-6);
    assert_true(seen > 1e-3);
    for (int k = 0; k < 2; k++) /* sample 0's logits */
        assert_true(fabs((double)((float *)out1[0].data)[k] - ((float *)out2[0].data)[k]) < 1e-6);
    tr_test_tensors_free(3, in);
    tr_test_tensors_free(3, out1);
    tr_test_tensors_free(3, out2);
    tr_weights_free(w);
    tr_graph_free(g);
}

/* A config.json that leaves keys out means BertConfig's defaults for them (tiny's width,
 * layers, vocabulary and positions are not what transformers would build), labels 2. */
static void test_hf_config_defaults(void **state) {
    (void)state;
    tr_test_hf_defaults_match(&tr_model_bert, "{\"model_type\": \"bert\"}", TR_SOURCE_DIR "/tests/fixtures/hf/defaults/bert.json", 6);
    tr_test_hf_defaults_match(&tr_model_bert, "{\"id2label\": null}", TR_SOURCE_DIR "/tests/fixtures/hf/defaults/bert.json", 6);
}

/* [run] inputs whose attention_mask holds a value other than 0 and 1 (a 2 where the
 * tokenizer writes 1): refused, naming the element, where it weighed a key differently
 * from transformers (which reads any nonzero as 1). */
static void test_inputs_mask_values(void **state) {
    (void)state;
    struct tr_error e = {0};
    char path[512], ini[768];
    static struct tr_config cfg;
    static struct tr_bench_report rep;
    /* a mask value other than 0 or 1; an id past the embedding table, named by sample and
     * position before any backend runs */
    static const struct {
        const char *tensor;
        int64_t index;
        double value;
        const char *needle;
    } bad[] = {{"attention_mask", 3, 2.0, "'attention_mask' element 3 is 2: expected 0 (a pad) or 1 (a token)"},
               {"input_ids", 19, 5000.0, "'input_ids' element 19 (sample 1, position 3) is 5000, outside the embedding "
                                         "table's [0, 1000)"},
               {"token_type_ids", 2, 7.0, "'token_type_ids' element 2 (sample 0, position 2) is 7, outside the "
                                          "embedding table's [0, 2)"}};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        tr_test_copy_poisoned(TR_SOURCE_DIR "/tests/fixtures/reference/batch.safetensors", bad[k].tensor, bad[k].index,
                              bad[k].value, "bad_batch.safetensors", path, sizeof path);
        snprintf(ini, sizeof ini, "[run]\nmodel = bert\npreset = tiny\nbackends = tf\nbatch = 2\nseq_len = 16\n"
                 "steps = 1\nwarmup = 1\ninputs = %s\n", path);
        if (tr_config_load_string(ini, "m.ini", &cfg, &e)) fail_msg("%s", e.msg);
        assert_int_not_equal(tr_bench_run(&cfg, tr_builtin_models, &rep, &e), TR_OK);
        tr_assert_msg_has(&e, bad[k].needle);
    }
}

/* A regression's labels as [B, 1] (what a [B, num_labels] target is at num_labels 1;
 * transformers squeezes it): read as the [B] the graph takes, the same losses; a shape
 * that is not the graph's with 1s dropped is refused. */
static void test_inputs_labels_squeezed(void **state) {
    (void)state;
    struct tr_error e = {0};
    struct tr_safetensors *st = NULL;
    if (tr_safetensors_open(TR_SOURCE_DIR "/tests/fixtures/reference/batch.safetensors", &st, &e)) fail_msg("%s", e.msg);
    const char *names[4] = {"input_ids", "attention_mask", "token_type_ids", "labels"};
    struct tr_tensor ts[4];
    for (int i = 0; i < 3; i++)
        if (tr_safetensors_get(st, names[i], &ts[i], &e)) fail_msg("%s", e.msg);
    static const int64_t shapes[3][2] = {{2, 1}, {2, 0}, {2, 2}}; /* [2,1], [2], [2,2] */
    double first[2] = {0};
    for (int k = 0; k < 3; k++) {
        ts[3] = tr_test_tensor(TR_DTYPE_F32, shapes[k][1] ? 2 : 1, shapes[k]);
        for (int64_t j = 0; j < tr_tensor_numel(&ts[3]); j++) tr_tensor_set_f64(&ts[3], j, 0.5 + (double)j);
        char path[512], ini[768];
        snprintf(path, sizeof path, "%s/regression.safetensors", tr_test_dir);
        assert_int_equal(tr_safetensors_write(path, 4, names, ts, &e), TR_OK);
        tr_test_tensor_free(&ts[3]);
        snprintf(ini, sizeof ini, "[run]\nmodel = bert\npreset = tiny\ntask = fit\nbackends = tf\nbatch = 2\n"
                 "seq_len = 16\nsteps = 2\nwarmup = 1\ninputs = %s\n[model]\nnum_labels = 1\n", path);
        static struct tr_config cfg;
        static struct tr_bench_report rep;
        if (tr_config_load_string(ini, "m.ini", &cfg, &e)) fail_msg("%s", e.msg);
        const int rc = tr_bench_run(&cfg, tr_builtin_models, &rep, &e);
        if (k == 2) {
            assert_int_not_equal(rc, TR_OK);
            tr_assert_msg_has(&e, "'labels' is f32[2,2], the graph's input is f32[2]");
            continue;
        }
        if (rc) fail_msg("%s", e.msg);
        first[k] = rep.rows[0].loss_first;
    }
    assert_true(first[0] > 0 && first[0] == first[1]);
    tr_safetensors_close(st);
}

TR_TEST_MAIN(tr_test_dir_setup, tr_test_dir_teardown, test_inputs_mask_values, test_inputs_labels_squeezed, test_param_count_base, test_hf_config_defaults, test_names_match_state_dict, test_interface, test_config_errors, test_fit_labels,
             test_hf_config,
             test_make_inputs, test_predict_matches_hf_f32, test_predict_matches_hf_bf16, test_mask_hides_padding)
