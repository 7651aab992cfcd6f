/* BERT training against PyTorch: the tiny preset's classifier loss on the fixture's
 * batch and labels, differentiated by tr_grad with respect to every parameter, run on
 * every backend configuration (torch, torch:reduce-overhead, tf, jax) for several steps,
 * must give transformers' loss (1e-5 relative) and the gradient of every parameter
 * (1e-4 relative, f32), and the backends must agree with one another. The reference is
 * BertForSequenceClassification(..., labels=labels).loss.backward() computed in float64
 * (tests/fixtures/make_bert_fixture.py).
 *
 * Two parameters have a gradient that is zero in exact arithmetic: each layer's
 * attention.self.key.bias (adding q·b to every score of a row leaves the softmax as it
 * is). The reference holds float64 noise there (~1e-17), so a relative error means
 * nothing; those are held to ‖g − g_ref‖ < 1e-4 · ‖∇‖, the norm of the whole gradient. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "backendutil.h"
#include "bert/bert.h"
#include "models.h"
#include "trident/autodiff.h"
#include "trident/graph.h"
#include "trident/loader.h"
#include "trident/safetensors.h"
#include "trident/weights.h"

#define FIXTURE TR_SOURCE_DIR "/tests/fixtures/bert_tiny.safetensors"
#define FIXTURE_IO TR_SOURCE_DIR "/tests/fixtures/bert_tiny_io.safetensors"
#define FIXTURE_GRADS TR_SOURCE_DIR "/tests/fixtures/bert_tiny_grads.safetensors"
#define FIXTURE_PAD TR_SOURCE_DIR "/tests/fixtures/bert_tiny_pad.safetensors"
#define FIXTURE_IGNORE TR_SOURCE_DIR "/tests/fixtures/bert_tiny_ignore.safetensors"
#define HINT " (regenerate with: python3 tests/fixtures/make_bert_fixture.py)"
#define STEPS 3 /* reduce-overhead records at step 2 and replays from step 3 */
#define LOSS_TOL 1e-5
#define GRAD_TOL 1e-4
#define MAX_PARAMS 64

/* Run g STEPS times on one configuration and show what it ran. */
static void run(const struct tr_test_backend *c, struct tr_graph *g, const struct tr_tensor *in, struct tr_tensor *out) {
    struct tr_backend_stats st;
    tr_test_run_backend(c, tr_test_dir, g, in, STEPS, out, &st);
    assert_true(st.kernel_calls > 0);
    print_message("%-22s %llu kernel calls; %s\n", c->label, (unsigned long long)st.kernel_calls, st.notes);
    /* each layer's attention computes the statistics its backward reads in the same call */
    const char *want = strcmp(c->plugin, "tf") == 0 ? "attention+lse x2" : "attention with its lse x2";
    if (!strstr(st.notes, want)) fail_msg("%s: notes '%s' lack '%s'", c->label, st.notes, want);
    /* and torch runs each attention's three gradients as one call, as SDPA's backward */
    if (strcmp(c->plugin, "torch") == 0 && !strstr(st.notes, "attention backward x2 (its gradients in one call)"))
        fail_msg("%s: notes '%s' lack the grouped attention backward", c->label, st.notes);
}

static double norm2(const double *x, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += x[i] * x[i];
    return s;
}

/* ‖out − ref‖ / scale; +inf on a NaN or Inf in out. */
static double err_scaled(const struct tr_tensor *out, const double *ref, double scale) {
    double *o = tr_test_to_f64(out);
    int64_t n = tr_tensor_numel(out);
    double s = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(o[i])) {
            free(o);
            return INFINITY;
        }
        s += (o[i] - ref[i]) * (o[i] - ref[i]);
    }
    free(o);
    return sqrt(s) / scale;
}

struct worst {
    double err;
    int param;
};

static int by_err_desc(const void *a, const void *b) {
    double x = ((const struct worst *)a)->err, y = ((const struct worst *)b)->err;
    return (x < y) - (x > y);
}

/* The batch, logits (io_path), labels, loss and gradients (grads_path) of one reference. */
static void grads_match(const char *io_path, const char *grads_path) {
    struct tr_safetensors *gr = NULL;
    struct tr_error e = {0};
    struct tr_tensor in[4];
    struct tr_safetensors *io = tr_test_bert_batch(io_path, in, HINT);
    if (tr_safetensors_open(grads_path, &gr, &e)) fail_msg("%s" HINT, e.msg);
    if (tr_safetensors_get(gr, "labels", &in[3], &e)) fail_msg("%s" HINT, e.msg);
    struct tr_tensor ref_loss;
    if (tr_safetensors_get(gr, "loss", &ref_loss, &e)) fail_msg("%s" HINT, e.msg);
    assert_int_equal(tr_tensor_numel(&ref_loss), 1);

    const struct tr_bert_config *tiny = tr_model_bert.presets[0].config;
    assert_string_equal(tr_model_bert.presets[0].name, "tiny");
    /* task predict: the loss on top of the predict graph, whose outputs (logits) are checked too */
    struct tr_build_opts o = {.task = TR_TASK_PREDICT, .dtype = TR_DTYPE_F32, .batch = in[0].shape[0],
                              .seq_len = in[0].shape[1]};
    struct tr_graph *g = NULL;
    assert_int_equal(tr_graph_init(&g, &e), TR_OK);
    int loss = -1;
    if (tr_bert_build_classifier_loss(tiny, &o, g, &loss, &e)) fail_msg("%s", e.msg);
    assert_int_equal(tr_graph_n_inputs(g), 4);
    assert_string_equal(tr_node_name(g, tr_graph_input(g, 3)), "labels");
    assert_int_equal(tr_node_dtype(g, loss), TR_DTYPE_F32);
    assert_int_equal(tr_graph_n_outputs(g), 3); /* logits, last_hidden_state, pooler_output */

    int n_params = tr_graph_n_params(g);
    assert_true(n_params > 0 && n_params <= MAX_PARAMS);
    int wrt[MAX_PARAMS], grads[MAX_PARAMS];
    for (int i = 0; i < n_params; i++) wrt[i] = tr_graph_param(g, i);
    if (tr_grad(g, loss, n_params, wrt, grads, &e)) fail_msg("tr_grad: %s", e.msg);
    assert_int_equal(tr_graph_set_output(g, loss, "loss"), TR_OK);
    for (int i = 0; i < n_params; i++) assert_int_equal(tr_graph_set_output(g, grads[i], tr_node_name(g, grads[i])), TR_OK);
    const int first = 4; /* output index of the first gradient */
    assert_int_equal(tr_graph_n_outputs(g), first + n_params);

    struct tr_weights *w = NULL;
    if (tr_weights_load(g, FIXTURE, &w, &e)) fail_msg("%s" HINT, e.msg);

    /* References as float64, and the whole gradient's norm. */
    double *ref[MAX_PARAMS], ref_norm[MAX_PARAMS], total = 0;
    for (int i = 0; i < n_params; i++) {
        const char *name = tr_node_name(g, grads[i]);
        struct tr_tensor t;
        if (tr_safetensors_get(gr, name, &t, &e)) fail_msg("%s" HINT, e.msg);
        struct tr_tensor want = tr_node_tensor(g, grads[i]);
        assert_int_equal(tr_tensor_numel(&t), tr_tensor_numel(&want));
        ref[i] = tr_test_to_f64(&t);
        double s = norm2(ref[i], tr_tensor_numel(&t));
        total += s;
        ref_norm[i] = sqrt(s);
    }
    total = sqrt(total);
    assert_true(total > 0);
    double *logits_ref;
    {
        struct tr_tensor t;
        if (tr_safetensors_get(io, "logits", &t, &e)) fail_msg("%s" HINT, e.msg);
        logits_ref = tr_test_to_f64(&t);
    }
    const double loss_ref = ((const float *)ref_loss.data)[0];
    /* Zero in exact arithmetic (see the top): measured against the whole gradient. */
    double scale[MAX_PARAMS];
    int n_zero = 0;
    for (int i = 0; i < n_params; i++) {
        int zero = ref_norm[i] < 1e-9 * total;
        if (zero && !strstr(tr_node_name(g, grads[i]), "attention.self.key.bias"))
            fail_msg("%s is %.3g in the reference, expected nonzero" HINT, tr_node_name(g, grads[i]), ref_norm[i]);
        n_zero += zero;
        scale[i] = zero ? total : ref_norm[i];
    }
    assert_int_equal(n_zero, (int)tiny->num_hidden_layers);

    int n_out = tr_graph_n_outputs(g);
    struct tr_tensor *out[TR_TEST_N_BACKENDS];
    for (int c = 0; c < TR_TEST_N_BACKENDS; c++) {
        out[c] = calloc((size_t)n_out, sizeof(struct tr_tensor));
        assert_non_null(out[c]);
        run(&tr_test_backends[c], g, in, out[c]);

        double l = ((const float *)out[c][3].data)[0];
        double loss_err = fabs(l - loss_ref) / fabs(loss_ref);
        double logits_err = tr_test_rel_err(&out[c][0], logits_ref);
        struct worst ws[MAX_PARAMS], vs[MAX_PARAMS];
        for (int i = 0; i < n_params; i++) {
            ws[i] = (struct worst){err_scaled(&out[c][first + i], ref[i], scale[i]), i};
            double *r0 = tr_test_to_f64(&out[0][first + i]);
            vs[i] = (struct worst){err_scaled(&out[c][first + i], r0, scale[i]), i};
            free(r0);
        }
        qsort(ws, (size_t)n_params, sizeof ws[0], by_err_desc);
        qsort(vs, (size_t)n_params, sizeof vs[0], by_err_desc);
        print_message("%-22s loss %.8f (ref %.8f, rel err %.2e), logits rel err %.2e, %d gradients: worst vs "
                      "pytorch %.2e, worst vs torch %.2e\n",
                      tr_test_backends[c].label, l, loss_ref, loss_err, logits_err, n_params, ws[0].err, vs[0].err);
        for (int k = 0; k < 3; k++)
            print_message("    %.2e %s\n", ws[k].err, tr_node_name(g, grads[ws[k].param]));
        for (int i = 0; i < n_params; i++)
            if (scale[i] == total)
                print_message("    %s: ‖g − g_ref‖/‖∇‖ %.2e (zero in exact arithmetic)\n", tr_node_name(g, grads[i]),
                              err_scaled(&out[c][first + i], ref[i], total));
        if (!(loss_err < LOSS_TOL))
            fail_msg("%s: loss %.8f, pytorch %.8f: relative error %.3g >= %.0e", tr_test_backends[c].label, l, loss_ref,
                     loss_err, LOSS_TOL);
        if (!(logits_err < GRAD_TOL))
            fail_msg("%s: logits relative error %.3g >= %.0e", tr_test_backends[c].label, logits_err, GRAD_TOL);
        if (!(ws[0].err < GRAD_TOL))
            fail_msg("%s: %s: relative error %.3g vs pytorch >= %.0e", tr_test_backends[c].label,
                     tr_node_name(g, grads[ws[0].param]), ws[0].err, GRAD_TOL);
        if (!(vs[0].err < GRAD_TOL))
            fail_msg("%s: %s: relative error %.3g vs torch >= %.0e", tr_test_backends[c].label,
                     tr_node_name(g, grads[vs[0].param]), vs[0].err, GRAD_TOL);
    }

    for (int c = 0; c < TR_TEST_N_BACKENDS; c++) {
        for (int i = 0; i < n_out; i++) tr_test_tensor_free(&out[c][i]);
        free(out[c]);
    }
    for (int i = 0; i < n_params; i++) free(ref[i]);
    free(logits_ref);
    tr_weights_free(w);
    tr_graph_free(g);
    tr_safetensors_close(gr);
    tr_safetensors_close(io);
}

static void test_grads_match_pytorch(void **state) { grads_match(FIXTURE_IO, FIXTURE_GRADS); }

/* The same with the pad token (pad_token_id 0) at two attended positions: transformers'
 * word embedding (padding_idx 0) gives its row no gradient, and neither may trident
 * (make_pad_grad_fixture.py; issue 18). */
static void test_grads_match_pytorch_pad_tokens(void **state) { grads_match(FIXTURE_PAD, FIXTURE_PAD); }

/* Sample 0 labelled -100: CrossEntropyLoss's ignore_index leaves it out of the loss and of
 * the mean, so loss and gradients are sample 1's alone (make_bert_ignore_fixture.py). */
static void test_grads_match_pytorch_ignored_label(void **state) { grads_match(FIXTURE_IGNORE, FIXTURE_IGNORE); }

TR_TEST_MAIN(tr_test_dir_setup, tr_test_dir_teardown, test_grads_match_pytorch, test_grads_match_pytorch_pad_tokens,
             test_grads_match_pytorch_ignored_label)
