/* Every backend configuration against Hugging Face and against each other: BERT tiny
 * predict with the fixture's weights and batch, f32 and bf16, on torch (eager),
 * torch:reduce-overhead, tf and jax. Each runs several steps, so a recorded or compiled
 * path (the replay, the cached kernels) is what gets compared, not only the first step.
 * Then the harness itself: tr_bench_run over all four on a synthetic batch must report
 * that they ran and agree. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "backendutil.h"
#include "models.h"
#include "trident/bench.h"
#include "trident/config.h"
#include "trident/graph.h"
#include "trident/loader.h"
#include "trident/safetensors.h"
#include "trident/weights.h"

#define STEPS 3

static void run(const struct tr_test_backend *c, struct tr_graph *g, const struct tr_tensor *in, struct tr_tensor *out) {
    tr_test_run_backend(c, tr_test_dir, g, in, STEPS, out, NULL);
}

static void all_match_hf(enum tr_dtype dt) {
    struct tr_test_bert b;
    tr_test_bert_open(&b, dt, "");
    struct tr_graph *g = b.g;

    struct tr_tensor out[TR_TEST_N_BACKENDS][3];
    double tol = tr_test_tol(dt);
    for (int c = 0; c < TR_TEST_N_BACKENDS; c++) {
        run(&tr_test_backends[c], g, b.in, out[c]);
        for (int i = 0; i < 3; i++) {
            const char *name = tr_graph_output_name(g, i);
            double hf = tr_test_io_rel_err(b.io, name, &out[c][i], "");
            double *r0 = tr_test_to_f64(&out[0][i]);
            double vs_eager = tr_test_rel_err(&out[c][i], r0);
            free(r0);
            print_message("%-5s %-22s %-17s vs transformers %.2e, vs torch %.2e\n", tr_dtype_name(dt),
                          tr_test_backends[c].label, name, hf, vs_eager);
            if (!(hf < tol)) fail_msg("%s %s %s: %.3g from transformers (tolerance %.0e)", tr_test_backends[c].label,
                                      tr_dtype_name(dt), name, hf, tol);
            if (!(vs_eager < tol)) fail_msg("%s %s %s: %.3g from torch (tolerance %.0e)", tr_test_backends[c].label,
                                            tr_dtype_name(dt), name, vs_eager, tol);
        }
    }
    for (int c = 0; c < TR_TEST_N_BACKENDS; c++)
        for (int i = 0; i < 3; i++) tr_test_tensor_free(&out[c][i]);
    tr_test_bert_close(&b);
}

static void test_f32(void **state) { all_match_hf(TR_DTYPE_F32); }
static void test_bf16(void **state) { all_match_hf(TR_DTYPE_BF16); }

/* The harness: the same run `trident run` does, all four side by side. */
static void test_bench_all_agree(void **state) {
    char text[1024];
    snprintf(text, sizeof text,
             "[run]\nmodel = bert\npreset = tiny\ntask = predict\n"
             "backends = torch, torch:reduce-overhead, tf, jax\n"
             "batch = 2\nseq_len = 32\nsteps = 3\nwarmup = 2\n"
             "[backend.jax]\ncache_dir = %s\n",
             tr_test_dir);
    static struct tr_bench_report rep;
    tr_test_bench_run(text, "agreement.ini", tr_builtin_models, &rep);
    assert_int_equal(rep.n_rows, 4);
    for (int i = 0; i < rep.n_rows; i++) {
        assert_true(rep.rows[i].ok && rep.rows[i].agrees);
        assert_true(rep.rows[i].mean_ms > 0 && rep.rows[i].stats.kernel_calls > 0);
    }
    assert_string_equal(rep.rows[1].stats.mode, "reduce-overhead");
}

TR_TEST_MAIN(tr_test_dir_setup, tr_test_dir_teardown, test_f32, test_bf16, test_bench_all_agree)
