/* Decoded pictures as PNG files (image.h): written through libpng's simplified API, read
 * through its low-level one (as PIL reads them). */
#include <errno.h>
#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
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

/* ---- Reading: libpng's low-level API, so the pixels are PIL's ----
 * The simplified API would gamma-correct a file whose gAMA is not sRGB's and turn 16-bit
 * samples to 8 bits as if linear; PIL does neither. PIL keeps a 16-bit sample's high byte
 * (RGB;16B, LA;16B, RGBA;16B), except 16-bit grey, which it opens as I;16 and whose
 * convert("RGB"/"L") clamps the value at 255. Palettes expand to their colours, 1/2/4-bit
 * grey scales to 8 bits (x255, x85, x17), tRNS is ignored (convert("RGB") drops alpha
 * anyway) but where asked (trns): convert("RGBA") makes it the alpha of its colour. */
struct png_ctx {
    jmp_buf jmp;
    char msg[160];
};

static void png_on_error(png_structp png, png_const_charp msg) {
    struct png_ctx *c = png_get_error_ptr(png);
    snprintf(c->msg, sizeof c->msg, "%s", msg);
    longjmp(c->jmp, 1);
}

static void png_on_warning(png_structp png, png_const_charp msg) { /* PIL reads on too */
    (void)png, (void)msg;
}

/* The PNG at path decoded as 8-bit RGBA as PIL decodes it (alpha as stored, 255 where the
 * file has none), into *px (malloc'd) with its size; or, px NULL, the size alone. With
 * want_h > 0, a size other than want_h x want_w is refused before anything is decoded. */
static int decode_rgba(const char *path, uint8_t **px, int64_t *h, int64_t *w, int64_t want_h, int64_t want_w,
                       int trns, struct tr_error *err) {
    if (!path) return tr_error_set(err, TR_ERR_INVALID, "image: NULL path");
    FILE *f = fopen(path, "rb");
    if (!f) return tr_error_set(err, TR_ERR_IO, "image '%s': cannot open it (%s)", path, strerror(errno));
    uint8_t sig[8];
    const size_t got = fread(sig, 1, 8, f);
    if (got != 8 || png_sig_cmp(sig, 0, 8)) {
        fclose(f);
        return tr_error_set(err, TR_ERR_IO, "image '%s': cannot read it as a PNG (%s)", path,
                            got == 0 ? "the file is empty" : "not a PNG signature");
    }
    struct png_ctx ctx = {.msg = ""};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &ctx, png_on_error, png_on_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    uint8_t *volatile out = NULL, *volatile wide = NULL; /* live across longjmp */
    uint8_t **volatile rows = NULL;
    if (!info) {
        png_destroy_read_struct(png ? &png : NULL, NULL, NULL);
        fclose(f);
        return tr_error_set(err, TR_ERR_NOMEM, "image '%s': no memory for libpng", path);
    }
    int rc = TR_OK;
    if (setjmp(ctx.jmp)) {
        rc = tr_error_set(err, TR_ERR_IO, "image '%s': cannot read it as a PNG (%s)", path, ctx.msg);
        goto done;
    }
    png_init_io(png, f);
    png_set_sig_bytes(png, 8);
    png_read_info(png, info);
    *h = png_get_image_height(png, info), *w = png_get_image_width(png, info);
    if (*h * *w > TR_IMAGE_MAX_PIXELS) {
        rc = tr_error_set(err, TR_ERR_INVALID, "image '%s' is %lldx%lld (width x height), %lld pixels: over the "
                          "limit of %lld (PIL's, against decompression bombs)", path, (long long)*w, (long long)*h,
                          (long long)(*h * *w), (long long)TR_IMAGE_MAX_PIXELS);
        goto done;
    }
    if (want_h > 0 && (*h != want_h || *w != want_w)) {
        rc = tr_error_set(err, TR_ERR_SHAPE, "image '%s' is %lldx%lld (width x height), expected %lldx%lld: "
                          "resize it first", path, (long long)*w, (long long)*h, (long long)want_w, (long long)want_h);
        goto done;
    }
    if (!px) goto done;
    const int depth = png_get_bit_depth(png, info), type = png_get_color_type(png, info);
    const int grey16 = depth == 16 && type == PNG_COLOR_TYPE_GRAY; /* PIL's I;16 */
    if (type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    const int alpha = type & PNG_COLOR_MASK_ALPHA || (trns && !grey16 && png_get_valid(png, info, PNG_INFO_tRNS));
    if (alpha && !(type & PNG_COLOR_MASK_ALPHA)) png_set_tRNS_to_alpha(png);
    if (type == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (depth == 16 && !grey16) png_set_strip_16(png); /* the high byte */
    if (!grey16 && (type == PNG_COLOR_TYPE_GRAY || type == PNG_COLOR_TYPE_GRAY_ALPHA)) png_set_gray_to_rgb(png);
    if (!grey16 && !alpha) png_set_filler(png, 0xff, PNG_FILLER_AFTER);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    const size_t rowbytes = png_get_rowbytes(png, info), n = (size_t)(*w * *h);
    if (rowbytes != (size_t)*w * (grey16 ? 2 : 4)) png_error(png, "unexpected row layout");
    out = malloc(n * 4);
    wide = grey16 ? malloc(n * 2) : NULL;
    rows = malloc(sizeof *rows * (size_t)*h);
    if (!out || !rows || (grey16 && !wide)) {
        rc = tr_error_set(err, TR_ERR_NOMEM, "image '%s': no memory for %lld x %lld pixels", path, (long long)*w,
                          (long long)*h);
        goto done;
    }
    for (int64_t y = 0; y < *h; y++) rows[y] = (grey16 ? wide : out) + (size_t)y * rowbytes;
    png_read_image(png, rows);
    for (size_t i = 0; grey16 && i < n; i++) { /* big-endian 16-bit, clamped as PIL's I;16 -> L */
        const unsigned v = (unsigned)wide[2 * i] << 8 | wide[2 * i + 1];
        out[4 * i] = out[4 * i + 1] = out[4 * i + 2] = (uint8_t)(v > 255 ? 255 : v), out[4 * i + 3] = 255;
    }
    *px = out, out = NULL;
done:
    free(rows);
    free(wide);
    free(out);
    png_destroy_read_struct(&png, &info, NULL);
    fclose(f);
    return rc;
}

int tr_image_png_size(const char *path, int64_t *h, int64_t *w, struct tr_error *err) {
    if (!h || !w) return tr_error_set(err, TR_ERR_INVALID, "image: NULL size");
    return decode_rgba(path, NULL, h, w, 0, 0, 0, err);
}

int tr_image_read_rgb8(const char *path, uint8_t **rgb, int64_t *h, int64_t *w, struct tr_error *err) {
    if (!rgb || !h || !w) return tr_error_set(err, TR_ERR_INVALID, "image: NULL output");
    uint8_t *px;
    int rc = decode_rgba(path, &px, h, w, 0, 0, 0, err);
    if (rc) return rc;
    for (int64_t i = 0; i < *h * *w; i++) /* in place: pixel i's RGB never overtakes its RGBA */
        memmove(px + 3 * i, px + 4 * i, 3);
    *rgb = px;
    return TR_OK;
}

/* Pillow's Image.alpha_composite of an RGBA pixel over opaque white (AlphaComposite.c's
 * integer arithmetic, 7 bits of precision, its rounded division by 255). */
static uint8_t over_white(unsigned v, unsigned a) {
    if (a == 0) return 255;
    const unsigned outa255 = a * 255 + 255 * (255 - a), coef1 = a * 255 * 255 * (1u << 7) / outa255;
    const unsigned coef2 = 255 * (1u << 7) - coef1, tmp = v * coef1 + 255 * coef2 + (0x80u << 7);
    return (uint8_t)((((tmp >> 8) + tmp) >> 8) >> 7);
}

int tr_image_read_rgb8_over_white(const char *path, uint8_t **rgb, int64_t *h, int64_t *w, struct tr_error *err) {
    if (!rgb || !h || !w) return tr_error_set(err, TR_ERR_INVALID, "image: NULL output");
    uint8_t *px;
    int rc = decode_rgba(path, &px, h, w, 0, 0, 1, err);
    if (rc) return rc;
    for (int64_t i = 0; i < *h * *w; i++) {
        const unsigned a = px[4 * i + 3];
        for (int c = 0; c < 3; c++) px[3 * i + c] = over_white(px[4 * i + c], a); /* in place, as above */
    }
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
    int rc = decode_rgba(path, &px, &h, &w, H, W, 0, err);
    if (rc) return rc;
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
    /* Pillow 13 (its Resample.c): where the height shrinks by more than twice as many
     * pixels as the width, the vertical pass first. The 8-bit rounding between the two
     * passes makes the order show in the pixels. */
    if (h - oh > 0 && h - oh > (w - ow) * 2) {
        if (ow == w) {
            pass(in, out, w, C, w * C, C, w * C, oh, C, &tv);
        } else if (!(tmp = malloc((size_t)(oh * w * C)))) {
            taps_free(&th), taps_free(&tv);
            return tr_error_set(err, TR_ERR_NOMEM, "image resize: out of memory");
        } else {
            pass(in, tmp, w, C, w * C, C, w * C, oh, C, &tv);
            pass(tmp, out, oh, w * C, C, ow * C, C, ow, C, &th);
        }
        free(tmp);
        taps_free(&th), taps_free(&tv);
        return TR_OK;
    }
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
