/* UNet2DConditionModel against diffusers: the tiny preset's graph, loaded with the
 * state_dict diffusers wrote (tests/fixtures/make_unet_fixture.py, the reference in
 * float64), must give diffusers' noise prediction on every backend configuration in f32,
 * bf16 and f16, for two samples at timesteps 981 and 21 with their own text. Also:
 * parameter names and counts as diffusers has them (sd-v1-4's in full), the interface,
 * config errors, and the synthetic batch. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "modelutil.h"
#include "models.h"
#include "trident/graph.h"
#include "trident/safetensors.h"
#include "trident/weights.h"
#include "unet/unet.h"

#define FIXTURE TR_SOURCE_DIR "/tests/fixtures/sd_tiny/unet/diffusion_pytorch_model.safetensors"
#define FIXTURE_IO TR_SOURCE_DIR "/tests/fixtures/unet_tiny_io.safetensors"
#define HINT " (regenerate with: python3 tests/fixtures/make_unet_fixture.py)"

/* UNet2DConditionModel.from_config(<CompVis/stable-diffusion-v1-4 unet/config.json>),
 * counted by diffusers 0.42: sum(p.numel() for p in model.parameters()). */
#define SD_UNET_PARAMS 859520964

static const struct tr_model_desc *const M = &tr_model_unet_2d_condition;
#define preset(name) ((const struct tr_unet_config *)tr_test_preset(M, name))

static void test_param_counts(void **state) {
    tr_test_expect_param_counts(M, "sd-v1-4", 2, 77, SD_UNET_PARAMS, 0);
    tr_test_expect_io_counts(M, FIXTURE_IO, 2, 7, SD_UNET_PARAMS, HINT);
}

/* Every PARAM is in the state_dict with its shape, every state_dict entry is a PARAM;
 * the interface. */
static void test_names_and_interface(void **state) {
    struct tr_graph *g = tr_test_model_build(M, preset("tiny"), TR_TASK_PREDICT, TR_DTYPE_BF16, 3, 5);
    tr_test_expect_state_dict(g, FIXTURE, "", HINT);
    for (int i = 0; i < tr_graph_n_params(g); i++) assert_int_equal(tr_node_dtype(g, tr_graph_param(g, i)), TR_DTYPE_BF16);
    static const char *const names[3] = {"sample", "timestep", "encoder_hidden_states"};
    static const int dts[3] = {TR_DTYPE_BF16, TR_DTYPE_F32, TR_DTYPE_BF16};
    static const int64_t shapes[3][4] = {{3, 8, 8, 4}, {3}, {3, 5, 64}};
    static const int nds[3] = {4, 1, 3};
    assert_int_equal(tr_graph_n_inputs(g), 3);
    for (int i = 0; i < 3; i++) {
        int id = tr_graph_input(g, i);
        assert_string_equal(tr_node_name(g, id), names[i]);
        assert_int_equal(tr_node_dtype(g, id), dts[i]);
        assert_true(tr_shape_equal(tr_node_ndim(g, id), tr_node_shape(g, id), nds[i], shapes[i]));
    }
    assert_int_equal(tr_graph_n_outputs(g), 1);
    assert_string_equal(tr_graph_output_name(g, 0), "noise_pred");
    int out = tr_graph_output(g, 0);
    assert_true(tr_shape_equal(tr_node_ndim(g, out), tr_node_shape(g, out), 4, shapes[0]));
    tr_graph_free(g);
}

static void test_config_errors(void **state) {
    static const struct tr_test_refusal r[] = {
        {TR_TASK_PREDICT, {{"sample_size", "9"}}, {"sample_size = 9", "multiple of 2", "multiple of 16"}},
        {TR_TASK_PREDICT, {{"cross_attention_blocks", "1,0,1"}}, {"cross_attention_blocks = '1,0,1' has 3 entries", "one per block"}},
        {TR_TASK_PREDICT, {{"cross_attention_blocks", "1,2"}}, {"cross_attention_blocks = '1,2'", "from 0 to 1"}},
        {TR_TASK_PREDICT, {{"attention_head_dim", "3"}}, {"16", "attention_head_dim = 3"}},
        {TR_TASK_PREDICT, {{"norm_num_groups", "5"}}, {"16", "norm_num_groups = 5"}},
        {TR_TASK_PREDICT, {{"block_out_channels", "16,x"}}, {"block_out_channels = '16,x'"}},
        {TR_TASK_FIT, {{NULL}}, {"fit", "offers: predict"}},
    };
    TR_TEST_EXPECT_REFUSALS(M, "tiny", r);
}

static void test_make_inputs(void **state) {
    const struct tr_unet_config *c = preset("tiny");
    struct tr_graph *g = tr_test_model_build(M, c, TR_TASK_PREDICT, TR_DTYPE_F32, 4, 6);
    struct tr_build_opts o = {.task = TR_TASK_PREDICT, .dtype = TR_DTYPE_F32, .batch = 4, .seq_len = 6};
    struct tr_tensor a[3], b[3];
    tr_test_input_tensors(g, 3, a);
    tr_test_input_tensors(g, 3, b);
    struct tr_error e = {0};
    assert_int_equal(M->make_inputs(c, &o, 42, 3, a, &e), TR_OK);
    assert_int_equal(M->make_inputs(c, &o, 42, 3, b, &e), TR_OK);
    for (int i = 0; i < 3; i++) assert_memory_equal(a[i].data, b[i].data, tr_tensor_nbytes(&a[i]));
    const float *t = a[1].data;
    for (int i = 0; i < 4; i++) assert_true(t[i] >= 0 && t[i] < 1000 && t[i] == floorf(t[i]));
    assert_true(t[0] != t[1] || t[1] != t[2]);
    double mean, sd, lo, hi;
    tr_test_moments(&a[0], &mean, &sd, &lo, &hi);
    assert_true(fabs(mean) < 0.2 && fabs(sd - 1.0) < 0.2);
    tr_test_make_inputs_refused(M, c, &o, 3, (struct tr_tensor[]){a[2], a[1], a[0]}, TR_ERR_SHAPE, "'sample'");
    tr_test_tensors_free(3, a);
    tr_test_tensors_free(3, b);
    tr_graph_free(g);
}

static void predict_matches_diffusers(enum tr_dtype dt) {
    static const char *const names[3] = {"sample", "timestep", "encoder_hidden_states"};
    tr_test_fixture_predict(M, preset("tiny"), dt, FIXTURE, FIXTURE_IO, 3, names, (const int[]){-1, TR_DTYPE_F32, -1},
                            2, 2, "diffusers", HINT);
}

TR_TEST_F32_BF16_F16(test_predict_matches_diffusers, predict_matches_diffusers)

TR_TEST_MAIN(tr_test_dir_setup, tr_test_dir_teardown, test_param_counts, test_names_and_interface,
             test_config_errors, test_make_inputs, test_predict_matches_diffusers_f32,
             test_predict_matches_diffusers_bf16, test_predict_matches_diffusers_f16)
