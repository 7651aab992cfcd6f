/* UNet2DConditionModel (diffusers), Stable Diffusion's denoiser, as a trident model
 * `unet_2d_condition`.
 *
 * Activations are channels last (NHWC); parameters carry the names and shapes of
 * diffusers' state_dict (conv weights (Cout,Cin,KH,KW), Linear (out,in)), so a checkpoint
 * saved by diffusers binds as it is. The blocks are diffusers' CrossAttnDownBlock2D /
 * DownBlock2D going down (cross_attention_blocks says which), UNetMidBlock2DCrossAttn
 * (or none, as mid_block_type says), and the mirror image going up (UpBlock2D /
 * CrossAttnUpBlock2D); every attention is a
 * Transformer2DModel with one BasicTransformerBlock (self-attention, cross-attention on
 * the text, GEGLU feed-forward). Its proj_in / proj_out are 1x1 convolutions (weights
 * (C,C,1,1), SD 1.x) or, with use_linear_projection, Linear layers on the tokens (weights
 * (C,C), SD 2.x): in channels last the two compute the same, only the parameters' shapes
 * differ. The heads may differ between blocks (SD 2.x: 5,10,20,20); a block's
 * transformers use its entry going down and coming up, the mid block the last entry.
 * config.json's upcast_attention (SD 2.1) is accepted either way: trident's attention
 * computes the scores and softmax in f32 in every dtype, which is what it asks for.
 *
 *   predict  inputs   sample [B,S,S,in_channels] (the noisy latents), timestep f32 [B],
 *                     encoder_hidden_states [B,T,cross_attention_dim] (the text
 *                     encoder's last_hidden_state; T = seq_len)
 *            outputs  noise_pred [B,S,S,out_channels] (diffusers' UNet2DConditionOutput.sample)
 * From a seed: conv and Linear weights normal(0, 1/√fan_in), biases normal(0, 0.02), norm
 * weights normal(1, 0.02).
 */
#ifndef TRIDENT_MODELS_UNET_H
#define TRIDENT_MODELS_UNET_H

#include <stdint.h>
#include "trident/model.h"

#define TR_UNET_MAX_BLOCKS 8

/* How far two backends' bf16 outputs through a UNet may be apart (tr_model_desc's
 * bf16_tolerance, for unet_2d_condition and stable_diffusion's predict): twice the worst of
 * diffusers' own bf16 output against float64 on 17 random configs
 * (tests/fixtures/make_vision_reference.py --model unet_2d_condition --dtype bf16, seeds 1
 * to 16): 0.8e-2 to 3.4e-2; trident's backends differ by 0.6e-2 to 2.7e-2 there. */
#define TR_UNET_BF16_TOLERANCE 7e-2
#define TR_UNET_BF16_WHY "a UNet (diffusers' own: up to 3.4e-2 from f64)"

/* The keys of [model], named as diffusers' UNet2DConditionModel config, except
 * cross_attention_blocks, which stands for down_block_types (1: CrossAttnDownBlock2D, 0:
 * DownBlock2D; up_block_types are their mirror image, as in every Stable Diffusion).
 * attention_head_dim is, as diffusers reads it for this model (its naming quirk), the
 * number of heads: one for every block ("8") or one per block ("5,10,20,20"); each head
 * is channels/heads wide. */
struct tr_unet_config {
    int64_t sample_size;
    int64_t in_channels;
    int64_t out_channels;
    int64_t layers_per_block;
    int64_t cross_attention_dim;
    int64_t norm_num_groups;
    double norm_eps;
    int flip_sin_to_cos;
    int use_linear_projection;
    double freq_shift;
    char attention_head_dim[64];
    char block_out_channels[64];
    char cross_attention_blocks[64];
    char mid_block_type[32];     /* "UNetMidBlock2DCrossAttn" (SD's) or "none" (diffusers' null: no mid
                                    block, as the distilled BK-SDM UNets have) */
};

/* The per-block lists of a config, parsed and checked against each other. */
struct tr_unet_blocks {
    int n;
    int64_t ch[TR_UNET_MAX_BLOCKS];    /* block_out_channels */
    int64_t cross[TR_UNET_MAX_BLOCKS]; /* 1: a CrossAttn block */
    int64_t heads[TR_UNET_MAX_BLOCKS]; /* attention_head_dim, one given for all spread to every block */
};

int tr_unet_blocks(const struct tr_unet_config *c, struct tr_unet_blocks *b, struct tr_error *err);

/* The UNet on existing nodes of g: sample [B,S,S,in_channels], timestep f32 [B] and text
 * [B,T,cross_attention_dim] (B = o->batch, T = o->seq_len; o->dtype the sample's); *out
 * gets the prediction [B,S,S,out_channels]. Checks c and o as build does. */
struct tr_graph;
int tr_unet_graph(const struct tr_unet_config *c, const struct tr_build_opts *o, struct tr_graph *g, int sample,
                  int timestep, int text, int *out, struct tr_error *err);

#endif
