/* UNet2DConditionModel: diffusers' Stable Diffusion UNet as a trident graph (unet.h).
 *
 * timestep -> sinusoid (block_out_channels[0] wide) -> time_embedding (Linear, SiLU,
 * Linear; 4x wider), added inside every resnet through its time_emb_proj. conv_in, the
 * down blocks (each resnet and attention output, and each downsampler's, kept for the
 * skips), the mid block, the up blocks (each resnet takes the last kept map concatenated
 * after its input's channels), GroupNorm + SiLU, conv_out. Dropout is absent.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include "hf_json.h"
#include "layers.h"
#include "models.h"
#include "trident/rng.h"
#include "unet.h"

#define KEY_(field, type, lo, hi, doc) {#field, type, offsetof(struct tr_unet_config, field), lo, hi, doc}

static const struct tr_model_key unet_keys[] = {
    KEY_(sample_size, TR_KEY_INT, 1, 65536, "latent side S (S x S); a multiple of 2^(blocks - 1)"),
    KEY_(in_channels, TR_KEY_INT, 1, 65536, "channels of the latents in (4 for SD)"),
    KEY_(out_channels, TR_KEY_INT, 1, 65536, "channels of the prediction"),
    KEY_(layers_per_block, TR_KEY_INT, 1, 64, "resnets per down block (the up blocks have one more)"),
    KEY_(attention_head_dim, TR_KEY_STRING, 0, 0,
         "heads of the attentions (diffusers' SD name for it): one for all (\"8\") or one per block (\"5,10,20,20\")"),
    KEY_(cross_attention_dim, TR_KEY_INT, 1, 65536, "width of encoder_hidden_states (the text encoder's)"),
    KEY_(norm_num_groups, TR_KEY_INT, 1, 65536, "groups of every GroupNorm; divides every block's channels"),
    KEY_(norm_eps, TR_KEY_FLOAT, 0, 1, "epsilon of the resnets' and the output's GroupNorm"),
    KEY_(flip_sin_to_cos, TR_KEY_BOOL, 0, 0, "timestep features as [cos, sin] (true in SD) rather than [sin, cos]"),
    KEY_(use_linear_projection, TR_KEY_BOOL, 0, 0,
         "the transformers' proj_in / proj_out as Linear (weights [C,C], SD 2.x) rather than 1x1 convs (SD 1.x)"),
    KEY_(freq_shift, TR_KEY_FLOAT, -1e6, 1e6, "downscale_freq_shift of the timestep features (0 in SD)"),
    KEY_(block_out_channels, TR_KEY_STRING, 0, 0, "channels of each block, comma-separated (\"320,640,1280,1280\")"),
    KEY_(cross_attention_blocks, TR_KEY_STRING, 0, 0,
         "per down block 1 (CrossAttnDownBlock2D) or 0 (DownBlock2D), the up blocks mirrored (\"1,1,1,0\")"),
    KEY_(mid_block_type, TR_KEY_STRING, 0, 0,
         "UNetMidBlock2DCrossAttn (SD's), or none: no mid block (a config.json's null, as diffusers reads it)"),
};

/* The values of diffusers' config.json for each (sd-v1-4: CompVis/stable-diffusion-v1-4's unet). */
#define UNET_COMMON .in_channels = 4, .out_channels = 4, .norm_eps = 1e-5, .flip_sin_to_cos = 1, .freq_shift = 0, \
                    .mid_block_type = "UNetMidBlock2DCrossAttn"
static const struct tr_unet_config unet_tiny = {
    UNET_COMMON, .sample_size = 8, .layers_per_block = 1, .attention_head_dim = "2", .cross_attention_dim = 64,
    .norm_num_groups = 4, .block_out_channels = "16,32", .cross_attention_blocks = "1,0",
};
static const struct tr_unet_config unet_small = {
    UNET_COMMON, .sample_size = 32, .layers_per_block = 1, .attention_head_dim = "4", .cross_attention_dim = 256,
    .norm_num_groups = 16, .block_out_channels = "64,128,256", .cross_attention_blocks = "1,1,0",
};
static const struct tr_unet_config unet_sd = {
    UNET_COMMON, .sample_size = 64, .layers_per_block = 2, .attention_head_dim = "8", .cross_attention_dim = 768,
    .norm_num_groups = 32, .block_out_channels = "320,640,1280,1280", .cross_attention_blocks = "1,1,1,0",
};
static const struct tr_unet_config unet_sd21 = {
    UNET_COMMON, .sample_size = 96, .layers_per_block = 2, .attention_head_dim = "5,10,20,20",
    .cross_attention_dim = 1024, .norm_num_groups = 32, .use_linear_projection = 1,
    .block_out_channels = "320,640,1280,1280", .cross_attention_blocks = "1,1,1,0",
};

static const struct tr_model_preset unet_presets[] = {
    {"tiny", &unet_tiny, "2 blocks 16,32 (cross-attention in the outer), 1 layer each, 2 heads, 4 groups, 8x8 "
                         "latents, text width 64 (clip_text tiny's; tests)"},
    {"small", &unet_small, "3 blocks 64,128,256, 1 layer each, 4 heads, 16 groups, 32x32 latents, text width 256 "
                           "(clip_text small's; CPU benchmarks)"},
    {"sd-v1-4", &unet_sd,
     "CompVis/stable-diffusion-v1-4's unet: 4 blocks 320,640,1280,1280 (cross-attention in the first three), "
     "2 layers each, 8 heads, 32 groups, 64x64 latents (512x512 images), text width 768; 859,520,964 parameters"},
    {"sd-2-1", &unet_sd21,
     "stabilityai/stable-diffusion-2-1's unet: sd-v1-4's blocks with 5,10,20,20 heads (64 wide each), Linear "
     "proj_in / proj_out, 96x96 latents (768x768 images), text width 1024; 865,910,724 parameters"},
};

int tr_unet_blocks(const struct tr_unet_config *c, struct tr_unet_blocks *b, struct tr_error *err) {
    static const char *const M = "unet_2d_condition";
    int na = 0, nh = 0;
    int rc = tr_model_int_list(M, "block_out_channels", c->block_out_channels, sizeof c->block_out_channels, 1, 65536,
                               "320,640,1280,1280", b->ch, TR_UNET_MAX_BLOCKS, &b->n, err);
    if (!rc)
        rc = tr_model_int_list(M, "cross_attention_blocks", c->cross_attention_blocks, sizeof c->cross_attention_blocks,
                               0, 1, "1,1,1,0", b->cross, TR_UNET_MAX_BLOCKS, &na, err);
    if (!rc)
        rc = tr_model_int_list(M, "attention_head_dim", c->attention_head_dim, sizeof c->attention_head_dim, 1, 4096,
                               "5,10,20,20", b->heads, TR_UNET_MAX_BLOCKS, &nh, err);
    if (rc) return rc;
    if (na != b->n)
        return tr_error_set(err, TR_ERR_INVALID, "%s: cross_attention_blocks = '%s' has %d entries, "
                            "block_out_channels = '%s' %d: expected one per block", M, c->cross_attention_blocks, na,
                            c->block_out_channels, b->n);
    if (nh != 1 && nh != b->n)
        return tr_error_set(err, TR_ERR_INVALID, "%s: attention_head_dim = '%s' has %d entries, block_out_channels "
                            "= '%s' %d: expected one for every block or one per block", M, c->attention_head_dim, nh,
                            c->block_out_channels, b->n);
    for (int i = nh; i < b->n; i++) b->heads[i] = b->heads[0];
    return TR_OK;
}

/* 1 where the UNet has its mid block (UNetMidBlock2DCrossAttn), 0 for "none". */
static int mid_block(const struct tr_unet_config *c) { return strcmp(c->mid_block_type, "none") != 0; }

static int unet_validate(const struct tr_unet_config *c, const struct tr_build_opts *o, struct tr_unet_blocks *b,
                         struct tr_error *err) {
    int rc = tr_unet_blocks(c, b, err);
    if (rc) return rc;
    if (strcmp(c->mid_block_type, "UNetMidBlock2DCrossAttn") != 0 && mid_block(c))
        return tr_error_set(err, TR_ERR_INVALID, "unet_2d_condition: mid_block_type = '%.31s', expected "
                            "UNetMidBlock2DCrossAttn or none", c->mid_block_type);
    const int64_t *ch = b->ch;
    const int nb = b->n;
    for (int i = 0; i < nb; i++) {
        if (ch[i] % c->norm_num_groups != 0)
            return tr_error_set(err, TR_ERR_INVALID, "unet_2d_condition: block_out_channels entry %lld is not a "
                                "multiple of norm_num_groups = %lld", (long long)ch[i], (long long)c->norm_num_groups);
        /* the heads of a block without attention are unused (the last block's serve the mid block) */
        if ((b->cross[i] || (i == nb - 1 && mid_block(c))) && ch[i] % b->heads[i] != 0)
            return tr_error_set(err, TR_ERR_INVALID, "unet_2d_condition: block_out_channels entry %lld is not a "
                                "multiple of its attention_head_dim entry %lld (attention_head_dim = '%s'; the heads "
                                "split the channels)", (long long)ch[i], (long long)b->heads[i], c->attention_head_dim);
    }
    if (ch[0] % 2 != 0)
        return tr_error_set(err, TR_ERR_INVALID, "unet_2d_condition: block_out_channels[0] = %lld must be even (the "
                            "timestep's sin and cos features)", (long long)ch[0]);
    if (!(c->freq_shift < (double)(ch[0] / 2)))
        return tr_error_set(err, TR_ERR_INVALID, "unet_2d_condition: freq_shift = %g, expected below %lld "
                            "(block_out_channels[0] / 2)", c->freq_shift, (long long)(ch[0] / 2));
    const int64_t f = (int64_t)1 << (nb - 1);
    if (c->sample_size % f != 0)
        return tr_error_set(err, TR_ERR_INVALID, "unet_2d_condition: sample_size = %lld is not a multiple of %lld, the "
                            "downscale of %d blocks (an image side must be a multiple of %lld with the VAE's 8)",
                            (long long)c->sample_size, (long long)f, nb, (long long)(8 * f));
    if (o->batch < 1 || o->seq_len < 1)
        return tr_error_set(err, TR_ERR_INVALID, "unet_2d_condition: batch = %lld and seq_len = %lld (the text's "
                            "tokens), expected at least 1", (long long)o->batch, (long long)o->seq_len);
    if (!tr_dtype_is_float(o->dtype) || o->dtype == TR_DTYPE_F64)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "unet_2d_condition: dtype %s is not provided (f32, bf16 or f16)",
                            tr_dtype_name(o->dtype));
    if (o->task != TR_TASK_PREDICT)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "unet_2d_condition: task '%s' is not provided "
                            "(unet_2d_condition offers: predict)", tr_task_name(o->task));
    return TR_OK;
}

struct net {
    struct tr_graph *g;
    const struct tr_unet_config *c;
    enum tr_dtype dt;
    int64_t B, T;
    int temb;    /* the time embedding [B, 4·ch[0]] */
    int64_t temb_dim;
    int text;    /* encoder_hidden_states [B, T, cross_attention_dim] */
};

static int conv(struct net *n, int x, int64_t cin, int64_t cout, int64_t k, int stride, const char *name) {
    return tr_nn_conv2d(n->g, x, cin, cout, k, stride, (int)(k / 2), 0, n->dt, name);
}

static int group_norm(struct net *n, int x, int64_t c, double eps, int silu, const char *name) {
    return tr_nn_group_norm(n->g, x, c, (int)n->c->norm_num_groups, (float)eps, silu, n->dt, name);
}

/* BasicTransformerBlock's nn.LayerNorm: eps 1e-5 */
static int layer_norm(struct net *n, int x, int64_t d, const char *name) {
    return tr_nn_layer_norm(n->g, x, d, n->dt, 1e-5f, name);
}

/* bias 0: none (the attention projections) */
static int linear(struct net *n, int x, int64_t in, int64_t out, int bias, const char *name) {
    return tr_nn_linear(n->g, x, in, out, n->dt, bias, -1.0f, name);
}

/* ResnetBlock2D with the time embedding: x + conv2(silu(gn2(conv1(silu(gn1(x))) +
 * time_emb_proj(silu(temb))))), the skip through conv_shortcut where channels change. */
static int resnet(struct net *n, int x, int64_t cin, int64_t cout, int index) {
    const double eps = n->c->norm_eps;
    tr_graph_push_scope(n->g, "resnets.%d", index);
    int h = group_norm(n, x, cin, eps, 1, "norm1");
    h = conv(n, h, cin, cout, 3, 1, "conv1");
    const int64_t bc[4] = {n->B, 1, 1, cout};
    int t = linear(n, tr_unary(n->g, TR_OP_SILU, n->temb), n->temb_dim, cout, 1, "time_emb_proj");
    h = tr_add(n->g, h, tr_reshape(n->g, t, 4, bc));
    h = group_norm(n, h, cout, eps, 1, "norm2");
    h = conv(n, h, cout, cout, 3, 1, "conv2");
    int skip = cin == cout ? x : conv(n, x, cin, cout, 1, 1, "conv_shortcut");
    int y = tr_add(n->g, skip, h);
    tr_graph_pop_scope(n->g);
    return y;
}

/* diffusers' Attention: queries from x (B,L,C), keys and values from ctx (B,M,Cc) (ctx < 0:
 * x itself, self-attention), H heads of C/H. */
static int attention(struct net *n, int x, int64_t L, int64_t C, int64_t H, int ctx, int64_t M, int64_t Cc,
                     const char *name) {
    const int64_t Dh = C / H;
    const int64_t qs[4] = {n->B, L, H, Dh}, ks[4] = {n->B, M, H, Dh}, merged[3] = {n->B, L, C};
    const int perm[4] = {0, 2, 1, 3};
    if (ctx < 0) ctx = x; /* self-attention */
    tr_graph_push_scope(n->g, "%s", name);
    int q = tr_transpose(n->g, tr_reshape(n->g, linear(n, x, C, C, 0, "to_q"), 4, qs), 4, perm);
    int k = tr_transpose(n->g, tr_reshape(n->g, linear(n, ctx, Cc, C, 0, "to_k"), 4, ks), 4, perm);
    int v = tr_transpose(n->g, tr_reshape(n->g, linear(n, ctx, Cc, C, 0, "to_v"), 4, ks), 4, perm);
    int a = tr_attention(n->g, q, k, v, -1, tr_attention_default_scale(Dh), 0, 0);
    a = tr_reshape(n->g, tr_transpose(n->g, a, 4, perm), 3, merged);
    int y = linear(n, a, C, C, 1, "to_out.0");
    tr_graph_pop_scope(n->g);
    return y;
}

/* Transformer2DModel (one BasicTransformerBlock, H heads) on x (B,S,S,C), plus x. */
static int transformer(struct net *n, int x, int64_t S, int64_t C, int64_t H, int index) {
    const int64_t L = S * S, seq[3] = {n->B, L, C}, img[4] = {n->B, S, S, C};
    tr_graph_push_scope(n->g, "attentions.%d", index);
    int h = group_norm(n, x, C, 1e-6, 0, "norm");
    /* proj_in: a 1x1 conv on the map, then the tokens (SD 1.x), or the tokens, then a Linear
     * (use_linear_projection, SD 2.x); channels last, the two are the same product over C
     * and differ only in the weight's shape; proj_out mirrors it */
    const int lin = n->c->use_linear_projection;
    h = lin ? linear(n, tr_reshape(n->g, h, 3, seq), C, C, 1, "proj_in")
            : tr_reshape(n->g, conv(n, h, C, C, 1, 1, "proj_in"), 3, seq);
    tr_graph_push_scope(n->g, "transformer_blocks.0");
    h = tr_add(n->g, attention(n, layer_norm(n, h, C, "norm1"), L, C, H, -1, L, C, "attn1"), h);
    h = tr_add(n->g, attention(n, layer_norm(n, h, C, "norm2"), L, C, H, n->text, n->T, n->c->cross_attention_dim,
                               "attn2"), h);
    /* FeedForward with GEGLU: proj to 2·4C, the first half times gelu(the second half) */
    int p = linear(n, layer_norm(n, h, C, "norm3"), C, 8 * C, 1, "ff.net.0.proj");
    int geglu = tr_mul(n->g, tr_slice(n->g, p, 2, 0, 4 * C, 1), tr_gelu(n->g, tr_slice(n->g, p, 2, 4 * C, 8 * C, 1), 0));
    h = tr_add(n->g, linear(n, geglu, 4 * C, C, 1, "ff.net.2"), h);
    tr_graph_pop_scope(n->g);
    h = lin ? tr_reshape(n->g, linear(n, h, C, C, 1, "proj_out"), 4, img)
            : conv(n, tr_reshape(n->g, h, 4, img), C, C, 1, 1, "proj_out");
    int y = tr_add(n->g, h, x);
    tr_graph_pop_scope(n->g);
    return y;
}

/* sinusoid -> time_embedding; t is f32 [B] whatever the graph's dtype, as diffusers
 * computes the features in f32 and casts them to the sample's dtype. */
static int time_embedding(struct net *n, int t, int64_t ch0) {
    int f = tr_timestep_embedding(n->g, t, (int)ch0, n->c->flip_sin_to_cos, (float)n->c->freq_shift, 10000.0f);
    if (n->dt != TR_DTYPE_F32) f = tr_cast(n->g, f, n->dt);
    tr_graph_push_scope(n->g, "time_embedding");
    int e = linear(n, f, ch0, n->temb_dim, 1, "linear_1");
    e = linear(n, tr_unary(n->g, TR_OP_SILU, e), n->temb_dim, n->temb_dim, 1, "linear_2");
    tr_graph_pop_scope(n->g);
    return e;
}

int tr_unet_graph(const struct tr_unet_config *c, const struct tr_build_opts *o, struct tr_graph *g, int sample,
                  int timestep, int text, int *out, struct tr_error *err) {
    struct tr_unet_blocks b;
    int rc = unet_validate(c, o, &b, err);
    if (rc) return rc;
    const int64_t *ch = b.ch, *attn = b.cross, *heads = b.heads;
    const int nb = b.n;
    const int64_t B = o->batch, T = o->seq_len, L = c->layers_per_block;
    int64_t S = c->sample_size;
    struct net n = {g, c, o->dtype, B, T, -1, 4 * ch[0], text};
    int x = sample;
    n.temb = time_embedding(&n, timestep, ch[0]);

    /* the skips: every map the down path makes, with its channels */
    int skip[TR_UNET_MAX_BLOCKS * 66 + 1];
    int64_t skip_ch[TR_UNET_MAX_BLOCKS * 66 + 1];
    int ns = 0;
    x = conv(&n, x, c->in_channels, ch[0], 3, 1, "conv_in");
    skip[ns] = x, skip_ch[ns++] = ch[0];
    int64_t prev = ch[0];
    for (int i = 0; i < nb; i++) {
        tr_graph_push_scope(g, "down_blocks.%d", i);
        for (int64_t j = 0; j < L; j++) {
            x = resnet(&n, x, prev, ch[i], (int)j);
            prev = ch[i];
            if (attn[i]) x = transformer(&n, x, S, prev, heads[i], (int)j);
            skip[ns] = x, skip_ch[ns++] = prev;
        }
        if (i + 1 < nb) { /* Downsample2D: a stride-2 3x3 conv, padding 1 */
            x = conv(&n, x, prev, prev, 3, 2, "downsamplers.0.conv");
            S /= 2;
            skip[ns] = x, skip_ch[ns++] = prev;
        }
        tr_graph_pop_scope(g);
    }
    if (mid_block(c)) {
        tr_graph_push_scope(g, "mid_block");
        x = resnet(&n, x, prev, prev, 0);
        x = transformer(&n, x, S, prev, heads[nb - 1], 0);
        x = resnet(&n, x, prev, prev, 1);
        tr_graph_pop_scope(g);
    }
    for (int i = 0; i < nb; i++) {
        const int64_t out = ch[nb - 1 - i];
        const int cross = (int)attn[nb - 1 - i];
        const int64_t h = heads[nb - 1 - i]; /* diffusers' reversed list */
        tr_graph_push_scope(g, "up_blocks.%d", i);
        for (int64_t j = 0; j <= L; j++) {
            ns--;
            const int cat[2] = {x, skip[ns]};
            x = tr_concat(g, 2, cat, 3);
            x = resnet(&n, x, prev + skip_ch[ns], out, (int)j);
            prev = out;
            if (cross) x = transformer(&n, x, S, prev, h, (int)j);
        }
        if (i + 1 < nb) { /* Upsample2D: nearest x2, a 3x3 conv */
            x = conv(&n, tr_upsample_nearest(g, x, 2), prev, prev, 3, 1, "upsamplers.0.conv");
            S *= 2;
        }
        tr_graph_pop_scope(g);
    }
    x = group_norm(&n, x, prev, c->norm_eps, 1, "conv_norm_out");
    x = conv(&n, x, prev, c->out_channels, 3, 1, "conv_out");
    rc = tr_graph_status(g, err);
    if (rc) return tr_error_prefix(err, "unet_2d_condition");
    *out = x;
    return TR_OK;
}

static int unet_build(const void *config, const struct tr_build_opts *o, struct tr_graph *g, struct tr_error *err) {
    const struct tr_unet_config *c = config;
    const int64_t B = o->batch, S = c->sample_size;
    const int64_t img[4] = {B, S, S, c->in_channels}, bs[1] = {B}, ts[3] = {B, o->seq_len, c->cross_attention_dim};
    int x = tr_input(g, "sample", o->dtype, 4, img);
    int t = tr_input(g, "timestep", TR_DTYPE_F32, 1, bs);
    int text = tr_input(g, "encoder_hidden_states", o->dtype, 3, ts);
    int y;
    int rc = tr_unet_graph(c, o, g, x, t, text, &y, err);
    if (rc) return rc;
    tr_graph_set_output(g, y, "noise_pred");
    return tr_graph_status(g, err);
}

/* sample: normal(0, 1) (the first step's latents are pure noise); timestep: an integer
 * in [0, 1000) per sample, as a scheduler feeds them; encoder_hidden_states: normal(0, 1). */
static int unet_make_inputs(const void *config, const struct tr_build_opts *o, uint64_t seed, int n,
                            struct tr_tensor *inputs, struct tr_error *err) {
    const struct tr_unet_config *c = config;
    struct tr_unet_blocks b;
    int rc = unet_validate(c, o, &b, err);
    if (rc) return rc;
    if (n != 3)
        return tr_error_set(err, TR_ERR_INVALID, "unet_2d_condition: %d inputs given, expected 3 (sample, timestep, "
                            "encoder_hidden_states)", n);
    const int64_t B = o->batch, S = c->sample_size;
    const int64_t img[4] = {B, S, S, c->in_channels}, bs[1] = {B}, ts[3] = {B, o->seq_len, c->cross_attention_dim};
    static const char *const M = "unet_2d_condition";
    rc = tr_model_check_input(M, &inputs[0], "sample", o->dtype, 4, img, err);
    if (!rc) rc = tr_model_check_input(M, &inputs[1], "timestep", TR_DTYPE_F32, 1, bs, err);
    if (!rc) rc = tr_model_check_input(M, &inputs[2], "encoder_hidden_states", o->dtype, 3, ts, err);
    if (rc) return rc;
    tr_model_fill_normal(&inputs[0], seed, "sample");
    const uint64_t kt = tr_hash_str("timestep");
    for (int64_t i = 0; i < B; i++)
        tr_tensor_set_f64(&inputs[1], i, floor(1000.0 * tr_rng_uniform(seed, kt, (uint64_t)i)));
    tr_model_fill_normal(&inputs[2], seed, "encoder_hidden_states");
    return TR_OK;
}

/* config.json's attention_head_dim, a number or one per down block (nd of them; 0: no
 * down_block_types to count), into the key's "a,b,c". */
static int read_heads(const cJSON *root, const char *path, int nd, struct tr_unet_config *c, struct tr_error *err) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, "attention_head_dim");
    if (!j || cJSON_IsNull(j)) return TR_OK;
    const int list = cJSON_IsArray(j), n = list ? cJSON_GetArraySize(j) : 1;
    if (list && (n < 1 || n > TR_UNET_MAX_BLOCKS || (nd > 0 && n != nd)))
        return tr_error_set(err, TR_ERR_FORMAT, "'%s': \"attention_head_dim\" has %d entries, \"down_block_types\" %d: "
                            "expected one number, or one per block", path, n, nd);
    char buf[sizeof c->attention_head_dim];
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        const cJSON *e = list ? cJSON_GetArrayItem(j, i) : j;
        if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || e->valuedouble < 1 ||
            e->valuedouble > 4096)
            return tr_error_set(err, TR_ERR_FORMAT, "'%s': \"attention_head_dim\" is not an integer from 1 to 4096 "
                                "or a list of them", path);
        /* at most 8 entries of 4 digits: fits */
        len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%d", i ? "," : "", (int)e->valuedouble);
    }
    memcpy(c->attention_head_dim, buf, len + 1);
    return TR_OK;
}

/* Keys diffusers takes as one value for every block or as a list (one per block; a pair
 * for sample_size): trident takes one value. */
static int expect_one_value(const cJSON *root, const char *path, const char *key, struct tr_error *err) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!cJSON_IsArray(j)) return TR_OK;
    char *v = cJSON_PrintUnformatted(j);
    int rc = tr_error_set(err, TR_ERR_UNSUPPORTED, "'%s': \"%s\" = %.60s: only a single value (the same for every "
                          "block, a square sample) is provided", path, key, v ? v : "(a list)");
    cJSON_free(v);
    return rc;
}

/* UNet2DConditionModel.__init__'s defaults (diffusers 0.42.1) of the keys read below: a
 * config.json that leaves one out means this, as from_config reads it. The keys only
 * checked are left out where their default is the one value accepted (act_fn "silu",
 * the nulls, the kernels of 3, ...). sample_size's default is None: no shape in diffusers
 * (its pipeline then has no default image size), so it stays null and the preset's side
 * is kept. num_attention_heads None (attention_head_dim's value) is required null anyway. */
static const char DEFAULTS[] =
    "{\"sample_size\": null, \"in_channels\": 4, \"out_channels\": 4, \"flip_sin_to_cos\": true, "
    "\"freq_shift\": 0, \"down_block_types\": [\"CrossAttnDownBlock2D\", \"CrossAttnDownBlock2D\", "
    "\"CrossAttnDownBlock2D\", \"DownBlock2D\"], \"mid_block_type\": \"UNetMidBlock2DCrossAttn\", "
    "\"up_block_types\": [\"UpBlock2D\", \"CrossAttnUpBlock2D\", \"CrossAttnUpBlock2D\", \"CrossAttnUpBlock2D\"], "
    "\"block_out_channels\": [320, 640, 1280, 1280], \"layers_per_block\": 2, \"norm_num_groups\": 32, "
    "\"norm_eps\": 1e-05, \"cross_attention_dim\": 1280, \"attention_head_dim\": 8, "
    "\"use_linear_projection\": false}";

/* diffusers' UNet2DConditionModel config.json: the keys by name, a key left out its class
 * default (DEFAULTS); the block types give cross_attention_blocks (the up blocks must
 * mirror the down ones); attention_head_dim gives the heads, one for all or per block
 * (diffusers reads it as num_attention_heads, which it requires to be null); what SD 1.x
 * and 2.x do not use is refused by name. */
static int unet_read_hf_config(void *config, const char *path, struct tr_error *err) {
    struct tr_unet_config *c = config;
    cJSON *root;
    int rc = tr_hf_json_load(path, &root, err);
    if (!rc) rc = tr_hf_json_defaults(root, path, DEFAULTS, err);
    if (rc) {
        cJSON_Delete(root);
        return rc;
    }
    static const char *const down[] = {"DownBlock2D", "CrossAttnDownBlock2D"}, *const up[] = {"UpBlock2D",
                                                                                          "CrossAttnUpBlock2D"};
    static const char *const nulls[] = {"class_embed_type", "addition_embed_type", "num_class_embeds",
                                        "encoder_hid_dim", "encoder_hid_dim_type", "time_cond_proj_dim",
                                        "timestep_post_act", "cross_attention_norm", "num_attention_heads",
                                        "time_embedding_dim", "time_embedding_act_fn",
                                        "projection_class_embeddings_input_dim",
                                        "reverse_transformer_layers_per_block"};
    static const char *const one_value[] = {"sample_size", "layers_per_block", "cross_attention_dim",
                                            "transformer_layers_per_block", "only_cross_attention"};
    static const char *const skip[] = {"attention_head_dim", NULL};
    int64_t d[TR_UNET_MAX_BLOCKS], u[TR_UNET_MAX_BLOCKS];
    int nd = 0, nu = 0;
    rc = tr_hf_json_expect_str(root, path, "_class_name", "UNet2DConditionModel", err);
    for (size_t i = 0; !rc && i < sizeof one_value / sizeof one_value[0]; i++)
        rc = expect_one_value(root, path, one_value[i], err);
    if (!rc) rc = tr_hf_json_expect_str(root, path, "act_fn", "silu", err);
    /* null is no mid block in diffusers (not its default); the string is checked with the rest */
    const cJSON *mid = cJSON_GetObjectItemCaseSensitive(root, "mid_block_type");
    if (!rc && mid && cJSON_IsNull(mid)) snprintf(c->mid_block_type, sizeof c->mid_block_type, "none");
    if (!rc && mid && !cJSON_IsNull(mid) &&
        (!cJSON_IsString(mid) || strcmp(mid->valuestring, "UNetMidBlock2DCrossAttn") != 0))
        rc = tr_error_set(err, TR_ERR_UNSUPPORTED, "'%s': \"mid_block_type\" = %s: only \"UNetMidBlock2DCrossAttn\" "
                          "or null (no mid block) is provided", path,
                          cJSON_IsString(mid) ? mid->valuestring : "(not a string)");
    if (!rc) rc = tr_hf_json_expect_str(root, path, "time_embedding_type", "positional", err);
    if (!rc) rc = tr_hf_json_expect_str(root, path, "resnet_time_scale_shift", "default", err);
    if (!rc) rc = tr_hf_json_expect_bool(root, path, "only_cross_attention", 0, err);
    if (!rc) rc = tr_hf_json_expect_bool(root, path, "dual_cross_attention", 0, err);
    if (!rc) rc = tr_hf_json_expect_bool(root, path, "center_input_sample", 0, err);
    if (!rc) rc = tr_hf_json_expect_num(root, path, "downsample_padding", 1, err);
    if (!rc) rc = tr_hf_json_expect_num(root, path, "mid_block_scale_factor", 1, err);
    if (!rc) rc = tr_hf_json_expect_num(root, path, "transformer_layers_per_block", 1, err);
    if (!rc) rc = tr_hf_json_expect_num(root, path, "conv_in_kernel", 3, err);
    if (!rc) rc = tr_hf_json_expect_num(root, path, "conv_out_kernel", 3, err);
    if (!rc) rc = tr_hf_json_expect_num(root, path, "resnet_out_scale_factor", 1, err);
    if (!rc) rc = tr_hf_json_expect_bool(root, path, "resnet_skip_time_act", 0, err);
    if (!rc) rc = tr_hf_json_expect_bool(root, path, "class_embeddings_concat", 0, err);
    if (!rc) rc = tr_hf_json_expect_str(root, path, "attention_type", "default", err);
    for (size_t i = 0; !rc && i < sizeof nulls / sizeof nulls[0]; i++) rc = tr_hf_json_expect_null(root, path, nulls[i], err);
    /* upcast_attention (SD 2.1: true) has diffusers' AttnProcessor compute q·kᵀ and the
     * softmax in f32 when the model runs in bf16 or f16, then cast the probabilities back
     * for ·v (SD 2.1's scores overflow f16 otherwise; in f32 it changes nothing, and the
     * default SDPA processor does not read it). trident's attention always does so:
     * scores and softmax in f32 whatever the data's dtype (plugins/kernels/cpu/attention.c;
     * the CUDA kernels too, P entering P·V in the data's type), so either value builds the
     * same graph. */
    const cJSON *upcast = cJSON_GetObjectItemCaseSensitive(root, "upcast_attention");
    if (!rc && upcast && !cJSON_IsNull(upcast) && !cJSON_IsBool(upcast))
        rc = tr_error_set(err, TR_ERR_FORMAT, "'%s': \"upcast_attention\" is not true or false", path);
    if (!rc) rc = tr_hf_json_names(root, path, "down_block_types", down, 2, d, TR_UNET_MAX_BLOCKS, &nd, err);
    if (!rc) rc = tr_hf_json_names(root, path, "up_block_types", up, 2, u, TR_UNET_MAX_BLOCKS, &nu, err);
    for (int i = 0; !rc && i < nu; i++)
        if (nu != nd || u[i] != d[nd - 1 - i])
            rc = tr_error_set(err, TR_ERR_UNSUPPORTED, "'%s': \"up_block_types\" is not the mirror image of "
                              "\"down_block_types\" (each CrossAttnDownBlock2D answered by a CrossAttnUpBlock2D)", path);
    if (!rc && nd > 0) {
        char *p = c->cross_attention_blocks;
        for (int i = 0; i < nd; i++) p += sprintf(p, "%s%d", i ? "," : "", (int)d[i]);
    }
    if (!rc) rc = read_heads(root, path, nd, c, err);
    if (!rc) rc = tr_hf_json_apply(root, path, unet_keys, (int)(sizeof unet_keys / sizeof unet_keys[0]), config, skip, err);
    cJSON_Delete(root);
    return rc;
}

const struct tr_model_desc tr_model_unet_2d_condition = {
    .name = "unet_2d_condition",
    .description = "UNet2DConditionModel (diffusers names; Stable Diffusion's denoiser, NHWC)",
    .config_size = sizeof(struct tr_unet_config),
    TR_MODEL_TABLES(unet_keys, unet_presets),
    .tasks = 1u << TR_TASK_PREDICT,
    .build = unet_build,
    .make_inputs = unet_make_inputs,
    .read_hf_config = unet_read_hf_config,
    .bf16_tolerance = TR_UNET_BF16_TOLERANCE,
    .bf16_why = TR_UNET_BF16_WHY,
};
