/* The simplification passes (passes.h), each on its own, then all together. Structure is
 * checked on the rewritten pir; values by running the original and the rewritten pir
 * through a small interpreter (tr_kernels_run node by node) on the same random inputs. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "passes.h"
#include "backendutil.h"
#include "testutil.h"
#include "trident/graph.h"
#include "trident/loader.h"

#define S(...) ((const int64_t[]){__VA_ARGS__})
#define MAX_OUT 16

static void out(struct tr_graph *g, int id, const char *name) {
    struct tr_error err = {0};
    assert_int_equal(tr_graph_set_output(g, id, name), TR_OK);
    if (tr_graph_status(g, &err)) fail_msg("graph: %s", err.msg);
}

/* Each id an output of g named as its variable: OUTS(g, a, b) is out(g, a, "a") then
 * out(g, b, "b"). */
#define OUTS(g, ...) \
    outs((g), #__VA_ARGS__, (const int[]){__VA_ARGS__}, (int)(sizeof((const int[]){__VA_ARGS__}) / sizeof(int)))
static void outs(struct tr_graph *g, const char *names, const int *ids, int n) {
    for (int i = 0; i < n; i++) {
        names += strspn(names, ", ");
        int len = (int)strcspn(names, ", ");
        char name[32];
        snprintf(name, sizeof name, "%.*s", len, names);
        out(g, ids[i], name);
        names += len;
    }
}

static void to_pir(struct tr_graph *g, struct tr_pir *p) {
    struct tr_error err = {0};
    if (tr_graph_status(g, &err)) fail_msg("graph: %s", err.msg);
    if (tr_pir_from_graph(tr_host_api_get(), g, p, &err)) fail_msg("pir: %s", err.msg);
}

/* The graph as two pirs: ref stays as built, p is the one the passes rewrite. */
static void two_pirs(struct tr_graph *g, struct tr_pir *ref, struct tr_pir *p) {
    to_pir(g, ref);
    to_pir(g, p);
}

/* Random values (normal, scale) bound to g's param id; the caller frees them after g. */
static struct tr_tensor bound_randn(struct tr_graph *g, int id, uint64_t seed, double scale) {
    struct tr_tensor t = tr_node_tensor(g, id);
    t = tr_test_tensor(t.dtype, t.ndim, t.shape);
    tr_test_randn(&t, seed, scale);
    struct tr_error err = {0};
    if (tr_graph_bind_param(g, id, t.data, &err) != TR_OK) fail_msg("bind: %s", err.msg);
    return t;
}

enum pass { PASS_CSE, PASS_DCE, PASS_CONSTFOLD, PASS_SIMPLIFY };

/* One pass over p: it succeeds and reports `want` changes. */
static void expect_pass(struct tr_pir *p, enum pass pass, int want) {
    struct tr_error err = {0};
    int changed = -1, rc = pass == PASS_CSE         ? tr_pass_cse(p, &changed, &err)
                         : pass == PASS_DCE         ? tr_pass_dce(p, &changed, &err)
                         : pass == PASS_CONSTFOLD   ? tr_pass_constfold(p, tr_test_k, &changed, &err)
                                                    : tr_pass_simplify(p, &changed, &err);
    if (rc != TR_OK) fail_msg("pass %d: %s", pass, err.msg);
    assert_int_equal(changed, want);
}

static void free_pirs(struct tr_graph *g, struct tr_pir *ref, struct tr_pir *p) {
    tr_pir_free(ref);
    tr_pir_free(p);
    tr_graph_free(g);
}

/* Random inputs for a pir's INPUT nodes (floats normal, ints in [0,4)). */
struct feed {
    int n;
    struct tr_tensor t[8];
};

static void make_feed(const struct tr_pir *p, struct feed *f, uint64_t seed) {
    f->n = p->n_inputs;
    assert_true(f->n <= 8);
    for (int i = 0; i < f->n; i++) {
        const struct tr_pir_node *d = &p->nodes[p->inputs[i]];
        f->t[i] = tr_test_tensor((enum tr_dtype)d->dtype, d->ndim, d->shape);
        tr_test_rand(&f->t[i], seed + (uint64_t)i, 1.0, 4);
    }
}

static void free_feed(struct feed *f) {
    for (int i = 0; i < f->n; i++) tr_test_tensor_free(&f->t[i]);
}

struct result {
    int n;
    int64_t numel[MAX_OUT];
    double *v[MAX_OUT];
};

/* Run every live node in order; outputs copied out as doubles. */
static void run_pir(const struct tr_pir *p, const struct feed *f, struct result *r) {
    struct tr_tensor *v = calloc((size_t)p->n, sizeof *v);
    char *mine = calloc((size_t)p->n, 1);
    assert_non_null(v);
    assert_non_null(mine);
    for (int i = 0; i < p->n; i++) {
        const struct tr_pir_node *d = &p->nodes[i];
        if (d->dead) continue;
        if (d->op == TR_OP_INPUT) {
            int slot = -1;
            for (int j = 0; j < p->n_inputs; j++)
                if (p->inputs[j] == i) slot = j;
            assert_true(slot >= 0 && slot < f->n);
            v[i] = f->t[slot];
        } else if (d->op == TR_OP_PARAM || d->op == TR_OP_CONST) {
            if (!d->data) fail_msg("node %d '%s' %s has no data", i, d->name, tr_op_name(d->op));
            assert_int_equal(tr_tensor_make(&v[i], (void *)d->data, (enum tr_dtype)d->dtype, d->ndim, d->shape, NULL), TR_OK);
        } else {
            struct tr_tensor in[TR_PIR_MAX_IN];
            for (int j = 0; j < d->n_in; j++) {
                if (p->nodes[d->in[j]].dead) fail_msg("live node %d reads dead node %d", i, d->in[j]);
                in[j] = v[d->in[j]];
            }
            v[i] = tr_test_tensor((enum tr_dtype)d->dtype, d->ndim, d->shape);
            tr_test_poison(&v[i]);
            mine[i] = 1;
            struct tr_error err = {0};
            if (tr_kernels_run(tr_test_k, d->op, &d->attrs, d->n_in, in, &v[i], &err))
                fail_msg("node %d %s '%s': %s", i, tr_op_name(d->op), d->name, err.msg);
        }
    }
    assert_true(p->n_outputs <= MAX_OUT);
    r->n = p->n_outputs;
    for (int o = 0; o < p->n_outputs; o++) {
        assert_false(p->nodes[p->outputs[o]].dead);
        r->v[o] = tr_test_to_f64(&v[p->outputs[o]]);
        r->numel[o] = tr_tensor_numel(&v[p->outputs[o]]);
    }
    for (int i = 0; i < p->n; i++)
        if (mine[i]) tr_test_tensor_free(&v[i]);
    free(v);
    free(mine);
}

static void free_result(struct result *r) {
    for (int i = 0; i < r->n; i++) free(r->v[i]);
}

/* Both pirs compute the same outputs on the same inputs: ‖a−b‖/‖a‖ < tol per output. */
static void assert_same_values(const struct tr_pir *ref, const struct tr_pir *got, double tol) {
    struct feed f;
    make_feed(ref, &f, 42);
    assert_int_equal(got->n_inputs, ref->n_inputs);
    struct result a, b;
    run_pir(ref, &f, &a);
    run_pir(got, &f, &b);
    assert_int_equal(a.n, b.n);
    for (int o = 0; o < a.n; o++) {
        assert_int_equal(a.numel[o], b.numel[o]);
        double num = 0, den = 0;
        for (int64_t i = 0; i < a.numel[o]; i++) {
            if (!isfinite(b.v[o][i])) fail_msg("output %d element %lld is %g", o, (long long)i, b.v[o][i]);
            num += (a.v[o][i] - b.v[o][i]) * (a.v[o][i] - b.v[o][i]);
            den += a.v[o][i] * a.v[o][i];
        }
        double e = den > 0 ? sqrt(num / den) : sqrt(num);
        if (!(e < tol)) fail_msg("output %d: relative error %.3g >= %.3g", o, e, tol);
    }
    free_result(&a);
    free_result(&b);
    free_feed(&f);
}

static void compact(struct tr_pir *p, int *remap) {
    struct tr_error err = {0};
    if (tr_pir_compact(p, remap, &err)) fail_msg("compact: %s", err.msg);
}

/* ---- cse ---- */

static void test_cse(void **state) {
    (void)state;
    struct tr_graph *g = tr_test_graph_new();
    float ca[4] = {1, 2, 3, 4}, cb[4] = {1, 2, 3, 4}, cc[4] = {1, 2, 3, 4.5f}, wd[4] = {0.5f, -1, 2, 3};
    int x = tr_input(g, "x", TR_DTYPE_F32, 2, S(3, 4));
    int y = tr_input(g, "y", TR_DTYPE_F32, 2, S(3, 4));
    int a1 = tr_unary(g, TR_OP_TANH, x), a2 = tr_unary(g, TR_OP_TANH, x);
    int b1 = tr_unary(g, TR_OP_EXP, a1), b2 = tr_unary(g, TR_OP_EXP, a2); /* equal once a2 is a1 */
    int s1 = tr_scale(g, x, 2.0f, 0.0f), s2 = tr_scale(g, x, 3.0f, 0.0f); /* attrs differ */
    int t1 = tr_unary(g, TR_OP_TANH, y);                                   /* input differs */
    int c1 = tr_const(g, "c1", TR_DTYPE_F32, 1, S(4), ca);
    int c2 = tr_const(g, "c2", TR_DTYPE_F32, 1, S(4), cb);                 /* same bytes: merged */
    int c3 = tr_const(g, "c3", TR_DTYPE_F32, 1, S(4), cc);                 /* one value differs */
    int c4 = tr_const(g, "c4", TR_DTYPE_F32, 2, S(2, 2), ca);              /* same bytes, other shape */
    int p1 = tr_param(g, "p1", TR_DTYPE_F32, 1, S(4), 0, 1);
    int p2 = tr_param(g, "p2", TR_DTYPE_F32, 1, S(4), 0, 1);               /* same data: still two */
    int d1 = tr_add(g, x, c1), d2 = tr_add(g, x, c2), d3 = tr_add(g, x, c3);
    int e1 = tr_add(g, x, p1), e2 = tr_add(g, x, p2);
    struct tr_error err = {0};
    assert_int_equal(tr_graph_bind_param(g, p1, wd, &err), TR_OK);
    assert_int_equal(tr_graph_bind_param(g, p2, wd, &err), TR_OK);
    const int outs[] = {b1, b2, s1, s2, t1, d1, d2, d3, c4, e1, e2};
    char name[16];
    for (int i = 0; i < 11; i++) {
        snprintf(name, sizeof name, "o%d", i);
        out(g, outs[i], name);
    }
    struct tr_pir ref, p;
    two_pirs(g, &ref, &p);
    expect_pass(&p, PASS_CSE, 4); /* a2, b2, c2, d2 */
    const int dead[] = {a2, b2, c2, d2};
    for (int i = 0; i < 4; i++)
        if (!p.nodes[dead[i]].dead) fail_msg("node %d should have been merged", dead[i]);
    const int kept[] = {a1, b1, s1, s2, t1, c1, c3, c4, p1, p2, d1, d3, e1, e2, x, y};
    for (int i = 0; i < 16; i++)
        if (p.nodes[kept[i]].dead) fail_msg("node %d '%s' was merged but differs", kept[i], p.nodes[kept[i]].name);
    assert_int_equal(p.nodes[b1].in[0], a1);
    assert_int_equal(p.outputs[1], b1); /* b2's output entry now reads b1 */
    assert_int_equal(p.outputs[6], d1);
    assert_int_equal(p.nodes[b1].output_index, 0);
    assert_int_equal(p.nodes[e2].in[1], p2);

    expect_pass(&p, PASS_CSE, 0);
    compact(&p, NULL);
    assert_int_equal(p.n, ref.n - 4);
    assert_same_values(&ref, &p, 1e-7);
    free_pirs(g, &ref, &p);
}

/* ---- dce ---- */

static void test_dce(void **state) {
    (void)state;
    struct tr_graph *g = tr_test_graph_new();
    int x = tr_input(g, "x", TR_DTYPE_F32, 2, S(2, 5));
    int y = tr_input(g, "y", TR_DTYPE_F32, 2, S(2, 5)); /* fed but unread: keeps its slot */
    int w = tr_param(g, "w", TR_DTYPE_F32, 1, S(5), 0, 1); /* unread weight: dead */
    int a = tr_unary(g, TR_OP_TANH, x);
    int dead1 = tr_unary(g, TR_OP_EXP, a);
    int dead2 = tr_add(g, dead1, w);
    int r = tr_unary(g, TR_OP_RELU, a);
    OUTS(g, r, x);
    struct tr_pir ref, p;
    two_pirs(g, &ref, &p);
    expect_pass(&p, PASS_DCE, 3);
    assert_true(p.nodes[w].dead && p.nodes[dead1].dead && p.nodes[dead2].dead);
    assert_false(p.nodes[x].dead || p.nodes[y].dead || p.nodes[a].dead || p.nodes[r].dead);
    expect_pass(&p, PASS_DCE, 0);
    int remap[16];
    compact(&p, remap);
    assert_int_equal(p.n, ref.n - 3);
    assert_int_equal(p.n_inputs, 2);
    assert_int_equal(p.inputs[1], remap[y]);
    /* the dead weight has no data bound: running it would fail, so the value check also
     * proves it is gone */
    ref.nodes[w].dead = ref.nodes[dead1].dead = ref.nodes[dead2].dead = 1;
    assert_same_values(&ref, &p, 1e-7);
    free_pirs(g, &ref, &p);
}

/* ---- constant folding ---- */

static void test_constfold(void **state) {
    (void)state;
    struct tr_graph *g = tr_test_graph_new();
    struct tr_tensor t1 = tr_test_tensor(TR_DTYPE_F32, 2, S(4, 8)), t2 = tr_test_tensor(TR_DTYPE_F32, 2, S(8, 3));
    tr_test_randn(&t1, 1, 1.0);
    tr_test_randn(&t2, 2, 1.0);
    float small[2049];
    for (int i = 0; i < 2049; i++) small[i] = (float)i * 1e-3f;
    int c1 = tr_const(g, "c1", TR_DTYPE_F32, 2, S(4, 8), t1.data);
    int c2 = tr_const(g, "c2", TR_DTYPE_F32, 2, S(8, 3), t2.data);
    int x = tr_input(g, "x", TR_DTYPE_F32, 1, S(12));
    int pw = tr_param(g, "pw", TR_DTYPE_F32, 1, S(12), 0, 1);
    struct tr_tensor tw = bound_randn(g, pw, 3, 1.0);
    int m = tr_matmul(g, c1, c2, 0, 0);
    int t = tr_unary(g, TR_OP_TANH, m);
    int r = tr_reshape(g, t, 1, S(12));
    int o1 = tr_add(g, x, r);      /* reads an INPUT: stays */
    int o2 = tr_mul(g, r, pw);    /* reads a PARAM: stays */
    int o4 = tr_scale(g, c1, 2.0f, 1.0f); /* an output, folded */
    /* (2049,1) + (1,2048) is 2049·2048·4 bytes > 16 MiB: too big to fold */
    int ca = tr_const(g, "ca", TR_DTYPE_F32, 2, S(2049, 1), small);
    int cb = tr_const(g, "cb", TR_DTYPE_F32, 2, S(1, 2048), small);
    int big = tr_add(g, ca, cb);
    int o3 = tr_reduce(g, TR_OP_SUM, big, 0, 0);
    OUTS(g, o1, o2, o3, o4);
    struct tr_pir ref, p;
    two_pirs(g, &ref, &p);
    expect_pass(&p, PASS_CONSTFOLD, 4); /* m, t, r, o4 */
    const int folded[] = {m, t, r, o4};
    for (int i = 0; i < 4; i++) {
        const struct tr_pir_node *d = &p.nodes[folded[i]];
        if (d->op != TR_OP_CONST || d->n_in != 0 || !d->data) fail_msg("node %d was not folded", folded[i]);
        assert_int_equal(d->graph_id, folded[i]); /* keeps its id and its name */
        assert_string_equal(d->name, tr_node_name(g, folded[i]));
    }
    assert_ptr_equal(p.nodes[r].data, p.nodes[t].data); /* a reshape shares its input's bytes */
    assert_int_equal(p.nodes[o1].op, TR_OP_ADD);
    assert_int_equal(p.nodes[o2].op, TR_OP_MUL);
    assert_int_equal(p.nodes[big].op, TR_OP_ADD);
    assert_int_equal(p.nodes[o3].op, TR_OP_SUM);
    /* the constants only the folded nodes read are dead now; c1 too (m and o4 folded) */
    assert_true(p.nodes[c2].dead && p.nodes[c1].dead && p.nodes[m].dead && p.nodes[t].dead);
    assert_false(p.nodes[r].dead);
    compact(&p, NULL);
    /* r's bytes live in t's folded buffer, which the pir keeps after t is gone */
    assert_same_values(&ref, &p, 1e-6);
    expect_pass(&p, PASS_CONSTFOLD, 0);
    struct tr_error err = {0};
    int changed = -1;
    assert_int_equal(tr_pass_constfold(&p, NULL, &changed, &err), TR_ERR_INVALID);
    free_pirs(g, &ref, &p);
    tr_test_tensor_free(&t1);
    tr_test_tensor_free(&t2);
    tr_test_tensor_free(&tw);
}

/* ---- simplify ---- */

static void test_simplify_transpose_into_matmul(void **state) {
    (void)state;
    struct tr_graph *g = tr_test_graph_new();
    int x = tr_input(g, "x", TR_DTYPE_F32, 3, S(2, 4, 6));
    int y = tr_input(g, "y", TR_DTYPE_F32, 3, S(2, 7, 6));
    int a = tr_input(g, "a", TR_DTYPE_F32, 2, S(5, 3));
    int b = tr_input(g, "b", TR_DTYPE_F32, 2, S(5, 2));
    int z = tr_input(g, "z", TR_DTYPE_F32, 4, S(2, 3, 4, 6));
    int w = tr_param(g, "w", TR_DTYPE_F32, 2, S(8, 6), 0, 1);
    struct tr_tensor tw = bound_randn(g, w, 7, 1.0);
    int xt = tr_transpose(g, x, 3, (const int[]){0, 2, 1});                  /* (2,6,4) */
    int yt = tr_transpose(g, y, 3, (const int[]){0, 2, 1});                  /* (2,6,7) */
    int mm = tr_matmul(g, xt, yt, 1, 0);                                     /* (2,4,7) */
    int wt = tr_transpose(g, w, 2, (const int[]){1, 0});                     /* (6,8) */
    int mm2 = tr_matmul(g, x, wt, 0, 0);                                     /* (2,4,8) */
    int at = tr_transpose(g, a, 2, (const int[]){1, 0});                     /* (3,5), read twice */
    int mm3 = tr_matmul(g, at, b, 0, 0);                                     /* (3,2) */
    int ar = tr_unary(g, TR_OP_RELU, at);
    int zt = tr_transpose(g, z, 4, (const int[]){1, 0, 2, 3});               /* not the last two */
    int mm4 = tr_matmul(g, zt, wt, 0, 0);                                    /* (3,2,4,8) */
    OUTS(g, mm, mm2, mm3, ar, mm4);
    struct tr_pir ref, p;
    two_pirs(g, &ref, &p);
    expect_pass(&p, PASS_SIMPLIFY, 5); /* xt, yt into mm; wt into mm2 and mm4; at into mm3 */
    const struct tr_pir_node *n = &p.nodes[mm];
    assert_true(n->in[0] == x && n->in[1] == y && n->attrs.ints[0] == 0 && n->attrs.ints[1] == 1);
    n = &p.nodes[mm2];
    assert_true(n->in[0] == x && n->in[1] == w && n->attrs.ints[0] == 0 && n->attrs.ints[1] == 1);
    n = &p.nodes[mm3];
    assert_true(n->in[0] == a && n->attrs.ints[0] == 1 && n->attrs.ints[1] == 0);
    n = &p.nodes[mm4];
    assert_true(n->in[0] == zt && n->attrs.ints[0] == 0);
    assert_true(p.nodes[xt].dead && p.nodes[yt].dead && p.nodes[wt].dead);
    assert_false(p.nodes[at].dead); /* relu still reads it */
    assert_false(p.nodes[zt].dead);
    int remap[32];
    compact(&p, remap);
    assert_int_equal(p.nodes[remap[ar]].in[0], remap[at]);
    assert_int_equal(p.nodes[remap[at]].op, TR_OP_TRANSPOSE);
    assert_same_values(&ref, &p, 1e-5);
    free_pirs(g, &ref, &p);
    tr_test_tensor_free(&tw);
}

static void test_simplify_identities(void **state) {
    (void)state;
    struct tr_graph *g = tr_test_graph_new();
    int x = tr_input(g, "x", TR_DTYPE_F32, 2, S(2, 6));
    int r1 = tr_reshape(g, x, 2, S(2, 6));        /* to its own shape: gone */
    int r2 = tr_reshape(g, r1, 2, S(3, 4));
    int r3 = tr_reshape(g, r2, 1, S(12));         /* reshape of reshape: reads x */
    int c = tr_cast(g, r3, TR_DTYPE_F32);         /* same dtype: gone */
    int s = tr_scale(g, c, 1.0f, 0.0f);           /* identity: gone */
    int tid = tr_transpose(g, s, 1, (const int[]){0});
    int u = tr_unary(g, TR_OP_TANH, tid);
    int s2 = tr_scale(g, x, 1.0f, 0.5f);          /* not an identity */
    int cb = tr_cast(g, x, TR_DTYPE_BF16);        /* a real cast */
    int rb = tr_reshape(g, cb, 2, S(4, 3));       /* a real reshape */
    int oid = tr_scale(g, x, 1.0f, 0.0f);         /* identity, but an output read by nothing */
    int oid2 = tr_reshape(g, x, 2, S(2, 6));      /* identity, an output and read by exp */
    int ex = tr_unary(g, TR_OP_EXP, oid2);
    OUTS(g, u, s2, rb, oid, oid2, ex);
    struct tr_pir ref, p;
    two_pirs(g, &ref, &p);
    expect_pass(&p, PASS_SIMPLIFY, 6); /* r1, r3's collapse, c, s, tid, oid2's readers */
    assert_int_equal(p.nodes[u].in[0], r3);
    assert_int_equal(p.nodes[r3].in[0], x);
    assert_int_equal(p.nodes[r3].op, TR_OP_RESHAPE);
    assert_true(p.nodes[r1].dead && p.nodes[r2].dead && p.nodes[c].dead && p.nodes[s].dead && p.nodes[tid].dead);
    assert_false(p.nodes[s2].dead || p.nodes[cb].dead || p.nodes[rb].dead || p.nodes[oid].dead || p.nodes[oid2].dead);
    assert_int_equal(p.nodes[rb].in[0], cb);
    assert_int_equal(p.nodes[ex].in[0], x);
    assert_int_equal(p.outputs[3], oid);
    assert_int_equal(p.outputs[4], oid2);
    expect_pass(&p, PASS_SIMPLIFY, 0);
    compact(&p, NULL);
    assert_same_values(&ref, &p, 1e-7);
    free_pirs(g, &ref, &p);
}

/* ---- all of them ---- */

static void test_pass_all(void **state) {
    (void)state;
    struct tr_graph *g = tr_test_graph_new();
    int x = tr_input(g, "x", TR_DTYPE_F32, 3, S(2, 4, 8));
    int w = tr_param(g, "w", TR_DTYPE_F32, 2, S(8, 8), 0, 1);
    struct tr_tensor tw = bound_randn(g, w, 11, 0.3);
    int q = tr_matmul(g, x, w, 0, 0);
    int k = tr_matmul(g, x, w, 0, 0);                          /* a duplicate of q */
    int kt = tr_transpose(g, k, 3, (const int[]){0, 2, 1});
    int sc = tr_matmul(g, q, kt, 0, 0);                        /* (2,4,4) */
    int half = tr_const_scalar(g, TR_DTYPE_F32, 0.5);
    int two = tr_const_scalar(g, TR_DTYPE_F32, 0.25);
    int f = tr_mul(g, half, two);                              /* folds to a constant */
    int sm = tr_softmax(g, tr_mul(g, sc, f));
    int v = tr_reshape(g, tr_reshape(g, q, 2, S(8, 8)), 3, S(2, 4, 8));
    int o = tr_matmul(g, sm, v, 0, 0);
    tr_unary(g, TR_OP_EXP, o);                                 /* dead */
    out(g, o, "o");
    struct tr_error err = {0};
    struct tr_pir ref, p;
    two_pirs(g, &ref, &p);
    struct tr_pass_stats st;
    memset(&st, 0xff, sizeof st);
    assert_int_equal(tr_pass_all(&p, tr_test_k, &st, &err), TR_OK);
    assert_int_equal(st.dce_removed, 1);
    assert_true(st.cse_merged >= 1);
    assert_int_equal(st.folded, 1);
    assert_true(st.simplified >= 3); /* kt into sc, the reshape pair collapsed, then removed */
    for (int i = 0; i < p.n; i++) assert_false(p.nodes[i].dead);
    /* x w q sc f(const) mul sm o: 8 nodes */
    assert_int_equal(p.n, 8);
    int n_mm = 0;
    for (int i = 0; i < p.n; i++) n_mm += p.nodes[i].op == TR_OP_MATMUL;
    assert_int_equal(n_mm, 3);
    assert_same_values(&ref, &p, 1e-5);
    free_pirs(g, &ref, &p);
    tr_test_tensor_free(&tw);
    (void)v;
}

TR_TEST_MAIN(tr_test_kernels_setup, tr_test_kernels_teardown, test_cse, test_dce, test_constfold,
             test_simplify_transpose_into_matmul, test_simplify_identities, test_pass_all)
