/* libFuzzer: a PNG through trident's reader (core/src/image.c: libpng's low-level API, its
 * errors taken by longjmp): the size alone (tr_image_png_size), the pixels as 8-bit RGB
 * (tr_image_read_rgb8) resized as SamProcessor resizes them, and tr_image_read_png into
 * an RGB and a grey tensor of the file's size (diffusers' image and mask).
 *
 * Every chunk's CRC is made right before the file is written: libpng refuses a chunk whose
 * CRC is wrong, so without this almost every mutation would stop at the first chunk it
 * touched and the decoding behind it would go unfuzzed. Pictures of more than 2^20 pixels
 * have their size read, not their pixels (the harness's time, not the reader's limit). */
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include "fuzz_common.h"
#include "trident/image.h"

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void fix_crcs(uint8_t *b, size_t n) {
    for (size_t at = 8; at + 12 <= n;) {
        const uint32_t len = be32(b + at);
        if (len > n - at - 12) break;
        const uint32_t crc = (uint32_t)crc32(0L, b + at + 4, len + 4);
        uint8_t *c = b + at + 8 + len;
        c[0] = (uint8_t)(crc >> 24), c[1] = (uint8_t)(crc >> 16), c[2] = (uint8_t)(crc >> 8), c[3] = (uint8_t)crc;
        at += 12 + (size_t)len;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *b = malloc(size ? size : 1);
    if (!b) abort();
    memcpy(b, data, size);
    fix_crcs(b, size);
    const char *path = fuzz_file(0, b, size);
    free(b);
    struct tr_error err = {0};
    int64_t h = 0, w = 0;
    int rc = tr_image_png_size(path, &h, &w, &err);
    fuzz_note("tr_image_png_size", rc, err.msg);
    if (rc || h * w > (1 << 20)) return 0;
    uint8_t *rgb = NULL;
    rc = tr_image_read_rgb8(path, &rgb, &h, &w, &err);
    fuzz_note("tr_image_read_rgb8", rc, err.msg);
    if (rc) return 0;
    const int64_t oh = h / 3 + 1, ow = 2 * w + 1; /* shrink one axis, stretch the other */
    uint8_t *small = malloc((size_t)(oh * ow * 3));
    if (!small) abort();
    rc = tr_image_resize_bilinear(rgb, h, w, 3, small, oh, ow, &err);
    fuzz_note("tr_image_resize_bilinear", rc, err.msg);
    free(small);
    free(rgb);
    float *px = malloc(sizeof *px * (size_t)(h * w * 3));
    if (!px) abort();
    struct tr_tensor t;
    for (int64_t c = 3; c >= 1; c -= 2)
        if (tr_tensor_make(&t, px, TR_DTYPE_F32, 4, (int64_t[]){1, h, w, c}, &err) == TR_OK) {
            rc = tr_image_read_png(path, &t, &err);
            fuzz_note("tr_image_read_png", rc, err.msg);
        }
    free(px);
    return 0;
}
