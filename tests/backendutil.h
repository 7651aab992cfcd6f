/* Running a graph on a backend configuration the way the tests need it: loaded from the
 * build tree, outputs allocated here and poisoned before every step, any failure a
 * cmocka failure naming the configuration. */
#ifndef TRIDENT_BACKENDUTIL_H
#define TRIDENT_BACKENDUTIL_H

#include "testutil.h"
#include "trident/backend.h"
#include "trident/graph.h"
#include "trident/model.h"

struct tr_test_backend {
    const char *label, *plugin, *mode;
    const char *key, *value;        /* one more option (NULL: none) */
};

/* torch, torch:reduce-overhead, tf, jax. */
#define TR_TEST_N_BACKENDS 4
extern const struct tr_test_backend tr_test_backends[TR_TEST_N_BACKENDS];

/* Run g `steps` times; out[] (one per graph output) is allocated here (free with
 * tr_test_tensor_free). jax_cache_dir is the jax backend's cache_dir (NULL: its default).
 * st, if not NULL, receives the stats after the last step. */
void tr_test_run_backend(const struct tr_test_backend *b, const char *jax_cache_dir, struct tr_graph *g,
                         const struct tr_tensor *in, int steps, struct tr_tensor *out, struct tr_backend_stats *st);

/* g has n inputs: the i-th named names[i], of dtype dts[i] and shape [B, T]. */
void tr_test_expect_inputs(const struct tr_graph *g, int n, const char *const *names, const int *dts, int64_t B,
                           int64_t T);

/* This build's plugin `name` (found from the build tree's plugins/, whatever
 * TRIDENT_PLUGIN_PATH says); a failure fails the test with "open NAME: why". */
struct tr_plugin;
struct tr_plugin *tr_test_plugin_open(const char *name);
/* tr_test_plugin_open, and the plugin's interface names it `name` and declares every
 * capability of caps (TR_CAP_*). */
struct tr_plugin *tr_test_plugin_expect(const char *name, uint64_t caps);

/* tr_backend_init of p on the cpu with opts[0..n); a failure fails the test. */
struct tr_option;
struct tr_backend *tr_test_backend_init(struct tr_plugin *p, const struct tr_option *opts, int n);
/* tr_backend_init of p on the cpu with opts[0..n) must fail, leave no backend, and give a
 * message holding a and, unless b is NULL, b. */
struct tr_option;
void tr_test_init_refused(struct tr_plugin *p, const struct tr_option *opts, int n, const char *a, const char *b);
/* tr_test_init_refused with the one option key = value, from conf/x.ini line `line`. */
void tr_test_option_refused(struct tr_plugin *p, const char *key, const char *value, int line, const char *a,
                            const char *b);

/* The harness on an INI given as text (named `file` in messages): load it, tr_bench_run
 * over models, print the report; a failure to load or to run fails the test, and the
 * report must be all_ok. */
struct tr_bench_report;
void tr_test_bench_run(const char *ini, const char *file, const struct tr_model_desc *const *models,
                       struct tr_bench_report *rep);

/* A report as the printers read it, with no rows yet: BERT tiny `task` in f32 on the cpu
 * (batch 8, seq_len 128, 20 steps after 2 of warmup), on an AMD EPYC 9B14 at AVX-512 with
 * native bf16 and 2 threads, OpenMP wait passive (trident's choice). */
void tr_test_report_init(struct tr_bench_report *rep, const char *task);
/* The next row of rep, `label`, one that ran and agrees (the first row added is the
 * reference); its times are the caller's to set. */
struct tr_bench_row;
struct tr_bench_row *tr_test_report_row(struct tr_bench_report *rep, const char *label);

/* The task graph (tr_task_graph_build) of an INI given as text; a failure fails the test. */
struct tr_task_graph;
void tr_test_task_graph(const char *ini, const char *file, const struct tr_model_desc *const *models,
                        struct tr_task_graph *tg);

/* Host tensors of the shapes and dtypes of g's first n inputs, poisoned (free each with
 * tr_test_tensor_free): what make_inputs is given to fill. */
void tr_test_input_tensors(const struct tr_graph *g, int n, struct tr_tensor *in);

/* The fit task's inputs for tg, one host tensor per graph input (free each with
 * tr_test_tensor_free): the model's batch from make_inputs(seed), then lr and step. */
void tr_test_fit_inputs(const struct tr_task_graph *tg, uint64_t seed, float lr, float step, struct tr_tensor *in);

/* Nothing of training exists in g for its param `name`: no `NAME.adamw_m`, no `grad.NAME`. */
void tr_test_expect_untrained(const struct tr_graph *g, const char *name);

/* m->build of config for task in dt, batch B, seq_len T, into a new graph; a failure
 * fails the test with m's name and the error. */
struct tr_graph *tr_test_model_build(const struct tr_model_desc *m, const void *config, enum tr_task task,
                                     enum tr_dtype dt, int64_t B, int64_t T);

/* m->build of config for task (f32, batch 2, seq_len 8) must refuse, with a message that
 * holds every string of want[0..n_want); the message is printed. */
void tr_test_build_refused(const struct tr_model_desc *m, const void *config, enum tr_task task,
                           const char *const *want, int n_want);

/* BERT tiny's Hugging Face fixture (tests/fixtures/make_bert_fixture.py): open io_path
 * and read its batch, in[0..2] = input_ids, attention_mask, token_type_ids (the graph's
 * inputs, in order; they point into the file, valid until tr_safetensors_close). A
 * failure fails the test with the error followed by hint ("" for none). */
struct tr_safetensors;
struct tr_safetensors *tr_test_bert_batch(const char *io_path, struct tr_tensor in[3], const char *hint);

/* BERT tiny on its fixture, ready to run: the batch (tr_test_bert_batch), the tiny
 * preset's predict graph in dt sized to it, and the fixture's state_dict loaded into it.
 * tr_test_bert_open fails the test on any error, with hint after the message;
 * tr_test_bert_close frees all of it. */
struct tr_weights;
struct tr_test_bert {
    struct tr_safetensors *io;
    struct tr_tensor in[3];
    struct tr_graph *g;
    struct tr_weights *w;
};
void tr_test_bert_open(struct tr_test_bert *b, enum tr_dtype dt, const char *hint);
void tr_test_bert_close(struct tr_test_bert *b);

/* out's relative error (tr_test_rel_err) against the tensor `name` of io, which must have
 * as many elements; a missing tensor fails the test with the error and hint. */
double tr_test_io_rel_err(const struct tr_safetensors *io, const char *name, const struct tr_tensor *out,
                          const char *hint);

/* out[0..3), BERT's three outputs of g in order, each within tr_test_tol(dt) of io's
 * tensor of the same name (tr_test_io_rel_err); each error is printed after `who`
 * ("bert tiny", "tf bert tiny", ...), and one past the tolerance fails the test. */
void tr_test_expect_bert_hf(const struct tr_safetensors *io, const struct tr_graph *g, const struct tr_tensor *out,
                            enum tr_dtype dt, const char *who, const char *hint);

/* A new empty graph; a failure fails the test. */
struct tr_graph *tr_test_graph_new(void);

/* ---- a small graph through a plugin: out = gelu(x·w + b) [M,N], times x2 [M,N] and
 * softmaxed along N when with_x2. w [K,N] is a PARAM bound to fixed values, b [N] a const. */
#define TR_TEST_SMALL_M 4
#define TR_TEST_SMALL_K 8
#define TR_TEST_SMALL_N 16
struct tr_test_small {
    struct tr_graph *g; /* the caller frees it */
    int with_x2;
    float w[TR_TEST_SMALL_K * TR_TEST_SMALL_N], b[TR_TEST_SMALL_N];
};
void tr_test_small_build(struct tr_test_small *s, int with_x2);
/* s's inputs in[0..n) (x, and x2 when with_x2: n is 1 + with_x2) from seeds 42 and 43, and
 * its output out, all f32 (free each with tr_test_tensor_free). */
void tr_test_small_tensors(const struct tr_test_small *s, struct tr_tensor *in, struct tr_tensor *out);
/* out, as run on in, against doubles (tr_test_tol(TR_DTYPE_F32)). */
void tr_test_small_check(const struct tr_test_small *s, const struct tr_tensor *in, const struct tr_tensor *out);

#endif
