/* The vision ops' CUDA kernels against the cpu's, as test_cuda_kernels.c checks the rest
 * (test_cuda_compare.h: each op run on both, then bound on cuda and called twice, the
 * device output poisoned first): Stable Diffusion's convolutions on both paths, group norm
 * and the timestep embedding, SAM's relative-position attention and its gradients. A
 * program of its own so that ctest runs it beside test_cuda_kernels: on cuemu each is
 * several minutes. Without a CUDA device each test prints "SKIPPED: no CUDA device found
 * (name)" and is skipped; tests/gpu/run.sh runs it on a GPU. */
#include "test_cuda_compare.h"

/* conv2d and its two gradients on both paths (cuda/conv.c): cuDNN where the library has it
 * (the 3x3 with bias, a 1x1 shortcut, a stride-2 3x3 padded by 2; the downsampler's padding at
 * the end goes through im2col even so), then everything through im2col (TRIDENT_CUDA_CONV=
 * im2col), with a batch large enough to take several column chunks there (dW summed over
 * them). The route counts say which path ran each call. */
static void test_conv(void **state) {
    (void)state;
    SKIP_WITHOUT_GPU();
    static const struct {
        int64_t N, H, W, Ci, Co, K, s, p, pe, dil;
    } convs[] = {{2, 9, 7, 5, 6, 3, 1, 1, 0, 1}, {1, 8, 8, 4, 4, 3, 2, 0, 1, 1}, {3, 5, 5, 8, 3, 1, 1, 0, 0, 1},
                 {2, 11, 10, 6, 5, 3, 2, 2, 0, 1}, {70, 64, 64, 64, 32, 3, 1, 1, 0, 1},
                 /* cuemu only: the shapes its cuDNN refuses */
                 {2, 6, 5, 13, 4, 3, 1, 1, 0, 1}, {1, 5, 6, 11, 3, 3, 1, 1, 0, 1}};
    const int n_conv = (int)(sizeof convs / sizeof convs[0]) - 2;
    const int cudnn = tr_cuda_conv_cudnn_built();
    /* cuemu's cuDNN refuses x of 13 channels and has no algorithm for 11 (cuemu_cudnn.cpp):
     * those go through im2col however the mode says, and still agree */
    const int cuemu = on_cuemu();
    for (int path = cudnn ? 0 : 1; path < 2; path++) {
        const enum tr_cuda_conv_mode was = tr_cuda_conv_force(path ? TR_CUDA_CONV_IM2COL : TR_CUDA_CONV_AUTO);
        printf("conv2d through %s\n", path ? "im2col" : "cuDNN");
        for (int d = 0; d < 3; d++) {
            for (int i = 0; i < n_conv + 2 * cuemu; i++) {
                if (i == n_conv - 1 && !path) continue; /* the chunked batch only where chunks exist */
                const int64_t ext = convs[i].dil * (convs[i].K - 1) + 1;
                const int64_t OH = (convs[i].H + 2 * convs[i].p + convs[i].pe - ext) / convs[i].s + 1,
                              OW = (convs[i].W + 2 * convs[i].p + convs[i].pe - ext) / convs[i].s + 1;
                const int64_t sx[4] = {convs[i].N, convs[i].H, convs[i].W, convs[i].Ci},
                              sw[4] = {convs[i].Co, convs[i].Ci, convs[i].K, convs[i].K}, sb[1] = {convs[i].Co},
                              so[4] = {convs[i].N, OH, OW, convs[i].Co};
                struct tr_tensor in[3] = {randn(FLOATS[d], 4, sx, 400 + i), randn(FLOATS[d], 4, sw, 410 + i),
                                          randn(i == 1 ? TR_DTYPE_F32 : FLOATS[d], 1, sb, 420 + i)};
                struct tr_attrs at = {.ints = {convs[i].s, convs[i].p, convs[i].dil, 1, convs[i].pe}, .n_ints = 5};
                struct tr_cuda_conv_route_counts c0, c1;
                tr_cuda_conv_route_counts(&c0);
                compare_op("conv2d", TR_OP_CONV2D, &at, i == 2 ? 2 : 3, in, FLOATS[d], 4, so);
                /* the gradients at a random dy: dx (dy, w) and dw (x, dy) */
                struct tr_tensor dy = randn(FLOATS[d], 4, so, 440 + i);
                struct tr_attrs gi = at, gw = at;
                gi.ints[5] = convs[i].H, gi.ints[6] = convs[i].W, gi.n_ints = 8;
                gw.ints[5] = convs[i].K, gw.ints[6] = convs[i].K, gw.ints[7] = convs[i].Co, gw.n_ints = 8;
                struct tr_tensor ii[2] = {dy, in[1]}, iw[2] = {in[0], dy};
                compare_op("conv2d_grad_input", TR_OP_CONV2D_GRAD_INPUT, &gi, 2, ii, FLOATS[d], 4, sx);
                compare_op("conv2d_grad_weight", TR_OP_CONV2D_GRAD_WEIGHT, &gw, 2, iw, FLOATS[d], 4, sw);
                tr_cuda_conv_route_counts(&c1);
                /* each compare_op runs the op three times (direct, then bound twice); the
                 * cpu stand-in runs the cpu kernels, on no path of these. On a GPU, cuDNN may
                 * turn an f32 or f16 shape down (the calls then go through im2col, said on
                 * stderr): counted and said here; bf16, the benchmark's tensor-core case,
                 * must go through cuDNN, and cuemu's cuDNN takes every shape it is asked */
                const int want_cudnn = !path && convs[i].pe == 0 && convs[i].Ci != 13 && convs[i].Ci != 11;
                const uint64_t nd = c1.cudnn - c0.cudnn, ni = c1.im2col - c0.im2col;
                const int may_refuse = want_cudnn && !cuemu && FLOATS[d] != TR_DTYPE_BF16 && nd + ni == 9;
                if (may_refuse && ni)
                    printf("conv %d (%s): cuDNN turned it down, im2col ran it\n", i, tr_dtype_name(FLOATS[d]));
                if (!cpu_stand_in && !may_refuse && (nd != (want_cudnn ? 9u : 0u) || ni != (want_cudnn ? 0u : 9u)))
                    fail_msg("conv %d (%s): %llu calls through cuDNN and %llu through im2col, expected 9 through %s", i,
                             tr_dtype_name(FLOATS[d]), (unsigned long long)nd, (unsigned long long)ni,
                             want_cudnn ? "cuDNN" : "im2col");
                tr_test_tensor_free(&dy);
                free_all(3, in);
            }
        }
        tr_cuda_conv_force(was);
    }
}

/* Stable Diffusion's other ops: group norm with and without SiLU (gamma f32 beside bf16 x
 * too) and its gradients, the timestep embedding. */
static void test_vision(void **state) {
    (void)state;
    SKIP_WITHOUT_GPU();
    for (int d = 0; d < 3; d++) {
        const int64_t sx[4] = {2, 6, 5, 12}, sc[1] = {12};
        for (int silu = 0; silu < 2; silu++) {
            struct tr_tensor in[3] = {randn(FLOATS[d], 4, sx, 430), randn(silu ? TR_DTYPE_F32 : FLOATS[d], 1, sc, 431),
                                      randn(FLOATS[d], 1, sc, 432)};
            struct tr_attrs at = {.ints = {4, silu}, .n_ints = 2, .floats = {1e-5f}};
            compare_op("group_norm", TR_OP_GROUP_NORM, &at, 3, in, FLOATS[d], 4, sx);
            struct tr_attrs ga = {.ints = {4, 0}, .n_ints = 2, .floats = {1e-5f}};
            struct tr_tensor dy = randn(FLOATS[d], 4, sx, 433), gi[3] = {in[0], in[1], dy}, gg[2] = {in[0], dy};
            compare_op("group_norm_grad", TR_OP_GROUP_NORM_GRAD, &ga, 3, gi, FLOATS[d], 4, sx);
            compare_op("group_norm_grad_gamma", TR_OP_GROUP_NORM_GRAD_GAMMA, &ga, 2, gg, FLOATS[d], 1, sc);
            tr_test_tensor_free(&dy);
            free_all(3, in);
        }
        const int64_t st[1] = {5}, se[2] = {5, 320};
        struct tr_tensor t = tr_test_tensor(FLOATS[d], 1, st);
        for (int64_t i = 0; i < 5; i++) tr_tensor_set_f64(&t, i, 999.0 - 201.0 * (double)i);
        struct tr_attrs at = {.ints = {320, 1}, .n_ints = 2, .floats = {0.0f, 10000.0f}};
        compare_op("timestep_embedding", TR_OP_TIMESTEP_EMBEDDING, &at, 1, &t, FLOATS[d], 2, se);
        tr_test_tensor_free(&t);
    }
}

/* tr_k_attention_rel_backward on cuda (the statistics once for every gradient asked for:
 * the set in bit w of `want`), direct and bound, against the cpu's that recomputes them;
 * with saved, the cuda side reads the y and lse of its own tr_k_attention_rel_lse. */
static void rel_backward_joint(const struct tr_tensor in[6], int want, int saved) {
    struct tr_tensor ref[5], got[5], dout[5], din[6], dy_ = {0}, dl = {0};
    struct tr_tensor *rp[5] = {NULL}, *dp[5] = {NULL};
    for (int i = 0; i < 6; i++) din[i] = to_dev(&in[i]);
    if (saved) {
        const int64_t ls[3] = {in[0].shape[0], in[0].shape[1], in[0].shape[2]};
        struct tr_tensor y = tr_test_tensor((enum tr_dtype)in[5].dtype, 4, in[5].shape);
        struct tr_tensor l = tr_test_tensor(TR_DTYPE_F32, 3, ls);
        tr_test_poison(&y);
        tr_test_poison(&l);
        dy_ = to_dev(&y);
        dl = to_dev(&l);
        if (tr_k_attention_rel_lse(G, din, 0.0f, &dy_, &dl, &err)) fail_msg("attention_rel_lse: cuda: %s", err.msg);
        tr_test_tensor_free(&y);
        tr_test_tensor_free(&l);
    }
    const struct tr_tensor *sy = saved ? &dy_ : NULL, *sl = saved ? &dl : NULL;
    for (int w = 0; w < 5; w++) {
        if (!((want >> w) & 1)) continue;
        ref[w] = tr_test_tensor((enum tr_dtype)in[w].dtype, in[w].ndim, in[w].shape);
        got[w] = tr_test_tensor((enum tr_dtype)in[w].dtype, in[w].ndim, in[w].shape);
        tr_test_poison(&ref[w]);
        tr_test_poison(&got[w]);
        dout[w] = to_dev(&got[w]);
        rp[w] = &ref[w];
        dp[w] = &dout[w];
    }
    char what[96];
    snprintf(what, sizeof what, "attention_rel_backward %s T=%lld gradients 0x%x%s",
             tr_dtype_name((enum tr_dtype)in[0].dtype), (long long)in[0].shape[2], want, saved ? " saved" : "");
    if (tr_k_attention_rel_backward(tr_test_k, in, NULL, NULL, 0.0f, rp, &err)) fail_msg("%s: cpu: %s", what, err.msg);
    if (tr_k_attention_rel_backward(G, din, sy, sl, 0.0f, dp, &err)) fail_msg("%s: cuda: %s", what, err.msg);
    /* delta from the saved y carries y's rounding to q's dtype: f32 bias gradients of bf16
     * data are held to bf16's tolerance then, as the plain attention's saved backward is */
    const double tol = saved ? tr_test_tol((enum tr_dtype)in[0].dtype) : 0.0;
    for (int w = 0; w < 5; w++)
        if (dp[w]) {
            fetch(&got[w], &dout[w]);
            check_out_tol(what, "tr_k_attention_rel_backward", &got[w], &ref[w], tol);
            poison_dev(&got[w], &dout[w]);
        }
    struct tr_kernel_call call;
    const struct tr_tensor *cp[5] = {dp[0], dp[1], dp[2], dp[3], dp[4]};
    if (tr_kernels_bind_attention_rel_backward(G, din, sy, sl, 0.0f, cp, &call, &err))
        fail_msg("%s: bind: %s", what, err.msg);
    for (int rep = 0; rep < 2; rep++)
        if (tr_kernels_call(G, &call, &err)) fail_msg("%s: bound call: %s", what, err.msg);
    tr_kernels_unbind(G, &call);
    for (int w = 0; w < 5; w++)
        if (dp[w]) {
            fetch(&got[w], &dout[w]);
            check_out_tol(what, "bound", &got[w], &ref[w], tol);
            tr_kernels_dealloc(G, dout[w].data);
            tr_test_tensor_free(&ref[w]);
            tr_test_tensor_free(&got[w]);
        }
    for (int i = 0; i < 6; i++) tr_kernels_dealloc(G, din[i].data);
    if (saved) {
        tr_kernels_dealloc(G, dy_.data);
        tr_kernels_dealloc(G, dl.data);
    }
}

/* SAM's ATTENTION_REL (a 14x14 window, and a 20x20 grid: keys in several tiles), its
 * ATTENTION_REL_LSE, and its five gradients, each alone and together, with and without
 * the forward's saved y and lse; f32 bias terms beside bf16 / f16 q too. Batch 2 x 3
 * heads; 1 x 2 on cuemu (tests/cuemu), where the backward's shuffle per key and query
 * made this test 8 of test_cuda_kernels' 13 minutes. */
static void test_attention_rel(void **state) {
    (void)state;
    SKIP_WITHOUT_GPU();
    static const int64_t grids[2] = {14, 20};
    const int cuemu = on_cuemu();
    const int64_t B = cuemu ? 1 : 2, H = cuemu ? 2 : 3;
    for (int d = 0; d < 3; d++)
        for (int gi = 0; gi < 2; gi++)
            for (int f32_bias = 0; f32_bias < (d ? 2 : 1); f32_bias++) {
                const int64_t L = grids[gi], T = L * L;
                const int64_t sq[4] = {B, H, T, 32}, sr[4] = {B, H, T, L}, sl[3] = {B, H, T};
                const enum tr_dtype bdt = f32_bias ? TR_DTYPE_F32 : FLOATS[d];
                struct tr_tensor in[8] = {randn(FLOATS[d], 4, sq, 500), randn(FLOATS[d], 4, sq, 501),
                                          randn(FLOATS[d], 4, sq, 502), randn(bdt, 4, sr, 503),
                                          randn(bdt, 4, sr, 504),        randn(FLOATS[d], 4, sq, 505),
                                          tr_test_tensor(FLOATS[d], 4, sq), tr_test_tensor(TR_DTYPE_F32, 3, sl)};
                struct tr_attrs at = {.floats = {0.0f}};
                compare_op("attention_rel", TR_OP_ATTENTION_REL, &at, 5, in, FLOATS[d], 4, sq);
                compare_op("attention_rel_lse", TR_OP_ATTENTION_REL_LSE, &at, 5, in, TR_DTYPE_F32, 3, sl);
                /* the saved statistics as the cpu's forward gives them, for both sides */
                CHECK_OK(tr_k_attention_rel_lse(tr_test_k, in, 0.0f, &in[6], &in[7], &err));
                for (int w = 0; w < 5; w++) {
                    struct tr_attrs ga = {.ints = {w}, .n_ints = 1};
                    for (int n = 6; n <= 8; n += 2)
                        compare_op(n == 6 ? "attention_rel_grad" : "attention_rel_grad saved", TR_OP_ATTENTION_REL_GRAD,
                                   &ga, n, in, w >= 3 ? bdt : FLOATS[d], 4, w >= 3 ? sr : sq);
                }
                for (int saved = 0; saved < 2; saved++) {
                    rel_backward_joint(in, 31, saved);   /* all five */
                    rel_backward_joint(in, 0x1a, saved); /* dk and the two bias terms' */
                }
                free_all(8, in);
            }
}

int main(void) {
    const struct CMUnitTest tests[] = {TEST(test_conv), TEST(test_vision), TEST(test_attention_rel)};
    /* TR_TEST_FILTER=test_conv runs the tests whose names match (cmocka's pattern) */
    if (getenv("TR_TEST_FILTER")) cmocka_set_test_filter(getenv("TR_TEST_FILTER"));
    return cmocka_run_group_tests(tests, cuda_setup, cuda_teardown);
}
