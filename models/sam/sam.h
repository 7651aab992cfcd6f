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
 *                     background, -1 not a point, 2 and 3 box corners)
 *            outputs  image_embeddings [B,G,G,C], pred_masks [B,1,3,4G,4G] (the low-
 *                     resolution mask logits, multimask output), iou_scores [B,1,3]
 *   fit      inputs   pixel_values, target [B,G,G,C]
 *            loss     MSE(image_embeddings, target): the image encoder alone is built and
 *                     trained (the benchmark's SAM fit row)
 * As transformers: one prompt set per image (point_batch 1), a padding point (label -1)
 * appended since no box is given, no mask prompt (the no-mask dense embedding).
 */
#ifndef TRIDENT_MODELS_SAM_H
#define TRIDENT_MODELS_SAM_H

#include <stdint.h>
#include "trident/model.h"

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
};

#endif
