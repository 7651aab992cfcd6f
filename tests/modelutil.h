/* The model tests' shared checks against a Hugging Face fixture: a state_dict file and an
 * io file holding the inputs, the reference outputs by the graph's output names, and
 * lowp_err.bf16 / lowp_err.f16 (the reference implementation's own relative error per
 * output when cast to that dtype). Any failure fails the test, with the error and `hint`
 * (how to regenerate the fixture). */
#ifndef TRIDENT_MODELUTIL_H
#define TRIDENT_MODELUTIL_H

#include "backendutil.h"

struct tr_safetensors;

/* m's preset `name` (its config). */
const void *tr_test_preset(const struct tr_model_desc *m, const char *name);

/* A config m's build must refuse: preset with up to two keys set, built for task (f32,
 * batch 2, seq_len 8); the message holds every string of want (NULL after the last). A
 * value is written into the config as it is, without the key's min and max, so what is
 * tested is the build's own check, not core's range check on [model]. */
struct tr_test_refusal {
    enum tr_task task;
    const char *set[2][2]; /* {key, value}; a NULL key: no more */
    const char *want[3];
};
void tr_test_expect_refusals(const struct tr_model_desc *m, const char *preset, const struct tr_test_refusal *r,
                             int n);
#define TR_TEST_EXPECT_REFUSALS(m, preset, table) \
    tr_test_expect_refusals((m), (preset), (table), (int)(sizeof(table) / sizeof((table)[0])))

/* m's `tiny` preset under [model] hf_config = path (relative: to the working directory,
 * the source tree) and the INI lines `more` after it: TR_OK and *config, or the error. */
int tr_test_resolve_hf(const struct tr_model_desc *m, const char *path, const char *more, void *config,
                       struct tr_error *e);
/* Two configs of m the same key by key (tr_model_key_str), but for the keys `except` lists
 * ("a,b,c", or NULL); a difference fails naming the key, both values and `what`. */
void tr_test_expect_same_config(const struct tr_model_desc *m, const void *got, const void *want, const char *what,
                                const char *except);
/* hf_config = a file holding only `minimal` (the keys a config must give, e.g. model_type)
 * over the tiny preset resolves, key by key, to what hf_config = `defaults` (the class's
 * whole defaults: tests/fixtures/make_hf_defaults.py) does: a key left out is the class's
 * default, as transformers and diffusers read it. At least `differ` of the keys must differ
 * from the tiny preset's own, so the defaults are seen to apply. */
void tr_test_hf_defaults_match(const struct tr_model_desc *m, const char *minimal, const char *defaults, int differ);

/* m's preset `name` has `predict` parameter elements in its predict graph (batch B,
 * seq_len T) and, where fit > 0, `fit` in its fit graph (what fit trains). */
void tr_test_expect_param_counts(const struct tr_model_desc *m, const char *name, int64_t B, int64_t T,
                                 int64_t predict, int64_t fit);
/* m's make_inputs (seed 42) on in[0..n) fails with status, with a message holding needle:
 * for tensors in the wrong order or of the wrong count. */
void tr_test_make_inputs_refused(const struct tr_model_desc *m, const void *config, const struct tr_build_opts *o,
                                 int n, struct tr_tensor *in, int status, const char *needle);
/* src's tensors written to tr_test_dir/name (its path in path), the first tensor whose name
 * holds `tensor` with element index set to value: a file with one bad number. */
void tr_test_copy_poisoned(const char *src, const char *tensor, int64_t index, double value, const char *name,
                           char *path, size_t cap);
/* Elements in g's PARAMs. */
int64_t tr_test_param_count(const struct tr_graph *g);
struct tr_safetensors *tr_test_open(const char *path, const char *hint);
/* io's tensor `name` as a new host tensor of dtype dt (free with tr_test_tensor_free). */
struct tr_tensor tr_test_io_tensor(const struct tr_safetensors *io, const char *name, enum tr_dtype dt,
                                   const char *hint);
/* Every PARAM of g is in the state_dict at path under its name less `strip` (a prefix
 * every PARAM name has; "" for none), with its shape; every entry there is a PARAM. */
void tr_test_expect_state_dict(const struct tr_graph *g, const char *path, const char *strip, const char *hint);
/* Entry i of io's param_count (i64): the reference's parameter counts. */
int64_t tr_test_io_count(const struct tr_safetensors *io, int i, const char *hint);
/* The fixture at io_path counted what the graphs count: param_count[0] is the tiny
 * preset's predict graph's (batch B, seq_len T), param_count[1] is `full` (the reference's
 * count of the full-size model). */
void tr_test_expect_io_counts(const struct tr_model_desc *m, const char *io_path, int64_t B, int64_t T, int64_t full,
                              const char *hint);
/* m's tiny-preset graphs (config) against the fixture: the predict graph's PARAMs are the
 * state_dict at weights (tr_test_expect_state_dict) and param_count[0] elements; the fit
 * graph's, param_count[1] (what fit trains). */
void tr_test_expect_fixture_counts(const struct tr_model_desc *m, const void *config, const char *weights,
                                   const struct tr_safetensors *io, const char *hint);
/* The bar for output i in dt: DESIGN.md's tolerance, or in bf16 and f16, where the model
 * is deeper than that allows, the reference's own error in that dtype with 20% margin. */
double tr_test_fixture_bar(const struct tr_safetensors *io, enum tr_dtype dt, int i, const char *hint);
/* g run `steps` times on every backend configuration on in: each output within its bar
 * of io's tensor of the same name; each error is printed after `who`. */
void tr_test_expect_fixture_outputs(struct tr_graph *g, const struct tr_tensor *in, const struct tr_safetensors *io,
                                    enum tr_dtype dt, int steps, const char *who, const char *hint);

/* m's predict graph for config in dt on the inputs names[0..n) of the fixture at io_path
 * (input i in dtype dts[i], or dt where dts[i] < 0; batch from input 0, seq_len from input
 * t_from's axis 1, 1 where t_from < 0), weights from `weights`, then
 * tr_test_expect_fixture_outputs. */
void tr_test_fixture_predict(const struct tr_model_desc *m, const void *config, enum tr_dtype dt, const char *weights,
                             const char *io_path, int n, const char *const *names, const int *dts, int t_from,
                             int steps, const char *who, const char *hint);

/* m's fit graph for config (f32) on io's inputs names[0..n) (batch from input 0), its
 * trainable PARAMs differentiated by tr_grad, weights from `weights`: on every backend
 * the loss and each gradient against io's "loss" and "grad.<name>" (torch autograd in
 * float64) within DESIGN.md's f32 bar. A reference gradient of zero norm fails the test
 * unless its name holds zero_ok (a gradient that is zero in exact arithmetic: it is then
 * held to ‖g − g_ref‖ < bar·‖∇‖, the whole gradient's norm); zero_ok NULL: none. */
void tr_test_fixture_fit_grads(const struct tr_model_desc *m, const void *config, const char *weights,
                               const struct tr_safetensors *io, int n, const char *const *names, const char *zero_ok,
                               const char *hint);

#endif
