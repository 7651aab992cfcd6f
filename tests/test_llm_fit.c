/* The fit task of the decoder LLMs (models/decoder: LoRA, the causal LM loss), Gemma and
 * Mistral alike.
 *
 * - Against PyTorch + peft (tests/fixtures/make_llm_lora_fixture.py: the tiny fixtures'
 *   weights and batch, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj","v_proj"]),
 *   random lora_B, float64): the loss (1e-5 relative) and every adapter's gradient (1e-4)
 *   on every backend configuration, f32; no gradient node for a frozen weight.
 * - Through the harness, tiny, 20 steps: torch, torch:reduce-overhead, tf and jax agree on
 *   the first losses (f32 1e-4) and the loss falls on each; bf16 (bf16 base, f32 adapters
 *   and AdamW state, no master copies) on torch and tf agrees within 1e-2 and falls.
 * - After 10 steps on every backend the frozen weights are bitwise what they were, every
 *   adapter moved, and nothing of training exists for a frozen weight.
 * - The fit graph's interface, make_inputs' labels, the LoRA keys' refusals. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backendutil.h"
#include "modelutil.h"
#include "decoder/decoder.h"
#include "models.h"
#include "trident/autodiff.h"
#include "trident/bench.h"
#include "trident/graph.h"
#include "trident/safetensors.h"
#include "trident/weights.h"

#define FIX TR_SOURCE_DIR "/tests/fixtures/"
#define HINT " (regenerate with: python3 tests/fixtures/make_llm_lora_fixture.py)"
#define LOSS_TOL 1e-5
#define GRAD_TOL 1e-4
#define MAX_PARAMS 128

static struct tr_decoder_config tiny(const struct tr_model_desc *m) {
    for (int i = 0; i < m->n_presets; i++)
        if (strcmp(m->presets[i].name, "tiny") == 0) return *(const struct tr_decoder_config *)m->presets[i].config;
    fail_msg("%s has no tiny preset", m->name);
    return (struct tr_decoder_config){0};
}

static struct tr_graph *build(const struct tr_model_desc *m, const struct tr_decoder_config *c, enum tr_task task,
                              enum tr_dtype dt, int64_t B, int64_t T) {
    struct tr_build_opts o = {.task = task, .dtype = dt, .batch = B, .seq_len = T};
    struct tr_graph *g = NULL;
    struct tr_error e = {0};
    assert_int_equal(tr_graph_init(&g, &e), TR_OK);
    if (m->build(c, &o, g, &e)) fail_msg("%s: %s", m->name, e.msg);
    return g;
}

static int is_adapter(const char *name) { return strstr(name, ".lora_A.weight") || strstr(name, ".lora_B.weight"); }

/* ---- against peft ---- */

static void grads_match_peft(const struct tr_model_desc *m, const char *fixture) {
    char wpath[512], iopath[512], lpath[512];
    snprintf(wpath, sizeof wpath, FIX "%s.safetensors", fixture);
    snprintf(iopath, sizeof iopath, FIX "%s_io.safetensors", fixture);
    snprintf(lpath, sizeof lpath, FIX "%s_lora.safetensors", fixture);
    struct tr_error e = {0};
    struct tr_safetensors *base = NULL, *io = NULL, *lora = NULL;
    if (tr_safetensors_open(wpath, &base, &e)) fail_msg("%s", e.msg);
    if (tr_safetensors_open(iopath, &io, &e)) fail_msg("%s", e.msg);
    if (tr_safetensors_open(lpath, &lora, &e)) fail_msg("%s" HINT, e.msg);
    struct tr_tensor in[4], ref_loss;
    const char *names[4] = {"input_ids", "position_ids", "attention_mask", "labels"};
    for (int i = 0; i < 4; i++)
        if (tr_safetensors_get(i < 3 ? io : lora, names[i], &in[i], &e)) fail_msg("%s" HINT, e.msg);
    if (tr_safetensors_get(lora, "loss", &ref_loss, &e)) fail_msg("%s" HINT, e.msg);

    struct tr_decoder_config c = tiny(m);
    c.lora_rank = 4;
    c.lora_alpha = 8;
    snprintf(c.lora_targets, sizeof c.lora_targets, "q_proj, v_proj");
    struct tr_graph *g = build(m, &c, TR_TASK_FIT, TR_DTYPE_F32, in[0].shape[0], in[0].shape[1]);
    int loss = tr_graph_find(g, "loss");
    assert_true(loss >= 0);
    int wrt[MAX_PARAMS], grads[MAX_PARAMS], n = 0;
    if (m->trainable(&c, g, wrt, MAX_PARAMS, &n, &e)) fail_msg("%s", e.msg);
    assert_int_equal(n, 2 * 2 * (int)c.num_hidden_layers);
    if (tr_grad(g, loss, n, wrt, grads, &e)) fail_msg("tr_grad: %s", e.msg);
    /* Frozen weights get no gradient node. */
    int n_frozen = 0;
    for (int i = 0; i < tr_graph_n_params(g); i++) {
        const char *name = tr_node_name(g, tr_graph_param(g, i));
        char probe[TR_NAME_MAX + 8];
        snprintf(probe, sizeof probe, "grad.%s", name);
        if (is_adapter(name)) assert_true(tr_graph_find(g, probe) >= 0);
        else if (tr_graph_find(g, probe) >= 0) fail_msg("frozen %s has a gradient node", name);
        n_frozen += !is_adapter(name);
    }
    assert_int_equal(n_frozen, tr_safetensors_count(base));
    assert_int_equal(tr_graph_set_output(g, loss, "loss"), TR_OK);
    for (int i = 0; i < n; i++) assert_int_equal(tr_graph_set_output(g, grads[i], tr_node_name(g, grads[i])), TR_OK);

    /* Bind: base weights from the predict fixture, adapters from the LoRA one (copies). */
    void *buf[MAX_PARAMS];
    const int np = tr_graph_n_params(g);
    assert_true(np <= MAX_PARAMS);
    for (int i = 0; i < np; i++) {
        int id = tr_graph_param(g, i);
        const char *name = tr_node_name(g, id);
        struct tr_tensor want = tr_node_tensor(g, id), t;
        if (tr_safetensors_get(is_adapter(name) ? lora : base, name, &t, &e)) fail_msg("%s" HINT, e.msg);
        assert_int_equal(t.dtype, TR_DTYPE_F32);
        assert_int_equal(tr_tensor_numel(&t), tr_tensor_numel(&want));
        buf[i] = malloc(tr_tensor_nbytes(&want));
        memcpy(buf[i], t.data, tr_tensor_nbytes(&want));
        if (tr_graph_bind_param(g, id, buf[i], &e)) fail_msg("%s: %s", name, e.msg);
    }

    const double loss_ref = ((const float *)ref_loss.data)[0];
    for (int b = 0; b < TR_TEST_N_BACKENDS; b++) {
        struct tr_tensor out[1 + MAX_PARAMS];
        tr_test_run_backend(&tr_test_backends[b], tr_test_dir, g, in, 1, out, NULL);
        const double l = ((const float *)out[0].data)[0], loss_err = fabs(l - loss_ref) / fabs(loss_ref);
        double worst = 0;
        int worst_i = 0;
        for (int i = 0; i < n; i++) {
            struct tr_tensor t;
            if (tr_safetensors_get(lora, tr_node_name(g, grads[i]), &t, &e)) fail_msg("%s" HINT, e.msg);
            assert_int_equal(tr_tensor_numel(&t), tr_tensor_numel(&out[1 + i]));
            double *ref = tr_test_to_f64(&t);
            double r = tr_test_rel_err(&out[1 + i], ref);
            free(ref);
            if (!(r <= worst)) worst = r, worst_i = i;
        }
        print_message("%s %s: loss %.8f (peft %.8f, rel err %.2e); %d adapter gradients, worst rel err %.2e (%s)\n",
                      m->name, tr_test_backends[b].label, l, loss_ref, loss_err, n, worst,
                      tr_node_name(g, grads[worst_i]));
        if (!(loss_err < LOSS_TOL))
            fail_msg("%s %s: loss %.8f, peft %.8f", m->name, tr_test_backends[b].label, l, loss_ref);
        if (!(worst < GRAD_TOL))
            fail_msg("%s %s: %s relative error %.3g vs peft", m->name, tr_test_backends[b].label,
                     tr_node_name(g, grads[worst_i]), worst);
        for (int i = 0; i < 1 + n; i++) tr_test_tensor_free(&out[i]);
    }
    for (int i = 0; i < np; i++) free(buf[i]);
    tr_graph_free(g);
    tr_safetensors_close(lora);
    tr_safetensors_close(io);
    tr_safetensors_close(base);
}

/* The padding row (issue 18): with the pad token (id 0, pad_token_id 0) at kept
 * positions, every weight trained, the embedding table's gradient on every backend
 * against transformers', whose nn.Embedding(padding_idx) withholds the lookup's part from
 * row 0 (make_pad_grad_fixture.py). Gemma's tied logits still reach that row. */
static void pad_grad_matches_transformers(const struct tr_model_desc *m, const char *fixture) {
    char wpath[512], ppath[512];
    snprintf(wpath, sizeof wpath, FIX "%s.safetensors", fixture);
    snprintf(ppath, sizeof ppath, FIX "%s_pad.safetensors", fixture);
    struct tr_error e = {0};
    struct tr_safetensors *pad = NULL;
    if (tr_safetensors_open(ppath, &pad, &e)) fail_msg("%s (regenerate with: python3 tests/fixtures/"
                                                       "make_pad_grad_fixture.py)", e.msg);
    struct tr_tensor in[4], ref_loss, ref_grad;
    const char *names[4] = {"input_ids", "position_ids", "attention_mask", "labels"};
    for (int i = 0; i < 4; i++)
        if (tr_safetensors_get(pad, names[i], &in[i], &e)) fail_msg("%s", e.msg);
    if (tr_safetensors_get(pad, "loss", &ref_loss, &e) ||
        tr_safetensors_get(pad, "grad.model.embed_tokens.weight", &ref_grad, &e))
        fail_msg("%s", e.msg);
    struct tr_decoder_config c = tiny(m);
    c.lora_rank = 0; /* every weight trains, the table among them */
    c.pad_token_id = 0;
    struct tr_graph *g = build(m, &c, TR_TASK_FIT, TR_DTYPE_F32, in[0].shape[0], in[0].shape[1]);
    int loss = tr_graph_find(g, "loss"), table = tr_graph_find(g, "model.embed_tokens.weight"), grad = -1;
    assert_true(loss >= 0 && table >= 0);
    if (tr_grad(g, loss, 1, &table, &grad, &e)) fail_msg("tr_grad: %s", e.msg);
    assert_int_equal(tr_graph_set_output(g, loss, "loss"), TR_OK);
    assert_int_equal(tr_graph_set_output(g, grad, "grad"), TR_OK);
    struct tr_weights *w = NULL;
    if (tr_weights_load(g, wpath, &w, &e)) fail_msg("%s", e.msg);
    double *ref = tr_test_to_f64(&ref_grad);
    const double loss_ref = ((const float *)ref_loss.data)[0];
    const int64_t D = ref_grad.shape[1];
    for (int b = 0; b < TR_TEST_N_BACKENDS; b++) {
        struct tr_tensor out[2];
        tr_test_run_backend(&tr_test_backends[b], tr_test_dir, g, in, 1, out, NULL);
        const double l = ((const float *)out[0].data)[0], loss_err = fabs(l - loss_ref) / fabs(loss_ref);
        const double r = tr_test_rel_err(&out[1], ref);
        double row0 = 0;
        for (int64_t d = 0; d < D; d++) row0 += fabs(tr_tensor_get_f64(&out[1], d) - ref[d]);
        print_message("%s %s: loss %.8f (transformers %.8f), embed_tokens gradient rel err %.2e, row 0 off by %.2e "
                      "in all\n", m->name, tr_test_backends[b].label, l, loss_ref, r, row0);
        if (!(loss_err < LOSS_TOL) || !(r < GRAD_TOL))
            fail_msg("%s %s: loss rel err %.3g, embed_tokens gradient rel err %.3g vs transformers", m->name,
                     tr_test_backends[b].label, loss_err, r);
        tr_test_tensors_free(2, out);
    }
    /* without the padding row the same graph trains row 0: the check sees the difference */
    c.pad_token_id = -1;
    struct tr_graph *g2 = build(m, &c, TR_TASK_FIT, TR_DTYPE_F32, in[0].shape[0], in[0].shape[1]);
    int l2 = tr_graph_find(g2, "loss"), t2 = tr_graph_find(g2, "model.embed_tokens.weight"), d2 = -1;
    if (tr_grad(g2, l2, 1, &t2, &d2, &e)) fail_msg("tr_grad: %s", e.msg);
    assert_int_equal(tr_graph_set_output(g2, d2, "grad"), TR_OK);
    struct tr_weights *w2 = NULL;
    if (tr_weights_load(g2, wpath, &w2, &e)) fail_msg("%s", e.msg);
    struct tr_tensor o2[1];
    tr_test_run_backend(&tr_test_backends[0], tr_test_dir, g2, in, 1, o2, NULL);
    const double unpadded = tr_test_rel_err(&o2[0], ref);
    print_message("%s without the padding row: embed_tokens gradient rel err %.2e\n", m->name, unpadded);
    assert_true(unpadded > 100 * GRAD_TOL);
    tr_test_tensor_free(&o2[0]);
    tr_weights_free(w2);
    tr_graph_free(g2);
    free(ref);
    tr_weights_free(w);
    tr_graph_free(g);
    tr_safetensors_close(pad);
}

static void test_gemma_pad_grad(void **state) { pad_grad_matches_transformers(&tr_model_gemma, "gemma_tiny"); }
static void test_mistral_pad_grad(void **state) { pad_grad_matches_transformers(&tr_model_mistral, "mistral_tiny"); }
static void test_gemma_grads_match_peft(void **state) { grads_match_peft(&tr_model_gemma, "gemma_tiny"); }
static void test_mistral_grads_match_peft(void **state) { grads_match_peft(&tr_model_mistral, "mistral_tiny"); }

/* ---- through the harness ---- */

static void run_fit(const char *model, const char *backends, const char *extra, struct tr_bench_report *rep) {
    char text[1024], jax[600] = ""; /* a [backend.jax] section only where jax is listed */
    if (strstr(backends, "jax")) snprintf(jax, sizeof jax, "[backend.jax]\ncache_dir = %s\n", tr_test_dir);
    snprintf(text, sizeof text,
             "[run]\nmodel = %s\npreset = tiny\ntask = fit\nbackends = %s\nbatch = 4\nseq_len = 16\n%s\n"
             "%s",
             model, backends, extra, jax);
    tr_test_bench_run(text, "llm_fit.ini", tr_builtin_models, rep);
}

/* The loss after 20 steps is below `fall` times the first on every backend. */
static void check_learns(const char *model, const struct tr_bench_report *rep, int n_rows, double fall) {
    assert_int_equal(rep->n_rows, n_rows);
    for (int i = 0; i < rep->n_rows; i++) {
        const struct tr_bench_row *r = &rep->rows[i];
        assert_true(r->ok && r->agrees);
        assert_int_equal(r->n_fit_losses, TR_BENCH_FIT_LOSSES);
        printf("%s %-24s loss %.5f -> %.5f\n", model, r->label, r->loss_first, r->loss_last);
        if (!(r->loss_last < fall * r->loss_first))
            fail_msg("%s %s: loss %.5f -> %.5f in 20 steps, expected below %.2f of the first", model, r->label,
                     r->loss_first, r->loss_last, fall);
    }
}

static void fit_everywhere(const char *model) {
    static struct tr_bench_report rep;
    run_fit(model, "torch, torch:reduce-overhead, tf, jax", "steps = 19\nwarmup = 1\n[train]\nlearning_rate = 1e-2",
            &rep);
    assert_true(rep.tolerance == 1e-4);
    check_learns(model, &rep, 4, 0.97);
}

static void test_gemma_fit_everywhere(void **state) { fit_everywhere("gemma"); }
static void test_mistral_fit_everywhere(void **state) { fit_everywhere("mistral"); }

static void fit_bf16(const struct tr_model_desc *m) {
    /* bf16 base, f32 adapters and AdamW moments: nothing needs an f32 master copy. */
    char text[256];
    snprintf(text, sizeof text, "[run]\nmodel = %s\npreset = tiny\ntask = fit\ndtype = bf16\nbatch = 2\nseq_len = 8\n",
             m->name);
    struct tr_task_graph tg;
    tr_test_task_graph(text, "bf16.ini", tr_builtin_models, &tg);
    assert_int_equal(tg.train.n_masters, 0);
    int n_f32 = 0;
    for (int i = 0; i < tr_graph_n_params(tg.graph); i++) {
        int id = tr_graph_param(tg.graph, i);
        const char *name = tr_node_name(tg.graph, id);
        int f32 = is_adapter(name); /* and the adapters' .adamw_m / .adamw_v */
        assert_int_equal(tr_node_dtype(tg.graph, id), f32 ? TR_DTYPE_F32 : TR_DTYPE_BF16);
        n_f32 += f32;
    }
    assert_int_equal(n_f32, 3 * 8);
    tr_task_graph_free(&tg);
    static struct tr_bench_report rep;
    run_fit(m->name, "torch, tf", "dtype = bf16\nsteps = 19\nwarmup = 1\n[train]\nlearning_rate = 1e-2", &rep);
    assert_true(rep.tolerance == 2e-2);
    check_learns(m->name, &rep, 2, 0.97);
}

static void test_gemma_fit_bf16(void **state) { fit_bf16(&tr_model_gemma); }
static void test_mistral_fit_bf16(void **state) { fit_bf16(&tr_model_mistral); }

/* ---- frozen weights ---- */

static void frozen_on(const char *model, const struct tr_test_backend *be) {
    char text[256];
    snprintf(text, sizeof text, "[run]\nmodel = %s\npreset = tiny\ntask = fit\nbatch = 2\nseq_len = 16\n"
                                "[train]\nlearning_rate = 1e-2\n", model);
    struct tr_error e = {0};
    struct tr_task_graph tg;
    tr_test_task_graph(text, "frozen.ini", tr_builtin_models, &tg);
    struct tr_graph *g = tg.graph;
    struct tr_weights *w = NULL;
    if (tr_weights_from_seed(g, 7, &w, &e)) fail_msg("%s", e.msg);
    const int n_params = tr_graph_n_params(g);
    int n_adapters = 0, n_frozen = 0;
    void **before = calloc((size_t)n_params, sizeof *before);
    for (int i = 0; i < n_params; i++) {
        int id = tr_graph_param(g, i);
        const char *name = tr_node_name(g, id);
        struct tr_tensor t = tr_node_tensor(g, id);
        if (strstr(name, ".lora_B.") && !strstr(name, ".adamw_")) { /* zeros: give A a gradient */
            t.data = (void *)tr_node_data(g, id);
            tr_test_randn(&t, 100 + (uint64_t)i, 0.05);
        }
        before[i] = malloc(tr_tensor_nbytes(&t));
        memcpy(before[i], tr_node_data(g, id), tr_tensor_nbytes(&t));
        if (strstr(name, ".adamw_")) continue;
        if (is_adapter(name)) {
            n_adapters++;
            continue;
        }
        n_frozen++;
        tr_test_expect_untrained(g, name);
    }
    assert_int_equal(n_adapters, 2 * 2 * 2); /* 2 layers x (q_proj, v_proj) x (A, B) */
    assert_int_equal(tg.train.n_trained, n_adapters);
    assert_int_equal(tg.train.n_masters, 0);
    assert_int_equal(tr_graph_n_updates(g), 3 * n_adapters);
    assert_true(n_frozen > 10);

    const int n_in = tr_graph_n_inputs(g);
    assert_int_equal(n_in, 6);
    struct tr_tensor in[6], out[1];
    tr_test_fit_inputs(&tg, 5, 1e-2f, 1.0f, in); /* lr, step */
    tr_test_run_backend(be, tr_test_dir, g, in, 10, out, NULL);
    int moved = 0;
    for (int i = 0; i < n_params; i++) {
        int id = tr_graph_param(g, i);
        const char *name = tr_node_name(g, id);
        struct tr_tensor t = tr_node_tensor(g, id);
        const int same = memcmp(before[i], tr_node_data(g, id), tr_tensor_nbytes(&t)) == 0;
        free(before[i]);
        if (strstr(name, ".adamw_")) continue;
        if (is_adapter(name)) moved += !same;
        else if (!same) fail_msg("%s %s: frozen weight '%s' changed", model, be->label, name);
    }
    free(before);
    if (moved != n_adapters) fail_msg("%s %s: %d of %d adapters moved", model, be->label, moved, n_adapters);
    tr_test_tensor_free(&out[0]);
    tr_test_tensors_free(n_in, in);
    tr_weights_free(w);
    tr_task_graph_free(&tg);
}

static void test_frozen_weights_unchanged(void **state) {
    (void)state;
    for (int b = 0; b < TR_TEST_N_BACKENDS; b++) {
        frozen_on("gemma", &tr_test_backends[b]);
        frozen_on("mistral", &tr_test_backends[b]);
    }
}

/* ---- interface, inputs, keys ---- */

static void test_interface(void **state) {
    (void)state;
    const struct tr_model_desc *models[2] = {&tr_model_gemma, &tr_model_mistral};
    for (int k = 0; k < 2; k++) {
        const struct tr_model_desc *m = models[k];
        assert_true(m->tasks & (1u << TR_TASK_FIT));
        assert_non_null(m->trainable);
        struct tr_decoder_config c = tiny(m);
        assert_int_equal(c.lora_rank, 4);
        assert_string_equal(c.lora_targets, "q_proj,v_proj");
        /* predict: the plain model, whatever the LoRA keys */
        struct tr_graph *p = build(m, &c, TR_TASK_PREDICT, TR_DTYPE_F32, 3, 12);
        for (int i = 0; i < tr_graph_n_params(p); i++) assert_false(is_adapter(tr_node_name(p, tr_graph_param(p, i))));
        /* fit: the same parameters plus the adapters; labels; the loss, no output */
        struct tr_graph *g = build(m, &c, TR_TASK_FIT, TR_DTYPE_BF16, 3, 12);
        assert_int_equal(tr_graph_n_params(g), tr_graph_n_params(p) + 8);
        assert_int_equal(tr_graph_n_outputs(g), 0);
        assert_int_equal(tr_graph_n_inputs(g), 4);
        int lab = tr_graph_input(g, 3);
        assert_string_equal(tr_node_name(g, lab), "labels");
        assert_int_equal(tr_node_dtype(g, lab), TR_DTYPE_I32);
        assert_int_equal(tr_node_shape(g, lab)[0], 3);
        assert_int_equal(tr_node_shape(g, lab)[1], 12);
        int loss = tr_graph_find(g, "loss");
        assert_true(loss >= 0);
        assert_int_equal(tr_node_dtype(g, loss), TR_DTYPE_F32);
        assert_int_equal(tr_node_ndim(g, loss), 0);
        const int64_t dh = tr_decoder_head_dim(&c);
        int a = tr_graph_find(g, "model.layers.1.self_attn.v_proj.lora_A.weight");
        int b = tr_graph_find(g, "model.layers.1.self_attn.v_proj.lora_B.weight");
        assert_true(a >= 0 && b >= 0);
        assert_int_equal(tr_node_shape(g, a)[0], 4);
        assert_int_equal(tr_node_shape(g, a)[1], c.hidden_size);
        assert_int_equal(tr_node_shape(g, b)[0], c.num_key_value_heads * dh);
        assert_int_equal(tr_node_shape(g, b)[1], 4);
        assert_int_equal(tr_graph_find(g, "model.layers.0.self_attn.k_proj.lora_A.weight"), -1);
        /* peft's init: A drawn, B zeros */
        assert_true(tr_node_attrs(g, a)->floats[1] > 0.0f);
        assert_true(tr_node_attrs(g, b)->floats[1] == 0.0f);
        int ids[MAX_PARAMS], n = 0;
        struct tr_error e = {0};
        assert_int_equal(m->trainable(&c, g, ids, MAX_PARAMS, &n, &e), TR_OK);
        assert_int_equal(n, 8);
        for (int i = 0; i < n; i++) assert_true(is_adapter(tr_node_name(g, ids[i])));
        tr_graph_free(g);
        /* every target; and rank 0: full fine-tuning, no adapters */
        snprintf(c.lora_targets, sizeof c.lora_targets, "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj");
        g = build(m, &c, TR_TASK_FIT, TR_DTYPE_F32, 2, 8);
        assert_int_equal(m->trainable(&c, g, ids, MAX_PARAMS, &n, &e), TR_OK);
        assert_int_equal(n, 2 * 7 * (int)c.num_hidden_layers);
        tr_graph_free(g);
        c.lora_rank = 0;
        g = build(m, &c, TR_TASK_FIT, TR_DTYPE_F32, 2, 8);
        assert_int_equal(tr_graph_n_params(g), tr_graph_n_params(p));
        assert_int_equal(m->trainable(&c, g, ids, MAX_PARAMS, &n, &e), TR_OK);
        assert_int_equal(n, tr_graph_n_params(g));
        tr_graph_free(g);
        tr_graph_free(p);
    }
}

static void test_make_inputs_labels(void **state) {
    (void)state;
    const struct tr_decoder_config c = tiny(&tr_model_gemma);
    const int64_t B = 4, T = 8, sh[2] = {B, T};
    const struct tr_build_opts o = {.task = TR_TASK_FIT, .dtype = TR_DTYPE_F32, .batch = B, .seq_len = T};
    struct tr_tensor in[4] = {tr_test_tensor(TR_DTYPE_I32, 2, sh), tr_test_tensor(TR_DTYPE_I32, 2, sh),
                              tr_test_tensor(TR_DTYPE_F32, 2, sh), tr_test_tensor(TR_DTYPE_I32, 2, sh)};
    struct tr_error e = {0};
    if (tr_decoder_make_inputs(&c, &o, 3, 4, in, &e)) fail_msg("%s", e.msg);
    const int32_t *ids = in[0].data, *lab = in[3].data;
    int n_kept = 0;
    for (int64_t b = 0; b < B; b++) {
        const int64_t pad = tr_decoder_pad_len(&c, b, T);
        assert_int_equal(pad, b); /* pad_fraction 1/8 of 8 tokens: 0, 1, 2, 3 */
        for (int64_t t = 0; t < T; t++) { /* transformers' labels: the tokens, ignored on pads and on a padded
                                           * sample's first token; labels[:, 0] is never read */
            const int32_t want = pad == 0 || t > pad ? ids[b * T + t] : TR_DECODER_IGNORE;
            assert_int_equal(lab[b * T + t], want);
            n_kept += t > 0 && want != TR_DECODER_IGNORE;
        }
    }
    assert_int_equal(n_kept, 7 + 6 + 5 + 4);
    /* predict takes 3 inputs, fit 4: the count is checked */
    assert_int_equal(tr_decoder_make_inputs(&c, &o, 3, 3, in, &e), TR_ERR_INVALID);
    assert_non_null(strstr(e.msg, "labels"));
    tr_test_tensors_free(4, in);
}

static void test_lora_key_errors(void **state) {
    (void)state;
    int found = 0;
    for (int i = 0; i < tr_model_mistral.n_keys; i++)
        found += !strcmp(tr_model_mistral.keys[i].name, "lora_rank") ||
                 !strcmp(tr_model_mistral.keys[i].name, "lora_alpha") ||
                 !strcmp(tr_model_mistral.keys[i].name, "lora_targets");
    assert_int_equal(found, 3);
    struct tr_decoder_config c = tiny(&tr_model_gemma);
    snprintf(c.lora_targets, sizeof c.lora_targets, "q_proj, vproj");
    const char *bad[] = {"lora_targets", "'vproj'", "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj"};
    tr_test_build_refused(&tr_model_gemma, &c, TR_TASK_FIT, bad, 3);
    /* gemma tiny: v_proj is 64 -> 32 (one kv head of 32) */
    c = tiny(&tr_model_gemma);
    c.lora_rank = 33;
    const char *big[] = {"lora_rank = 33", "min(in, out) = 32", "'v_proj'", "in 64, out 32"};
    tr_test_build_refused(&tr_model_gemma, &c, TR_TASK_FIT, big, 4);
    c.lora_rank = 32;
    struct tr_graph *g = build(&tr_model_gemma, &c, TR_TASK_FIT, TR_DTYPE_F32, 2, 8);
    tr_graph_free(g);
    c.lora_alpha = -1;
    const char *alpha[] = {"lora_alpha = -1"};
    tr_test_build_refused(&tr_model_gemma, &c, TR_TASK_FIT, alpha, 1);
}

/* A fit of one token a row predicts nothing (transformers' shifted loss is NaN there):
 * refused, where it used to train on a loss of 0; predict of one token still builds. */
static void test_fit_one_token_refused(void **state) {
    (void)state;
    const struct tr_model_desc *ms[2] = {&tr_model_gemma, &tr_model_mistral};
    for (int i = 0; i < 2; i++) {
        struct tr_decoder_config c = tiny(ms[i]);
        struct tr_error e = {0};
        struct tr_build_opts o = {.task = TR_TASK_FIT, .dtype = TR_DTYPE_F32, .batch = 2, .seq_len = 1};
        struct tr_graph *g = NULL;
        assert_int_equal(tr_graph_init(&g, &e), TR_OK);
        assert_int_not_equal(ms[i]->build(&c, &o, g, &e), TR_OK);
        tr_graph_free(g);
        tr_assert_msg_has(&e, "fit with seq_len = 1: the causal LM loss predicts each token from those before it");
        g = build(ms[i], &c, TR_TASK_PREDICT, TR_DTYPE_F32, 2, 1);
        tr_graph_free(g);
        g = build(ms[i], &c, TR_TASK_FIT, TR_DTYPE_F32, 2, 2);
        tr_graph_free(g);
    }
}

/* [run] inputs without position_ids (transformers' forward makes 0..T-1 itself): the fit
 * takes those, and its losses are the reference's (tests/fixtures/reference_mistral_fit,
 * whose batch has them as arange). */
static void test_inputs_default_positions(void **state) {
    (void)state;
    const char *dir = TR_SOURCE_DIR "/tests/fixtures/reference_mistral_fit";
    char path[600], out[600], ini[2048];
    snprintf(path, sizeof path, "%s/batch.safetensors", dir);
    struct tr_error e = {0};
    struct tr_safetensors *st = NULL;
    if (tr_safetensors_open(path, &st, &e)) fail_msg("%s", e.msg);
    static const char *const names[3] = {"input_ids", "attention_mask", "labels"};
    struct tr_tensor ts[3];
    for (int i = 0; i < 3; i++)
        if (tr_safetensors_get(st, names[i], &ts[i], &e)) fail_msg("%s", e.msg);
    snprintf(out, sizeof out, "%s/nopos.safetensors", tr_test_dir);
    assert_int_equal(tr_safetensors_write(out, 3, names, ts, &e), TR_OK);
    tr_safetensors_close(st);
    snprintf(ini, sizeof ini, "[run]\nmodel = mistral\npreset = tiny\ntask = fit\nbackends = tf\nbatch = 3\n"
             "seq_len = 12\nsteps = 3\nwarmup = 1\nweights = %s/../mistral_tiny.safetensors\ninputs = %s\n"
             "reference = %s/reference.safetensors\n[model]\nlora_rank = 0\n", dir, out, dir);
    static struct tr_config cfg;
    static struct tr_bench_report rep;
    if (tr_config_load_string(ini, "m.ini", &cfg, &e)) fail_msg("%s", e.msg);
    if (tr_bench_run(&cfg, tr_builtin_models, &rep, &e)) fail_msg("%s", e.msg);
    assert_int_equal(rep.n_rows, 1);
    assert_true(rep.rows[0].ok && rep.rows[0].ref_compared && rep.rows[0].ref_agrees);
}

/* A label outside the vocabulary in [run] inputs: refused before any backend runs, named
 * by the file's sample and position (the kernel sees it shifted and flattened); one in
 * the first column, which the shift drops (as transformers' does), is not read. */
static void test_inputs_label_range(void **state) {
    (void)state;
    const char *dir = TR_SOURCE_DIR "/tests/fixtures/reference_mistral_fit";
    char src[600], path[600], ini[2048];
    snprintf(src, sizeof src, "%s/batch.safetensors", dir);
    static const struct { int64_t index; double value; const char *want; } cases[] = {
        {12 + 5, 4096, "'labels' element 17 (sample 1, position 5) is 4096: outside the loss's classes [0, "},
        {2 * 12 + 11, -3, "'labels' element 35 (sample 2, position 11) is -3: outside"},
        {12, 99999, NULL},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        tr_test_copy_poisoned(src, "labels", cases[k].index, cases[k].value, "bad_labels.safetensors", path, sizeof path);
        snprintf(ini, sizeof ini, "[run]\nmodel = mistral\npreset = tiny\ntask = fit\nbackends = tf\nbatch = 3\n"
                 "seq_len = 12\nsteps = 1\nwarmup = 1\nweights = %s/../mistral_tiny.safetensors\ninputs = %s\n"
                 "[model]\nlora_rank = 0\n", dir, path);
        static struct tr_config cfg;
        static struct tr_bench_report rep;
        struct tr_error e = {0};
        if (tr_config_load_string(ini, "m.ini", &cfg, &e)) fail_msg("%s", e.msg);
        const int rc = tr_bench_run(&cfg, tr_builtin_models, &rep, &e);
        if (!cases[k].want) {
            if (rc) fail_msg("%s", e.msg);
            continue;
        }
        assert_int_not_equal(rc, TR_OK);
        tr_assert_msg_has(&e, cases[k].want);
        tr_assert_msg_has(&e, "and is not the ignore index -100");
    }
}

TR_TEST_MAIN(tr_test_dir_setup, tr_test_dir_teardown, test_inputs_default_positions, test_inputs_label_range, test_gemma_pad_grad, test_mistral_pad_grad, test_interface, test_make_inputs_labels, test_lora_key_errors, test_fit_one_token_refused,
             test_gemma_grads_match_peft, test_mistral_grads_match_peft, test_frozen_weights_unchanged,
             test_gemma_fit_everywhere, test_mistral_fit_everywhere, test_gemma_fit_bf16, test_mistral_fit_bf16)
