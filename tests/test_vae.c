/* AutoencoderKL against diffusers: the tiny preset's graph, loaded with the state_dict
 * that diffusers wrote (tests/fixtures/make_vae_fixture.py, references computed in
 * float64), must give diffusers' moments (quant_conv(encoder(x))) and decoded image on
 * every backend configuration, in f32 and bf16; the fit graph's MSE loss and the
 * gradients tr_grad derives for it must match torch autograd's. Also: parameter names
 * and counts as diffusers has them (sd-v1-4 in full), the graph's interface, config
 * errors, a config.json's absent keys as diffusers reads them, and the synthetic batch. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "modelutil.h"
#include "models.h"
#include "trident/autodiff.h"
#include "trident/config.h"
#include "trident/graph.h"
#include "trident/safetensors.h"
#include "vae/vae.h"

#define FIXTURE TR_SOURCE_DIR "/tests/fixtures/sd_tiny/vae/diffusion_pytorch_model.safetensors"
#define FIXTURE_IO TR_SOURCE_DIR "/tests/fixtures/vae_tiny_io.safetensors"
#define HINT " (regenerate with: python3 tests/fixtures/make_vae_fixture.py)"

/* AutoencoderKL.from_config(<CompVis/stable-diffusion-v1-4 vae/config.json>), counted by
 * diffusers 0.42: all parameters, and those under encoder. and quant_conv. (what fit trains). */
#define SD_VAE_PARAMS 83653863
#define SD_VAE_ENCODER_PARAMS 34163664

#define preset(name) ((const struct tr_vae_config *)tr_test_preset(&tr_model_autoencoder_kl, name))

static struct tr_graph *build(const struct tr_vae_config *c, enum tr_task task, enum tr_dtype dt, int64_t B) {
    return tr_test_model_build(&tr_model_autoencoder_kl, c, task, dt, B, 1);
}

static void test_param_count_sd(void **state) {
    tr_test_expect_param_counts(&tr_model_autoencoder_kl, "sd-v1-4", 1, 1, SD_VAE_PARAMS, SD_VAE_ENCODER_PARAMS);
    /* fit trains every parameter its graph has */
    struct tr_graph *g = build(preset("sd-v1-4"), TR_TASK_FIT, TR_DTYPE_F32, 1);
    int ids[512], n = 0;
    struct tr_error e = {0};
    assert_int_equal(tr_model_autoencoder_kl.trainable(preset("sd-v1-4"), g, ids, 512, &n, &e), TR_OK);
    assert_int_equal(n, tr_graph_n_params(g));
    tr_graph_free(g);
}

/* Every PARAM is in the state_dict with its shape, and every state_dict entry is a PARAM. */
static void test_names_match_state_dict(void **state) {
    struct tr_safetensors *io = tr_test_open(FIXTURE_IO, HINT);
    tr_test_expect_fixture_counts(&tr_model_autoencoder_kl, preset("tiny"), FIXTURE, io, HINT);
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
    /* each bad list with norm_num_groups 1, so the list itself is what is refused */
#define BAD_LIST(s) {TR_TASK_PREDICT, {{"norm_num_groups", "1"}, {"block_out_channels", s}}, {"block_out_channels"}}
    static const struct tr_test_refusal r[] = {
        {TR_TASK_PREDICT, {{"block_out_channels", "16,18"}}, {"18", "norm_num_groups = 4"}},
        BAD_LIST("16,,32"), BAD_LIST("16;32"), BAD_LIST(""), BAD_LIST("16,-32"), BAD_LIST("sixteen"),
        BAD_LIST("1,2,3,4,5,6,7,8,9"),
        {TR_TASK_FIT, {{"sample_size", "15"}}, {"sample_size = 15", "multiple of 2"}},
        {TR_TASK_PREDICT, {{"latent_channels", "0"}}, {"latent_channels = 0"}},
        {TR_TASK_GENERATE, {{NULL}}, {"generate", "predict, fit"}},
    };
#undef BAD_LIST
    TR_TEST_EXPECT_REFUSALS(m, "tiny", r);
    assert_int_equal(m->tasks, 1u << TR_TASK_PREDICT | 1u << TR_TASK_FIT);
    struct tr_vae_config c = *preset("tiny");
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
    tr_test_make_inputs_refused(&tr_model_autoencoder_kl, c, &o, 2, (struct tr_tensor[]){a[1], a[0]},
                                TR_ERR_SHAPE, "'sample'");
    tr_test_make_inputs_refused(&tr_model_autoencoder_kl, c, &o, 1, a, TR_ERR_INVALID, "expected 2");
    tr_test_tensors_free(2, a);
    tr_test_tensors_free(2, b);
    tr_test_tensors_free(2, d);
    tr_graph_free(g);
}

static void predict_matches_diffusers(enum tr_dtype dt) {
    tr_test_fixture_predict(&tr_model_autoencoder_kl, preset("tiny"), dt, FIXTURE, FIXTURE_IO, 1, (const char *[]){"sample"},
                            (const int[]){-1}, -1, 1, "diffusers", HINT);
}

TR_TEST_F32_BF16_F16(test_predict_matches_diffusers, predict_matches_diffusers)

/* The fit graph's loss and the gradient of every parameter it trains (the encoder and
 * quant_conv) on every backend against torch autograd. The attention's to_k.bias has a
 * zero gradient in exact arithmetic (adding q·b to every score of a row leaves the
 * softmax as it is). */
static void test_fit_grads_match_pytorch(void **state) {
    struct tr_safetensors *io = tr_test_open(FIXTURE_IO, HINT);
    const char *names[2] = {"sample", "target"};
    tr_test_fixture_fit_grads(&tr_model_autoencoder_kl, preset("tiny"), FIXTURE, io, 2, names, "to_k.bias", HINT);
    tr_safetensors_close(io);
}

/* The tiny preset under [model] hf_config = json (a path from the source directory, where
 * the tests run): TR_OK and *c, or the error. */
static int resolve_hf(const char *json, struct tr_vae_config *c, struct tr_error *e) {
    return tr_test_resolve_hf(&tr_model_autoencoder_kl, json, "", c, e);
}

/* A config.json that leaves a key out means AutoencoderKL's default, as diffusers'
 * from_config reads it, never the preset's: the class name alone over the tiny preset is,
 * key by key, every default as diffusers 0.42 writes them (tests/fixtures/hf/defaults/
 * vae.json, make_hf_defaults.py); the tiny VAE's file without sample_size has diffusers'
 * 32, not tiny's 16; channels for four blocks without their types are refused (the
 * default types are one block's). */
static void test_hf_defaults(void **state) {
    struct tr_vae_config c, d;
    struct tr_error e = {0};
    char path[512];
    tr_test_dir_file("class_only_vae.json", "{\"_class_name\": \"AutoencoderKL\"}", path, sizeof path);
    if (resolve_hf(path, &c, &e)) fail_msg("%s", e.msg);
    if (resolve_hf("tests/fixtures/hf/defaults/vae.json", &d, &e)) fail_msg("%s", e.msg);
    tr_test_expect_same_config(&tr_model_autoencoder_kl, &c, &d, "the class defaults' file", NULL);
    assert_string_equal(c.block_out_channels, "64");
    assert_true(c.norm_num_groups == 32 && c.sample_size == 32 && c.layers_per_block == 1);

    tr_test_dir_file("no_sample_size_vae.json",
                     "{\"_class_name\": \"AutoencoderKL\", \"block_out_channels\": [16, 32], "
                     "\"down_block_types\": [\"DownEncoderBlock2D\", \"DownEncoderBlock2D\"], "
                     "\"up_block_types\": [\"UpDecoderBlock2D\", \"UpDecoderBlock2D\"], \"norm_num_groups\": 4}",
                     path, sizeof path);
    if (resolve_hf(path, &c, &e)) fail_msg("%s", e.msg);
    tr_test_expect_same_config(&tr_model_autoencoder_kl, &c, preset("tiny"), "the tiny VAE's file", "sample_size");
    assert_int_equal(preset("tiny")->sample_size, 16);
    assert_int_equal(c.sample_size, 32);

    tr_test_dir_file("no_types_vae.json", "{\"block_out_channels\": [128, 256, 512, 512]}", path, sizeof path);
    assert_int_not_equal(resolve_hf(path, &c, &e), TR_OK);
    tr_assert_msg_has(&e, "no_types_vae.json': \"down_block_types\" has 1 entries, \"block_out_channels\" 4");
    print_message("refused: %s\n", e.msg);
}

TR_TEST_MAIN(tr_test_dir_setup, tr_test_dir_teardown, test_param_count_sd, test_names_match_state_dict,
             test_interface, test_config_errors, test_make_inputs, test_predict_matches_diffusers_f32,
             test_predict_matches_diffusers_bf16, test_predict_matches_diffusers_f16, test_fit_grads_match_pytorch,
             test_hf_defaults)
