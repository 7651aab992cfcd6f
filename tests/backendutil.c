#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backendutil.h"
#include "modelutil.h"
#include "trident/bench.h"
#include "trident/config.h"
#include "trident/loader.h"
#include "trident/models.h"
#include "trident/safetensors.h"
#include "trident/weights.h"

const struct tr_test_backend tr_test_backends[TR_TEST_N_BACKENDS] = {
    {"torch", "torch", NULL, NULL, NULL},
    {"torch:reduce-overhead", "torch", "reduce-overhead", NULL, NULL},
    {"tf", "tf", NULL, NULL, NULL},
    {"jax", "jax", NULL, NULL, NULL},
};

void tr_test_run_backend(const struct tr_test_backend *b, const char *jax_cache_dir, struct tr_graph *g,
                         const struct tr_tensor *in, int steps, struct tr_tensor *out, struct tr_backend_stats *st) {
    struct tr_plugin_search s = {.ini_dir = TR_BINARY_DIR "/plugins", .env_path = ""};
    struct tr_option opts[3];
    int n_opts = 0;
    if (b->mode) opts[n_opts++] = (struct tr_option){.key = "mode", .value = b->mode, .file = "test", .line = 1};
    if (b->key) opts[n_opts++] = (struct tr_option){.key = b->key, .value = b->value, .file = "test", .line = 3};
    if (jax_cache_dir && strcmp(b->plugin, "jax") == 0)
        opts[n_opts++] = (struct tr_option){.key = "cache_dir", .value = jax_cache_dir, .file = "test", .line = 2};
    struct tr_backend_params prm = {.struct_size = sizeof prm, .abi_version = TR_ABI_VERSION,
                                    .device_type = TR_DEVICE_CPU, .options = opts, .n_options = n_opts};
    struct tr_plugin *p = NULL;
    struct tr_backend *be = NULL;
    struct tr_program *prog = NULL;
    struct tr_error e = {0};
    if (tr_plugin_open(b->plugin, &s, &p, &e)) fail_msg("%s: %s", b->label, e.msg);
    if (tr_backend_init(p, &prm, &be, &e)) fail_msg("%s: %s", b->label, e.msg);
    if (tr_backend_compile(be, g, &prog, &e)) fail_msg("%s: compile: %s", b->label, e.msg);
    int n_out = tr_graph_n_outputs(g);
    for (int i = 0; i < n_out; i++) {
        struct tr_tensor t = tr_node_tensor(g, tr_graph_output(g, i));
        out[i] = tr_test_tensor((enum tr_dtype)t.dtype, t.ndim, t.shape);
    }
    for (int step = 0; step < steps; step++) {
        for (int i = 0; i < n_out; i++) tr_test_poison(&out[i]);
        if (tr_backend_execute(be, prog, tr_graph_n_inputs(g), in, n_out, out, &e))
            fail_msg("%s step %d: %s", b->label, step + 1, e.msg);
    }
    if (st) {
        *st = (struct tr_backend_stats){.struct_size = sizeof *st, .abi_version = TR_ABI_VERSION};
        if (tr_backend_get_stats(be, prog, st, &e)) fail_msg("%s: %s", b->label, e.msg);
    }
    tr_program_free(prog);
    tr_backend_free(be);
    tr_plugin_close(p);
}

void tr_test_expect_inputs(const struct tr_graph *g, int n, const char *const *names, const int *dts, int64_t B,
                           int64_t T) {
    assert_int_equal(tr_graph_n_inputs(g), n);
    for (int i = 0; i < n; i++) {
        int id = tr_graph_input(g, i);
        assert_string_equal(tr_node_name(g, id), names[i]);
        assert_int_equal(tr_node_dtype(g, id), dts[i]);
        assert_int_equal(tr_node_ndim(g, id), 2);
        assert_int_equal(tr_node_shape(g, id)[0], B);
        assert_int_equal(tr_node_shape(g, id)[1], T);
    }
}

struct tr_plugin *tr_test_plugin_open(const char *name) {
    struct tr_plugin_search s = {.ini_dir = TR_BINARY_DIR "/plugins", .env_path = ""};
    struct tr_plugin *p = NULL;
    struct tr_error e = {0};
    if (tr_plugin_open(name, &s, &p, &e) != TR_OK) fail_msg("open %s: %s", name, e.msg);
    return p;
}

struct tr_plugin *tr_test_plugin_expect(const char *name, uint64_t caps) {
    struct tr_plugin *p = tr_test_plugin_open(name);
    const struct tr_backend_i *it = tr_plugin_iface(p);
    assert_string_equal(it->name, name);
    if ((it->caps & caps) != caps)
        fail_msg("%s: caps 0x%llx lack 0x%llx", name, (unsigned long long)it->caps,
                 (unsigned long long)(caps & ~it->caps));
    return p;
}

struct tr_backend *tr_test_backend_init(struct tr_plugin *p, const struct tr_option *opts, int n) {
    struct tr_backend_params prm = {.device_type = TR_DEVICE_CPU, .options = opts, .n_options = n};
    struct tr_backend *be = NULL;
    struct tr_error err = {0};
    if (tr_backend_init(p, &prm, &be, &err) != TR_OK) fail_msg("init: %s", err.msg);
    return be;
}

void tr_test_init_refused(struct tr_plugin *p, const struct tr_option *opts, int n, const char *a, const char *b) {
    struct tr_backend *be = NULL;
    struct tr_error err = {0};
    struct tr_backend_params prm = {.struct_size = sizeof prm, .abi_version = TR_ABI_VERSION,
                                    .device_type = TR_DEVICE_CPU, .options = opts, .n_options = n};
    int rc = tr_backend_init(p, &prm, &be, &err);
    if (rc == TR_OK) {
        tr_backend_free(be);
        fail_msg("init accepted what it should refuse (expected '%s')", a);
    }
    assert_null(be);
    if (!strstr(err.msg, a) || (b && !strstr(err.msg, b)))
        fail_msg("message '%s' lacks '%s'%s%s", err.msg, a, b ? " or " : "", b ? b : "");
}

void tr_test_option_refused(struct tr_plugin *p, const char *key, const char *value, int line, const char *a,
                            const char *b) {
    const struct tr_option o = {.key = key, .value = value, .file = "conf/x.ini", .line = line};
    tr_test_init_refused(p, &o, 1, a, b);
}

void tr_test_bench_run(const char *ini, const char *file, const struct tr_model_desc *const *models,
                       struct tr_bench_report *rep) {
    struct tr_config cfg;
    struct tr_error e = {0};
    if (tr_config_load_string(ini, file, &cfg, &e)) fail_msg("%s", e.msg);
    int rc = tr_bench_run(&cfg, models, rep, &e);
    tr_bench_print(rep, stdout);
    if (rc) fail_msg("%s", e.msg);
    assert_true(rep->all_ok);
}

void tr_test_task_graph(const char *ini, const char *file, const struct tr_model_desc *const *models,
                        struct tr_task_graph *tg) {
    struct tr_config cfg;
    struct tr_error e = {0};
    if (tr_config_load_string(ini, file, &cfg, &e)) fail_msg("%s", e.msg);
    if (tr_task_graph_build(&cfg, models, tg, &e)) fail_msg("%s", e.msg);
}

void tr_test_input_tensors(const struct tr_graph *g, int n, struct tr_tensor *in) {
    assert_true(n <= tr_graph_n_inputs(g));
    for (int i = 0; i < n; i++) {
        struct tr_tensor t = tr_node_tensor(g, tr_graph_input(g, i));
        in[i] = tr_test_tensor((enum tr_dtype)t.dtype, t.ndim, t.shape);
        tr_test_poison(&in[i]);
    }
}

void tr_test_fit_inputs(const struct tr_task_graph *tg, uint64_t seed, float lr, float step, struct tr_tensor *in) {
    const struct tr_graph *g = tg->graph;
    const int n_in = tr_graph_n_inputs(g);
    tr_test_input_tensors(g, n_in, in);
    struct tr_error e = {0};
    if (tg->model->make_inputs(tg->config, &tg->opts, seed, tg->n_model_inputs, in, &e)) fail_msg("%s", e.msg);
    *(float *)in[n_in - 2].data = lr;
    *(float *)in[n_in - 1].data = step;
}

void tr_test_expect_untrained(const struct tr_graph *g, const char *name) {
    char probe[TR_NAME_MAX + 16];
    snprintf(probe, sizeof probe, "%s.adamw_m", name);
    assert_int_equal(tr_graph_find(g, probe), -1);
    snprintf(probe, sizeof probe, "grad.%s", name);
    assert_int_equal(tr_graph_find(g, probe), -1);
}

struct tr_graph *tr_test_model_build(const struct tr_model_desc *m, const void *config, enum tr_task task,
                                     enum tr_dtype dt, int64_t B, int64_t T) {
    struct tr_build_opts o = {.task = task, .dtype = dt, .batch = B, .seq_len = T};
    struct tr_graph *g = NULL;
    struct tr_error e = {0};
    assert_int_equal(tr_graph_init(&g, &e), TR_OK);
    if (m->build(config, &o, g, &e) != TR_OK) fail_msg("%s build: %s", m->name, e.msg);
    return g;
}

void tr_test_build_refused(const struct tr_model_desc *m, const void *config, enum tr_task task,
                           const char *const *want, int n_want) {
    struct tr_error e = {0};
    struct tr_build_opts o = {.task = task, .dtype = TR_DTYPE_F32, .batch = 2, .seq_len = 8};
    struct tr_graph *g = NULL;
    assert_int_equal(tr_graph_init(&g, &e), TR_OK);
    int rc = m->build(config, &o, g, &e);
    tr_graph_free(g);
    if (rc == TR_OK) fail_msg("built, expected a refusal naming %s", want[0]);
    for (int i = 0; i < n_want; i++)
        if (!strstr(e.msg, want[i])) fail_msg("message '%s' lacks '%s'", e.msg, want[i]);
    print_message("refused: %s\n", e.msg);
}

struct tr_safetensors *tr_test_bert_batch(const char *io_path, struct tr_tensor in[3], const char *hint) {
    struct tr_safetensors *io = NULL;
    struct tr_error e = {0};
    if (tr_safetensors_open(io_path, &io, &e)) fail_msg("%s%s", e.msg, hint);
    const char *names[3] = {"input_ids", "attention_mask", "token_type_ids"};
    for (int i = 0; i < 3; i++)
        if (tr_safetensors_get(io, names[i], &in[i], &e)) fail_msg("%s%s", e.msg, hint);
    return io;
}

void tr_test_bert_open(struct tr_test_bert *b, enum tr_dtype dt, const char *hint) {
    b->io = tr_test_bert_batch(TR_SOURCE_DIR "/tests/fixtures/bert_tiny_io.safetensors", b->in, hint);
    b->g = tr_test_model_build(&tr_model_bert, tr_test_preset(&tr_model_bert, "tiny"), TR_TASK_PREDICT, dt,
                               b->in[0].shape[0], b->in[0].shape[1]);
    struct tr_error e = {0};
    b->w = NULL;
    if (tr_weights_load(b->g, TR_SOURCE_DIR "/tests/fixtures/bert_tiny.safetensors", &b->w, &e))
        fail_msg("%s%s", e.msg, hint);
}

void tr_test_bert_close(struct tr_test_bert *b) {
    tr_weights_free(b->w);
    tr_graph_free(b->g);
    tr_safetensors_close(b->io);
}

double tr_test_io_rel_err(const struct tr_safetensors *io, const char *name, const struct tr_tensor *out,
                          const char *hint) {
    struct tr_tensor ref;
    struct tr_error e = {0};
    if (tr_safetensors_get(io, name, &ref, &e)) fail_msg("%s%s", e.msg, hint);
    assert_int_equal(tr_tensor_numel(&ref), tr_tensor_numel(out));
    double *r = tr_test_to_f64(&ref);
    double err = tr_test_rel_err(out, r);
    free(r);
    return err;
}

void tr_test_expect_bert_hf(const struct tr_safetensors *io, const struct tr_graph *g, const struct tr_tensor *out,
                            enum tr_dtype dt, const char *who, const char *hint) {
    double tol = tr_test_tol(dt);
    for (int i = 0; i < 3; i++) {
        const char *name = tr_graph_output_name(g, i);
        double err = tr_test_io_rel_err(io, name, &out[i], hint);
        print_message("%s %s %-17s rel err vs transformers %.3g (tolerance %.0e)\n", who, tr_dtype_name(dt), name, err,
                      tol);
        if (!(err < tol)) fail_msg("%s %s %s: relative error %.3g >= %.0e", who, tr_dtype_name(dt), name, err, tol);
    }
}

void tr_test_report_init(struct tr_bench_report *rep, const char *task) {
    memset(rep, 0, sizeof *rep);
    snprintf(rep->model, sizeof rep->model, "bert");
    snprintf(rep->preset, sizeof rep->preset, "tiny");
    snprintf(rep->task, sizeof rep->task, "%s", task);
    snprintf(rep->device, sizeof rep->device, "cpu");
    snprintf(rep->dtype, sizeof rep->dtype, "f32");
    snprintf(rep->math, sizeof rep->math, "f32");
    rep->batch = 8, rep->seq_len = 128, rep->steps = 20, rep->warmup = 2;
    snprintf(rep->cpu.model, sizeof rep->cpu.model, "AMD EPYC 9B14");
    rep->cpu.isa = rep->cpu.native = TR_CPU_ISA_AVX512;
    rep->cpu.bf16_native = 1;
    snprintf(rep->cpu.onednn_isa, sizeof rep->cpu.onednn_isa, "avx512_core_bf16");
    rep->cpu.threads = rep->threads = 2;
    snprintf(rep->omp_wait, sizeof rep->omp_wait, "passive");
    snprintf(rep->omp_wait_by, sizeof rep->omp_wait_by, "trident");
}

struct tr_bench_row *tr_test_report_row(struct tr_bench_report *rep, const char *label) {
    struct tr_bench_row *r = &rep->rows[rep->n_rows++];
    snprintf(r->label, sizeof r->label, "%s", label);
    r->ok = 1;
    r->agrees = 1;
    r->is_reference = rep->n_rows == 1;
    return r;
}

struct tr_graph *tr_test_graph_new(void) {
    struct tr_graph *g = NULL;
    struct tr_error e = {0};
    if (tr_graph_init(&g, &e) != TR_OK) fail_msg("graph init: %s", e.msg);
    assert_non_null(g);
    return g;
}

#define M TR_TEST_SMALL_M
#define K TR_TEST_SMALL_K
#define N TR_TEST_SMALL_N

void tr_test_small_build(struct tr_test_small *s, int with_x2) {
    struct tr_error err = {0};
    s->g = tr_test_graph_new();
    s->with_x2 = with_x2;
    for (int i = 0; i < K * N; i++) s->w[i] = (float)(0.3 * sin(0.7 * i + 0.1));
    for (int i = 0; i < N; i++) s->b[i] = (float)(0.2 * cos(1.3 * i) + 0.05);
    const int64_t xs[] = {M, K}, ws[] = {K, N}, bs[] = {N}, x2s[] = {M, N};
    int x = tr_input(s->g, "x", TR_DTYPE_F32, 2, xs);
    int x2 = with_x2 ? tr_input(s->g, "x2", TR_DTYPE_F32, 2, x2s) : -1;
    int w = tr_param(s->g, "w", TR_DTYPE_F32, 2, ws, 0.0f, 0.02f);
    int b = tr_const(s->g, "b", TR_DTYPE_F32, 1, bs, s->b);
    int y = tr_gelu(s->g, tr_add(s->g, tr_matmul(s->g, x, w, 0, 0), b), 0);
    if (with_x2) y = tr_softmax(s->g, tr_mul(s->g, y, x2));
    tr_graph_set_output(s->g, y, "out");
    if (tr_graph_status(s->g, &err) != TR_OK) fail_msg("graph: %s", err.msg);
    assert_int_equal(tr_graph_bind_param(s->g, w, s->w, &err), TR_OK);
}

void tr_test_small_tensors(const struct tr_test_small *s, struct tr_tensor *in, struct tr_tensor *out) {
    const int64_t xs[] = {M, K}, os[] = {M, N};
    in[0] = tr_test_tensor(TR_DTYPE_F32, 2, xs);
    tr_test_randn(&in[0], 42, 1.0);
    if (s->with_x2) {
        in[1] = tr_test_tensor(TR_DTYPE_F32, 2, os);
        tr_test_randn(&in[1], 43, 1.0);
    }
    *out = tr_test_tensor(TR_DTYPE_F32, 2, os);
}

void tr_test_small_check(const struct tr_test_small *s, const struct tr_tensor *in, const struct tr_tensor *out) {
    double ref[M * N];
    const float *xv = in[0].data, *x2 = s->with_x2 ? in[1].data : NULL;
    for (int i = 0; i < M; i++) {
        double *r = ref + i * N, mx = -INFINITY, sum = 0.0;
        for (int j = 0; j < N; j++) {
            double acc = s->b[j];
            for (int k = 0; k < K; k++) acc += (double)xv[i * K + k] * s->w[k * N + j];
            r[j] = 0.5 * acc * (1.0 + erf(acc / sqrt(2.0)));
            if (x2) mx = fmax(mx, r[j] *= x2[i * N + j]);
        }
        if (!x2) continue;
        for (int j = 0; j < N; j++) sum += (r[j] = exp(r[j] - mx));
        for (int j = 0; j < N; j++) r[j] /= sum;
    }
    tr_assert_close(x2 ? "softmax(gelu(x.w+b)*x2) through the plugin" : "matmul+add+gelu through the plugin", out,
                    ref, tr_test_tol(TR_DTYPE_F32));
}

#undef M
#undef K
#undef N
