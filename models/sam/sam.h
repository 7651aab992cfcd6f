/* SamModel (transformers), SegmentAnything, as a trident model `sam`.
 *
 * Parameters carry the names and shapes of transformers' SamModel state_dict
 * (vision_encoder.*, prompt_encoder.*, mask_decoder.*, shared_image_embedding.*), so a
 * checkpoint saved by transformers (facebook/sam-vit-huge) binds as it is; Meta's
 * segment_anything names map as docs/models.md says. Activations are channels last.
 * With S = image_size, G = S / patch_size (the token grid) and C = output_channels:
 *
 *   predict  inputs   pixel_values [B,S,S,3], input_points f32 [B,1,N,2] (x, y in pixels of
 *                     the S x S image), input_labels i32 [B,1,N] (1 foreground, 0
 *                     background, -1 not a point, 2 and 3 box corners); input_boxes f32
 *                     [B,1,4] (x0, y0, x1, y1) where [model] boxes gives one (the points
 *                     then left out where [model] points is empty)
 *            outputs  image_embeddings [B,G,G,C], pred_masks [B,1,M,4G,4G] (the low-
 *                     resolution mask logits), iou_scores [B,1,M]: M = 3 masks
 *                     (multimask_output), or the single-mask output (M = 1)
 *   generate inputs   as predict, from a photo ([generate] init_image, any size) as
 *                     SamProcessor makes them: resized (Pillow's bilinear) so its longer
 *                     side is S, normalised (ImageNet's mean and std), zero-padded to S x
 *                     S; the prompt given in the photo's pixels, scaled as the image was
 *            outputs  predict's, and masks [B,1,M,H,W]: the mask logits at the photo's
 *                     size H x W, as post_process_masks makes them before its threshold
 *                     (up to S x S, cropped to the resized image, to H x W; bilinear);
 *                     [generate] image = PNG: each image's mask of the highest IoU
 *                     prediction, logits > 0 white
 *   fit      inputs   pixel_values, target [B,G,G,C]
 *            loss     MSE(image_embeddings, target): the image encoder alone is built and
 *                     trained (the benchmark's SAM fit row)
 * As transformers: one prompt set per image (point_batch 1), a padding point (label -1)
 * appended when no box is given, no mask prompt (the no-mask dense embedding).
 */
#ifndef TRIDENT_MODELS_SAM_H
#define TRIDENT_MODELS_SAM_H

#include <stdint.h>
#include "trident/model.h"
#include "trident/tensor.h"

#define TR_SAM_MAX_LAYERS 256
#define TR_SAM_MAX_POINTS 64

/* The keys of [model]: the vision encoder's as transformers' SamVisionConfig names them,
 * the mask decoder's prefixed decoder_ where the name would clash, and the prompt. */
struct tr_sam_config {
    int64_t hidden_size;          /* the ViT's width */
    int64_t num_hidden_layers;
    int64_t num_attention_heads;
    int64_t mlp_dim;
    int64_t image_size;
    int64_t patch_size;
    int64_t window_size;          /* 0: every block global */
    int64_t output_channels;      /* the neck's (and the prompt encoder's, mask decoder's) width */
    int64_t num_pos_feats;        /* the random Fourier features: output_channels / 2 */
    double layer_norm_eps;        /* the image encoder's blocks (vision_config's) */
    double decoder_layer_norm_eps; /* the two-way transformer's blocks (mask_decoder_config's) */
    int qkv_bias, use_abs_pos, use_rel_pos;
    char global_attn_indexes[128];
    int64_t decoder_mlp_dim;
    int64_t decoder_num_hidden_layers;
    int64_t decoder_num_attention_heads;
    int64_t attention_downsample_rate;
    int64_t iou_head_hidden_dim;
    int64_t iou_head_depth;
    int64_t num_multimask_outputs;
    int64_t mask_input_channels;  /* the (unused) mask prompt's embedding width */
    char points[256];             /* make_inputs' prompt: x,y pairs in pixels */
    char labels[128];             /* one per point */
    char boxes[64];               /* make_inputs' box: x0,y0,x1,y1 in pixels; "" none */
    int multimask_output;         /* 3 masks (1), or the single-mask output (0) */
};

/* ---- SamProcessor's steps (processor.c) ---- */

/* The picture a generate segments: its size h x w, and the size newh x neww it is resized
 * to (its longer side the model's image_size S, as _get_preprocess_shape rounds). path
 * NULL: make_inputs' synthetic S x S picture, as it is. */
struct tr_sam_photo {
    int64_t h, w, newh, neww;
};
int tr_sam_photo_size(const struct tr_sam_config *c, const char *path, struct tr_sam_photo *p, struct tr_error *err);
/* pixel_values [B,S,S,3] of the model's dtype, every image the photo at path resized,
 * rescaled by 1/255, normalised by ImageNet's mean and std, zero-padded at the bottom and
 * right. */
int tr_sam_pixel_values(const struct tr_sam_config *c, const char *path, struct tr_tensor *px, struct tr_error *err);
/* post_process_masks' upscaling along one axis as an (out, lowres) matrix of float32:
 * the lowres values interpolated (bilinear, align_corners false) to S, the first `crop`
 * kept, interpolated to `out`; composed in double. NULL when out of memory. */
float *tr_sam_upscale_matrix(int64_t lowres, int64_t S, int64_t crop, int64_t out);

#endif
