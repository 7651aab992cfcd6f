/* Pictures in (core/src/image.c): every kind of PNG read as PIL reads it. diffusers'
 * load_image and transformers' processors open a file with PIL and convert("RGB") (a
 * mask: convert("L")); tests/fixtures/make_png_zoo.py wrote PNGs of every colour type and
 * bit depth (palettes with tRNS, 1/2/4-bit grey, 16-bit samples, a gAMA PIL ignores,
 * Adam7 interlacing) and PIL's values for them, which must match to the bit. And what is
 * refused: a truncated file, a file that is no PNG, a size other than the tensor's (before
 * the pixels are decoded), more pixels than PIL opens. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "testutil.h"
#include "trident/image.h"
#include "trident/safetensors.h"

#define ZOO TR_SOURCE_DIR "/tests/fixtures/png_zoo"
#define HINT " (regenerate with: python3 tests/fixtures/make_png_zoo.py)"

/* Every <kind>.rgb in pil.safetensors: tr_image_read_rgb8 gives PIL's convert("RGB"),
 * tr_image_read_rgb8_over_white transformers' convert_to_rgb (<kind>.white),
 * tr_image_read_png into [2,H,W,3] gives 2·p/255 − 1 of it in both images, into
 * [1,H,W,1] PIL's convert("L")/255. */
static void test_png_matches_pil(void **state) {
    (void)state;
    struct tr_error e = {0};
    struct tr_safetensors *st;
    if (tr_safetensors_open(ZOO "/pil.safetensors", &st, &e)) fail_msg("%s" HINT, e.msg);
    int kinds = 0;
    for (int i = 0; i < tr_safetensors_count(st); i++) {
        const char *name = tr_safetensors_name(st, i);
        const size_t n = strlen(name);
        if (n < 5 || strcmp(name + n - 4, ".rgb")) continue;
        char kind[64], path[512], lname[80];
        snprintf(kind, sizeof kind, "%.*s", (int)(n - 4), name);
        snprintf(path, sizeof path, ZOO "/%s.png", kind);
        snprintf(lname, sizeof lname, "%s.l", kind);
        struct tr_tensor rgb_ref, l_ref;
        if (tr_safetensors_get(st, name, &rgb_ref, &e) || tr_safetensors_get(st, lname, &l_ref, &e))
            fail_msg("%s" HINT, e.msg);
        const int64_t H = rgb_ref.shape[0], W = rgb_ref.shape[1];
        uint8_t *rgb = NULL;
        int64_t h = -1, w = -1;
        if (tr_image_read_rgb8(path, &rgb, &h, &w, &e)) fail_msg("%s: %s", kind, e.msg);
        assert_int_equal(h, H);
        assert_int_equal(w, W);
        int64_t sh = -1, sw = -1;
        if (tr_image_png_size(path, &sh, &sw, &e)) fail_msg("%s: %s", kind, e.msg);
        assert_true(sh == H && sw == W);
        int bad = 0;
        for (int64_t j = 0; j < H * W * 3; j++) bad += rgb[j] != (uint8_t)tr_tensor_get_f64(&rgb_ref, j);
        if (bad) fail_msg("%s: %d of %lld RGB values differ from PIL's", kind, bad, (long long)(H * W * 3));
        { /* transformers' convert_to_rgb: transparency (alpha, tRNS) over white */
            char wname[80];
            snprintf(wname, sizeof wname, "%s.white", kind);
            struct tr_tensor white_ref;
            if (tr_safetensors_get(st, wname, &white_ref, &e)) fail_msg("%s" HINT, e.msg);
            uint8_t *ow = NULL;
            if (tr_image_read_rgb8_over_white(path, &ow, &h, &w, &e)) fail_msg("%s: %s", kind, e.msg);
            assert_true(h == H && w == W);
            for (int64_t j = 0; j < H * W * 3; j++) bad += ow[j] != (uint8_t)tr_tensor_get_f64(&white_ref, j);
            if (bad) fail_msg("%s: %d of %lld values over white differ from convert_to_rgb's", kind, bad,
                              (long long)(H * W * 3));
            free(ow);
        }
        float *img = malloc(sizeof *img * (size_t)(2 * H * W * 3)), *grey = malloc(sizeof *grey * (size_t)(H * W));
        assert_non_null(img);
        assert_non_null(grey);
        for (int64_t j = 0; j < 2 * H * W * 3; j++) img[j] = NAN;
        for (int64_t j = 0; j < H * W; j++) grey[j] = NAN;
        struct tr_tensor t3, t1;
        assert_int_equal(tr_tensor_make(&t3, img, TR_DTYPE_F32, 4, (int64_t[]){2, H, W, 3}, &e), TR_OK);
        assert_int_equal(tr_tensor_make(&t1, grey, TR_DTYPE_F32, 4, (int64_t[]){1, H, W, 1}, &e), TR_OK);
        if (tr_image_read_png(path, &t3, &e) || tr_image_read_png(path, &t1, &e)) fail_msg("%s: %s", kind, e.msg);
        for (int64_t j = 0; j < 2 * H * W * 3; j++) {
            const float p = (float)tr_tensor_get_f64(&rgb_ref, j % (H * W * 3));
            bad += img[j] != 2.0f * (p / 255.0f) - 1.0f;
        }
        for (int64_t j = 0; j < H * W; j++) bad += grey[j] != (float)tr_tensor_get_f64(&l_ref, j) / 255.0f;
        if (bad) fail_msg("%s: %d values of tr_image_read_png differ from PIL's", kind, bad);
        free(rgb);
        free(img);
        free(grey);
        kinds++;
    }
    tr_safetensors_close(st);
    print_message("%d kinds of PNG read as PIL reads them\n", kinds);
    assert_true(kinds >= 19); /* the zoo, not an empty file */
}

/* A PNG cut short, a file that is not one, no file, and a size other than the tensor's: each
 * refused with the path and why; the size before any pixel is decoded (a huge photo handed
 * to a small model costs nothing). */
static void test_png_refusals(void **state) {
    (void)state;
    struct tr_error e = {0};
    char cut[512];
    tr_test_dir_file("cut.png", NULL, cut, sizeof cut);
    FILE *in = fopen(ZOO "/rgb8_adam7.png", "rb"), *out = fopen(cut, "wb");
    assert_non_null(in);
    assert_non_null(out);
    char buf[4096];
    const size_t n = fread(buf, 1, sizeof buf, in);
    assert_true(n > 100);
    assert_int_equal(fwrite(buf, 1, n / 2, out), n / 2);
    fclose(in);
    fclose(out);
    uint8_t *rgb = NULL;
    int64_t h, w;
    assert_int_not_equal(tr_image_read_rgb8(cut, &rgb, &h, &w, &e), TR_OK);
    assert_null(rgb);
    tr_assert_msg_has(&e, "cut.png': cannot read it as a PNG");
    print_message("refused: %s\n", e.msg);
    assert_int_not_equal(tr_image_read_rgb8(ZOO "/pil.safetensors", &rgb, &h, &w, &e), TR_OK);
    tr_assert_msg_has(&e, "pil.safetensors': cannot read it as a PNG (not a PNG signature)");
    char empty[512];
    tr_test_dir_file("empty.png", "", empty, sizeof empty);
    assert_int_not_equal(tr_image_png_size(empty, &h, &w, &e), TR_OK);
    tr_assert_msg_has(&e, "empty.png': cannot read it as a PNG (the file is empty)");
    assert_int_not_equal(tr_image_png_size(ZOO "/nowhere.png", &h, &w, &e), TR_OK);
    tr_assert_msg_has(&e, "nowhere.png': cannot open it (No such file or directory)");
    static float px[1 * 7 * 5 * 3];
    struct tr_tensor t;
    assert_int_equal(tr_tensor_make(&t, px, TR_DTYPE_F32, 4, (int64_t[]){1, 7, 5, 3}, &e), TR_OK);
    assert_int_not_equal(tr_image_read_png(cut, &t, &e), TR_OK); /* 13x11: refused before the cut is met */
    tr_assert_msg_has(&e, "cut.png' is 13x11 (width x height), expected 5x7: resize it first");
    assert_int_not_equal(tr_image_png_size(ZOO "/bomb.png", &h, &w, &e), TR_OK);
    tr_assert_msg_has(&e, "bomb.png' is 20000x10000 (width x height), 200000000 pixels: over the limit of 178956970");
    assert_int_not_equal(tr_image_read_rgb8(ZOO "/bomb.png", &rgb, &h, &w, &e), TR_OK);
    assert_null(rgb);
}

TR_TEST_MAIN(tr_test_dir_setup, tr_test_dir_teardown, test_png_matches_pil, test_png_refusals)
