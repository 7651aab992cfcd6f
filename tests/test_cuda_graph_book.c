/* The CUDA graph bookkeeping, no GPU needed (plugins/kernels/cuda/host/graph_book.h): the
 * whole step flow (lookup, capture, update or instantiate, commit, launch) run on fake
 * graph operations that record what was asked of them. Checked: a new signature is
 * captured once and replayed after; a new shape instantiates while the book has room and
 * updates a graph of the same topology in place when it is full or the graph is an
 * orphan; a refused update falls back to an instantiation and drops the refused graph;
 * the limit evicts the least recently used; a failing capture leaves nothing behind; the
 * counters; the public entry points' refusals on a context that is not cuda. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "testutil.h"
#include "../plugins/kernels/cuda/host/graph_book.h"
#include "trident/kernels.h"

/* ---- fakes: a graph carries the topology class of the step captured; an exec too ---- */

struct fake_graph {
    int topo_class;
};
struct fake_exec {
    int id;
    int topo_class;
    int launches;
};

static struct {
    int live_execs, live_graphs, next_id;
    int captures, instantiations, updates_tried, update_refuse, launches, destroyed;
    struct fake_exec *last_launched;
} F;

struct fake_step {
    int topo_class;
    int runs;
    int fail;
};

static int fake_capture(struct tr_kernels *k, tr_cuda_step_fn step, void *user, void **graph, struct tr_error *err) {
    int rc = step(k, user, err);
    if (rc != TR_OK) return rc;
    struct fake_graph *g = malloc(sizeof *g);
    assert_non_null(g);
    g->topo_class = ((struct fake_step *)user)->topo_class;
    F.live_graphs++;
    F.captures++;
    *graph = g;
    return TR_OK;
}

static int fake_instantiate(void *graph, void **exec, struct tr_error *err) {
    (void)err;
    struct fake_exec *e = calloc(1, sizeof *e);
    assert_non_null(e);
    e->id = ++F.next_id;
    e->topo_class = ((struct fake_graph *)graph)->topo_class;
    F.live_execs++;
    F.instantiations++;
    *exec = e;
    return TR_OK;
}

static int fake_update(void *exec, void *graph, struct tr_error *err) {
    struct fake_exec *e = exec;
    F.updates_tried++;
    if (F.update_refuse || e->topo_class != ((struct fake_graph *)graph)->topo_class)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "fake update refused");
    return TR_OK;
}

static int fake_launch(struct tr_kernels *k, void *exec, struct tr_error *err) {
    (void)k, (void)err;
    struct fake_exec *e = exec;
    e->launches++;
    F.launches++;
    F.last_launched = e;
    return TR_OK;
}

static void fake_graph_destroy(void *graph) {
    free(graph);
    F.live_graphs--;
}

static void fake_destroy(void *user, void *exec) {
    (void)user;
    free(exec);
    F.live_execs--;
    F.destroyed++;
}

static const struct tr_cuda_graph_ops fake_ops = {
    .capture = fake_capture,
    .instantiate = fake_instantiate,
    .update = fake_update,
    .launch = fake_launch,
    .graph_destroy = fake_graph_destroy,
};

static int fake_step_fn(struct tr_kernels *k, void *user, struct tr_error *err) {
    (void)k;
    struct fake_step *s = user;
    s->runs++;
    if (s->fail) return tr_error_set(err, TR_ERR_DEVICE, "fake kernel refused during capture");
    return TR_OK;
}

static struct tr_cuda_graph_book *book_new(int max) {
    memset(&F, 0, sizeof F);
    struct tr_cuda_graph_book *b = NULL;
    struct tr_error err = {0};
    if (tr_cuda_graph_book_init(&b, max, fake_destroy, NULL, &err) != TR_OK) fail_msg("%s", err.msg);
    return b;
}

/* Free the book: every graph it instantiated is destroyed with it. */
static void book_free(struct tr_cuda_graph_book *b) {
    tr_cuda_graph_book_free(b);
    assert_int_equal(F.live_execs, 0);
}

/* One step of owner with input shape (batch, seq); returns whether it captured. */
static int step(struct tr_cuda_graph_book *b, uint64_t owner, int64_t batch, int64_t seq, struct fake_step *s) {
    int64_t sig[3] = {2, batch, seq};
    uint64_t topo = tr_cuda_graph_hash(TR_CUDA_GRAPH_HASH_SEED, &s->topo_class, sizeof s->topo_class);
    int captured = -1;
    struct tr_error err = {0};
    if (tr_cuda_graph_book_step(b, &fake_ops, NULL, owner, sig, 3, topo, fake_step_fn, s, &captured, &err) != TR_OK)
        fail_msg("step (owner %llu, %lld x %lld): %s", (unsigned long long)owner, (long long)batch, (long long)seq,
                 err.msg);
    assert_true(captured == 0 || captured == 1);
    assert_int_equal(F.live_graphs, 0); /* a captured graph is destroyed once instantiated or applied */
    return captured;
}

static struct tr_cuda_graph_stats stats(const struct tr_cuda_graph_book *b) {
    struct tr_cuda_graph_stats st;
    tr_cuda_graph_book_get_stats(b, &st);
    return st;
}

/* b's stats hold every "field=value" of spec (separated by spaces); the rest unchecked. */
static void expect_stats(const struct tr_cuda_graph_book *b, const char *spec) {
    const struct tr_cuda_graph_stats st = stats(b);
    const struct {
        const char *name;
        long long v;
    } f[] = {{"lookups", (long long)st.lookups},     {"replays", (long long)st.replays},
             {"captures", (long long)st.captures},   {"instantiations", (long long)st.instantiations},
             {"updates", (long long)st.updates},     {"update_failures", (long long)st.update_failures},
             {"evictions", (long long)st.evictions}, {"orphaned", (long long)st.orphaned},
             {"n_entries", st.n_entries},            {"max_entries", st.max_entries}};
    for (const char *at = spec; *at;) {
        char name[32];
        long long want;
        int used = 0;
        if (sscanf(at, " %31[a-z_]=%lld%n", name, &want, &used) != 2) fail_msg("bad spec at '%s'", at);
        at += used;
        size_t i = 0;
        while (i < sizeof f / sizeof f[0] && strcmp(f[i].name, name) != 0) i++;
        if (i == sizeof f / sizeof f[0]) fail_msg("no stat '%s'", name);
        if (f[i].v != want) fail_msg("%s is %lld, expected %lld", name, f[i].v, want);
        while (*at == ' ') at++;
    }
}

static void test_capture_once_then_replay(void **state) {
    (void)state;
    struct tr_cuda_graph_book *b = book_new(4);
    struct fake_step s = {.topo_class = 1};
    assert_int_equal(step(b, 7, 8, 128, &s), 1);
    assert_int_equal(s.runs, 1);
    struct fake_exec *first = F.last_launched;
    assert_non_null(first);
    for (int i = 0; i < 5; i++) assert_int_equal(step(b, 7, 8, 128, &s), 0);
    assert_int_equal(s.runs, 1); /* replays never run the step's calls again */
    assert_ptr_equal(F.last_launched, first);
    assert_int_equal(first->launches, 6);
    expect_stats(b, "lookups=6 captures=1 replays=5 instantiations=1 updates=0 n_entries=1 max_entries=4");
    book_free(b);
}

static void test_new_shape_with_room_instantiates(void **state) {
    (void)state;
    struct tr_cuda_graph_book *b = book_new(4);
    struct fake_step s = {.topo_class = 1};
    step(b, 7, 8, 128, &s);
    struct fake_exec *a = F.last_launched;
    assert_int_equal(step(b, 7, 8, 256, &s), 1);
    struct fake_exec *c = F.last_launched;
    assert_ptr_not_equal(a, c);
    assert_int_equal(F.updates_tried, 0); /* room left: the other shape keeps its graph */
    /* both shapes replay from now on, alternating */
    for (int i = 0; i < 3; i++) {
        assert_int_equal(step(b, 7, 8, 128, &s), 0);
        assert_ptr_equal(F.last_launched, a);
        assert_int_equal(step(b, 7, 8, 256, &s), 0);
        assert_ptr_equal(F.last_launched, c);
    }
    expect_stats(b, "captures=2 instantiations=2 replays=6 n_entries=2");
    /* the same shapes under another owner are another program's: captured anew */
    assert_int_equal(step(b, 8, 8, 128, &s), 1);
    book_free(b);
}

static void test_full_book_updates_lru_of_same_topology(void **state) {
    (void)state;
    struct tr_cuda_graph_book *b = book_new(2);
    struct fake_step s = {.topo_class = 1};
    step(b, 7, 1, 16, &s);
    struct fake_exec *e16 = F.last_launched;
    step(b, 7, 1, 32, &s);
    struct fake_exec *e32 = F.last_launched;
    step(b, 7, 1, 16, &s); /* 16 used last: 32 is the least recently used */
    assert_int_equal(step(b, 7, 1, 64, &s), 1);
    assert_int_equal(F.updates_tried, 1);
    assert_ptr_equal(F.last_launched, e32); /* 32's graph now serves 64, updated in place */
    assert_int_equal(F.instantiations, 2);
    assert_int_equal(F.destroyed, 0);
    assert_int_equal(step(b, 7, 1, 16, &s), 0);
    assert_ptr_equal(F.last_launched, e16);
    assert_int_equal(step(b, 7, 1, 32, &s), 1); /* its graph was given to 64 */
    expect_stats(b, "updates=2 instantiations=2 n_entries=2 evictions=0");
    book_free(b);
}

static void test_orphan_is_updated_first(void **state) {
    (void)state;
    struct tr_cuda_graph_book *b = book_new(4);
    struct fake_step s = {.topo_class = 3};
    step(b, 1, 4, 64, &s);
    struct fake_exec *old = F.last_launched;
    assert_int_equal(tr_cuda_graph_book_drop_owner(b, 1), 1);
    assert_int_equal(tr_cuda_graph_book_drop_owner(b, 1), 0);
    /* the freed program's graph is never replayed, even for an identical signature ... */
    assert_int_equal(step(b, 2, 4, 64, &s), 1);
    /* ... but it is updated in place rather than a new one instantiated, room or not */
    assert_ptr_equal(F.last_launched, old);
    assert_int_equal(F.instantiations, 1);
    expect_stats(b, "orphaned=1 updates=1 n_entries=1");
    assert_int_equal(step(b, 2, 4, 64, &s), 0);
    book_free(b);
}

static void test_refused_update_instantiates_and_drops(void **state) {
    (void)state;
    struct tr_cuda_graph_book *b = book_new(1);
    struct fake_step s = {.topo_class = 1};
    step(b, 7, 2, 16, &s);
    struct fake_exec *first = F.last_launched;
    F.update_refuse = 1; /* e.g. cuBLASLt chose another kernel for the new shape */
    assert_int_equal(step(b, 7, 2, 48, &s), 1);
    assert_int_equal(F.updates_tried, 1);
    assert_ptr_not_equal(F.last_launched, first);
    assert_int_equal(F.destroyed, 1); /* the refused graph is not trusted again */
    expect_stats(b, "update_failures=1 updates=0 instantiations=2 evictions=1 n_entries=1");
    assert_int_equal(F.live_execs, 1);
    assert_int_equal(step(b, 7, 2, 48, &s), 0);
    book_free(b);
}

static void test_limit_evicts_lru(void **state) {
    (void)state;
    struct tr_cuda_graph_book *b = book_new(2);
    struct fake_step s1 = {.topo_class = 1}, s2 = {.topo_class = 2}, s3 = {.topo_class = 3};
    step(b, 7, 1, 1, &s1);
    step(b, 7, 1, 2, &s2);
    step(b, 7, 1, 1, &s1); /* shape 2 becomes the least recently used */
    assert_int_equal(step(b, 7, 1, 3, &s3), 1);
    assert_int_equal(F.updates_tried, 0); /* no graph of topology 3 to update */
    assert_int_equal(F.destroyed, 1);
    expect_stats(b, "evictions=1 n_entries=2");
    assert_int_equal(step(b, 7, 1, 1, &s1), 0); /* kept */
    assert_int_equal(step(b, 7, 1, 3, &s3), 0); /* kept */
    assert_int_equal(step(b, 7, 1, 2, &s2), 1); /* evicted: captured again */
    assert_int_equal(F.live_execs, 2);
    book_free(b);
}

static void test_rebound_step_replaces_its_graph(void **state) {
    (void)state;
    struct tr_cuda_graph_book *b = book_new(4);
    struct fake_step s1 = {.topo_class = 1}, s2 = {.topo_class = 2};
    step(b, 7, 8, 8, &s1);
    struct fake_exec *old = F.last_launched;
    /* same owner and shapes, another call sequence: the old graph is stale */
    assert_int_equal(step(b, 7, 8, 8, &s2), 1);
    assert_ptr_not_equal(F.last_launched, old);
    assert_int_equal(F.destroyed, 1);
    assert_int_equal(stats(b).n_entries, 1);
    assert_int_equal(step(b, 7, 8, 8, &s2), 0);
    book_free(b);
}

static void test_failed_capture_leaves_nothing(void **state) {
    (void)state;
    struct tr_cuda_graph_book *b = book_new(4);
    struct fake_step s = {.topo_class = 1, .fail = 1};
    int64_t sig[2] = {3, 4};
    int captured = -1;
    struct tr_error err = {0};
    int rc = tr_cuda_graph_book_step(b, &fake_ops, NULL, 7, sig, 2, 99, fake_step_fn, &s, &captured, &err);
    assert_int_equal(rc, TR_ERR_DEVICE);
    assert_non_null(strstr(err.msg, "fake kernel refused"));
    assert_int_equal(captured, 0);
    assert_int_equal(F.live_execs + F.live_graphs, 0);
    assert_int_equal(stats(b).n_entries, 0);
    s.fail = 0; /* the next step captures normally */
    assert_int_equal(tr_cuda_graph_book_step(b, &fake_ops, NULL, 7, sig, 2, 99, fake_step_fn, &s, &captured, &err),
                     TR_OK);
    assert_int_equal(captured, 1);
    book_free(b);
}

static void test_bad_arguments(void **state) {
    (void)state;
    struct tr_cuda_graph_book *b = book_new(2);
    struct tr_cuda_graph_plan plan;
    struct tr_error err = {0};
    int64_t sig[TR_CUDA_GRAPH_SIG_MAX + 1] = {0};
    assert_int_equal(tr_cuda_graph_book_lookup(b, 0, sig, 1, 1, &plan, &err), TR_ERR_INVALID);
    assert_non_null(strstr(err.msg, "owner 0"));
    assert_int_equal(tr_cuda_graph_book_lookup(b, 1, sig, TR_CUDA_GRAPH_SIG_MAX + 1, 1, &plan, &err), TR_ERR_INVALID);
    assert_non_null(strstr(err.msg, "65 words"));
    assert_int_equal(tr_cuda_graph_book_lookup(b, 1, sig, TR_CUDA_GRAPH_SIG_MAX, 1, &plan, &err), TR_OK);
    assert_int_equal(plan.action, TR_CUDA_GRAPH_CAPTURE);
    /* an update the plan did not offer */
    int dummy;
    assert_int_equal(tr_cuda_graph_book_commit(b, &plan, 1, sig, 1, 1, &dummy, TR_CUDA_GRAPH_UPDATED, 0, &err),
                     TR_ERR_INVALID);
    assert_int_equal(stats(b).n_entries, 0);
    struct tr_cuda_graph_book *none = NULL;
    assert_int_equal(tr_cuda_graph_book_init(&none, 2, NULL, NULL, &err), TR_ERR_INVALID);
    assert_null(none);
    tr_cuda_graph_book_free(b);
    tr_cuda_graph_book_free(NULL);
}

static void test_hash(void **state) {
    (void)state;
    int a[3] = {1, 2, 3}, c[3] = {1, 2, 4};
    uint64_t ha = tr_cuda_graph_hash(TR_CUDA_GRAPH_HASH_SEED, a, sizeof a);
    assert_true(ha != tr_cuda_graph_hash(TR_CUDA_GRAPH_HASH_SEED, c, sizeof c));
    /* chaining is hashing the concatenation */
    uint64_t h = tr_cuda_graph_hash(TR_CUDA_GRAPH_HASH_SEED, a, sizeof a[0]);
    h = tr_cuda_graph_hash(h, a + 1, 2 * sizeof a[0]);
    assert_true(h == ha);
    assert_true(tr_cuda_graph_hash(TR_CUDA_GRAPH_HASH_SEED, a, 0) == TR_CUDA_GRAPH_HASH_SEED);
}

/* The public entry points: the book works on every build; graphs need a cuda context. */
static void test_public_entry_points(void **state) {
    (void)state;
    struct tr_cuda_graph_book *b = NULL;
    struct tr_error err = {0};
    assert_int_equal(tr_kernels_cuda_graphs_init(&b, 0, &err), TR_OK);
    struct tr_cuda_graph_stats st;
    tr_kernels_cuda_graphs_stats(b, &st);
    assert_int_equal(st.max_entries, TR_CUDA_GRAPH_BOOK_DEFAULT_MAX);
    struct tr_kernels *k = NULL;
    if (tr_kernels_init(&k, TR_DEVICE_CPU, 0, &err) != TR_OK) fail_msg("%s", err.msg);
    struct fake_step s = {.topo_class = 1};
    int64_t sig[1] = {1};
    int captured = -1;
    int rc = tr_kernels_cuda_graph_step(k, b, 1, sig, 1, 1, fake_step_fn, &s, &captured, &err);
    assert_int_not_equal(rc, TR_OK);
    assert_int_equal(captured, 0);
    assert_int_equal(s.runs, 0);
    const char *want = tr_kernels_cuda_built() ? "not a cuda context" : "built without CUDA";
    if (!strstr(err.msg, want)) fail_msg("expected '%s' in: %s", want, err.msg);
    assert_int_not_equal(tr_kernels_cuda_capture_begin(k, &err), TR_OK);
    tr_kernels_cuda_graphs_drop_owner(b, 1);
    tr_kernels_free(k);
    tr_kernels_cuda_graphs_free(b);
}

TR_TEST_MAIN(NULL, NULL, test_capture_once_then_replay, test_new_shape_with_room_instantiates,
             test_full_book_updates_lru_of_same_topology, test_orphan_is_updated_first,
             test_refused_update_instantiates_and_drops, test_limit_evicts_lru, test_rebound_step_replaces_its_graph,
             test_failed_capture_leaves_nothing, test_bad_arguments, test_hash, test_public_entry_points)
