/* trident — pictures out of a graph: a [B,H,W,C] float tensor of values in [-1, 1] (a VAE
 * decoder's, as diffusers' pipelines make them) written as one 8-bit PNG, the B images side
 * by side. Each value v becomes round(255·clamp((v + 1)/2, 0, 1)), diffusers' "pil"
 * output. C is 1 (grey), 3 (RGB) or 4 (RGBA).
 *
 * And pictures in: a PNG read into every one of the B images of a [B,H,W,3] tensor (its
 * size H×W exactly; grey made RGB, alpha dropped, as PIL's convert("RGB")), each 8-bit
 * value p as 2·(p/255) − 1 in float32, diffusers' VaeImageProcessor's; or of a [B,H,W,1]
 * one, a mask's: its grey level as PIL's convert("L") makes it, p/255 in [0, 1].
 *
 * Every kind of PNG is read as PIL reads it (palettes, 1/2/4-bit grey, 16-bit samples,
 * interlacing, a gAMA ignored); one of more than TR_IMAGE_MAX_PIXELS pixels is refused, as
 * PIL refuses it (DecompressionBombError), from its header alone.
 *
 * For a model that takes pictures of any size (SegmentAnything's processor): a PNG's size,
 * or its pixels as 8-bit RGB, and Pillow's Image.resize(..., BILINEAR) of 8-bit pixels to
 * the bit (the filter widened to antialias when shrinking; rows, then columns, or, as
 * Pillow 13 does where the height shrinks by more than twice as many pixels as the width,
 * columns first). */
#ifndef TRIDENT_IMAGE_H
#define TRIDENT_IMAGE_H

#include <stdint.h>
#include "trident/status.h"
#include "trident/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* PIL's Image.MAX_IMAGE_PIXELS times two: where PIL stops warning and refuses. */
#define TR_IMAGE_MAX_PIXELS (2LL * 89478485LL)

/* The 8-bit value of v as written. */
uint8_t tr_image_pixel(double v);
int tr_image_write_png(const char *path, const struct tr_tensor *img, struct tr_error *err);
int tr_image_read_png(const char *path, struct tr_tensor *img, struct tr_error *err);
int tr_image_png_size(const char *path, int64_t *h, int64_t *w, struct tr_error *err);
/* *rgb: h·w·3 bytes, row-major, malloc'd (the caller frees it). */
int tr_image_read_rgb8(const char *path, uint8_t **rgb, int64_t *h, int64_t *w, struct tr_error *err);
/* The same, with transparency (an alpha band, a tRNS colour) composited over white as
 * transformers' image processors do (convert_to_rgb: Image.alpha_composite onto white,
 * Pillow's arithmetic), where tr_image_read_rgb8 drops it as convert("RGB") does. */
int tr_image_read_rgb8_over_white(const char *path, uint8_t **rgb, int64_t *h, int64_t *w, struct tr_error *err);
/* in: h×w pixels of C bytes each, row-major; out: oh×ow of them. */
int tr_image_resize_bilinear(const uint8_t *in, int64_t h, int64_t w, int64_t C, uint8_t *out, int64_t oh,
                             int64_t ow, struct tr_error *err);

#ifdef __cplusplus
}
#endif

#endif
