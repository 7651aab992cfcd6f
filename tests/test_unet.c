/* UNet2DConditionModel against diffusers: the tiny preset's graph, loaded with the
 * state_dict diffusers wrote (tests/fixtures/make_unet_fixture.py, the reference in
 * float64), must give diffusers' noise prediction on every backend configuration in f32,
 * bf16 and f16, for two samples at timesteps 981 and 21 with their own text; so must a
 * Stable Diffusion 2.x-shaped UNet (Linear proj_in / proj_out, heads differing per block)
 * read through its config.json with [model] hf_config. Also: parameter names and counts
 * as diffusers has them (sd-v1-4's and sd-2-1's in full), the interface, config errors
 * (INI and config.json), a config.json's absent keys as diffusers reads them, and the
 * synthetic batch. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "modelutil.h"
#include "models.h"
#include "trident/config.h"
#include "trident/graph.h"
#include "trident/safetensors.h"
#include "trident/weights.h"
#include "unet/unet.h"

#define FIXTURE TR_SOURCE_DIR "/tests/fixtures/sd_tiny/unet/diffusion_pytorch_model.safetensors"
#define FIXTURE_IO TR_SOURCE_DIR "/tests/fixtures/unet_tiny_io.safetensors"
#define SD2_DIR "tests/fixtures/sd2_tiny/unet/"
#define FIXTURE_SD2 TR_SOURCE_DIR "/" SD2_DIR "diffusion_pytorch_model.safetensors"
#define FIXTURE_SD2_IO TR_SOURCE_DIR "/tests/fixtures/unet_sd2_tiny_io.safetensors"
#define HINT " (regenerate with: python3 tests/fixtures/make_unet_fixture.py)"

/* UNet2DConditionModel.from_config(<CompVis/stable-diffusion-v1-4 unet/config.json>),
 * counted by diffusers 0.42: sum(p.numel() for p in model.parameters()). */
#define SD_UNET_PARAMS 859520964
/* The same of stabilityai/stable-diffusion-2-1's unet/config.json. */
#define SD21_UNET_PARAMS 865910724

static const struct tr_model_desc *const M = &tr_model_unet_2d_condition;
#define preset(name) ((const struct tr_unet_config *)tr_test_preset(M, name))

/* The tiny preset under [model] hf_config = json (a path from the source directory, where
 * the tests run) and `more` (further [model] lines, or ""): TR_OK and *c, or the error. */
static int resolve_hf(const char *json, const char *more, struct tr_unet_config *c, struct tr_error *e) {
    return tr_test_resolve_hf(M, json, more, c, e);
}

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
        {TR_TASK_PREDICT, {{"attention_head_dim", "3"}}, {"entry 16", "attention_head_dim = '3'"}},
        /* block 1 has no attention, but the mid block takes the last entry */
        {TR_TASK_PREDICT, {{"attention_head_dim", "2,3"}}, {"entry 32", "entry 3", "attention_head_dim = '2,3'"}},
        {TR_TASK_PREDICT, {{"attention_head_dim", "2,4,8"}}, {"attention_head_dim = '2,4,8' has 3 entries",
                                                                "one per block"}},
        {TR_TASK_PREDICT, {{"attention_head_dim", "2,0"}}, {"attention_head_dim = '2,0'", "from 1 to 4096"}},
        {TR_TASK_PREDICT, {{"norm_num_groups", "5"}}, {"16", "norm_num_groups = 5"}},
        {TR_TASK_PREDICT, {{"block_out_channels", "16,x"}}, {"block_out_channels = '16,x'"}},
        {TR_TASK_PREDICT, {{"mid_block_type", "UNetMidBlock2D"}},
         {"mid_block_type = 'UNetMidBlock2D'", "UNetMidBlock2DCrossAttn or none"}},
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

/* The SD 2.x-shaped fixture: its config.json (diffusers' save_config: every key, upcast_attention
 * true) gives the heads per block and Linear projections; the graph's parameters are the
 * state_dict's with their shapes (proj_in / proj_out (C,C)) and count. */
static void test_sd2_names_and_counts(void **state) {
    struct tr_unet_config c;
    struct tr_error e = {0};
    if (resolve_hf(SD2_DIR "config.json", "", &c, &e)) fail_msg("%s", e.msg);
    assert_string_equal(c.attention_head_dim, "1,4,2");
    assert_string_equal(c.block_out_channels, "8,8,16");
    assert_string_equal(c.cross_attention_blocks, "1,1,0");
    assert_true(c.use_linear_projection && c.cross_attention_dim == 16 && c.norm_num_groups == 4);
    struct tr_graph *g = tr_test_model_build(M, &c, TR_TASK_PREDICT, TR_DTYPE_F32, 2, 5);
    tr_test_expect_state_dict(g, FIXTURE_SD2, "", HINT);
    struct tr_safetensors *io = tr_test_open(FIXTURE_SD2_IO, HINT);
    assert_int_equal(tr_test_param_count(g), tr_test_io_count(io, 0, HINT));
    assert_int_equal(tr_test_io_count(io, 1, HINT), SD21_UNET_PARAMS);
    tr_safetensors_close(io);
    tr_graph_free(g);
    tr_test_expect_param_counts(M, "sd-2-1", 2, 77, SD21_UNET_PARAMS, 0);
}

static void sd2_matches_diffusers(enum tr_dtype dt) {
    static const char *const names[3] = {"sample", "timestep", "encoder_hidden_states"};
    struct tr_unet_config c;
    struct tr_error e = {0};
    if (resolve_hf(SD2_DIR "config.json", "", &c, &e)) fail_msg("%s", e.msg);
    tr_test_fixture_predict(M, &c, dt, FIXTURE_SD2, FIXTURE_SD2_IO, 3, names, (const int[]){-1, TR_DTYPE_F32, -1}, 2,
                            2, "diffusers", HINT);
}

TR_TEST_F32_BF16_F16(test_sd2_matches_diffusers, sd2_matches_diffusers)

/* stabilityai/stable-diffusion-2-1's unet/config.json gives the sd-2-1 preset, key by key;
 * diffusers' own SD2 test UNet (tests/pipelines/stable_diffusion_2) loads and builds; what
 * trident does not provide is refused with the file, the key and the value. */
static void test_hf_configs(void **state) {
    struct tr_unet_config c;
    struct tr_error e = {0};
    char path[512];
    if (resolve_hf("tests/fixtures/hf/sd-2-1-unet.json", "", &c, &e)) fail_msg("%s", e.msg);
    tr_test_expect_same_config(M, &c, preset("sd-2-1"), "sd-2-1-unet.json against the preset", NULL);
    /* [model] keys over the file: one head count for all */
    assert_int_equal(resolve_hf("tests/fixtures/hf/sd-2-1-unet.json", "attention_head_dim = 8\n", &c, &e), TR_OK);
    assert_string_equal(c.attention_head_dim, "8");

    tr_test_dir_file("sd2_test_unet.json",
                     "{\"_class_name\": \"UNet2DConditionModel\", \"block_out_channels\": [32, 64], "
                     "\"layers_per_block\": 2, \"sample_size\": 32, \"in_channels\": 4, \"out_channels\": 4, "
                     "\"down_block_types\": [\"DownBlock2D\", \"CrossAttnDownBlock2D\"], "
                     "\"up_block_types\": [\"CrossAttnUpBlock2D\", \"UpBlock2D\"], \"cross_attention_dim\": 32, "
                     "\"attention_head_dim\": [2, 4], \"use_linear_projection\": true}",
                     path, sizeof path);
    if (resolve_hf(path, "", &c, &e)) fail_msg("%s", e.msg);
    assert_string_equal(c.attention_head_dim, "2,4");
    assert_string_equal(c.cross_attention_blocks, "0,1");
    assert_true(c.use_linear_projection && c.layers_per_block == 2 && c.sample_size == 32);
    tr_graph_free(tr_test_model_build(M, &c, TR_TASK_PREDICT, TR_DTYPE_F32, 1, 7));

    /* "mid_block_type": null is no mid block in diffusers (the distilled BK-SDM UNets): the
     * same UNet less exactly the mid block's parameters, and its heads free of the last
     * block's channels */
    tr_test_dir_file("nomid_unet.json",
                     "{\"_class_name\": \"UNet2DConditionModel\", \"block_out_channels\": [32, 64], "
                     "\"sample_size\": 8, \"down_block_types\": [\"CrossAttnDownBlock2D\", \"DownBlock2D\"], "
                     "\"up_block_types\": [\"UpBlock2D\", \"CrossAttnUpBlock2D\"], \"cross_attention_dim\": 16, "
                     "\"attention_head_dim\": [2, 3], \"norm_num_groups\": 8, \"mid_block_type\": null}",
                     path, sizeof path);
    if (resolve_hf(path, "", &c, &e)) fail_msg("%s", e.msg);
    assert_string_equal(c.mid_block_type, "none");
    struct tr_graph *g = tr_test_model_build(M, &c, TR_TASK_PREDICT, TR_DTYPE_F32, 1, 7);
    const int64_t without = tr_test_param_count(g);
    for (int i = 0; i < tr_graph_n_params(g); i++)
        assert_null(strstr(tr_node_name(g, tr_graph_param(g, i)), "mid_block"));
    tr_graph_free(g);
    snprintf(c.attention_head_dim, sizeof c.attention_head_dim, "2,4"); /* the mid block takes 4 */
    snprintf(c.mid_block_type, sizeof c.mid_block_type, "UNetMidBlock2DCrossAttn");
    g = tr_test_model_build(M, &c, TR_TASK_PREDICT, TR_DTYPE_F32, 1, 7);
    int64_t mid = 0;
    for (int i = 0; i < tr_graph_n_params(g); i++) {
        const int id = tr_graph_param(g, i);
        struct tr_tensor t = tr_node_tensor(g, id);
        if (strncmp(tr_node_name(g, id), "mid_block.", 10) == 0) mid += tr_tensor_numel(&t);
    }
    assert_true(mid > 0);
    assert_int_equal(tr_test_param_count(g) - mid, without);
    tr_graph_free(g);

    static const struct {
        const char *json, *want[2];
    } bad[] = {
        {"\"attention_head_dim\": [2, 4, 8]", {"\"attention_head_dim\" has 3 entries, \"down_block_types\" 2"}},
        {"\"attention_head_dim\": [2, 0.5]", {"\"attention_head_dim\" is not an integer from 1 to 4096"}},
        {"\"layers_per_block\": [1, 2]", {"\"layers_per_block\" = [1,2]", "only a single value"}},
        {"\"transformer_layers_per_block\": [1, 2]", {"\"transformer_layers_per_block\" = [1,2]"}},
        {"\"cross_attention_dim\": [32, 64]", {"\"cross_attention_dim\" = [32,64]"}},
        {"\"reverse_transformer_layers_per_block\": [[1], [2]]",
         {"\"reverse_transformer_layers_per_block\" = [[1],[2]]", "only null"}},
        {"\"num_attention_heads\": [2, 4]", {"\"num_attention_heads\" = [2,4]: only null"}},
        {"\"use_linear_projection\": 1", {"\"use_linear_projection\" is not true or false"}},
        {"\"upcast_attention\": \"yes\"", {"\"upcast_attention\" is not true or false"}},
        {"\"only_cross_attention\": true", {"\"only_cross_attention\" = true: only false"}},
        {"\"mid_block_type\": \"UNetMidBlock2D\"", {"\"mid_block_type\" = UNetMidBlock2D", "or null (no mid block)"}},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char json[512];
        /* up_block_types too: left out, it is diffusers' four, which mirror no two down blocks */
        snprintf(json, sizeof json, "{\"_class_name\": \"UNet2DConditionModel\", \"block_out_channels\": [32, 64], "
                 "\"down_block_types\": [\"DownBlock2D\", \"CrossAttnDownBlock2D\"], "
                 "\"up_block_types\": [\"CrossAttnUpBlock2D\", \"UpBlock2D\"], %s}", bad[i].json);
        tr_test_dir_file("bad_unet.json", json, path, sizeof path);
        assert_int_not_equal(resolve_hf(path, "", &c, &e), TR_OK);
        tr_assert_msg_has(&e, "bad_unet.json");
        for (int k = 0; k < 2 && bad[i].want[k]; k++) tr_assert_msg_has(&e, bad[i].want[k]);
        print_message("refused: %s\n", e.msg);
    }
}

/* A config.json that leaves a key out means UNet2DConditionModel's default, as diffusers'
 * from_config reads it, never the preset's: the class name alone over the tiny preset is,
 * key by key, every default as diffusers 0.42 writes them (tests/fixtures/hf/defaults/
 * unet.json, make_hf_defaults.py); the tiny UNet's file without cross_attention_dim has
 * diffusers' 1280, not tiny's 64. sample_size's default is None (no shape in diffusers):
 * the preset's is kept. */
static void test_hf_defaults(void **state) {
    struct tr_unet_config c, d;
    struct tr_error e = {0};
    char path[512];
    tr_test_dir_file("class_only_unet.json", "{\"_class_name\": \"UNet2DConditionModel\"}", path, sizeof path);
    if (resolve_hf(path, "", &c, &e)) fail_msg("%s", e.msg);
    if (resolve_hf("tests/fixtures/hf/defaults/unet.json", "", &d, &e)) fail_msg("%s", e.msg);
    tr_test_expect_same_config(M, &c, &d, "the class defaults' file", NULL);
    assert_string_equal(c.block_out_channels, "320,640,1280,1280");
    assert_string_equal(c.cross_attention_blocks, "1,1,1,0");
    assert_string_equal(c.attention_head_dim, "8");
    assert_true(c.cross_attention_dim == 1280 && c.layers_per_block == 2 && c.norm_num_groups == 32);
    assert_int_equal(c.sample_size, preset("tiny")->sample_size);

    tr_test_dir_file("no_cross_dim_unet.json",
                     "{\"_class_name\": \"UNet2DConditionModel\", \"sample_size\": 8, \"block_out_channels\": "
                     "[16, 32], \"down_block_types\": [\"CrossAttnDownBlock2D\", \"DownBlock2D\"], "
                     "\"up_block_types\": [\"UpBlock2D\", \"CrossAttnUpBlock2D\"], \"layers_per_block\": 1, "
                     "\"attention_head_dim\": 2, \"norm_num_groups\": 4}",
                     path, sizeof path);
    if (resolve_hf(path, "", &c, &e)) fail_msg("%s", e.msg);
    tr_test_expect_same_config(M, &c, preset("tiny"), "the tiny UNet's file", "cross_attention_dim");
    assert_int_equal(preset("tiny")->cross_attention_dim, 64);
    assert_int_equal(c.cross_attention_dim, 1280);
}

TR_TEST_MAIN(tr_test_dir_setup, tr_test_dir_teardown, test_param_counts, test_names_and_interface,
             test_config_errors, test_make_inputs, test_predict_matches_diffusers_f32,
             test_predict_matches_diffusers_bf16, test_predict_matches_diffusers_f16, test_sd2_names_and_counts,
             test_sd2_matches_diffusers_f32, test_sd2_matches_diffusers_bf16, test_sd2_matches_diffusers_f16,
             test_hf_configs, test_hf_defaults)
