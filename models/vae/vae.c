/* AutoencoderKL: diffusers' Stable Diffusion VAE as a trident graph (vae.h).
 *
 * Encoder: conv_in, DownEncoderBlock2D per entry of block_out_channels (layers_per_block
 * ResnetBlock2D, then a stride-2 conv on the (0,1,0,1)-padded map except in the last),
 * the mid block (resnet, one-head self-attention over the pixels, resnet), GroupNorm +
 * SiLU, conv_out to 2·latent_channels; quant_conv (1x1). Decoder: post_quant_conv (1x1),
 * conv_in, the mid block, UpDecoderBlock2D per reversed entry (layers_per_block + 1
 * resnets, then nearest x2 and a conv except in the last), GroupNorm + SiLU, conv_out.
 * Dropout is absent (0 in every SD config).
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hf_json.h"
#include "layers.h"
#include "models.h"
#include "trident/autodiff.h"
#include "trident/rng.h"
#include "vae.h"

#define KEY_(field, type, lo, hi, doc) {#field, type, offsetof(struct tr_vae_config, field), lo, hi, doc}

static const struct tr_model_key vae_keys[] = {
    KEY_(in_channels, TR_KEY_INT, 1, 65536, "channels of the image (3: RGB)"),
    KEY_(out_channels, TR_KEY_INT, 1, 65536, "channels of the decoded image"),
    KEY_(latent_channels, TR_KEY_INT, 1, 65536, "channels of the latent z (4 for SD)"),
    KEY_(layers_per_block, TR_KEY_INT, 1, 64, "resnets per down block (the up blocks have one more)"),
    KEY_(norm_num_groups, TR_KEY_INT, 1, 65536, "groups of every GroupNorm; divides every entry of block_out_channels"),
    KEY_(sample_size, TR_KEY_INT, 1, 65536, "image side S (S x S pixels); a multiple of the latent's downscale"),
    KEY_(scaling_factor, TR_KEY_FLOAT, 0, 1e6, "latents = scaling_factor * z (used by the SD pipeline, not here)"),
    KEY_(use_quant_conv, TR_KEY_BOOL, 0, 0, "a 1x1 conv after the encoder (quant_conv)"),
    KEY_(use_post_quant_conv, TR_KEY_BOOL, 0, 0, "a 1x1 conv before the decoder (post_quant_conv)"),
    KEY_(mid_block_add_attention, TR_KEY_BOOL, 0, 0, "self-attention in the mid blocks"),
    KEY_(block_out_channels, TR_KEY_STRING, 0, 0, "channels of each block, comma-separated (\"128,256,512,512\")"),
};

/* The values of diffusers' config.json for each (sd-v1-4: CompVis/stable-diffusion-v1-4's vae). */
#define VAE_COMMON .in_channels = 3, .out_channels = 3, .latent_channels = 4, .scaling_factor = 0.18215, \
                   .use_quant_conv = 1, .use_post_quant_conv = 1, .mid_block_add_attention = 1
static const struct tr_vae_config vae_tiny = {
    VAE_COMMON, .layers_per_block = 1, .norm_num_groups = 4, .sample_size = 16, .block_out_channels = "16,32",
};
static const struct tr_vae_config vae_small = {
    VAE_COMMON, .layers_per_block = 1, .norm_num_groups = 16, .sample_size = 64, .block_out_channels = "32,64,128",
};
static const struct tr_vae_config vae_sd = {
    VAE_COMMON, .layers_per_block = 2, .norm_num_groups = 32, .sample_size = 512,
    .block_out_channels = "128,256,512,512",
};

static const struct tr_model_preset vae_presets[] = {
    {"tiny", &vae_tiny, "2 blocks 16,32, 1 layer each, 4 groups, 16x16 images (tests)"},
    {"small", &vae_small, "3 blocks 32,64,128, 1 layer each, 16 groups, 64x64 images (CPU benchmarks)"},
    {"sd-v1-4", &vae_sd,
     "CompVis/stable-diffusion-v1-4's vae: 4 blocks 128,256,512,512, 2 layers each, 32 groups, 512x512 images, "
     "latents 64x64x4; 83,653,863 parameters (34,163,664 in the encoder and quant_conv, what fit trains)"},
};

#define EPS 1e-6f /* every GroupNorm of diffusers' VAE */

int tr_vae_channels(const struct tr_vae_config *c, int64_t *ch, int *n, struct tr_error *err) {
    return tr_model_int_list("autoencoder_kl", "block_out_channels", c->block_out_channels,
                             sizeof c->block_out_channels, 1, 65536, "128,256,512,512", ch, TR_VAE_MAX_BLOCKS, n, err);
}

/* The checks build and make_inputs share; ch/n_blocks get block_out_channels. */
static int vae_validate(const struct tr_vae_config *c, const struct tr_build_opts *o, int64_t *ch, int *n_blocks,
                        struct tr_error *err) {
    int rc = tr_vae_channels(c, ch, n_blocks, err);
    if (rc) return rc;
    const struct tr_model_pos pos[] = {
        {"in_channels", c->in_channels},         {"out_channels", c->out_channels},
        {"latent_channels", c->latent_channels}, {"layers_per_block", c->layers_per_block},
        {"norm_num_groups", c->norm_num_groups}, {"sample_size", c->sample_size},
        {"batch", o->batch},
    };
    rc = tr_model_check_positive("autoencoder_kl", pos, (int)(sizeof pos / sizeof pos[0]), err);
    if (rc) return rc;
    for (int i = 0; i < *n_blocks; i++)
        if (ch[i] % c->norm_num_groups != 0)
            return tr_error_set(err, TR_ERR_INVALID, "autoencoder_kl: block_out_channels entry %lld is not a multiple "
                                "of norm_num_groups = %lld (every GroupNorm splits its channels into that many groups)",
                                (long long)ch[i], (long long)c->norm_num_groups);
    const int64_t f = (int64_t)1 << (*n_blocks - 1);
    if (c->sample_size % f != 0)
        return tr_error_set(err, TR_ERR_INVALID, "autoencoder_kl: sample_size = %lld is not a multiple of %lld, the "
                            "downscale of %d blocks", (long long)c->sample_size, (long long)f, *n_blocks);
    if (!tr_dtype_is_float(o->dtype) || o->dtype == TR_DTYPE_F64)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "autoencoder_kl: dtype %s is not provided (f32, bf16 or f16)",
                            tr_dtype_name(o->dtype));
    return TR_OK;
}

struct net {
    struct tr_graph *g;
    enum tr_dtype dt;
    int64_t groups;
};

static int conv(struct net *n, int x, int64_t cin, int64_t cout, int64_t k, int stride, int pad, int pad_end,
                const char *name) {
    return tr_nn_conv2d(n->g, x, cin, cout, k, stride, pad, pad_end, n->dt, name);
}

static int group_norm(struct net *n, int x, int64_t c, int silu, const char *name) {
    return tr_nn_group_norm(n->g, x, c, (int)n->groups, EPS, silu, n->dt, name);
}

static int linear(struct net *n, int x, int64_t in, int64_t out, const char *name) {
    return tr_nn_linear(n->g, x, in, out, n->dt, 1, -1.0f, name);
}

/* ResnetBlock2D without a time embedding: x + conv2(silu(gn2(conv1(silu(gn1(x)))))), the
 * skip through a 1x1 conv_shortcut where the channels change. */
static int resnet(struct net *n, int x, int64_t cin, int64_t cout, const char *scope, int index) {
    tr_graph_push_scope(n->g, "%s.%d", scope, index);
    int h = group_norm(n, x, cin, 1, "norm1");
    h = conv(n, h, cin, cout, 3, 1, 1, 0, "conv1");
    h = group_norm(n, h, cout, 1, "norm2");
    h = conv(n, h, cout, cout, 3, 1, 1, 0, "conv2");
    int skip = cin == cout ? x : conv(n, x, cin, cout, 1, 1, 0, 0, "conv_shortcut");
    int y = tr_add(n->g, skip, h);
    tr_graph_pop_scope(n->g);
    return y;
}

/* The mid block's Attention: one head over the H·W pixels, GroupNorm first, a residual. */
static int attention(struct net *n, int x, int64_t B, int64_t H, int64_t W, int64_t C) {
    tr_graph_push_scope(n->g, "attentions.0");
    const int64_t seq[3] = {B, H * W, C}, heads[4] = {B, 1, H * W, C}, img[4] = {B, H, W, C};
    int h = tr_reshape(n->g, group_norm(n, x, C, 0, "group_norm"), 3, seq);
    int q = tr_reshape(n->g, linear(n, h, C, C, "to_q"), 4, heads);
    int k = tr_reshape(n->g, linear(n, h, C, C, "to_k"), 4, heads);
    int v = tr_reshape(n->g, linear(n, h, C, C, "to_v"), 4, heads);
    int a = tr_reshape(n->g, tr_attention(n->g, q, k, v, -1, tr_attention_default_scale(C), 0, 0), 3, seq);
    int y = tr_add(n->g, tr_reshape(n->g, linear(n, a, C, C, "to_out.0"), 4, img), x);
    tr_graph_pop_scope(n->g);
    return y;
}

static int mid_block(struct net *n, const struct tr_vae_config *c, int x, int64_t B, int64_t S, int64_t C) {
    tr_graph_push_scope(n->g, "mid_block");
    x = resnet(n, x, C, C, "resnets", 0);
    if (c->mid_block_add_attention) x = attention(n, x, B, S, S, C);
    x = resnet(n, x, C, C, "resnets", 1);
    tr_graph_pop_scope(n->g);
    return x;
}

/* Encoder and quant_conv: sample (B,S,S,in) -> moments (B,S/f,S/f,2L). */
static int encode(struct net *n, const struct tr_vae_config *c, const int64_t *ch, int nb, int x, int64_t B,
                  int64_t S) {
    tr_graph_push_scope(n->g, "encoder");
    x = conv(n, x, c->in_channels, ch[0], 3, 1, 1, 0, "conv_in");
    int64_t prev = ch[0];
    for (int i = 0; i < nb; i++) {
        tr_graph_push_scope(n->g, "down_blocks.%d", i);
        for (int64_t j = 0; j < c->layers_per_block; j++) {
            x = resnet(n, x, prev, ch[i], "resnets", (int)j);
            prev = ch[i];
        }
        if (i + 1 < nb) { /* Downsample2D with padding 0: F.pad (0,1,0,1), a stride-2 3x3 conv */
            x = conv(n, x, prev, prev, 3, 2, 0, 1, "downsamplers.0.conv");
            S /= 2;
        }
        tr_graph_pop_scope(n->g);
    }
    x = mid_block(n, c, x, B, S, prev);
    x = group_norm(n, x, prev, 1, "conv_norm_out");
    x = conv(n, x, prev, 2 * c->latent_channels, 3, 1, 1, 0, "conv_out");
    tr_graph_pop_scope(n->g);
    if (c->use_quant_conv)
        x = conv(n, x, 2 * c->latent_channels, 2 * c->latent_channels, 1, 1, 0, 0, "quant_conv");
    return x;
}

/* post_quant_conv and the decoder: z (B,s,s,L) -> image (B,S,S,out). */
static int decode(struct net *n, const struct tr_vae_config *c, const int64_t *ch, int nb, int z, int64_t B,
                  int64_t S) {
    const int64_t L = c->latent_channels;
    if (c->use_post_quant_conv) z = conv(n, z, L, L, 1, 1, 0, 0, "post_quant_conv");
    tr_graph_push_scope(n->g, "decoder");
    int64_t prev = ch[nb - 1];
    int x = conv(n, z, L, prev, 3, 1, 1, 0, "conv_in");
    x = mid_block(n, c, x, B, S, prev);
    for (int i = 0; i < nb; i++) {
        const int64_t out = ch[nb - 1 - i];
        tr_graph_push_scope(n->g, "up_blocks.%d", i);
        for (int64_t j = 0; j <= c->layers_per_block; j++) {
            x = resnet(n, x, prev, out, "resnets", (int)j);
            prev = out;
        }
        if (i + 1 < nb) { /* Upsample2D: nearest x2, a 3x3 conv */
            x = conv(n, tr_upsample_nearest(n->g, x, 2), prev, prev, 3, 1, 1, 0, "upsamplers.0.conv");
            S *= 2;
        }
        tr_graph_pop_scope(n->g);
    }
    x = group_norm(n, x, prev, 1, "conv_norm_out");
    x = conv(n, x, prev, c->out_channels, 3, 1, 1, 0, "conv_out");
    tr_graph_pop_scope(n->g);
    return x;
}

static int vae_build(const void *config, const struct tr_build_opts *o, struct tr_graph *g, struct tr_error *err) {
    const struct tr_vae_config *c = config;
    int64_t ch[TR_VAE_MAX_BLOCKS];
    int nb;
    int rc = vae_validate(c, o, ch, &nb, err);
    if (rc) return rc;
    if (o->task != TR_TASK_PREDICT && o->task != TR_TASK_FIT)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "autoencoder_kl: task '%s' is not provided (autoencoder_kl "
                            "offers: predict, fit)", tr_task_name(o->task));
    const int64_t B = o->batch, S = c->sample_size, s = S >> (nb - 1), L = c->latent_channels;
    const int64_t img[4] = {B, S, S, c->in_channels}, lat[4] = {B, s, s, 2 * L};
    struct net n = {g, o->dtype, c->norm_num_groups};
    int x = tr_input(g, "sample", o->dtype, 4, img);
    int moments = encode(&n, c, ch, nb, x, B, S);
    if (o->task == TR_TASK_FIT) {
        int target = tr_input(g, "target", o->dtype, 4, lat);
        int loss = tr_mse(g, moments, target);
        if (loss >= 0) tr_graph_set_name(g, loss, "loss");
        tr_graph_omit(g, "decoder."), tr_graph_omit(g, "post_quant_conv.");
    } else {
        tr_graph_set_output(g, moments, "moments");
        int mean = tr_slice(g, moments, 3, 0, L, 1); /* the posterior's mode */
        tr_graph_set_output(g, decode(&n, c, ch, nb, mean, B, s), "decoded");
    }
    rc = tr_graph_status(g, err);
    if (rc) return tr_error_prefix(err, "autoencoder_kl");
    return TR_OK;
}

int tr_vae_decode_graph(const struct tr_vae_config *c, const struct tr_build_opts *o, struct tr_graph *g, int z,
                        int *out, struct tr_error *err) {
    int64_t ch[TR_VAE_MAX_BLOCKS];
    int nb;
    int rc = vae_validate(c, o, ch, &nb, err);
    if (rc) return rc;
    const int64_t *sh = tr_node_shape(g, z);
    if (tr_node_ndim(g, z) != 4 || sh[1] != sh[2] || sh[3] != c->latent_channels)
        return tr_error_set(err, TR_ERR_SHAPE, "autoencoder_kl: latents of %d dimensions, expected [B,s,s,%lld]",
                            tr_node_ndim(g, z), (long long)c->latent_channels);
    struct net n = {g, o->dtype, c->norm_num_groups};
    *out = decode(&n, c, ch, nb, z, sh[0], sh[1]);
    tr_graph_omit(g, "encoder."), tr_graph_omit(g, "quant_conv.");
    rc = tr_graph_status(g, err);
    if (rc) return tr_error_prefix(err, "autoencoder_kl");
    return TR_OK;
}

int tr_vae_encode_graph(const struct tr_vae_config *c, const struct tr_build_opts *o, struct tr_graph *g, int image,
                        int *moments, struct tr_error *err) {
    int64_t ch[TR_VAE_MAX_BLOCKS];
    int nb;
    int rc = vae_validate(c, o, ch, &nb, err);
    if (rc) return rc;
    const int64_t *sh = tr_node_shape(g, image), f = (int64_t)1 << (nb - 1);
    if (tr_node_ndim(g, image) != 4 || sh[1] != sh[2] || sh[1] % f || sh[3] != c->in_channels)
        return tr_error_set(err, TR_ERR_SHAPE, "autoencoder_kl: an image of %d dimensions, expected [B,S,S,%lld] with S "
                            "a multiple of %lld", tr_node_ndim(g, image), (long long)c->in_channels, (long long)f);
    struct net n = {g, o->dtype, c->norm_num_groups};
    *moments = encode(&n, c, ch, nb, image, sh[0], sh[1]);
    rc = tr_graph_status(g, err);
    if (rc) return tr_error_prefix(err, "autoencoder_kl");
    return TR_OK;
}

/* sample: a smooth random image in [-1,1] (a few sinusoids per channel plus noise, so
 * the convolutions see structure); target: normal(0, 1). */
static int vae_make_inputs(const void *config, const struct tr_build_opts *o, uint64_t seed, int n,
                           struct tr_tensor *inputs, struct tr_error *err) {
    const struct tr_vae_config *c = config;
    int64_t ch[TR_VAE_MAX_BLOCKS];
    int nb;
    int rc = vae_validate(c, o, ch, &nb, err);
    if (rc) return rc;
    const int want = o->task == TR_TASK_FIT ? 2 : 1;
    if (n != want)
        return tr_error_set(err, TR_ERR_INVALID, "autoencoder_kl: %d inputs given, expected %d (sample%s)", n, want,
                            want == 2 ? ", target" : "");
    const int64_t B = o->batch, S = c->sample_size, s = S >> (nb - 1);
    const int64_t img[4] = {B, S, S, c->in_channels}, lat[4] = {B, s, s, 2 * c->latent_channels};
    rc = tr_model_check_input("autoencoder_kl", &inputs[0], "sample", o->dtype, 4, img, err);
    if (!rc && want == 2) rc = tr_model_check_input("autoencoder_kl", &inputs[1], "target", o->dtype, 4, lat, err);
    if (rc) return rc;
    tr_model_fill_image(&inputs[0], seed, "sample", 0.6, 1, 2, 0.3);
    if (want == 2) tr_model_fill_normal(&inputs[1], seed, "target");
    return TR_OK;
}

/* AutoencoderKL.__init__'s defaults (diffusers 0.42.1) of the keys read below: a
 * config.json that leaves one out means this, as from_config reads it (act_fn's "silu" is
 * the one value accepted). */
static const char DEFAULTS[] =
    "{\"in_channels\": 3, \"out_channels\": 3, \"down_block_types\": [\"DownEncoderBlock2D\"], "
    "\"up_block_types\": [\"UpDecoderBlock2D\"], \"block_out_channels\": [64], \"layers_per_block\": 1, "
    "\"latent_channels\": 4, \"norm_num_groups\": 32, \"sample_size\": 32, \"scaling_factor\": 0.18215, "
    "\"use_quant_conv\": true, \"use_post_quant_conv\": true, \"mid_block_add_attention\": true}";

/* The entries of the file's block types (`key`, n of them; null: not counted) against
 * block_out_channels': diffusers builds one block per type, taking its channels by index,
 * so a mismatch is no model it builds (the defaults make it easy: a file giving four
 * channels but no types means a single type). */
static int vae_same_blocks(const cJSON *root, const char *path, const char *key, int n,
                           const struct tr_vae_config *c, struct tr_error *err) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, key);
    int64_t ch[TR_VAE_MAX_BLOCKS];
    int nb;
    if (!j || cJSON_IsNull(j)) return TR_OK;
    int rc = tr_vae_channels(c, ch, &nb, err);
    if (rc || n == nb) return rc;
    return tr_error_set(err, TR_ERR_INVALID, "'%s': \"%s\" has %d entries, \"block_out_channels\" %d: expected one "
                        "per block (left out, diffusers' default is one block)", path, key, n, nb);
}

/* diffusers' AutoencoderKL config.json: the keys by name, a key left out its class
 * default (DEFAULTS); the block types and the activation must be the ones built here. */
static int vae_read_hf_config(void *config, const char *path, struct tr_error *err) {
    cJSON *root;
    int rc = tr_hf_json_load(path, &root, err);
    if (!rc) rc = tr_hf_json_defaults(root, path, DEFAULTS, err);
    if (rc) {
        cJSON_Delete(root);
        return rc;
    }
    static const char *const down[] = {"DownEncoderBlock2D"}, *const up[] = {"UpDecoderBlock2D"};
    int64_t idx[TR_VAE_MAX_BLOCKS];
    int nd = 0, nu = 0;
    rc = tr_hf_json_expect_str(root, path, "_class_name", "AutoencoderKL", err);
    if (!rc) rc = tr_hf_json_expect_str(root, path, "act_fn", "silu", err);
    if (!rc) rc = tr_hf_json_names(root, path, "down_block_types", down, 1, idx, TR_VAE_MAX_BLOCKS, &nd, err);
    if (!rc) rc = tr_hf_json_names(root, path, "up_block_types", up, 1, idx, TR_VAE_MAX_BLOCKS, &nu, err);
    if (!rc) rc = tr_hf_json_apply(root, path, vae_keys, (int)(sizeof vae_keys / sizeof vae_keys[0]), config, NULL, err);
    if (!rc) rc = vae_same_blocks(root, path, "down_block_types", nd, config, err);
    if (!rc) rc = vae_same_blocks(root, path, "up_block_types", nu, config, err);
    cJSON_Delete(root);
    return rc;
}

/* images, no sequence: a [run] seq_len is said to be unread */
static int64_t vae_no_seq_len(const void *config) {
    (void)config;
    return -1;
}

const struct tr_model_desc tr_model_autoencoder_kl = {
    .name = "autoencoder_kl",
    .description = "AutoencoderKL (diffusers names; Stable Diffusion's VAE, NHWC)",
    .config_size = sizeof(struct tr_vae_config),
    TR_MODEL_TABLES(vae_keys, vae_presets),
    .tasks = 1u << TR_TASK_PREDICT | 1u << TR_TASK_FIT,
    .build = vae_build,
    .trainable = tr_model_trainable_all, /* fit builds only what it trains */
    .make_inputs = vae_make_inputs,
    .default_seq_len = vae_no_seq_len,
    .read_hf_config = vae_read_hf_config,
    /* twice the worst of diffusers' own bf16 image against float64 on 14 random configs
     * (make_vision_reference.py --model autoencoder_kl --dtype bf16, seeds 1 to 8 and 11 to
     * 16): 1.3e-2 to 2.9e-2; trident's backends differ by 1.0e-2 to 3.1e-2 there */
    .bf16_tolerance = 6e-2,
    .bf16_why = "a VAE decoder (diffusers': up to 2.9e-2 from f64)",
};
