/* AutoencoderKL (diffusers), Stable Diffusion's VAE, as a trident model `autoencoder_kl`.
 *
 * Activations are channels last (NHWC) throughout; parameters carry the names and shapes
 * of diffusers' state_dict (conv weights (Cout,Cin,KH,KW), Linear (out,in)), so a
 * checkpoint saved by diffusers binds as it is. The image side is sample_size square;
 * f = 2^(len(block_out_channels) - 1) is the latent's downscale (8 for SD).
 *
 *   predict  inputs   sample [B,S,S,in_channels] (an image in [-1,1])
 *            outputs  moments [B,S/f,S/f,2·latent_channels] (the encoder, then quant_conv:
 *                     the posterior's mean and log-variance, channels split in half),
 *                     decoded [B,S,S,out_channels] (the decoder on the mean: diffusers'
 *                     vae(sample, sample_posterior=False).sample)
 *   fit      inputs   sample, target [B,S/f,S/f,2·latent_channels]
 *            loss     MSE(moments, target); the encoder and quant_conv are trained, the
 *                     decoder is not built (the benchmark's "fit" row: the VAE encoder)
 * From a seed: conv and Linear weights normal(0, 1/√fan_in), biases normal(0, 0.02),
 * GroupNorm weights normal(1, 0.02).
 */
#ifndef TRIDENT_MODELS_VAE_H
#define TRIDENT_MODELS_VAE_H

#include <stdint.h>
#include "trident/model.h"

#define TR_VAE_MAX_BLOCKS 8

/* The keys of [model], named as diffusers' AutoencoderKL config. block_out_channels is a
 * comma-separated list ("128,256,512,512"). The down blocks are DownEncoderBlock2D and the
 * up blocks UpDecoderBlock2D, SiLU throughout; every GroupNorm has eps 1e-6, as there. */
struct tr_vae_config {
    int64_t in_channels;
    int64_t out_channels;
    int64_t latent_channels;
    int64_t layers_per_block;
    int64_t norm_num_groups;
    int64_t sample_size;
    double scaling_factor; /* latents = scaling_factor · z (the pipeline's, not the graph's) */
    int use_quant_conv;
    int use_post_quant_conv;
    int mid_block_add_attention;
    char block_out_channels[64];
};

/* block_out_channels parsed: *n entries into ch (room for TR_VAE_MAX_BLOCKS); an error
 * names the value and what is expected. */
int tr_vae_channels(const struct tr_vae_config *c, int64_t *ch, int *n, struct tr_error *err);

/* post_quant_conv and the decoder on z, an existing [B,s,s,latent_channels] node of g
 * (any s; o->dtype its dtype): *out gets the image [B,s·f,s·f,out_channels]. The encoder
 * and quant_conv are marked left out (tr_graph_omit): a whole VAE checkpoint loads quietly. */
struct tr_graph;
int tr_vae_decode_graph(const struct tr_vae_config *c, const struct tr_build_opts *o, struct tr_graph *g, int z,
                        int *out, struct tr_error *err);

/* The encoder and quant_conv on image, an existing [B,S,S,in_channels] node of g (S a
 * multiple of f; o->dtype its dtype): *moments gets [B,S/f,S/f,2·latent_channels], the
 * posterior's mean and log-variance. */
int tr_vae_encode_graph(const struct tr_vae_config *c, const struct tr_build_opts *o, struct tr_graph *g, int image,
                        int *moments, struct tr_error *err);

#endif
