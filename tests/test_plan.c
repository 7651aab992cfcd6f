/* The arena planner (plan.h) on hand-made and random live ranges, its verifier on plans
 * broken on purpose, and the plugin IR (pir.h): a real graph read through the host table
 * as a plugin reads it, dead marking, compaction and the remap. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "pir.h"
#include "plan.h"
#include "testutil.h"
#include "trident/graph.h"
#include "trident/loader.h"
#include "trident/rng.h"

#define S(...) ((const int64_t[]){__VA_ARGS__})

static void expect_msg(const struct tr_error *err, const char *const *subs) {
    for (; *subs; subs++)
        if (!strstr(err->msg, *subs)) fail_msg("message \"%s\" lacks \"%s\"", err->msg, *subs);
}
#define EXPECT_MSG(err, ...) expect_msg((err), (const char *const[]){__VA_ARGS__, NULL})

/* Independent of tr_plan_verify: no two buffers alive at one step share a byte, every
 * offset is aligned, every buffer lies in the arena. */
static void check_plan(const struct tr_plan_buf *b, int n, int64_t align, int64_t arena) {
    for (int i = 0; i < n; i++) {
        if (b[i].size == 0) continue;
        if (b[i].offset % align) fail_msg("buffer %d offset %lld not aligned to %lld", i, (long long)b[i].offset, (long long)align);
        if (b[i].offset < 0 || b[i].offset + b[i].size > arena)
            fail_msg("buffer %d [%lld,+%lld) outside arena %lld", i, (long long)b[i].offset, (long long)b[i].size, (long long)arena);
        for (int j = 0; j < i; j++) {
            if (b[j].size == 0) continue;
            int t = b[i].first <= b[j].last && b[j].first <= b[i].last;
            int s = b[i].offset < b[j].offset + b[j].size && b[j].offset < b[i].offset + b[i].size;
            if (t && s) fail_msg("buffers %d and %d overlap in time and space", i, j);
        }
    }
}

static int64_t peak_live(const struct tr_plan_buf *b, int n) {
    int steps = 0;
    for (int i = 0; i < n; i++)
        if (b[i].last + 1 > steps) steps = b[i].last + 1;
    int64_t peak = 0;
    for (int s = 0; s < steps; s++) {
        int64_t live = 0;
        for (int i = 0; i < n; i++)
            if (b[i].first <= s && s <= b[i].last) live += b[i].size;
        if (live > peak) peak = live;
    }
    return peak;
}

static void test_plan_random(void **state) {
    (void)state;
    enum { N = 300, STEPS = 120 };
    struct tr_plan_buf b[N];
    for (uint64_t seed = 1; seed <= 6; seed++) {
        int64_t align = (int64_t)1 << (seed % 7); /* 2 .. 64 */
        int64_t sum_aligned = 0;
        for (int i = 0; i < N; i++) {
            int first = (int)(tr_rng_uniform(seed, 1, (uint64_t)i) * STEPS);
            int len = (int)(tr_rng_uniform(seed, 2, (uint64_t)i) * 15);
            b[i].first = first;
            b[i].last = first + len;
            b[i].size = 1 + (int64_t)(tr_rng_uniform(seed, 3, (uint64_t)i) * 5000);
            if (i % 37 == 0) b[i].size = 0;
            b[i].offset = -12345;
            sum_aligned += (b[i].size + align - 1) / align * align;
        }
        int64_t arena = -1;
        struct tr_error err = {0};
        assert_int_equal(tr_plan_assign(b, N, align, &arena, &err), TR_OK);
        check_plan(b, N, align, arena);
        assert_int_equal(tr_plan_verify(b, N, arena, &err), TR_OK);
        int64_t peak = peak_live(b, N);
        if (arena < peak) fail_msg("arena %lld below the peak live bytes %lld", (long long)arena, (long long)peak);
        if (arena > sum_aligned) fail_msg("arena %lld above the sum of sizes %lld", (long long)arena, (long long)sum_aligned);
        /* greedy-by-size on random ranges lands well below the sum: reuse happens */
        if (arena * 2 > sum_aligned) fail_msg("arena %lld reuses little of %lld", (long long)arena, (long long)sum_aligned);
    }
}

/* A chain (each buffer read by the next step only) needs two buffers' worth, not all. */
static void test_plan_chain_and_gaps(void **state) {
    (void)state;
    struct tr_plan_buf b[10];
    for (int i = 0; i < 10; i++) b[i] = (struct tr_plan_buf){.size = 1000, .first = i, .last = i + 1};
    int64_t arena = 0;
    struct tr_error err = {0};
    assert_int_equal(tr_plan_assign(b, 10, 64, &arena, &err), TR_OK);
    check_plan(b, 10, 64, arena);
    assert_int_equal(arena, 1024 + 1000);

    /* disjoint in time: everything at offset 0 */
    struct tr_plan_buf d[3] = {{.size = 10, .first = 0, .last = 0}, {.size = 300, .first = 1, .last = 2}, {.size = 7, .first = 3, .last = 3}};
    assert_int_equal(tr_plan_assign(d, 3, 16, &arena, &err), TR_OK);
    for (int i = 0; i < 3; i++) assert_int_equal(d[i].offset, 0);
    assert_int_equal(arena, 300);

    /* largest first: B (8192, steps 0..5) at 0, A (4096, 0..1) above it; C (100, 3..4)
     * is not alive with A, so it takes A's bytes */
    struct tr_plan_buf g[3] = {{.size = 4096, .first = 0, .last = 1}, {.size = 8192, .first = 0, .last = 5}, {.size = 100, .first = 3, .last = 4}};
    assert_int_equal(tr_plan_assign(g, 3, 64, &arena, &err), TR_OK);
    check_plan(g, 3, 64, arena);
    assert_int_equal(g[1].offset, 0);
    assert_int_equal(g[0].offset, 8192);
    assert_int_equal(g[2].offset, 8192);
    assert_int_equal(arena, 8192 + 4096);

    /* zero-size buffers take no space; n = 0 is an empty arena */
    struct tr_plan_buf z[2] = {{.size = 0, .first = 0, .last = 3}, {.size = 5, .first = 0, .last = 3}};
    assert_int_equal(tr_plan_assign(z, 2, 8, &arena, &err), TR_OK);
    assert_int_equal(arena, 5);
    assert_int_equal(tr_plan_assign(NULL, 0, 8, &arena, &err), TR_OK);
    assert_int_equal(arena, 0);
}

static void test_plan_bad_args(void **state) {
    (void)state;
    struct tr_plan_buf b[2] = {{.size = 8, .first = 0, .last = 1}, {.size = 8, .first = 3, .last = 2}};
    int64_t arena;
    struct tr_error err = {0};
    assert_int_equal(tr_plan_assign(b, 1, 48, &arena, &err), TR_ERR_INVALID);
    EXPECT_MSG(&err, "48", "power of two");
    assert_int_equal(tr_plan_assign(b, 2, 64, &arena, &err), TR_ERR_INVALID);
    EXPECT_MSG(&err, "buffer 1", "[3,2]");
}

static void test_verify_catches_overlap(void **state) {
    (void)state;
    struct tr_plan_buf b[4] = {
        {.size = 256, .first = 0, .last = 2},
        {.size = 128, .first = 1, .last = 4},
        {.size = 512, .first = 3, .last = 6},
        {.size = 64, .first = 5, .last = 7},
    };
    int64_t arena;
    struct tr_error err = {0};
    assert_int_equal(tr_plan_assign(b, 4, 64, &arena, &err), TR_OK);
    assert_int_equal(tr_plan_verify(b, 4, arena, &err), TR_OK);

    /* 1 and 2 are both alive at steps 3..4: put 2 over 1's bytes */
    struct tr_plan_buf bad[4];
    memcpy(bad, b, sizeof b);
    bad[2].offset = bad[1].offset + 64;
    int64_t big = arena + 4096;
    assert_int_equal(tr_plan_verify(bad, 4, big, &err), TR_ERR_INTERNAL);
    EXPECT_MSG(&err, "buffers 1 ", " and 2 ", "steps 1..4", "steps 3..6");

    /* the same bytes at disjoint steps are fine; at one shared step they are not */
    struct tr_plan_buf two[2] = {{.size = 64, .first = 0, .last = 2, .offset = 0}, {.size = 64, .first = 3, .last = 5, .offset = 0}};
    assert_int_equal(tr_plan_verify(two, 2, 64, &err), TR_OK);
    two[1].first = 2;
    assert_int_equal(tr_plan_verify(two, 2, 64, &err), TR_ERR_INTERNAL);
    EXPECT_MSG(&err, "buffers 0 ", " and 1 ");

    /* outside the arena */
    memcpy(bad, b, sizeof b);
    assert_int_equal(tr_plan_verify(bad, 4, arena - 1, &err), TR_ERR_INTERNAL);
    EXPECT_MSG(&err, "outside the arena");
    bad[0].offset = -64;
    assert_int_equal(tr_plan_verify(bad, 4, arena, &err), TR_ERR_INTERNAL);
    EXPECT_MSG(&err, "buffer 0", "outside");
}

/* ---- pir ---- */

struct small_graph {
    struct tr_graph *g;
    int x, w, c, mm, add, relu, unused, ids;
    float wdata[20], cdata[5];
};

/* x (2,3,4) · w (4,5) + c (5) -> relu; outputs: relu, x itself, relu again (a second name). */
static void build_small(struct small_graph *s) {
    struct tr_error err = {0};
    memset(s, 0, sizeof *s);
    assert_int_equal(tr_graph_init(&s->g, &err), TR_OK);
    for (int i = 0; i < 20; i++) s->wdata[i] = 0.1f * (float)(i + 1);
    for (int i = 0; i < 5; i++) s->cdata[i] = -0.5f + 0.2f * (float)i;
    s->x = tr_input(s->g, "x", TR_DTYPE_F32, 3, S(2, 3, 4));
    s->ids = tr_input(s->g, "ids", TR_DTYPE_I32, 1, S(3)); /* fed, never read */
    s->w = tr_param(s->g, "w", TR_DTYPE_F32, 2, S(4, 5), 0.0f, 0.02f);
    s->c = tr_const(s->g, "c", TR_DTYPE_F32, 1, S(5), s->cdata);
    s->mm = tr_matmul(s->g, s->x, s->w, 0, 0);
    s->unused = tr_unary(s->g, TR_OP_TANH, s->mm);
    s->add = tr_add(s->g, s->mm, s->c);
    s->relu = tr_unary(s->g, TR_OP_RELU, s->add);
    assert_int_equal(tr_graph_set_output(s->g, s->relu, "y"), TR_OK);
    assert_int_equal(tr_graph_set_output(s->g, s->x, "x_again"), TR_OK);
    assert_int_equal(tr_graph_set_output(s->g, s->relu, "y2"), TR_OK);
    assert_int_equal(tr_graph_bind_param(s->g, s->w, s->wdata, &err), TR_OK);
    assert_int_equal(tr_graph_status(s->g, &err), TR_OK);
}

static void test_pir_from_graph(void **state) {
    (void)state;
    struct small_graph s;
    build_small(&s);
    const struct tr_host_api *host = tr_host_api_get();
    struct tr_pir p;
    struct tr_error err = {0};
    assert_int_equal(tr_pir_from_graph(host, s.g, &p, &err), TR_OK);
    assert_int_equal(p.n, tr_graph_n_nodes(s.g));
    for (int i = 0; i < p.n; i++) {
        const struct tr_pir_node *d = &p.nodes[i];
        assert_int_equal(d->op, tr_node_op(s.g, i));
        assert_int_equal(d->n_in, tr_node_n_inputs(s.g, i));
        for (int j = 0; j < d->n_in; j++) assert_int_equal(d->in[j], tr_node_input(s.g, i, j));
        assert_int_equal(d->dtype, tr_node_dtype(s.g, i));
        assert_int_equal(d->ndim, tr_node_ndim(s.g, i));
        for (int j = 0; j < d->ndim; j++) assert_int_equal(d->shape[j], tr_node_shape(s.g, i)[j]);
        assert_memory_equal(&d->attrs, tr_node_attrs(s.g, i), sizeof d->attrs);
        assert_ptr_equal(d->data, tr_node_data(s.g, i));
        assert_string_equal(d->name, tr_node_name(s.g, i));
        assert_int_equal(d->graph_id, i);
        assert_int_equal(d->dead, 0);
    }
    assert_ptr_equal(p.nodes[s.w].data, s.wdata);
    assert_memory_equal(p.nodes[s.c].data, s.cdata, sizeof s.cdata);
    assert_int_equal(p.n_inputs, 2);
    assert_int_equal(p.inputs[0], s.x);
    assert_int_equal(p.inputs[1], s.ids);
    assert_int_equal(p.n_outputs, 3);
    assert_int_equal(p.outputs[0], s.relu);
    assert_int_equal(p.outputs[1], s.x);
    assert_int_equal(p.outputs[2], s.relu);
    assert_int_equal(p.nodes[s.relu].output_index, 0); /* the first of its two entries */
    assert_int_equal(p.nodes[s.x].output_index, 1);
    assert_int_equal(p.nodes[s.mm].output_index, -1);
    assert_int_equal(tr_pir_nbytes(&p.nodes[s.mm]), 2 * 3 * 5 * 4);
    assert_int_equal(tr_pir_numel(&p.nodes[s.w]), 20);

    int uses[64];
    tr_pir_count_uses(&p, uses);
    assert_int_equal(uses[s.relu], 2); /* two output entries */
    assert_int_equal(uses[s.x], 2);    /* matmul + an output entry */
    assert_int_equal(uses[s.mm], 2);
    assert_int_equal(uses[s.unused], 0);
    assert_int_equal(uses[s.ids], 0);
    tr_pir_free(&p);

    /* a graph with no outputs is refused by name */
    struct tr_graph *g2 = NULL;
    assert_int_equal(tr_graph_init(&g2, &err), TR_OK);
    tr_input(g2, "a", TR_DTYPE_F32, 1, S(2));
    assert_int_equal(tr_pir_from_graph(host, g2, &p, &err), TR_ERR_INVALID);
    EXPECT_MSG(&err, "no outputs");
    tr_graph_free(g2);
    tr_graph_free(s.g);
}

static void test_pir_dead_and_compact(void **state) {
    (void)state;
    struct small_graph s;
    build_small(&s);
    struct tr_pir p;
    struct tr_error err = {0};
    assert_int_equal(tr_pir_from_graph(tr_host_api_get(), s.g, &p, &err), TR_OK);
    int n0 = p.n;

    /* a backend-made node appended at the end, read by nothing: dead too */
    struct tr_pir_node extra = p.nodes[s.relu];
    extra.in[0] = s.relu;
    extra.graph_id = -1;
    extra.output_index = -1;
    int e = tr_pir_append(&p, &extra);
    assert_int_equal(e, n0);
    struct tr_pir_node badn = extra;
    badn.in[0] = p.n + 3;
    assert_int_equal(tr_pir_append(&p, &badn), -1);

    /* only the tanh nobody reads and the appended node die; the unused INPUT keeps its slot */
    assert_int_equal(tr_pir_mark_dead(&p), 2);
    assert_true(p.nodes[s.unused].dead);
    assert_true(p.nodes[e].dead);
    assert_false(p.nodes[s.ids].dead);
    assert_int_equal(tr_pir_mark_dead(&p), 0);

    int remap[64];
    int n_before = p.n;
    assert_int_equal(tr_pir_compact(&p, remap, &err), TR_OK);
    assert_int_equal(p.n, n_before - 2);
    assert_int_equal(remap[s.unused], -1);
    assert_int_equal(remap[e], -1);
    int next = 0;
    for (int i = 0; i < n_before; i++)
        if (remap[i] >= 0) assert_int_equal(remap[i], next++);
    assert_int_equal(next, p.n);
    for (int i = 0; i < n_before; i++) {
        if (remap[i] < 0) continue;
        const struct tr_pir_node *d = &p.nodes[remap[i]];
        assert_int_equal(d->graph_id, i);
        assert_string_equal(d->name, tr_node_name(s.g, i));
        for (int j = 0; j < d->n_in; j++) {
            assert_int_equal(d->in[j], remap[tr_node_input(s.g, i, j)]);
            assert_true(d->in[j] < remap[i]);
        }
    }
    assert_int_equal(p.inputs[0], remap[s.x]);
    assert_int_equal(p.inputs[1], remap[s.ids]);
    assert_int_equal(p.outputs[0], remap[s.relu]);
    assert_int_equal(p.outputs[1], remap[s.x]);
    assert_int_equal(p.outputs[2], remap[s.relu]);
    assert_int_equal(p.nodes[remap[s.relu]].output_index, 0);
    assert_int_equal(p.nodes[remap[s.x]].output_index, 1);

    /* a dead output is a bug, and p is left as it was */
    int n_now = p.n, relu = remap[s.relu];
    p.nodes[relu].dead = 1;
    assert_int_equal(tr_pir_compact(&p, NULL, &err), TR_ERR_INTERNAL);
    EXPECT_MSG(&err, "output 0", "dead");
    assert_int_equal(p.n, n_now);
    assert_int_equal(p.outputs[0], relu);
    p.nodes[relu].dead = 0;

    /* a live node reading a dead one is a bug */
    int add = remap[s.add];
    p.nodes[add].dead = 1;
    assert_int_equal(tr_pir_compact(&p, NULL, &err), TR_ERR_INTERNAL);
    EXPECT_MSG(&err, "reads node");
    p.nodes[add].dead = 0;
    assert_int_equal(tr_pir_compact(&p, NULL, &err), TR_OK);
    assert_int_equal(p.n, n_now);

    /* folded data handed over is freed with the pir (ASan's leak check sees it) */
    void *mem = malloc(100);
    assert_int_equal(tr_pir_own(&p, mem, &err), TR_OK);
    tr_pir_free(&p);
    assert_int_equal(p.n, 0);
    tr_graph_free(s.g);
}

TR_TEST_MAIN(NULL, NULL, test_plan_random, test_plan_chain_and_gaps, test_plan_bad_args, test_verify_catches_overlap,
             test_pir_from_graph, test_pir_dead_and_compact)
