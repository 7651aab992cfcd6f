/* AutoencoderKL against diffusers: the tiny preset's graph, loaded with the state_dict
 * that diffusers wrote (tests/fixtures/make_vae_fixture.py, references computed in
 * float64), must give diffusers' moments (quant_conv(encoder(x))) and decoded image on
 * every backend configuration, in f32 and bf16; the fit graph's MSE loss and the
 * gradients tr_grad derives for it must match torch autograd's. Also: parameter names
 * and counts as diffusers has them (sd-v1-4 in full), the graph's interface, config
 * errors, and the synthetic batch. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "modelutil.h"
#include "models.h"
#include "trident/autodiff.h"
#include "trident/graph.h"
#include "trident/safetensors.h"
#include "trident/weights.h"
#include "vae/vae.h"

#define FIXTURE TR_SOURCE_DIR "/tests/fixtures/sd_tiny/vae/diffusion_pytorch_model.safetensors"
#define FIXTURE_IO TR_SOURCE_DIR "/tests/fixtures/vae_tiny_io.safetensors"
#define HINT " (regenerate with: python3 tests/fixtures/make_vae_fixture.py)"

/* AutoencoderKL.from_config(<CompVis/stable-diffusion-v1-4 vae/config.json>), counted by
 * diffusers 0.42: all parameters, and those under encoder. and quant_conv. (what fit trains). */
#define SD_VAE_PARAMS 83653863
#define SD_VAE_ENCODER_PARAMS 34163664

#define preset(name) ((const struct tr_vae_config *)tr_test_preset(&tr_model_autoencoder_kl, name))
#define param_count tr_test_param_count
#define open_io() tr_test_open(FIXTURE_IO, HINT)

static struct tr_graph *build(const struct tr_vae_config *c, enum tr_task task, enum tr_dtype dt, int64_t B) {
    return tr_test_model_build(&tr_model_autoencoder_kl, c, task, dt, B, 1);
}

static void test_param_count_sd(void **state) {
    struct tr_graph *g = build(preset("sd-v1-4"), TR_TASK_PREDICT, TR_DTYPE_F32, 1);
    assert_int_equal(param_count(g), SD_VAE_PARAMS);
    tr_graph_free(g);
    g = build(preset("sd-v1-4"), TR_TASK_FIT, TR_DTYPE_F32, 1);
    assert_int_equal(param_count(g), SD_VAE_ENCODER_PARAMS);
    int ids[512], n = 0;
    struct tr_error e = {0};
    assert_int_equal(tr_model_autoencoder_kl.trainable(preset("sd-v1-4"), g, ids, 512, &n, &e), TR_OK);
    assert_int_equal(n, tr_graph_n_params(g));
    tr_graph_free(g);
}

/* Every PARAM is in the state_dict with its shape, and every state_dict entry is a PARAM. */
static void test_names_match_state_dict(void **state) {
    struct tr_graph *g = build(preset("tiny"), TR_TASK_PREDICT, TR_DTYPE_F32, 2);
    tr_test_expect_state_dict(g, FIXTURE, "", HINT);
    struct tr_safetensors *io = open_io();
    struct tr_error e = {0};
    struct tr_tensor pc;
    assert_int_equal(tr_safetensors_get(io, "param_count", &pc, &e), TR_OK);
    assert_int_equal(param_count(g), ((int64_t *)pc.data)[0]);
    tr_graph_free(g);
    g = build(preset("tiny"), TR_TASK_FIT, TR_DTYPE_F32, 2);
    assert_int_equal(param_count(g), ((int64_t *)pc.data)[1]);
    tr_graph_free(g);
    tr_safetensors_close(io);
}

static void expect_shape(const struct tr_graph *g, int id, int dt, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
    const int64_t want[4] = {d0, d1, d2, d3};
    assert_int_equal(tr_node_dtype(g, id), dt);
    assert_true(tr_shape_equal(tr_node_ndim(g, id), tr_node_shape(g, id), 4, want));
}

static void test_interface(void **state) {
    const struct tr_vae_config *c = preset("small"); /* 3 blocks: latents at 1/4 */
    struct tr_graph *g = build(c, TR_TASK_PREDICT, TR_DTYPE_BF16, 3);
    assert_int_equal(tr_graph_n_inputs(g), 1);
    assert_string_equal(tr_node_name(g, tr_graph_input(g, 0)), "sample");
    expect_shape(g, tr_graph_input(g, 0), TR_DTYPE_BF16, 3, 64, 64, 3);
    assert_int_equal(tr_graph_n_outputs(g), 2);
    assert_string_equal(tr_graph_output_name(g, 0), "moments");
    assert_string_equal(tr_graph_output_name(g, 1), "decoded");
    expect_shape(g, tr_graph_output(g, 0), TR_DTYPE_BF16, 3, 16, 16, 8);
    expect_shape(g, tr_graph_output(g, 1), TR_DTYPE_BF16, 3, 64, 64, 3);
    for (int i = 0; i < tr_graph_n_params(g); i++)
        assert_int_equal(tr_node_dtype(g, tr_graph_param(g, i)), TR_DTYPE_BF16);
    const struct tr_attrs *a = tr_node_attrs(g, tr_graph_find(g, "encoder.down_blocks.1.resnets.0.norm2.weight"));
    assert_true(a->floats[0] == 1.0f && a->floats[1] == 0.02f);
    a = tr_node_attrs(g, tr_graph_find(g, "decoder.conv_in.weight")); /* normal(0, 1/sqrt(4·9)) */
    assert_true(a->floats[0] == 0.0f && fabsf(a->floats[1] - 1.0f / 6.0f) < 1e-7f);
    tr_graph_free(g);

    g = build(c, TR_TASK_FIT, TR_DTYPE_F32, 2);
    assert_int_equal(tr_graph_n_inputs(g), 2);
    assert_string_equal(tr_node_name(g, tr_graph_input(g, 1)), "target");
    expect_shape(g, tr_graph_input(g, 1), TR_DTYPE_F32, 2, 16, 16, 8);
    int loss = tr_graph_find(g, "loss");
    assert_true(loss >= 0);
    assert_int_equal(tr_node_ndim(g, loss), 0);
    assert_int_equal(tr_graph_find(g, "decoder.conv_in.weight"), -1); /* the decoder is not built */
    tr_graph_free(g);
}

static void test_config_errors(void **state) {
    const struct tr_model_desc *m = &tr_model_autoencoder_kl;
    struct tr_vae_config c = *preset("tiny");
    strcpy(c.block_out_channels, "16,18");
    const char *groups[] = {"18", "norm_num_groups = 4"};
    tr_test_build_refused(m, &c, TR_TASK_PREDICT, groups, 2);
    const char *const bad_lists[] = {"16,,32", "16;32", "", "16,-32", "sixteen", "1,2,3,4,5,6,7,8,9"};
    for (size_t i = 0; i < sizeof bad_lists / sizeof bad_lists[0]; i++) {
        c = *preset("tiny");
        c.norm_num_groups = 1;
        strcpy(c.block_out_channels, bad_lists[i]);
        const char *want[] = {"block_out_channels"};
        tr_test_build_refused(m, &c, TR_TASK_PREDICT, want, 1);
    }
    c = *preset("tiny");
    c.sample_size = 15;
    const char *odd[] = {"sample_size = 15", "multiple of 2"};
    tr_test_build_refused(m, &c, TR_TASK_FIT, odd, 2);
    c = *preset("tiny");
    c.latent_channels = 0;
    const char *lat[] = {"latent_channels = 0"};
    tr_test_build_refused(m, &c, TR_TASK_PREDICT, lat, 1);
    c = *preset("tiny");
    const char *gen[] = {"generate", "predict, fit"};
    tr_test_build_refused(m, &c, TR_TASK_GENERATE, gen, 2);
    assert_int_equal(m->tasks, 1u << TR_TASK_PREDICT | 1u << TR_TASK_FIT);
    /* A list with spaces is read as diffusers' JSON list would be. */
    strcpy(c.block_out_channels, " 16, 32 ");
    int64_t ch[TR_VAE_MAX_BLOCKS];
    int n = 0;
    struct tr_error e = {0};
    assert_int_equal(tr_vae_channels(&c, ch, &n, &e), TR_OK);
    assert_int_equal(n, 2);
    assert_true(ch[0] == 16 && ch[1] == 32);
}

static void test_make_inputs(void **state) {
    const struct tr_vae_config *c = preset("tiny");
    struct tr_graph *g = build(c, TR_TASK_FIT, TR_DTYPE_F32, 2);
    struct tr_build_opts o = {.task = TR_TASK_FIT, .dtype = TR_DTYPE_F32, .batch = 2, .seq_len = 1};
    struct tr_tensor a[2], b[2], d[2];
    tr_test_input_tensors(g, 2, a);
    tr_test_input_tensors(g, 2, b);
    tr_test_input_tensors(g, 2, d);
    struct tr_error e = {0};
    assert_int_equal(tr_model_autoencoder_kl.make_inputs(c, &o, 42, 2, a, &e), TR_OK);
    assert_int_equal(tr_model_autoencoder_kl.make_inputs(c, &o, 42, 2, b, &e), TR_OK);
    assert_int_equal(tr_model_autoencoder_kl.make_inputs(c, &o, 43, 2, d, &e), TR_OK);
    for (int i = 0; i < 2; i++) {
        assert_memory_equal(a[i].data, b[i].data, tr_tensor_nbytes(&a[i]));
        assert_memory_not_equal(a[i].data, d[i].data, tr_tensor_nbytes(&a[i]));
    }
    double mean, sd, lo, hi;
    tr_test_moments(&a[0], &mean, &sd, &lo, &hi); /* an image in [-1, 1], not flat */
    assert_true(lo >= -1.0 && hi <= 1.0 && sd > 0.3 && fabs(mean) < 0.2);
    tr_test_moments(&a[1], &mean, &sd, &lo, &hi); /* normal(0, 1) */
    assert_true(fabs(mean) < 0.15 && fabs(sd - 1.0) < 0.15);
    struct tr_tensor swapped[2] = {a[1], a[0]};
    assert_int_equal(tr_model_autoencoder_kl.make_inputs(c, &o, 42, 2, swapped, &e), TR_ERR_SHAPE);
    tr_assert_msg_has(&e, "'sample'");
    assert_int_equal(tr_model_autoencoder_kl.make_inputs(c, &o, 42, 1, a, &e), TR_ERR_INVALID);
    tr_assert_msg_has(&e, "expected 2");
    for (int i = 0; i < 2; i++) {
        tr_test_tensor_free(&a[i]);
        tr_test_tensor_free(&b[i]);
        tr_test_tensor_free(&d[i]);
    }
    tr_graph_free(g);
}

static void predict_matches_diffusers(enum tr_dtype dt) {
    struct tr_safetensors *io = open_io();
    const char *names[1] = {"sample"};
    const int dts[1] = {-1};
    tr_test_fixture_predict(&tr_model_autoencoder_kl, preset("tiny"), dt, FIXTURE, io, 1, names, dts, -1, 1,
                            "diffusers", HINT);
    tr_safetensors_close(io);
}

static void test_predict_matches_diffusers_f32(void **state) { predict_matches_diffusers(TR_DTYPE_F32); }
static void test_predict_matches_diffusers_bf16(void **state) { predict_matches_diffusers(TR_DTYPE_BF16); }
static void test_predict_matches_diffusers_f16(void **state) { predict_matches_diffusers(TR_DTYPE_F16); }

/* The fit graph's loss and the gradient of every parameter it trains (the encoder and
 * quant_conv), differentiated by tr_grad, on every backend, against torch autograd in
 * float64. A gradient that is zero in exact arithmetic (the attention's to_k.bias: adding
 * q·b to every score of a row leaves the softmax as it is) holds float64 noise there, so
 * it is held to ‖g − g_ref‖ < 1e-4·‖∇‖, the norm of the whole gradient. */
#define MAX_GRADS 256

static void test_fit_grads_match_pytorch(void **state) {
    struct tr_safetensors *io = open_io();
    struct tr_tensor in[2] = {tr_test_io_tensor(io, "sample", TR_DTYPE_F32, HINT),
                              tr_test_io_tensor(io, "target", TR_DTYPE_F32, HINT)};
    struct tr_graph *g = build(preset("tiny"), TR_TASK_FIT, TR_DTYPE_F32, in[0].shape[0]);
    struct tr_error e = {0};
    int loss = tr_graph_find(g, "loss"), wrt[MAX_GRADS], grads[MAX_GRADS], n = 0;
    assert_int_equal(tr_model_autoencoder_kl.trainable(preset("tiny"), g, wrt, MAX_GRADS, &n, &e), TR_OK);
    if (tr_grad(g, loss, n, wrt, grads, &e)) fail_msg("tr_grad: %s", e.msg);
    assert_int_equal(tr_graph_set_output(g, loss, "loss"), TR_OK);
    double *ref[MAX_GRADS], norm[MAX_GRADS], total = 0;
    for (int i = 0; i < n; i++) {
        char name[TR_NAME_MAX + 8];
        snprintf(name, sizeof name, "grad.%s", tr_node_name(g, wrt[i]));
        assert_int_equal(tr_graph_set_output(g, grads[i], name), TR_OK);
        struct tr_tensor t;
        if (tr_safetensors_get(io, name, &t, &e)) fail_msg("%s" HINT, e.msg);
        ref[i] = tr_test_to_f64(&t);
        double s = 0;
        for (int64_t k = 0; k < tr_tensor_numel(&t); k++) s += ref[i][k] * ref[i][k];
        norm[i] = sqrt(s);
        total += s;
    }
    total = sqrt(total);
    struct tr_weights *w = NULL;
    if (tr_weights_load(g, FIXTURE, &w, &e)) fail_msg("%s" HINT, e.msg);
    const double tol = tr_test_tol(TR_DTYPE_F32);
    int n_zero = 0;
    for (int i = 0; i < n; i++) n_zero += norm[i] < 1e-9 * total;
    for (int c = 0; c < TR_TEST_N_BACKENDS; c++) {
        struct tr_tensor out[1 + MAX_GRADS];
        tr_test_run_backend(&tr_test_backends[c], tr_test_dir, g, in, 2, out, NULL);
        double worst = tr_test_io_rel_err(io, "loss", &out[0], HINT);
        const char *worst_name = "loss";
        for (int i = 0; i < n; i++) {
            double *o = tr_test_to_f64(&out[1 + i]), d = 0;
            for (int64_t k = 0; k < tr_tensor_numel(&out[1 + i]); k++) d += (o[k] - ref[i][k]) * (o[k] - ref[i][k]);
            free(o);
            const int zero = norm[i] < 1e-9 * total;
            if (zero && !strstr(tr_node_name(g, wrt[i]), "to_k.bias"))
                fail_msg("%s is %.3g in the reference, expected nonzero" HINT, tr_node_name(g, wrt[i]), norm[i]);
            double err = sqrt(d) / (zero ? total : norm[i]);
            if (!(err <= worst)) worst = err, worst_name = tr_node_name(g, wrt[i]);
            tr_test_tensor_free(&out[1 + i]);
        }
        tr_test_tensor_free(&out[0]);
        print_message("%-22s loss and %d gradients (%d zero in exact arithmetic): worst rel err %.2e (%s)\n",
                      tr_test_backends[c].label, n, n_zero, worst, worst_name);
        if (!(worst < tol))
            fail_msg("%s: %s relative error %.3g vs torch autograd >= %.0e", tr_test_backends[c].label, worst_name,
                     worst, tol);
    }
    for (int i = 0; i < n; i++) free(ref[i]);
    for (int i = 0; i < 2; i++) tr_test_tensor_free(&in[i]);
    tr_weights_free(w);
    tr_graph_free(g);
    tr_safetensors_close(io);
}

TR_TEST_MAIN(tr_test_dir_setup, tr_test_dir_teardown, test_param_count_sd, test_names_match_state_dict,
             test_interface, test_config_errors, test_make_inputs, test_predict_matches_diffusers_f32,
             test_predict_matches_diffusers_bf16, test_predict_matches_diffusers_f16, test_fit_grads_match_pytorch)
