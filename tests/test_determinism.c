/* What is bitwise reproducible (docs/determinism.md): on one machine with one thread count,
 * the same graph, weights and batch give the same bits on every backend, run after run
 * (fresh backends, fresh compiles); a fit's losses too. A different thread count may move
 * the low bits of predict outputs (the cpu kernels split their reductions by thread), and
 * this test does not promise otherwise. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backendutil.h"
#include "models.h"
#include "trident/bench.h"
#include "trident/safetensors.h"
#include "trident/weights.h"

#define FIXTURE TR_SOURCE_DIR "/tests/fixtures/bert_tiny.safetensors"
#define FIXTURE_IO TR_SOURCE_DIR "/tests/fixtures/bert_tiny_io.safetensors"

/* BERT tiny predict on the fixture, twice per backend configuration: the same bytes. */
static void test_predict_bitwise(void **state) {
    (void)state;
    struct tr_error e = {0};
    struct tr_tensor in[3];
    struct tr_safetensors *io = tr_test_bert_batch(FIXTURE_IO, in, "");
    const struct tr_model_desc *m = &tr_model_bert;
    static const enum tr_dtype dts[2] = {TR_DTYPE_F32, TR_DTYPE_BF16};
    for (int d = 0; d < 2; d++) {
        struct tr_graph *g = tr_test_model_build(m, m->presets[0].config, TR_TASK_PREDICT, dts[d], in[0].shape[0],
                                                 in[0].shape[1]);
        struct tr_weights *w = NULL;
        if (tr_weights_load(g, FIXTURE, &w, &e)) fail_msg("%s", e.msg);
        for (int c = 0; c < TR_TEST_N_BACKENDS; c++) {
            struct tr_tensor a[3], b[3];
            tr_test_run_backend(&tr_test_backends[c], tr_test_dir, g, in, 2, a, NULL);
            tr_test_run_backend(&tr_test_backends[c], tr_test_dir, g, in, 3, b, NULL);
            for (int i = 0; i < 3; i++) {
                if (memcmp(a[i].data, b[i].data, tr_tensor_nbytes(&a[i])) != 0)
                    fail_msg("%s %s: output %s differs between two runs", tr_test_backends[c].label,
                             tr_dtype_name(dts[d]), tr_graph_output_name(g, i));
                tr_test_tensor_free(&a[i]);
                tr_test_tensor_free(&b[i]);
            }
        }
        print_message("%s: every backend gives the same bits run after run\n", tr_dtype_name(dts[d]));
        tr_weights_free(w);
        tr_graph_free(g);
    }
    tr_safetensors_close(io);
}

/* A fit through the harness, twice: every backend's losses bit for bit. */
static void test_fit_losses_bitwise(void **state) {
    (void)state;
    char ini[1024];
    snprintf(ini, sizeof ini,
             "[run]\nmodel = bert\npreset = tiny\ntask = fit\nbackends = torch, torch:reduce-overhead, tf, jax\n"
             "batch = 4\nseq_len = 16\nsteps = 4\nwarmup = 1\n[backend.jax]\ncache_dir = %s\n",
             tr_test_dir);
    static struct tr_bench_report r1, r2;
    tr_test_bench_run(ini, "det.ini", tr_builtin_models, &r1);
    tr_test_bench_run(ini, "det.ini", tr_builtin_models, &r2);
    assert_int_equal(r1.n_rows, r2.n_rows);
    for (int i = 0; i < r1.n_rows; i++) {
        assert_int_equal(r1.rows[i].n_fit_losses, r2.rows[i].n_fit_losses);
        assert_true(r1.rows[i].n_fit_losses > 1);
        if (memcmp(r1.rows[i].fit_losses, r2.rows[i].fit_losses, sizeof(double) * (size_t)r1.rows[i].n_fit_losses))
            fail_msg("%s: the fit's losses differ between two runs", r1.rows[i].label);
        if (memcmp(&r1.rows[i].loss_last, &r2.rows[i].loss_last, sizeof(double)))
            fail_msg("%s: the last loss differs between two runs", r1.rows[i].label);
    }
    print_message("fit: %d backends, losses bit for bit run after run\n", r1.n_rows);
}

TR_TEST_MAIN(tr_test_dir_setup, tr_test_dir_teardown, test_predict_bitwise, test_fit_losses_bitwise)
