/* The model tests' shared fixture checks (modelutil.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "modelutil.h"
#include "trident/autodiff.h"
#include "trident/safetensors.h"
#include "trident/weights.h"

const void *tr_test_preset(const struct tr_model_desc *m, const char *name) {
    for (int i = 0; i < m->n_presets; i++)
        if (strcmp(m->presets[i].name, name) == 0) return m->presets[i].config;
    fail_msg("%s has no preset '%s'", m->name, name);
    return NULL;
}

/* key = value written into config (m's layout) with no range check. */
static void set_key(const struct tr_model_desc *m, void *config, const char *key, const char *value) {
    const struct tr_model_key *k = NULL;
    for (int i = 0; i < m->n_keys && !k; i++)
        if (strcmp(m->keys[i].name, key) == 0) k = &m->keys[i];
    if (!k) fail_msg("%s has no key '%s'", m->name, key);
    char *at = (char *)config + k->offset, *end = NULL;
    switch (k->type) {
    case TR_KEY_INT: *(int64_t *)at = strtoll(value, &end, 10); break;
    case TR_KEY_FLOAT: *(double *)at = strtod(value, &end); break;
    case TR_KEY_BOOL: *(int *)at = (int)strtol(value, &end, 10); break;
    case TR_KEY_STRING:
        if (strlen(value) >= 64) fail_msg("%s = '%s': longer than a string key holds", key, value);
        strcpy(at, value);
        return;
    }
    if (end == value || *end) fail_msg("%s = '%s': not a number", key, value);
}

void tr_test_expect_refusals(const struct tr_model_desc *m, const char *preset, const struct tr_test_refusal *r,
                             int n) {
    void *c = malloc(m->config_size);
    assert_non_null(c);
    for (int i = 0; i < n; i++) {
        memcpy(c, tr_test_preset(m, preset), m->config_size);
        for (int j = 0; j < 2 && r[i].set[j][0]; j++) set_key(m, c, r[i].set[j][0], r[i].set[j][1]);
        int n_want = 0;
        while (n_want < 3 && r[i].want[n_want]) n_want++;
        tr_test_build_refused(m, c, r[i].task, r[i].want, n_want);
    }
    free(c);
}

void tr_test_expect_param_counts(const struct tr_model_desc *m, const char *name, int64_t B, int64_t T,
                                 int64_t predict, int64_t fit) {
    struct tr_graph *g = tr_test_model_build(m, tr_test_preset(m, name), TR_TASK_PREDICT, TR_DTYPE_F32, B, T);
    assert_int_equal(tr_test_param_count(g), predict);
    tr_graph_free(g);
    if (fit <= 0) return;
    g = tr_test_model_build(m, tr_test_preset(m, name), TR_TASK_FIT, TR_DTYPE_F32, B, T);
    assert_int_equal(tr_test_param_count(g), fit);
    tr_graph_free(g);
}

void tr_test_make_inputs_refused(const struct tr_model_desc *m, const void *config, const struct tr_build_opts *o,
                                 int n, struct tr_tensor *in, int status, const char *needle) {
    struct tr_error e = {0};
    assert_int_equal(m->make_inputs(config, o, 42, n, in, &e), status);
    tr_assert_msg_has(&e, needle);
}

int64_t tr_test_param_count(const struct tr_graph *g) {
    int64_t n = 0;
    for (int i = 0; i < tr_graph_n_params(g); i++) {
        struct tr_tensor t = tr_node_tensor(g, tr_graph_param(g, i));
        n += tr_tensor_numel(&t);
    }
    return n;
}

struct tr_safetensors *tr_test_open(const char *path, const char *hint) {
    struct tr_safetensors *st = NULL;
    struct tr_error e = {0};
    if (tr_safetensors_open(path, &st, &e)) fail_msg("%s%s", e.msg, hint);
    return st;
}

struct tr_tensor tr_test_io_tensor(const struct tr_safetensors *io, const char *name, enum tr_dtype dt,
                                   const char *hint) {
    struct tr_tensor t;
    struct tr_error e = {0};
    if (tr_safetensors_get(io, name, &t, &e)) fail_msg("%s%s", e.msg, hint);
    struct tr_tensor r = tr_test_tensor(dt, t.ndim, t.shape);
    double *v = tr_test_to_f64(&t);
    for (int64_t i = 0; i < tr_tensor_numel(&t); i++) tr_tensor_set_f64(&r, i, v[i]);
    free(v);
    return r;
}

void tr_test_expect_state_dict(const struct tr_graph *g, const char *path, const char *strip, const char *hint) {
    struct tr_safetensors *st = tr_test_open(path, hint);
    struct tr_error e = {0};
    const size_t ns = strlen(strip);
    for (int i = 0; i < tr_graph_n_params(g); i++) {
        int id = tr_graph_param(g, i);
        const char *name = tr_node_name(g, id);
        if (strncmp(name, strip, ns) != 0) fail_msg("parameter '%s' does not start with '%s'", name, strip);
        struct tr_tensor t, want = tr_node_tensor(g, id);
        if (tr_safetensors_get(st, name + ns, &t, &e)) fail_msg("%s%s", e.msg, hint);
        if (!tr_shape_equal(t.ndim, t.shape, want.ndim, want.shape)) {
            char a[96], b[96];
            fail_msg("%s: %s in the state_dict, %s in the graph", name, tr_shape_str(t.ndim, t.shape, a, sizeof a),
                     tr_shape_str(want.ndim, want.shape, b, sizeof b));
        }
    }
    for (int i = 0; i < tr_safetensors_count(st); i++) {
        char name[TR_NAME_MAX + 64];
        snprintf(name, sizeof name, "%s%s", strip, tr_safetensors_name(st, i));
        if (tr_graph_find(g, name) < 0)
            fail_msg("state_dict entry '%s' is not a parameter of the graph", tr_safetensors_name(st, i));
    }
    assert_int_equal(tr_safetensors_count(st), tr_graph_n_params(g));
    tr_safetensors_close(st);
}

double tr_test_fixture_bar(const struct tr_safetensors *io, enum tr_dtype dt, int i, const char *hint) {
    double tol = tr_test_tol(dt);
    if (dt == TR_DTYPE_BF16 || dt == TR_DTYPE_F16) {
        struct tr_tensor lp;
        struct tr_error e = {0};
        char key[32];
        snprintf(key, sizeof key, "lowp_err.%s", tr_dtype_name(dt));
        if (tr_safetensors_get(io, key, &lp, &e)) fail_msg("%s%s", e.msg, hint);
        if (i >= tr_tensor_numel(&lp)) fail_msg("%s has %lld entries, no %d%s", key, (long long)tr_tensor_numel(&lp), i,
                                                hint);
        tol = fmax(tol, 1.2 * tr_tensor_get_f64(&lp, i));
    }
    return tol;
}

void tr_test_expect_fixture_outputs(struct tr_graph *g, const struct tr_tensor *in, const struct tr_safetensors *io,
                                    enum tr_dtype dt, int steps, const char *who, const char *hint) {
    const int n = tr_graph_n_outputs(g);
    struct tr_tensor *out = calloc((size_t)n, sizeof *out);
    assert_non_null(out);
    for (int c = 0; c < TR_TEST_N_BACKENDS; c++) {
        tr_test_run_backend(&tr_test_backends[c], tr_test_dir, g, in, steps, out, NULL);
        for (int i = 0; i < n; i++) {
            const char *name = tr_graph_output_name(g, i);
            const double err = tr_test_io_rel_err(io, name, &out[i], hint), bar = tr_test_fixture_bar(io, dt, i, hint);
            print_message("%-22s %-4s %-18s rel err vs %s %.2e (bar %.2e)\n", tr_test_backends[c].label,
                          tr_dtype_name(dt), name, who, err, bar);
            if (!(err < bar))
                fail_msg("%s %s: %s relative error %.3g vs %s >= %.3g", tr_test_backends[c].label, tr_dtype_name(dt),
                         name, err, who, bar);
            tr_test_tensor_free(&out[i]);
        }
    }
    free(out);
}

void tr_test_fixture_predict(const struct tr_model_desc *m, const void *config, enum tr_dtype dt, const char *weights,
                             const char *io_path, int n, const char *const *names, const int *dts, int t_from,
                             int steps, const char *who, const char *hint) {
    struct tr_safetensors *io = tr_test_open(io_path, hint);
    struct tr_tensor in[8];
    assert_true(n >= 1 && n <= 8);
    for (int i = 0; i < n; i++) in[i] = tr_test_io_tensor(io, names[i], dts[i] < 0 ? dt : (enum tr_dtype)dts[i], hint);
    struct tr_graph *g =
        tr_test_model_build(m, config, TR_TASK_PREDICT, dt, in[0].shape[0], t_from < 0 ? 1 : in[t_from].shape[1]);
    struct tr_weights *w = NULL;
    struct tr_error e = {0};
    if (tr_weights_load(g, weights, &w, &e)) fail_msg("%s%s", e.msg, hint);
    tr_test_expect_fixture_outputs(g, in, io, dt, steps, who, hint);
    tr_test_tensors_free(n, in);
    tr_weights_free(w);
    tr_graph_free(g);
    tr_safetensors_close(io);
}

#define MAX_GRADS 512

void tr_test_fixture_fit_grads(const struct tr_model_desc *m, const void *config, const char *weights,
                               const struct tr_safetensors *io, int n_in, const char *const *names, const char *zero_ok,
                               const char *hint) {
    struct tr_tensor in[8];
    assert_true(n_in >= 1 && n_in <= 8);
    for (int i = 0; i < n_in; i++) in[i] = tr_test_io_tensor(io, names[i], TR_DTYPE_F32, hint);
    struct tr_graph *g = tr_test_model_build(m, config, TR_TASK_FIT, TR_DTYPE_F32, in[0].shape[0], 1);
    struct tr_error e = {0};
    int loss = tr_graph_find(g, "loss"), wrt[MAX_GRADS], grads[MAX_GRADS], n = 0;
    if (m->trainable(config, g, wrt, MAX_GRADS, &n, &e)) fail_msg("%s trainable: %s", m->name, e.msg);
    if (tr_grad(g, loss, n, wrt, grads, &e)) fail_msg("tr_grad: %s", e.msg);
    assert_int_equal(tr_graph_set_output(g, loss, "loss"), TR_OK);
    double *ref[MAX_GRADS], norm[MAX_GRADS], total = 0;
    for (int i = 0; i < n; i++) {
        char name[TR_NAME_MAX + 8];
        snprintf(name, sizeof name, "grad.%s", tr_node_name(g, wrt[i]));
        assert_int_equal(tr_graph_set_output(g, grads[i], name), TR_OK);
        struct tr_tensor t;
        if (tr_safetensors_get(io, name, &t, &e)) fail_msg("%s%s", e.msg, hint);
        ref[i] = tr_test_to_f64(&t);
        double s = 0;
        for (int64_t k = 0; k < tr_tensor_numel(&t); k++) s += ref[i][k] * ref[i][k];
        norm[i] = sqrt(s);
        total += s;
    }
    total = sqrt(total);
    struct tr_weights *w = NULL;
    if (tr_weights_load(g, weights, &w, &e)) fail_msg("%s%s", e.msg, hint);
    const double tol = tr_test_tol(TR_DTYPE_F32);
    int n_zero = 0;
    for (int i = 0; i < n; i++) n_zero += norm[i] < 1e-9 * total;
    for (int c = 0; c < TR_TEST_N_BACKENDS; c++) {
        struct tr_tensor out[1 + MAX_GRADS];
        tr_test_run_backend(&tr_test_backends[c], tr_test_dir, g, in, 2, out, NULL);
        double worst = tr_test_io_rel_err(io, "loss", &out[0], hint);
        const char *worst_name = "loss";
        for (int i = 0; i < n; i++) {
            double *o = tr_test_to_f64(&out[1 + i]), d = 0;
            for (int64_t k = 0; k < tr_tensor_numel(&out[1 + i]); k++) d += (o[k] - ref[i][k]) * (o[k] - ref[i][k]);
            free(o);
            const int zero = norm[i] < 1e-9 * total;
            if (zero && !(zero_ok && strstr(tr_node_name(g, wrt[i]), zero_ok)))
                fail_msg("%s is %.3g in the reference, expected nonzero%s", tr_node_name(g, wrt[i]), norm[i], hint);
            double err = sqrt(d) / (zero ? total : norm[i]);
            if (!(err <= worst)) worst = err, worst_name = tr_node_name(g, wrt[i]);
            tr_test_tensor_free(&out[1 + i]);
        }
        tr_test_tensor_free(&out[0]);
        print_message("%-22s loss and %d gradients (%d zero in exact arithmetic): worst rel err %.2e (%s)\n",
                      tr_test_backends[c].label, n, n_zero, worst, worst_name);
        if (!(worst < tol))
            fail_msg("%s: %s relative error %.3g vs torch autograd >= %.0e", tr_test_backends[c].label, worst_name,
                     worst, tol);
    }
    for (int i = 0; i < n; i++) free(ref[i]);
    tr_test_tensors_free(n_in, in);
    tr_weights_free(w);
    tr_graph_free(g);
}

int64_t tr_test_io_count(const struct tr_safetensors *io, int i, const char *hint) {
    struct tr_error e = {0};
    struct tr_tensor pc;
    if (tr_safetensors_get(io, "param_count", &pc, &e)) fail_msg("%s%s", e.msg, hint);
    if (pc.dtype != TR_DTYPE_I64 || tr_tensor_numel(&pc) <= i) fail_msg("param_count: no entry %d%s", i, hint);
    return ((const int64_t *)pc.data)[i];
}

void tr_test_expect_io_counts(const struct tr_model_desc *m, const char *io_path, int64_t B, int64_t T, int64_t full,
                              const char *hint) {
    struct tr_safetensors *io = tr_test_open(io_path, hint);
    assert_int_equal(tr_test_io_count(io, 1, hint), full);
    struct tr_graph *g = tr_test_model_build(m, tr_test_preset(m, "tiny"), TR_TASK_PREDICT, TR_DTYPE_F32, B, T);
    assert_int_equal(tr_test_param_count(g), tr_test_io_count(io, 0, hint));
    tr_graph_free(g);
    tr_safetensors_close(io);
}

void tr_test_expect_fixture_counts(const struct tr_model_desc *m, const void *config, const char *weights,
                                   const struct tr_safetensors *io, const char *hint) {
    struct tr_graph *g = tr_test_model_build(m, config, TR_TASK_PREDICT, TR_DTYPE_F32, 2, 1);
    tr_test_expect_state_dict(g, weights, "", hint);
    assert_int_equal(tr_test_param_count(g), tr_test_io_count(io, 0, hint));
    tr_graph_free(g);
    g = tr_test_model_build(m, config, TR_TASK_FIT, TR_DTYPE_F32, 2, 1);
    assert_int_equal(tr_test_param_count(g), tr_test_io_count(io, 1, hint));
    tr_graph_free(g);
}

int tr_test_resolve_hf(const struct tr_model_desc *m, const char *path, const char *more, void *config,
                       struct tr_error *e) {
    char ini[1024];
    struct tr_config cfg;
    snprintf(ini, sizeof ini, "[run]\nmodel = %s\n[model]\nhf_config = %s\n%s", m->name, path, more ? more : "");
    if (tr_config_load_string(ini, "t.ini", &cfg, e)) fail_msg("%s", e->msg);
    return tr_model_resolve(m, "tiny", &cfg, config, e);
}

/* name is one of the comma-separated names of list (NULL: none) */
static int listed(const char *list, const char *name) {
    const size_t n = strlen(name);
    for (const char *p = list; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (strncmp(p, name, n) == 0 && (p[n] == ',' || p[n] == '\0')) return 1;
    return 0;
}

void tr_test_expect_same_config(const struct tr_model_desc *m, const void *got, const void *want, const char *what,
                                const char *except) {
    char a[256], b[256];
    for (int k = 0; k < m->n_keys; k++) {
        if (listed(except, m->keys[k].name)) continue;
        assert_int_equal(tr_model_key_str(m, got, &m->keys[k], a, sizeof a), TR_OK);
        assert_int_equal(tr_model_key_str(m, want, &m->keys[k], b, sizeof b), TR_OK);
        if (strcmp(a, b) != 0) fail_msg("%s %s: %s, expected %s (%s)", m->name, m->keys[k].name, a, b, what);
    }
}

void tr_test_hf_defaults_match(const struct tr_model_desc *m, const char *minimal, const char *defaults, int differ) {
    char path[512];
    struct tr_error e = {0};
    tr_test_dir_file("minimal.json", minimal, path, sizeof path);
    void *a = calloc(1, m->config_size), *b = calloc(1, m->config_size);
    assert_true(a && b);
    if (tr_test_resolve_hf(m, path, "", a, &e)) fail_msg("%s: %s", minimal, e.msg);
    if (tr_test_resolve_hf(m, defaults, "", b, &e)) fail_msg("%s: %s", defaults, e.msg);
    tr_test_expect_same_config(m, a, b, defaults, NULL);
    const void *tiny = tr_test_preset(m, "tiny");
    int n_differ = 0;
    for (int k = 0; k < m->n_keys; k++) {
        char x[256], t[256];
        assert_int_equal(tr_model_key_str(m, a, &m->keys[k], x, sizeof x), TR_OK);
        assert_int_equal(tr_model_key_str(m, tiny, &m->keys[k], t, sizeof t), TR_OK);
        n_differ += strcmp(x, t) != 0;
    }
    print_message("%s: %s resolves as the class's defaults; %d keys differ from tiny's\n", m->name, minimal, n_differ);
    if (n_differ < differ) fail_msg("%s: only %d keys differ from the tiny preset's, expected %d", m->name, n_differ, differ);
    free(a);
    free(b);
}

void tr_test_copy_poisoned(const char *src, const char *tensor, int64_t index, double value, const char *name,
                           char *path, size_t cap) {
    struct tr_error e = {0};
    struct tr_safetensors *st;
    if (tr_safetensors_open(src, &st, &e)) fail_msg("%s", e.msg);
    const int n = tr_safetensors_count(st);
    const char **names = calloc((size_t)n, sizeof *names);
    struct tr_tensor *ts = calloc((size_t)n, sizeof *ts);
    void *copy = NULL;
    assert_true(names && ts);
    for (int i = 0; i < n; i++) {
        names[i] = tr_safetensors_name(st, i);
        if (tr_safetensors_get(st, names[i], &ts[i], &e)) fail_msg("%s", e.msg);
        if (!copy && strstr(names[i], tensor)) { /* the file is mapped read-only: a copy takes the change */
            assert_true(index < tr_tensor_numel(&ts[i]));
            copy = malloc(tr_tensor_nbytes(&ts[i]));
            assert_non_null(copy);
            memcpy(copy, ts[i].data, tr_tensor_nbytes(&ts[i]));
            ts[i].data = copy;
            tr_tensor_set_f64(&ts[i], index, value);
        }
    }
    if (!copy) fail_msg("%s has no tensor named like '%s'", src, tensor);
    tr_test_dir_file(name, NULL, path, cap);
    if (tr_safetensors_write(path, n, names, ts, &e)) fail_msg("%s", e.msg);
    tr_safetensors_close(st);
    free(copy), free(names), free(ts);
}
