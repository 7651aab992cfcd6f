/* LoRA on BERT (models/bert: lora_rank, lora_alpha, lora_targets) against PyTorch + peft.
 *
 * - With lora_B zeros (its init) the LoRA model's outputs equal the base model's bit for
 *   bit (f32, torch backend); with the fixture's random lora_B they differ.
 * - tr_grad with respect to tr_bert_trainable_params only (adapters + classifier) adds
 *   no gradient node for a frozen weight.
 * - Loss (1e-5 relative) and every trainable gradient (1e-4 relative; the classifier
 *   bias's relative to the terms its batch sum cancels, see below) equal peft's
 *   (LoraConfig(r=4, lora_alpha=8, target_modules=["query","value"]), float64) on the
 *   fixture batch, labels [1,0] (tests/fixtures/make_bert_lora_fixture.py).
 * - Bad lora_targets / lora_rank are refused with the key, the value and what is valid.
 * - Gemma PeftModels as peft saves them (tests/fixtures/make_peft_llm_fixture.py: bias =
 *   "all" with the targets' biases under base_layer, modules_to_save = ["lm_head"] and
 *   ["embed_tokens"] on a tied model) give the PeftModel's logits on every backend
 *   (1e-4 relative, through the runner and [run] reference); what trident does not compute
 *   (use_dora, an alpha_pattern or rank_pattern entry) is refused naming the file, the key
 *   and the value; a fit from an adapter whose peft fit trains more than the factors
 *   (bias, modules_to_save) says what it leaves untrained.
 * Base weights come from bert_tiny.safetensors and adapters from bert_tiny_lora.safetensors,
 * bound by hand (tr_weights_load wants every PARAM in one file). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backendutil.h"
#include "bert/bert.h"
#include "models.h"
#include "trident/autodiff.h"
#include <unistd.h>
#include "trident/bench.h"
#include "trident/config.h"
#include "trident/graph.h"
#include "trident/loader.h"
#include "trident/safetensors.h"

#define FIXTURE TR_SOURCE_DIR "/tests/fixtures/bert_tiny.safetensors"
#define FIXTURE_IO TR_SOURCE_DIR "/tests/fixtures/bert_tiny_io.safetensors"
#define FIXTURE_LORA TR_SOURCE_DIR "/tests/fixtures/bert_tiny_lora.safetensors"
#define HINT " (regenerate with: python3 tests/fixtures/make_bert_lora_fixture.py)"
#define LOSS_TOL 1e-5
#define GRAD_TOL 1e-4
#define MAX_PARAMS 64

/* The fixture's LoRA: r 4, alpha 8, query and value. */
static struct tr_bert_config lora_config(void) {
    struct tr_bert_config c = *(const struct tr_bert_config *)tr_model_bert.presets[0].config;
    assert_string_equal(tr_model_bert.presets[0].name, "tiny");
    c.lora_rank = 4;
    c.lora_alpha = 8;
    snprintf(c.lora_targets, sizeof c.lora_targets, "query,value");
    return c;
}

/* Host buffers bound to a graph's PARAMs. */
struct bound {
    int n;
    void *buf[MAX_PARAMS];
};

static void bound_free(struct bound *b) {
    for (int i = 0; i < b->n; i++) free(b->buf[i]);
    b->n = 0;
}

/* Bind every PARAM of g: from lora when it holds the name (unless zero_b and it is a
 * lora_B), else zeros for a zero_b lora_B, else from base. Copies, so alignment is ours. */
static void bind_all(struct tr_graph *g, const struct tr_safetensors *base, const struct tr_safetensors *lora,
                     int zero_b, struct bound *b) {
    struct tr_error e = {0};
    bound_free(b);
    assert_true(tr_graph_n_params(g) <= MAX_PARAMS);
    for (int i = 0; i < tr_graph_n_params(g); i++) {
        int id = tr_graph_param(g, i);
        const char *name = tr_node_name(g, id);
        struct tr_tensor want = tr_node_tensor(g, id), t;
        size_t bytes = (size_t)tr_tensor_numel(&want) * sizeof(float);
        void *p = calloc(1, bytes);
        assert_non_null(p);
        b->buf[b->n++] = p;
        int is_b = strstr(name, ".lora_B.") != NULL;
        if (!(zero_b && is_b)) {
            const struct tr_safetensors *src = strstr(name, ".lora_") ? lora : base;
            if (tr_safetensors_get(src, name, &t, &e)) fail_msg("%s" HINT, e.msg);
            assert_int_equal(t.dtype, TR_DTYPE_F32);
            assert_int_equal(tr_tensor_numel(&t), tr_tensor_numel(&want));
            memcpy(p, t.data, bytes);
        }
        if (tr_graph_bind_param(g, id, p, &e)) fail_msg("%s: %s", name, e.msg);
    }
}

/* The fixtures: the batch (in[0..2]; in[3] is the caller's), the base model's weights,
 * the LoRA reference, and predict options sized to the batch. */
struct fixtures {
    struct tr_safetensors *io, *base, *lora;
    struct tr_tensor in[4];
    struct tr_build_opts o;
};

static void open_fixtures(struct fixtures *f) {
    struct tr_error e = {0};
    f->io = tr_test_bert_batch(FIXTURE_IO, f->in, "");
    if (tr_safetensors_open(FIXTURE, &f->base, &e)) fail_msg("%s", e.msg);
    if (tr_safetensors_open(FIXTURE_LORA, &f->lora, &e)) fail_msg("%s" HINT, e.msg);
    f->o = (struct tr_build_opts){.task = TR_TASK_PREDICT, .dtype = TR_DTYPE_F32, .batch = f->in[0].shape[0],
                                  .seq_len = f->in[0].shape[1]};
}

static void close_fixtures(struct fixtures *f) {
    tr_safetensors_close(f->lora);
    tr_safetensors_close(f->base);
    tr_safetensors_close(f->io);
}

/* Run g once on the torch backend (cpu): outputs allocated here, poisoned first. */
static void run_torch(struct tr_graph *g, const struct tr_tensor *in, struct tr_tensor *out) {
    tr_test_run_backend(&tr_test_backends[0], NULL, g, in, 1, out, NULL);
}

static void test_zero_b_is_base(void **state) {
    (void)state;
    struct tr_error e = {0};
    struct fixtures f;
    open_fixtures(&f);
    const struct tr_bert_config *tiny = tr_model_bert.presets[0].config;
    struct tr_bert_config lc = lora_config();

    struct tr_graph *g0 = NULL, *g1 = NULL;
    assert_int_equal(tr_graph_init(&g0, &e), TR_OK);
    assert_int_equal(tr_graph_init(&g1, &e), TR_OK);
    if (tr_model_bert.build(tiny, &f.o, g0, &e)) fail_msg("%s", e.msg);
    if (tr_model_bert.build(&lc, &f.o, g1, &e)) fail_msg("%s", e.msg);
    /* 4 adapters more per layer (query and value, A and B); base names and shapes kept. */
    assert_int_equal(tr_graph_n_params(g1), tr_graph_n_params(g0) + 4 * (int)tiny->num_hidden_layers);
    for (int i = 0; i < tr_graph_n_params(g0); i++) {
        int id0 = tr_graph_param(g0, i), id1 = tr_graph_find(g1, tr_node_name(g0, id0));
        assert_true(id1 >= 0);
        assert_int_equal(tr_node_op(g1, id1), tr_node_op(g0, id0));
        struct tr_tensor a = tr_node_tensor(g0, id0), b = tr_node_tensor(g1, id1);
        assert_int_equal(a.ndim, b.ndim);
        assert_memory_equal(a.shape, b.shape, sizeof(int64_t) * (size_t)a.ndim);
    }
    int qa = tr_graph_find(g1, "bert.encoder.layer.1.attention.self.value.lora_A.weight");
    int qb = tr_graph_find(g1, "bert.encoder.layer.1.attention.self.value.lora_B.weight");
    assert_true(qa >= 0 && qb >= 0);
    assert_int_equal(tr_node_shape(g1, qa)[0], 4);
    assert_int_equal(tr_node_shape(g1, qa)[1], tiny->hidden_size);
    assert_int_equal(tr_node_shape(g1, qb)[0], tiny->hidden_size);
    assert_int_equal(tr_node_shape(g1, qb)[1], 4);
    assert_int_equal(tr_graph_find(g1, "bert.encoder.layer.0.attention.self.key.lora_A.weight"), -1);

    struct bound b0 = {0}, b1 = {0};
    bind_all(g0, f.base, f.lora, 0, &b0);
    bind_all(g1, f.base, f.lora, 1, &b1);
    int n_out = tr_graph_n_outputs(g0);
    assert_int_equal(n_out, 3);
    struct tr_tensor out0[3], out1[3], out2[3];
    run_torch(g0, f.in, out0);
    run_torch(g1, f.in, out1);
    for (int i = 0; i < n_out; i++) {
        size_t bytes = (size_t)tr_tensor_numel(&out0[i]) * sizeof(float);
        if (memcmp(out0[i].data, out1[i].data, bytes) != 0)
            fail_msg("output %s: LoRA with zero lora_B differs from the base model", tr_graph_output_name(g0, i));
    }
    /* Random lora_B: the adapters change every output. */
    bind_all(g1, f.base, f.lora, 0, &b1);
    run_torch(g1, f.in, out2);
    for (int i = 0; i < n_out; i++) {
        double *ref = tr_test_to_f64(&out0[i]);
        double d = tr_test_rel_err(&out2[i], ref);
        free(ref);
        print_message("%s: random lora_B moves it by %.3g (relative)\n", tr_graph_output_name(g1, i), d);
        assert_true(d > 1e-3 && isfinite(d));
    }
    tr_test_tensors_free(n_out, out0);
    tr_test_tensors_free(n_out, out1);
    tr_test_tensors_free(n_out, out2);
    bound_free(&b0);
    bound_free(&b1);
    tr_graph_free(g0);
    tr_graph_free(g1);
    close_fixtures(&f);
}

static void test_grads_match_peft(void **state) {
    (void)state;
    struct tr_error e = {0};
    struct fixtures f;
    open_fixtures(&f);
    if (tr_safetensors_get(f.lora, "labels", &f.in[3], &e)) fail_msg("%s" HINT, e.msg);
    struct tr_tensor ref_loss;
    if (tr_safetensors_get(f.lora, "loss", &ref_loss, &e)) fail_msg("%s" HINT, e.msg);

    struct tr_bert_config lc = lora_config();
    /* task predict: the loss on top of the predict graph, whose outputs (logits) are checked too */
    struct tr_graph *g = NULL;
    assert_int_equal(tr_graph_init(&g, &e), TR_OK);
    int loss = -1;
    if (tr_bert_build_classifier_loss(&lc, &f.o, g, &loss, &e)) fail_msg("%s", e.msg);

    int wrt[MAX_PARAMS], grads[MAX_PARAMS], n = 0;
    if (tr_bert_trainable_params(&lc, g, wrt, MAX_PARAMS, &n, &e)) fail_msg("%s", e.msg);
    assert_int_equal(n, 4 * (int)lc.num_hidden_layers + 2); /* adapters + classifier weight, bias */
    int few[2];
    assert_int_not_equal(tr_bert_trainable_params(&lc, g, few, 2, &n, &e), TR_OK);
    if (tr_bert_trainable_params(&lc, g, wrt, MAX_PARAMS, &n, &e)) fail_msg("%s", e.msg);
    int n_nodes_before = tr_graph_n_nodes(g);
    if (tr_grad(g, loss, n, wrt, grads, &e)) fail_msg("tr_grad: %s", e.msg);
    assert_true(tr_graph_n_nodes(g) > n_nodes_before);

    /* Frozen weights get no gradient node; each trainable one exactly its own. */
    int n_frozen = 0;
    for (int i = 0; i < tr_graph_n_params(g); i++) {
        int id = tr_graph_param(g, i), trainable = 0;
        for (int k = 0; k < n; k++) trainable |= wrt[k] == id;
        char gname[256];
        snprintf(gname, sizeof gname, "grad.%s", tr_node_name(g, id));
        int found = 0;
        for (int k = 0; k < tr_graph_n_nodes(g); k++) {
            const char *nm = tr_node_name(g, k);
            found += nm && strcmp(nm, gname) == 0;
        }
        if (trainable) assert_int_equal(found, 1);
        else if (found) fail_msg("frozen %s has a gradient node '%s'", tr_node_name(g, id), gname);
        n_frozen += !trainable;
    }
    assert_true(n_frozen > 0);

    assert_int_equal(tr_graph_set_output(g, loss, "loss"), TR_OK);
    for (int i = 0; i < n; i++) assert_int_equal(tr_graph_set_output(g, grads[i], tr_node_name(g, grads[i])), TR_OK);
    const int first = 4, n_out = tr_graph_n_outputs(g);
    assert_int_equal(n_out, first + n);
    struct bound b = {0};
    bind_all(g, f.base, f.lora, 0, &b);
    struct tr_tensor *out = calloc((size_t)n_out, sizeof *out);
    assert_non_null(out);
    run_torch(g, f.in, out);

    const double loss_ref = ((const float *)ref_loss.data)[0], l = ((const float *)out[3].data)[0];
    const double loss_err = fabs(l - loss_ref) / fabs(loss_ref);
    double logits_err = tr_test_io_rel_err(f.lora, "logits", &out[0], HINT);
    struct tr_tensor t;
    /* The classifier bias's gradient is the batch mean of softmax(logits) - onehot(label):
     * with two samples and two classes it is a difference of two near-equal terms, so a
     * correct f32 sum is only accurate relative to the terms it is made of. Its error is
     * measured against ||mean_b |p_b - y_b||| (from trident's own logits) instead of
     * against the cancelled result; every other gradient against itself. */
    double bias_scale = 0;
    {
        const int64_t B = out[0].shape[0], C = out[0].shape[1];
        double *lg = tr_test_to_f64(&out[0]), *lab = tr_test_to_f64(&f.in[3]), ss = 0;
        for (int64_t c = 0; c < C; c++) {
            double a = 0;
            for (int64_t bb = 0; bb < B; bb++) {
                double mx = -INFINITY, z = 0;
                for (int64_t j = 0; j < C; j++) mx = fmax(mx, lg[bb * C + j]);
                for (int64_t j = 0; j < C; j++) z += exp(lg[bb * C + j] - mx);
                a += fabs(exp(lg[bb * C + c] - mx) / z - (lab[bb] == (double)c)) / (double)B;
            }
            ss += a * a;
        }
        bias_scale = sqrt(ss);
        free(lg);
        free(lab);
    }
    double worst = 0;
    int worst_i = 0;
    for (int i = 0; i < n; i++) {
        if (tr_safetensors_get(f.lora, tr_node_name(g, grads[i]), &t, &e)) fail_msg("%s" HINT, e.msg);
        assert_int_equal(tr_tensor_numel(&t), tr_tensor_numel(&out[first + i]));
        double *ref = tr_test_to_f64(&t);
        double r = tr_test_rel_err(&out[first + i], ref);
        if (strcmp(tr_node_name(g, grads[i]), "grad.classifier.bias") == 0) {
            double dn = 0, rn = 0;
            for (int64_t j = 0; j < tr_tensor_numel(&t); j++) {
                double d = tr_tensor_get_f64(&out[first + i], j) - ref[j];
                dn += d * d;
                rn += ref[j] * ref[j];
            }
            print_message("grad.classifier.bias: %.2e relative to itself (cancellation %.0fx), %.2e relative to "
                          "its terms\n", r, bias_scale / sqrt(rn), sqrt(dn) / bias_scale);
            r = sqrt(dn) / bias_scale;
        }
        free(ref);
        if (!(r <= worst)) worst = r, worst_i = i;
    }
    print_message("loss %.8f (peft %.8f, rel err %.2e), logits rel err %.2e, %d gradients: worst rel err %.2e (%s)\n",
                  l, loss_ref, loss_err, logits_err, n, worst, tr_node_name(g, grads[worst_i]));
    if (!(loss_err < LOSS_TOL)) fail_msg("loss %.8f, peft %.8f: relative error %.3g", l, loss_ref, loss_err);
    if (!(logits_err < GRAD_TOL)) fail_msg("logits: relative error %.3g", logits_err);
    if (!(worst < GRAD_TOL)) fail_msg("%s: relative error %.3g vs peft", tr_node_name(g, grads[worst_i]), worst);

    tr_test_tensors_free(n_out, out);
    free(out);
    bound_free(&b);
    tr_graph_free(g);
    close_fixtures(&f);
}

static void test_config_errors(void **state) {
    (void)state;
    int found = 0;
    for (int i = 0; i < tr_model_bert.n_keys; i++)
        found += !strcmp(tr_model_bert.keys[i].name, "lora_rank") || !strcmp(tr_model_bert.keys[i].name, "lora_alpha") ||
                 !strcmp(tr_model_bert.keys[i].name, "lora_targets");
    assert_int_equal(found, 3);

    struct tr_bert_config c = lora_config();
    snprintf(c.lora_targets, sizeof c.lora_targets, "query, vlaue");
    const char *bad_target[] = {"lora_targets", "'vlaue'", "query, key, value, attention_output, intermediate, output"};
    tr_test_build_refused(&tr_model_bert, &c, TR_TASK_PREDICT, bad_target, 3);

    c = lora_config();
    c.lora_rank = 65;
    const char *big_rank[] = {"lora_rank", "65", "64", "query"};
    tr_test_build_refused(&tr_model_bert, &c, TR_TASK_PREDICT, big_rank, 4);
    /* intermediate is 64 -> 128: the limit is 64 there too; output 128 -> 64. */
    snprintf(c.lora_targets, sizeof c.lora_targets, "intermediate");
    const char *big_rank2[] = {"lora_rank", "65", "in 64, out 128", "intermediate"};
    tr_test_build_refused(&tr_model_bert, &c, TR_TASK_PREDICT, big_rank2, 4);

    /* The largest rank builds, on every target; lora_rank 0 trains everything. */
    struct tr_error e = {0};
    struct tr_build_opts o = {.task = TR_TASK_PREDICT, .dtype = TR_DTYPE_F32, .batch = 2, .seq_len = 8};
    c = lora_config();
    c.lora_rank = 64;
    snprintf(c.lora_targets, sizeof c.lora_targets, "query,key,value,attention_output,intermediate,output");
    struct tr_graph *g = NULL;
    assert_int_equal(tr_graph_init(&g, &e), TR_OK);
    if (tr_model_bert.build(&c, &o, g, &e)) fail_msg("%s", e.msg);
    int ids[MAX_PARAMS], n = 0;
    assert_int_equal(tr_bert_trainable_params(&c, g, ids, MAX_PARAMS, &n, &e), TR_OK);
    assert_int_equal(n, 12 * (int)c.num_hidden_layers + 2);
    c.lora_rank = 0;
    tr_graph_free(g);
    assert_int_equal(tr_graph_init(&g, &e), TR_OK);
    if (tr_model_bert.build(&c, &o, g, &e)) fail_msg("%s", e.msg);
    assert_int_equal(tr_bert_trainable_params(&c, g, ids, MAX_PARAMS, &n, &e), TR_OK);
    assert_int_equal(n, tr_graph_n_params(g));
    tr_graph_free(g);
}

/* ---- peft's Gemma adapters (tests/fixtures/reference_gemma_peft/) ---- */

#define PEFT_LLM TR_SOURCE_DIR "/tests/fixtures/reference_gemma_peft/"
#define PEFT_LLM_HINT " (regenerate with: python3 tests/fixtures/make_peft_llm_fixture.py)"

static const struct tr_model_desc *const llm_models[] = {&tr_model_gemma, &tr_model_mistral, NULL};

/* What fn(arg) writes to stderr, into buf. */
static void capture_stderr(void (*fn)(void *), void *arg, char *buf, size_t cap) {
    FILE *f = tmpfile();
    assert_non_null(f);
    fflush(stderr);
    const int saved = dup(2);
    assert_true(saved >= 0);
    assert_true(dup2(fileno(f), 2) >= 0);
    fn(arg);
    fflush(stderr);
    assert_true(dup2(saved, 2) >= 0);
    close(saved);
    rewind(f);
    const size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
    fclose(f);
}

struct peft_run {
    const char *ini;         /* a file (path) or, with text, its text */
    int text;
    int rc;
    struct tr_error e;
    struct tr_config cfg;
    struct tr_bench_report rep;
};

static void peft_run(void *arg) {
    struct peft_run *r = arg;
    memset(&r->e, 0, sizeof r->e);
    memset(&r->rep, 0, sizeof r->rep);
    r->rc = r->text ? tr_config_load_string(r->ini, "peft.ini", &r->cfg, &r->e) : tr_config_load(r->ini, &r->cfg, &r->e);
    if (!r->rc) r->rc = tr_bench_run(&r->cfg, llm_models, &r->rep, &r->e);
}

/* Each case's check.ini: every backend against the PeftModel's logits, and the note that
 * says why the head was untied where it was. */
static void test_peft_gemma_matches_peft_model(void **state) {
    (void)state;
    static const struct {
        const char *name, *note;
    } cases[] = {
        {"bias_all", NULL},
        {"tied_lm_head", "holds peft's trained copy of lm_head"},
        {"tied_embed", "holds peft's trained copy of embed_tokens"},
    };
    static struct peft_run r; /* large: not on the stack */
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char ini[600], err[16384];
        snprintf(ini, sizeof ini, PEFT_LLM "%s/check.ini", cases[c].name);
        r.ini = ini, r.text = 0;
        capture_stderr(peft_run, &r, err, sizeof err);
        if (r.rc) fail_msg("%s: %s" PEFT_LLM_HINT "\n%s", cases[c].name, r.e.msg, err);
        assert_true(r.rep.n_rows >= 1);
        for (int i = 0; i < r.rep.n_rows; i++) {
            const struct tr_bench_row *row = &r.rep.rows[i];
            print_message("%s: %s against the PeftModel: %.3g relative\n", cases[c].name, row->label,
                          row->ref_rel_diff);
            assert_true(row->ok && row->ref_compared > 0);
            if (!row->ref_agrees || !(row->ref_rel_diff <= 1e-4))
                fail_msg("%s: %s: %s" PEFT_LLM_HINT, cases[c].name, row->label, row->ref_worst);
        }
        /* nothing of the adapter is left unread */
        if (strstr(err, "not the model's")) fail_msg("%s: %s", cases[c].name, err);
        if (cases[c].note && !strstr(err, cases[c].note)) fail_msg("%s: no note '%s' in: %s", cases[c].name,
                                                                    cases[c].note, err);
    }
}

/* A directory of the bias_all case's tensors and the adapter_config.json given. */
static void adapter_dir(char *dir, const char *config_json) {
    assert_non_null(mkdtemp(dir));
    char p[700], q[700];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    assert_int_equal(symlink(TR_SOURCE_DIR "/tests/fixtures/reference_gemma_bias/model.safetensors", p), 0);
    snprintf(p, sizeof p, "%s/adapter_model.safetensors", dir);
    assert_int_equal(symlink(PEFT_LLM "bias_all/weights/adapter/adapter_model.safetensors", p), 0);
    snprintf(q, sizeof q, "%s/adapter_config.json", dir);
    FILE *f = fopen(q, "w");
    assert_non_null(f);
    fputs(config_json, f);
    fclose(f);
}

static void adapter_dir_free(const char *dir) {
    static const char *const names[] = {"model.safetensors", "adapter_model.safetensors", "adapter_config.json"};
    for (int i = 0; i < 3; i++) {
        char p[700];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        unlink(p);
    }
    rmdir(dir);
}

static const char *adapter_ini(char *buf, size_t cap, const char *dir, const char *task, const char *extra) {
    snprintf(buf, cap,
             "[run]\nmodel = gemma\npreset = tiny\ntask = %s\nbackends = tf\nbatch = 2\nseq_len = 8\nsteps = 1\n"
             "warmup = 1\nweights = %s\n[model]\nhf_config = " TR_SOURCE_DIR "/tests/fixtures/reference_gemma_bias/"
             "config.json\nlora_rank = 4\nlora_alpha = 8\nlora_targets = q_proj, v_proj\n%s",
             task, dir, extra);
    return buf;
}

/* adapter_config.json's keys trident does not compute, where the adapters are applied:
 * refused before anything runs, naming the file, the key and the value. */
static void test_peft_config_refused(void **state) {
    (void)state;
    static const struct {
        const char *json, *parts[4];
    } cases[] = {
        {"{\"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\", \"v_proj\"], \"use_dora\": true}",
         {"adapter_config.json: use_dora = true", "which trident does not compute", NULL}},
        {"{\"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\", \"v_proj\"], \"alpha_pattern\": {\"v_proj\": 32}}",
         {"adapter_config.json: alpha_pattern gives \"v_proj\" lora_alpha = 32, not the file's lora_alpha = 8",
          "one scale alpha/r for every layer", NULL}},
        {"{\"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\", \"v_proj\"], \"rank_pattern\": {\"v_proj\": 8}}",
         {"adapter_config.json: rank_pattern gives \"v_proj\" r = 8, not the file's r = 4", "one rank", NULL}},
    };
    static struct peft_run r;
    char ini[2048], err[8192];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int fit = 0; fit < 2; fit++) {
            char dir[] = "/tmp/trident-peft-XXXXXX";
            adapter_dir(dir, cases[c].json);
            r.ini = adapter_ini(ini, sizeof ini, dir, fit ? "fit" : "predict", "lora_predict = true\n"), r.text = 1;
            capture_stderr(peft_run, &r, err, sizeof err);
            if (r.rc != TR_ERR_UNSUPPORTED) fail_msg("case %zu: expected a refusal, got %d: %s", c, r.rc, r.e.msg);
            assert_int_equal(r.rep.n_rows, 0);
            for (const char *const *p = cases[c].parts; *p; p++)
                if (!strstr(r.e.msg, *p)) fail_msg("the error lacks '%s': %s", *p, r.e.msg);
            assert_non_null(strstr(r.e.msg, dir));
            print_message("refused as expected: %s\n", r.e.msg);
            /* predict without lora_predict reads no adapter: nothing to refuse */
            if (!fit) {
                r.ini = adapter_ini(ini, sizeof ini, dir, "predict", "");
                capture_stderr(peft_run, &r, err, sizeof err);
                if (r.rc) fail_msg("case %zu, lora_predict = false: %s", c, r.e.msg);
            }
            adapter_dir_free(dir);
        }
    /* a pattern entry equal to the file's value changes nothing */
    char dir[] = "/tmp/trident-peft-XXXXXX";
    adapter_dir(dir, "{\"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\", \"v_proj\"], \"bias\": \"all\", "
                     "\"alpha_pattern\": {\"v_proj\": 8}, \"rank_pattern\": {\"q_proj\": 4}, \"use_dora\": false}");
    r.ini = adapter_ini(ini, sizeof ini, dir, "predict", "lora_predict = true\n"), r.text = 1;
    capture_stderr(peft_run, &r, err, sizeof err);
    if (r.rc) fail_msg("%s", r.e.msg);
    assert_null(strstr(err, "warning"));
    adapter_dir_free(dir);
}

/* A LoRA fit from an adapter whose peft fit trained more than the factors (bias = "all",
 * modules_to_save) says what peft trains and this fit does not, by name. */
static void test_peft_fit_warns_untrained(void **state) {
    (void)state;
    static struct peft_run r;
    char ini[2048], err[8192];
    char dir[] = "/tmp/trident-peft-XXXXXX";
    adapter_dir(dir, "{\"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\", \"v_proj\"], \"bias\": \"all\"}");
    r.ini = adapter_ini(ini, sizeof ini, dir, "fit", ""), r.text = 1;
    capture_stderr(peft_run, &r, err, sizeof err);
    if (r.rc) fail_msg("%s\n%s", r.e.msg, err);
    print_message("%s", err);
    static const char *const parts[] = {
        "adapter_config.json (peft's) has bias = \"all\": a peft fit trains these beside the LoRA factors, this fit "
        "does not (it keeps them as read): ",
        "model.layers.*.self_attn.q_proj.bias", "model.layers.*.self_attn.k_proj.bias",
        "model.layers.*.self_attn.o_proj.bias", NULL};
    for (const char *const *p = parts; *p; p++)
        if (!strstr(err, *p)) fail_msg("the warning lacks '%s': %s", *p, err);
    adapter_dir_free(dir);
    /* lora_only: the targets' biases alone; modules_to_save: the module's tensors */
    char dir2[] = "/tmp/trident-peft-XXXXXX";
    adapter_dir(dir2, "{\"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\", \"v_proj\"], \"bias\": "
                      "\"lora_only\", \"modules_to_save\": [\"norm\"]}");
    r.ini = adapter_ini(ini, sizeof ini, dir2, "fit", "");
    capture_stderr(peft_run, &r, err, sizeof err);
    if (r.rc) fail_msg("%s\n%s", r.e.msg, err);
    print_message("%s", err);
    static const char *const parts2[] = {
        "has bias = \"lora_only\", modules_to_save: a peft fit trains these beside the LoRA factors, this fit does "
        "not (it keeps them as read): ",
        "model.layers.*.self_attn.q_proj.bias, model.layers.*.self_attn.v_proj.bias",
        /* as peft matches modules_to_save: every module whose name ends with it */
        "model.layers.*.input_layernorm.weight", "model.layers.*.post_attention_layernorm.weight",
        "model.norm.weight;", NULL};
    for (const char *const *p = parts2; *p; p++)
        if (!strstr(err, *p)) fail_msg("the warning lacks '%s': %s", *p, err);
    assert_null(strstr(err, "k_proj.bias"));
    /* predict: nothing is trained, nothing said */
    r.ini = adapter_ini(ini, sizeof ini, dir2, "predict", "lora_predict = true\n");
    capture_stderr(peft_run, &r, err, sizeof err);
    if (r.rc) fail_msg("%s\n%s", r.e.msg, err);
    assert_null(strstr(err, "a peft fit trains"));
    adapter_dir_free(dir2);
}

TR_TEST_MAIN(NULL, NULL, test_zero_b_is_base, test_grads_match_peft, test_config_errors,
             test_peft_gemma_matches_peft_model, test_peft_config_refused, test_peft_fit_warns_untrained)
