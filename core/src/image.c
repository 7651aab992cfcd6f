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

/* The PNG at path decoded as 8-bit RGBA (grey made RGB; alpha not premultiplied), into
 * *px (malloc'd) with its size; or, px NULL, the size alone. */
static int decode_rgba(const char *path, uint8_t **px, int64_t *h, int64_t *w, struct tr_error *err) {
    png_image pi;
    memset(&pi, 0, sizeof pi);
    pi.version = PNG_IMAGE_VERSION;
    if (!path) return tr_error_set(err, TR_ERR_INVALID, "image: NULL path");
    if (!png_image_begin_read_from_file(&pi, path))
        return tr_error_set(err, TR_ERR_IO, "image '%s': cannot read it as a PNG (%s)", path, pi.message);
    *h = pi.height, *w = pi.width;
    if (!px) {
        png_image_free(&pi);
        return TR_OK;
    }
    pi.format = PNG_FORMAT_RGBA;
    *px = malloc((size_t)(*w * *h * 4));
    if (!*px) {
        png_image_free(&pi);
        return tr_error_set(err, TR_ERR_NOMEM, "image '%s': no memory for %lld x %lld pixels", path, (long long)*w,
                            (long long)*h);
    }
    if (!png_image_finish_read(&pi, NULL, *px, 0, NULL)) {
        const int rc = tr_error_set(err, TR_ERR_IO, "image '%s': cannot decode the PNG (%s)", path, pi.message);
        free(*px);
        *px = NULL;
        png_image_free(&pi);
        return rc;
    }
    return TR_OK;
}

int tr_image_png_size(const char *path, int64_t *h, int64_t *w, struct tr_error *err) {
    if (!h || !w) return tr_error_set(err, TR_ERR_INVALID, "image: NULL size");
    return decode_rgba(path, NULL, h, w, err);
}

int tr_image_read_rgb8(const char *path, uint8_t **rgb, int64_t *h, int64_t *w, struct tr_error *err) {
    if (!rgb || !h || !w) return tr_error_set(err, TR_ERR_INVALID, "image: NULL output");
    uint8_t *px;
    int rc = decode_rgba(path, &px, h, w, err);
    if (rc) return rc;
    for (int64_t i = 0; i < *h * *w; i++) /* in place: pixel i's RGB never overtakes its RGBA */
        memmove(px + 3 * i, px + 4 * i, 3);
    *rgb = px;
    return TR_OK;
}

int tr_image_read_png(const char *path, struct tr_tensor *img, struct tr_error *err) {
    if (!path || !img || !img->data) return tr_error_set(err, TR_ERR_INVALID, "image: NULL path or tensor");
    if (img->ndim != 4 || (img->shape[3] != 3 && img->shape[3] != 1)) {
        char sh[96];
        return tr_error_set(err, TR_ERR_SHAPE, "image '%s': read into %s, expected [B,H,W,3] or [B,H,W,1]", path,
                            tr_shape_str(img->ndim, img->shape, sh, sizeof sh));
    }
    const int64_t B = img->shape[0], H = img->shape[1], W = img->shape[2];
    int64_t h, w;
    uint8_t *px;
    int rc = decode_rgba(path, &px, &h, &w, err);
    if (rc) return rc;
    if (w != W || h != H) {
        free(px);
        return tr_error_set(err, TR_ERR_SHAPE, "image '%s' is %lldx%lld (width x height), expected %lldx%lld: "
                            "resize it first", path, (long long)w, (long long)h, (long long)W, (long long)H);
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

/* ---- Pillow's BILINEAR resample (libImaging/Resample.c), to the bit ----
 * A triangle filter widened by the scale when shrinking (so it antialiases), its weights
 * normalised, then made fixed point (22 fraction bits) and applied to 8-bit values with
 * rounding and clamping: the rows first (only those the columns' pass reads), rounded to
 * 8 bits, then the columns. */
#define PIL_BITS 22

struct taps {
    int64_t *first, *n; /* per output index: the first input index and the tap count */
    int32_t *k;         /* ksize fixed-point weights per output index */
    int64_t ksize;
};

static void taps_free(struct taps *t) {
    free(t->first), free(t->n), free(t->k);
    t->first = t->n = NULL, t->k = NULL;
}

static int taps_make(int64_t in, int64_t out, struct taps *t) {
    const double scale = (double)in / (double)out, fs = scale < 1.0 ? 1.0 : scale, support = fs;
    t->ksize = (int64_t)ceil(support) * 2 + 1;
    t->first = malloc(sizeof *t->first * (size_t)out), t->n = malloc(sizeof *t->n * (size_t)out);
    t->k = malloc(sizeof *t->k * (size_t)(out * t->ksize));
    double *w = malloc(sizeof *w * (size_t)t->ksize);
    if (!t->first || !t->n || !t->k || !w) {
        free(w);
        taps_free(t);
        return TR_ERR_NOMEM;
    }
    for (int64_t o = 0; o < out; o++) {
        const double centre = ((double)o + 0.5) * scale;
        int64_t lo = (int64_t)(centre - support + 0.5), hi = (int64_t)(centre + support + 0.5);
        if (lo < 0) lo = 0;
        if (hi > in) hi = in;
        double sum = 0.0;
        for (int64_t x = 0; x < hi - lo; x++) {
            const double d = fabs(((double)(x + lo) - centre + 0.5) / fs);
            w[x] = d < 1.0 ? 1.0 - d : 0.0;
            sum += w[x];
        }
        for (int64_t x = 0; x < t->ksize; x++) {
            const double v = x < hi - lo ? (sum != 0.0 ? w[x] / sum : w[x]) : 0.0;
            t->k[o * t->ksize + x] = (int32_t)(v < 0 ? -0.5 + v * (1 << PIL_BITS) : 0.5 + v * (1 << PIL_BITS));
        }
        t->first[o] = lo, t->n[o] = hi - lo;
    }
    free(w);
    return TR_OK;
}

static uint8_t clip8(int64_t v) {
    v >>= PIL_BITS;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* dst[i·od + o·os + c] from src[i·id + (first + j)·is + c]: one pass along an axis */
static void pass(const uint8_t *src, uint8_t *dst, int64_t rows, int64_t id, int64_t is, int64_t od, int64_t os,
                 int64_t out, int64_t C, const struct taps *t) {
    for (int64_t i = 0; i < rows; i++)
        for (int64_t o = 0; o < out; o++) {
            const int32_t *k = t->k + o * t->ksize;
            for (int64_t c = 0; c < C; c++) {
                int64_t s = 1 << (PIL_BITS - 1);
                const uint8_t *p = src + i * id + t->first[o] * is + c;
                for (int64_t j = 0; j < t->n[o]; j++) s += (int64_t)p[j * is] * k[j];
                dst[i * od + o * os + c] = clip8(s);
            }
        }
}

int tr_image_resize_bilinear(const uint8_t *in, int64_t h, int64_t w, int64_t C, uint8_t *out, int64_t oh,
                             int64_t ow, struct tr_error *err) {
    if (!in || !out || h < 1 || w < 1 || oh < 1 || ow < 1 || C < 1)
        return tr_error_set(err, TR_ERR_INVALID, "image resize: %lldx%lld to %lldx%lld (x%lld channels): expected "
                            "sizes of at least 1 and buffers", (long long)w, (long long)h, (long long)ow,
                            (long long)oh, (long long)C);
    struct taps th = {0}, tv = {0};
    if (taps_make(w, ow, &th) || taps_make(h, oh, &tv)) {
        taps_free(&th);
        return tr_error_set(err, TR_ERR_NOMEM, "image resize: out of memory");
    }
    const uint8_t *src = in;
    uint8_t *tmp = NULL;
    int64_t rows = h;
    if (ow != w) { /* the rows the column pass reads, narrowed */
        const int64_t y0 = tv.first[0], y1 = tv.first[oh - 1] + tv.n[oh - 1];
        tmp = malloc((size_t)((y1 - y0) * ow * C));
        if (!tmp) {
            taps_free(&th), taps_free(&tv);
            return tr_error_set(err, TR_ERR_NOMEM, "image resize: out of memory");
        }
        pass(in + y0 * w * C, tmp, y1 - y0, w * C, C, ow * C, C, ow, C, &th);
        for (int64_t o = 0; o < oh; o++) tv.first[o] -= y0;
        src = tmp, rows = y1 - y0;
    }
    if (oh != h) pass(src, out, ow, C, ow * C, C, ow * C, oh, C, &tv);
    else memcpy(out, src, (size_t)(rows * ow * C));
    free(tmp);
    taps_free(&th), taps_free(&tv);
    return TR_OK;
}
