/* SamModel against transformers: the tiny preset's graph (windowed and global blocks, the
 * grid padded to the window, relative positions), loaded with the state_dict transformers
 * wrote (tests/fixtures/make_sam_fixture.py, references in float64), must give its image
 * embedding, mask logits and IoU predictions on every backend configuration in f32 and
 * bf16; the encoder fit's MSE loss and every gradient must match torch autograd. Also:
 * parameter names and counts as transformers has them (vit-h in full), the graph's
 * interface, config and prompt errors, a config.json's absent keys and parts as
 * transformers reads them, and the synthetic batch. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "modelutil.h"
#include "models.h"
#include "sam/sam.h"
#include "trident/bench.h"
#include "trident/config.h"
#include "trident/graph.h"
#include "trident/image.h"
#include "trident/safetensors.h"

#define FIXTURE TR_SOURCE_DIR "/tests/fixtures/sam_tiny.safetensors"
#define FIXTURE_IO TR_SOURCE_DIR "/tests/fixtures/sam_tiny_io.safetensors"
#define HINT " (regenerate with: python3 tests/fixtures/make_sam_fixture.py)"

/* SamModel(SamConfig(<facebook/sam-vit-huge>)) counted by transformers 5.25: all
 * parameters, and the vision encoder's (what fit trains). */
#define VIT_H_PARAMS 641090864
#define VIT_H_ENCODER_PARAMS 637026048

#define preset(name) ((const struct tr_sam_config *)tr_test_preset(&tr_model_sam, name))

static struct tr_graph *build(const struct tr_sam_config *c, enum tr_task task, enum tr_dtype dt, int64_t B) {
    return tr_test_model_build(&tr_model_sam, c, task, dt, B, 1);
}

static void test_param_count_vit_h(void **state) {
    tr_test_expect_param_counts(&tr_model_sam, "vit-h", 1, 1, VIT_H_PARAMS, VIT_H_ENCODER_PARAMS);
}

/* Every PARAM is in the state_dict with its shape, every entry a PARAM; the counts. */
static void test_names_match_state_dict(void **state) {
    struct tr_safetensors *io = tr_test_open(FIXTURE_IO, HINT);
    tr_test_expect_fixture_counts(&tr_model_sam, preset("tiny"), FIXTURE, io, HINT);
    tr_safetensors_close(io);
}

static void test_interface(void **state) {
    const struct tr_sam_config *c = preset("small"); /* 512x512, 32x32 tokens, C 256 */
    struct tr_graph *g = build(c, TR_TASK_PREDICT, TR_DTYPE_BF16, 3);
    static const char *const in_names[3] = {"pixel_values", "input_points", "input_labels"};
    static const int in_dts[3] = {TR_DTYPE_BF16, TR_DTYPE_F32, TR_DTYPE_I32};
    static const int64_t in_sh[3][4] = {{3, 512, 512, 3}, {3, 1, 2, 2}, {3, 1, 2}};
    assert_int_equal(tr_graph_n_inputs(g), 3);
    for (int i = 0; i < 3; i++) {
        int id = tr_graph_input(g, i);
        assert_string_equal(tr_node_name(g, id), in_names[i]);
        assert_int_equal(tr_node_dtype(g, id), in_dts[i]);
        assert_true(tr_shape_equal(tr_node_ndim(g, id), tr_node_shape(g, id), i == 2 ? 3 : 4, in_sh[i]));
    }
    static const char *const out_names[3] = {"image_embeddings", "pred_masks", "iou_scores"};
    static const int64_t out_sh[3][5] = {{3, 32, 32, 256}, {3, 1, 3, 128, 128}, {3, 1, 3}};
    static const int out_nd[3] = {4, 5, 3};
    assert_int_equal(tr_graph_n_outputs(g), 3);
    for (int i = 0; i < 3; i++) {
        assert_string_equal(tr_graph_output_name(g, i), out_names[i]);
        int id = tr_graph_output(g, i);
        assert_int_equal(tr_node_dtype(g, id), TR_DTYPE_BF16);
        assert_true(tr_shape_equal(tr_node_ndim(g, id), tr_node_shape(g, id), out_nd[i], out_sh[i]));
    }
    /* window blocks pad 32 to 35 (5x5 windows of 7), global blocks see the 32x32 grid */
    int th = tr_graph_find(g, "vision_encoder.layers.0.attn.rel_pos_h");
    int tg = tr_graph_find(g, "vision_encoder.layers.2.attn.rel_pos_h");
    assert_true(th >= 0 && tg >= 0);
    assert_int_equal(tr_node_shape(g, th)[0], 2 * 7 - 1);
    assert_int_equal(tr_node_shape(g, tg)[0], 2 * 32 - 1);
    int n_rel = 0;
    for (int id = 0; id < tr_graph_n_nodes(g); id++) n_rel += tr_node_op(g, id) == TR_OP_ATTENTION_REL;
    assert_int_equal(n_rel, 6);
    tr_graph_free(g);
    g = build(c, TR_TASK_FIT, TR_DTYPE_F32, 2);
    assert_int_equal(tr_graph_n_inputs(g), 2);
    assert_string_equal(tr_node_name(g, tr_graph_input(g, 1)), "target");
    int loss = tr_graph_find(g, "loss");
    assert_true(loss >= 0 && tr_node_ndim(g, loss) == 0);
    assert_int_equal(tr_graph_find(g, "mask_decoder.iou_token.weight"), -1); /* the encoder alone */
    tr_graph_free(g);
}

static void test_config_errors(void **state) {
    static const struct tr_test_refusal r[] = {
        {TR_TASK_PREDICT, {{"image_size", "60"}}, {"image_size = 60", "multiple of patch_size = 8"}},
        {TR_TASK_FIT, {{"image_size", "60"}}, {"image_size = 60", "multiple of patch_size = 8"}},
        {TR_TASK_PREDICT, {{"points", "31,23,64.5,10"}, {"labels", "1,1"}}, {"point 1 (64.5,10)", "outside the 64x64 image", "x from 0 to 64"}},
        {TR_TASK_PREDICT, {{"points", "31,2x"}, {"labels", "1"}}, {"points = '31,2x'", "expected numbers"}},
        {TR_TASK_PREDICT, {{"boxes", "1,1,5,5,2,2,6,6"}}, {"gives 8 numbers", "one box an image"}},
        {TR_TASK_PREDICT, {{"points", "31,-1"}, {"labels", "1"}}, {"point 0 (31,-1)", "outside"}},
        {TR_TASK_PREDICT, {{"labels", "1,4"}}, {"label 4", "not one of -1", "3 (box corners)"}},
        {TR_TASK_PREDICT, {{"labels", "1"}}, {"one label per pair"}},
        {TR_TASK_PREDICT, {{"global_attn_indexes", "1,4"}}, {"global_attn_indexes"}},
        {TR_TASK_PREDICT, {{"num_pos_feats", "7"}}, {"num_pos_feats = 7", "output_channels / 2 = 8"}},
        {TR_TASK_PREDICT, {{"boxes", "1,2,3"}}, {"boxes = '1,2,3' gives 3 numbers", "x0,y0,x1,y1"}},
        {TR_TASK_PREDICT, {{"boxes", "10,10,70,20"}}, {"not a box inside the 64x64 image", "x1 <= 64"}},
        {TR_TASK_PREDICT, {{"boxes", "30,10,20,20"}}, {"boxes = '30,10,20,20' is not a box"}},
        {TR_TASK_GENERATE, {{"labels", "1"}, {"boxes", "1,1,9,9"}}, {"points = '' gives 0 coordinates", "labels = '1' 1"}},
    };
    TR_TEST_EXPECT_REFUSALS(&tr_model_sam, "tiny", r);
}

/* The synthetic batch: deterministic in the seed, the prompt the config's. */
static void test_make_inputs(void **state) {
    const struct tr_sam_config *c = preset("tiny");
    struct tr_graph *g = build(c, TR_TASK_PREDICT, TR_DTYPE_F32, 2);
    struct tr_build_opts o = {.task = TR_TASK_PREDICT, .dtype = TR_DTYPE_F32, .batch = 2, .seq_len = 1};
    struct tr_tensor a[3], b[3];
    tr_test_input_tensors(g, 3, a);
    tr_test_input_tensors(g, 3, b);
    struct tr_error e = {0};
    assert_int_equal(tr_model_sam.make_inputs(c, &o, 42, 3, a, &e), TR_OK);
    assert_int_equal(tr_model_sam.make_inputs(c, &o, 43, 3, b, &e), TR_OK);
    assert_memory_not_equal(a[0].data, b[0].data, tr_tensor_nbytes(&a[0]));
    const float *p = a[1].data;
    const int32_t *l = a[2].data;
    for (int im = 0; im < 2; im++) { /* "31,23,15,23", "1,2" for each image */
        assert_true(p[4 * im] == 31 && p[4 * im + 1] == 23 && p[4 * im + 2] == 15 && p[4 * im + 3] == 23);
        assert_true(l[2 * im] == 1 && l[2 * im + 1] == 2);
    }
    double mean, sd, lo, hi;
    tr_test_moments(&a[0], &mean, &sd, &lo, &hi);
    assert_true(sd > 0.5 && fabs(mean) < 0.2);
    tr_test_make_inputs_refused(&tr_model_sam, c, &o, 3, (struct tr_tensor[]){a[1], a[0], a[2]},
                                TR_ERR_SHAPE, "'pixel_values'");
    tr_test_tensors_free(3, a);
    tr_test_tensors_free(3, b);
    tr_graph_free(g);
}

#define PHOTO TR_SOURCE_DIR "/tests/fixtures/reference_sam_photo/photo.png"
#define RESIZE TR_SOURCE_DIR "/tests/fixtures/sam_photo_resize.safetensors"
#define PHOTO_HINT " (regenerate with: python3 tests/fixtures/make_sam_photo_fixture.py)"

/* SamProcessor on a photo: Pillow's bilinear resize to the bit (shrinking, enlarging, one
 * side kept, a 5x5 picture to 64x64), and pixel_values as the Pillow processor makes them
 * (a resize one level off would be 1/255/0.229 = 0.017 away). */
static void test_processor_matches_pillow(void **state) {
    (void)state;
    struct tr_error e = {0};
    struct tr_safetensors *io;
    if (tr_safetensors_open(RESIZE, &io, &e)) fail_msg("%s" PHOTO_HINT, e.msg);
    int cases = 0;
    for (int k = 0;; k++, cases++) {
        char in_name[16], out_name[16];
        snprintf(in_name, sizeof in_name, "in.%d", k), snprintf(out_name, sizeof out_name, "out.%d", k);
        struct tr_tensor in, want;
        if (tr_safetensors_find(io, in_name) < 0) break;
        if (tr_safetensors_get(io, in_name, &in, &e) || tr_safetensors_get(io, out_name, &want, &e))
            fail_msg("%s" PHOTO_HINT, e.msg);
        const int64_t h = in.shape[0], w = in.shape[1], oh = want.shape[0], ow = want.shape[1];
        uint8_t *a = malloc((size_t)(h * w * 3)), *b = malloc((size_t)(oh * ow * 3));
        for (int64_t i = 0; i < h * w * 3; i++) a[i] = (uint8_t)tr_tensor_get_f64(&in, i);
        memset(b, 0xA5, (size_t)(oh * ow * 3)); /* poisoned */
        assert_int_equal(tr_image_resize_bilinear(a, h, w, 3, b, oh, ow, &e), TR_OK);
        int64_t off = 0;
        for (int64_t i = 0; i < oh * ow * 3; i++) off += b[i] != (uint8_t)tr_tensor_get_f64(&want, i);
        if (off) fail_msg("resize %lldx%lld to %lldx%lld: %lld of %lld values differ from Pillow's", (long long)w,
                          (long long)h, (long long)ow, (long long)oh, (long long)off, (long long)(oh * ow * 3));
        free(a), free(b);
    }
    assert_true(cases >= 7);
    const struct tr_sam_config *c = preset("tiny");
    struct tr_tensor ref, px;
    if (tr_safetensors_get(io, "pixel_values", &ref, &e)) fail_msg("%s" PHOTO_HINT, e.msg);
    float *buf = malloc(sizeof *buf * (size_t)tr_tensor_numel(&ref));
    for (int64_t i = 0; i < tr_tensor_numel(&ref); i++) buf[i] = NAN;
    assert_int_equal(tr_tensor_make(&px, buf, TR_DTYPE_F32, 4, ref.shape, &e), TR_OK);
    if (tr_sam_pixel_values(c, PHOTO, &px, &e)) fail_msg("%s", e.msg);
    double worst = 0;
    for (int64_t i = 0; i < tr_tensor_numel(&ref); i++)
        worst = fmax(worst, fabs(tr_tensor_get_f64(&px, i) - tr_tensor_get_f64(&ref, i)));
    if (!(worst < 1e-6)) fail_msg("pixel_values %.3g from SamProcessor's", worst);
    struct tr_sam_photo ph;
    assert_int_equal(tr_sam_photo_size(c, PHOTO, &ph, &e), TR_OK);
    assert_true(ph.w == 40 && ph.h == 30 && ph.neww == 64 && ph.newh == 48);
    assert_int_not_equal(tr_sam_photo_size(c, TR_SOURCE_DIR "/tests/fixtures/sam_tiny.safetensors", &ph, &e), TR_OK);
    assert_non_null(strstr(e.msg, "cannot read it as a PNG"));
    free(buf);
    tr_safetensors_close(io);
}

/* post_process_masks' two interpolations as one matrix: rows sum to 1 (bilinear weights),
 * and a constant stays constant; an S x S photo (no crop) is the plain 4x upscale. */
static void test_upscale_matrix(void **state) {
    (void)state;
    float *m = tr_sam_upscale_matrix(16, 64, 41, 97);
    assert_non_null(m);
    for (int o = 0; o < 97; o++) {
        double s = 0;
        for (int j = 0; j < 16; j++) s += m[o * 16 + j], assert_true(m[o * 16 + j] >= 0);
        assert_true(fabs(s - 1) < 1e-6);
    }
    free(m);
    m = tr_sam_upscale_matrix(2, 8, 8, 8); /* 2 -> 8: src = (o + 0.5)/4 - 0.5, clamped */
    const float want0[8] = {1, 1, 0.875f, 0.625f, 0.375f, 0.125f, 0, 0};
    for (int o = 0; o < 8; o++) assert_true(fabsf(m[2 * o] - want0[o]) < 1e-7f);
    free(m);
}

/* The default prompt is the benchmark's, (500,375) and (250,375) of 1024, at the image's
 * size: another image_size (an hf_config's) keeps it inside the image. */
static void test_default_points_scale(void **state) {
    struct tr_sam_config c = *preset("tiny");
    c.image_size = 40; /* 5x5 tokens of 8 */
    struct tr_graph *g = build(&c, TR_TASK_PREDICT, TR_DTYPE_F32, 1);
    struct tr_build_opts o = {.task = TR_TASK_PREDICT, .dtype = TR_DTYPE_F32, .batch = 1, .seq_len = 1};
    struct tr_tensor a[3];
    tr_test_input_tensors(g, 3, a);
    struct tr_error e = {0};
    assert_int_equal(tr_model_sam.make_inputs(&c, &o, 42, 3, a, &e), TR_OK);
    const float *p = a[1].data; /* floor(500·40/1024) = 19, 375 -> 14, 250 -> 9 */
    assert_true(p[0] == 19 && p[1] == 14 && p[2] == 9 && p[3] == 14);
    tr_test_tensors_free(3, a);
    tr_graph_free(g);
}

/* the prompt's points in f32 and labels in i32 whatever the image's dtype */
static void predict_matches_transformers(enum tr_dtype dt) {
    static const char *const names[3] = {"pixel_values", "input_points", "input_labels"};
    static const int dts[3] = {-1, TR_DTYPE_F32, TR_DTYPE_I32};
    tr_test_fixture_predict(&tr_model_sam, preset("tiny"), dt, FIXTURE, FIXTURE_IO, 3, names, dts, -1, 1,
                            "transformers", HINT);
}

TR_TEST_F32_BF16(test_predict_matches_transformers, predict_matches_transformers)

/* The image encoder's fit: the loss and every gradient against torch autograd. */
static void test_fit_grads_match_pytorch(void **state) {
    struct tr_safetensors *io = tr_test_open(FIXTURE_IO, HINT);
    const char *names[2] = {"pixel_values", "target"};
    tr_test_fixture_fit_grads(&tr_model_sam, preset("tiny"), FIXTURE, io, 2, names, NULL, HINT);
    tr_safetensors_close(io);
}

/* transformers' saved config.json of facebook/sam-vit-huge over the tiny preset is the
 * vit-h preset (the prompt keys aside: not in the file); what SAM's parts must share, and
 * what trident does not build, is refused by its key. */
static void test_hf_config(void **state) {
    const struct tr_model_desc *m = &tr_model_sam;
    struct tr_error e = {0};
    struct tr_config cfg;
    static char got[sizeof(struct tr_sam_config)];
    assert_int_equal(tr_config_load_string("[run]\nmodel = sam\npreset = tiny\n[model]\nhf_config = "
                                           "tests/fixtures/hf/sam-vit-huge-saved.json\n",
                                           "t.ini", &cfg, &e), TR_OK);
    if (tr_model_resolve(m, "tiny", &cfg, got, &e)) fail_msg("%s", e.msg);
    tr_test_expect_same_config(m, got, tr_test_preset(m, "vit-h"), "the file against preset vit-h", "labels");
    /* the same file edited: each what trident refuses, by key */
    FILE *f = fopen(TR_SOURCE_DIR "/tests/fixtures/hf/sam-vit-huge-saved.json", "rb");
    assert_non_null(f);
    static char json[8192];
    size_t n = fread(json, 1, sizeof json - 1, f);
    fclose(f);
    json[n] = '\0';
    static const struct {
        const char *from, *to, *needle;
    } bad[] = {{"\"hidden_act\": \"relu\"", "\"hidden_act\": \"gelu\"", "(mask_decoder_config)': \"hidden_act\" = gelu: only \"relu\""},
               {"\"hidden_size\": 256,\n    \"iou_head_depth\"", "\"hidden_size\": 128,\n    \"iou_head_depth\"",
                "(mask_decoder_config)': \"hidden_size\" = 128, expected 256"},
               {"\"image_size\": 1024,\n    \"layer_norm_eps\"", "\"image_size\": 512,\n    \"layer_norm_eps\"",
                "(prompt_encoder_config)': \"image_size\" = 512, expected 1024"},
               {"\"model_type\": \"sam\"", "\"model_type\": \"sam2\"", "\"model_type\" = sam2"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *at = strstr(json, bad[i].from);
        if (!at) fail_msg("the fixture lacks %s", bad[i].from);
        char edited[8192], path[512];
        snprintf(edited, sizeof edited, "%.*s%s%s", (int)(at - json), json, bad[i].to, at + strlen(bad[i].from));
        snprintf(path, sizeof path, "%s/bad%zu.json", tr_test_dir, i);
        FILE *o = fopen(path, "wb");
        assert_non_null(o);
        fputs(edited, o);
        fclose(o);
        char ini[768];
        snprintf(ini, sizeof ini, "[model]\nhf_config = %s\n", path);
        assert_int_equal(tr_config_load_string(ini, "t.ini", &cfg, &e), TR_OK);
        assert_int_not_equal(tr_model_resolve(m, "tiny", &cfg, got, &e), TR_OK);
        tr_assert_msg_has(&e, bad[i].needle);
    }
    /* each part its own eps: the mask decoder's (the file's first) 1e-5, the vision
     * encoder's 1e-6, as transformers reads them */
    char *at = strstr(json, "\"layer_norm_eps\": 1e-06");
    assert_non_null(at);
    memcpy(at + strlen("\"layer_norm_eps\": 1e-0"), "5", 1);
    char path[512], ini[768];
    snprintf(path, sizeof path, "%s/eps.json", tr_test_dir);
    FILE *o = fopen(path, "wb");
    assert_non_null(o);
    fputs(json, o);
    fclose(o);
    snprintf(ini, sizeof ini, "[model]\nhf_config = %s\n", path);
    assert_int_equal(tr_config_load_string(ini, "t.ini", &cfg, &e), TR_OK);
    if (tr_model_resolve(m, "tiny", &cfg, got, &e)) fail_msg("%s", e.msg);
    struct tr_sam_config r;
    memcpy(&r, got, sizeof r);
    assert_true(r.decoder_layer_norm_eps == 1e-5 && r.layer_norm_eps == 1e-6);
}

/* The tiny preset under [model] hf_config = json (a path): TR_OK and *c, or the error. */
static int resolve_hf(const char *json, struct tr_sam_config *c, struct tr_error *e) {
    return tr_test_resolve_hf(&tr_model_sam, json, "", c, e);
}

/* The tiny preset as a SamConfig config.json, `window` its vision_config's window_size
 * entry ("" to leave it out), `prompt` its prompt_encoder_config (the whole entry). */
static void tiny_json(const char *name, const char *window, const char *prompt, char *path, size_t n) {
    char json[1536];
    snprintf(json, sizeof json,
             "{\"model_type\": \"sam\", \"vision_config\": {\"hidden_size\": 32, \"num_hidden_layers\": 4, "
             "\"num_attention_heads\": 2, \"mlp_dim\": 64, \"image_size\": 64, \"patch_size\": 8, %s"
             "\"global_attn_indexes\": [1, 3], \"output_channels\": 16, \"num_pos_feats\": 8}, %s"
             "\"mask_decoder_config\": {\"hidden_size\": 16, \"mlp_dim\": 32, \"num_hidden_layers\": 2, "
             "\"num_attention_heads\": 2, \"iou_head_hidden_dim\": 16}}",
             window, prompt);
    tr_test_dir_file(name, json, path, n);
}

/* A config.json that leaves a key out, or a whole part, means its class's default, as
 * transformers' SamConfig reads it, never the preset's: the model type alone over the
 * tiny preset is, key by key, SamConfig()'s every default as transformers 5.25 writes
 * them (tests/fixtures/hf/defaults/sam.json, make_hf_defaults.py; so is {}); the tiny SAM's
 * file without window_size has SamVisionConfig's 14, not tiny's 3; without its
 * prompt_encoder_config (or with null) the prompt encoder is SamPromptEncoderConfig's,
 * 256 wide: refused against the vision's 16, as transformers could not run it. */
static void test_hf_defaults(void **state) {
    static struct tr_sam_config c, d;
    struct tr_error e = {0};
    char path[512];
    if (resolve_hf("tests/fixtures/hf/defaults/sam.json", &d, &e)) fail_msg("%s", e.msg);
    static const char *const minimal[] = {"{\"model_type\": \"sam\"}", "{}",
                                          "{\"vision_config\": null, \"prompt_encoder_config\": {}}"};
    for (size_t i = 0; i < sizeof minimal / sizeof minimal[0]; i++) {
        tr_test_dir_file("minimal_sam.json", minimal[i], path, sizeof path);
        if (resolve_hf(path, &c, &e)) fail_msg("%s: %s", minimal[i], e.msg);
        tr_test_expect_same_config(&tr_model_sam, &c, &d, minimal[i], NULL);
    }
    assert_string_equal(c.global_attn_indexes, "2,5,8,11");
    assert_true(c.hidden_size == 768 && c.mlp_dim == 3072 && c.num_hidden_layers == 12 && c.image_size == 1024 &&
                c.output_channels == 256 && c.decoder_mlp_dim == 2048 && c.mask_input_channels == 16);

    static const char prompt[] = "\"prompt_encoder_config\": {\"hidden_size\": 16, \"image_size\": 64, "
                                 "\"patch_size\": 8, \"mask_input_channels\": 4}, ";
    tiny_json("tiny_sam.json", "\"window_size\": 3, ", prompt, path, sizeof path);
    if (resolve_hf(path, &c, &e)) fail_msg("%s", e.msg);
    tr_test_expect_same_config(&tr_model_sam, &c, preset("tiny"), "the tiny SAM's file", NULL);
    tiny_json("no_window_sam.json", "", prompt, path, sizeof path);
    if (resolve_hf(path, &c, &e)) fail_msg("%s", e.msg);
    tr_test_expect_same_config(&tr_model_sam, &c, preset("tiny"), "the tiny SAM's file without window_size", "window_size");
    assert_int_equal(preset("tiny")->window_size, 3);
    assert_int_equal(c.window_size, 14);

    static const char *const no_prompt[] = {"", "\"prompt_encoder_config\": null, "};
    for (int i = 0; i < 2; i++) {
        tiny_json("no_prompt_sam.json", "\"window_size\": 3, ", no_prompt[i], path, sizeof path);
        assert_int_not_equal(resolve_hf(path, &c, &e), TR_OK);
        tr_assert_msg_has(&e, "no_prompt_sam.json (prompt_encoder_config)': \"hidden_size\" = 256, expected 16");
        print_message("refused: %s\n", e.msg);
    }
    tr_test_dir_file("bad_part_sam.json", "{\"mask_decoder_config\": [256]}", path, sizeof path);
    assert_int_not_equal(resolve_hf(path, &c, &e), TR_OK);
    tr_assert_msg_has(&e, "bad_part_sam.json': \"mask_decoder_config\" is not an object");
}

/* [run] inputs' input_labels outside -10 .. 3 (transformers' processor pads with -10): refused
 * before any backend runs, naming the element and the values taken, not by each
 * backend's embedding kernel as an index of its table. */
static void test_inputs_labels(void **state) {
    (void)state;
    struct tr_error e = {0};
    char path[512], ini[768];
    static struct tr_config cfg;
    static struct tr_bench_report rep;
    static const double bad[] = {-11, 4};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        tr_test_copy_poisoned(TR_SOURCE_DIR "/tests/fixtures/reference_sam/batch.safetensors", "input_labels", 3,
                              bad[k], "bad_labels.safetensors", path, sizeof path);
        snprintf(ini, sizeof ini, "[run]\nmodel = sam\npreset = tiny\nbackends = tf\nbatch = 2\nsteps = 1\n"
                 "warmup = 1\ninputs = %s\nweights = " TR_SOURCE_DIR "/tests/fixtures/reference_sam/model.safetensors\n"
                 "[model]\nhf_config = " TR_SOURCE_DIR "/tests/fixtures/reference_sam/config.json\n", path);
        if (tr_config_load_string(ini, "m.ini", &cfg, &e)) fail_msg("%s", e.msg);
        assert_int_not_equal(tr_bench_run(&cfg, tr_builtin_models, &rep, &e), TR_OK);
        char want[96];
        snprintf(want, sizeof want, "'input_labels' element 3 is %.0f, outside [-10, 4), the values the model takes",
                 bad[k]);
        tr_assert_msg_has(&e, want);
    }
}

TR_TEST_MAIN(tr_test_dir_setup, tr_test_dir_teardown, test_inputs_labels, test_param_count_vit_h, test_names_match_state_dict,
             test_interface, test_config_errors, test_make_inputs, test_default_points_scale,
             test_processor_matches_pillow, test_upscale_matrix,
             test_predict_matches_transformers_f32,
             test_predict_matches_transformers_bf16, test_fit_grads_match_pytorch, test_hf_config,
             test_hf_defaults)
