/* Every CUDA kernel against the cpu kernel (the reference) on random inputs of several
 * shapes, through the graph-op interface: each op run by tr_kernels_run on a cpu and a
 * cuda context with the same attributes, then bound on cuda (tr_kernels_bind: nothing
 * written at bind, the counters unmoved) and called twice; the GEMM epilogues and the
 * fused kernels through their tr_k_* entries and bound forms. The device output is
 * poisoned with NaN before each run; tolerances as test_cuda_common.h says. Without a
 * CUDA device (this machine, CI) each test prints "SKIPPED: no CUDA device found (name)"
 * and is skipped; tests/gpu/run.sh runs it on a GPU. The public tr_k_* entries, the
 * math mode and cuRAND are test_cuda_kernels_api.c's. */
#include <float.h>
#include "test_cuda_compare.h"

static void test_context(void **state) {
    (void)state;
    SKIP_WITHOUT_GPU();
    SKIP_ON_CPU_STAND_IN();
    assert_int_equal(tr_kernels_device_type(G), TR_DEVICE_CUDA);
    assert_non_null(tr_kernels_cuda_stream(G));
    void *p = NULL;
    CHECK_OK(tr_kernels_alloc(G, 1000, &p, &err));
    char host[1000], back[1000];
    for (int i = 0; i < 1000; i++) host[i] = (char)(i * 7);
    CHECK_OK(tr_kernels_to_device(G, p, host, sizeof host, &err));
    CHECK_OK(tr_kernels_to_host(G, back, p, sizeof back, &err));
    assert_memory_equal(host, back, sizeof host);
    struct tr_cuda_pool_stats st;
    CHECK_OK(tr_kernels_cuda_memory(G, &st, &err));
    assert_true(st.allocated >= 1000);
    tr_kernels_dealloc(G, p);
    /* a host tensor handed to the cuda context is refused by name */
    int64_t sh[1] = {4};
    struct tr_tensor x = randn(TR_DTYPE_F32, 1, sh, 1), y = tr_test_tensor(TR_DTYPE_F32, 1, sh);
    assert_int_equal(tr_kernels_run(G, TR_OP_RELU, NULL, 1, &x, &y, &err), TR_ERR_DEVICE);
    assert_non_null(strstr(err.msg, "not cuda"));
    tr_test_tensor_free(&x);
    tr_test_tensor_free(&y);
}

/* What every machine can check: the cpu context has no cuda side, and without a device
 * the answer is the one clear message (with CUDA built, cudaGetDeviceCount's reason). */
static void test_device_routing(void **state) {
    (void)state;
    SKIP_ON_CPU_STAND_IN();
    struct tr_cuda_pool_stats st;
    assert_null(tr_kernels_cuda_stream(tr_test_k));
    assert_int_not_equal(tr_kernels_cuda_memory(tr_test_k, &st, &err), TR_OK);
    struct tr_error e = {0};
    int avail = tr_kernels_device_available(TR_DEVICE_CUDA, &e);
    if (G) {
        assert_int_equal(avail, TR_OK);
        assert_true(tr_kernels_cuda_built());
        char gpu[128] = "";
        assert_int_equal(tr_kernels_device_describe(TR_DEVICE_CUDA, 0, gpu, sizeof gpu, &e), TR_OK);
        assert_non_null(strstr(gpu, ", sm_"));
        printf("device: %s\n", gpu);
        return;
    }
    assert_int_equal(avail, TR_ERR_DEVICE);
    assert_non_null(strstr(e.msg, "no CUDA device found"));
    /* the description a report names the card by: none without one, the cpu's brand on the cpu */
    char name[128] = "poison";
    struct tr_error d = {0};
    assert_int_equal(tr_kernels_device_describe(TR_DEVICE_CUDA, 0, name, sizeof name, &d), TR_ERR_DEVICE);
    assert_non_null(strstr(d.msg, "no CUDA device found"));
    assert_string_equal(name, "");
    struct tr_cpu_info cpu;
    assert_int_equal(tr_kernels_cpu_info(&cpu, &d), TR_OK);
    assert_int_equal(tr_kernels_device_describe(TR_DEVICE_CPU, 0, name, sizeof name, &d), TR_OK);
    assert_string_equal(name, cpu.model);
    assert_int_equal(tr_kernels_device_describe(7, 0, name, sizeof name, &d), TR_ERR_INVALID);
    assert_non_null(strstr(no_device, "no CUDA device found"));
    struct tr_kernels *k = NULL;
    assert_int_equal(tr_kernels_init(&k, TR_DEVICE_CUDA, 0, &e), TR_ERR_DEVICE);
    assert_null(k);
    if (!tr_kernels_cuda_built()) assert_non_null(strstr(e.msg, "built without CUDA"));
}

static void test_unary(void **state) {
    (void)state;
    SKIP_WITHOUT_GPU();
    static const int ops[] = {TR_OP_GELU, TR_OP_TANH, TR_OP_RELU, TR_OP_SILU, TR_OP_SIGMOID,
                              TR_OP_EXP,  TR_OP_NEG,  TR_OP_SQRT, TR_OP_RSQRT, TR_OP_SCALE};
    static const int64_t shapes[3][3] = {{7}, {3, 129}, {2, 3, 1000}};
    for (int d = 0; d < 3; d++)
        for (int s = 0; s < 3; s++)
            for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++)
                for (int approx = 0; approx < (ops[o] == TR_OP_GELU ? 2 : 1); approx++) {
                    struct tr_tensor x = randn(FLOATS[d], s + 1, shapes[s], 10 + o);
                    if (ops[o] == TR_OP_SQRT || ops[o] == TR_OP_RSQRT)
                        for (int64_t i = 0; i < tr_tensor_numel(&x); i++)
                            tr_tensor_set_f64(&x, i, fabs(tr_tensor_get_f64(&x, i)) + 0.1);
                    struct tr_attrs at = {.ints = {approx}, .floats = {1.5f, -0.25f}};
                    char what[64];
                    snprintf(what, sizeof what, "%s shape %d", tr_op_name(ops[o]), s);
                    compare_op(what, ops[o], &at, 1, &x, FLOATS[d], s + 1, shapes[s]);
                    tr_test_tensor_free(&x);
                }
}

static void test_binary(void **state) {
    (void)state;
    SKIP_WITHOUT_GPU();
    struct {
        int na, nb, nc;
        int64_t a[4], b[4], c[4];
    } cases[] = {
        {2, 2, 2, {5, 33}, {5, 33}, {5, 33}},
        {3, 2, 3, {3, 1, 5}, {4, 1}, {3, 4, 5}},
        {3, 1, 3, {2, 3, 64}, {64}, {2, 3, 64}},
        {1, 3, 3, {1}, {2, 3, 4}, {2, 3, 4}},
    };
    static const int ops[] = {TR_OP_ADD, TR_OP_SUB, TR_OP_MUL, TR_OP_DIV};
    for (int d = 0; d < 3; d++)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
            for (int o = 0; o < 4; o++) {
                struct tr_tensor in[2] = {randn(FLOATS[d], cases[c].na, cases[c].a, 3 + c),
                                          randn(FLOATS[d], cases[c].nb, cases[c].b, 7 + c)};
                char what[64];
                snprintf(what, sizeof what, "%s case %zu", tr_op_name(ops[o]), c);
                compare_op(what, ops[o], NULL, 2, in, FLOATS[d], cases[c].nc, cases[c].c);
                free_all(2, in);
            }
}

static void test_matmul(void **state) {
    (void)state;
    SKIP_WITHOUT_GPU();
    struct {
        int na, nb, nc;
        int64_t a[4], b[4], c[4];
        int ta, tb;
        float alpha;
    } cases[] = {
        {2, 2, 2, {17, 33}, {33, 9}, {17, 9}, 0, 0, 0.0f},
        {2, 2, 2, {33, 17}, {9, 33}, {17, 9}, 1, 1, 0.5f},
        {4, 4, 4, {2, 3, 16, 32}, {2, 3, 32, 8}, {2, 3, 16, 8}, 0, 0, 0.0f},
        {4, 4, 4, {2, 3, 16, 32}, {2, 3, 8, 32}, {2, 3, 16, 8}, 0, 1, 0.125f},
        {3, 2, 3, {4, 64, 128}, {128, 96}, {4, 64, 96}, 0, 0, 0.0f},
    };
    for (int d = 0; d < 3; d++)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            struct tr_tensor in[2] = {randn(FLOATS[d], cases[c].na, cases[c].a, 20 + c),
                                      randn(FLOATS[d], cases[c].nb, cases[c].b, 30 + c)};
            struct tr_attrs at = {.ints = {cases[c].ta, cases[c].tb}, .floats = {cases[c].alpha}};
            char what[64];
            snprintf(what, sizeof what, "matmul case %zu", c);
            compare_op(what, TR_OP_MATMUL, &at, 2, in, FLOATS[d], cases[c].nc, cases[c].c);
            free_all(2, in);
        }
}

/* The GEMM epilogues: bias (c's dtype or f32) and every activation, against tr_k_matmul. */
static void test_matmul_epilogues(void **state) {
    (void)state;
    SKIP_WITHOUT_GPU();
    int64_t sa[3] = {2, 24, 40}, sb[2] = {40, 56}, sc[3] = {2, 24, 56}, sn[1] = {56};
    for (int d = 0; d < 2; d++)
        for (int bias_f32 = 0; bias_f32 < 2; bias_f32++)
            for (int act = TR_ACT_NONE; act <= TR_ACT_SILU; act++) {
                struct tr_tensor a = randn(FLOATS[d], 3, sa, 1), b = randn(FLOATS[d], 2, sb, 2);
                struct tr_tensor bias = randn(bias_f32 ? TR_DTYPE_F32 : FLOATS[d], 1, sn, 3);
                struct tr_tensor ref = tr_test_tensor(FLOATS[d], 3, sc), got = tr_test_tensor(FLOATS[d], 3, sc);
                CHECK_OK(tr_k_matmul(tr_test_k, &a, &b, &ref, 0, 0, 0.75f, &bias, (enum tr_act)act, &err));
                struct tr_tensor da = to_dev(&a), db = to_dev(&b), dbias = to_dev(&bias);
                tr_test_poison(&got);
                struct tr_tensor dc = to_dev(&got);
                CHECK_OK(tr_k_matmul(G, &da, &db, &dc, 0, 0, 0.75f, &dbias, (enum tr_act)act, &err));
                fetch(&got, &dc);
                char what[80];
                snprintf(what, sizeof what, "matmul %s, bias %s, act %d", tr_dtype_name(FLOATS[d]),
                         tr_dtype_name((enum tr_dtype)bias.dtype), act);
                check_out(what, "tr_k_matmul", &got, &ref);
                /* bound: its own plan, made at bind; called twice */
                poison_dev(&got, &dc);
                struct tr_kernel_call call;
                CHECK_OK(tr_kernels_bind_matmul(G, &da, &db, &dc, 0, 0, 0.75f, &dbias, (enum tr_act)act, &call, &err));
                CHECK_OK(tr_kernels_call(G, &call, &err));
                CHECK_OK(tr_kernels_call(G, &call, &err));
                fetch(&got, &dc);
                check_out(what, "bound matmul", &got, &ref);
                tr_kernels_unbind(G, &call);
                tr_kernels_dealloc(G, da.data);
                tr_kernels_dealloc(G, db.data);
                tr_kernels_dealloc(G, dbias.data);
                tr_kernels_dealloc(G, dc.data);
                tr_test_tensor_free(&a), tr_test_tensor_free(&b), tr_test_tensor_free(&bias);
                tr_test_tensor_free(&ref), tr_test_tensor_free(&got);
            }
}

/* The tf backend's fused kernels against tr_k_* on the cpu. */
static void check_fused(const char *what, struct tr_tensor *ref, struct tr_tensor *dout) {
    struct tr_tensor got = *ref;
    CHECK_OK(tr_host_alloc(&got.data, tr_tensor_nbytes(ref), &err));
    fetch(&got, dout);
    check_out(what, "tr_k", &got, ref);
    tr_host_free(got.data);
}

/* A bound fused call: nothing written at bind, then two calls give ref. */
static void check_bound(const char *what, struct tr_kernel_call *call, struct tr_tensor *ref, struct tr_tensor *dout) {
    struct tr_tensor got = *ref;
    CHECK_OK(tr_host_alloc(&got.data, tr_tensor_nbytes(ref), &err));
    CHECK_OK(tr_kernels_call(G, call, &err));
    CHECK_OK(tr_kernels_call(G, call, &err));
    fetch(&got, dout);
    check_out(what, "bound", &got, ref);
    tr_kernels_unbind(G, call);
    tr_host_free(got.data);
}

static void test_fused(void **state) {
    (void)state;
    SKIP_WITHOUT_GPU();
    int64_t sx[3] = {2, 9, 200}, sd[1] = {200}, sm[4] = {2, 1, 1, 200}, sa[4] = {2, 3, 9, 200};
    for (int d = 0; d < 3; d++) {
        /* bias + residual + layer norm, with each optional operand absent once */
        for (int absent = 0; absent < 4; absent++) {
            struct tr_tensor x = randn(FLOATS[d], 3, sx, 400), res = randn(FLOATS[d], 3, sx, 401);
            struct tr_tensor bias = randn(absent == 2 ? TR_DTYPE_F32 : FLOATS[d], 1, sd, 402);
            struct tr_tensor g = randn(FLOATS[d], 1, sd, 403), b = randn(TR_DTYPE_F32, 1, sd, 404);
            struct tr_tensor ref = tr_test_tensor(FLOATS[d], 3, sx), o = tr_test_tensor(FLOATS[d], 3, sx);
            tr_test_poison(&o);
            const struct tr_tensor *pb = absent == 0 ? NULL : &bias, *pr = absent == 1 ? NULL : &res;
            const struct tr_tensor *pg = absent == 3 ? NULL : &g;
            CHECK_OK(tr_k_bias_residual_layer_norm(tr_test_k, &x, pb, pr, pg, &b, 1e-5f, &ref, &err));
            struct tr_tensor dx = to_dev(&x), dr = to_dev(&res), dbias = to_dev(&bias), dg = to_dev(&g), db = to_dev(&b),
                             dout = to_dev(&o);
            CHECK_OK(tr_k_bias_residual_layer_norm(G, &dx, pb ? &dbias : NULL, pr ? &dr : NULL, pg ? &dg : NULL, &db,
                                                   1e-5f, &dout, &err));
            check_fused("bias_residual_layer_norm", &ref, &dout);
            struct tr_kernel_call call;
            CHECK_OK(tr_kernels_to_device(G, dout.data, o.data, tr_tensor_nbytes(&o), &err));
            CHECK_OK(tr_kernels_bind_bias_residual_layer_norm(G, &dx, pb ? &dbias : NULL, pr ? &dr : NULL,
                                                              pg ? &dg : NULL, &db, 1e-5f, &dout, &call, &err));
            check_bound("bias_residual_layer_norm", &call, &ref, &dout);
            struct tr_tensor *all[] = {&dx, &dr, &dbias, &dg, &db, &dout};
            for (int i = 0; i < 6; i++) tr_kernels_dealloc(G, all[i]->data);
            tr_test_tensor_free(&x), tr_test_tensor_free(&res), tr_test_tensor_free(&bias), tr_test_tensor_free(&g);
            tr_test_tensor_free(&b), tr_test_tensor_free(&ref), tr_test_tensor_free(&o);
        }
        /* scale + mask + softmax: a (B,1,1,T) padding mask, a full mask, none */
        for (int mk = 0; mk < 3; mk++) {
            struct tr_tensor x = randn(FLOATS[d], 4, sa, 410);
            struct tr_tensor mask = mk == 0 ? tr_test_tensor(TR_DTYPE_F32, 4, sm) : randn(FLOATS[d], 4, sa, 411);
            if (mk == 0)
                for (int64_t i = 0; i < 400; i++) ((float *)mask.data)[i] = i % 200 >= 180 ? -10000.0f : 0.0f;
            struct tr_tensor ref = tr_test_tensor(FLOATS[d], 4, sa), o = tr_test_tensor(FLOATS[d], 4, sa);
            tr_test_poison(&o);
            CHECK_OK(tr_k_scale_mask_softmax(tr_test_k, &x, 0.125f, mk == 2 ? NULL : &mask, &ref, &err));
            struct tr_tensor dx = to_dev(&x), dm = to_dev(&mask), dout = to_dev(&o);
            CHECK_OK(tr_k_scale_mask_softmax(G, &dx, 0.125f, mk == 2 ? NULL : &dm, &dout, &err));
            check_fused("scale_mask_softmax", &ref, &dout);
            struct tr_kernel_call call;
            CHECK_OK(tr_kernels_to_device(G, dout.data, o.data, tr_tensor_nbytes(&o), &err));
            CHECK_OK(tr_kernels_bind_scale_mask_softmax(G, &dx, 0.125f, mk == 2 ? NULL : &dm, &dout, &call, &err));
            check_bound("scale_mask_softmax", &call, &ref, &dout);
            tr_kernels_dealloc(G, dx.data), tr_kernels_dealloc(G, dm.data), tr_kernels_dealloc(G, dout.data);
            tr_test_tensor_free(&x), tr_test_tensor_free(&mask), tr_test_tensor_free(&ref), tr_test_tensor_free(&o);
        }
        /* three embeddings summed (word (B,T), position (T), type (B,T)) then layer norm */
        int64_t st3[3][2] = {{100, 200}, {9, 200}, {2, 200}};
        struct tr_tensor tabs[3], ids[3], dtabs[3], dids[3];
        for (int t = 0; t < 3; t++) {
            tabs[t] = randn(FLOATS[d], 2, st3[t], 420 + t);
            ids[t] = t == 1 ? tr_test_tensor(TR_DTYPE_I64, 1, (int64_t[]){9}) : tr_test_tensor(TR_DTYPE_I32, 2, sx);
            tr_test_randint(&ids[t], 430 + t, st3[t][0]);
            dtabs[t] = to_dev(&tabs[t]);
            dids[t] = to_dev(&ids[t]);
        }
        struct tr_tensor g = randn(FLOATS[d], 1, sd, 440), b = randn(FLOATS[d], 1, sd, 441);
        struct tr_tensor ref = tr_test_tensor(FLOATS[d], 3, sx), o = tr_test_tensor(FLOATS[d], 3, sx);
        tr_test_poison(&o);
        CHECK_OK(tr_k_embedding_sum_layer_norm(tr_test_k, 3, tabs, ids, &g, &b, 1e-12f, &ref, &err));
        struct tr_tensor dg = to_dev(&g), db = to_dev(&b), dout = to_dev(&o);
        CHECK_OK(tr_k_embedding_sum_layer_norm(G, 3, dtabs, dids, &dg, &db, 1e-12f, &dout, &err));
        check_fused("embedding_sum_layer_norm", &ref, &dout);
        struct tr_kernel_call call;
        CHECK_OK(tr_kernels_to_device(G, dout.data, o.data, tr_tensor_nbytes(&o), &err));
        CHECK_OK(tr_kernels_bind_embedding_sum_layer_norm(G, 3, dtabs, dids, &dg, &db, 1e-12f, &dout, &call, &err));
        check_bound("embedding_sum_layer_norm", &call, &ref, &dout);
        for (int t = 0; t < 3; t++) {
            tr_kernels_dealloc(G, dtabs[t].data), tr_kernels_dealloc(G, dids[t].data);
            tr_test_tensor_free(&tabs[t]), tr_test_tensor_free(&ids[t]);
        }
        tr_kernels_dealloc(G, dg.data), tr_kernels_dealloc(G, db.data), tr_kernels_dealloc(G, dout.data);
        tr_test_tensor_free(&g), tr_test_tensor_free(&b), tr_test_tensor_free(&ref), tr_test_tensor_free(&o);
    }
}

static void test_softmax_layer_norm(void **state) {
    (void)state;
    SKIP_WITHOUT_GPU();
    static const int64_t shapes[3][3] = {{5, 7}, {3, 1000}, {2, 2, 4097}};
    static const int nd[3] = {2, 2, 3};
    for (int d = 0; d < 3; d++)
        for (int s = 0; s < 3; s++) {
            struct tr_tensor x = randn(FLOATS[d], nd[s], shapes[s], 40 + s);
            compare_op("softmax", TR_OP_SOFTMAX, NULL, 1, &x, FLOATS[d], nd[s], shapes[s]);
            int64_t D = shapes[s][nd[s] - 1];
            struct tr_tensor ln[3] = {x, randn(FLOATS[d], 1, &D, 50 + s), randn(FLOATS[d], 1, &D, 60 + s)};
            struct tr_attrs eps = {.floats = {1e-5f}};
            compare_op("layer_norm", TR_OP_LAYER_NORM, &eps, 3, ln, FLOATS[d], nd[s], shapes[s]);
            free_all(3, ln);
        }
}

/* A NaN is kept, as the cpu's kernels and torch keep it: softmax of a row holding one is
 * NaN (among finite values, and among -inf alone, which once read as a masked row: zeros),
 * and a max over it is NaN, along a row and down a column. */
static void test_nan_rows(void **state) {
    (void)state;
    SKIP_WITHOUT_GPU();
    const int64_t sx[2] = {3, 40};
    for (int d = 0; d < 2; d++) {
        struct tr_tensor x = randn(FLOATS[d], 2, sx, 45);
        tr_tensor_set_f64(&x, 5, NAN);
        for (int64_t j = 0; j < 40; j++) tr_tensor_set_f64(&x, 40 + j, j == 7 ? NAN : -INFINITY);
        struct tr_tensor dx = to_dev(&x);
        struct tr_tensor y = tr_test_tensor(FLOATS[d], 2, sx);
        tr_test_poison(&y);
        struct tr_tensor dy = to_dev(&y);
        CHECK_OK(tr_kernels_run(G, TR_OP_SOFTMAX, NULL, 1, &dx, &dy, &err));
        fetch(&y, &dy);
        for (int64_t i = 0; i < 120; i++)
            if ((isnan(tr_tensor_get_f64(&y, i)) != 0) != (i < 80))
                fail_msg("softmax %s: element %lld is %g", tr_dtype_name(FLOATS[d]), (long long)i, tr_tensor_get_f64(&y, i));
        for (int ax = 0; ax < 2; ax++) {
            const int64_t n = sx[1 - ax];
            struct tr_tensor m = tr_test_tensor(FLOATS[d], 1, &n);
            tr_test_poison(&m);
            struct tr_tensor dm = to_dev(&m);
            struct tr_attrs at = {.ints = {ax, 0}};
            CHECK_OK(tr_kernels_run(G, TR_OP_MAX, &at, 1, &dx, &dm, &err));
            fetch(&m, &dm);
            for (int64_t i = 0; i < n; i++) {
                const int want = ax == 1 ? i < 2 : i == 5 || i == 7;
                if ((isnan(tr_tensor_get_f64(&m, i)) != 0) != want)
                    fail_msg("max %s axis %d: element %lld is %g", tr_dtype_name(FLOATS[d]), ax, (long long)i,
                             tr_tensor_get_f64(&m, i));
            }
            tr_kernels_dealloc(G, dm.data);
            tr_test_tensor_free(&m);
        }
        tr_kernels_dealloc(G, dx.data), tr_kernels_dealloc(G, dy.data);
        tr_test_tensor_free(&x), tr_test_tensor_free(&y);
    }
}

static void test_embedding(void **state) {
    (void)state;
    SKIP_WITHOUT_GPU();
    int64_t st[2] = {50, 48}, si[2] = {3, 7}, so[3] = {3, 7, 48};
    for (int d = 0; d < 3; d++)
        for (int idt = TR_DTYPE_I32; idt <= TR_DTYPE_I64; idt++) {
            struct tr_tensor in[2] = {randn(FLOATS[d], 2, st, 70), tr_test_tensor((enum tr_dtype)idt, 2, si)};
            tr_test_randint(&in[1], 71, 50);
            compare_op("embedding", TR_OP_EMBEDDING, NULL, 2, in, FLOATS[d], 3, so);
            free_all(2, in);
        }
}

/* An id out of range is reported by the next sync, by name. */
static void test_embedding_bad_id(void **state) {
    (void)state;
    SKIP_WITHOUT_GPU();
    SKIP_ON_CPU_STAND_IN();
    int64_t st[2] = {5, 8}, si[1] = {3}, so[2] = {3, 8};
    struct tr_tensor t = randn(TR_DTYPE_F32, 2, st, 1), ids = tr_test_tensor(TR_DTYPE_I32, 1, si);
    ((int32_t *)ids.data)[0] = 1, ((int32_t *)ids.data)[1] = 9, ((int32_t *)ids.data)[2] = 0;
    struct tr_tensor o = tr_test_tensor(TR_DTYPE_F32, 2, so);
    struct tr_tensor in[2] = {to_dev(&t), to_dev(&ids)}, dout = to_dev(&o);
    CHECK_OK(tr_kernels_run(G, TR_OP_EMBEDDING, NULL, 2, in, &dout, &err));
    assert_int_equal(tr_kernels_sync(G, &err), TR_ERR_INVALID);
    assert_non_null(strstr(err.msg, "id 9"));
    CHECK_OK(tr_kernels_sync(G, &err)); /* reported once */
    tr_kernels_dealloc(G, in[0].data), tr_kernels_dealloc(G, in[1].data), tr_kernels_dealloc(G, dout.data);
    tr_test_tensor_free(&t), tr_test_tensor_free(&ids), tr_test_tensor_free(&o);
}

static void test_layout(void **state) {
    (void)state;
    SKIP_WITHOUT_GPU();
    static const enum tr_dtype dts[5] = {TR_DTYPE_F32, TR_DTYPE_BF16, TR_DTYPE_F16, TR_DTYPE_I32, TR_DTYPE_I64};
    int64_t sx[4] = {2, 3, 4, 5};
    for (int d = 0; d < 5; d++) {
        struct tr_tensor x = tr_test_tensor(dts[d], 4, sx);
        tr_test_rand(&x, 80, 1.0, 1000);
        struct tr_attrs p1 = {.ints = {0, 2, 1, 3}, .n_ints = 4}, p2 = {.ints = {3, 1, 2, 0}, .n_ints = 4};
        compare_op("transpose 0213", TR_OP_TRANSPOSE, &p1, 1, &x, dts[d], 4, (int64_t[]){2, 4, 3, 5});
        compare_op("transpose 3120", TR_OP_TRANSPOSE, &p2, 1, &x, dts[d], 4, (int64_t[]){5, 3, 4, 2});
        struct tr_attrs sl = {.ints = {2, 1, 4, 2}};
        compare_op("slice", TR_OP_SLICE, &sl, 1, &x, dts[d], 4, (int64_t[]){2, 3, 2, 5});
        struct tr_attrs sl2 = {.ints = {-1, -3, 5, 1}};
        compare_op("slice negative", TR_OP_SLICE, &sl2, 1, &x, dts[d], 4, (int64_t[]){2, 3, 4, 3});
        struct tr_tensor y = tr_test_tensor(dts[d], 4, (int64_t[]){2, 1, 4, 5});
        memset(y.data, 0x11, tr_tensor_nbytes(&y));
        struct tr_tensor cat[3] = {x, y, x};
        struct tr_attrs ax1 = {.ints = {1}};
        compare_op("concat", TR_OP_CONCAT, &ax1, 3, cat, dts[d], 4, (int64_t[]){2, 7, 4, 5});
        struct tr_attrs rs = {.ints = {6, 20}, .n_ints = 2};
        compare_op("reshape", TR_OP_RESHAPE, &rs, 1, &x, dts[d], 2, (int64_t[]){6, 20});
        struct tr_tensor b = tr_test_tensor(dts[d], 2, (int64_t[]){3, 1});
        memset(b.data, 0x22, tr_tensor_nbytes(&b));
        struct tr_attrs bc = {.ints = {2, 3, 4}, .n_ints = 3};
        compare_op("broadcast", TR_OP_BROADCAST, &bc, 1, &b, dts[d], 3, (int64_t[]){2, 3, 4});
        tr_test_tensor_free(&x), tr_test_tensor_free(&y), tr_test_tensor_free(&b);
    }
}

/* UPDATE_SLICE: out of place against the cpu on every dtype and axis of a 4-D cache; in
 * place (out is x) bound once and called with the start changed in device memory between
 * calls (what a captured graph replays); a bad start writes nothing and is reported by
 * the next sync, once. */
static void test_update_slice(void **state) {
    (void)state;
    SKIP_WITHOUT_GPU();
    static const enum tr_dtype dts[5] = {TR_DTYPE_F32, TR_DTYPE_BF16, TR_DTYPE_F16, TR_DTYPE_F64, TR_DTYPE_I32};
    int64_t sx[4] = {2, 3, 8, 4};
    for (int d = 0; d < 5; d++)
        for (int ax = 0; ax < 4; ax++) {
            int64_t su[4] = {2, 3, 8, 4};
            su[ax] = ax == 2 ? 3 : 1;
            struct tr_tensor in[3] = {tr_test_tensor(dts[d], 4, sx), tr_test_tensor(dts[d], 4, su),
                                      tr_test_tensor(TR_DTYPE_I32, 1, (int64_t[]){1})};
            tr_test_rand(&in[0], 90, 1.0, 1000);
            tr_test_rand(&in[1], 91, 1.0, 1000);
            ((int32_t *)in[2].data)[0] = (int32_t)(sx[ax] - su[ax]);
            struct tr_attrs at = {.ints = {ax - 4}, .n_ints = 1};
            compare_op("update_slice", TR_OP_UPDATE_SLICE, &at, 3, in, dts[d], 4, sx);
            free_all(3, in);
        }
    /* in place, bound, start moved on the device between calls */
    struct tr_tensor x = randn(TR_DTYPE_BF16, 4, sx, 92), u = randn(TR_DTYPE_BF16, 4, (int64_t[]){2, 3, 2, 4}, 93);
    struct tr_tensor s = tr_test_tensor(TR_DTYPE_I32, 1, (int64_t[]){1}), got = tr_test_tensor(TR_DTYPE_BF16, 4, sx);
    struct tr_tensor din[3] = {to_dev(&x), to_dev(&u), to_dev(&s)};
    struct tr_attrs at2 = {.ints = {2}, .n_ints = 1};
    struct tr_kernel_call call;
    CHECK_OK(tr_kernels_bind(G, TR_OP_UPDATE_SLICE, &at2, 3, din, &din[0], &call, &err));
    static const int32_t starts[3] = {6, 0, 3};
    for (int k = 0; k < 3; k++) {
        CHECK_OK(tr_kernels_to_device(G, din[2].data, &starts[k], sizeof(int32_t), &err));
        CHECK_OK(tr_kernels_call(G, &call, &err));
        ((int32_t *)s.data)[0] = starts[k];
        struct tr_tensor hin[3] = {x, u, s};
        CHECK_OK(tr_kernels_run(tr_test_k, TR_OP_UPDATE_SLICE, &at2, 3, hin, &x, &err)); /* the cpu, in place too */
        fetch(&got, &din[0]);
        check_out("update_slice in place", "bound", &got, &x);
    }
    /* a start past the end: nothing written, reported once by the sync (cuda's way; the
     * cpu refuses the call itself) */
    if (cpu_stand_in) {
        tr_kernels_unbind(G, &call);
        for (int i = 0; i < 3; i++) tr_kernels_dealloc(G, din[i].data);
        tr_test_tensor_free(&x), tr_test_tensor_free(&u), tr_test_tensor_free(&s), tr_test_tensor_free(&got);
        return;
    }
    const int32_t bad = 7;
    CHECK_OK(tr_kernels_to_device(G, din[2].data, &bad, sizeof bad, &err));
    CHECK_OK(tr_kernels_call(G, &call, &err));
    assert_int_equal(tr_kernels_sync(G, &err), TR_ERR_INVALID);
    if (!strstr(err.msg, "update_slice: start 7 with n 2")) fail_msg("message: %s", err.msg);
    CHECK_OK(tr_kernels_sync(G, &err));
    fetch(&got, &din[0]);
    check_out("update_slice bad start leaves x", "bound", &got, &x);
    tr_kernels_unbind(G, &call);
    for (int i = 0; i < 3; i++) tr_kernels_dealloc(G, din[i].data);
    tr_test_tensor_free(&x), tr_test_tensor_free(&u), tr_test_tensor_free(&s), tr_test_tensor_free(&got);
}

static void test_reduce(void **state) {
    (void)state;
    SKIP_WITHOUT_GPU();
    int64_t sx[3] = {3, 40, 5};
    static const int ops[3] = {TR_OP_SUM, TR_OP_MEAN, TR_OP_MAX};
    for (int d = 0; d < 3; d++)
        for (int o = 0; o < 3; o++)
            for (int ax = 0; ax < 3; ax++)
                for (int keep = 0; keep < 2; keep++) {
                    struct tr_tensor x = randn(FLOATS[d], 3, sx, 90 + ax);
                    int64_t so[3];
                    int n = 0;
                    for (int i = 0; i < 3; i++)
                        if (i != ax)
                            so[n++] = sx[i];
                        else if (keep)
                            so[n++] = 1;
                    struct tr_attrs at = {.ints = {ax, keep}};
                    char what[64];
                    snprintf(what, sizeof what, "%s axis %d keep %d", tr_op_name(ops[o]), ax, keep);
                    compare_op(what, ops[o], &at, 1, &x, FLOATS[d], n, so);
                    tr_test_tensor_free(&x);
                }
}

static void test_cast(void **state) {
    (void)state;
    SKIP_WITHOUT_GPU();
    static const enum tr_dtype dts[5] = {TR_DTYPE_F32, TR_DTYPE_BF16, TR_DTYPE_F16, TR_DTYPE_I32, TR_DTYPE_I64};
    int64_t sx[2] = {7, 33};
    for (int a = 0; a < 5; a++)
        for (int b = 0; b < 5; b++) {
            struct tr_tensor x = tr_test_tensor(dts[a], 2, sx);
            tr_test_rand(&x, 100, 20.0, 200);
            struct tr_attrs at = {.ints = {dts[b]}};
            char what[64];
            snprintf(what, sizeof what, "cast %s to %s", tr_dtype_name(dts[a]), tr_dtype_name(dts[b]));
            compare_op(what, TR_OP_CAST, &at, 1, &x, dts[b], 2, sx);
            tr_test_tensor_free(&x);
        }
}

/* An attention case: q [B,H,Tq,D], k [B,Hk,Tk,D], v [B,Hk,Tk,Dv], out [B,H,Tq,Dv]; mask
 * [B,1,1,Tk] when `mask` (2: batch row 0 masked whole, attn_mask). */
struct attn_case {
    int64_t B, H, Hk, Tq, Tk, D, Dv;
    int causal, window, mask;
};

struct attn_shapes {
    int64_t q[4], k[4], v[4], out[4], mask[4];
};

static struct attn_shapes attn_shapes(const struct attn_case *c) {
    return (struct attn_shapes){.q = {c->B, c->H, c->Tq, c->D},
                                .k = {c->B, c->Hk, c->Tk, c->D},
                                .v = {c->B, c->Hk, c->Tk, c->Dv},
                                .out = {c->B, c->H, c->Tq, c->Dv},
                                .mask = {c->B, 1, 1, c->Tk}};
}

/* A padding mask [B,1,1,Tk]: the last pad + b keys of batch row b masked off. */
static void padding_mask(struct tr_tensor *m, int64_t pad) {
    const int64_t B = m->shape[0], Tk = m->shape[3];
    for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < Tk; j++) ((float *)m->data)[b * Tk + j] = j >= Tk - pad - b ? -10000.0f : 0.0f;
}

/* The case's mask: padding_mask, or with mask 2 a sample of padding alone as transformers'
 * BERT masks it (batch row 0 all finfo.min, the others' last pad + b keys -1e9): every
 * score of row 0 rounds to the same huge value, and its backward must give P = 1/Tk. */
static void attn_mask(struct tr_tensor *m, const struct attn_case *ac, int64_t pad) {
    padding_mask(m, pad);
    if (ac->mask != 2) return;
    const int64_t B = m->shape[0], Tk = m->shape[3];
    for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < Tk; j++) {
            float *x = (float *)m->data + b * Tk + j;
            *x = b == 0 ? -FLT_MAX : *x != 0.0f ? -1e9f : 0.0f;
        }
}

/* The math modes an f32 case runs under: strict (the CUDA-core kernels) and tf32 (the
 * tensor-core ones, compared at bf16's tolerance); bf16/f16 run once. */
static int attn_maths(enum tr_dtype dt, enum tr_math *m) {
    m[0] = TR_MATH_DEFAULT;
    if (dt != TR_DTYPE_F32 || cpu_stand_in) return 1; /* the cpu has no tf32 */
    m[1] = TR_MATH_TF32;
    return 2;
}
static double attn_tol(enum tr_dtype dt, enum tr_math m) { return dt == TR_DTYPE_F32 && m == TR_MATH_TF32 ? 1e-2 : 0.0; }

/* Shapes both kernels of each direction see: GQA (H/Hk 1, 2, 4, 8), causal with Tq < Tk,
 * the sliding window, the padding mask, and head sizes 16 .. 512 (64, 80, 128, 256 on
 * tensor cores for bf16/f16 and f32 in tf32; 16 and 32 only on the CUDA cores, and the
 * wide instances above 256: 320, and the SD VAE mid-block's one head of 512). */
static const struct attn_case ATTN_CASES[] = {
    {2, 4, 4, 33, 33, 16, 16, 0, 0, 0},    {2, 4, 2, 33, 33, 64, 64, 1, 0, 0},    {1, 8, 2, 5, 40, 64, 32, 1, 0, 0},
    {2, 2, 1, 70, 70, 32, 32, 0, 8, 0},    {2, 4, 4, 20, 45, 128, 128, 0, 0, 1}, {1, 2, 2, 17, 17, 256, 256, 1, 0, 1},
    {2, 8, 1, 100, 100, 64, 64, 0, 24, 1}, {1, 4, 2, 65, 130, 128, 128, 1, 0, 1}, {1, 2, 1, 70, 70, 256, 256, 0, 16, 1},
    {1, 2, 2, 31, 31, 80, 80, 1, 0, 0},    {1, 4, 2, 129, 129, 64, 128, 1, 0, 1}, {2, 1, 1, 40, 40, 512, 512, 0, 0, 0},
    {1, 2, 2, 33, 37, 320, 320, 1, 0, 1},
};

static void test_attention(void **state) {
    (void)state;
    SKIP_WITHOUT_GPU();
    /* both forward kernels: tensor cores where they fit (attention_plan.h), and the
     * CUDA-core one everywhere */
    for (int simple = 0; simple < 2; simple++)
        for (int d = 0; d < 3; d++) {
            enum tr_math maths[2];
            const int nm = attn_maths(FLOATS[d], maths);
            for (int mi = 0; mi < nm; mi++)
                for (size_t c = 0; c < sizeof ATTN_CASES / sizeof ATTN_CASES[0]; c++) {
                    if (simple) setenv("TRIDENT_CUDA_ATTENTION", "simple", 1);
                    else unsetenv("TRIDENT_CUDA_ATTENTION");
                    CHECK_OK(tr_kernels_set_math(G, maths[mi], &err));
                    const struct attn_case *ac = &ATTN_CASES[c];
                    const struct attn_shapes sh = attn_shapes(ac);
                    struct tr_tensor in[4] = {randn(FLOATS[d], 4, sh.q, 110 + c), randn(FLOATS[d], 4, sh.k, 120 + c),
                                              randn(FLOATS[d], 4, sh.v, 130 + c),
                                              tr_test_tensor(TR_DTYPE_F32, 4, sh.mask)};
                    padding_mask(&in[3], 3);
                    struct tr_attrs at = {.ints = {ac->causal, ac->window}};
                    char what[96];
                    snprintf(what, sizeof what, "attention case %zu D=%lld math %s (%s kernel)", c, (long long)ac->D,
                             tr_math_name(maths[mi]), simple ? "simple" : "default");
                    compare_op_tol(what, TR_OP_ATTENTION, &at, ac->mask ? 4 : 3, in, FLOATS[d], 4, sh.out,
                                   attn_tol(FLOATS[d], maths[mi]));
                    free_all(4, in);
                }
        }
    CHECK_OK(tr_kernels_set_math(G, TR_MATH_DEFAULT, &err));
    unsetenv("TRIDENT_CUDA_ATTENTION");
}

static void test_attention_grad(void **state) {
    (void)state;
    SKIP_WITHOUT_GPU();
    static const struct attn_case cases[] = {
        {2, 4, 2, 33, 33, 16, 16, 0, 0, 1},     {1, 4, 4, 40, 40, 64, 32, 1, 0, 0},   {1, 2, 1, 9, 50, 32, 32, 1, 0, 0},
        {2, 2, 2, 45, 45, 32, 64, 0, 7, 1},     {2, 4, 2, 70, 70, 64, 64, 1, 0, 1},   {1, 8, 2, 65, 100, 64, 64, 1, 0, 0},
        {1, 4, 4, 50, 50, 128, 128, 0, 20, 1},  {1, 2, 1, 40, 40, 256, 256, 1, 0, 1}, {1, 2, 2, 33, 70, 256, 256, 0, 9, 0},
        {2, 2, 2, 100, 100, 64, 64, 0, 0, 1},   {2, 2, 1, 20, 20, 32, 32, 1, 0, 2},   {2, 2, 2, 33, 33, 64, 64, 0, 0, 2},
    };
    /* the tensor-core backward (bf16/f16, f32 in tf32) and the CUDA-core one */
    for (int simple = 0; simple < 2; simple++)
        for (int d = 0; d < 3; d++) {
            enum tr_math maths[2];
            const int nm = attn_maths(FLOATS[d], maths);
            for (int mi = 0; mi < nm; mi++)
                for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
                    for (int which = 0; which < 3; which++) {
                        if (simple) setenv("TRIDENT_CUDA_ATTENTION", "simple", 1);
                        else unsetenv("TRIDENT_CUDA_ATTENTION");
                        CHECK_OK(tr_kernels_set_math(G, maths[mi], &err));
                        const struct attn_shapes sh = attn_shapes(&cases[c]);
                        struct tr_tensor in[5] = {randn(FLOATS[d], 4, sh.q, 210 + c), randn(FLOATS[d], 4, sh.k, 220 + c),
                                                  randn(FLOATS[d], 4, sh.v, 230 + c), randn(FLOATS[d], 4, sh.out, 240 + c),
                                                  tr_test_tensor(TR_DTYPE_F32, 4, sh.mask)};
                        attn_mask(&in[4], &cases[c], 2);
                        struct tr_attrs at = {.ints = {cases[c].causal, cases[c].window, which}};
                        char what[96];
                        snprintf(what, sizeof what, "attention_grad case %zu d%s math %s (%s kernel)", c,
                                 which == 0 ? "q" : which == 1 ? "k" : "v", tr_math_name(maths[mi]),
                                 simple ? "simple" : "default");
                        compare_op_tol(what, TR_OP_ATTENTION_GRAD, &at, cases[c].mask ? 5 : 4, in, FLOATS[d], 4,
                                       which == 0 ? sh.q : which == 1 ? sh.k : sh.v, attn_tol(FLOATS[d], maths[mi]));
                        free_all(5, in);
                    }
        }
    CHECK_OK(tr_kernels_set_math(G, TR_MATH_DEFAULT, &err));
    unsetenv("TRIDENT_CUDA_ATTENTION");
}

/* The backward's cases: head sizes 64, 128, 256 and 48 (the CUDA-core path), GQA, causal,
 * a window, with and without the padding mask, and a sample of padding alone. */
static const struct attn_case bwd_cases[] = {
    {2, 4, 2, 70, 70, 64, 64, 1, 0, 1}, {1, 4, 4, 50, 60, 128, 128, 0, 12, 1}, {1, 4, 1, 40, 40, 256, 256, 1, 0, 0},
    {1, 2, 2, 33, 33, 48, 48, 0, 0, 1}, {2, 2, 1, 24, 24, 64, 64, 0, 0, 2},
};

/* tr_k_attention_backward's joint path (statistics once, dk and dv in one launch, dq in
 * another) against the cpu's, with all three gradients and with subsets of them. */
static void test_attention_backward(void **state) {
    (void)state;
    SKIP_WITHOUT_GPU();
    static const int subsets[] = {7, 1, 6, 5}; /* bits: dq, dk, dv */
    for (int d = 0; d < 3; d++) {
        enum tr_math maths[2];
        const int nm = attn_maths(FLOATS[d], maths);
        for (int mi = 0; mi < nm; mi++)
            for (size_t c = 0; c < sizeof bwd_cases / sizeof bwd_cases[0]; c++)
                for (size_t si = 0; si < sizeof subsets / sizeof subsets[0]; si++) {
                    CHECK_OK(tr_kernels_set_math(G, maths[mi], &err));
                    const struct attn_case *ac = &bwd_cases[c];
                    const struct attn_shapes sh = attn_shapes(ac);
                    struct tr_tensor in[5] = {randn(FLOATS[d], 4, sh.q, 310 + c), randn(FLOATS[d], 4, sh.k, 320 + c),
                                              randn(FLOATS[d], 4, sh.v, 330 + c), randn(FLOATS[d], 4, sh.out, 340 + c),
                                              tr_test_tensor(TR_DTYPE_F32, 4, sh.mask)};
                    attn_mask(&in[4], ac, 2);
                    const int64_t *gs[3] = {sh.q, sh.k, sh.v};
                    struct tr_tensor ref[3], got[3], dref[3], din[5];
                    struct tr_tensor *pr[3] = {NULL, NULL, NULL}, *pd[3] = {NULL, NULL, NULL};
                    for (int w = 0; w < 3; w++) {
                        ref[w] = tr_test_tensor(FLOATS[d], 4, gs[w]);
                        got[w] = tr_test_tensor(FLOATS[d], 4, gs[w]);
                        tr_test_poison(&ref[w]);
                        tr_test_poison(&got[w]);
                        dref[w] = to_dev(&got[w]);
                        if ((subsets[si] >> w) & 1) pr[w] = &ref[w], pd[w] = &dref[w];
                    }
                    for (int i = 0; i < 5; i++) din[i] = to_dev(&in[i]);
                    const struct tr_tensor *mask = ac->mask ? &in[4] : NULL, *dmask = ac->mask ? &din[4] : NULL;
                    CHECK_OK(tr_k_attention_backward(tr_test_k, &in[0], &in[1], &in[2], &in[3], mask, NULL, NULL, 0.0f, ac->causal,
                                                     ac->window, pr[0], pr[1], pr[2], &err));
                    CHECK_OK(tr_k_attention_backward(G, &din[0], &din[1], &din[2], &din[3], dmask, NULL, NULL, 0.0f, ac->causal,
                                                     ac->window, pd[0], pd[1], pd[2], &err));
                    for (int w = 0; w < 3; w++) {
                        if (!pd[w]) continue;
                        fetch(&got[w], &dref[w]);
                        char what[96];
                        snprintf(what, sizeof what, "attention_backward case %zu d%c (gradients %d) math %s", c,
                                 "qkv"[w], subsets[si], tr_math_name(maths[mi]));
                        check_out_tol(what, "tr_k_attention_backward", &got[w], &ref[w], attn_tol(FLOATS[d], maths[mi]));
                    }
                    for (int w = 0; w < 3; w++) {
                        tr_kernels_dealloc(G, dref[w].data);
                        tr_test_tensor_free(&ref[w]);
                        tr_test_tensor_free(&got[w]);
                    }
                    for (int i = 0; i < 5; i++) tr_kernels_dealloc(G, din[i].data);
                    free_all(5, in);
                }
    }
    CHECK_OK(tr_kernels_set_math(G, TR_MATH_DEFAULT, &err));
}

/* The forward's statistics on cuda: tr_k_attention_lse's output and lse (tensor cores and
 * CUDA cores, lse alone too) against the cpu's, and the backward reading them (delta from
 * the saved output, no statistics pass) against the cpu's backward that recomputes. */
static void test_attention_saved_stats(void **state) {
    (void)state;
    SKIP_WITHOUT_GPU();
    for (int simple = 0; simple < 2; simple++) {
        if (simple) setenv("TRIDENT_CUDA_ATTENTION", "simple", 1);
        for (int d = 0; d < 3; d++) {
            enum tr_math maths[2];
            const int nm = attn_maths(FLOATS[d], maths);
            for (int mi = 0; mi < nm; mi++)
                for (size_t c = 0; c < sizeof bwd_cases / sizeof bwd_cases[0]; c++) {
                    CHECK_OK(tr_kernels_set_math(G, maths[mi], &err));
                    const struct attn_case *ac = &bwd_cases[c];
                    const struct attn_shapes sh = attn_shapes(ac);
                    const int64_t ls[3] = {ac->B, ac->H, ac->Tq};
                    struct tr_tensor in[5] = {randn(FLOATS[d], 4, sh.q, 410 + c), randn(FLOATS[d], 4, sh.k, 420 + c),
                                              randn(FLOATS[d], 4, sh.v, 430 + c), randn(FLOATS[d], 4, sh.out, 440 + c),
                                              tr_test_tensor(TR_DTYPE_F32, 4, sh.mask)};
                    attn_mask(&in[4], ac, 2);
                    struct tr_tensor y = tr_test_tensor(FLOATS[d], 4, sh.out), lse = tr_test_tensor(TR_DTYPE_F32, 3, ls);
                    struct tr_tensor gy = tr_test_tensor(FLOATS[d], 4, sh.out), gl = tr_test_tensor(TR_DTYPE_F32, 3, ls);
                    tr_test_poison(&gy);
                    tr_test_poison(&gl);
                    struct tr_tensor din[5], dy_ = to_dev(&gy), dl = to_dev(&gl), dl2 = to_dev(&gl);
                    for (int i = 0; i < 5; i++) din[i] = to_dev(&in[i]);
                    const struct tr_tensor *mask = ac->mask ? &in[4] : NULL, *dmask = ac->mask ? &din[4] : NULL;
                    CHECK_OK(tr_k_attention_lse(tr_test_k, &in[0], &in[1], &in[2], mask, 0.0f, ac->causal, ac->window,
                                                &y, &lse, &err));
                    CHECK_OK(tr_k_attention_lse(G, &din[0], &din[1], &din[2], dmask, 0.0f, ac->causal, ac->window, &dy_,
                                                &dl, &err));
                    CHECK_OK(tr_k_attention_lse(G, &din[0], &din[1], &din[2], dmask, 0.0f, ac->causal, ac->window, NULL,
                                                &dl2, &err));
                    char what[128];
                    snprintf(what, sizeof what, "attention_lse case %zu math %s%s", c, tr_math_name(maths[mi]),
                             simple ? " simple" : "");
                    const double tol = attn_tol(FLOATS[d], maths[mi]);
                    fetch(&gy, &dy_);
                    check_out_tol(what, "out", &gy, &y, tol);
                    fetch(&gl, &dl);
                    check_out_tol(what, "lse", &gl, &lse, tol > 0 ? tol : 1e-4);
                    fetch(&gl, &dl2);
                    check_out_tol(what, "lse alone", &gl, &lse, tol > 0 ? tol : 1e-4);
                    struct tr_tensor ref[3], got[3], dg[3];
                    const int64_t *gs[3] = {sh.q, sh.k, sh.v};
                    for (int w = 0; w < 3; w++) {
                        ref[w] = tr_test_tensor(FLOATS[d], 4, gs[w]);
                        got[w] = tr_test_tensor(FLOATS[d], 4, gs[w]);
                        tr_test_poison(&got[w]);
                        dg[w] = to_dev(&got[w]);
                    }
                    CHECK_OK(tr_k_attention_backward(tr_test_k, &in[0], &in[1], &in[2], &in[3], mask, NULL, NULL, 0.0f,
                                                     ac->causal, ac->window, &ref[0], &ref[1], &ref[2], &err));
                    CHECK_OK(tr_k_attention_backward(G, &din[0], &din[1], &din[2], &din[3], dmask, &dy_, &dl, 0.0f,
                                                     ac->causal, ac->window, &dg[0], &dg[1], &dg[2], &err));
                    for (int w = 0; w < 3; w++) {
                        fetch(&got[w], &dg[w]);
                        snprintf(what, sizeof what, "attention_backward saved stats case %zu d%c math %s%s", c, "qkv"[w],
                                 tr_math_name(maths[mi]), simple ? " simple" : "");
                        check_out_tol(what, "tr_k_attention_backward", &got[w], &ref[w], tol);
                        tr_kernels_dealloc(G, dg[w].data);
                        tr_test_tensor_free(&ref[w]);
                        tr_test_tensor_free(&got[w]);
                    }
                    for (int i = 0; i < 5; i++) tr_kernels_dealloc(G, din[i].data);
                    tr_kernels_dealloc(G, dy_.data);
                    tr_kernels_dealloc(G, dl.data);
                    tr_kernels_dealloc(G, dl2.data);
                    free_all(5, in);
                    tr_test_tensor_free(&y), tr_test_tensor_free(&lse), tr_test_tensor_free(&gy), tr_test_tensor_free(&gl);
                }
        }
    }
    unsetenv("TRIDENT_CUDA_ATTENTION");
    CHECK_OK(tr_kernels_set_math(G, TR_MATH_DEFAULT, &err));
}

static void test_rms_norm_rope(void **state) {
    (void)state;
    SKIP_WITHOUT_GPU();
    int64_t sx[3] = {2, 5, 96}, sw[1] = {96};
    for (int d = 0; d < 3; d++) {
        for (int add_one = 0; add_one < 2; add_one++) {
            struct tr_tensor in[3] = {randn(FLOATS[d], 3, sx, 300), randn(FLOATS[d], 1, sw, 301),
                                      randn(FLOATS[d], 3, sx, 302)};
            struct tr_attrs at = {.ints = {add_one}, .floats = {1e-6f}};
            compare_op("rms_norm", TR_OP_RMS_NORM, &at, 2, in, FLOATS[d], 3, sx);
            compare_op("rms_norm_grad", TR_OP_RMS_NORM_GRAD, &at, 3, in, FLOATS[d], 3, sx);
            struct tr_tensor xdy[2] = {in[0], in[2]};
            compare_op("rms_norm_grad_w", TR_OP_RMS_NORM_GRAD_W, &at, 2, xdy, FLOATS[d], 1, sw);
            free_all(3, in);
        }
        int64_t sq[4] = {2, 3, 7, 64};
        for (int batched = 0; batched < 2; batched++)
            for (int inverse = 0; inverse < 2; inverse++)
                for (int64_t R = 0; R <= 32; R += 32) {
                    struct tr_tensor in[2] = {randn(FLOATS[d], 4, sq, 310),
                                              tr_test_tensor(TR_DTYPE_I64, batched ? 2 : 1,
                                                             batched ? (int64_t[]){2, 7} : (int64_t[]){7})};
                    tr_test_randint(&in[1], 311, 4000);
                    struct tr_attrs at = {.ints = {R, inverse}, .floats = {10000.0f}};
                    compare_op("rope", TR_OP_ROPE, &at, 2, in, FLOATS[d], 4, sq);
                    free_all(2, in);
                }
    }
}

static void test_cross_entropy(void **state) {
    (void)state;
    SKIP_WITHOUT_GPU();
    int64_t sl[2] = {37, 1000}, sn[1] = {37};
    for (int d = 0; d < 3; d++)
        for (int ign = 0; ign < 2; ign++) {
            struct tr_tensor in[2] = {randn(FLOATS[d], 2, sl, 140), tr_test_tensor(TR_DTYPE_I64, 1, sn)};
            tr_test_randint(&in[1], 141, 1000);
            if (ign) ((int64_t *)in[1].data)[3] = -100, ((int64_t *)in[1].data)[10] = -100;
            struct tr_attrs at = {.ints = {-100, ign}};
            compare_op("cross_entropy", TR_OP_CROSS_ENTROPY, &at, 2, in, TR_DTYPE_F32, 0, NULL);
            free_all(2, in);
        }
}

static void test_adamw(void **state) {
    (void)state;
    SKIP_WITHOUT_GPU();
    int64_t sp[2] = {33, 65};
    for (int d = 0; d < 3; d++) {
        struct tr_tensor in[5] = {randn(FLOATS[d], 2, sp, 150), randn(TR_DTYPE_F32, 2, sp, 151),
                                  randn(TR_DTYPE_F32, 2, sp, 152), tr_test_tensor(TR_DTYPE_F32, 0, NULL),
                                  tr_test_tensor(TR_DTYPE_F32, 0, NULL)};
        for (int64_t i = 0; i < tr_tensor_numel(&in[2]); i++)
            tr_tensor_set_f64(&in[2], i, fabs(tr_tensor_get_f64(&in[2], i)) * 0.01);
        *(float *)in[3].data = 1e-3f;
        *(float *)in[4].data = 3.0f;
        struct tr_attrs at = {.floats = {0.9f, 0.999f, 1e-8f, 0.01f}};
        compare_op("adamw_step", TR_OP_ADAMW_STEP, &at, 5, in, FLOATS[d], 2, sp);
        free_all(5, in);
    }
}

/* The whole AdamW update in one pass (tr_k_adamw_update) against the cpu's: updated in
 * place on cuda (as a donated update), out of place on the cpu; then bound on cuda
 * (nothing written at bind) and called. The gradient f32 or the param's dtype. */
static void test_adamw_update(void **state) {
    (void)state;
    SKIP_WITHOUT_GPU();
    int64_t sp[2] = {37, 129};
    for (int d = 0; d < 3; d++)
        for (int gf = 0; gf < 2; gf++) {
            enum tr_dtype dt = FLOATS[d], gdt = gf ? TR_DTYPE_F32 : dt;
            struct tr_tensor in[6] = {randn(dt, 2, sp, 160), randn(TR_DTYPE_F32, 2, sp, 161),
                                      randn(TR_DTYPE_F32, 2, sp, 162), randn(gdt, 2, sp, 163),
                                      tr_test_tensor(TR_DTYPE_F32, 0, NULL), tr_test_tensor(TR_DTYPE_F32, 0, NULL)};
            for (int64_t i = 0; i < tr_tensor_numel(&in[2]); i++)
                tr_tensor_set_f64(&in[2], i, fabs(tr_tensor_get_f64(&in[2], i)) * 0.01);
            *(float *)in[4].data = 1e-2f;
            *(float *)in[5].data = 4.0f;
            struct tr_tensor ref[3] = {tr_test_tensor(dt, 2, sp), tr_test_tensor(TR_DTYPE_F32, 2, sp),
                                       tr_test_tensor(TR_DTYPE_F32, 2, sp)};
            CHECK_OK(tr_k_adamw_update(tr_test_k, &in[0], &in[1], &in[2], &in[3], &in[4], &in[5], 0.9f, 0.999f, 1e-8f,
                                       0.01f, &ref[0], &ref[1], &ref[2], &err));
            static const char *const names[3] = {"param", "m", "v"};
            for (int bound = 0; bound < 2; bound++) {
                struct tr_tensor din[6];
                for (int i = 0; i < 6; i++) din[i] = to_dev(&in[i]);
                if (!bound) {
                    CHECK_OK(tr_k_adamw_update(G, &din[0], &din[1], &din[2], &din[3], &din[4], &din[5], 0.9f, 0.999f,
                                               1e-8f, 0.01f, &din[0], &din[1], &din[2], &err));
                } else {
                    struct tr_kernel_call call;
                    CHECK_OK(tr_kernels_bind_adamw_update(G, &din[0], &din[1], &din[2], &din[3], &din[4], &din[5],
                                                          0.9f, 0.999f, 1e-8f, 0.01f, &din[0], &din[1], &din[2], &call,
                                                          &err));
                    struct tr_tensor got = tr_test_tensor(dt, 2, sp);
                    fetch(&got, &din[0]);
                    assert_memory_equal(got.data, in[0].data, tr_tensor_nbytes(&got)); /* bind wrote nothing */
                    tr_test_tensor_free(&got);
                    CHECK_OK(tr_kernels_call(G, &call, &err));
                    tr_kernels_unbind(G, &call);
                }
                for (int o = 0; o < 3; o++) {
                    struct tr_tensor got = tr_test_tensor((enum tr_dtype)ref[o].dtype, 2, sp);
                    fetch(&got, &din[o]);
                    char what[64];
                    snprintf(what, sizeof what, "adamw_update %s (grad %s)", names[o], tr_dtype_name(gdt));
                    check_out(what, bound ? "bound, in place" : "in place", &got, &ref[o]);
                    tr_test_tensor_free(&got);
                }
                for (int i = 0; i < 6; i++) tr_kernels_dealloc(G, din[i].data);
            }
            free_all(6, in);
            free_all(3, ref);
        }
}

static void test_training_grads(void **state) {
    (void)state;
    SKIP_WITHOUT_GPU();
    int64_t sx[2] = {6, 300}, sd[1] = {300};
    static const int uops[] = {TR_OP_GELU, TR_OP_TANH, TR_OP_RELU, TR_OP_SILU, TR_OP_SIGMOID,
                               TR_OP_EXP,  TR_OP_NEG,  TR_OP_SQRT, TR_OP_RSQRT, TR_OP_SCALE};
    for (int d = 0; d < 3; d++) {
        struct tr_tensor xy[2] = {randn(FLOATS[d], 2, sx, 160), randn(FLOATS[d], 2, sx, 161)};
        for (size_t o = 0; o < sizeof uops / sizeof uops[0]; o++)
            for (int approx = 0; approx < (uops[o] == TR_OP_GELU ? 2 : 1); approx++) {
                struct tr_tensor in[2] = {randn(FLOATS[d], 2, sx, 170 + o), xy[1]};
                if (uops[o] == TR_OP_SQRT || uops[o] == TR_OP_RSQRT)
                    for (int64_t i = 0; i < tr_tensor_numel(&in[0]); i++)
                        tr_tensor_set_f64(&in[0], i, fabs(tr_tensor_get_f64(&in[0], i)) + 0.2);
                struct tr_attrs at = {.ints = {uops[o], approx}, .floats = {0.75f}};
                char what[64];
                snprintf(what, sizeof what, "unary_grad of %s", tr_op_name(uops[o]));
                compare_op(what, TR_OP_UNARY_GRAD, &at, 2, in, FLOATS[d], 2, sx);
                tr_test_tensor_free(&in[0]);
            }
        /* softmax_grad takes softmax's output */
        struct tr_tensor y = tr_test_tensor(FLOATS[d], 2, sx);
        CHECK_OK(tr_kernels_run(tr_test_k, TR_OP_SOFTMAX, NULL, 1, &xy[0], &y, &err));
        struct tr_tensor sg[2] = {y, xy[1]};
        compare_op("softmax_grad", TR_OP_SOFTMAX_GRAD, NULL, 2, sg, FLOATS[d], 2, sx);
        struct tr_tensor gamma = randn(FLOATS[d], 1, sd, 162);
        struct tr_tensor lg[3] = {xy[0], gamma, xy[1]};
        struct tr_attrs eps = {.floats = {1e-5f}};
        compare_op("layer_norm_grad", TR_OP_LAYER_NORM_GRAD, &eps, 3, lg, FLOATS[d], 2, sx);
        compare_op("layer_norm_grad_gamma", TR_OP_LAYER_NORM_GRAD_GAMMA, &eps, 2, xy, FLOATS[d], 1, sd);
        struct tr_attrs ax1 = {.ints = {1, 0}};
        struct tr_tensor dmax = randn(FLOATS[d], 1, (int64_t[]){6}, 163);
        struct tr_tensor mg[2] = {xy[0], dmax};
        compare_op("max_grad", TR_OP_MAX_GRAD, &ax1, 2, mg, FLOATS[d], 2, sx);
        struct tr_tensor dsl = randn(FLOATS[d], 2, (int64_t[]){6, 70}, 164);
        struct tr_attrs sl = {.ints = {1, 5, 0, 4, 300}};
        compare_op("slice_grad", TR_OP_SLICE_GRAD, &sl, 1, &dsl, FLOATS[d], 2, sx);
        compare_op("mse", TR_OP_MSE, NULL, 2, xy, TR_DTYPE_F32, 0, NULL);
        /* embedding_grad: ids with repeats, so rows add up */
        struct tr_tensor ids = tr_test_tensor(TR_DTYPE_I64, 2, (int64_t[]){3, 9});
        tr_test_randint(&ids, 165, 11);
        struct tr_tensor dy = randn(FLOATS[d], 3, (int64_t[]){3, 9, 40}, 166);
        struct tr_tensor eg[2] = {ids, dy};
        struct tr_attrs v11 = {.ints = {11}};
        compare_op("embedding_grad", TR_OP_EMBEDDING_GRAD, &v11, 2, eg, FLOATS[d], 2, (int64_t[]){11, 40});
        struct tr_attrs v11p = {.ints = {11, 1, 4}}; /* row 4 the padding row: zeros whatever the ids */
        compare_op("embedding_grad, padding row", TR_OP_EMBEDDING_GRAD, &v11p, 2, eg, FLOATS[d], 2, (int64_t[]){11, 40});
        /* cross_entropy_grad, with ignored rows */
        struct tr_tensor logits = randn(FLOATS[d], 2, (int64_t[]){12, 50}, 167);
        struct tr_tensor labels = tr_test_tensor(TR_DTYPE_I32, 1, (int64_t[]){12});
        tr_test_randint(&labels, 168, 50);
        ((int32_t *)labels.data)[2] = -1;
        struct tr_tensor dloss = randn(TR_DTYPE_F32, 0, NULL, 169);
        struct tr_tensor ce[3] = {logits, labels, dloss};
        struct tr_attrs ign = {.ints = {-1, 1}};
        compare_op("cross_entropy_grad", TR_OP_CROSS_ENTROPY_GRAD, &ign, 3, ce, FLOATS[d], 2, (int64_t[]){12, 50});
        free_all(2, xy);
        tr_test_tensor_free(&y), tr_test_tensor_free(&gamma), tr_test_tensor_free(&dmax), tr_test_tensor_free(&dsl);
        tr_test_tensor_free(&ids), tr_test_tensor_free(&dy), tr_test_tensor_free(&logits);
        tr_test_tensor_free(&labels), tr_test_tensor_free(&dloss);
    }
}

/* ---- column reductions split across the grid (cuda/colsum.cu, host/colsum_plan.h) ---- */

/* op run twice on cuda: the outputs bitwise equal (a fixed order of additions, no atomics). */
static void check_repeat_bitwise(const char *what, int op, const struct tr_attrs *at, int n_in, struct tr_tensor *in,
                                 enum tr_dtype out_dt, int out_ndim, const int64_t *out_shape) {
    struct tr_tensor din[4];
    for (int i = 0; i < n_in; i++) din[i] = to_dev(&in[i]);
    struct tr_tensor g1 = tr_test_tensor(out_dt, out_ndim, out_shape), g2 = tr_test_tensor(out_dt, out_ndim, out_shape);
    tr_test_poison(&g1);
    struct tr_tensor dout = to_dev(&g1);
    if (tr_kernels_run(G, op, at, n_in, din, &dout, &err)) fail_msg("%s: cuda: %s", what, err.msg);
    fetch(&g1, &dout);
    poison_dev(&g2, &dout);
    if (tr_kernels_run(G, op, at, n_in, din, &dout, &err)) fail_msg("%s: cuda: %s", what, err.msg);
    fetch(&g2, &dout);
    if (memcmp(g1.data, g2.data, tr_tensor_nbytes(&g1)) != 0) fail_msg("%s: two runs differ (not deterministic)", what);
    for (int i = 0; i < n_in; i++) tr_kernels_dealloc(G, din[i].data);
    tr_kernels_dealloc(G, dout.data);
    tr_test_tensor_free(&g1), tr_test_tensor_free(&g2);
}

/* BERT base's shapes (16384 rows x 768: 44 row slices and a combine on an H200), a
 * 256000-column vocabulary (the LM head's bias; one slice), batched and narrow column
 * sums; the bias gradient (SUM over rows), MEAN, MAX, layer-norm γ and RMS-norm weight
 * gradients, each against the cpu and run twice bitwise equal. */
static void test_colsum_split(void **state) {
    (void)state;
    SKIP_WITHOUT_GPU();
    static const int ops[3] = {TR_OP_SUM, TR_OP_MEAN, TR_OP_MAX};
    struct {
        int nd;
        int64_t x[3];
        int ax;
    } cases[] = {{2, {16384, 768}, 0}, {2, {128, 256000}, 0}, {3, {3, 4096, 96}, 1}, {2, {20000, 3}, 0},
                 {3, {2, 9, 300}, 1}};
    for (int d = 0; d < 2; d++)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            struct tr_tensor x = randn(FLOATS[d], cases[c].nd, cases[c].x, 400 + c);
            int64_t so[3];
            int n = 0;
            for (int i = 0; i < cases[c].nd; i++)
                if (i != cases[c].ax) so[n++] = cases[c].x[i];
            struct tr_attrs at = {.ints = {cases[c].ax, 0}};
            for (int o = 0; o < 3; o++) {
                char what[96];
                snprintf(what, sizeof what, "%s over axis %d of [%lld, %lld%s]", tr_op_name(ops[o]), cases[c].ax,
                         (long long)cases[c].x[0], (long long)cases[c].x[1], cases[c].nd == 3 ? ", ..." : "");
                compare_op(what, ops[o], &at, 1, &x, FLOATS[d], n, so);
                if (o == 0 && c == 0) check_repeat_bitwise(what, ops[o], &at, 1, &x, FLOATS[d], n, so);
            }
            tr_test_tensor_free(&x);
        }
    /* the normalisations' weight gradients at the same two widths */
    const int64_t shapes[2][2] = {{16384, 768}, {128, 256000}};
    for (int d = 0; d < 2; d++)
        for (int s = 0; s < 2; s++) {
            struct tr_tensor xy[2] = {randn(FLOATS[d], 2, shapes[s], 420 + s), randn(FLOATS[d], 2, shapes[s], 430 + s)};
            const int64_t sd[1] = {shapes[s][1]};
            struct tr_attrs eps = {.floats = {1e-5f}};
            compare_op("layer_norm_grad_gamma (split)", TR_OP_LAYER_NORM_GRAD_GAMMA, &eps, 2, xy, FLOATS[d], 1, sd);
            struct tr_attrs rms = {.ints = {0}, .floats = {1e-6f}};
            compare_op("rms_norm_grad_w (split)", TR_OP_RMS_NORM_GRAD_W, &rms, 2, xy, FLOATS[d], 1, sd);
            if (s == 0) {
                check_repeat_bitwise("layer_norm_grad_gamma (split)", TR_OP_LAYER_NORM_GRAD_GAMMA, &eps, 2, xy,
                                     FLOATS[d], 1, sd);
                check_repeat_bitwise("rms_norm_grad_w (split)", TR_OP_RMS_NORM_GRAD_W, &rms, 2, xy, FLOATS[d], 1, sd);
            }
            free_all(2, xy);
        }
    /* the embedding gradient over a 256000 vocabulary (a scatter, not split: rows added
     * with atomics, so compared within the tolerance only) */
    for (int d = 0; d < 2; d++) {
        struct tr_tensor ids = tr_test_tensor(TR_DTYPE_I32, 2, (int64_t[]){4, 512});
        tr_test_randint(&ids, 440, 256000);
        ((int32_t *)ids.data)[7] = ((int32_t *)ids.data)[8] = 255999; /* a repeat, at the last row */
        struct tr_tensor dy = randn(FLOATS[d], 3, (int64_t[]){4, 512, 64}, 441);
        struct tr_tensor eg[2] = {ids, dy};
        struct tr_attrs v = {.ints = {256000}};
        compare_op("embedding_grad, V 256000", TR_OP_EMBEDDING_GRAD, &v, 2, eg, FLOATS[d], 2, (int64_t[]){256000, 64});
        tr_test_tensor_free(&ids), tr_test_tensor_free(&dy);
    }
}

/* cuBLASLt's epilogue fallback (gemm.c): with tr_cuda_gemm_force_fallback on, a GEMM with
 * a bias and an activation cuBLASLt could fuse runs as the plain GEMM plus the elementwise
 * kernel; its result is the cpu's and the route counts say it fell back. Shapes no other
 * test uses, so that no cached plan answers. */
static void test_matmul_epilogue_fallback(void **state) {
    (void)state;
    SKIP_WITHOUT_GPU();
    SKIP_ON_CPU_STAND_IN();
    int64_t sa[2] = {37, 48}, sb[2] = {48, 88}, sc[2] = {37, 88}, sn[1] = {88};
    static const int acts[3] = {TR_ACT_NONE, TR_ACT_RELU, TR_ACT_GELU_TANH};
    const int was = tr_cuda_gemm_force_fallback(1);
    for (int d = 0; d < 2; d++)
        for (int i = 0; i < 3; i++) {
            struct tr_tensor a = randn(FLOATS[d], 2, sa, 450), b = randn(FLOATS[d], 2, sb, 451);
            struct tr_tensor bias = randn(FLOATS[d], 1, sn, 452); /* c's dtype: cuBLASLt's epilogue but for the switch */
            struct tr_tensor ref = tr_test_tensor(FLOATS[d], 2, sc), got = tr_test_tensor(FLOATS[d], 2, sc);
            CHECK_OK(tr_k_matmul(tr_test_k, &a, &b, &ref, 0, 0, 1.0f, &bias, (enum tr_act)acts[i], &err));
            struct tr_tensor da = to_dev(&a), db = to_dev(&b), dbias = to_dev(&bias);
            tr_test_poison(&got);
            struct tr_tensor dc = to_dev(&got);
            struct tr_cuda_gemm_route_counts c0, c1;
            tr_cuda_gemm_route_counts(&c0);
            CHECK_OK(tr_k_matmul(G, &da, &db, &dc, 0, 0, 1.0f, &dbias, (enum tr_act)acts[i], &err));
            tr_cuda_gemm_route_counts(&c1);
            fetch(&got, &dc);
            char what[80];
            snprintf(what, sizeof what, "matmul %s, bias, act %d, epilogue fallback", tr_dtype_name(FLOATS[d]),
                     acts[i]);
            check_out(what, "tr_k_matmul", &got, &ref);
            if (c1.fallback != c0.fallback + 1) fail_msg("%s: the plan did not fall back", what);
            /* bound: a plan of its own, which falls back too */
            poison_dev(&got, &dc);
            struct tr_kernel_call call;
            tr_cuda_gemm_route_counts(&c0);
            CHECK_OK(tr_kernels_bind_matmul(G, &da, &db, &dc, 0, 0, 1.0f, &dbias, (enum tr_act)acts[i], &call, &err));
            tr_cuda_gemm_route_counts(&c1);
            if (c1.fallback != c0.fallback + 1) fail_msg("%s: the bound plan did not fall back", what);
            CHECK_OK(tr_kernels_call(G, &call, &err));
            fetch(&got, &dc);
            check_out(what, "bound matmul", &got, &ref);
            tr_kernels_unbind(G, &call);
            tr_kernels_dealloc(G, da.data), tr_kernels_dealloc(G, db.data);
            tr_kernels_dealloc(G, dbias.data), tr_kernels_dealloc(G, dc.data);
            tr_test_tensor_free(&a), tr_test_tensor_free(&b), tr_test_tensor_free(&bias);
            tr_test_tensor_free(&ref), tr_test_tensor_free(&got);
        }
    tr_cuda_gemm_force_fallback(was);
    /* the switch off: a fresh shape with an epilogue is cuBLASLt's own again */
    struct tr_tensor a = randn(TR_DTYPE_BF16, 2, (int64_t[]){41, 48}, 453), b = randn(TR_DTYPE_BF16, 2, sb, 454);
    struct tr_tensor bias = randn(TR_DTYPE_BF16, 1, sn, 455), got = tr_test_tensor(TR_DTYPE_BF16, 2, (int64_t[]){41, 88});
    struct tr_tensor da = to_dev(&a), db = to_dev(&b), dbias = to_dev(&bias), dc = to_dev(&got);
    struct tr_cuda_gemm_route_counts c0, c1;
    tr_cuda_gemm_route_counts(&c0);
    CHECK_OK(tr_k_matmul(G, &da, &db, &dc, 0, 0, 1.0f, &dbias, TR_ACT_RELU, &err));
    tr_cuda_gemm_route_counts(&c1);
    assert_int_equal(c1.fallback, c0.fallback);
    assert_int_equal(c1.lt, c0.lt + 1);
    CHECK_OK(tr_kernels_sync(G, &err));
    tr_kernels_dealloc(G, da.data), tr_kernels_dealloc(G, db.data);
    tr_kernels_dealloc(G, dbias.data), tr_kernels_dealloc(G, dc.data);
    tr_test_tensor_free(&a), tr_test_tensor_free(&b), tr_test_tensor_free(&bias), tr_test_tensor_free(&got);
}


int main(void) {
    const struct CMUnitTest tests[] = {
        TEST(test_device_routing), TEST(test_context), TEST(test_unary), TEST(test_binary), TEST(test_matmul),
        TEST(test_matmul_epilogues), TEST(test_softmax_layer_norm), TEST(test_nan_rows), TEST(test_embedding),
        TEST(test_embedding_bad_id), TEST(test_layout), TEST(test_update_slice), TEST(test_reduce), TEST(test_cast),
        TEST(test_attention), TEST(test_cross_entropy), TEST(test_adamw), TEST(test_adamw_update),
        TEST(test_training_grads), TEST(test_attention_grad),
        TEST(test_attention_backward),
        TEST(test_attention_saved_stats),
        TEST(test_rms_norm_rope), TEST(test_fused),
        TEST(test_colsum_split), TEST(test_matmul_epilogue_fallback),
    };
    /* TR_TEST_FILTER=test_conv runs the tests whose names match (cmocka's pattern) */
    if (getenv("TR_TEST_FILTER")) cmocka_set_test_filter(getenv("TR_TEST_FILTER"));
    return cmocka_run_group_tests(tests, cuda_setup, cuda_teardown);
}
