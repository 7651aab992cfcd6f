/* Decoded pictures as PNG files (image.h), through libpng's simplified API. */
#include <math.h>
#include <png.h>
#include <stdlib.h>
#include <string.h>
#include "trident/image.h"

uint8_t tr_image_pixel(double v) {
    double x = (v + 1.0) * 0.5;
    if (!(x >= 0.0)) x = 0.0; /* NaN too */
    else if (x > 1.0) x = 1.0;
    return (uint8_t)lrint(255.0 * x);
}

int tr_image_write_png(const char *path, const struct tr_tensor *img, struct tr_error *err) {
    if (!path || !img || !img->data)
        return tr_error_set(err, TR_ERR_INVALID, "image: NULL path or tensor");
    if (img->ndim != 4 || (img->shape[3] != 1 && img->shape[3] != 3 && img->shape[3] != 4) || img->shape[0] < 1 ||
        img->shape[1] < 1 || img->shape[2] < 1 || img->shape[1] > 65535 || img->shape[0] * img->shape[2] > 65535) {
        char sh[96];
        return tr_error_set(err, TR_ERR_SHAPE, "image '%s': %s, expected [B,H,W,C] with C 1, 3 or 4 and B·W, H at "
                            "most 65535", path, tr_shape_str(img->ndim, img->shape, sh, sizeof sh));
    }
    const int64_t B = img->shape[0], H = img->shape[1], W = img->shape[2], C = img->shape[3];
    const size_t stride = (size_t)(B * W * C);
    uint8_t *px = malloc(stride * (size_t)H);
    if (!px) return tr_error_set(err, TR_ERR_NOMEM, "image '%s': no memory for %lld x %lld pixels", path,
                                 (long long)(B * W), (long long)H);
    for (int64_t b = 0; b < B; b++) /* image b at columns b·W .. */
        for (int64_t y = 0; y < H; y++)
            for (int64_t x = 0; x < W; x++)
                for (int64_t c = 0; c < C; c++)
                    px[(size_t)y * stride + (size_t)((b * W + x) * C + c)] =
                        tr_image_pixel(tr_tensor_get_f64(img, ((b * H + y) * W + x) * C + c));
    png_image pi;
    memset(&pi, 0, sizeof pi);
    pi.version = PNG_IMAGE_VERSION;
    pi.width = (png_uint_32)(B * W);
    pi.height = (png_uint_32)H;
    pi.format = C == 1 ? PNG_FORMAT_GRAY : C == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_RGBA;
    int ok = png_image_write_to_file(&pi, path, 0, px, (png_int_32)stride, NULL);
    free(px);
    if (!ok) {
        int rc = tr_error_set(err, TR_ERR_IO, "image '%s': cannot write the PNG (%s)", path, pi.message);
        png_image_free(&pi);
        return rc;
    }
    return TR_OK;
}

int tr_image_read_png(const char *path, struct tr_tensor *img, struct tr_error *err) {
    if (!path || !img || !img->data) return tr_error_set(err, TR_ERR_INVALID, "image: NULL path or tensor");
    if (img->ndim != 4 || (img->shape[3] != 3 && img->shape[3] != 1)) {
        char sh[96];
        return tr_error_set(err, TR_ERR_SHAPE, "image '%s': read into %s, expected [B,H,W,3] or [B,H,W,1]", path,
                            tr_shape_str(img->ndim, img->shape, sh, sizeof sh));
    }
    png_image pi;
    memset(&pi, 0, sizeof pi);
    pi.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_file(&pi, path))
        return tr_error_set(err, TR_ERR_IO, "image '%s': cannot read it as a PNG (%s)", path, pi.message);
    const int64_t B = img->shape[0], H = img->shape[1], W = img->shape[2];
    if ((int64_t)pi.width != W || (int64_t)pi.height != H) {
        const int rc = tr_error_set(err, TR_ERR_SHAPE, "image '%s' is %ux%u (width x height), expected %lldx%lld: "
                                    "resize it first", path, (unsigned)pi.width, (unsigned)pi.height, (long long)W,
                                    (long long)H);
        png_image_free(&pi);
        return rc;
    }
    pi.format = PNG_FORMAT_RGBA; /* grey made RGB; alpha read apart, then dropped */
    uint8_t *px = malloc((size_t)(W * H * 4));
    if (!px) {
        png_image_free(&pi);
        return tr_error_set(err, TR_ERR_NOMEM, "image '%s': no memory for %lld x %lld pixels", path, (long long)W,
                            (long long)H);
    }
    if (!png_image_finish_read(&pi, NULL, px, 0, NULL)) {
        const int rc = tr_error_set(err, TR_ERR_IO, "image '%s': cannot decode the PNG (%s)", path, pi.message);
        free(px);
        png_image_free(&pi);
        return rc;
    }
    const int64_t C = img->shape[3];
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < H * W; i++) {
            const uint8_t *p = px + i * 4;
            if (C == 1) { /* PIL's L: ITU-R 601-2 luma in 16-bit fixed point, rounded; then /255 */
                const uint32_t l = ((uint32_t)p[0] * 19595u + (uint32_t)p[1] * 38470u + (uint32_t)p[2] * 7471u +
                                    0x8000u) >> 16;
                tr_tensor_set_f64(img, b * H * W + i, (double)((float)l / 255.0f));
                continue;
            }
            for (int64_t c = 0; c < 3; c++) /* float32, as numpy's /255 then 2x − 1 */
                tr_tensor_set_f64(img, (b * H * W + i) * 3 + c, (double)(2.0f * ((float)p[c] / 255.0f) - 1.0f));
        }
    free(px);
    return TR_OK;
}
