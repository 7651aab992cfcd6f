/* Weights: from a seed (deterministic, keyed by name, as each PARAM's init says) and from
 * safetensors (conversion between float dtypes, and errors naming the tensor and the file). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "testutil.h"
#include "trident/graph.h"
#include "trident/rng.h"
#include "trident/safetensors.h"
#include "trident/weights.h"

static const int64_t shape_w[2] = {48, 40}, shape_b[1] = {40}, shape_g[1] = {300};

/* Three params, added in the given order (0: f32 w, 1: bias of dtype bdt, 2: gamma). */
static struct tr_graph *make_graph(const int order[3], enum tr_dtype dt) {
    struct tr_graph *g = NULL;
    assert_int_equal(tr_graph_init(&g, NULL), TR_OK);
    tr_graph_push_scope(g, "layer");
    for (int k = 0; k < 3; k++) {
        switch (order[k]) {
        case 0: tr_param(g, "dense.weight", dt, 2, shape_w, 0.0f, 0.02f); break;
        case 1: tr_param(g, "dense.bias", dt, 1, shape_b, 0.0f, 0.5f); break;
        default: tr_param(g, "norm.weight", dt, 1, shape_g, 1.0f, 0.02f); break;
        }
    }
    tr_graph_pop_scope(g);
    assert_int_equal(tr_graph_status(g, NULL), TR_OK);
    return g;
}

static struct tr_tensor bound(const struct tr_graph *g, const char *name) {
    int id = tr_graph_find(g, name);
    assert_true(id >= 0);
    struct tr_tensor t = tr_node_tensor(g, id);
    t.data = (void *)tr_node_data(g, id);
    assert_non_null(t.data);
    return t;
}

static const char *const names[3] = {"layer.dense.weight", "layer.dense.bias", "layer.norm.weight"};

static void test_seed_deterministic_and_order_free(void **state) {
    const int fwd[3] = {0, 1, 2}, rev[3] = {2, 1, 0};
    struct tr_graph *g1 = make_graph(fwd, TR_DTYPE_F32), *g2 = make_graph(rev, TR_DTYPE_F32),
                    *g3 = make_graph(fwd, TR_DTYPE_F32);
    struct tr_weights *w1, *w2, *w3;
    struct tr_error e = {0};
    assert_int_equal(tr_weights_from_seed(g1, 1234, &w1, &e), TR_OK);
    assert_int_equal(tr_weights_from_seed(g2, 1234, &w2, &e), TR_OK);
    assert_int_equal(tr_weights_from_seed(g3, 1235, &w3, &e), TR_OK);
    assert_int_equal(tr_weights_bytes(w1), (48 * 40 + 40 + 300) * 4);
    assert_int_equal(tr_weights_bytes(w1), tr_graph_param_bytes(g1));
    for (int i = 0; i < 3; i++) {
        struct tr_tensor a = bound(g1, names[i]), b = bound(g2, names[i]), c = bound(g3, names[i]);
        assert_memory_equal(a.data, b.data, tr_tensor_nbytes(&a));
        assert_memory_not_equal(a.data, c.data, tr_tensor_nbytes(&a));
        /* Element i is mean + std·normal(seed, hash(name), i). */
        const struct tr_attrs *at = tr_node_attrs(g1, tr_graph_find(g1, names[i]));
        for (int64_t k = 0; k < tr_tensor_numel(&a); k += 7) {
            double z = tr_rng_normal(1234, tr_hash_str(names[i]), (uint64_t)k);
            float want = (float)(at->floats[0] + at->floats[1] * z);
            assert_true(((float *)a.data)[k] == want);
        }
    }
    /* The statistics the inits ask for (1920 draws of std 0.02, 300 of mean 1). */
    struct tr_tensor w = bound(g1, names[0]), gm = bound(g1, names[2]);
    double m = 0, v = 0, mg = 0;
    int64_t n = tr_tensor_numel(&w);
    for (int64_t k = 0; k < n; k++) m += ((float *)w.data)[k];
    m /= (double)n;
    for (int64_t k = 0; k < n; k++) v += (((float *)w.data)[k] - m) * (((float *)w.data)[k] - m);
    for (int64_t k = 0; k < 300; k++) mg += ((float *)gm.data)[k] / 300.0;
    assert_true(fabs(m) < 0.003);
    assert_true(fabs(sqrt(v / (double)n) - 0.02) < 0.002);
    assert_true(fabs(mg - 1.0) < 0.01);
    tr_weights_free(w1);
    tr_weights_free(w2);
    tr_weights_free(w3);
    tr_graph_free(g1);
    tr_graph_free(g2);
    tr_graph_free(g3);
}

/* A tensor large enough to be drawn by several threads gives the same values. */
static void test_seed_large_tensor(void **state) {
    struct tr_graph *g = NULL;
    assert_int_equal(tr_graph_init(&g, NULL), TR_OK);
    const int64_t s[2] = {1201, 500};
    int id = tr_param(g, "big.weight", TR_DTYPE_BF16, 2, s, 0.5f, 2.0f);
    struct tr_weights *w;
    assert_int_equal(tr_weights_from_seed(g, 99, &w, NULL), TR_OK);
    const uint16_t *p = tr_node_data(g, id);
    uint64_t key = tr_hash_str("big.weight");
    for (int64_t i = 0; i < s[0] * s[1]; i++)
        if (p[i] != tr_f32_to_bf16((float)(0.5 + 2.0 * tr_rng_normal(99, key, (uint64_t)i))))
            fail_msg("big.weight[%lld] differs from the formula", (long long)i);
    tr_weights_free(w);
    tr_graph_free(g);
}

static void test_seed_bf16_is_rounded_f32(void **state) {
    const int fwd[3] = {0, 1, 2};
    struct tr_graph *gf = make_graph(fwd, TR_DTYPE_F32), *gb = make_graph(fwd, TR_DTYPE_BF16);
    struct tr_weights *wf, *wb;
    assert_int_equal(tr_weights_from_seed(gf, 7, &wf, NULL), TR_OK);
    assert_int_equal(tr_weights_from_seed(gb, 7, &wb, NULL), TR_OK);
    assert_int_equal(tr_weights_bytes(wb), (48 * 40 + 40 + 300) * 2);
    for (int i = 0; i < 3; i++) {
        struct tr_tensor f = bound(gf, names[i]), b = bound(gb, names[i]);
        for (int64_t k = 0; k < tr_tensor_numel(&f); k++)
            assert_int_equal(((uint16_t *)b.data)[k], tr_f32_to_bf16(((float *)f.data)[k]));
    }
    tr_weights_free(wf);
    tr_weights_free(wb);
    tr_graph_free(gf);
    tr_graph_free(gb);
}

/* Write the three tensors of make_graph in f32 (plus one the graph does not use), with
 * `skip` left out and `bad_shape` given a wrong shape (-1: none). */
static void write_file(int skip, int bad_shape, enum tr_dtype dt) {
    const int64_t wrong[1] = {41};
    const int64_t *shapes[3] = {shape_w, shape_b, shape_g};
    const int ndims[3] = {2, 1, 1};
    struct tr_tensor ts[4];
    const char *nm[4];
    int n = 0;
    for (int i = 0; i < 3; i++) {
        if (i == skip) continue;
        ts[n] = i == bad_shape ? tr_test_tensor(dt, 1, wrong) : tr_test_tensor(dt, ndims[i], shapes[i]);
        if (tr_dtype_is_float(dt)) tr_test_randn(&ts[n], 100 + (uint64_t)i, 1.0);
        else tr_test_randint(&ts[n], 100 + (uint64_t)i, 9);
        nm[n++] = names[i];
    }
    int64_t s1[1] = {3};
    ts[n] = tr_test_tensor(TR_DTYPE_I64, 1, s1);
    tr_test_randint(&ts[n], 5, 9);
    nm[n++] = "unused.step";
    if (skip < 0 && bad_shape < 0 && dt == TR_DTYPE_F32) {
        /* Values whose bf16 rounding is a tie: to even, down and up. */
        float *b = ts[1].data;
        b[0] = 1.00390625f;   /* 0x3f808000 -> 0x3f80 (even) */
        b[1] = 1.01171875f;   /* 0x3f818000 -> 0x3f82 (even) */
        b[2] = -1.0f;
    }
    struct tr_error e = {0};
    assert_int_equal(tr_safetensors_write(tr_test_file, n, nm, ts, &e), TR_OK);
    tr_test_tensors_free(n, ts);
}

static void test_load_f32_and_convert(void **state) {
    write_file(-1, -1, TR_DTYPE_F32);
    const int order[3] = {2, 0, 1};
    struct tr_graph *gf = make_graph(order, TR_DTYPE_F32), *gb = make_graph(order, TR_DTYPE_BF16),
                    *gh = make_graph(order, TR_DTYPE_F16);
    struct tr_weights *wf, *wb, *wh;
    struct tr_error e = {0};
    assert_int_equal(tr_weights_load(gf, tr_test_file, &wf, &e), TR_OK);
    assert_int_equal(tr_weights_load(gb, tr_test_file, &wb, &e), TR_OK);
    assert_int_equal(tr_weights_load(gh, tr_test_file, &wh, &e), TR_OK);
    assert_int_equal(tr_weights_bytes(wf), tr_graph_param_bytes(gf));
    assert_int_equal(tr_weights_bytes(wb), tr_graph_param_bytes(gb));
    struct tr_safetensors *st;
    assert_int_equal(tr_safetensors_open(tr_test_file, &st, &e), TR_OK);
    for (int i = 0; i < 3; i++) {
        struct tr_tensor src, f = bound(gf, names[i]), b = bound(gb, names[i]), h = bound(gh, names[i]);
        assert_int_equal(tr_safetensors_get(st, names[i], &src, &e), TR_OK);
        assert_memory_equal(f.data, src.data, tr_tensor_nbytes(&f));
        for (int64_t k = 0; k < tr_tensor_numel(&f); k++) {
            float x = ((float *)src.data)[k];
            assert_int_equal(((uint16_t *)b.data)[k], tr_f32_to_bf16(x));
            assert_int_equal(((uint16_t *)h.data)[k], tr_f32_to_f16(x));
        }
    }
    const uint16_t *bias = bound(gb, names[1]).data;
    assert_int_equal(bias[0], 0x3f80);
    assert_int_equal(bias[1], 0x3f82);
    assert_int_equal(bias[2], 0xbf80);
    tr_safetensors_close(st);
    tr_weights_free(wf);
    tr_weights_free(wb);
    tr_weights_free(wh);
    tr_graph_free(gf);
    tr_graph_free(gb);
    tr_graph_free(gh);
}

/* A checkpoint of another float dtype loads as torch's .to(dtype) makes it: a bf16 or f16
 * release into an f32 graph exactly, f64 rounded once, bf16 into f16 through f32. */
static void test_load_other_float_dtypes(void **state) {
    const int order[3] = {0, 1, 2};
    const enum tr_dtype files[3] = {TR_DTYPE_BF16, TR_DTYPE_F16, TR_DTYPE_F64};
    for (int fi = 0; fi < 3; fi++) {
        write_file(-1, -1, files[fi]);
        struct tr_graph *gf = make_graph(order, TR_DTYPE_F32), *gh = make_graph(order, TR_DTYPE_F16);
        struct tr_weights *wf, *wh;
        struct tr_error e = {0};
        if (tr_weights_load(gf, tr_test_file, &wf, &e)) fail_msg("%s into f32: %s", tr_dtype_name(files[fi]), e.msg);
        if (tr_weights_load(gh, tr_test_file, &wh, &e)) fail_msg("%s into f16: %s", tr_dtype_name(files[fi]), e.msg);
        struct tr_safetensors *st;
        assert_int_equal(tr_safetensors_open(tr_test_file, &st, &e), TR_OK);
        for (int i = 0; i < 3; i++) {
            struct tr_tensor src, f = bound(gf, names[i]), h = bound(gh, names[i]);
            assert_int_equal(tr_safetensors_get(st, names[i], &src, &e), TR_OK);
            for (int64_t k = 0; k < tr_tensor_numel(&f); k++) {
                const uint16_t *s16 = src.data;
                float x = files[fi] == TR_DTYPE_BF16  ? tr_bf16_to_f32(s16[k])
                          : files[fi] == TR_DTYPE_F16 ? tr_f16_to_f32(s16[k])
                                                      : (float)((const double *)src.data)[k];
                assert_true(x != 0.0f); /* random data, never zeros */
                assert_memory_equal(&((float *)f.data)[k], &x, sizeof x);
                assert_int_equal(((uint16_t *)h.data)[k], tr_f32_to_f16(x));
            }
        }
        tr_safetensors_close(st);
        tr_weights_free(wf);
        tr_weights_free(wh);
        tr_graph_free(gf);
        tr_graph_free(gh);
    }
}

/* A fresh PARAM the file lacks is made from the seed, bit for bit as tr_weights_from_seed
 * makes it (and named in the warning when the file holds other fresh ones, as a peft
 * adapter lacking some of the targets); a fresh one the file has is read; a plain one it
 * lacks is still an error. */
static void test_load_fresh(void **state) {
    write_file(1, -1, TR_DTYPE_F32);  /* the file lacks layer.dense.bias */
    const int fwd[3] = {0, 1, 2};
    struct tr_error e = {0};
    struct tr_weights *w, *ws;
    struct tr_graph *g = make_graph(fwd, TR_DTYPE_F32), *gs = make_graph(fwd, TR_DTYPE_F32);
    assert_int_equal(tr_weights_load_seeded(g, tr_test_file, 7, &w, &e), TR_ERR_NOT_FOUND);
    tr_assert_msg_has(&e, "layer.dense.bias");
    assert_int_equal(tr_param_set_fresh(g, tr_graph_find(g, names[1])), TR_OK);
    assert_int_equal(tr_param_set_fresh(g, tr_graph_find(g, names[0])), TR_OK);
    assert_true(tr_param_is_fresh(g, tr_graph_find(g, names[1])));
    assert_false(tr_param_is_fresh(g, tr_graph_find(g, names[2])));
    assert_int_equal(tr_weights_load_seeded(g, tr_test_file, 7, &w, &e), TR_OK);
    /* the file holds one fresh PARAM (an adapter of a peft file) and lacks the other: said */
    assert_int_equal(tr_weights_n_seeded(w), 1);
    assert_string_equal(tr_weights_seeded_name(w, 0), names[1]);
    {   /* holding none of them (a base model's file): made without a word */
        struct tr_graph *g1 = make_graph(fwd, TR_DTYPE_F32);
        struct tr_weights *w1;
        assert_int_equal(tr_param_set_fresh(g1, tr_graph_find(g1, names[1])), TR_OK);
        assert_int_equal(tr_weights_load_seeded(g1, tr_test_file, 7, &w1, &e), TR_OK);
        assert_int_equal(tr_weights_n_seeded(w1), 0);
        tr_weights_free(w1);
        tr_graph_free(g1);
    }
    assert_int_equal(tr_weights_from_seed(gs, 7, &ws, &e), TR_OK);
    struct tr_tensor b = bound(g, names[1]), bs = bound(gs, names[1]);
    assert_memory_equal(b.data, bs.data, tr_tensor_nbytes(&b));
    struct tr_safetensors *st;
    struct tr_tensor src, wt = bound(g, names[0]);
    assert_int_equal(tr_safetensors_open(tr_test_file, &st, &e), TR_OK);
    assert_int_equal(tr_safetensors_get(st, names[0], &src, &e), TR_OK);
    assert_memory_equal(wt.data, src.data, tr_tensor_nbytes(&wt));
    tr_safetensors_close(st);
    /* only a PARAM can be fresh */
    int x = tr_input(gs, "x", TR_DTYPE_F32, 1, shape_b);
    assert_int_equal(tr_param_set_fresh(gs, x), TR_ERR_INVALID);
    tr_weights_free(w);
    tr_weights_free(ws);
    tr_graph_free(g);
    tr_graph_free(gs);
}

static void expect_load_error(enum tr_dtype graph_dt, int status, const char *tensor);

/* make_graph's three params and a head of n_head (weight, bias) pairs the file never has:
 * a bert-base-cased checkpoint loaded into a classifier ("classifier.weight", ...). */
static struct tr_graph *make_headed_graph(int n_head) {
    const int fwd[3] = {0, 1, 2};
    struct tr_graph *g = make_graph(fwd, TR_DTYPE_F32);
    const int64_t sw[2] = {2, 40}, sb[1] = {2};
    for (int k = 0; k < n_head; k++) {
        if (n_head == 1) tr_graph_push_scope(g, "classifier");
        else tr_graph_push_scope(g, "head%d", k);
        tr_param(g, "weight", TR_DTYPE_F32, 2, sw, 0.0f, 0.02f);
        tr_param(g, "bias", TR_DTYPE_F32, 1, sb, 0.0f, 0.5f);
        tr_graph_pop_scope(g);
    }
    assert_int_equal(tr_graph_status(g, NULL), TR_OK);
    return g;
}

/* What tr_weights_warn_seeded writes, as a string. */
static char *warning_of(const struct tr_weights *w, const char *path, uint64_t seed, int *named) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    *named = tr_weights_warn_seeded(w, path, seed, f);
    fclose(f);
    return buf;
}

/* [run] missing = seed: what the file lacks is made from the seed, byte for byte as a
 * fully seeded run makes it, and named in one warning; without it, an error naming the
 * tensor and the file; a wrong shape or dtype is refused either way. */
static void test_load_missing_seed(void **state) {
    write_file(-1, -1, TR_DTYPE_F32);  /* the three layer.* tensors, no classifier */
    struct tr_error e = {0};
    struct tr_weights *w = (void *)1, *ws;
    struct tr_graph *g = make_headed_graph(1), *gs = make_headed_graph(1);
    const struct tr_weights_load_opts strict = {.seed = 1234, .missing_seed = 0};
    const struct tr_weights_load_opts lenient = {.seed = 1234, .missing_seed = 1};
    assert_int_equal(tr_weights_load_opts(g, tr_test_file, &strict, &w, &e), TR_ERR_NOT_FOUND);
    assert_null(w);
    tr_assert_msg_has(&e, "classifier.weight");
    tr_assert_msg_has(&e, tr_test_file);
    tr_assert_msg_has(&e, "missing = seed");
    assert_int_equal(tr_weights_load_opts(g, tr_test_file, NULL, &w, &e), TR_ERR_NOT_FOUND);

    assert_int_equal(tr_weights_load_opts(g, tr_test_file, &lenient, &w, &e), TR_OK);
    assert_int_equal(tr_weights_from_seed(gs, 1234, &ws, &e), TR_OK);
    assert_int_equal(tr_weights_n_seeded(w), 2);
    assert_string_equal(tr_weights_seeded_name(w, 0), "classifier.weight");
    assert_string_equal(tr_weights_seeded_name(w, 1), "classifier.bias");
    assert_null(tr_weights_seeded_name(w, 2));
    assert_int_equal(tr_weights_n_seeded(ws), 0);
    assert_int_equal(tr_weights_bytes(w), tr_graph_param_bytes(g));
    const char *head[2] = {"classifier.weight", "classifier.bias"};
    for (int i = 0; i < 2; i++) {
        struct tr_tensor a = bound(g, head[i]), b = bound(gs, head[i]);
        assert_memory_equal(a.data, b.data, tr_tensor_nbytes(&a));
    }
    struct tr_safetensors *st;
    assert_int_equal(tr_safetensors_open(tr_test_file, &st, &e), TR_OK);
    for (int i = 0; i < 3; i++) {
        struct tr_tensor src, t = bound(g, names[i]);
        assert_int_equal(tr_safetensors_get(st, names[i], &src, &e), TR_OK);
        assert_memory_equal(t.data, src.data, tr_tensor_nbytes(&t));
    }
    tr_safetensors_close(st);
    /* The names outlive the graph. */
    tr_graph_free(g);
    int named;
    char *msg = warning_of(w, "W.safetensors", 1234, &named);
    assert_int_equal(named, 2);
    assert_string_equal(msg, "trident: warning: W.safetensors lacks 2 tensors the model has, made from [run] seed "
                             "1234: classifier.weight, classifier.bias\n");
    free(msg);
    msg = warning_of(ws, "W.safetensors", 1234, &named);
    assert_int_equal(named, 0);
    assert_string_equal(msg, "");
    free(msg);
    tr_weights_free(w);
    tr_weights_free(ws);
    tr_graph_free(gs);

    /* A long list ends in "and K more"; a fresh PARAM is expected absent and not named. */
    g = make_headed_graph(6);
    assert_int_equal(tr_param_set_fresh(g, tr_graph_find(g, "head0.weight")), TR_OK);
    assert_int_equal(tr_weights_load_opts(g, tr_test_file, &lenient, &w, &e), TR_OK);
    assert_int_equal(tr_weights_n_seeded(w), 11);
    assert_string_equal(tr_weights_seeded_name(w, 0), "head0.bias");
    msg = warning_of(w, "W.safetensors", 7, &named);
    assert_int_equal(named, 11);
    assert_string_equal(msg, "trident: warning: W.safetensors lacks 11 tensors the model has, made from [run] seed 7: "
                             "head0.bias, head1.weight, head1.bias, head2.weight, head2.bias, head3.weight, "
                             "head3.bias, head4.weight and 3 more\n");
    free(msg);
    tr_weights_free(w);
    tr_graph_free(g);

    /* A wrong shape or dtype is another model's tensor, not a missing one. */
    const struct {
        int bad_shape;
        enum tr_dtype dt;
        const char *needle;
    } bad[] = {{2, TR_DTYPE_F32, "[41]"}, {-1, TR_DTYPE_I32, "i32"}};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        write_file(1, bad[k].bad_shape, bad[k].dt);
        g = make_headed_graph(1);
        w = (void *)1;
        assert_int_equal(tr_weights_load_opts(g, tr_test_file, &lenient, &w, &e), TR_ERR_SHAPE);
        assert_null(w);
        tr_assert_msg_has(&e, bad[k].needle);
        tr_assert_msg_has(&e, tr_test_file);
        for (int i = 0; i < tr_graph_n_params(g); i++) assert_null(tr_node_data(g, tr_graph_param(g, i)));
        tr_graph_free(g);
    }
}

/* A file saved without the base prefix ("dense.weight" for the graph's "layer.dense.weight",
 * as transformers 5 saves CLIPTextModel) loads; one that also has a name under "layer."
 * is not taken apart that way. */
static void write_bare(int with_prefixed) {
    const int64_t *shapes[3] = {shape_w, shape_b, shape_g};
    const int ndims[3] = {2, 1, 1};
    struct tr_tensor ts[4];
    const char *nm[4];
    for (int i = 0; i < 3; i++) {
        ts[i] = tr_test_tensor(TR_DTYPE_F32, ndims[i], shapes[i]);
        tr_test_randn(&ts[i], 200 + (uint64_t)i, 1.0);
        nm[i] = strchr(names[i], '.') + 1;
    }
    ts[3] = tr_test_tensor(TR_DTYPE_F32, ndims[1], shapes[1]);
    tr_test_randn(&ts[3], 9, 1.0);
    nm[3] = "layer.other.bias";
    struct tr_error e = {0};
    assert_int_equal(tr_safetensors_write(tr_test_file, 3 + with_prefixed, nm, ts, &e), TR_OK);
    tr_test_tensors_free(4, ts);
}

static void test_load_without_base_prefix(void **state) {
    const int fwd[3] = {0, 1, 2};
    struct tr_graph *g = make_graph(fwd, TR_DTYPE_F32);
    struct tr_weights *w = NULL;
    struct tr_error e = {0};
    struct tr_safetensors *st;
    write_bare(0);
    assert_int_equal(tr_weights_load(g, tr_test_file, &w, &e), TR_OK);
    assert_int_equal(tr_safetensors_open(tr_test_file, &st, &e), TR_OK);
    for (int i = 0; i < 3; i++) {
        struct tr_tensor src, got = bound(g, names[i]);
        assert_int_equal(tr_safetensors_get(st, strchr(names[i], '.') + 1, &src, &e), TR_OK);
        assert_memory_equal(got.data, src.data, tr_tensor_nbytes(&got));
    }
    tr_safetensors_close(st);
    tr_weights_free(w);
    tr_graph_free(g);
    write_bare(1);
    expect_load_error(TR_DTYPE_F32, TR_ERR_NOT_FOUND, "layer.dense.weight");
}

/* A directory (a diffusers pipeline's layout): the files in it and in its subdirectories,
 * each tensor taken from the one file that has it; in two files it is an error. */
static void write_one(const char *path, int i, uint64_t seed) {
    const int64_t *shapes[3] = {shape_w, shape_b, shape_g};
    const int ndims[3] = {2, 1, 1};
    struct tr_tensor t = tr_test_tensor(TR_DTYPE_F32, ndims[i], shapes[i]);
    tr_test_randn(&t, seed, 1.0);
    struct tr_error e = {0};
    assert_int_equal(tr_safetensors_write(path, 1, &names[i], &t, &e), TR_OK);
    tr_test_tensor_free(&t);
}

/* A fresh directory TR_BINARY_DIR/tag_PID (dir) with the subdirectory sub_name (sub). */
static void make_dirs(char dir[600], char sub[700], const char *tag, const char *sub_name) {
    snprintf(dir, 600, "%s/%s_%d", TR_BINARY_DIR, tag, (int)getpid());
    snprintf(sub, 700, "%s/%s", dir, sub_name);
    assert_int_equal(mkdir(dir, 0700), 0);
    assert_int_equal(mkdir(sub, 0700), 0);
}

static void test_load_directory(void **state) {
    char dir[600], sub[700], p[3][800];
    make_dirs(dir, sub, "test_weights_dir", "vae");
    snprintf(p[0], sizeof p[0], "%s/a.safetensors", dir);
    snprintf(p[1], sizeof p[1], "%s/b.safetensors", sub);
    snprintf(p[2], sizeof p[2], "%s/c.safetensors", sub);
    struct tr_error e = {0};
    { /* two tensors in one file */
        const int64_t *shapes[2] = {shape_w, shape_b};
        const int ndims[2] = {2, 1};
        struct tr_tensor ts[2];
        for (int i = 0; i < 2; i++) {
            ts[i] = tr_test_tensor(TR_DTYPE_F32, ndims[i], shapes[i]);
            tr_test_randn(&ts[i], 80 + (uint64_t)i, 1.0);
        }
        assert_int_equal(tr_safetensors_write(p[0], 2, names, ts, &e), TR_OK);
        tr_test_tensors_free(2, ts);
    }
    write_one(p[1], 2, 90);
    const int fwd[3] = {0, 1, 2};
    struct tr_graph *g = make_graph(fwd, TR_DTYPE_F32);
    struct tr_weights *w = NULL;
    assert_int_equal(tr_weights_load(g, dir, &w, &e), TR_OK);
    struct tr_safetensors *st;
    struct tr_tensor src, got = bound(g, names[2]);
    assert_int_equal(tr_safetensors_open(p[1], &st, &e), TR_OK);
    assert_int_equal(tr_safetensors_get(st, names[2], &src, &e), TR_OK);
    assert_memory_equal(got.data, src.data, tr_tensor_nbytes(&got));
    tr_safetensors_close(st);
    tr_weights_free(w);
    tr_graph_free(g);
    { /* a shard index naming a shard that is not there: said by name before any tensor is missed */
        char index[900];
        snprintf(index, sizeof index, "%s/model.safetensors.index.json", dir);
        FILE *ix = fopen(index, "w");
        assert_non_null(ix);
        fputs("{\"metadata\": {}, \"weight_map\": {\"layer.w\": \"a.safetensors\", "
              "\"layer.x\": \"model-00002-of-00002.safetensors\"}}", ix);
        fclose(ix);
        g = make_graph(fwd, TR_DTYPE_F32);
        assert_int_equal(tr_weights_load(g, dir, &w, &e), TR_ERR_NOT_FOUND);
        tr_assert_msg_has(&e, "model.safetensors.index.json names the shard model-00002-of-00002.safetensors (of "
                              "'layer.x' and others), which is not in ");
        tr_graph_free(g);
        remove(index);
    }
    { /* an index read as from_pretrained reads it: a .safetensors it does not name (left
       * from an earlier save: here one more layer.norm.weight, which would be "in both")
       * is left out; NAME.safetensors beside its index is read instead of the shards */
        char index[900], stale[900], single[900];
        snprintf(index, sizeof index, "%s/model.safetensors.index.json", dir);
        snprintf(stale, sizeof stale, "%s/model-00001-of-00009.safetensors", dir);
        snprintf(single, sizeof single, "%s/model.safetensors", dir);
        FILE *ix = fopen(index, "w");
        assert_non_null(ix);
        fputs("{\"metadata\": {}, \"weight_map\": {\"layer.dense.weight\": \"a.safetensors\", \"layer.dense.bias\": "
              "\"a.safetensors\"}}", ix);
        fclose(ix);
        write_one(stale, 2, 92);
        g = make_graph(fwd, TR_DTYPE_F32);
        assert_int_equal(tr_weights_load(g, dir, &w, &e), TR_OK);
        tr_weights_free(w);
        tr_graph_free(g);
        remove(stale);
        write_one(single, 0, 93); /* the weight alone: the shard a.safetensors is not read, its bias with it */
        g = make_graph(fwd, TR_DTYPE_F32);
        assert_int_equal(tr_weights_load(g, dir, &w, &e), TR_ERR_NOT_FOUND);
        tr_assert_msg_has(&e, "no tensor 'layer.dense.bias'");
        tr_graph_free(g);
        remove(single);
        remove(index);
    }
    write_one(p[2], 2, 91); /* layer.norm.weight in two files */
    g = make_graph(fwd, TR_DTYPE_F32);
    assert_int_equal(tr_weights_load(g, dir, &w, &e), TR_ERR_INVALID);
    tr_assert_msg_has(&e, "'layer.norm.weight' is in both");
    tr_graph_free(g);
    for (int i = 0; i < 3; i++) remove(p[i]);
    g = make_graph(fwd, TR_DTYPE_F32);
    assert_int_equal(tr_weights_load(g, dir, &w, &e), TR_ERR_NOT_FOUND);
    tr_assert_msg_has(&e, "no .safetensors file in");
    /* another format's files there: named, with how to convert them */
    snprintf(p[0], sizeof p[0], "%s/pytorch_model.bin", dir);
    snprintf(p[1], sizeof p[1], "%s/unet.ckpt", sub);
    for (int i = 0; i < 2; i++) {
        FILE *bin = fopen(p[i], "wb");
        assert_non_null(bin);
        fclose(bin);
    }
    assert_int_equal(tr_weights_load(g, dir, &w, &e), TR_ERR_NOT_FOUND);
    tr_assert_msg_has(&e, "subdirectories, only ");
    tr_assert_msg_has(&e, "pytorch_model.bin");
    tr_assert_msg_has(&e, "vae/unet.ckpt");
    tr_assert_msg_has(&e, "which trident does not read (transformers' save_pretrained writes .safetensors");
    for (int i = 0; i < 2; i++) remove(p[i]);
    tr_graph_free(g);
    rmdir(sub);
    rmdir(dir);
}

/* make_graph's three tensors (bare: without "layer.", -1: none) and the extra names, one
 * float each, written to path. */
static void write_with(const char *path, int bare, int n_extra, const char *const *extra) {
    const int64_t *shapes[3] = {shape_w, shape_b, shape_g}, one[1] = {1};
    const int ndims[3] = {2, 1, 1};
    struct tr_tensor ts[32];
    const char *nm[32];
    int n = 0;
    for (int i = 0; i < 3 && bare >= 0; i++, n++) {
        ts[n] = tr_test_tensor(TR_DTYPE_F32, ndims[i], shapes[i]);
        tr_test_randn(&ts[n], 300 + (uint64_t)i, 1.0);
        nm[n] = bare ? strchr(names[i], '.') + 1 : names[i];
    }
    for (int i = 0; i < n_extra; i++, n++) {
        ts[n] = tr_test_tensor(TR_DTYPE_F32, 1, one);
        tr_test_randn(&ts[n], 310 + (uint64_t)i, 1.0);
        nm[n] = extra[i];
    }
    struct tr_error e = {0};
    assert_int_equal(tr_safetensors_write(path, n, nm, ts, &e), TR_OK);
    tr_test_tensors_free(n, ts);
}

/* Links in a directory: a link to the directory itself (its files reached twice) reads
 * each file once; a .safetensors link to nothing (a Hub cache's interrupted download) is
 * refused by name, not skipped; a file deeper than the immediate subdirectories (a Hub
 * cache's snapshots/REV/) is named with the directory to give. */
static void test_load_directory_links(void **state) {
    (void)state;
    char dir[600], sub[700], p[800], link[800];
    make_dirs(dir, sub, "test_weights_links", "snapshots");
    snprintf(p, sizeof p, "%s/a.safetensors", dir);
    write_with(p, 0, 0, NULL);
    snprintf(link, sizeof link, "%s/self", dir);
    assert_int_equal(symlink(".", link), 0);
    const int fwd[3] = {0, 1, 2};
    struct tr_graph *g = make_graph(fwd, TR_DTYPE_F32);
    struct tr_weights *w = NULL;
    struct tr_error e = {0};
    if (tr_weights_load(g, dir, &w, &e)) fail_msg("%s", e.msg);
    tr_weights_free(w);
    remove(link);
    snprintf(link, sizeof link, "%s/model-00002-of-00002.safetensors", dir);
    assert_int_equal(symlink("../blobs/deadbeef", link), 0);
    assert_int_equal(tr_weights_load(g, dir, &w, &e), TR_ERR_IO);
    tr_assert_msg_has(&e, "model-00002-of-00002.safetensors' is a link to '../blobs/deadbeef', which is not there");
    remove(link);
    char rev[800], deep[900];
    snprintf(rev, sizeof rev, "%s/abc123", sub);
    assert_int_equal(mkdir(rev, 0700), 0);
    snprintf(deep, sizeof deep, "%s/model.safetensors", rev);
    assert_int_equal(rename(p, deep), 0);
    assert_int_equal(tr_weights_load(g, dir, &w, &e), TR_ERR_NOT_FOUND);
    tr_assert_msg_has(&e, "deeper, 'snapshots/abc123/model.safetensors': name its directory");
    tr_assert_msg_has(&e, "/snapshots/abc123') as [run] weights");
    tr_graph_free(g);
    remove(deep);
    rmdir(rev);
    rmdir(sub);
    rmdir(dir);
}

#define tr_assert_str_has(str, s)                                                    \
    do {                                                                             \
        if (!strstr((str), (s))) fail_msg("\"%s\"\n  lacks \"%s\"", (str), (s)); \
    } while (0)

/* What tr_weights_warn_unused writes for w, in buf. */
static void warned(const struct tr_weights *w, char *buf, size_t cap) {
    FILE *f = tmpfile();
    assert_non_null(f);
    tr_weights_warn_unused(w, f);
    rewind(f);
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = 0;
    fclose(f);
}

/* Loads dir_or_file into make_graph's graph with the omitted prefixes; checks how many
 * tensors were unused and returns the warning in buf. */
static void load_unused(const char *path, int n_omit, const char *const *omit, int want, char *buf, size_t cap) {
    const int fwd[3] = {0, 1, 2};
    struct tr_graph *g = make_graph(fwd, TR_DTYPE_F32);
    for (int i = 0; i < n_omit; i++) assert_int_equal(tr_graph_omit(g, omit[i]), TR_OK);
    struct tr_weights *w = NULL;
    struct tr_error e = {0};
    assert_int_equal(tr_weights_load(g, path, &w, &e), TR_OK);
    assert_int_equal(tr_weights_n_unused(w), want);
    warned(w, buf, cap);
    assert_int_equal(buf[0] == 0, want == 0);
    tr_weights_free(w);
    tr_graph_free(g);
}

/* The tensors of a checkpoint no PARAM reads (a pretraining head, biases the config leaves
 * out) are counted and named in a warning, by pattern (layer numbers as "*") or, past
 * TR_WEIGHTS_WARN_NAMES patterns, by first component; the parts a graph leaves out by
 * design (tr_graph_omit: a name prefix, a bare file's, a directory's subdirectory) and
 * transformers' old position_ids buffers are not. */
static void test_load_unused(void **state) {
    (void)state;
    char buf[4096];
    static const char *const extra[] = {"head.layers.0.bias", "cls.x", "head.layers.1.bias",
                                        "text.embeddings.position_ids", "head.out.weight"};
    write_with(tr_test_file, 0, 5, extra);
    load_unused(tr_test_file, 0, NULL, 4, buf, sizeof buf);
    tr_assert_str_has(buf, "trident: warning: ");
    tr_assert_str_has(buf, tr_test_file);
    tr_assert_str_has(buf, ": 4 of its 8 tensors are not the model's (not read");
    tr_assert_str_has(buf, "): head.layers.*.bias (2), cls.x, head.out.weight\n");
    assert_null(strstr(buf, "position_ids"));
    { /* the names, in the file's order */
        const int fwd[3] = {0, 1, 2};
        struct tr_graph *g = make_graph(fwd, TR_DTYPE_F32);
        struct tr_weights *w = NULL;
        struct tr_error e = {0};
        assert_int_equal(tr_weights_load(g, tr_test_file, &w, &e), TR_OK);
        assert_string_equal(tr_weights_unused_name(w, 1), "cls.x");
        assert_string_equal(tr_weights_unused_name(w, 3), "head.out.weight");
        assert_null(tr_weights_unused_name(w, 4));
        assert_null(tr_weights_unused_name(w, -1));
        tr_weights_free(w);
        assert_int_equal(tr_weights_from_seed(g, 1, &w, &e), TR_OK);
        assert_int_equal(tr_weights_n_unused(w), 0);
        tr_weights_free(w);
        tr_graph_free(g);
    }
    static const char *const head[] = {"head.", "cls."};
    load_unused(tr_test_file, 1, head, 1, buf, sizeof buf);
    tr_assert_str_has(buf, ": 1 of its 8 tensors are not the model's");
    tr_assert_str_has(buf, "): cls.x\n");
    load_unused(tr_test_file, 2, head, 0, buf, sizeof buf);
    /* a one-component prefix the file has no name under leaves out nothing of it */
    static const char *const decoder[] = {"decoder."};
    load_unused(tr_test_file, 1, decoder, 4, buf, sizeof buf);
    /* a file bare of "layer.": "layer.head." covers its "head.*" too */
    static const char *const bare_extra[] = {"head.w", "other.w"}, *const lhead[] = {"layer.head."};
    write_with(tr_test_file, 1, 2, bare_extra);
    load_unused(tr_test_file, 1, lhead, 1, buf, sizeof buf);
    tr_assert_str_has(buf, "): other.w\n");
    /* many patterns: cut to fewer components */
    static const char *const many[] = {"dec.a", "dec.b", "dec.c", "dec.d", "dec.e", "dec.f", "dec.g",
                                       "dec.h", "dec.i", "mid.x", "top"};
    write_with(tr_test_file, 0, 11, many);
    load_unused(tr_test_file, 0, NULL, 11, buf, sizeof buf);
    tr_assert_str_has(buf, "): dec.* (9), mid.x, top\n"); /* a cut that stands for one name shows it */
    /* a whole layer over: cut as written, so its number shows */
    static const char *const layer[] = {"m.layers.1.attn.q.weight", "m.layers.1.attn.k.weight", "m.layers.1.attn.v.weight",
                                        "m.layers.1.attn.o.weight", "m.layers.1.mlp.up.weight",
                                        "m.layers.1.mlp.gate.weight", "m.layers.1.mlp.down.weight",
                                        "m.layers.1.norm1.weight", "m.layers.1.norm2.weight"};
    write_with(tr_test_file, 0, 9, layer);
    load_unused(tr_test_file, 0, NULL, 9, buf, sizeof buf);
    tr_assert_str_has(buf, "): m.layers.1.attn.* (4), m.layers.1.mlp.* (3), m.layers.1.norm1.weight, "
                           "m.layers.1.norm2.weight\n");
    /* a peft adapter's tensors say how they are read; a name's control bytes are not written */
    static const char *const headx[] = {"lm_head.weight"};
    write_with(tr_test_file, 0, 1, headx);
    load_unused(tr_test_file, 0, NULL, 1, buf, sizeof buf);
    tr_assert_str_has(buf, "): lm_head.weight (lm_head.weight: the config ties the head to the embedding table "
                           "(tie_word_embeddings); transformers uses the file's head where the two differ");
    static const char *const adapter[] = {"base_model.model.q.lora_A.weight", "base_model.model.q.lora_B.weight",
                                          "evil\x1b[31m\nname"};
    write_with(tr_test_file, 0, 3, adapter);
    load_unused(tr_test_file, 0, NULL, 3, buf, sizeof buf);
    tr_assert_str_has(buf, "lora_A.weight, base_model.model.q.lora_B.weight, evil?[31m?name (LoRA adapter tensors: "
                           "predict and generate read them with [model] lora_predict = true)\n");
    /* a directory: a file nothing was read from, and the same with its subdirectory left out */
    char dir[600], sub[700], p[2][800];
    make_dirs(dir, sub, "test_weights_unused", "safety_checker");
    snprintf(p[0], sizeof p[0], "%s/model.safetensors", dir);
    snprintf(p[1], sizeof p[1], "%s/model.safetensors", sub);
    write_with(p[0], 0, 0, NULL);
    static const char *const other[] = {"vision.layers.0.w", "concept"};
    write_with(p[1], -1, 2, other);
    load_unused(dir, 0, NULL, 2, buf, sizeof buf);
    tr_assert_str_has(buf, "safety_checker/model.safetensors: none of its 2 tensors is the model's (not read): "
                           "vision.layers.*.w, concept\n");
    static const char *const sc[] = {"safety_checker/"}, *const wrong[] = {"safety/"};
    load_unused(dir, 1, sc, 0, buf, sizeof buf);
    load_unused(dir, 1, wrong, 2, buf, sizeof buf);
    remove(p[0]);
    remove(p[1]);
    rmdir(sub);
    rmdir(dir);
    /* the prefixes a graph takes */
    struct tr_graph *g = NULL;
    assert_int_equal(tr_graph_init(&g, NULL), TR_OK);
    assert_int_equal(tr_graph_omit(g, "a."), TR_OK);
    assert_int_equal(tr_graph_omit(g, "a."), TR_OK);
    assert_int_equal(tr_graph_n_omitted(g), 1);
    assert_string_equal(tr_graph_omitted(g, 0), "a.");
    assert_null(tr_graph_omitted(g, 1));
    for (int i = 1; i < TR_GRAPH_OMIT_MAX; i++) {
        char pre[16];
        snprintf(pre, sizeof pre, "p%d.", i);
        assert_int_equal(tr_graph_omit(g, pre), TR_OK);
    }
    assert_int_equal(tr_graph_omit(g, "one.too.many."), TR_ERR_INVALID);
    struct tr_error e = {0};
    assert_int_equal(tr_graph_status(g, &e), TR_ERR_INVALID);
    tr_assert_msg_has(&e, "more than 16 prefixes");
    tr_graph_free(g);
    assert_int_equal(tr_graph_init(&g, NULL), TR_OK);
    assert_int_equal(tr_graph_omit(g, ""), TR_ERR_INVALID);
    tr_graph_free(g);
}

/* make_graph's tensors drawn from seed into dir/name (tensors [from, to) of the three: a
 * shard of them) */
static void write_seeded(const char *dir, const char *name, int from, int to, uint64_t seed) {
    const int64_t *shapes[3] = {shape_w, shape_b, shape_g};
    const int ndims[3] = {2, 1, 1};
    struct tr_tensor ts[3];
    char p[900];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    for (int i = from; i < to; i++) {
        ts[i - from] = tr_test_tensor(TR_DTYPE_F32, ndims[i], shapes[i]);
        tr_test_randn(&ts[i - from], seed + (uint64_t)i, 1.0);
    }
    struct tr_error e = {0};
    assert_int_equal(tr_safetensors_write(p, to - from, names + from, ts, &e), TR_OK);
    tr_test_tensors_free(to - from, ts);
}

static void remove_all(const char *dir, int n, const char *const *names_) {
    for (int i = 0; i < n; i++) {
        char p[900];
        snprintf(p, sizeof p, "%s/%s", dir, names_[i]);
        remove(p);
    }
}

/* Loads dir with variant into make_graph's graph; checks each tensor is the one drawn
 * from seed (write_seeded) and that nothing was unused. */
static void expect_variant(const char *dir, const char *variant, uint64_t seed) {
    const int fwd[3] = {0, 1, 2};
    struct tr_graph *g = make_graph(fwd, TR_DTYPE_F32);
    struct tr_weights *w = NULL;
    struct tr_error e = {0};
    const struct tr_weights_load_opts o = {.variant = variant};
    if (tr_weights_load_opts(g, dir, &o, &w, &e) != TR_OK) fail_msg("%s", e.msg);
    assert_int_equal(tr_weights_n_unused(w), 0);
    const int64_t *shapes[3] = {shape_w, shape_b, shape_g};
    const int ndims[3] = {2, 1, 1};
    for (int i = 0; i < 3; i++) {
        struct tr_tensor want = tr_test_tensor(TR_DTYPE_F32, ndims[i], shapes[i]), got = bound(g, names[i]);
        tr_test_randn(&want, seed + (uint64_t)i, 1.0);
        assert_memory_equal(got.data, want.data, tr_tensor_nbytes(&got));
        tr_test_tensor_free(&want);
    }
    tr_weights_free(w);
    tr_graph_free(g);
}

/* A directory of a pipeline's layout with variants (diffusers' unet/diffusion_pytorch_model
 * .fp16.safetensors and .non_ema beside the plain file; transformers' sharded model.fp16-
 * 00001-of-00002 beside model-00001-of-00002): the plain files by default, the variant's
 * where asked, an absent variant refused naming those there, a dotted name without a
 * plain sibling read as it is. */
static void test_load_variants(void **state) {
    (void)state;
    char dir[600], sub[700];
    make_dirs(dir, sub, "test_weights_variants", "unet");
    write_seeded(sub, "diffusion_pytorch_model.safetensors", 0, 3, 500);
    write_seeded(sub, "diffusion_pytorch_model.fp16.safetensors", 0, 3, 510);
    write_seeded(sub, "diffusion_pytorch_model.non_ema.safetensors", 0, 3, 520);
    expect_variant(dir, NULL, 500);
    expect_variant(dir, "", 500);
    expect_variant(dir, "fp16", 510);
    expect_variant(dir, "non_ema", 520);
    const int fwd[3] = {0, 1, 2};
    struct tr_graph *g = make_graph(fwd, TR_DTYPE_F32);
    struct tr_weights *w = NULL;
    struct tr_error e = {0};
    const struct tr_weights_load_opts bf16 = {.variant = "bf16"};
    assert_int_equal(tr_weights_load_opts(g, dir, &bf16, &w, &e), TR_ERR_NOT_FOUND);
    tr_assert_msg_has(&e, "no file of variant 'bf16' under");
    tr_assert_msg_has(&e, "its variants: fp16, non_ema");
    char file[900];
    snprintf(file, sizeof file, "%s/diffusion_pytorch_model.safetensors", sub);
    const struct tr_weights_load_opts fp16 = {.variant = "fp16"};
    assert_int_equal(tr_weights_load_opts(g, file, &fp16, &w, &e), TR_ERR_INVALID);
    tr_assert_msg_has(&e, "is not a directory");
    tr_graph_free(g);
    static const char *const unet_files[] = {"diffusion_pytorch_model.safetensors",
                                             "diffusion_pytorch_model.fp16.safetensors",
                                             "diffusion_pytorch_model.non_ema.safetensors"};
    remove_all(sub, 3, unet_files);
    /* shards, plain and fp16 */
    write_seeded(sub, "model-00001-of-00002.safetensors", 0, 2, 600);
    write_seeded(sub, "model-00002-of-00002.safetensors", 2, 3, 600);
    write_seeded(sub, "model.fp16-00001-of-00002.safetensors", 0, 2, 610);
    write_seeded(sub, "model.fp16-00002-of-00002.safetensors", 2, 3, 610);
    expect_variant(dir, NULL, 600);
    expect_variant(dir, "fp16", 610);
    static const char *const shards[] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                                         "model.fp16-00001-of-00002.safetensors",
                                         "model.fp16-00002-of-00002.safetensors"};
    remove_all(sub, 4, shards);
    /* a diffusers pipeline (model_index.json): its top level's single-file checkpoint is
     * not one of its parts, as DiffusionPipeline.from_pretrained reads it */
    write_seeded(sub, "diffusion_pytorch_model.safetensors", 0, 3, 800);
    write_seeded(dir, "v1-5-pruned-emaonly.safetensors", 0, 3, 810);
    char index[800];
    snprintf(index, sizeof index, "%s/model_index.json", dir);
    FILE *fi = fopen(index, "w");
    assert_non_null(fi);
    fputs("{\"_class_name\": \"StableDiffusionPipeline\"}\n", fi);
    fclose(fi);
    expect_variant(dir, NULL, 800);
    remove_all(sub, 1, unet_files);
    {
        struct tr_graph *g2 = make_graph(fwd, TR_DTYPE_F32);
        assert_int_equal(tr_weights_load(g2, dir, &w, &e), TR_ERR_NOT_FOUND);
        tr_assert_msg_has(&e, "is a diffusers pipeline (model_index.json) with no .safetensors in its parts'");
        tr_assert_msg_has(&e, "(v1-5-pruned-emaonly.safetensors)");
        tr_graph_free(g2);
    }
    remove(index);
    expect_variant(dir, NULL, 810); /* without model_index.json: a directory of files */
    snprintf(file, sizeof file, "%s/v1-5-pruned-emaonly.safetensors", dir);
    remove(file);
    /* a dot in a name with no plain sibling: no variant */
    write_seeded(dir, "sd_xl_base_1.0.safetensors", 0, 3, 700);
    expect_variant(dir, NULL, 700);
    snprintf(file, sizeof file, "%s/sd_xl_base_1.0.safetensors", dir);
    remove(file);
    rmdir(sub);
    rmdir(dir);
}

/* transformers' older BERT checkpoints name a LayerNorm's weight and bias "gamma" and
 * "beta" (from_pretrained renames them): read as the graph's LayerNorm.weight and .bias,
 * bare too, none left unused; a file with both names gives the current one. */
static void test_load_legacy_layer_norm(void **state) {
    (void)state;
    const int64_t sh[1] = {40};
    struct tr_graph *g = NULL;
    assert_int_equal(tr_graph_init(&g, NULL), TR_OK);
    tr_param(g, "bert.embeddings.LayerNorm.weight", TR_DTYPE_F32, 1, sh, 1.0f, 0.02f);
    tr_param(g, "bert.embeddings.LayerNorm.bias", TR_DTYPE_F32, 1, sh, 0.0f, 0.02f);
    tr_param(g, "bert.pooler.dense.bias", TR_DTYPE_F32, 1, sh, 0.0f, 0.02f);
    assert_int_equal(tr_graph_status(g, NULL), TR_OK);
    static const char *const cases[3][4] = {
        {"bert.embeddings.LayerNorm.gamma", "bert.embeddings.LayerNorm.beta", "bert.pooler.dense.bias", NULL},
        {"embeddings.LayerNorm.gamma", "embeddings.LayerNorm.beta", "pooler.dense.bias", NULL},
        {"bert.embeddings.LayerNorm.gamma", "bert.embeddings.LayerNorm.beta", "bert.pooler.dense.bias",
         "bert.embeddings.LayerNorm.weight"}};
    for (int c = 0; c < 3; c++) {
        const int n = cases[c][3] ? 4 : 3;
        struct tr_tensor ts[4];
        for (int i = 0; i < n; i++) {
            ts[i] = tr_test_tensor(TR_DTYPE_F32, 1, sh);
            tr_test_randn(&ts[i], 800 + (uint64_t)i, 1.0);
        }
        struct tr_error e = {0};
        assert_int_equal(tr_safetensors_write(tr_test_file, n, (const char *const *)cases[c], ts, &e), TR_OK);
        struct tr_weights *w = NULL;
        if (tr_weights_load(g, tr_test_file, &w, &e) != TR_OK) fail_msg("case %d: %s", c, e.msg);
        /* the weight: gamma's, or where the file has both, weight's (unused then: gamma) */
        assert_memory_equal(bound(g, "bert.embeddings.LayerNorm.weight").data, ts[n == 4 ? 3 : 0].data, 40 * 4);
        assert_memory_equal(bound(g, "bert.embeddings.LayerNorm.bias").data, ts[1].data, 40 * 4);
        assert_int_equal(tr_weights_n_unused(w), n == 4);
        if (n == 4) assert_string_equal(tr_weights_unused_name(w, 0), "bert.embeddings.LayerNorm.gamma");
        tr_weights_free(w);
        tr_test_tensors_free(n, ts);
    }
    tr_graph_free(g);
}

/* peft's adapter_model.safetensors names a LoRA factor "base_model.model." + the model's
 * name: read into the graph's adapter (a fresh PARAM, which a base checkpoint lacks) from
 * a directory of the base model and the adapter, nothing left unused; another tensor under
 * base_model.model. (modules_to_save's copy) is read in place of the base model's. */
static void test_load_peft_adapter(void **state) {
    (void)state;
    const int64_t sa[2] = {4, 40}, sb[1] = {40};
    struct tr_graph *g = NULL;
    assert_int_equal(tr_graph_init(&g, NULL), TR_OK);
    tr_param(g, "model.norm.weight", TR_DTYPE_F32, 1, sb, 1.0f, 0.02f);
    const int a = tr_param(g, "model.layers.0.self_attn.q_proj.lora_A.weight", TR_DTYPE_F32, 2, sa, 0.0f, 0.5f);
    tr_param_set_fresh(g, a);
    assert_int_equal(tr_graph_status(g, NULL), TR_OK);
    char dir[600], sub[700], p[2][800];
    make_dirs(dir, sub, "test_weights_peft", "adapter");
    snprintf(p[0], sizeof p[0], "%s/model.safetensors", dir);
    snprintf(p[1], sizeof p[1], "%s/adapter_model.safetensors", sub);
    struct tr_tensor base = tr_test_tensor(TR_DTYPE_F32, 1, sb), ad[2] = {tr_test_tensor(TR_DTYPE_F32, 2, sa),
                                                                          tr_test_tensor(TR_DTYPE_F32, 1, sb)};
    tr_test_randn(&base, 900, 1.0);
    tr_test_randn(&ad[0], 901, 1.0);
    tr_test_randn(&ad[1], 902, 1.0);
    struct tr_error e = {0};
    static const char *const bn[1] = {"model.norm.weight"},
                             *const an[2] = {"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight",
                                             "base_model.model.model.norm.weight"};
    assert_int_equal(tr_safetensors_write(p[0], 1, bn, &base, &e), TR_OK);
    assert_int_equal(tr_safetensors_write(p[1], 2, an, ad, &e), TR_OK);
    struct tr_weights *w = NULL;
    if (tr_weights_load(g, dir, &w, &e) != TR_OK) fail_msg("%s", e.msg);
    assert_memory_equal(bound(g, "model.layers.0.self_attn.q_proj.lora_A.weight").data, ad[0].data, 160 * 4);
    /* a trained copy beside the factors (modules_to_save, bias = "all") is what a PeftModel
     * uses: the adapter's, the base model's shadowed and not called unused */
    assert_memory_equal(bound(g, "model.norm.weight").data, ad[1].data, 40 * 4);
    assert_int_equal(tr_weights_n_unused(w), 0);
    tr_weights_free(w);
    tr_graph_free(g);
    tr_test_tensor_free(&base);
    tr_test_tensors_free(2, ad);
    for (int i = 0; i < 2; i++) remove(p[i]);
    rmdir(sub);
    rmdir(dir);
}

/* A layer LoRA wraps keeps its own tensors under "base_layer." in peft's file (bias = "all"
 * or "lora_only" saves "...q_proj.base_layer.bias"): read as "...q_proj.bias", in place of
 * the base model's, nothing unused. An untied lm_head.weight that no file has, beside
 * peft's copy of the embedding (modules_to_save = ["embed_tokens"]), is the base model's
 * table, as the PeftModel keeps its head on it; without that copy it is missing. */
static void test_load_peft_base_layer(void **state) {
    (void)state;
    const int64_t sb[1] = {8}, se[2] = {6, 8};
    struct tr_graph *g = NULL;
    assert_int_equal(tr_graph_init(&g, NULL), TR_OK);
    tr_param(g, "model.embed_tokens.weight", TR_DTYPE_F32, 2, se, 0.0f, 0.02f);
    tr_param(g, "model.layers.0.self_attn.q_proj.bias", TR_DTYPE_F32, 1, sb, 0.0f, 0.02f);
    tr_param(g, "lm_head.weight", TR_DTYPE_F32, 2, se, 0.0f, 0.02f);
    assert_int_equal(tr_graph_status(g, NULL), TR_OK);
    char dir[600], sub[700], p[2][800];
    make_dirs(dir, sub, "test_weights_peft_base_layer", "adapter");
    snprintf(p[0], sizeof p[0], "%s/model.safetensors", dir);
    snprintf(p[1], sizeof p[1], "%s/adapter_model.safetensors", sub);
    struct tr_tensor base[2] = {tr_test_tensor(TR_DTYPE_F32, 2, se), tr_test_tensor(TR_DTYPE_F32, 1, sb)},
                     ad[2] = {tr_test_tensor(TR_DTYPE_F32, 2, se), tr_test_tensor(TR_DTYPE_F32, 1, sb)};
    for (int i = 0; i < 2; i++) tr_test_randn(&base[i], 910 + (uint64_t)i, 1.0), tr_test_randn(&ad[i], 920 + (uint64_t)i, 1.0);
    struct tr_error e = {0};
    static const char *const bn[2] = {"model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.bias"},
                             *const an[2] = {"base_model.model.model.embed_tokens.weight",
                                             "base_model.model.model.layers.0.self_attn.q_proj.base_layer.bias"};
    assert_int_equal(tr_safetensors_write(p[0], 2, bn, base, &e), TR_OK);
    assert_int_equal(tr_safetensors_write(p[1], 2, an, ad, &e), TR_OK);
    struct tr_weights *w = NULL;
    if (tr_weights_load(g, dir, &w, &e) != TR_OK) fail_msg("%s", e.msg);
    assert_memory_equal(bound(g, "model.embed_tokens.weight").data, ad[0].data, 48 * 4);
    assert_memory_equal(bound(g, "model.layers.0.self_attn.q_proj.bias").data, ad[1].data, 8 * 4);
    assert_memory_equal(bound(g, "lm_head.weight").data, base[0].data, 48 * 4);
    assert_int_equal(tr_weights_n_unused(w), 0);
    tr_weights_free(w);
    /* without the adapter's embedding copy, lm_head.weight is missing, as before */
    assert_int_equal(tr_safetensors_write(p[1], 1, an + 1, ad + 1, &e), TR_OK);
    assert_int_equal(tr_weights_load(g, dir, &w, &e), TR_ERR_NOT_FOUND);
    tr_assert_msg_has(&e, "no tensor 'lm_head.weight'");
    tr_graph_free(g);
    tr_test_tensors_free(2, base);
    tr_test_tensors_free(2, ad);
    for (int i = 0; i < 2; i++) remove(p[i]);
    rmdir(sub);
    rmdir(dir);
}

static void expect_load_error(enum tr_dtype graph_dt, int status, const char *tensor) {
    const int fwd[3] = {0, 1, 2};
    struct tr_graph *g = make_graph(fwd, graph_dt);
    struct tr_weights *w = (void *)1;
    struct tr_error e = {0};
    assert_int_equal(tr_weights_load(g, tr_test_file, &w, &e), status);
    assert_null(w);
    tr_assert_msg_has(&e, tr_test_file);
    if (tensor) tr_assert_msg_has(&e, tensor);
    /* Nothing stays bound after a failure. */
    for (int i = 0; i < 3; i++) assert_null(tr_node_data(g, tr_graph_find(g, names[i])));
    tr_graph_free(g);
}

static void test_load_errors(void **state) {
    write_file(1, -1, TR_DTYPE_F32);
    expect_load_error(TR_DTYPE_F32, TR_ERR_NOT_FOUND, "layer.dense.bias");
    write_file(-1, 2, TR_DTYPE_F32);
    expect_load_error(TR_DTYPE_F32, TR_ERR_SHAPE, "layer.norm.weight");
    struct tr_error e = {0};
    struct tr_weights *w;
    const int fwd[3] = {0, 1, 2};
    struct tr_graph *g = make_graph(fwd, TR_DTYPE_F32);
    assert_int_equal(tr_weights_load(g, tr_test_file, &w, &e), TR_ERR_SHAPE);
    tr_assert_msg_has(&e, "[41]");
    tr_assert_msg_has(&e, "[300]");
    tr_graph_free(g);
    /* integers in the file, floats in the graph: not converted. */
    write_file(-1, -1, TR_DTYPE_I32);
    expect_load_error(TR_DTYPE_F32, TR_ERR_SHAPE, "layer.");
    /* A truncated file. */
    write_file(-1, -1, TR_DTYPE_F32);
    FILE *f = fopen(tr_test_file, "rb");
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fclose(f);
    assert_int_equal(truncate(tr_test_file, size - 8), 0);
    expect_load_error(TR_DTYPE_F32, TR_ERR_FORMAT, NULL);
    remove(tr_test_file);
    expect_load_error(TR_DTYPE_F32, TR_ERR_IO, NULL);
}

TR_TEST_MAIN(tr_test_dir_setup, tr_test_dir_teardown, test_seed_deterministic_and_order_free, test_load_directory_links,
             test_seed_bf16_is_rounded_f32, test_seed_large_tensor, test_load_f32_and_convert, test_load_other_float_dtypes,
             test_load_errors,
             test_load_fresh, test_load_missing_seed, test_load_without_base_prefix, test_load_directory,
             test_load_unused, test_load_variants, test_load_legacy_layer_norm,
             test_load_peft_adapter, test_load_peft_base_layer)
