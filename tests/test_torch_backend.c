/* The torch backend: its caching allocator (compiled in from the plugin's source, since
 * the .so exports nothing but its entry point) and the plugin end to end through the
 * loader, against a float64 reference computed here. */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backendutil.h"
#include "testutil.h"
#include "trident/trident.h"

#include "../plugins/backend_torch/allocator.h"

/* ---- the allocator, over a counting device ---- */

struct fake_device {
    int n_alloc, n_free, live;
    size_t live_bytes;
    size_t budget;      /* refuse an allocation that would take live_bytes past it (0: none) */
};

static int fake_alloc(void *user, size_t nbytes, void **p, struct tr_error *err) {
    struct fake_device *d = user;
    if (d->budget && d->live_bytes + nbytes > d->budget)
        return tr_error_set(err, TR_ERR_NOMEM, "fake device: %zu bytes over budget", nbytes);
    *p = malloc(nbytes);
    if (!*p) return tr_error_set(err, TR_ERR_NOMEM, "fake device: malloc");
    memset(*p, 0xab, nbytes); /* the whole class must be addressable (ASan checks) */
    d->n_alloc++;
    d->live++;
    d->live_bytes += nbytes;
    return TR_OK;
}

/* Sizes are not passed back to free, as with a real device: track them in a small map. */
#define FAKE_MAX 256
static void *fake_ptrs[FAKE_MAX];
static size_t fake_sizes[FAKE_MAX];

static int fake_alloc_tracked(void *user, size_t nbytes, void **p, struct tr_error *err) {
    int rc = fake_alloc(user, nbytes, p, err);
    if (rc != TR_OK) return rc;
    for (int i = 0; i < FAKE_MAX; i++)
        if (!fake_ptrs[i]) {
            fake_ptrs[i] = *p;
            fake_sizes[i] = nbytes;
            return TR_OK;
        }
    fail_msg("fake device: more than %d live blocks", FAKE_MAX);
    return TR_ERR_INTERNAL;
}

static void fake_free(void *user, void *p) {
    struct fake_device *d = user;
    for (int i = 0; i < FAKE_MAX; i++)
        if (fake_ptrs[i] == p) {
            d->live_bytes -= fake_sizes[i];
            fake_ptrs[i] = NULL;
            break;
        }
    free(p);
    d->n_free++;
    d->live--;
}

static struct tr_torch_allocator *make_allocator(struct fake_device *d) {
    struct tr_torch_allocator *a = NULL;
    struct tr_error err = {0};
    memset(fake_ptrs, 0, sizeof fake_ptrs);
    assert_int_equal(tr_torch_allocator_init(&a, fake_alloc_tracked, fake_free, d, &err), TR_OK);
    return a;
}

/* A block of nbytes from a; a refusal fails the test with the allocator's message. */
static struct tr_torch_block *alloc_ok(struct tr_torch_allocator *a, size_t nbytes) {
    struct tr_torch_block *b = NULL;
    struct tr_error err = {0};
    if (tr_torch_allocator_alloc(a, nbytes, &b, &err) != TR_OK) fail_msg("alloc %zu: %s", nbytes, err.msg);
    return b;
}

/* Free a: every block it made, in use or cached, goes back to the fake device. */
static void allocator_free(struct tr_torch_allocator *a, const struct fake_device *d) {
    tr_torch_allocator_free(a);
    assert_int_equal(d->live, 0);
}

static void test_alloc_round(void **state) {
    (void)state;
    size_t prev = 0;
    for (size_t n = 0; n < (size_t)9 << 20; n = n < 4096 ? n + 1 : n * 5 / 4 + 7) {
        size_t r = tr_torch_alloc_round(n);
        size_t gran = n <= TR_TORCH_SMALL_MAX ? TR_TORCH_ROUND_SMALL : TR_TORCH_ROUND_LARGE;
        if (r < n || r % gran != 0 || r - (n ? n : 1) >= gran || r < prev)
            fail_msg("round(%zu) = %zu (granularity %zu, previous class %zu)", n, r, gran, prev);
        prev = r;
    }
    assert_int_equal(tr_torch_alloc_round(0), 512);
    assert_int_equal(tr_torch_alloc_round(513), 1024);
    assert_int_equal(tr_torch_alloc_round(TR_TORCH_SMALL_MAX), TR_TORCH_SMALL_MAX);
    assert_int_equal(tr_torch_alloc_round(TR_TORCH_SMALL_MAX + 1), 2u << 20);
    assert_int_equal(tr_torch_alloc_round((5u << 20) + 3), 6u << 20);
    assert_int_equal(tr_torch_alloc_round(SIZE_MAX - 3), 0); /* no class, not a wrapped small one */
}

static void test_alloc_reuse(void **state) {
    (void)state;
    struct fake_device d = {0};
    struct tr_torch_allocator *a = make_allocator(&d);
    struct tr_torch_allocator_stats st;

    struct tr_torch_block *b1 = alloc_ok(a, 1000);
    assert_int_equal(b1->size, 1024);
    memset(b1->ptr, 1, 1000);
    void *p1 = b1->ptr;
    tr_torch_allocator_release(a, b1);
    struct tr_torch_block *b2 = alloc_ok(a, 700); /* same class: the cached block */
    assert_ptr_equal(b2->ptr, p1);
    struct tr_torch_block *b3 = alloc_ok(a, 1500); /* another class: a new one */
    assert_ptr_not_equal(b3->ptr, p1);
    tr_torch_allocator_get_stats(a, &st);
    assert_int_equal(st.hits, 1);
    assert_int_equal(st.misses, 2);
    assert_int_equal(st.n_blocks, 2);
    assert_int_equal(st.n_cached, 0);
    assert_int_equal(st.n_classes, 2);
    assert_int_equal(st.in_use_bytes, 1024 + 1536);
    assert_int_equal(d.n_alloc, 2);

    /* LIFO within a class; releasing never returns memory to the device. */
    tr_torch_allocator_release(a, b2);
    tr_torch_allocator_release(a, b3);
    tr_torch_allocator_release(a, NULL);
    tr_torch_allocator_get_stats(a, &st);
    assert_int_equal(st.in_use_bytes, 0);
    assert_int_equal(st.n_cached, 2);
    assert_int_equal(d.n_free, 0);

    tr_torch_allocator_reset_counters(a);
    tr_torch_allocator_get_stats(a, &st);
    assert_int_equal(st.hits + st.misses, 0);
    allocator_free(a, &d);
    assert_int_equal(d.n_free, 2);
}

static void test_alloc_peak(void **state) {
    (void)state;
    struct fake_device d = {0};
    struct tr_torch_allocator *a = make_allocator(&d);
    struct tr_torch_allocator_stats st;
    size_t nx = 3000, ny = TR_TORCH_SMALL_MAX + 5;

    struct tr_torch_block *x = alloc_ok(a, nx);
    struct tr_torch_block *y = alloc_ok(a, ny);
    memset(y->ptr, 2, y->size);
    size_t both = tr_torch_alloc_round(nx) + tr_torch_alloc_round(ny);
    tr_torch_allocator_get_stats(a, &st);
    assert_int_equal(st.reserved_bytes, both);
    assert_int_equal(st.peak_bytes, both);
    assert_int_equal(d.live_bytes, both);

    tr_torch_allocator_release(a, x);
    tr_torch_allocator_release(a, y);
    tr_torch_allocator_get_stats(a, &st);
    assert_int_equal(st.reserved_bytes, both); /* cached blocks are still held */

    tr_torch_allocator_empty_cache(a);
    tr_torch_allocator_get_stats(a, &st);
    assert_int_equal(st.reserved_bytes, 0);
    assert_int_equal(st.n_blocks, 0);
    assert_int_equal(st.peak_bytes, both); /* peak stays */
    assert_int_equal(d.live, 0);

    /* After emptying, the same class is a miss again. */
    tr_torch_allocator_reset_counters(a);
    alloc_ok(a, nx);
    tr_torch_allocator_get_stats(a, &st);
    assert_int_equal(st.misses, 1);
    allocator_free(a, &d); /* the block of nx still in use: freed with the allocator */
}

/* hold: a cached block taken back into use by name, counted neither as hit nor miss;
 * a block in use is refused. */
static void test_alloc_hold(void **state) {
    (void)state;
    struct fake_device d = {0};
    struct tr_torch_allocator *a = make_allocator(&d);
    struct tr_torch_allocator_stats st;
    struct tr_error err = {0};
    struct tr_torch_block *b1 = alloc_ok(a, 600), *b2 = alloc_ok(a, 700), *b3 = alloc_ok(a, 800);
    tr_torch_allocator_release(a, b1);
    tr_torch_allocator_release(a, b2);
    tr_torch_allocator_release(a, b3);
    tr_torch_allocator_reset_counters(a);
    assert_int_equal(tr_torch_allocator_hold(a, b2, &err), TR_OK); /* from the middle of the free list */
    assert_true(b2->in_use);
    assert_int_equal(tr_torch_allocator_hold(a, b2, &err), TR_ERR_INVALID);
    tr_torch_allocator_get_stats(a, &st);
    assert_int_equal(st.hits + st.misses, 0);
    assert_int_equal(st.n_cached, 2);
    assert_int_equal(st.in_use_bytes, 1024);
    struct tr_torch_block *x = alloc_ok(a, 900), *y = alloc_ok(a, 900), *z = alloc_ok(a, 900);
    assert_true(x != b2 && y != b2 && z != b2); /* a held block is never served */
    allocator_free(a, &d);
}

/* A step's pattern of requests and releases, repeated: the second time is all hits, and
 * what is live at once never shares memory. */
static void test_alloc_two_steps(void **state) {
    (void)state;
    struct fake_device d = {0};
    struct tr_torch_allocator *a = make_allocator(&d);
    enum { N = 60 };
    size_t sizes[N];
    for (int i = 0; i < N; i++) sizes[i] = (size_t)(tr_rng_uniform(7, 1, (uint64_t)i) * 3.0 * (1 << 20)) + 1;
    uint64_t misses[2], hits[2];
    for (int step = 0; step < 2; step++) {
        struct tr_torch_block *live[N] = {0};
        tr_torch_allocator_reset_counters(a);
        for (int i = 0; i < N; i++) {
            live[i] = alloc_ok(a, sizes[i]);
            memset(live[i]->ptr, i, sizes[i]);
            /* Release what an op two back produced, as a chain of ops does. */
            if (i >= 2 && i % 3 != 0) {
                tr_torch_allocator_release(a, live[i - 2]);
                live[i - 2] = NULL;
            }
        }
        for (int i = 0; i < N; i++)
            if (live[i]) {
                const unsigned char *c = live[i]->ptr;
                if (c[0] != (unsigned char)i || c[sizes[i] - 1] != (unsigned char)i)
                    fail_msg("step %d: block %d was overwritten while in use", step, i);
                tr_torch_allocator_release(a, live[i]);
            }
        struct tr_torch_allocator_stats st;
        tr_torch_allocator_get_stats(a, &st);
        misses[step] = st.misses;
        hits[step] = st.hits;
        assert_int_equal(st.in_use_bytes, 0);
    }
    assert_true(misses[0] > 0);
    assert_true(hits[0] > 0); /* released blocks are reused within the step */
    assert_int_equal(misses[1], 0);
    assert_int_equal(hits[1], N);
    allocator_free(a, &d);
}

/* A device that is full of cached blocks of another class: the cache is emptied and the
 * request retried; a request the device cannot hold at all fails with the sizes. */
static void test_alloc_out_of_memory(void **state) {
    (void)state;
    struct fake_device d = {.budget = 8u << 20};
    struct tr_torch_allocator *a = make_allocator(&d);
    struct tr_error err = {0};
    struct tr_torch_block *b = alloc_ok(a, 6u << 20);
    tr_torch_allocator_release(a, b);
    alloc_ok(a, 4u << 20);
    assert_int_equal(d.n_free, 1); /* the cached 6 MiB went back to make room */
    struct tr_torch_allocator_stats st;
    tr_torch_allocator_get_stats(a, &st);
    assert_int_equal(st.reserved_bytes, 4u << 20);

    struct tr_torch_block *e = (void *)&e;
    int rc = tr_torch_allocator_alloc(a, 5u << 20, &e, &err);
    assert_int_equal(rc, TR_ERR_NOMEM);
    assert_null(e);
    if (!strstr(err.msg, "5242880 bytes")) fail_msg("message without the size: %s", err.msg);
    tr_torch_allocator_get_stats(a, &st);
    assert_int_equal(st.reserved_bytes, 4u << 20);
    allocator_free(a, &d);
}

/* ---- the plugin end to end ---- */

enum { B = 2, T = 5, V = 11, D = 8, F = 16, NH = F / D };

struct model {
    struct tr_graph *g;
    int ids, x, table, w, bias, gamma, beta;
    int n_kernel_nodes;                     /* nodes the backend runs a kernel for */
    uint64_t max_block, sum_blocks;         /* of their outputs' size classes */
    struct tr_tensor t_table, t_w, t_bias, t_gamma, t_beta, in_ids, in_x;
    struct tr_tensor out[4];
    enum tr_dtype dt;
};

static void model_build(struct model *m, int bind_params, enum tr_dtype dt) {
    memset(m, 0, sizeof *m);
    m->dt = dt;
    struct tr_error err = {0};
    assert_int_equal(tr_graph_init(&m->g, &err), TR_OK);
    struct tr_graph *g = m->g;
    m->ids = tr_input(g, "ids", TR_DTYPE_I32, 2, (int64_t[]){B, T});
    m->x = tr_input(g, "x", dt, 3, (int64_t[]){B, T, D});
    m->table = tr_param(g, "emb", dt, 2, (int64_t[]){V, D}, 0, 1);
    m->w = tr_param(g, "w", dt, 2, (int64_t[]){F, D}, 0, 0.5f);
    m->bias = tr_param(g, "b", dt, 1, (int64_t[]){F}, 0, 0.5f);
    m->gamma = tr_param(g, "ln.weight", dt, 1, (int64_t[]){D}, 1, 0.1f);
    m->beta = tr_param(g, "ln.bias", dt, 1, (int64_t[]){D}, 0, 0.1f);
    int e = tr_embedding(g, m->table, m->ids);                      /* (B,T,D) */
    int h = tr_add(g, e, m->x);                                     /* (B,T,D) */
    int mm = tr_matmul(g, h, m->w, 0, 1);                           /* (B,T,F) */
    int a = tr_add(g, mm, m->bias);                                 /* (B,T,F), bias broadcast */
    int ge = tr_gelu(g, a, 0);
    tr_unary(g, TR_OP_TANH, ge);                                    /* dead: run, never read */
    int r = tr_reshape(g, ge, 4, (int64_t[]){B, T, NH, D});         /* a view */
    int tp = tr_transpose(g, r, 4, (int[]){0, 2, 1, 3});            /* (B,NH,T,D) */
    int ln = tr_layer_norm(g, tp, m->gamma, m->beta, 1e-5f);
    int sm = tr_softmax(g, ln);
    int hv = tr_reshape(g, h, 2, (int64_t[]){B * T, D});            /* output view of a value read early */
    /* a's only direct reader ran long ago: its block must live on for this view's reader. */
    int av = tr_reshape(g, a, 2, (int64_t[]){B * T, F});
    int z = tr_scale(g, av, 0.5f, 0.25f);
    tr_graph_set_output(g, sm, "softmax");
    tr_graph_set_output(g, ge, "gelu");
    tr_graph_set_output(g, hv, "h");
    tr_graph_set_output(g, z, "z");
    if (tr_graph_status(g, &err) != TR_OK) fail_msg("graph: %s", err.msg);

    for (int id = 0; id < tr_graph_n_nodes(g); id++) {
        int op = tr_node_op(g, id);
        if (op == TR_OP_INPUT || op == TR_OP_PARAM || op == TR_OP_CONST || op == TR_OP_RESHAPE) continue;
        if (id == mm) continue; /* the bias ADD's call computes it (a linear, one addmm) */
        struct tr_tensor t = tr_node_tensor(g, id);
        uint64_t cls = tr_torch_alloc_round(tr_tensor_nbytes(&t));
        m->n_kernel_nodes++;
        m->sum_blocks += cls;
        if (cls > m->max_block) m->max_block = cls;
    }
    m->t_table = tr_test_tensor(dt, 2, (int64_t[]){V, D});
    m->t_w = tr_test_tensor(dt, 2, (int64_t[]){F, D});
    m->t_bias = tr_test_tensor(dt, 1, (int64_t[]){F});
    m->t_gamma = tr_test_tensor(dt, 1, (int64_t[]){D});
    m->t_beta = tr_test_tensor(dt, 1, (int64_t[]){D});
    tr_test_randn(&m->t_table, 1, 1.0);
    tr_test_randn(&m->t_w, 2, 0.5);
    tr_test_randn(&m->t_bias, 3, 0.5);
    tr_test_randn(&m->t_gamma, 4, 1.0);
    tr_test_randn(&m->t_beta, 5, 0.3);
    if (bind_params) {
        assert_int_equal(tr_graph_bind_param(g, m->table, m->t_table.data, &err), TR_OK);
        assert_int_equal(tr_graph_bind_param(g, m->w, m->t_w.data, &err), TR_OK);
        assert_int_equal(tr_graph_bind_param(g, m->bias, m->t_bias.data, &err), TR_OK);
        assert_int_equal(tr_graph_bind_param(g, m->gamma, m->t_gamma.data, &err), TR_OK);
        assert_int_equal(tr_graph_bind_param(g, m->beta, m->t_beta.data, &err), TR_OK);
    }
    m->in_ids = tr_test_tensor(TR_DTYPE_I32, 2, (int64_t[]){B, T});
    m->in_x = tr_test_tensor(dt, 3, (int64_t[]){B, T, D});
    tr_test_randint(&m->in_ids, 6, V);
    tr_test_randn(&m->in_x, 7, 1.0);
    m->out[0] = tr_test_tensor(dt, 4, (int64_t[]){B, NH, T, D});
    m->out[1] = tr_test_tensor(dt, 3, (int64_t[]){B, T, F});
    m->out[2] = tr_test_tensor(dt, 2, (int64_t[]){B * T, D});
    m->out[3] = tr_test_tensor(dt, 2, (int64_t[]){B * T, F});
}

static void model_free(struct model *m) {
    tr_graph_free(m->g);
    struct tr_tensor *ts[] = {&m->t_table, &m->t_w, &m->t_bias, &m->t_gamma, &m->t_beta, &m->in_ids, &m->in_x,
                              &m->out[0], &m->out[1], &m->out[2], &m->out[3]};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) tr_test_tensor_free(ts[i]);
}

/* The four outputs in float64, from the same data. */
static void model_reference(const struct model *m, double *sm, double *ge, double *h, double *z) {
    double *table = tr_test_to_f64(&m->t_table), *w = tr_test_to_f64(&m->t_w), *bias = tr_test_to_f64(&m->t_bias);
    double *gamma = tr_test_to_f64(&m->t_gamma), *beta = tr_test_to_f64(&m->t_beta);
    double *ids = tr_test_to_f64(&m->in_ids), *x = tr_test_to_f64(&m->in_x);
    for (int bt = 0; bt < B * T; bt++) {
        int id = (int)ids[bt];
        for (int d = 0; d < D; d++) h[bt * D + d] = table[id * D + d] + x[bt * D + d];
        for (int f = 0; f < F; f++) {
            double acc = bias[f];
            for (int d = 0; d < D; d++) acc += h[bt * D + d] * w[f * D + d];
            ge[bt * F + f] = 0.5 * acc * (1.0 + erf(acc / sqrt(2.0)));
            z[bt * F + f] = 0.5 * acc + 0.25;
        }
    }
    for (int b = 0; b < B; b++)
        for (int j = 0; j < NH; j++)
            for (int t = 0; t < T; t++) {
                const double *row = &ge[(b * T + t) * F + j * D]; /* transpose (0,2,1,3) */
                double *o = &sm[((b * NH + j) * T + t) * D];
                double mean = 0, var = 0, mx = -INFINITY, sum = 0;
                for (int d = 0; d < D; d++) mean += row[d] / D;
                for (int d = 0; d < D; d++) var += (row[d] - mean) * (row[d] - mean) / D;
                for (int d = 0; d < D; d++) mx = fmax(mx, o[d] = (row[d] - mean) / sqrt(var + 1e-5) * gamma[d] + beta[d]);
                for (int d = 0; d < D; d++) sum += o[d] = exp(o[d] - mx);
                for (int d = 0; d < D; d++) o[d] /= sum;
            }
    free(table), free(w), free(bias), free(gamma), free(beta), free(ids), free(x);
}

/* This build's plugin first, whatever TRIDENT_PLUGIN_PATH says. */
static struct tr_plugin *open_torch(void) {
    return tr_test_plugin_expect("torch", TR_CAP_CPU | TR_CAP_F32 | TR_CAP_BF16);
}

static struct tr_backend *init_torch(struct tr_plugin *p, const struct tr_option *opts, int n) {
    struct tr_backend *be = NULL;
    struct tr_error err = {0};
    struct tr_backend_params prm = {.struct_size = sizeof prm, .abi_version = TR_ABI_VERSION,
                                    .device_type = TR_DEVICE_CPU, .options = opts, .n_options = n};
    if (tr_backend_init(p, &prm, &be, &err) != TR_OK) fail_msg("init torch: %s", err.msg);
    return be;
}

static void run_and_check(struct tr_backend *be, struct tr_program *prog, struct model *m,
                          struct tr_backend_stats *st) {
    struct tr_error err = {0};
    for (int i = 0; i < 4; i++) tr_test_poison(&m->out[i]);
    struct tr_tensor in[2] = {m->in_ids, m->in_x};
    if (tr_backend_execute(be, prog, 2, in, 4, m->out, &err) != TR_OK) fail_msg("execute: %s", err.msg);
    double *sm = calloc(B * NH * T * D, sizeof *sm), *ge = calloc(B * T * F, sizeof *ge);
    double *h = calloc(B * T * D, sizeof *h), *z = calloc(B * T * F, sizeof *z);
    model_reference(m, sm, ge, h, z);
    double tol = tr_test_tol(m->dt);
    tr_assert_close("softmax(layer_norm(transpose(reshape(gelu))))", &m->out[0], sm, tol);
    tr_assert_close("gelu(matmul + bias)", &m->out[1], ge, tol);
    tr_assert_close("reshape(embedding + x)", &m->out[2], h, tol);
    tr_assert_close("scale(reshape(matmul + bias))", &m->out[3], z, tol);
    free(sm), free(ge), free(h), free(z);
    if (tr_backend_get_stats(be, prog, st, &err) != TR_OK) fail_msg("stats: %s", err.msg);
}

static void check_end_to_end(const struct tr_option *opts, int n_opts, enum tr_dtype dt) {
    struct model m;
    struct tr_error err = {0};
    model_build(&m, 1, dt);
    struct tr_plugin *p = open_torch();
    struct tr_backend *be = init_torch(p, opts, n_opts);
    struct tr_program *prog = NULL;
    if (tr_backend_compile(be, m.g, &prog, &err) != TR_OK) fail_msg("compile: %s", err.msg);

    struct tr_backend_stats st1, st2;
    run_and_check(be, prog, &m, &st1);
    assert_string_equal(st1.mode, "eager");
    assert_int_equal(st1.kernel_calls, m.n_kernel_nodes);
    assert_int_equal(st1.alloc_hits + st1.alloc_misses, m.n_kernel_nodes); /* one block per kernel node */
    assert_true(st1.alloc_misses > 0);
    assert_true(st1.alloc_misses < (uint64_t)m.n_kernel_nodes); /* blocks were reused within the step */
    uint64_t weights = tr_graph_param_bytes(m.g);
    /* Weights plus the pool: at least the largest block, less than a block per kernel node. */
    assert_true(st1.peak_bytes >= weights + m.max_block);
    assert_true(st1.peak_bytes < weights + m.sum_blocks);
    assert_non_null(strstr(st1.notes, "pool"));
    assert_non_null(strstr(st1.notes, "linear (matmul + bias as one addmm) x1"));
    print_message("torch stats: %llu kernel calls, %llu misses, peak %llu B; %s\n", (unsigned long long)st1.kernel_calls,
                  (unsigned long long)st1.alloc_misses, (unsigned long long)st1.peak_bytes, st1.notes);

    run_and_check(be, prog, &m, &st2);
    assert_int_equal(st2.kernel_calls, m.n_kernel_nodes);
    assert_int_equal(st2.alloc_misses, 0);
    assert_int_equal(st2.alloc_hits, m.n_kernel_nodes);
    assert_int_equal(st2.peak_bytes, st1.peak_bytes);

    tr_program_free(prog);
    tr_backend_free(be);
    tr_plugin_close(p);
    model_free(&m);
}

static void test_end_to_end(void **state) { check_end_to_end(NULL, 0, TR_DTYPE_F32); }
static void test_end_to_end_bf16(void **state) { check_end_to_end(NULL, 0, TR_DTYPE_BF16); }

/* x·Wᵀ + b in bf16 is one GEMM with its bias (PyTorch's addmm: the sum rounded once), in
 * eager and in reduce-overhead's recorded replays, bit for bit the kernel's own call; a
 * product that something else reads too stays a MATMUL and an ADD (rounded twice). */
static void test_linear_rounds_once(void **state) {
    (void)state;
    const enum tr_dtype dt = TR_DTYPE_BF16;
    struct tr_error err = {0};
    struct tr_graph *g = NULL;
    assert_int_equal(tr_graph_init(&g, &err), TR_OK);
    int x = tr_input(g, "x", dt, 3, (int64_t[]){B, T, D});
    int w = tr_param(g, "w", dt, 2, (int64_t[]){F, D}, 0, 1);
    int w2 = tr_param(g, "w2", dt, 2, (int64_t[]){F, D}, 0, 1);
    int b = tr_param(g, "b", dt, 1, (int64_t[]){F}, 0, 1);
    int lin = tr_add(g, tr_matmul(g, x, w, 0, 1), b);
    int mm2 = tr_matmul(g, x, w2, 0, 1);
    tr_graph_set_output(g, lin, "linear");
    tr_graph_set_output(g, tr_add(g, b, mm2), "product + bias");
    tr_graph_set_output(g, mm2, "product");
    tr_graph_set_output(g, tr_add(g, b, tr_matmul(g, x, w, 0, 1)), "bias + product"); /* a linear too */
    if (tr_graph_status(g, &err) != TR_OK) fail_msg("graph: %s", err.msg);
    struct tr_tensor tw = tr_test_tensor(dt, 2, (int64_t[]){F, D}), tw2 = tr_test_tensor(dt, 2, (int64_t[]){F, D});
    struct tr_tensor tb = tr_test_tensor(dt, 1, (int64_t[]){F}), tx = tr_test_tensor(dt, 3, (int64_t[]){B, T, D});
    tr_test_randn(&tw, 11, 1.0);
    tr_test_randn(&tw2, 12, 1.0);
    tr_test_randn(&tb, 13, 1.0);
    tr_test_randn(&tx, 14, 1.0);
    assert_int_equal(tr_graph_bind_param(g, w, tw.data, &err), TR_OK);
    assert_int_equal(tr_graph_bind_param(g, w2, tw2.data, &err), TR_OK);
    assert_int_equal(tr_graph_bind_param(g, b, tb.data, &err), TR_OK);

    /* what the kernels give for each, called directly */
    struct tr_kernels *k = NULL;
    if (tr_kernels_init(&k, TR_DEVICE_CPU, 0, &err) != TR_OK) fail_msg("%s", err.msg);
    struct tr_tensor want[4], prod = tr_test_tensor(dt, 3, (int64_t[]){B, T, F});
    for (int i = 0; i < 4; i++) want[i] = tr_test_tensor(dt, 3, (int64_t[]){B, T, F});
    assert_int_equal(tr_k_matmul(k, &tx, &tw, &want[0], 0, 1, 1.0f, &tb, TR_ACT_NONE, &err), TR_OK);
    assert_int_equal(tr_k_matmul(k, &tx, &tw, &want[3], 0, 1, 1.0f, &tb, TR_ACT_NONE, &err), TR_OK);
    assert_int_equal(tr_k_matmul(k, &tx, &tw2, &want[2], 0, 1, 1.0f, NULL, TR_ACT_NONE, &err), TR_OK);
    assert_int_equal(tr_k_binary(k, TR_OP_ADD, &tb, &want[2], &want[1], &err), TR_OK);
    assert_int_equal(tr_k_matmul(k, &tx, &tw, &prod, 0, 1, 1.0f, NULL, TR_ACT_NONE, &err), TR_OK);
    tr_kernels_free(k);
    /* the data is drawn so that rounding twice differs somewhere */
    struct tr_tensor twice = tr_test_tensor(dt, 3, (int64_t[]){B, T, F});
    if (tr_kernels_init(&k, TR_DEVICE_CPU, 0, &err) != TR_OK) fail_msg("%s", err.msg);
    assert_int_equal(tr_k_binary(k, TR_OP_ADD, &prod, &tb, &twice, &err), TR_OK);
    tr_kernels_free(k);
    assert_memory_not_equal(twice.data, want[0].data, tr_tensor_nbytes(&twice));

    static const struct tr_option ro[] = {{.key = "mode", .value = "reduce-overhead"}};
    for (int mode = 0; mode < 2; mode++) {
        struct tr_plugin *p = open_torch();
        struct tr_backend *be = init_torch(p, mode ? ro : NULL, mode);
        struct tr_program *prog = NULL;
        if (tr_backend_compile(be, g, &prog, &err) != TR_OK) fail_msg("compile: %s", err.msg);
        struct tr_tensor out[4];
        for (int i = 0; i < 4; i++) out[i] = tr_test_tensor(dt, 3, (int64_t[]){B, T, F});
        for (int step = 0; step < 4; step++) { /* reduce-overhead: warm-up, record, replays */
            for (int i = 0; i < 4; i++) tr_test_poison(&out[i]);
            if (tr_backend_execute(be, prog, 1, &tx, 4, out, &err) != TR_OK) fail_msg("execute: %s", err.msg);
            for (int i = 0; i < 4; i++)
                if (memcmp(out[i].data, want[i].data, tr_tensor_nbytes(&out[i])))
                    fail_msg("mode %d step %d: output %d is not the kernels' own", mode, step, i);
        }
        struct tr_backend_stats st;
        if (tr_backend_get_stats(be, prog, &st, &err) != TR_OK) fail_msg("stats: %s", err.msg);
        assert_non_null(strstr(st.notes, "linear (matmul + bias as one addmm) x2"));
        assert_int_equal(st.kernel_calls, 4);
        tr_test_tensors_free(4, out);
        tr_program_free(prog);
        tr_backend_free(be);
        tr_plugin_close(p);
    }
    tr_test_tensors_free(4, want);
    struct tr_tensor *ts[] = {&tw, &tw2, &tb, &tx, &prod, &twice};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) tr_test_tensor_free(ts[i]);
    tr_graph_free(g);
}

/* threads = N is applied around each step and the caller's OpenMP setting restored (other
 * backends in the process run with theirs); libgomp is loaded through the kernels. */
static void test_end_to_end_options(void **state) {
    (void)state;
    int (*omp_max)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "omp_get_max_threads");
    if (!omp_max) fail_msg("omp_get_max_threads not found: %s", dlerror());
    int before = omp_max();
    char threads[16];
    snprintf(threads, sizeof threads, "%d", before == 3 ? 2 : 3);
    struct tr_option opts[] = {{.key = "mode", .value = "eager", .file = "x.ini", .line = 3},
                               {.key = "threads", .value = threads, .file = "x.ini", .line = 4}};
    check_end_to_end(opts, 2, TR_DTYPE_F32);
    assert_int_equal(omp_max(), before);
}

static void test_options_refused(void **state) {
    (void)state;
    struct tr_plugin *p = open_torch();
    tr_test_option_refused(p, "mdoe", "eager", 7, "conf/x.ini:7: [backend.torch] unknown key 'mdoe'", "keys: mode");
    tr_test_option_refused(p, "warmup_steps", "-1", 8, "conf/x.ini:8: [backend.torch] warmup_steps = '-1'",
                           "integer from 0");
    tr_test_option_refused(p, "warmup_steps", "2x", 8, "[backend.torch] warmup_steps = '2x'", NULL);
    tr_test_option_refused(p, "mode", "fast", 9, "conf/x.ini:9: [backend.torch] mode = 'fast'", "expected eager");
    tr_test_option_refused(p, "threads", "lots", 10, "[backend.torch] threads = 'lots'", "integer");
    struct tr_option two[] = {{.key = "mode", .value = "eager", .file = "conf/x.ini", .line = 2},
                              {.key = "mode", .value = "reduce-overhead", .file = "conf/x.ini", .line = 5}};
    tr_test_init_refused(p, two, 2, "conf/x.ini:5:", "reduce-overhead");
    struct tr_option nofile = {.key = "mdoe", .value = "eager"};
    tr_test_init_refused(p, &nofile, 1, "[backend.torch] unknown key 'mdoe'", NULL);
    tr_plugin_close(p);
}

/* Wrong inputs, an id outside the table and an unbound weight fail with the names; the
 * program still runs correctly afterwards and its pools are intact. */
static void test_errors(void **state) {
    (void)state;
    struct model m;
    struct tr_error err = {0};
    struct tr_plugin *p = open_torch();
    struct tr_backend *be = init_torch(p, NULL, 0);
    struct tr_program *prog = NULL;

    model_build(&m, 0, TR_DTYPE_F32);
    assert_int_not_equal(tr_backend_compile(be, m.g, &prog, &err), TR_OK);
    assert_null(prog);
    if (!strstr(err.msg, "'emb'")) fail_msg("unbound weight not named: %s", err.msg);
    model_free(&m);

    model_build(&m, 1, TR_DTYPE_F32);
    if (tr_backend_compile(be, m.g, &prog, &err) != TR_OK) fail_msg("compile: %s", err.msg);
    struct tr_backend_stats st;
    run_and_check(be, prog, &m, &st);

    ((int32_t *)m.in_ids.data)[3] = V + 4;
    struct tr_tensor in[2] = {m.in_ids, m.in_x};
    assert_int_not_equal(tr_backend_execute(be, prog, 2, in, 4, m.out, &err), TR_OK);
    if (!strstr(err.msg, "embedding")) fail_msg("bad id: message without the op: %s", err.msg);
    tr_test_randint(&m.in_ids, 6, V);

    in[0] = m.in_ids;
    in[1] = m.out[3]; /* (B*T,F), not (B,T,D) */
    assert_int_not_equal(tr_backend_execute(be, prog, 2, in, 4, m.out, &err), TR_OK);
    if (!strstr(err.msg, "'x'")) fail_msg("wrong input shape not named: %s", err.msg);

    run_and_check(be, prog, &m, &st);
    assert_int_equal(st.alloc_misses, 0);
    tr_program_free(prog);
    tr_backend_free(be);
    tr_plugin_close(p);
    model_free(&m);
}

/* The entry point itself refuses a host of another major version. */
static void test_entry_abi(void **state) {
    (void)state;
    void *so = dlopen(TR_BINARY_DIR "/plugins/libtrident_backend_torch.so", RTLD_NOW | RTLD_LOCAL);
    if (!so) fail_msg("dlopen: %s", dlerror());
    tr_backend_entry_fn entry = (tr_backend_entry_fn)dlsym(so, TR_BACKEND_ENTRY_SYMBOL);
    assert_non_null(entry);
    assert_null(dlsym(so, "tr_torch_allocator_alloc")); /* nothing else is exported */
    const struct tr_backend_i *it = NULL;
    struct tr_error err = {0};
    assert_int_equal(entry(TR_ABI_MAKE(TR_ABI_MAJOR + 1, 0), tr_host_api_get(), &it, &err), TR_ERR_PLUGIN);
    assert_null(it);
    if (!strstr(err.msg, "ABI")) fail_msg("ABI refusal: %s", err.msg);
    assert_int_equal(entry(TR_ABI_MAKE(TR_ABI_MAJOR, TR_ABI_MINOR + 3), tr_host_api_get(), &it, &err), TR_OK);
    assert_non_null(it);
    assert_true(it->struct_size >= TR_BACKEND_I_MIN_SIZE_1_0);
    assert_non_null(it->get_stats);
    assert_true(it->supports_op(NULL, TR_OP_MATMUL, TR_DTYPE_BF16));
    assert_false(it->supports_op(NULL, TR_OP_MATMUL, TR_DTYPE_I32));
    assert_false(it->supports_op(NULL, TR_OP_COUNT, TR_DTYPE_F32));

    /* The vtable called directly, without the loader's checks in front: the plugin's own. */
    struct model m;
    model_build(&m, 1, TR_DTYPE_F32);
    struct tr_backend_params prm = {.struct_size = sizeof prm, .abi_version = TR_ABI_VERSION};
    void *ctx = NULL, *prog = NULL;
    assert_int_equal(it->init(tr_host_api_get(), &prm, &ctx, &err), TR_OK);
    if (it->compile(ctx, (tr_graph_t)m.g, &prog, &err) != TR_OK) fail_msg("compile: %s", err.msg);
    struct tr_tensor in[2] = {m.in_ids, m.out[3]};
    assert_int_equal(it->execute(ctx, prog, 2, in, 4, m.out, &err), TR_ERR_SHAPE);
    if (!strstr(err.msg, "input 1 ('x')")) fail_msg("wrong input shape not named: %s", err.msg);
    assert_int_equal(it->execute(ctx, prog, 1, in, 4, m.out, &err), TR_ERR_INVALID);
    in[1] = m.in_x;
    for (int i = 0; i < 4; i++) tr_test_poison(&m.out[i]);
    if (it->execute(ctx, prog, 2, in, 4, m.out, &err) != TR_OK) fail_msg("execute: %s", err.msg);
    double *sm = calloc(B * NH * T * D, sizeof *sm), *ge = calloc(B * T * F, sizeof *ge);
    double *h = calloc(B * T * D, sizeof *h), *z = calloc(B * T * F, sizeof *z);
    model_reference(&m, sm, ge, h, z);
    tr_assert_close("direct: softmax(layer_norm(...))", &m.out[0], sm, 1e-4);
    tr_assert_close("direct: scale(reshape(matmul + bias))", &m.out[3], z, 1e-4);
    free(sm), free(ge), free(h), free(z);
    it->program_free(ctx, prog);
    it->free(ctx);
    model_free(&m);
    dlclose(so);
}

TR_TEST_MAIN(NULL, NULL, test_alloc_round, test_alloc_reuse, test_alloc_peak, test_alloc_hold, test_alloc_two_steps,
             test_alloc_out_of_memory, test_end_to_end, test_end_to_end_bf16, test_linear_rounds_once,
             test_end_to_end_options,
             test_options_refused, test_errors, test_entry_abi)
