#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "decoderutil.h"
#include "trident/bench.h"
#include "trident/config.h"
#include "trident/graph.h"
#include "trident/safetensors.h"
#include "trident/weights.h"

const struct tr_decoder_config *tr_test_llm_preset(const struct tr_model_desc *m, const char *name) {
    return tr_test_preset(m, name);
}

struct tr_graph *tr_test_llm_build(const struct tr_model_desc *m, const struct tr_decoder_config *c,
                                   enum tr_dtype dt, int64_t B, int64_t T) {
    return tr_test_model_build(m, c, TR_TASK_PREDICT, dt, B, T);
}

void tr_test_llm_check_size(const struct tr_model_desc *m, const char *preset, int64_t expected) {
    char ini[256];
    snprintf(ini, sizeof ini, "[run]\nmodel = %s\npreset = %s\ndtype = bf16\nbatch = 8\nseq_len = 128\n", m->name,
             preset);
    static struct tr_config cfg;
    struct tr_error e = {0};
    if (tr_config_load_string(ini, "size.ini", &cfg, &e)) fail_msg("%s", e.msg);
    const struct tr_model_desc *models[2] = {m, NULL};
    struct tr_task_graph tg;
    if (tr_task_graph_build(&cfg, models, &tg, &e)) fail_msg("%s %s: %s", m->name, preset, e.msg);
    int64_t n = tr_test_param_count(tg.graph);
    print_message("%s %s: %lld parameters, %.2f GB in bf16, %d nodes\n", m->name, preset, (long long)n,
                  (double)tr_graph_param_bytes(tg.graph) / 1e9, tr_graph_n_nodes(tg.graph));
    if (n != expected) fail_msg("%s %s: %lld parameters, expected %lld", m->name, preset, (long long)n, (long long)expected);
    assert_int_equal(tr_decoder_param_count(tg.config), expected);
    assert_int_equal(tr_graph_param_bytes(tg.graph), 2 * (uint64_t)expected);
    for (int i = 0; i < tr_graph_n_params(tg.graph); i++) /* nothing bound: no weights made */
        assert_null(tr_node_data(tg.graph, tr_graph_param(tg.graph, i)));
    tr_task_graph_free(&tg);
}

void tr_test_llm_names_match(const struct tr_test_llm *t) {
    struct tr_graph *g = tr_test_llm_build(t->model, tr_test_llm_preset(t->model, "tiny"), TR_DTYPE_F32, 2, 16);
    struct tr_safetensors *st = NULL, *io = NULL;
    struct tr_error e = {0};
    if (tr_safetensors_open(t->weights, &st, &e)) fail_msg("%s%s", e.msg, t->hint);
    if (tr_safetensors_open(t->io, &io, &e)) fail_msg("%s%s", e.msg, t->hint);
    for (int i = 0; i < tr_graph_n_params(g); i++) {
        int id = tr_graph_param(g, i);
        struct tr_tensor s, want = tr_node_tensor(g, id);
        if (tr_safetensors_get(st, tr_node_name(g, id), &s, &e)) fail_msg("%s%s", e.msg, t->hint);
        assert_int_equal(s.ndim, want.ndim);
        for (int d = 0; d < s.ndim; d++) assert_int_equal(s.shape[d], want.shape[d]);
    }
    for (int i = 0; i < tr_safetensors_count(st); i++)
        if (tr_graph_find(g, tr_safetensors_name(st, i)) < 0)
            fail_msg("state_dict entry '%s' is not a parameter of the %s graph", tr_safetensors_name(st, i),
                     t->model->name);
    assert_int_equal(tr_safetensors_count(st), tr_graph_n_params(g));
    struct tr_tensor pc;
    assert_int_equal(tr_safetensors_get(io, "param_count", &pc, &e), TR_OK);
    assert_int_equal(tr_test_param_count(g), ((int64_t *)pc.data)[0]);
    assert_int_equal(tr_decoder_param_count(tr_test_llm_preset(t->model, "tiny")), ((int64_t *)pc.data)[0]);
    tr_safetensors_close(st);
    tr_safetensors_close(io);
    tr_graph_free(g);
}

double tr_test_llm_kept_rel_diff(const struct tr_tensor *a, const struct tr_tensor *b, const struct tr_tensor *keep) {
    const int64_t B = a->shape[0], T = a->shape[1], V = a->shape[2];
    const int32_t *k = keep->data;
    double num = 0, den = 0;
    for (int64_t bt = 0; bt < B * T; bt++) {
        if (!k[bt]) continue;
        for (int64_t v = 0; v < V; v++) {
            double x = tr_tensor_get_f64(a, bt * V + v), y = tr_tensor_get_f64(b, bt * V + v);
            if (!isfinite(x)) return INFINITY;
            num += (x - y) * (x - y), den += y * y;
        }
    }
    return den > 0 ? sqrt(num / den) : INFINITY;
}

static void io_get(const struct tr_test_llm *t, struct tr_safetensors *io, const char *name, struct tr_tensor *out) {
    struct tr_error e = {0};
    if (tr_safetensors_get(io, name, out, &e)) fail_msg("%s%s", e.msg, t->hint);
}

/* Open the fixture's io file and read its batch: in[0..2] = input_ids, position_ids,
 * attention_mask (the graph's inputs, in order). */
static struct tr_safetensors *io_open_batch(const struct tr_test_llm *t, struct tr_tensor in[3]) {
    struct tr_safetensors *io = NULL;
    struct tr_error e = {0};
    if (tr_safetensors_open(t->io, &io, &e)) fail_msg("%s%s", e.msg, t->hint);
    io_get(t, io, "input_ids", &in[0]);
    io_get(t, io, "position_ids", &in[1]);
    io_get(t, io, "attention_mask", &in[2]);
    return io;
}

double tr_test_llm_predict_vs_hf(const struct tr_test_llm *t, const struct tr_decoder_config *c, enum tr_dtype dt,
                                 const char *ref_name) {
    return tr_test_llm_predict_vs(t, c, dt, t->weights, NULL, ref_name);
}

double tr_test_llm_predict_vs(const struct tr_test_llm *t, const struct tr_decoder_config *c, enum tr_dtype dt,
                              const char *weights, const char *ref_path, const char *ref_name) {
    struct tr_error e = {0};
    struct tr_tensor in[3], keep, ref;
    struct tr_safetensors *io = io_open_batch(t, in), *rf = NULL;
    io_get(t, io, "keep", &keep);
    if (ref_path && tr_safetensors_open(ref_path, &rf, &e)) fail_msg("%s%s", e.msg, t->hint);
    io_get(t, rf ? rf : io, ref_name, &ref);
    struct tr_graph *g = tr_test_llm_build(t->model, c, dt, in[0].shape[0], in[0].shape[1]);
    struct tr_weights *w = NULL;
    if (tr_weights_load(g, weights, &w, &e)) fail_msg("%s%s", e.msg, t->hint);
    const double tol = tr_test_tol(dt);
    double worst = 0;
    for (int b = 0; b < TR_TEST_N_BACKENDS; b++) {
        struct tr_tensor out[1];
        assert_int_equal(tr_graph_n_outputs(g), 1);
        tr_test_run_backend(&tr_test_backends[b], NULL, g, in, 1, out, NULL);
        int64_t n = tr_tensor_numel(&out[0]);
        assert_int_equal(n, tr_tensor_numel(&ref));
        for (int64_t i = 0; i < n; i++) /* pad rows too: the finite mask keeps them finite */
            if (!isfinite(tr_tensor_get_f64(&out[0], i)))
                fail_msg("%s %s on %s: logit %lld is not finite", t->model->name, tr_dtype_name(dt),
                         tr_test_backends[b].label, (long long)i);
        double err = tr_test_llm_kept_rel_diff(&out[0], &ref, &keep);
        print_message("%s tiny %s %-22s logits vs transformers' %s: rel err %.3g (tolerance %.0e)\n", t->model->name,
                      tr_dtype_name(dt), tr_test_backends[b].label, ref_name, err, tol);
        tr_test_tensor_free(&out[0]);
        if (!(err < tol))
            fail_msg("%s %s on %s: logits differ from transformers' %s by %.3g >= %.0e", t->model->name,
                     tr_dtype_name(dt), tr_test_backends[b].label, ref_name, err, tol);
        worst = fmax(worst, err);
    }
    tr_weights_free(w);
    tr_graph_free(g);
    tr_safetensors_close(io);
    tr_safetensors_close(rf);
    return worst;
}

void tr_test_llm_build_fails(const struct tr_model_desc *m, const struct tr_decoder_config *c, enum tr_task task,
                             enum tr_dtype dt, int64_t T, int status, const char *a, const char *b) {
    struct tr_build_opts o = {.task = task, .dtype = dt, .batch = 1, .seq_len = T};
    struct tr_graph *g = NULL;
    struct tr_error e = {0};
    assert_int_equal(tr_graph_init(&g, &e), TR_OK);
    int rc = m->build(c, &o, g, &e);
    tr_graph_free(g);
    if (rc != status) fail_msg("%s build: status %d, expected %d (%s)", m->name, rc, status, e.msg);
    if (!strstr(e.msg, a) || (b && !strstr(e.msg, b))) fail_msg("%s", e.msg);
}

void tr_test_llm_expect_init(const struct tr_graph *g, const char *name, float mean) {
    int id = tr_graph_find(g, name);
    if (id < 0) fail_msg("no parameter '%s'", name);
    const struct tr_attrs *a = tr_node_attrs(g, id);
    if (!(a->floats[0] == mean && a->floats[1] == 0.02f))
        fail_msg("%s: drawn from normal(%g, %g), expected normal(%g, 0.02)", name, a->floats[0], a->floats[1], mean);
}

void tr_test_llm_unknown_preset(const struct tr_model_desc *m) {
    struct tr_error e = {0};
    static char config[4096];
    assert_true(m->config_size <= sizeof config);
    assert_int_equal(tr_model_resolve(m, "13b", NULL, config, &e), TR_ERR_NOT_FOUND);
    if (!strstr(e.msg, "13b")) fail_msg("error does not name the preset: %s", e.msg);
    for (int i = 0; i < m->n_presets; i++)
        if (!strstr(e.msg, m->presets[i].name)) fail_msg("error does not list preset '%s': %s", m->presets[i].name, e.msg);
    /* And through an INI, as a user meets it. */
    static struct tr_config cfg;
    char ini[160];
    snprintf(ini, sizeof ini, "[run]\nmodel = %s\npreset = 13b\n", m->name);
    assert_int_equal(tr_config_load_string(ini, "bad.ini", &cfg, &e), TR_OK);
    const struct tr_model_desc *models[2] = {m, NULL};
    struct tr_task_graph tg;
    assert_int_equal(tr_task_graph_build(&cfg, models, &tg, &e), TR_ERR_NOT_FOUND);
    if (!strstr(e.msg, "bad.ini") || !strstr(e.msg, "tiny") || !strstr(e.msg, "7b"))
        fail_msg("error lacks the file or the presets: %s", e.msg);
}

static void expect_same(const struct tr_decoder_config *a, const struct tr_decoder_config *b, const char *what) {
#define SAME_(f)                                                                                                     \
    if (a->f != b->f) fail_msg("%s: %s differs: %g vs %g", what, #f, (double)a->f, (double)b->f)
    SAME_(family); SAME_(vocab_size); SAME_(hidden_size); SAME_(intermediate_size); SAME_(num_hidden_layers);
    SAME_(num_attention_heads); SAME_(num_key_value_heads); SAME_(max_position_embeddings); SAME_(sliding_window);
    SAME_(rms_norm_eps); SAME_(rope_theta); SAME_(tie_word_embeddings);
#undef SAME_
    if (tr_decoder_head_dim(a) != tr_decoder_head_dim(b)) fail_msg("%s: head_dim differs", what);
    if (strcmp(a->hidden_act, b->hidden_act) != 0)
        fail_msg("%s: hidden_act '%s' vs '%s'", what, a->hidden_act, b->hidden_act);
}

void tr_test_llm_hf_config_matches(const struct tr_model_desc *m, const char *json, const char *preset) {
    const struct tr_decoder_config *want = tr_test_llm_preset(m, preset);
    struct tr_decoder_config c = *tr_test_llm_preset(m, "tiny"), got;
    struct tr_error e = {0};
    if (tr_decoder_read_hf_config(json, &c, &e) || tr_decoder_resolve(&c, &got, &e)) fail_msg("%s: %s", json, e.msg);
    char what[128];
    snprintf(what, sizeof what, "%s preset %s vs %s", m->name, preset, json);
    expect_same(&got, want, what);
    /* Through [model] of an INI, the graph has the published model's size. */
    static struct tr_config cfg;
    char ini[256];
    snprintf(ini, sizeof ini, "[run]\nmodel = %s\npreset = tiny\ndtype = bf16\nseq_len = 8\n[model]\nhf_config = %s\n",
             m->name, json);
    if (tr_config_load_string(ini, "hf.ini", &cfg, &e)) fail_msg("%s", e.msg);
    const struct tr_model_desc *models[2] = {m, NULL};
    struct tr_task_graph tg;
    if (tr_task_graph_build(&cfg, models, &tg, &e)) fail_msg("%s", e.msg);
    assert_int_equal(tr_test_param_count(tg.graph), tr_decoder_param_count(want));
    tr_task_graph_free(&tg);
}

/* Columns [t0, t1) of a host [B,T] tensor, or a [B,T,...] one, as a new tensor. */
static struct tr_tensor cols(const struct tr_tensor *x, int64_t t0, int64_t t1) {
    int64_t shape[TR_MAX_DIMS];
    memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    shape[1] = t1 - t0;
    struct tr_tensor y = tr_test_tensor((enum tr_dtype)x->dtype, x->ndim, shape);
    const size_t row = tr_tensor_nbytes(x) / (size_t)(x->shape[0] * x->shape[1]);
    for (int64_t b = 0; b < x->shape[0]; b++)
        memcpy((char *)y.data + (size_t)(b * (t1 - t0)) * row, (const char *)x->data + (size_t)(b * x->shape[1] + t0) * row,
               (size_t)(t1 - t0) * row);
    return y;
}

static struct tr_graph *build_pass(const struct tr_test_llm *t, const struct tr_decoder_config *c,
                                   const struct tr_decoder_pass *p) {
    struct tr_graph *g = NULL;
    struct tr_error e = {0};
    assert_int_equal(tr_graph_init(&g, &e), TR_OK);
    if (tr_decoder_build_pass(c, p, g, NULL, &e)) fail_msg("%s pass: %s", t->model->name, e.msg);
    return g;
}

void tr_test_llm_kv_cache(const struct tr_test_llm *t, const struct tr_decoder_config *c) {
    struct tr_error e = {0};
    struct tr_tensor in[3], keep;
    struct tr_safetensors *io = io_open_batch(t, in);
    io_get(t, io, "keep", &keep);
    const int64_t B = in[0].shape[0], T = in[0].shape[1], Tp = T - 6, L = c->num_hidden_layers;
    const int64_t Hk = c->num_key_value_heads, dh = tr_decoder_head_dim(c), V = c->vocab_size;

    /* One pass over all T: the reference. */
    struct tr_graph *full = tr_test_llm_build(t->model, c, TR_DTYPE_F32, B, T);
    struct tr_weights *w = NULL;
    if (tr_weights_load(full, t->weights, &w, &e)) fail_msg("%s%s", e.msg, t->hint);
    struct tr_tensor ref;
    tr_test_run_backend(&tr_test_backends[0], NULL, full, in, 1, &ref, NULL);

    /* Prefill Tp tokens, keeping each layer's keys and values. */
    struct tr_decoder_pass p = {.dtype = TR_DTYPE_F32, .batch = B, .seq_len = Tp, .present = 1};
    struct tr_graph *pre = build_pass(t, c, &p);
    struct tr_weights *wp = NULL;
    if (tr_weights_load(pre, t->weights, &wp, &e)) fail_msg("%s", e.msg);
    struct tr_tensor pin[3] = {cols(&in[0], 0, Tp), cols(&in[1], 0, Tp), cols(&in[2], 0, Tp)};
    int n_pre = tr_graph_n_outputs(pre);
    assert_int_equal(n_pre, 1 + 2 * L);
    struct tr_tensor *pout = calloc((size_t)n_pre, sizeof *pout);
    tr_test_run_backend(&tr_test_backends[0], NULL, pre, pin, 1, pout, NULL);
    struct tr_tensor ref_pre = cols(&ref, 0, Tp), keep_pre = cols(&keep, 0, Tp);
    double err = tr_test_llm_kept_rel_diff(&pout[0], &ref_pre, &keep_pre);
    print_message("%s kv cache: prefill of %lld tokens vs one pass: %.3g\n", t->model->name, (long long)Tp, err);
    assert_true(err < 1e-5);

    /* The remaining T - Tp tokens against that cache (causality and window by the op). */
    p = (struct tr_decoder_pass){.dtype = TR_DTYPE_F32, .batch = B, .seq_len = T - Tp, .past_len = Tp};
    struct tr_graph *step = build_pass(t, c, &p);
    struct tr_weights *ws = NULL;
    if (tr_weights_load(step, t->weights, &ws, &e)) fail_msg("%s", e.msg);
    assert_int_equal(tr_graph_n_inputs(step), 3 + 2 * L);
    struct tr_tensor *sin = calloc((size_t)(3 + 2 * L), sizeof *sin);
    sin[0] = cols(&in[0], Tp, T), sin[1] = cols(&in[1], Tp, T), sin[2] = in[2];
    for (int64_t i = 0; i < 2 * L; i++) sin[3 + i] = pout[1 + i];
    struct tr_tensor sout;
    tr_test_run_backend(&tr_test_backends[0], NULL, step, sin, 1, &sout, NULL);
    struct tr_tensor ref_step = cols(&ref, Tp, T), keep_step = cols(&keep, Tp, T);
    err = tr_test_llm_kept_rel_diff(&sout, &ref_step, &keep_step);
    print_message("%s kv cache: %lld tokens after a cache of %lld vs one pass: %.3g\n", t->model->name,
                  (long long)(T - Tp), (long long)Tp, err);
    if (!(err < 1e-5)) fail_msg("%s: decoding against the cache differs from one pass by %.3g", t->model->name, err);

    /* One token (index Tp) against a cache of P = T - 1 slots of which Tp are written and
     * the rest garbage: the full mask hides the free slots and applies the window. */
    const int64_t P = T - 1;
    p = (struct tr_decoder_pass){.dtype = TR_DTYPE_F32, .batch = B, .seq_len = 1, .past_len = P, .full_mask = 1,
                                 .last_logits = 1};
    struct tr_graph *dec = build_pass(t, c, &p);
    struct tr_weights *wd = NULL;
    if (tr_weights_load(dec, t->weights, &wd, &e)) fail_msg("%s", e.msg);
    struct tr_tensor *din = calloc((size_t)(3 + 2 * L), sizeof *din);
    din[0] = cols(&in[0], Tp, Tp + 1), din[1] = cols(&in[1], Tp, Tp + 1);
    const int64_t ms[3] = {B, 1, P + 1};
    din[2] = tr_test_tensor(TR_DTYPE_F32, 3, ms);
    const float *pad_mask = in[2].data;
    for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j <= P; j++) {
            int64_t idx = j == P ? Tp : j; /* the new key sits in the last slot */
            int seen = (j < Tp || j == P) && pad_mask[b * T + idx] != 0.0f &&
                       (c->sliding_window == 0 || idx > Tp - c->sliding_window);
            ((float *)din[2].data)[b * (P + 1) + j] = seen ? 1.0f : 0.0f;
        }
    const int64_t cs[4] = {B, Hk, P, dh};
    for (int64_t i = 0; i < 2 * L; i++) {
        din[3 + i] = tr_test_tensor(TR_DTYPE_F32, 4, cs);
        tr_test_randn(&din[3 + i], 77 + (uint64_t)i, 30.0); /* loud garbage in the free slots */
        float *dst = din[3 + i].data;
        const float *src = pout[1 + i].data;
        for (int64_t bh = 0; bh < B * Hk; bh++)
            memcpy(dst + bh * P * dh, src + bh * Tp * dh, sizeof(float) * (size_t)(Tp * dh));
    }
    struct tr_tensor dout;
    tr_test_run_backend(&tr_test_backends[0], NULL, dec, din, 1, &dout, NULL);
    assert_int_equal(dout.ndim, 2);
    assert_int_equal(dout.shape[1], V);
    struct tr_tensor ref_one = cols(&ref, Tp, Tp + 1), keep_one = cols(&keep, Tp, Tp + 1);
    struct tr_tensor d3 = dout; /* [B,V] seen as [B,1,V] */
    d3.ndim = 3, d3.shape[1] = 1, d3.shape[2] = V;
    d3.strides[2] = 1, d3.strides[1] = V, d3.strides[0] = V;
    err = tr_test_llm_kept_rel_diff(&d3, &ref_one, &keep_one);
    print_message("%s kv cache: one token against a %lld-slot cache (full mask) vs one pass: %.3g\n", t->model->name,
                  (long long)P, err);
    if (!(err < 1e-5)) fail_msg("%s: a full-mask decode step differs from one pass by %.3g", t->model->name, err);

    tr_test_tensor_free(&dout);
    tr_test_tensor_free(&ref_one), tr_test_tensor_free(&keep_one);
    for (int64_t i = 0; i < 2 * L; i++) tr_test_tensor_free(&din[3 + i]);
    tr_test_tensor_free(&din[0]), tr_test_tensor_free(&din[1]), tr_test_tensor_free(&din[2]);
    free(din);
    tr_test_tensor_free(&sout), tr_test_tensor_free(&ref_step), tr_test_tensor_free(&keep_step);
    tr_test_tensor_free(&sin[0]), tr_test_tensor_free(&sin[1]);
    free(sin);
    tr_test_tensors_free(n_pre, pout);
    free(pout);
    tr_test_tensor_free(&ref_pre), tr_test_tensor_free(&keep_pre);
    tr_test_tensors_free(3, pin);
    tr_test_tensor_free(&ref);
    tr_weights_free(wd), tr_weights_free(ws), tr_weights_free(wp), tr_weights_free(w);
    tr_graph_free(dec), tr_graph_free(step), tr_graph_free(pre), tr_graph_free(full);
    tr_safetensors_close(io);
}

void tr_test_llm_make_inputs(const struct tr_model_desc *m) {
    const struct tr_decoder_config *c = tr_test_llm_preset(m, "tiny");
    const int64_t B = 5, T = 16;
    struct tr_graph *g = tr_test_llm_build(m, c, TR_DTYPE_F32, B, T);
    struct tr_build_opts o = {.task = TR_TASK_PREDICT, .dtype = TR_DTYPE_F32, .batch = B, .seq_len = T};
    assert_int_equal(tr_graph_n_inputs(g), 3);
    struct tr_tensor a[3], b[3], d[3];
    for (int i = 0; i < 3; i++) {
        struct tr_tensor s = tr_node_tensor(g, tr_graph_input(g, i));
        a[i] = tr_test_tensor((enum tr_dtype)s.dtype, s.ndim, s.shape);
        b[i] = tr_test_tensor((enum tr_dtype)s.dtype, s.ndim, s.shape);
        d[i] = tr_test_tensor((enum tr_dtype)s.dtype, s.ndim, s.shape);
        tr_test_poison(&a[i]), tr_test_poison(&b[i]), tr_test_poison(&d[i]);
    }
    struct tr_error e = {0};
    assert_int_equal(m->make_inputs(c, &o, 42, 3, a, &e), TR_OK);
    assert_int_equal(m->make_inputs(c, &o, 42, 3, b, &e), TR_OK);
    assert_int_equal(m->make_inputs(c, &o, 43, 3, d, &e), TR_OK);
    for (int i = 0; i < 3; i++) assert_memory_equal(a[i].data, b[i].data, tr_tensor_nbytes(&a[i]));
    assert_memory_not_equal(a[0].data, d[0].data, tr_tensor_nbytes(&a[0]));
    const int32_t *ids = a[0].data, *pos = a[1].data;
    const float *mask = a[2].data;
    const int64_t pads[5] = {0, 2, 4, 6, 0}; /* floor((b mod 4)·T/8) */
    for (int64_t bi = 0; bi < B; bi++) {
        assert_int_equal(tr_decoder_pad_len(c, bi, T), pads[bi]);
        for (int64_t t = 0; t < T; t++) {
            int64_t i = bi * T + t;
            if (t < pads[bi]) {
                assert_int_equal(ids[i], 0);
                assert_int_equal(pos[i], 1);
                assert_true(mask[i] == 0.0f);
            } else {
                assert_true(ids[i] >= 1 && ids[i] < c->vocab_size);
                assert_int_equal(pos[i], t - pads[bi]);
                assert_true(mask[i] == 1.0f);
            }
        }
    }
    struct tr_tensor swapped[3] = {a[1], a[2], a[0]};
    assert_int_equal(m->make_inputs(c, &o, 42, 3, swapped, &e), TR_ERR_SHAPE);
    assert_non_null(strstr(e.msg, "position_ids"));
    for (int i = 0; i < 3; i++) tr_test_tensor_free(&a[i]), tr_test_tensor_free(&b[i]), tr_test_tensor_free(&d[i]);
    tr_graph_free(g);
}

/* Index of the largest of n values of row r of a [rows, n] tensor. */
static int64_t argmax_row(const struct tr_tensor *x, int64_t r, int64_t n) {
    int64_t best = 0;
    double bv = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        double v = tr_tensor_get_f64(x, r * n + i);
        if (v > bv) bv = v, best = i;
    }
    return best;
}

/* ‖a − ref[:, s, :]‖ / ‖ref[:, s, :]‖ for a [B,V] and ref [B,NEW,V]. */
static double step_rel_diff(const struct tr_tensor *a, const struct tr_tensor *ref, int64_t s) {
    const int64_t B = ref->shape[0], NEW = ref->shape[1], V = ref->shape[2];
    const float *r = ref->data;
    double num = 0, den = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t v = 0; v < V; v++) {
            double x = tr_tensor_get_f64(a, b * V + v), y = r[(b * NEW + s) * V + v];
            if (!isfinite(x)) return INFINITY;
            num += (x - y) * (x - y), den += y * y;
        }
    return sqrt(num / den);
}

void tr_test_llm_greedy_vs_hf(const struct tr_test_llm *t, const struct tr_decoder_config *c, enum tr_dtype dt,
                              const struct tr_test_backend *be) {
    struct tr_error e = {0};
    struct tr_tensor in[3], gen, glog;
    struct tr_safetensors *io = io_open_batch(t, in);
    io_get(t, io, "generated", &gen);
    io_get(t, io, "generated_logits", &glog);
    const int64_t B = in[0].shape[0], T = in[0].shape[1], NEW = gen.shape[1], P = T + NEW - 2;
    const int64_t L = c->num_hidden_layers, Hk = c->num_key_value_heads, dh = tr_decoder_head_dim(c);
    const int64_t V = c->vocab_size, W = c->sliding_window;
    const size_t esz = tr_dtype_size(dt);
    const double tol = tr_test_tol(dt);
    const int32_t *want = gen.data, *pos0 = in[1].data;
    const float *pad_mask = in[2].data;
    double worst = 0;

    struct tr_decoder_pass p = {.dtype = dt, .batch = B, .seq_len = T, .present = 1, .last_logits = 1};
    struct tr_graph *pre = build_pass(t, c, &p);
    p = (struct tr_decoder_pass){.dtype = dt, .batch = B, .seq_len = 1, .past_len = P, .full_mask = 1,
                                 .present = 1, .last_logits = 1};
    struct tr_graph *dec = build_pass(t, c, &p);
    struct tr_weights *wp = NULL, *wd = NULL;
    if (tr_weights_load(pre, t->weights, &wp, &e) || tr_weights_load(dec, t->weights, &wd, &e))
        fail_msg("%s%s", e.msg, t->hint);
    const int n_out = 1 + 2 * (int)L, n_in = 3 + 2 * (int)L;
    struct tr_tensor *out = calloc((size_t)n_out, sizeof *out), *din = calloc((size_t)n_in, sizeof *din);
    assert_non_null(out), assert_non_null(din);

    /* The cache: garbage until written, so a slot the mask fails to hide shows. */
    const int64_t cs[4] = {B, Hk, P, dh}, b1[2] = {B, 1}, ms[3] = {B, 1, P + 1};
    for (int64_t i = 0; i < 2 * L; i++) {
        din[3 + i] = tr_test_tensor(dt, 4, cs);
        tr_test_randn(&din[3 + i], 99 + (uint64_t)i, 30.0);
    }
    din[0] = tr_test_tensor(TR_DTYPE_I32, 2, b1), din[1] = tr_test_tensor(TR_DTYPE_I32, 2, b1);
    din[2] = tr_test_tensor(TR_DTYPE_F32, 3, ms);

    int32_t tok[64];
    assert_true(B <= 64);
    for (int64_t s = 0; s < NEW; s++) {
        const int64_t cur = T + s - 1; /* index of the token fed at step s > 0 */
        int64_t n_new = s == 0 ? T : 1, slot = s == 0 ? 0 : cur;
        if (s == 0) {
            tr_test_run_backend(be, NULL, pre, in, 1, out, NULL);
        } else {
            int32_t *ids = din[0].data, *pos = din[1].data;
            float *mask = din[2].data;
            for (int64_t b = 0; b < B; b++) {
                ids[b] = tok[b];
                pos[b] = pos0[b * T + T - 1] + (int32_t)s;
                for (int64_t j = 0; j < P; j++) {
                    int seen = j < cur && !(j < T && pad_mask[b * T + j] == 0.0f) && (W == 0 || j > cur - W);
                    mask[b * (P + 1) + j] = seen ? 1.0f : 0.0f;
                }
                mask[b * (P + 1) + P] = 1.0f;
            }
            tr_test_run_backend(be, NULL, dec, din, 1, out, NULL);
        }
        /* This step's keys and values into their slots (the last step's are not needed). */
        for (int64_t i = 0; s + 1 < NEW && i < 2 * L; i++)
            for (int64_t bh = 0; bh < B * Hk; bh++)
                memcpy((char *)din[3 + i].data + (size_t)((bh * P + slot) * dh) * esz,
                       (const char *)out[1 + i].data + (size_t)(bh * n_new * dh) * esz, (size_t)(n_new * dh) * esz);
        double err = step_rel_diff(&out[0], &glog, s);
        worst = fmax(worst, err);
        if (!(err < tol))
            fail_msg("%s %s on %s: generate step %lld logits differ from transformers' by %.3g >= %.0e",
                     t->model->name, tr_dtype_name(dt), be->label, (long long)s, err, tol);
        for (int64_t b = 0; b < B; b++) {
            tok[b] = (int32_t)argmax_row(&out[0], b, V);
            if (tok[b] != want[b * NEW + s])
                fail_msg("%s %s on %s: sample %lld, new token %lld is %d, transformers' greedy generate gave %d",
                         t->model->name, tr_dtype_name(dt), be->label, (long long)b, (long long)s, tok[b],
                         want[b * NEW + s]);
        }
        tr_test_tensors_free(n_out, out);
    }
    print_message("%s tiny %s %-22s greedy generate: %lld tokens x %lld samples as transformers', logits within %.3g\n",
                  t->model->name, tr_dtype_name(dt), be->label, (long long)NEW, (long long)B, worst);
    tr_test_tensors_free(n_in, din);
    free(din), free(out);
    tr_weights_free(wp), tr_weights_free(wd);
    tr_graph_free(pre), tr_graph_free(dec);
    tr_safetensors_close(io);
}

void tr_test_llm_greedy_vs_hf_all(const struct tr_test_llm *t, const struct tr_decoder_config *c, enum tr_dtype dt) {
    for (int b = 0; b < TR_TEST_N_BACKENDS; b++) tr_test_llm_greedy_vs_hf(t, c, dt, &tr_test_backends[b]);
}
