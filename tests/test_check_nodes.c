/* `trident run --check nodes` (check_nodes.h): every computed node made an output, and
 * each backend's values held to the reference's node by node.
 *
 * It must be able to fail: the wrong test plugin (tests/plugins/backend_test.c) computes
 * every node right and then makes its first f32 output, BERT's logits, 1% off; the check
 * must name exactly that node, say that its inputs agreed, and find no other node beyond
 * the tolerance. And it must not cry wolf: torch, torch:reduce-overhead, tf and jax on
 * BERT tiny predict (f32 and bf16) agree at every node, and so does fit, whose
 * attention key-bias gradients are exact zeros in the maths and roundoff noise in each
 * backend (the check's magnitude floor is what keeps them from failing it). */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "backendutil.h"
#include "models.h"
#include "trident/bench.h"
#include "trident/check_nodes.h"
#include "trident/config.h"
#include "trident/graph.h"

#define WRONG TR_TEST_PLUGIN_DIR "/libtrident_backend_wrong.so"

/* [run] of BERT tiny for task in dtype over backends, with the jax cache in the group's
 * scratch directory. */
static void bert_ini(char *text, size_t n, const char *task, const char *dtype, const char *backends) {
    int k = snprintf(text, n, "[run]\nmodel = bert\npreset = tiny\ntask = %s\ndtype = %s\nbackends = %s\nbatch = 2\n"
                     "seq_len = 32\n", task, dtype, backends);
    if (strstr(backends, "jax")) snprintf(text + k, n - (size_t)k, "[backend.jax]\ncache_dir = %s\n", tr_test_dir);
}

static int check(const char *ini, struct tr_check_nodes_report *rep, struct tr_error *e) {
    struct tr_config cfg;
    if (tr_config_load_string(ini, "check_nodes.ini", &cfg, e)) fail_msg("%s", e->msg);
    int rc = tr_check_nodes_run(&cfg, tr_builtin_models, rep, e);
    tr_check_nodes_print(rep, stdout);
    if (rc) print_message("check nodes: %s\n", e->msg);
    return rc;
}

/* Marking: computed nodes only, named "#ID", appended after the model's own outputs;
 * a second pass adds nothing; a graph that gives such a name to another node is refused
 * whole. */
static void test_mark(void **state) {
    (void)state;
    struct tr_graph *g = NULL;
    struct tr_error e = {0};
    if (tr_graph_init(&g, &e)) fail_msg("%s", e.msg);
    const int64_t xs[2] = {2, 4}, ws[2] = {4, 3};
    int x = tr_input(g, "x", TR_DTYPE_F32, 2, xs);
    int w = tr_param(g, "w", TR_DTYPE_F32, 2, ws, 0, 1);
    int y = tr_matmul(g, x, w, 0, 0);
    int z = tr_unary(g, TR_OP_TANH, y);
    int s = tr_reduce(g, TR_OP_SUM, z, 1, 0);
    assert_int_equal(tr_graph_set_output(g, s, "out"), TR_OK);
    int n = -1;
    assert_int_equal(tr_check_nodes_mark(g, &n, &e), TR_OK);
    assert_int_equal(n, 2); /* y and z: x and w are leaves, s is an output already */
    assert_int_equal(tr_graph_n_outputs(g), 3);
    assert_string_equal(tr_graph_output_name(g, 0), "out");
    assert_int_equal(tr_graph_output(g, 1), y);
    assert_int_equal(tr_graph_output(g, 2), z);
    char want[16];
    snprintf(want, sizeof want, "#%d", z);
    assert_string_equal(tr_graph_output_name(g, 2), want);
    assert_int_equal(tr_check_nodes_mark(g, &n, &e), TR_OK);
    assert_int_equal(n, 0);
    tr_graph_free(g);

    if (tr_graph_init(&g, &e)) fail_msg("%s", e.msg);
    x = tr_input(g, "x", TR_DTYPE_F32, 2, xs);
    y = tr_unary(g, TR_OP_EXP, x);
    z = tr_unary(g, TR_OP_TANH, y);
    assert_int_equal(tr_graph_set_output(g, z, "#7"), TR_OK);
    const char *needles[] = {"'#7'", "#ID"};
    tr_test_expect_failure("an output named #7", tr_check_nodes_mark(g, &n, &e), &e, TR_ERR_INVALID, needles, 2);
    assert_int_equal(tr_graph_n_outputs(g), 1);
    assert_int_equal(tr_graph_status(g, &e), TR_OK); /* refused before the graph was touched */
    tr_graph_free(g);
}

/* The wrong plugin: one node, the logits, beyond the tolerance, and the check names it. */
static void test_finds_the_wrong_node(void **state) {
    (void)state;
    char ini[1024];
    bert_ini(ini, sizeof ini, "predict", "f32", "torch, " WRONG);
    struct tr_task_graph tg;
    tr_test_task_graph(ini, "check_nodes.ini", tr_builtin_models, &tg);
    const int logits = tr_graph_output(tg.graph, 0); /* what the plugin makes 1% off */
    const int op = tr_node_op(tg.graph, logits);
    char name[TR_NAME_MAX];
    snprintf(name, sizeof name, "%s", tr_node_name(tg.graph, logits));
    tr_task_graph_free(&tg);

    static struct tr_check_nodes_report rep;
    struct tr_error e = {0};
    assert_int_equal(check(ini, &rep, &e), TR_ERR_NUMERIC);
    assert_int_equal(rep.n_rows, 2);
    assert_false(rep.all_agree);
    assert_true(rep.rows[0].ok && rep.rows[0].is_reference);
    const struct tr_check_nodes_row *r = &rep.rows[1];
    assert_true(r->ok && !r->is_reference);
    assert_string_equal(r->label, "wrong");
    assert_true(rep.n_checked > 50 && r->n_compared == rep.n_checked);
    assert_int_equal(r->first.id, logits);
    assert_int_equal(r->first.op, op);
    assert_string_equal(r->first.name, name);
    assert_true(fabs(r->first.rel - 0.01) < 1e-3); /* 1% off */
    assert_int_equal(r->n_beyond, 1);
    assert_int_equal(r->worst[0].id, logits);
    assert_int_equal(r->nonfinite.id, -1);
    /* its inputs agreed: every computed one within the tolerance */
    assert_true(r->n_first_inputs > 0);
    for (int j = 0; j < r->n_first_inputs; j++)
        if (r->first_inputs[j].compared) assert_true(r->first_inputs[j].rel <= rep.tolerance);
    char want[TR_NAME_MAX + 64];
    snprintf(want, sizeof want, "'wrong' first at node %d '%s' (%s)", logits, name, tr_op_name(op));
    tr_assert_msg_has(&e, want);
}

/* The in-tree backends agree with torch at every node of BERT tiny task in dtype. */
static void expect_all_agree(const char *task, const char *dtype) {
    char ini[1024];
    bert_ini(ini, sizeof ini, task, dtype, "torch, torch:reduce-overhead, tf, jax");
    static struct tr_check_nodes_report rep;
    struct tr_error e = {0};
    if (check(ini, &rep, &e) != TR_OK) fail_msg("bert tiny %s %s: %s", task, dtype, e.msg);
    assert_true(rep.all_agree);
    assert_int_equal(rep.n_rows, 4);
    assert_true(rep.n_checked > 50);
    for (int b = 1; b < rep.n_rows; b++) {
        const struct tr_check_nodes_row *r = &rep.rows[b];
        assert_true(r->ok && !r->is_reference);
        assert_int_equal(r->n_compared, rep.n_checked);
        assert_int_equal(r->n_beyond, 0);
        assert_int_equal(r->first.id, -1);
        assert_int_equal(r->nonfinite.id, -1);
    }
}

static void test_in_tree_agree_f32(void **state) { expect_all_agree("predict", "f32"); }
static void test_in_tree_agree_bf16(void **state) { expect_all_agree("predict", "bf16"); }

/* fit: the step's forward pass, gradients and AdamW updates, node by node. */
static void test_in_tree_agree_fit(void **state) { expect_all_agree("fit", "f32"); }

/* A token generator's two passes are refused, naming what to check instead. */
static void test_generate_refused(void **state) {
    (void)state;
    static struct tr_check_nodes_report rep;
    struct tr_error e = {0};
    struct tr_config cfg;
    const char *ini = "[run]\nmodel = gemma\npreset = tiny\ntask = generate\nbackends = torch\nbatch = 1\n";
    if (tr_config_load_string(ini, "generate.ini", &cfg, &e)) fail_msg("%s", e.msg);
    const char *needles[] = {"two passes", "task = predict"};
    tr_test_expect_failure("check nodes of generate", tr_check_nodes_run(&cfg, tr_builtin_models, &rep, &e), &e,
                           TR_ERR_UNSUPPORTED, needles, 2);
    assert_int_equal(rep.n_rows, 0);
}

TR_TEST_MAIN(tr_test_dir_setup, tr_test_dir_teardown, test_mark, test_finds_the_wrong_node, test_in_tree_agree_f32,
             test_in_tree_agree_bf16, test_in_tree_agree_fit, test_generate_refused)
