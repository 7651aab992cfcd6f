/* SamProcessor's steps around the model (sam.h): a photo of any size made the model's
 * S x S input, and the low-resolution masks brought back to the photo's size. As
 * transformers' SamImageProcessor (its Pillow processor, and Meta's ResizeLongestSide)
 * does them: the resize is Pillow's own, to the bit (image.h), so pixel_values match. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "sam.h"
#include "trident/image.h"

/* _get_preprocess_shape: scale = S / max(h, w), each side int(side·scale + 0.5). */
static int preprocess_shape(const struct tr_sam_config *c, const char *path, struct tr_sam_photo *p,
                            struct tr_error *err) {
    const int64_t S = c->image_size;
    const double scale = (double)S / (double)(p->h > p->w ? p->h : p->w);
    p->newh = (int64_t)((double)p->h * scale + 0.5), p->neww = (int64_t)((double)p->w * scale + 0.5);
    if (p->newh < 1 || p->neww < 1)
        return tr_error_set(err, TR_ERR_INVALID, "sam: [generate] init_image '%s' is %lldx%lld (width x height): "
                            "resized to a longer side of %lld, its shorter side would be 0 pixels", path,
                            (long long)p->w, (long long)p->h, (long long)S);
    return TR_OK;
}

int tr_sam_photo_size(const struct tr_sam_config *c, const char *path, struct tr_sam_photo *p, struct tr_error *err) {
    const int64_t S = c->image_size;
    if (!path) {
        *p = (struct tr_sam_photo){S, S, S, S};
        return TR_OK;
    }
    int rc = tr_image_png_size(path, &p->h, &p->w, err);
    if (rc) return tr_error_prefix(err, "sam: [generate] init_image");
    return preprocess_shape(c, path, p, err);
}

int tr_sam_pixel_values(const struct tr_sam_config *c, const char *path, struct tr_tensor *px, struct tr_error *err) {
    static const double mean[3] = {0.485, 0.456, 0.406}, std[3] = {0.229, 0.224, 0.225};
    struct tr_sam_photo p;
    uint8_t *rgb = NULL, *small = NULL;
    /* one read: the size comes with the pixels; transparency over white, as SamProcessor's
     * do_convert_rgb */
    int rc = tr_image_read_rgb8_over_white(path, &rgb, &p.h, &p.w, err);
    if (rc) return tr_error_prefix(err, "sam: [generate] init_image");
    rc = preprocess_shape(c, path, &p, err);
    if (!rc && !(small = malloc((size_t)(p.newh * p.neww * 3))))
        rc = tr_error_set(err, TR_ERR_NOMEM, "sam: [generate] init_image: out of memory");
    if (!rc && (rc = tr_image_resize_bilinear(rgb, p.h, p.w, 3, small, p.newh, p.neww, err)))
        tr_error_prefix(err, "sam: [generate] init_image");
    free(rgb);
    if (rc) {
        free(small);
        return rc;
    }
    const int64_t S = c->image_size, B = px->shape[0];
    for (int64_t b = 0; b < B; b++)
        for (int64_t y = 0; y < S; y++)
            for (int64_t x = 0; x < S; x++)
                for (int64_t ch = 0; ch < 3; ch++) {
                    const int64_t i = ((b * S + y) * S + x) * 3 + ch;
                    if (y >= p.newh || x >= p.neww) { /* the padding, after normalising: 0 */
                        tr_tensor_set_f64(px, i, 0.0);
                        continue;
                    }
                    const double v = small[(y * p.neww + x) * 3 + ch] / 255.0;
                    tr_tensor_set_f64(px, i, (v - mean[ch]) / std[ch]);
                }
    free(small);
    return TR_OK;
}

/* torch's bilinear interpolation from in to out (align_corners false): output o reads
 * src = (o + 0.5)·in/out − 0.5 (clamped at 0) between its two neighbours i0 and i1, with
 * weights 1 − l and l. */
static void neighbours(int64_t in, int64_t out, int64_t o, int64_t *i0, int64_t *i1, double *l) {
    double src = ((double)o + 0.5) * ((double)in / (double)out) - 0.5;
    if (src < 0) src = 0;
    *i0 = (int64_t)src, *i1 = *i0 + (*i0 < in - 1), *l = src - (double)*i0;
}

float *tr_sam_upscale_matrix(int64_t lowres, int64_t S, int64_t crop, int64_t out) {
    double *a = calloc((size_t)(S * lowres), sizeof *a); /* lowres -> S, as an (S, lowres) matrix */
    float *m = a ? malloc(sizeof *m * (size_t)(out * lowres)) : NULL;
    if (!m) {
        free(a);
        return NULL;
    }
    int64_t i0, i1;
    double l;
    for (int64_t o = 0; o < S; o++) {
        neighbours(lowres, S, o, &i0, &i1, &l);
        a[o * lowres + i0] += 1.0 - l, a[o * lowres + i1] += l;
    }
    for (int64_t o = 0; o < out; o++) { /* crop -> out, on a's first crop rows */
        neighbours(crop, out, o, &i0, &i1, &l);
        for (int64_t j = 0; j < lowres; j++)
            m[o * lowres + j] = (float)((1.0 - l) * a[i0 * lowres + j] + l * a[i1 * lowres + j]);
    }
    free(a);
    return m;
}
