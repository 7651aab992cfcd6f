/* The jax backend: every kind of generated kernel against a float64 evaluation of the
 * same graph (f32 and bf16), the arena of every compiled program through the planner's
 * verifier, the disk cache (hit, miss, a corrupted entry rebuilt), compiler and cache
 * directory errors, options, BERT tiny against Hugging Face (the attention backward
 * groups are test_jax_attention.c's).
 *
 * The backend's sources are compiled in, so a test can look inside a program (its
 * buffers, its clusters, the cache counters); the plugin itself is also run through the
 * loader. Every compile uses a temporary cache directory made here, never the user's. */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include <sys/wait.h>
#include <time.h>
#include "jax_test.h"
#include "entry.h"
#include "ref/ref.h" /* the float64 evaluation every output is compared with */

/* Poison, run, compare every output with the float64 evaluation. */
static void run_and_compare(struct tr_jax_program *p, const struct tr_graph *g, const struct tr_tensor *in,
                            struct tr_tensor *out, double tol) {
    int n_out = tr_graph_n_outputs(g);
    for (int i = 0; i < n_out; i++) tr_test_poison(&out[i]);
    struct tr_error err = {0};
    if (tr_jax_execute(p, tr_graph_n_inputs(g), in, n_out, out, &err) != TR_OK) fail_msg("execute: %s", err.msg);
    double **ref = tr_ref_graph_run(g, in);
    for (int i = 0; i < n_out; i++) {
        double t = fmax(tol, tr_test_tol((enum tr_dtype)out[i].dtype));
        double e = tr_test_rel_err(&out[i], ref[tr_graph_output(g, i)]);
        if (!(e < t)) fail_msg("output %d '%s': relative error %.3g >= %.0e", i, tr_graph_output_name(g, i), e, t);
    }
    tr_ref_graph_free(g, ref);
    assert_int_equal(p->kernel_calls, (uint64_t)p->n_steps);
}

/* ---- every kind of kernel ---- */

enum { KB = 3, KT = 5, KD = 24, KN = 40, KV = 17, BIG0 = 4, BIG1 = 96, BIG2 = 100, LONG = 16400 };

struct kinds {
    struct tr_graph *g;
    struct tr_tensor params[16];
    int n_params;
    struct tr_tensor in[7];
    int out_ew, out_cast, out_mm, out_sm, out_ln, out_sum, out_mean, out_max, out_emb_ln, out_emb, out_big,
        out_flat, out_big_sm, out_long, out_chunks, out_passes;
};

static int kparam(struct kinds *k, const char *name, enum tr_dtype dt, int nd, const int64_t *sh, double mean,
                  double std) {
    int id = tr_param(k->g, name, dt, nd, sh, 0, 0.1f);
    struct tr_tensor *t = &k->params[k->n_params++];
    *t = tr_test_tensor(dt, nd, sh);
    tr_test_randn(t, 100 + (uint64_t)k->n_params, std);
    for (int64_t i = 0; i < tr_tensor_numel(t); i++) tr_tensor_set_f64(t, i, tr_tensor_get_f64(t, i) + mean);
    struct tr_error err = {0};
    assert_int_equal(tr_graph_bind_param(k->g, id, t->data, &err), TR_OK);
    return id;
}

static int out(struct tr_graph *g, int id, const char *name) {
    assert_int_equal(tr_graph_set_output(g, id, name), TR_OK);
    return tr_graph_n_outputs(g) - 1;
}

static void kinds_build(struct kinds *k, enum tr_dtype dt) {
    memset(k, 0, sizeof *k);
    struct tr_error err = {0};
    assert_int_equal(tr_graph_init(&k->g, &err), TR_OK);
    struct tr_graph *g = k->g;
    const int64_t btd[3] = {KB, KT, KD}, bt[2] = {KB, KT}, t1[1] = {KT}, b1d[3] = {KB, 1, KD};
    const int64_t big[3] = {BIG0, BIG1, BIG2}, col[2] = {BIG1, 1}, row[3] = {BIG0, 1, BIG2}, lng[2] = {2, LONG};
    int x = tr_input(g, "x", dt, 3, btd), y = tr_input(g, "y", dt, 3, btd);
    int ids = tr_input(g, "ids", TR_DTYPE_I32, 2, bt), pos = tr_input(g, "pos", TR_DTYPE_I64, 1, t1);
    int mask = tr_input(g, "mask", dt, 3, b1d), bg = tr_input(g, "big", dt, 3, big);
    int lg = tr_input(g, "long", dt, 2, lng);
    const int64_t d1[1] = {KD}, n1[1] = {KN}, nd[2] = {KN, KD}, vd[2] = {KV, KD}, td[2] = {KT, KD};
    int bias_d = kparam(k, "bias_d", dt, 1, d1, 0, 0.5), bias_n = kparam(k, "bias_n", dt, 1, n1, 0, 0.5);
    int w = kparam(k, "w", dt, 2, nd, 0, 0.3), gamma = kparam(k, "gamma", dt, 1, d1, 1, 0.2);
    int beta = kparam(k, "beta", dt, 1, d1, 0, 0.2), table = kparam(k, "table", dt, 2, vd, 0, 1);
    int ptab = kparam(k, "pos_table", dt, 2, td, 0, 1), colp = kparam(k, "col", dt, 2, col, 0, 1);
    int rowp = kparam(k, "row", dt, 3, row, 0, 1), table2 = kparam(k, "table2", dt, 2, vd, 0, 1);
    int lbias = kparam(k, "long_bias", dt, 1, (int64_t[]){LONG}, 0, 1);
    int c15 = tr_const_scalar(g, dt, 1.5);

    /* one elementwise cluster: broadcasting, a 0-d constant, every unary op */
    int a = tr_add(g, x, bias_d);
    int b = tr_mul(g, a, tr_unary(g, TR_OP_SIGMOID, y));
    int c = tr_sub(g, b, tr_unary(g, TR_OP_TANH, x));
    int d = tr_div(g, c, tr_add(g, tr_unary(g, TR_OP_EXP, tr_unary(g, TR_OP_NEG, tr_unary(g, TR_OP_RELU, y))), c15));
    int e = tr_add(g, tr_unary(g, TR_OP_SILU, d), tr_unary(g, TR_OP_RSQRT, tr_add(g, tr_unary(g, TR_OP_EXP, y), c15)));
    e = tr_add(g, e, tr_unary(g, TR_OP_SQRT, tr_unary(g, TR_OP_EXP, x)));
    int f = tr_scale(g, tr_gelu(g, e, 1), 0.75f, -0.125f);
    k->out_ew = out(g, tr_gelu(g, f, 0), "elementwise");
    k->out_cast = out(g, tr_cast(g, tr_scale(g, x, 3.0f, 0.5f), dt == TR_DTYPE_F32 ? TR_DTYPE_BF16 : TR_DTYPE_F32),
                      "cast");
    /* GEMM epilogue: alpha, bias, gelu in the library call */
    int mm = tr_matmul(g, x, w, 0, 1);
    k->out_mm = out(g, tr_gelu(g, tr_add(g, tr_scale(g, mm, 0.5f, 0.0f), bias_n), 0), "matmul_epilogue");
    /* softmax with a prologue (scale + broadcast mask) and an epilogue (times y) */
    int sm = tr_softmax(g, tr_add(g, tr_scale(g, x, 0.7f, 0.0f), mask));
    k->out_sm = out(g, tr_mul(g, sm, y), "softmax");
    /* residual + bias + layer norm, then an epilogue */
    int ln = tr_layer_norm(g, tr_add(g, tr_add(g, x, y), bias_d), gamma, beta, 1e-5f);
    k->out_ln = out(g, tr_add(g, tr_gelu(g, ln, 0), c15), "layer_norm");
    k->out_sum = out(g, tr_reduce(g, TR_OP_SUM, tr_mul(g, x, x), -1, 0), "sum");
    k->out_mean = out(g, tr_reduce(g, TR_OP_MEAN, tr_mul(g, x, y), 2, 1), "mean");
    k->out_max = out(g, tr_reduce(g, TR_OP_MAX, tr_sub(g, x, y), -1, 0), "max");
    /* gathers: two tables summed (one broadcast over the batch) and normalised, as BERT's embeddings */
    int emb = tr_add(g, tr_embedding(g, table, ids), tr_embedding(g, ptab, pos));
    k->out_emb_ln = out(g, tr_layer_norm(g, emb, gamma, beta, 1e-12f), "embedding_layer_norm");
    int idf = tr_cast(g, tr_reshape(g, ids, 3, (int64_t[]){KB, KT, 1}), dt);
    k->out_emb = out(g, tr_add(g, tr_embedding(g, table2, ids), tr_scale(g, idf, 0.01f, 0.0f)), "embedding_cast");
    /* big enough for several threads: rows with a broadcast column, a flat loop, a softmax, a long row */
    k->out_big = out(g, tr_unary(g, TR_OP_TANH, tr_add(g, tr_mul(g, bg, colp), rowp)), "big_broadcast");
    k->out_flat = out(g, tr_unary(g, TR_OP_EXP, tr_scale(g, bg, -0.25f, 0.0f)), "big_flat");
    k->out_big_sm = out(g, tr_softmax(g, tr_add(g, tr_scale(g, bg, 0.5f, 0.0f), colp)), "big_softmax");
    k->out_long = out(g, tr_reduce(g, TR_OP_MAX, tr_add(g, lg, lg), 1, 0), "long_max");
    /* rows longer than a work item: split into chunks */
    k->out_chunks = out(g, tr_unary(g, TR_OP_RELU, tr_add(g, lg, lbias)), "long_rows");
    /* for the simplification passes: a constant expression folded, a duplicate merged */
    int folded = tr_scale(g, tr_const_scalar(g, dt, 2.0), 3.0f, 1.0f);
    k->out_passes = out(g, tr_add(g, tr_mul(g, tr_add(g, x, folded), y), tr_add(g, x, folded)), "passes");
    if (tr_graph_status(g, &err) != TR_OK) fail_msg("graph: %s", err.msg);

    const int in_ids[7] = {x, y, ids, pos, mask, bg, lg};
    for (int i = 0; i < 7; i++) {
        struct tr_tensor t = tr_node_tensor(g, in_ids[i]);
        k->in[i] = tr_test_tensor((enum tr_dtype)t.dtype, t.ndim, t.shape);
    }
    tr_test_randn(&k->in[0], 1, 1.0);
    tr_test_randn(&k->in[1], 2, 1.0);
    tr_test_randint(&k->in[2], 3, KV);
    tr_test_randint(&k->in[3], 4, KT);
    tr_test_randn(&k->in[4], 5, 2.0);
    tr_test_randn(&k->in[5], 6, 1.0);
    tr_test_randn(&k->in[6], 7, 1.0);
}

static void kinds_free(struct kinds *k) {
    for (int i = 0; i < k->n_params; i++) tr_test_tensor_free(&k->params[i]);
    for (int i = 0; i < 7; i++) tr_test_tensor_free(&k->in[i]);
    tr_graph_free(k->g);
}

static const struct jax_cluster *cluster_of_output(const struct tr_jax_program *p, int i) {
    int id = p->pir.outputs[i], ci = p->fusion.cluster_of[id];
    if (ci < 0) fail_msg("output %d (node %d %s) is not a generated kernel", i, id, tr_jax_op_str(p->pir.nodes[id].op));
    assert_int_equal(p->fusion.clusters[ci].root, id);
    return &p->fusion.clusters[ci];
}

static int count_op(const struct tr_jax_program *p, const struct jax_cluster *cl, int op) {
    int n = 0;
    for (int i = 0; i < cl->n_members; i++) n += p->pir.nodes[cl->members[i]].op == op;
    return n;
}

/* Element i of a float input set to a quiet NaN. */
static void set_nan(struct tr_tensor *t, int64_t i) {
    if (t->dtype == TR_DTYPE_F32) ((float *)t->data)[i] = NAN;
    else ((uint16_t *)t->data)[i] = 0x7fc0; /* bf16 */
}

static void check_kinds(enum tr_dtype dt) {
    char dir[512];
    fresh_dir(dir, sizeof dir, dt == TR_DTYPE_F32 ? "kinds_f32" : "kinds_bf16");
    struct kinds k;
    kinds_build(&k, dt);
    struct tr_jax_context *ctx = ctx_make(dir, NULL, 1);
    struct tr_jax_program *p = compile_ok(ctx, k.g);
    struct tr_tensor *o = alloc_outputs(k.g);
    run_and_compare(p, k.g, k.in, o, tr_test_tol(dt));
    run_and_compare(p, k.g, k.in, o, tr_test_tol(dt)); /* a second step over the same arena */

    /* what was fused into what */
    const struct jax_cluster *cl = cluster_of_output(p, k.out_ew);
    assert_int_equal(cl->kind, JAX_K_EW);
    assert_true(cl->n_members >= 20);
    const struct tr_pir_node *mm = &p->pir.nodes[p->pir.outputs[k.out_mm]];
    assert_int_equal(mm->op, JAX_OP_MATMUL_EPI);
    assert_int_equal(mm->n_in, 3);
    assert_int_equal(mm->attrs.ints[2], TR_ACT_GELU);
    assert_true(mm->attrs.floats[0] == 0.5f);
    cl = cluster_of_output(p, k.out_sm);
    assert_int_equal(cl->kind, JAX_K_SOFTMAX);
    assert_int_equal(cl->n_members, 4);
    cl = cluster_of_output(p, k.out_ln);
    assert_int_equal(cl->kind, JAX_K_LAYER_NORM);
    assert_int_equal(cl->n_members, 5);
    assert_int_equal(cluster_of_output(p, k.out_sum)->kind, JAX_K_SUM);
    assert_int_equal(cluster_of_output(p, k.out_mean)->kind, JAX_K_MEAN);
    assert_int_equal(cluster_of_output(p, k.out_max)->n_members, 2);
    cl = cluster_of_output(p, k.out_emb_ln);
    assert_int_equal(cl->kind, JAX_K_LAYER_NORM);
    assert_int_equal(count_op(p, cl, TR_OP_EMBEDDING), 2);
    cl = cluster_of_output(p, k.out_emb);
    assert_int_equal(count_op(p, cl, TR_OP_EMBEDDING), 1);
    assert_int_equal(count_op(p, cl, TR_OP_CAST), 1);
    assert_int_equal(cluster_of_output(p, k.out_big_sm)->kind, JAX_K_SOFTMAX);
    assert_int_equal(p->n_lib, 1); /* the matmul */
    assert_int_equal(p->n_gen, p->fusion.n_clusters);
    assert_int_equal(p->fusion.n_clusters, 15);
    assert_true(p->passes.folded >= 1);
    assert_true(p->passes.cse_merged >= 1);

    struct tr_backend_stats st;
    struct tr_error err = {0};
    assert_int_equal(tr_jax_iface.get_stats(ctx, p, &st, &err), TR_OK);
    assert_int_equal(st.kernel_calls, (uint64_t)p->n_steps);
    assert_int_equal(st.arena_bytes, (uint64_t)p->arena_bytes);
    assert_non_null(strstr(st.notes, "15 fused kernels generated as 15 functions (compiled)"));
    print_message("jax %s kinds: %s\n", tr_dtype_name(dt), st.notes);

    /* an id outside its table: named, and the program still runs afterwards */
    ((int32_t *)k.in[2].data)[4] = KV + 3;
    assert_int_equal(tr_jax_execute(p, 7, k.in, tr_graph_n_outputs(k.g), o, &err), TR_ERR_INVALID);
    if (!strstr(err.msg, "embedding") || !strstr(err.msg, "ids[4] = 20 is outside [0, 17)"))
        fail_msg("bad id message: %s", err.msg);
    ((int32_t *)k.in[2].data)[4] = 1;
    run_and_compare(p, k.g, k.in, o, tr_test_tol(dt));

    /* a NaN wins a max, as torch's amax: in a short row, and in a row split among threads */
    set_nan(&k.in[0], 0);            /* x[0][0][0]: row 0 of "max" (over x - y's last axis) */
    set_nan(&k.in[6], LONG / 2 + 7); /* row 0 of "long_max" */
    for (int i = 0; i < tr_graph_n_outputs(k.g); i++) tr_test_poison(&o[i]);
    assert_int_equal(tr_jax_execute(p, 7, k.in, tr_graph_n_outputs(k.g), o, &err), TR_OK);
    const int nan_outs[2] = {k.out_max, k.out_long};
    for (int i = 0; i < 2; i++) {
        double *v = tr_test_to_f64(&o[nan_outs[i]]);
        if (!isnan(v[0]) || isnan(v[1]))
            fail_msg("%s: a NaN's row gives %g, the next %g", tr_graph_output_name(k.g, nan_outs[i]), v[0], v[1]);
        free(v);
    }
    /* ... and its softmax row is NaN throughout, as torch's (the fused kernel's max passed
     * over it, and 1/s became 0 for the rest) */
    double *sm = tr_test_to_f64(&o[k.out_sm]);
    for (int j = 0; j < KD; j++)
        if (!isnan(sm[j]) || isnan(sm[KD + j])) fail_msg("softmax: a NaN's row gives %g at %d", sm[j], j);
    free(sm);

    free_tensors(o, tr_graph_n_outputs(k.g));
    tr_jax_program_free(p);
    tr_jax_iface.free(ctx);
    kinds_free(&k);
}

static void test_kinds_f32(void **state) { check_kinds(TR_DTYPE_F32); }
static void test_kinds_bf16(void **state) { check_kinds(TR_DTYPE_BF16); }

/* ---- a small graph for the cache and option tests ---- */

struct small {
    struct tr_graph *g;
    struct tr_tensor in[2];
};

static void small_build(struct small *s, float alpha) {
    struct tr_error err = {0};
    assert_int_equal(tr_graph_init(&s->g, &err), TR_OK);
    const int64_t sh[2] = {6, 33}, b[1] = {33};
    int x = tr_input(s->g, "x", TR_DTYPE_F32, 2, sh), bias = tr_input(s->g, "b", TR_DTYPE_F32, 1, b);
    int h = tr_gelu(s->g, tr_add(s->g, tr_scale(s->g, x, alpha, 0.5f), bias), 0);
    out(s->g, tr_softmax(s->g, tr_mul(s->g, h, x)), "softmax");
    out(s->g, tr_reduce(s->g, TR_OP_SUM, h, 1, 0), "sum");
    if (tr_graph_status(s->g, &err) != TR_OK) fail_msg("graph: %s", err.msg);
    s->in[0] = tr_test_tensor(TR_DTYPE_F32, 2, sh);
    s->in[1] = tr_test_tensor(TR_DTYPE_F32, 1, b);
    tr_test_randn(&s->in[0], 11, 1.0);
    tr_test_randn(&s->in[1], 12, 1.0);
}

static void small_free(struct small *s) {
    tr_test_tensor_free(&s->in[0]);
    tr_test_tensor_free(&s->in[1]);
    tr_graph_free(s->g);
}

static void small_run(struct tr_jax_context *ctx, struct small *s, int expect_hit) {
    struct tr_jax_program *p = compile_ok(ctx, s->g);
    assert_int_equal(p->build.cache_hit, expect_hit);
    struct tr_tensor *o = alloc_outputs(s->g);
    run_and_compare(p, s->g, s->in, o, 1e-4);
    struct tr_backend_stats st;
    struct tr_error err = {0};
    assert_int_equal(tr_jax_iface.get_stats(ctx, p, &st, &err), TR_OK);
    assert_non_null(strstr(st.notes, expect_hit ? "(cache hit)" : "(compiled)"));
    free_tensors(o, 2);
    tr_jax_program_free(p);
}

static void entry_path(struct tr_jax_context *ctx, struct small *s, char *path, size_t n) {
    struct tr_jax_program *p = compile_ok(ctx, s->g);
    snprintf(path, n, "%s", p->build.path);
    tr_jax_program_free(p);
}

static void test_cache(void **state) {
    char dir[512], path[JAX_PATH_MAX];
    fresh_dir(dir, sizeof dir, "cache");
    struct tr_jax_context *ctx = ctx_make(dir, NULL, 1);
    struct small s, s2;
    small_build(&s, 1.25f);
    small_run(ctx, &s, 0);
    assert_int_equal(ctx->cc_runs, 1);
    small_run(ctx, &s, 1); /* the same graph: nothing compiled */
    assert_int_equal(ctx->cc_runs, 1);
    assert_int_equal(ctx->cache_hits, 1);
    small_build(&s2, 1.5f); /* another constant: another source */
    small_run(ctx, &s2, 0);
    assert_int_equal(ctx->cc_runs, 2);
    /* Both loaded at once (from their verified memfd copies): each runs its own kernels. A
     * closed memfd's number, reused, once made dlopen hand the second program the first's. */
    {
        struct tr_jax_program *p1 = compile_ok(ctx, s.g), *p2 = compile_ok(ctx, s2.g);
        struct tr_tensor *o1 = alloc_outputs(s.g), *o2 = alloc_outputs(s2.g);
        run_and_compare(p1, s.g, s.in, o1, 1e-4);
        run_and_compare(p2, s2.g, s2.in, o2, 1e-4);
        free_tensors(o1, 2);
        free_tensors(o2, 2);
        tr_jax_program_free(p2);
        tr_jax_program_free(p1);
    }
    small_free(&s2);

    /* A backend made afresh (another process, as far as the cache knows) finds it too. */
    struct tr_jax_context *ctx2 = ctx_make(dir, NULL, 1);
    small_run(ctx2, &s, 1);
    assert_int_equal(ctx2->cc_runs, 0);
    tr_jax_iface.free(ctx2);

    /* Truncated, then overwritten with junk of the right length: detected, rebuilt, not loaded.
     * (No program holds the library now: truncating a mapped file would fault the process.) */
    entry_path(ctx, &s, path, sizeof path);
    struct stat st0, st1;
    assert_int_equal(stat(path, &st0), 0);
    assert_int_equal(truncate(path, st0.st_size / 2), 0);
    small_run(ctx, &s, 0);
    assert_int_equal(ctx->cc_runs, 3);
    assert_int_equal(stat(path, &st1), 0);
    assert_int_equal(st1.st_size, st0.st_size);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, st0.st_size / 3, SEEK_SET);
    for (int i = 0; i < 64; i++) fputc(0x5a, f);
    fclose(f);
    small_run(ctx, &s, 0);
    assert_int_equal(ctx->cc_runs, 4);
    small_run(ctx, &s, 1);
    assert_int_equal(ctx->cc_runs, 4);
    /* no stray temporaries or sources left after successful builds */
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n_files = 0;
    for (struct dirent *de; (de = readdir(d));) {
        if (de->d_name[0] == '.' || strcmp(de->d_name, "secret") == 0) continue;
        n_files++;
        if (!strstr(de->d_name, ".so") || strstr(de->d_name, ".tmp") || strstr(de->d_name, ".log"))
            fail_msg("left in the cache: %s", de->d_name);
    }
    closedir(d);
    assert_int_equal(n_files, 2);

    /* Forged (issue 18): the object edited and its trailer made again under another secret
     * (all a writer of the directory who cannot read the secret can do): refused by its
     * MAC, rebuilt, never loaded. */
    entry_path(ctx, &s, path, sizeof path);
    unsigned char *img;
    size_t n;
    assert_int_equal(jax_read_file(path, &img, &n), 0);
    const size_t obj = n - sizeof(struct jax_trailer);
    struct jax_trailer t;
    memcpy(&t, img + obj, sizeof t);
    img[obj / 2] ^= 0x01;
    unsigned char other[JAX_SECRET_BYTES];
    for (int i = 0; i < JAX_SECRET_BYTES; i++) other[i] = (unsigned char)(ctx->secret[i] ^ 0xa5);
    static const char magic[8] = {'T', 'R', 'J', 'A', 'X', 'S', 'O', '2'};
    const uint64_t key[2] = {t.key[0], t.key[1]};
    const size_t src_len = (size_t)t.src_len;
    assert_int_equal(jax_trailer_fill(&t, magic, key, img, obj, src_len, other), 0);
    memcpy(img + obj, &t, sizeof t);
    const char *why = jax_trailer_check(img, n, magic, key, src_len, ctx->secret);
    assert_non_null(why);
    assert_non_null(strstr(why, "MAC does not match"));
    assert_null(jax_trailer_check(img, n, magic, key, src_len, other)); /* whole under its own secret */
    f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(img, 1, n, f), n);
    fclose(f);
    free(img);
    small_run(ctx, &s, 0);
    assert_int_equal(ctx->cc_runs, 5);
    /* an entry that is a symbolic link (to a good one) is not followed */
    char other_path[JAX_PATH_MAX + 8];
    snprintf(other_path, sizeof other_path, "%s.real", path);
    assert_int_equal(rename(path, other_path), 0);
    assert_int_equal(symlink(other_path, path), 0);
    small_run(ctx, &s, 0);
    assert_int_equal(ctx->cc_runs, 6);
    unlink(other_path);
    small_free(&s);
    tr_jax_iface.free(ctx);

    /* a secret others may read is not used: the cache is refused, naming the file */
    char secret[600];
    snprintf(secret, sizeof secret, "%s/secret", dir);
    assert_int_equal(chmod(secret, 0644), 0);
    struct tr_jax_context *ctx3 = ctx_make(dir, NULL, 1);
    struct small s3;
    small_build(&s3, 1.25f);
    struct tr_jax_program *p3 = NULL;
    struct tr_error e3 = {0};
    assert_int_not_equal(tr_jax_compile(ctx3, (tr_graph_t)s3.g, &p3, &e3), TR_OK);
    tr_assert_msg_has(&e3, "the cache's secret");
    tr_assert_msg_has(&e3, "readable or writable by others (expected mode 0600)");
    small_free(&s3);
    tr_jax_iface.free(ctx3);
}

/* Processes starting together on a fresh cache (ctest -j on a new machine, or the ranks of
 * a run) each make or read its secret: none may read it half written, and all read the
 * same one. 8 processes released at once onto each of 16 fresh directories. */
static void test_cache_secret_race(void **state) {
    (void)state;
    enum { PROCS = 8, ROUNDS = 16 };
    for (int round = 0; round < ROUNDS; round++) {
        char dir[512];
        snprintf(dir, sizeof dir, "%s/race%d/cache", tr_test_dir, round); /* made by the processes */
        int go[2], got[2];
        assert_int_equal(pipe(go), 0);
        assert_int_equal(pipe(got), 0);
        pid_t pids[PROCS];
        for (int i = 0; i < PROCS; i++) {
            pids[i] = fork();
            assert_true(pids[i] >= 0);
            if (pids[i] == 0) {
                close(go[1]);
                char c;
                (void)!read(go[0], &c, 1); /* released when the parent closes its end */
                struct tr_jax_context ctx;
                memset(&ctx, 0, sizeof ctx);
                snprintf(ctx.cache_dir, sizeof ctx.cache_dir, "%s", dir);
                snprintf(ctx.cache_dir_key, sizeof ctx.cache_dir_key, "cache_dir");
                struct tr_error e = {0};
                if (jax_cache_dir(&ctx, &e) != TR_OK) {
                    fprintf(stderr, "process %d: %s\n", i, e.msg);
                    _exit(1);
                }
                _exit(write(got[1], ctx.secret, sizeof ctx.secret) == (ssize_t)sizeof ctx.secret ? 0 : 2);
            }
        }
        close(go[0]);
        close(got[1]);
        close(go[1]);
        int failed = 0;
        for (int i = 0; i < PROCS; i++) {
            int st;
            assert_int_equal(waitpid(pids[i], &st, 0), pids[i]);
            failed += !WIFEXITED(st) || WEXITSTATUS(st) != 0;
        }
        unsigned char first[32], next[32];
        int n = 0;
        while (read(got[0], n ? next : first, 32) == 32) {
            if (n++ && memcmp(first, next, 32) != 0) fail_msg("round %d: two processes read different secrets", round);
        }
        close(got[0]);
        if (failed || n != PROCS) fail_msg("round %d: %d of %d processes failed to make or read the secret", round,
                                           failed, PROCS);
    }
    print_message("%d processes at once on each of %d fresh caches: every one read the same whole secret\n", PROCS,
                  ROUNDS);
}

/* Processes building one entry at once on a fresh cache (the ranks of a data-parallel run):
 * each compiles from a source file of its own. When they shared one, a process truncated
 * it under another's compiler, which then built, sealed and loaded a library without its
 * kernels ("has no kernel trj_k0", in a CI run of tests/dp.sh). 4 processes released a
 * few ms apart onto each of 6 fresh directories, each compiling the small graph. */
static void test_cache_build_race(void **state) {
    (void)state;
    enum { PROCS = 4, ROUNDS = 8 };
    struct small s;
    small_build(&s, 1.75f);
    for (int round = 0; round < ROUNDS; round++) {
        char dir[512];
        snprintf(dir, sizeof dir, "%s/build_race%d", tr_test_dir, round);
        int go[2];
        assert_int_equal(pipe(go), 0);
        pid_t pids[PROCS];
        for (int i = 0; i < PROCS; i++) {
            pids[i] = fork();
            assert_true(pids[i] >= 0);
            if (pids[i] == 0) {
                close(go[1]);
                char c;
                (void)!read(go[0], &c, 1); /* released when the parent closes its end */
                /* staggered by a few ms: the moment a compiler reads its source */
                const struct timespec ts = {0, (long)(i * 7 + round % 3 * 3) * 1000000L};
                nanosleep(&ts, NULL);
                struct tr_option opt = {.key = "cache_dir", .value = dir, .file = "test.ini", .line = 2};
                struct tr_backend_params prm = {.struct_size = sizeof prm, .abi_version = TR_ABI_VERSION,
                                                .device_type = TR_DEVICE_CPU, .options = &opt, .n_options = 1};
                void *ctx = NULL;
                struct tr_jax_program *p = NULL;
                struct tr_error e = {0};
                if (tr_jax_iface.init(tr_host_api_get(), &prm, &ctx, &e) != TR_OK ||
                    tr_jax_compile(ctx, (tr_graph_t)s.g, &p, &e) != TR_OK) {
                    fprintf(stderr, "process %d: %s\n", i, e.msg);
                    _exit(1);
                }
                _exit(0);
            }
        }
        close(go[0]);
        close(go[1]);
        int failed = 0;
        for (int i = 0; i < PROCS; i++) {
            int st;
            assert_int_equal(waitpid(pids[i], &st, 0), pids[i]);
            failed += !WIFEXITED(st) || WEXITSTATUS(st) != 0;
        }
        if (failed) fail_msg("round %d: %d of %d processes could not build or load the entry", round, failed, PROCS);
    }
    small_free(&s);
    print_message("%d processes building one entry at once on each of %d fresh caches: every one loaded it\n", PROCS,
                  ROUNDS);
}

/* fuse = false: every fusable op its own kernel, same numbers. */
static void test_unfused(void **state) {
    char dir[512];
    fresh_dir(dir, sizeof dir, "unfused");
    struct tr_jax_context *ctx = ctx_make(dir, NULL, 0);
    struct small s;
    small_build(&s, 0.75f);
    struct tr_jax_program *p = compile_ok(ctx, s.g);
    assert_int_equal(p->fusion.n_clusters, 6); /* scale add gelu mul softmax sum */
    assert_int_equal(p->fusion.n_epilogues, 0);
    for (int i = 0; i < p->fusion.n_clusters; i++) assert_int_equal(p->fusion.clusters[i].n_members, 1);
    struct tr_tensor *o = alloc_outputs(s.g);
    run_and_compare(p, s.g, s.in, o, 1e-4);
    struct tr_backend_stats st;
    struct tr_error err = {0};
    assert_int_equal(tr_jax_iface.get_stats(ctx, p, &st, &err), TR_OK);
    assert_string_equal(st.mode, "unfused");
    if (!strstr(st.notes, "6 kernels of one op each (unfused) generated")) fail_msg("unfused notes: %s", st.notes);
    free_tensors(o, 2);
    tr_jax_program_free(p);
    small_free(&s);
    tr_jax_iface.free(ctx);
}

/* ---- errors: the compiler, the cache directory ---- */

static void expect_compile_error(struct tr_jax_context *ctx, struct small *s, const char *a, const char *b,
                                 char *msg, size_t n) {
    struct tr_jax_program *p = (void *)&p;
    struct tr_error err = {0};
    if (tr_jax_compile(ctx, (tr_graph_t)s->g, &p, &err) == TR_OK) fail_msg("compile succeeded (expected '%s')", a);
    assert_null(p);
    if (!strstr(err.msg, a) || (b && !strstr(err.msg, b)))
        fail_msg("message lacks '%s'%s%s: %s", a, b ? " or " : "", b ? b : "", err.msg);
    snprintf(msg, n, "%s", err.msg);
}

/* The source path after "kept at " exists and holds the kernels. */
static void check_kept_source(const char *msg) {
    const char *k = strstr(msg, "kept at ");
    if (!k) fail_msg("no source path in: %s", msg);
    char path[JAX_PATH_MAX];
    snprintf(path, sizeof path, "%s", k + 8);
    char *semi = strchr(path, ';');
    if (semi) *semi = '\0';
    FILE *f = fopen(path, "r");
    if (!f) fail_msg("the kept source %s does not exist", path);
    char buf[16384];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    assert_non_null(strstr(buf, "int trj_k0(void *const *args)"));
}

static void test_compiler_errors(void **state) {
    char dir[512], msg[TR_ERROR_MSG_MAX];
    fresh_dir(dir, sizeof dir, "errors");
    struct small s;
    small_build(&s, 2.0f);

    struct tr_jax_context *ctx = ctx_make(dir, "/nonexistent/cc", 1);
    expect_compile_error(ctx, &s, "jax: cannot run the C compiler '/nonexistent/cc'", "test.ini:3: [backend.jax] cc",
                         msg, sizeof msg);
    check_kept_source(msg);
    tr_jax_iface.free(ctx);

    ctx = ctx_make(dir, "/bin/false", 1);
    expect_compile_error(ctx, &s, "'/bin/false'", "exited with status 1", msg, sizeof msg);
    check_kept_source(msg);
    tr_jax_iface.free(ctx);

    /* a compiler that fails with something to say: its words reach the message */
    ctx = ctx_make(dir, "cc -include /nonexistent/missing_header.h", 1);
    expect_compile_error(ctx, &s, "missing_header.h", "kept at", msg, sizeof msg);
    check_kept_source(msg);
    tr_jax_iface.free(ctx);

    /* a cache directory that cannot be made (a file in the way: refused even for root) */
    char file[600], bad[700];
    snprintf(file, sizeof file, "%s/not_a_dir", dir);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fclose(f);
    snprintf(bad, sizeof bad, "%s/cache", file);
    ctx = ctx_make(bad, NULL, 1);
    expect_compile_error(ctx, &s, "test.ini:2: [backend.jax] cache_dir", bad, msg, sizeof msg);
    tr_jax_iface.free(ctx);
    small_free(&s);
}

/* ---- the plugin through the loader: options, the entry point ---- */

static struct tr_plugin *open_jax(void) { return tr_test_plugin_expect("jax", TR_CAP_CPU | TR_CAP_BF16); }

static void test_plugin(void **state) {
    struct tr_plugin *pl = open_jax();
    tr_test_option_refused(pl, "fuze", "true", 7, "conf/x.ini:7: [backend.jax] unknown key 'fuze'",
                           "keys: cache_dir, cc, fuse");
    tr_test_option_refused(pl, "fuse", "maybe", 8, "conf/x.ini:8: [backend.jax] fuse = 'maybe'", "true or false");
    tr_test_option_refused(pl, "cc", "", 9, "conf/x.ini:9: [backend.jax] cc", NULL);

    char dir[512];
    fresh_dir(dir, sizeof dir, "plugin");
    struct tr_option opt = {.key = "cache_dir", .value = dir, .file = "x.ini", .line = 2};
    struct tr_backend_params prm = {.struct_size = sizeof prm, .abi_version = TR_ABI_VERSION,
                                    .device_type = TR_DEVICE_CPU, .options = &opt, .n_options = 1};
    struct tr_backend *be = NULL;
    struct tr_program *prog = NULL;
    struct tr_error err = {0};
    if (tr_backend_init(pl, &prm, &be, &err) != TR_OK) fail_msg("init: %s", err.msg);
    struct small s;
    small_build(&s, 0.5f);
    if (tr_backend_compile(be, s.g, &prog, &err) != TR_OK) fail_msg("compile: %s", err.msg);
    struct tr_tensor *o = alloc_outputs(s.g);
    for (int i = 0; i < 2; i++) tr_test_poison(&o[i]);
    if (tr_backend_execute(be, prog, 2, s.in, 2, o, &err) != TR_OK) fail_msg("execute: %s", err.msg);
    double **ref = tr_ref_graph_run(s.g, s.in);
    tr_assert_close("softmax through the plugin", &o[0], ref[tr_graph_output(s.g, 0)], 1e-4);
    tr_assert_close("sum through the plugin", &o[1], ref[tr_graph_output(s.g, 1)], 1e-4);
    tr_ref_graph_free(s.g, ref);
    struct tr_backend_stats st;
    assert_int_equal(tr_backend_get_stats(be, prog, &st, &err), TR_OK);
    assert_int_equal(st.kernel_calls, 3); /* h (read twice), then each output */
    assert_true(st.arena_bytes > 0);
    /* a wrong input is named */
    struct tr_tensor wrong[2] = {s.in[1], s.in[0]};
    assert_int_equal(tr_backend_execute(be, prog, 2, wrong, 2, o, &err), TR_ERR_SHAPE);
    if (!strstr(err.msg, "'x'")) fail_msg("wrong input not named: %s", err.msg);
    free_tensors(o, 2);
    tr_program_free(prog);
    tr_backend_free(be);
    small_free(&s);
    tr_plugin_close(pl);

    /* the entry point alone: another major ABI is refused; nothing else is exported */
    void *so = dlopen(TR_BINARY_DIR "/plugins/libtrident_backend_jax.so", RTLD_NOW | RTLD_LOCAL);
    if (!so) fail_msg("dlopen: %s", dlerror());
    tr_backend_entry_fn entry = (tr_backend_entry_fn)dlsym(so, TR_BACKEND_ENTRY_SYMBOL);
    assert_non_null(entry);
    assert_null(dlsym(so, "jax_codegen"));
    const struct tr_backend_i *it = NULL;
    assert_int_equal(entry(TR_ABI_MAKE(TR_ABI_MAJOR + 1, 0), tr_host_api_get(), &it, &err), TR_ERR_PLUGIN);
    assert_null(it);
    dlclose(so);
}

/* ---- BERT tiny against Hugging Face ---- */


static void bert_matches_hf(enum tr_dtype dt) {
    struct tr_error e = {0};
    struct tr_test_bert b;
    tr_test_bert_open(&b, dt, "");
    struct tr_graph *g = b.g;

    char dir[512];
    fresh_dir(dir, sizeof dir, dt == TR_DTYPE_F32 ? "bert_f32" : "bert_bf16");
    struct tr_jax_context *ctx = ctx_make(dir, NULL, 1);
    struct tr_jax_program *p = compile_ok(ctx, g);
    struct tr_tensor *out = alloc_outputs(g);
    for (int i = 0; i < 3; i++) tr_test_poison(&out[i]);
    if (tr_jax_execute(p, 3, b.in, 3, out, &e) != TR_OK) fail_msg("execute: %s", e.msg);
    tr_test_expect_bert_hf(b.io, g, out, dt, "jax bert tiny", "");
    /* Per layer: q, k, v, output, intermediate and output GEMMs with their epilogues; three
     * transposes in and one out; attention; two residual + layer norm kernels. Plus the
     * embeddings (one kernel), the mask, the pooler's slice and GEMM, the classifier. */
    int L = (int)tiny()->num_hidden_layers;
    struct tr_backend_stats st;
    assert_int_equal(tr_jax_iface.get_stats(ctx, p, &st, &e), TR_OK);
    print_message("jax bert tiny %s: %llu kernel calls, arena %llu B; %s\n", tr_dtype_name(dt),
                  (unsigned long long)st.kernel_calls, (unsigned long long)st.arena_bytes, st.notes);
    assert_int_equal(st.kernel_calls, (uint64_t)(13 * L + 5));
    assert_int_equal(p->fusion.n_epilogues, 6 * L + 2);
    assert_int_equal(p->fusion.n_clusters, 2 * L + 2);
    assert_int_equal(p->fusion.n_functions, 3); /* every residual + layer norm is the same code */
    int64_t act = 0;
    for (int i = 0; i < p->n_bufs; i++) act += p->bufs[i].size;
    assert_true(p->arena_bytes < act / 2); /* buffers share the arena */
    free_tensors(out, 3);
    tr_jax_program_free(p);
    tr_jax_iface.free(ctx);
    tr_test_bert_close(&b);
}

static void test_bert_f32(void **state) { bert_matches_hf(TR_DTYPE_F32); }
static void test_bert_bf16(void **state) { bert_matches_hf(TR_DTYPE_BF16); }

TR_TEST_MAIN(tr_test_dir_setup, tr_test_dir_teardown, test_kinds_f32, test_kinds_bf16, test_cache, test_cache_secret_race, test_cache_build_race,
             test_unfused,
             test_compiler_errors, test_plugin, test_bert_f32, test_bert_bf16)
