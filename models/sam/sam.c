/* SamModel: transformers' SegmentAnything as a trident graph (sam.h).
 *
 * Image encoder: a stride-p patch conv, the absolute position table, num_hidden_layers
 * pre-LN blocks (windowed attention over window_size² tokens, the grid zero-padded at the
 * bottom and right to a multiple of the window, or global attention in the blocks of
 * global_attn_indexes; decomposed relative positions on each: ATTENTION_REL with its bias
 * terms q·R made by MATMULs, never a (T,T) bias), GELU MLP; the neck (1x1 conv, layer
 * norm over channels, 3x3 conv, layer norm). Prompt encoder: random Fourier features of
 * the points (and of the embedding grid, the image's positional encoding), the label
 * embeddings, the no-mask dense embedding. Mask decoder: the two-way transformer, the
 * transposed-conv upscaling (k = stride = 2: a MATMUL and a depth-to-space transpose),
 * the hypernetwork MLPs and the IoU head.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hf_json.h"
#include "trident/config.h"
#include "layers.h"
#include "models.h"
#include "sam.h"
#include "trident/autodiff.h"
#include "trident/image.h"
#include "trident/rng.h"

#define KEY_(field, type, lo, hi, doc) {#field, type, offsetof(struct tr_sam_config, field), lo, hi, doc}

static const struct tr_model_key sam_keys[] = {
    KEY_(hidden_size, TR_KEY_INT, 1, 65536, "the image encoder's width; a multiple of num_attention_heads"),
    KEY_(num_hidden_layers, TR_KEY_INT, 1, TR_SAM_MAX_LAYERS, "image encoder blocks"),
    KEY_(num_attention_heads, TR_KEY_INT, 1, 4096, "heads of the image encoder's attention"),
    KEY_(mlp_dim, TR_KEY_INT, 1, 1e6, "width of the image encoder's MLP"),
    KEY_(image_size, TR_KEY_INT, 1, 65536, "image side S (S x S pixels); a multiple of patch_size"),
    KEY_(patch_size, TR_KEY_INT, 1, 4096, "the patch conv's kernel and stride"),
    KEY_(window_size, TR_KEY_INT, 0, 65536, "side of the attention windows (0: every block global)"),
    KEY_(global_attn_indexes, TR_KEY_STRING, 0, 0, "blocks with global attention, comma-separated (\"7,15,23,31\")"),
    KEY_(output_channels, TR_KEY_INT, 2, 65536, "the embedding's channels C (the neck's, the decoder's width)"),
    KEY_(num_pos_feats, TR_KEY_INT, 1, 32768, "random Fourier features of a point: output_channels / 2"),
    KEY_(layer_norm_eps, TR_KEY_FLOAT, 0, 1, "epsilon of the image encoder blocks' LayerNorms"),
    KEY_(decoder_layer_norm_eps, TR_KEY_FLOAT, 0, 1, "epsilon of the two-way transformer blocks' LayerNorms"),
    KEY_(qkv_bias, TR_KEY_BOOL, 0, 0, "a bias on the image encoder's qkv projection"),
    KEY_(use_abs_pos, TR_KEY_BOOL, 0, 0, "the absolute position table (pos_embed)"),
    KEY_(use_rel_pos, TR_KEY_BOOL, 0, 0, "decomposed relative positions in every block"),
    KEY_(decoder_mlp_dim, TR_KEY_INT, 1, 1e6, "width of the two-way transformer's MLP"),
    KEY_(decoder_num_hidden_layers, TR_KEY_INT, 1, 64, "two-way transformer blocks"),
    KEY_(decoder_num_attention_heads, TR_KEY_INT, 1, 4096, "heads of the mask decoder's attention"),
    KEY_(attention_downsample_rate, TR_KEY_INT, 1, 4096,
         "final_attn_token_to_image's width is C / this (the two-way blocks' cross-attentions C / 2, as transformers "
         "builds them)"),
    KEY_(iou_head_hidden_dim, TR_KEY_INT, 1, 65536, "width of the IoU head"),
    KEY_(iou_head_depth, TR_KEY_INT, 2, 64, "layers of the IoU head"),
    KEY_(num_multimask_outputs, TR_KEY_INT, 1, 64, "masks predicted besides the single-mask one"),
    KEY_(mask_input_channels, TR_KEY_INT, 4, 65536, "the mask prompt's embedding width (a multiple of 4; its "
         "parameters are loaded and counted, a mask prompt is not taken)"),
    KEY_(points, TR_KEY_STRING, 0, 0, "make_inputs' prompt: x,y pairs in pixels of the image (default: the benchmark's "
                                      "500,375,250,375 of a 1024 image, scaled to image_size)"),
    KEY_(labels, TR_KEY_STRING, 0, 0, "one label per point: 1 foreground, 0 background, -1 none, 2/3 box corners "
                                      "(default with the default points: 1,2)"),
    KEY_(boxes, TR_KEY_STRING, 0, 0, "make_inputs' box prompt: x0,y0,x1,y1 in pixels of the image (one box; with it "
                                     "and no points, the box alone)"),
    KEY_(multimask_output, TR_KEY_BOOL, 0, 0, "3 masks and their IoU predictions (true), or the single-mask output"),
};

#define SAM_DECODER .output_channels = 256, .num_pos_feats = 128, .decoder_mlp_dim = 2048, \
    .decoder_num_hidden_layers = 2, .decoder_num_attention_heads = 8, .iou_head_hidden_dim = 256
#define SAM_COMMON .layer_norm_eps = 1e-6, .decoder_layer_norm_eps = 1e-6, .qkv_bias = 1, .use_abs_pos = 1, .use_rel_pos = 1, \
    .attention_downsample_rate = 2, .iou_head_depth = 3, .num_multimask_outputs = 3, .multimask_output = 1
static const struct tr_sam_config sam_tiny = {
    SAM_COMMON, .hidden_size = 32, .num_hidden_layers = 4, .num_attention_heads = 2, .mlp_dim = 64, .image_size = 64,
    .patch_size = 8, .window_size = 3, .global_attn_indexes = "1,3", .output_channels = 16, .num_pos_feats = 8,
    .decoder_mlp_dim = 32, .decoder_num_hidden_layers = 2, .decoder_num_attention_heads = 2,
    .iou_head_hidden_dim = 16, .mask_input_channels = 4,
};
static const struct tr_sam_config sam_small = {
    SAM_COMMON, SAM_DECODER, .hidden_size = 256, .num_hidden_layers = 6, .num_attention_heads = 4, .mlp_dim = 1024,
    .image_size = 512, .patch_size = 16, .window_size = 7, .global_attn_indexes = "2,5",
    .mask_input_channels = 16,
};
static const struct tr_sam_config sam_vit_h = {
    SAM_COMMON, SAM_DECODER, .hidden_size = 1280, .num_hidden_layers = 32, .num_attention_heads = 16, .mlp_dim = 5120,
    .image_size = 1024, .patch_size = 16, .window_size = 14, .global_attn_indexes = "7,15,23,31",
    .mask_input_channels = 16,
};

static const struct tr_model_preset sam_presets[] = {
    {"tiny", &sam_tiny, "width 32, 4 blocks (1 and 3 global), 64x64 images, 8x8 tokens in 3x3 windows (tests)"},
    {"small", &sam_small,
     "width 256, 6 blocks (2 and 5 global), 512x512 images, 32x32 tokens in 7x7 windows (padded to 35x35, as "
     "vit-h's 64 to 70), the full mask decoder (CPU benchmarks); 9,941,552 parameters"},
    {"vit-h", &sam_vit_h,
     "facebook/sam-vit-huge: width 1280, 32 blocks (7, 15, 23, 31 global), 1024x1024 images, 64x64 tokens in 14x14 "
     "windows; decoder width 256; 641,090,864 parameters (637,026,048 in the image encoder, what fit trains)"},
};

#define NECK_EPS 1e-6f  /* SamLayerNorm's default (the neck, the upscaling) */
#define FINAL_EPS 1e-5f /* nn.LayerNorm's default (the two-way transformer's last) */

/* The checks build and make_inputs share; global[] gets 1 for each global block. */
static int sam_validate(const struct tr_sam_config *c, const struct tr_build_opts *o, unsigned char *global,
                        struct tr_error *err) {
    const struct tr_model_pos pos[] = {
        {"hidden_size", c->hidden_size},         {"num_hidden_layers", c->num_hidden_layers},
        {"num_attention_heads", c->num_attention_heads}, {"mlp_dim", c->mlp_dim},
        {"image_size", c->image_size},           {"patch_size", c->patch_size},
        {"output_channels", c->output_channels}, {"num_pos_feats", c->num_pos_feats},
        {"decoder_mlp_dim", c->decoder_mlp_dim}, {"decoder_num_hidden_layers", c->decoder_num_hidden_layers},
        {"decoder_num_attention_heads", c->decoder_num_attention_heads},
        {"attention_downsample_rate", c->attention_downsample_rate},
        {"iou_head_hidden_dim", c->iou_head_hidden_dim}, {"num_multimask_outputs", c->num_multimask_outputs},
        {"batch", o->batch},
    };
    int rc = tr_model_check_positive("sam", pos, (int)(sizeof pos / sizeof pos[0]), err);
    if (rc) return rc;
    if (c->image_size % c->patch_size != 0)
        return tr_error_set(err, TR_ERR_INVALID, "sam: image_size = %lld is not a multiple of patch_size = %lld (the "
                            "patch conv tiles the image)", (long long)c->image_size, (long long)c->patch_size);
    if (c->hidden_size % c->num_attention_heads != 0)
        return tr_error_set(err, TR_ERR_INVALID, "sam: hidden_size = %lld is not a multiple of num_attention_heads = "
                            "%lld", (long long)c->hidden_size, (long long)c->num_attention_heads);
    const int64_t C = c->output_channels, inner = C / c->attention_downsample_rate;
    if (C % c->decoder_num_attention_heads != 0 || C % c->attention_downsample_rate != 0 ||
        inner % c->decoder_num_attention_heads != 0 || C % 8 != 0 || (C / 2) % c->decoder_num_attention_heads != 0)
        return tr_error_set(err, TR_ERR_INVALID, "sam: output_channels = %lld must be a multiple of 8 (the upscaling "
                            "quarters and eighths it), of decoder_num_attention_heads = %lld, and divided by "
                            "attention_downsample_rate = %lld (and by 2, the two-way blocks' rate) still a multiple of the heads",
                            (long long)C,
                            (long long)c->decoder_num_attention_heads, (long long)c->attention_downsample_rate);
    if (2 * c->num_pos_feats != C)
        return tr_error_set(err, TR_ERR_INVALID, "sam: num_pos_feats = %lld, expected output_channels / 2 = %lld (sin "
                            "and cos of each feature make a point's embedding)", (long long)c->num_pos_feats,
                            (long long)(C / 2));
    int64_t idx[TR_SAM_MAX_LAYERS];
    int n = 0;
    if (c->global_attn_indexes[0]) {
        int rc = tr_model_int_list("sam", "global_attn_indexes", c->global_attn_indexes, sizeof c->global_attn_indexes,
                                   0, c->num_hidden_layers - 1, "7,15,23,31", idx, TR_SAM_MAX_LAYERS, &n, err);
        if (rc) return rc;
    }
    memset(global, 0, TR_SAM_MAX_LAYERS);
    for (int i = 0; i < n; i++) global[idx[i]] = 1;
    if (!tr_dtype_is_float(o->dtype) || o->dtype == TR_DTYPE_F64)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "sam: dtype %s is not provided (f32, bf16 or f16)",
                            tr_dtype_name(o->dtype));
    return TR_OK;
}

/* The prompt, in pixels of a picture w x h (the model's S x S, or a generate's photo): n
 * points (x, y) and their labels, and has_box boxes (0 or 1) x0, y0, x1, y1, each
 * checked. No points and no box: the benchmark's two points. */
struct prompt {
    double xy[2 * TR_SAM_MAX_POINTS], box[4];
    int64_t labels[TR_SAM_MAX_POINTS];
    int n, has_box;
};

static int sam_prompt(const struct tr_sam_config *c, int64_t h, int64_t w, struct prompt *p, struct tr_error *err) {
    double v[2 * TR_SAM_MAX_POINTS], bx[64];
    int np = 0, nl = 0, nb = 0;
    int rc = TR_OK;
    const double big = 1e12;
    if (c->boxes[0]) {
        rc = tr_model_num_list("sam", "boxes", c->boxes, sizeof c->boxes, -big, big, "75,275,1725,850", bx, 64, &nb, err);
        if (!rc && nb != 4)
            rc = tr_error_set(err, TR_ERR_INVALID, "sam: boxes = '%s' gives %d numbers, expected one box x0,y0,x1,y1 "
                              "(4 numbers; one box an image)", c->boxes, nb);
        if (!rc && (bx[0] < 0 || bx[1] < 0 || bx[2] > (double)w || bx[3] > (double)h || bx[0] > bx[2] || bx[1] > bx[3]))
            rc = tr_error_set(err, TR_ERR_INVALID, "sam: boxes = '%s' is not a box inside the %lldx%lld image "
                              "(expected 0 <= x0 <= x1 <= %lld and 0 <= y0 <= y1 <= %lld)", c->boxes, (long long)w,
                              (long long)h, (long long)w, (long long)h);
        if (rc) return rc;
        for (int i = 0; i < 4; i++) p->box[i] = bx[i];
    }
    p->has_box = c->boxes[0] != 0;
    if (c->points[0]) {
        rc = tr_model_num_list("sam", "points", c->points, sizeof c->points, -big, big, "500,375,250,375", v,
                               2 * TR_SAM_MAX_POINTS, &np, err);
    } else if (!p->has_box) { /* the benchmark's prompt, (500,375) and (250,375) of 1024, at this image's size */
        static const int64_t bench[4] = {500, 375, 250, 375};
        for (np = 0; np < 4; np++) v[np] = (double)(bench[np] * (np % 2 ? h : w) / 1024);
    }
    const char *labels = c->labels[0] || c->points[0] || p->has_box ? c->labels : "1,2"; /* the benchmark's */
    if (!rc && np && !labels[0]) /* points of one's own need labels of one's own */
        return tr_error_set(err, TR_ERR_INVALID, "sam: points = '%s' gives %d point%s and no labels: expected [model] "
                            "labels with one per point (1 foreground, 0 background, -1 none, 2/3 box corners)",
                            c->points, np / 2, np / 2 == 1 ? "" : "s");
    if (!rc && (np || labels[0]))
        rc = tr_model_int_list("sam", "labels", labels, sizeof c->labels, -(1ll << 40), 1ll << 40, "1,2", p->labels,
                               TR_SAM_MAX_POINTS, &nl, err);
    if (rc) return rc;
    if (np % 2 != 0 || np / 2 != nl || (nl == 0 && !p->has_box))
        return tr_error_set(err, TR_ERR_INVALID, "sam: points = '%s' gives %d coordinates and labels = '%s' %d labels: "
                            "expected x,y pairs, one label per pair, at least one (or a box)",
                            c->points[0] ? c->points : p->has_box ? "" : "(the default)", np, labels, nl);
    for (int i = 0; i < nl; i++) {
        /* pixels are continuous, as SamProcessor scales them: x in [0, w], y in [0, h], as a box's corners */
        if (v[2 * i] < 0 || v[2 * i] > (double)w || v[2 * i + 1] < 0 || v[2 * i + 1] > (double)h)
            return tr_error_set(err, TR_ERR_INVALID, "sam: point %d (%g,%g) of points = '%s' is outside the %lldx%lld "
                                "image (x from 0 to %lld, y from 0 to %lld)", i, v[2 * i], v[2 * i + 1], c->points,
                                (long long)w, (long long)h, (long long)w, (long long)h);
        if (p->labels[i] < -1 || p->labels[i] > 3)
            return tr_error_set(err, TR_ERR_INVALID, "sam: label %lld (entry %d of labels = '%s') is not one of -1 (not "
                                "a point), 0 (background), 1 (foreground), 2, 3 (box corners)", (long long)p->labels[i],
                                i, c->labels);
        p->xy[2 * i] = v[2 * i];
        p->xy[2 * i + 1] = v[2 * i + 1];
    }
    p->n = nl;
    return TR_OK;
}

/* dt: what the activations are; pdt: what the parameters are (the checkpoint's dtype):
 * the mask decoder runs in f32 on bf16 / f16 parameters, cast up as they are read. */
struct net {
    struct tr_graph *g;
    enum tr_dtype dt, pdt;
    float eps;
};

/* A param of the model's dtype, normal(mean, std), as the activations' dtype. */
static int param(struct net *n, const char *name, int nd, const int64_t *sh, float mean, float std) {
    int p = tr_param(n->g, name, n->pdt, nd, sh, mean, std);
    return n->pdt == n->dt ? p : tr_cast(n->g, p, n->dt);
}

/* nn.Linear (weight (out, in), normal(0, 1/√in)); layers.h's where no cast is needed. */
static int linear(struct net *n, int x, int64_t in, int64_t out, int bias, const char *name) {
    if (n->pdt == n->dt) return tr_nn_linear(n->g, x, in, out, n->dt, bias, -1.0f, name);
    tr_graph_push_scope(n->g, "%s", name);
    int w = param(n, "weight", 2, (const int64_t[]){out, in}, 0.0f, 1.0f / sqrtf((float)in));
    int b = bias ? param(n, "bias", 1, (const int64_t[]){out}, 0.0f, 0.02f) : -1;
    tr_graph_pop_scope(n->g);
    int y = tr_matmul(n->g, x, w, 0, 1);
    return bias ? tr_add(n->g, y, b) : y;
}

static int layer_norm(struct net *n, int x, int64_t d, float eps, const char *name) {
    if (n->pdt == n->dt) return tr_nn_layer_norm(n->g, x, d, n->dt, eps, name);
    tr_graph_push_scope(n->g, "%s", name);
    int w = param(n, "weight", 1, &d, 1.0f, 0.02f), b = param(n, "bias", 1, &d, 0.0f, 0.02f);
    tr_graph_pop_scope(n->g);
    return tr_layer_norm(n->g, x, w, b, eps);
}

static int reshape(struct tr_graph *g, int x, int nd, const int64_t *sh) { return tr_reshape(g, x, nd, sh); }
static int transpose(struct tr_graph *g, int x, int nd, const int *perm) { return tr_transpose(g, x, nd, perm); }

/* x zero-padded at the end of axis to extent (SLICE_GRAD: x placed at [0, n)). */
static int pad_end(struct tr_graph *g, int x, int axis, int64_t extent) {
    if (x < 0 || tr_node_shape(g, x)[axis] == extent) return x;
    struct tr_attrs a = {.ints = {axis, 0, 0, 1, extent}, .n_ints = 5};
    return tr_graph_add_node(g, TR_OP_SLICE_GRAD, 1, &x, &a);
}

/* ---- the image encoder ---- */

/* R (L, L, hd) = table[q - k + L - 1] for q, k < L: get_rel_pos at equal query and key
 * sizes (the table has 2L - 1 rows, so transformers' interpolation is the identity). */
static int rel_table(struct net *n, int table, int64_t L, const char *name) {
    int64_t *ids = malloc(sizeof(int64_t) * (size_t)(L * L));
    if (!ids) return tr_const(n->g, name, TR_DTYPE_I64, 2, (const int64_t[]){-1, -1}, NULL); /* fails: out of memory */
    for (int64_t q = 0; q < L; q++)
        for (int64_t k = 0; k < L; k++) ids[q * L + k] = q - k + L - 1;
    int c = tr_const(n->g, name, TR_DTYPE_I64, 2, (const int64_t[]){L, L}, ids);
    free(ids);
    return tr_embedding(n->g, table, c);
}

/* The bias terms of ATTENTION_REL for q (Bh, L, L, hd) (Bh = windows · heads): rel_h[b, y,
 * x, ky] = q[b,y,x]·Rh[y,ky] and rel_w[b,y,x,kx] = q[b,y,x]·Rw[x,kx], each as one batched
 * MATMUL over the grid row (column) of the query. */
static void rel_bias(struct net *n, int q, int64_t Bh, int64_t L, int64_t hd, int rh, int rw, int *out_h,
                     int *out_w) {
    struct tr_graph *g = n->g;
    const int to_rows[4] = {1, 0, 2, 3}, to_cols[4] = {2, 0, 1, 3}, from_cols[4] = {1, 2, 0, 3};
    int qr = reshape(g, transpose(g, q, 4, to_rows), 3, (const int64_t[]){L, Bh * L, hd});
    int h = reshape(g, tr_matmul(g, qr, rh, 0, 1), 4, (const int64_t[]){L, Bh, L, L});
    *out_h = transpose(g, h, 4, to_rows); /* (Bh, y, x, ky) */
    int qc = reshape(g, transpose(g, q, 4, to_cols), 3, (const int64_t[]){L, Bh * L, hd});
    int w = reshape(g, tr_matmul(g, qc, rw, 0, 1), 4, (const int64_t[]){L, Bh, L, L});
    *out_w = transpose(g, w, 4, from_cols); /* (Bh, y, x, kx) */
}

/* SamVisionAttention on x (Bw, L, L, D): qkv, heads, attention over the L x L grid with
 * the decomposed relative positions, proj. */
static int vision_attention(struct net *n, const struct tr_sam_config *c, int x, int64_t Bw, int64_t L) {
    struct tr_graph *g = n->g;
    const int64_t D = c->hidden_size, H = c->num_attention_heads, hd = D / H, T = L * L;
    tr_graph_push_scope(g, "attn");
    int qkv = linear(n, reshape(g, x, 3, (const int64_t[]){Bw, T, D}), D, 3 * D, c->qkv_bias, "qkv");
    const int heads[4] = {0, 2, 1, 3};
    int qkvh[3];
    for (int i = 0; i < 3; i++) /* (Bw, T, 3, H, hd): part i is the slice [i·D, (i+1)·D) */
        qkvh[i] = transpose(g, reshape(g, tr_slice(g, qkv, 2, i * D, (i + 1) * D, 1), 4,
                                       (const int64_t[]){Bw, T, H, hd}), 4, heads);
    const float scale = tr_attention_default_scale(hd);
    int a;
    if (c->use_rel_pos) {
        int th = param(n, "rel_pos_h", 2, (const int64_t[]){2 * L - 1, hd}, 0.0f, 0.02f);
        int tw = param(n, "rel_pos_w", 2, (const int64_t[]){2 * L - 1, hd}, 0.0f, 0.02f);
        int rh = rel_table(n, th, L, "rel_index_h"), rw = rel_table(n, tw, L, "rel_index_w");
        int q4 = reshape(g, qkvh[0], 4, (const int64_t[]){Bw * H, L, L, hd}), bh, bw;
        rel_bias(n, q4, Bw * H, L, hd, rh, rw, &bh, &bw);
        bh = reshape(g, bh, 4, (const int64_t[]){Bw, H, T, L});
        bw = reshape(g, bw, 4, (const int64_t[]){Bw, H, T, L});
        a = tr_attention_rel(g, qkvh[0], qkvh[1], qkvh[2], bh, bw, scale);
    } else {
        a = tr_attention(g, qkvh[0], qkvh[1], qkvh[2], -1, scale, 0, 0);
    }
    a = reshape(g, transpose(g, a, 4, heads), 4, (const int64_t[]){Bw, L, L, D});
    int y = linear(n, a, D, D, 1, "proj");
    tr_graph_pop_scope(g);
    return y;
}

/* SamVisionLayer i on x (B, G, G, D). */
static int vision_layer(struct net *n, const struct tr_sam_config *c, int x, int64_t B, int64_t G, int global, int i) {
    struct tr_graph *g = n->g;
    const int64_t D = c->hidden_size, w = global ? G : c->window_size;
    tr_graph_push_scope(g, "layers.%d", i);
    int h = layer_norm(n, x, D, n->eps, "layer_norm1");
    if (global) {
        h = vision_attention(n, c, h, B, G);
    } else { /* window_partition: pad to a multiple of w, (B, nh, w, nw, w, D) -> windows */
        const int64_t Gp = (G + w - 1) / w * w, nw = Gp / w;
        const int win[6] = {0, 1, 3, 2, 4, 5};
        h = pad_end(g, pad_end(g, h, 1, Gp), 2, Gp);
        h = reshape(g, transpose(g, reshape(g, h, 6, (const int64_t[]){B, nw, w, nw, w, D}), 6, win), 4,
                    (const int64_t[]){B * nw * nw, w, w, D});
        h = vision_attention(n, c, h, B * nw * nw, w);
        h = reshape(g, transpose(g, reshape(g, h, 6, (const int64_t[]){B, nw, nw, w, w, D}), 6, win), 4,
                    (const int64_t[]){B, Gp, Gp, D});
        if (Gp != G) h = tr_slice(g, tr_slice(g, h, 1, 0, G, 1), 2, 0, G, 1);
    }
    x = tr_add(g, x, h);
    h = layer_norm(n, x, D, n->eps, "layer_norm2");
    tr_graph_push_scope(g, "mlp");
    h = linear(n, tr_gelu(g, linear(n, h, D, c->mlp_dim, 1, "lin1"), 0), c->mlp_dim, D, 1, "lin2");
    tr_graph_pop_scope(g);
    x = tr_add(g, x, h);
    tr_graph_pop_scope(g);
    return x;
}

/* A bias-free conv (the neck's). */
static int conv_nobias(struct net *n, int x, int64_t cin, int64_t cout, int64_t k, int pad, const char *name) {
    tr_graph_push_scope(n->g, "%s", name);
    int w = param(n, "weight", 4, (const int64_t[]){cout, cin, k, k}, 0.0f, 1.0f / sqrtf((float)(cin * k * k)));
    tr_graph_pop_scope(n->g);
    return tr_conv2d(n->g, x, w, -1, 1, pad, 0);
}

/* SamVisionEncoder: pixel_values (B, S, S, 3) -> image_embeddings (B, G, G, C). */
static int vision_encoder(struct net *n, const struct tr_sam_config *c, const unsigned char *global, int px,
                          int64_t B) {
    struct tr_graph *g = n->g;
    const int64_t D = c->hidden_size, G = c->image_size / c->patch_size, C = c->output_channels;
    tr_graph_push_scope(g, "vision_encoder");
    tr_graph_push_scope(g, "patch_embed");
    int x = tr_nn_conv2d(g, px, 3, D, c->patch_size, (int)c->patch_size, 0, 0, n->dt, "projection");
    tr_graph_pop_scope(g);
    if (c->use_abs_pos) x = tr_add(g, x, param(n, "pos_embed", 4, (const int64_t[]){1, G, G, D}, 0.0f, 0.02f));
    for (int i = 0; i < c->num_hidden_layers; i++)
        x = vision_layer(n, c, x, B, G, global[i] || c->window_size == 0, i);
    tr_graph_push_scope(g, "neck");
    x = layer_norm(n, conv_nobias(n, x, D, C, 1, 0, "conv1"), C, NECK_EPS, "layer_norm1");
    x = layer_norm(n, conv_nobias(n, x, C, C, 3, 1, "conv2"), C, NECK_EPS, "layer_norm2");
    tr_graph_pop_scope(g);
    tr_graph_pop_scope(g);
    return x;
}

/* ---- the prompt encoder ---- */

/* SamPositionalEmbedding of coords (M, 2) f32 in [0,1]: [sin, cos] of 2π·(2c − 1)·PE, as
 * (M, 2F) of the model's dtype. The sines and cosines come from TIMESTEP_EMBEDDING at
 * dim 2 (frequency 1: [sin t, cos t] of each value t, in double). */
static int fourier(struct net *n, int coords, int pe, int64_t M, int64_t F) {
    struct tr_graph *g = n->g;
    int x = tr_scale(g, coords, 2.0f, -1.0f);
    x = tr_scale(g, tr_matmul(g, x, tr_cast(g, pe, TR_DTYPE_F32), 0, 0), 6.283185307179586f, 0.0f);
    int sc = tr_timestep_embedding(g, reshape(g, x, 1, (const int64_t[]){M * F}), 2, 0, 0.0f, 0.0f);
    const int sin_first[3] = {0, 2, 1};
    sc = reshape(g, transpose(g, reshape(g, sc, 3, (const int64_t[]){M, F, 2}), 3, sin_first), 2,
                 (const int64_t[]){M, 2 * F});
    return n->dt == TR_DTYPE_F32 ? sc : tr_cast(g, sc, n->dt);
}

/* The image-wide positional encoding (G², C): the grid's cell centres through fourier. */
static int image_pe(struct net *n, int pe, int64_t G, int64_t F) {
    float *xy = malloc(sizeof(float) * (size_t)(2 * G * G));
    if (!xy) return tr_const(n->g, "image_grid", TR_DTYPE_F32, 2, (const int64_t[]){-1, -1}, NULL);
    for (int64_t y = 0; y < G; y++)
        for (int64_t x = 0; x < G; x++) {
            xy[2 * (y * G + x)] = ((float)x + 0.5f) / (float)G;
            xy[2 * (y * G + x) + 1] = ((float)y + 0.5f) / (float)G;
        }
    int grid = tr_const(n->g, "image_grid", TR_DTYPE_F32, 2, (const int64_t[]){G * G, 2}, xy);
    free(xy);
    return fourier(n, grid, pe, G * G, F);
}

/* The sparse prompt (B, T, C). The points' encoding (a padding point (0,0), label -1,
 * appended when there is no box), replaced by not_a_point_embed where the label is -1 and
 * by zeros where it is -10 (the processor's padding of a sample with fewer points),
 * point_embed.0 / .1 added where it is 0 / 1 (transformers' _embed_points): as table
 * lookups by label + 10, keep[label] (0 for -10 and -1) times the encoding plus
 * add[label] (labels -9 .. -2, 2 and 3 keep the encoding alone, as there). Then
 * the box's two corners' encodings plus point_embed.2 and .3 (_embed_boxes). pts and
 * labels -1 for no points (N = 0), box -1 for none; *T gets the token count. */
static int sparse_prompt(struct net *n, const struct tr_sam_config *c, int pts, int labels, int box, int pe,
                         int64_t B, int64_t N, int64_t *T) {
    struct tr_graph *g = n->g;
    const int64_t C = c->output_channels, P = N + (box < 0), M = B * P;
    const float inv = 1.0f / (float)c->image_size;
    tr_graph_push_scope(g, "prompt_encoder");
    const int64_t one[2] = {1, C};
    int rows[5] = {-1, param(n, "not_a_point_embed.weight", 2, one, 0.0f, 1.0f),
                   param(n, "point_embed.0.weight", 2, one, 0.0f, 1.0f),
                   param(n, "point_embed.1.weight", 2, one, 0.0f, 1.0f), -1};
    int corners[2] = {param(n, "point_embed.2.weight", 2, one, 0.0f, 1.0f),
                      param(n, "point_embed.3.weight", 2, one, 0.0f, 1.0f)};
    tr_graph_pop_scope(g);
    int parts[2], np = 0;
    if (N > 0) {
        static const float zero2[2 * TR_SAM_MAX_POINTS] = {0};
        int32_t minus1[TR_SAM_MAX_POINTS];
        for (int i = 0; i < TR_SAM_MAX_POINTS; i++) minus1[i] = -1;
        int all = pts, lab = labels;
        if (box < 0) { /* B may exceed the static rows: broadcast one padding entry */
            int pad_pt = tr_broadcast(g, tr_const(g, "pad_point", TR_DTYPE_F32, 4, (const int64_t[]){1, 1, 1, 2}, zero2),
                                      4, (const int64_t[]){B, 1, 1, 2});
            int pad_lb = tr_const(g, "pad_label", TR_DTYPE_I32, 3, (const int64_t[]){1, 1, 1}, minus1);
            int pl[2] = {pts, pad_pt};
            all = tr_concat(g, 2, pl, 2);
            int lb_b = tr_cast(g, tr_broadcast(g, tr_cast(g, pad_lb, TR_DTYPE_F32), 3, (const int64_t[]){B, 1, 1}),
                               TR_DTYPE_I32);
            int ll[2] = {labels, lb_b};
            lab = tr_concat(g, 2, ll, 2);
        }
        /* (x + 0.5) / S: the pixel's centre, in [0, 1] */
        int coords = tr_scale(g, reshape(g, all, 2, (const int64_t[]){M, 2}), inv, 0.5f * inv);
        int enc = fourier(n, coords, pe, M, c->num_pos_feats);
        int ids = tr_cast(g, tr_scale(g, tr_cast(g, reshape(g, lab, 1, (const int64_t[]){M}), TR_DTYPE_F32), 1.0f, 10.0f),
                          TR_DTYPE_I32);
        /* labels -10 .. 3 */
        const float keep_v[14] = {0, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1};
        int keep = tr_const(g, "label_keep", TR_DTYPE_F32, 2, (const int64_t[]){14, 1}, keep_v);
        if (n->dt != TR_DTYPE_F32) keep = tr_cast(g, keep, n->dt);
        float *zeros = calloc((size_t)(9 * C), sizeof(float));
        rows[0] = tr_const(g, "label_zero_rows_low", TR_DTYPE_F32, 2, (const int64_t[]){9, C}, zeros);
        rows[4] = tr_const(g, "label_zero_rows", TR_DTYPE_F32, 2, (const int64_t[]){2, C}, zeros);
        free(zeros);
        if (n->dt != TR_DTYPE_F32) rows[0] = tr_cast(g, rows[0], n->dt), rows[4] = tr_cast(g, rows[4], n->dt);
        int add = tr_concat(g, 5, rows, 0);
        int e = tr_add(g, tr_mul(g, enc, tr_embedding(g, keep, ids)), tr_embedding(g, add, ids));
        parts[np++] = reshape(g, e, 3, (const int64_t[]){B, P, C});
    }
    if (box >= 0) {
        int coords = tr_scale(g, reshape(g, box, 2, (const int64_t[]){2 * B, 2}), inv, 0.5f * inv);
        int enc = reshape(g, fourier(n, coords, pe, 2 * B, c->num_pos_feats), 3, (const int64_t[]){B, 2, C});
        int add = tr_broadcast(g, tr_concat(g, 2, corners, 0), 3, (const int64_t[]){B, 2, C});
        parts[np++] = tr_add(g, enc, add);
    }
    *T = (N > 0 ? P : 0) + (box >= 0 ? 2 : 0);
    return np == 1 ? parts[0] : tr_concat(g, 2, parts, 1);
}

/* SamMaskEmbedding's parameters (conv1 1 -> m/4, conv2 m/4 -> m, conv3 m -> C, two layer
 * norms): in the checkpoint and the count; no mask prompt is taken, so no node reads them. */
static void mask_embed_params(struct net *n, const struct tr_sam_config *c) {
    const int64_t m = c->mask_input_channels, q = m / 4, C = c->output_channels;
    const struct {
        const char *name;
        int64_t o, i, k;
    } convs[3] = {{"conv1", q, 1, 2}, {"conv2", m, q, 2}, {"conv3", C, m, 1}};
    tr_graph_push_scope(n->g, "mask_embed");
    for (int i = 0; i < 3; i++) {
        tr_graph_push_scope(n->g, "%s", convs[i].name);
        param(n, "weight", 4, (const int64_t[]){convs[i].o, convs[i].i, convs[i].k, convs[i].k}, 0.0f, 0.02f);
        param(n, "bias", 1, (const int64_t[]){convs[i].o}, 0.0f, 0.02f);
        tr_graph_pop_scope(n->g);
    }
    const int64_t ln[2] = {q, m};
    for (int i = 0; i < 2; i++) {
        tr_graph_push_scope(n->g, "layer_norm%d", i + 1);
        param(n, "weight", 1, &ln[i], 1.0f, 0.02f);
        param(n, "bias", 1, &ln[i], 0.0f, 0.02f);
        tr_graph_pop_scope(n->g);
    }
    tr_graph_pop_scope(n->g);
}

/* ---- the mask decoder ---- */

/* SamAttention: q, k, v (B, T*, C) projected to C / rate, heads, attention, out_proj. */
static int sam_attention(struct net *n, const struct tr_sam_config *c, int q, int k, int v, int64_t B, int64_t Tq,
                         int64_t Tk, int64_t rate, const char *name) {
    struct tr_graph *g = n->g;
    const int64_t C = c->output_channels, I = C / rate, H = c->decoder_num_attention_heads, hd = I / H;
    const int heads[4] = {0, 2, 1, 3};
    tr_graph_push_scope(g, "%s", name);
    int qh = transpose(g, reshape(g, linear(n, q, C, I, 1, "q_proj"), 4, (const int64_t[]){B, Tq, H, hd}), 4, heads);
    int kh = transpose(g, reshape(g, linear(n, k, C, I, 1, "k_proj"), 4, (const int64_t[]){B, Tk, H, hd}), 4, heads);
    int vh = transpose(g, reshape(g, linear(n, v, C, I, 1, "v_proj"), 4, (const int64_t[]){B, Tk, H, hd}), 4, heads);
    int a = tr_attention(g, qh, kh, vh, -1, tr_attention_default_scale(hd), 0, 0);
    a = reshape(g, transpose(g, a, 4, heads), 3, (const int64_t[]){B, Tq, I});
    int y = linear(n, a, I, C, 1, "out_proj");
    tr_graph_pop_scope(g);
    return y;
}

/* SamFeedForward: proj_in, ReLU, (depth − 2) hidden layers with ReLU, proj_out. */
static int feed_forward(struct net *n, int x, int64_t in, int64_t hidden, int64_t out, int64_t depth,
                        const char *name) {
    struct tr_graph *g = n->g;
    tr_graph_push_scope(g, "%s", name);
    x = tr_unary(g, TR_OP_RELU, linear(n, x, in, hidden, 1, "proj_in"));
    for (int64_t i = 0; i + 2 < depth; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "layers.%lld", (long long)i);
        x = tr_unary(g, TR_OP_RELU, linear(n, x, hidden, hidden, 1, nm));
    }
    x = linear(n, x, hidden, out, 1, "proj_out");
    tr_graph_pop_scope(g);
    return x;
}

/* ConvTranspose2d with kernel = stride = 2 on NHWC x (B, H, W, ci): every input pixel
 * makes a 2x2 block, out[2h+i, 2w+j] = x[h,w]·W[:, :, i, j] + b: one MATMUL by the
 * weight (ci, co, 2, 2) seen as (ci, co·4), then depth to space. */
static int conv_transpose2(struct net *n, int x, int64_t B, int64_t H, int64_t W, int64_t ci, int64_t co,
                           const char *name) {
    struct tr_graph *g = n->g;
    tr_graph_push_scope(g, "%s", name);
    int w = param(n, "weight", 4, (const int64_t[]){ci, co, 2, 2}, 0.0f, 1.0f / sqrtf((float)ci));
    int b = param(n, "bias", 1, (const int64_t[]){co}, 0.0f, 0.02f);
    tr_graph_pop_scope(g);
    int y = tr_matmul(g, x, reshape(g, w, 2, (const int64_t[]){ci, co * 4}), 0, 0); /* (B,H,W,co·4) */
    const int d2s[6] = {0, 1, 4, 2, 5, 3};                                        /* (B,H,i,W,j,co) */
    y = transpose(g, reshape(g, y, 6, (const int64_t[]){B, H, W, co, 2, 2}), 6, d2s);
    return tr_add(g, reshape(g, y, 4, (const int64_t[]){B, 2 * H, 2 * W, co}), b);
}

/* SamTwoWayAttentionBlock i: queries (B, Tt, C), keys (B, E², C); qpe, kpe the encodings. */
static void two_way_block(struct net *n, const struct tr_sam_config *c, int *queries, int *keys, int qpe, int kpe,
                          int64_t B, int64_t Tt, int64_t Ti, int i) {
    struct tr_graph *g = n->g;
    /* transformers' SamTwoWayTransformer builds its blocks with the block's own default rate,
     * 2, whatever the config says (SamTwoWayAttentionBlock(config, skip_first_layer_pe=...));
     * the config's attention_downsample_rate is final_attn_token_to_image's alone */
    const int64_t C = c->output_channels, rate = 2;
    tr_graph_push_scope(g, "layers.%d", i);
    int qs = *queries, ks = *keys;
    if (i == 0) { /* skip_first_layer_pe: self-attention replaces the queries */
        qs = sam_attention(n, c, qs, qs, qs, B, Tt, Tt, 1, "self_attn");
    } else {
        int q = tr_add(g, qs, qpe);
        qs = tr_add(g, qs, sam_attention(n, c, q, q, qs, B, Tt, Tt, 1, "self_attn"));
    }
    qs = layer_norm(n, qs, C, n->eps, "layer_norm1");
    int q = tr_add(g, qs, qpe), k = tr_add(g, ks, kpe);
    qs = tr_add(g, qs, sam_attention(n, c, q, k, ks, B, Tt, Ti, rate, "cross_attn_token_to_image"));
    qs = layer_norm(n, qs, C, n->eps, "layer_norm2");
    tr_graph_push_scope(g, "mlp");
    int m = linear(n, tr_unary(g, TR_OP_RELU, linear(n, qs, C, c->decoder_mlp_dim, 1, "lin1")), c->decoder_mlp_dim, C,
                   1, "lin2");
    tr_graph_pop_scope(g);
    qs = layer_norm(n, tr_add(g, qs, m), C, n->eps, "layer_norm3");
    q = tr_add(g, qs, qpe);
    k = tr_add(g, ks, kpe);
    ks = tr_add(g, ks, sam_attention(n, c, k, q, qs, B, Ti, Tt, rate, "cross_attn_image_to_token"));
    ks = layer_norm(n, ks, C, n->eps, "layer_norm4");
    tr_graph_pop_scope(g);
    *queries = qs;
    *keys = ks;
}

/* SamMaskDecoder: emb (B, E, E, C), pe (E², C), sparse (B, N+1, C), dense (1, C) ->
 * masks (B, 1, 3, 4E, 4E), iou (B, 1, 3). */
static void mask_decoder(struct net *n, const struct tr_sam_config *c, int emb, int pe, int sparse, int dense,
                         int64_t B, int64_t E, int64_t Ts, int *masks, int *iou) {
    struct tr_graph *g = n->g;
    const int64_t C = c->output_channels, nm = c->num_multimask_outputs + 1, Tt = 1 + nm + Ts, Ti = E * E;
    const int64_t m0 = c->multimask_output ? 1 : 0, m1 = c->multimask_output ? nm : 1; /* the masks kept */
    tr_graph_push_scope(g, "mask_decoder");
    int out_tok[2] = {param(n, "iou_token.weight", 2, (const int64_t[]){1, C}, 0.0f, 1.0f),
                      param(n, "mask_tokens.weight", 2, (const int64_t[]){nm, C}, 0.0f, 1.0f)};
    int tok = tr_broadcast(g, tr_concat(g, 2, out_tok, 0), 3, (const int64_t[]){B, 1 + nm, C});
    int tl[2] = {tok, sparse};
    int tokens = tr_concat(g, 2, tl, 1); /* (B, Tt, C) */
    int src = reshape(g, tr_add(g, emb, dense), 3, (const int64_t[]){B, Ti, C});
    int kpe = tr_broadcast(g, pe, 3, (const int64_t[]){B, Ti, C});
    int queries = tokens, keys = src;
    tr_graph_push_scope(g, "transformer");
    for (int i = 0; i < c->decoder_num_hidden_layers; i++) two_way_block(n, c, &queries, &keys, tokens, kpe, B, Tt, Ti, i);
    int q = tr_add(g, queries, tokens), k = tr_add(g, keys, kpe);
    queries = tr_add(g, queries, sam_attention(n, c, q, k, keys, B, Tt, Ti, c->attention_downsample_rate,
                                               "final_attn_token_to_image"));
    queries = layer_norm(n, queries, C, FINAL_EPS, "layer_norm_final_attn");
    tr_graph_pop_scope(g);
    int iou_out = reshape(g, tr_slice(g, queries, 1, 0, 1, 1), 2, (const int64_t[]){B, C});
    /* upscaling: (B,E,E,C) -> (B,2E,2E,C/4) -> layer norm, GELU -> (B,4E,4E,C/8), GELU */
    int up = conv_transpose2(n, reshape(g, keys, 4, (const int64_t[]){B, E, E, C}), B, E, E, C, C / 4, "upscale_conv1");
    up = tr_gelu(g, layer_norm(n, up, C / 4, NECK_EPS, "upscale_layer_norm"), 0);
    up = tr_gelu(g, conv_transpose2(n, up, B, 2 * E, 2 * E, C / 4, C / 8, "upscale_conv2"), 0);
    int hyper[64];
    for (int64_t i = 0; i < nm && i < 64; i++) {
        char nm_[48];
        snprintf(nm_, sizeof nm_, "output_hypernetworks_mlps.%lld", (long long)i);
        int t = reshape(g, tr_slice(g, queries, 1, 1 + i, 2 + i, 1), 2, (const int64_t[]){B, C});
        hyper[i] = reshape(g, feed_forward(n, t, C, C, C / 8, 3, nm_), 3, (const int64_t[]){B, 1, C / 8});
    }
    int hyper_in = tr_concat(g, (int)nm, hyper, 1); /* (B, nm, C/8) */
    int m = tr_matmul(g, hyper_in, reshape(g, up, 3, (const int64_t[]){B, 16 * E * E, C / 8}), 0, 1);
    m = reshape(g, m, 5, (const int64_t[]){B, 1, nm, 4 * E, 4 * E});
    *masks = tr_slice(g, m, 2, m0, m1, 1);
    int s = feed_forward(n, iou_out, C, c->iou_head_hidden_dim, nm, c->iou_head_depth, "iou_prediction_head");
    *iou = tr_slice(g, reshape(g, s, 3, (const int64_t[]){B, 1, nm}), 2, m0, m1, 1);
    tr_graph_pop_scope(g);
}

/* A generate's picture: the photo's size (or the model's S x S, with no photo). */
static int sam_photo(const struct tr_sam_config *c, const struct tr_build_opts *o, struct tr_sam_photo *p,
                     struct tr_error *err) {
    return tr_sam_photo_size(c, o->task == TR_TASK_GENERATE ? o->init_image : NULL, p, err);
}

/* post_process_masks: masks (B,1,M,L,L) f32 to (B,1,M,H,W), Rh · X · Rwᵀ with each R
 * (S up, crop, down) composed into one (out, L) constant: along y first, on X's transpose,
 * so the two transposes move (L, H) planes, not (H, W) ones. */
static int upscale_masks(struct tr_graph *g, const struct tr_sam_config *c, const struct tr_sam_photo *p, int masks,
                         int64_t B, int64_t M, int64_t L, struct tr_error *err) {
    float *rh = tr_sam_upscale_matrix(L, c->image_size, p->newh, p->h);
    float *rw = tr_sam_upscale_matrix(L, c->image_size, p->neww, p->w);
    if (!rh || !rw) {
        free(rh), free(rw);
        return tr_error_set(err, TR_ERR_NOMEM, "sam: the masks' upscaling to %lldx%lld: out of memory",
                            (long long)p->w, (long long)p->h);
    }
    int Rh = tr_const(g, "upscale_h", TR_DTYPE_F32, 2, (const int64_t[]){p->h, L}, rh);
    int Rw = tr_const(g, "upscale_w", TR_DTYPE_F32, 2, (const int64_t[]){p->w, L}, rw);
    free(rh), free(rw);
    const int swap[3] = {0, 2, 1};
    int x = transpose(g, reshape(g, masks, 3, (const int64_t[]){B * M, L, L}), 3, swap); /* (BM, x, y) */
    x = transpose(g, tr_matmul(g, x, Rh, 0, 1), 3, swap);                               /* (BM, H, x) */
    x = reshape(g, tr_matmul(g, x, Rw, 0, 1), 5, (const int64_t[]){B, 1, M, p->h, p->w});
    tr_graph_set_output(g, x, "masks");
    return TR_OK;
}

static int sam_build(const void *config, const struct tr_build_opts *o, struct tr_graph *g, struct tr_error *err) {
    const struct tr_sam_config *c = config;
    unsigned char global[TR_SAM_MAX_LAYERS];
    int rc = sam_validate(c, o, global, err);
    if (rc) return rc;
    if (o->task != TR_TASK_PREDICT && o->task != TR_TASK_FIT && o->task != TR_TASK_GENERATE)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "sam: task '%s' is not provided (sam offers: predict, fit, "
                            "generate)", tr_task_name(o->task));
    const int fit = o->task == TR_TASK_FIT;
    if (o->prompt || o->prompts || o->negative_prompt || o->mask_image)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "sam: [generate] %s: SAM takes no text prompt and no mask image; "
                            "its prompt is [model] points, labels and boxes, its picture [generate] init_image",
                            o->prompt ? "prompt" : o->prompts ? "prompts" : o->negative_prompt ? "negative_prompt"
                                                                                               : "mask_image");
    struct tr_sam_photo photo;
    struct prompt pr;
    if (!fit && ((rc = sam_photo(c, o, &photo, err)) || (rc = sam_prompt(c, photo.h, photo.w, &pr, err)))) return rc;
    const int64_t B = o->batch, S = c->image_size, G = S / c->patch_size, C = c->output_channels;
    struct net n = {g, o->dtype, o->dtype, (float)c->layer_norm_eps};
    int px = tr_input(g, "pixel_values", o->dtype, 4, (const int64_t[]){B, S, S, 3});
    int pts = -1, lab = -1, box = -1;
    if (!fit && pr.n > 0) {
        pts = tr_input(g, "input_points", TR_DTYPE_F32, 4, (const int64_t[]){B, 1, pr.n, 2});
        lab = tr_input(g, "input_labels", TR_DTYPE_I32, 3, (const int64_t[]){B, 1, pr.n});
    }
    if (!fit && pr.has_box) box = tr_input(g, "input_boxes", TR_DTYPE_F32, 3, (const int64_t[]){B, 1, 4});
    int emb = vision_encoder(&n, c, global, px, B);
    if (fit) {
        int target = tr_input(g, "target", o->dtype, 4, (const int64_t[]){B, G, G, C});
        int loss = tr_mse(g, emb, target);
        if (loss >= 0) tr_graph_set_name(g, loss, "loss");
        /* the benchmark's fit trains the image encoder alone */
        tr_graph_omit(g, "shared_image_embedding."), tr_graph_omit(g, "prompt_encoder.");
        tr_graph_omit(g, "mask_decoder.");
    } else {
        tr_graph_set_output(g, emb, "image_embeddings");
        /* the prompt encoder and the mask decoder in f32 whatever the parameters' dtype:
         * 4M parameters at full size against the encoder's 637M, and the IoU head's few
         * outputs lose to bf16 rounding what the masks do not (transformers' own bf16 run
         * is 0.8-1.8% off in them) */
        struct net d = {g, TR_DTYPE_F32, o->dtype, (float)c->decoder_layer_norm_eps};
        int pe = param(&d, "shared_image_embedding.positional_embedding", 2, (const int64_t[]){2, c->num_pos_feats},
                       0.0f, 1.0f);
        int ipe = image_pe(&d, pe, G, c->num_pos_feats);
        int64_t Ts;
        int sparse = sparse_prompt(&d, c, pts, lab, box, pe, B, pr.n, &Ts);
        tr_graph_push_scope(g, "prompt_encoder");
        int dense = reshape(g, param(&d, "no_mask_embed.weight", 2, (const int64_t[]){1, C}, 0.0f, 1.0f), 4,
                            (const int64_t[]){1, 1, 1, C});
        mask_embed_params(&d, c);
        tr_graph_pop_scope(g);
        int masks, iou, emb32 = o->dtype == TR_DTYPE_F32 ? emb : tr_cast(g, emb, TR_DTYPE_F32);
        mask_decoder(&d, c, emb32, ipe, sparse, dense, B, G, Ts, &masks, &iou);
        const int masks32 = masks;
        if (o->dtype != TR_DTYPE_F32) masks = tr_cast(g, masks, o->dtype), iou = tr_cast(g, iou, o->dtype);
        tr_graph_set_output(g, masks, "pred_masks");
        tr_graph_set_output(g, iou, "iou_scores");
        if (o->task == TR_TASK_GENERATE && (rc = tr_graph_status(g, err)) == TR_OK)
            rc = upscale_masks(g, c, &photo, masks32, B, c->multimask_output ? c->num_multimask_outputs : 1, 4 * G, err);
        if (rc) return tr_error_prefix(err, "sam");
    }
    rc = tr_graph_status(g, err);
    if (rc) return tr_error_prefix(err, "sam");
    return TR_OK;
}

/* pixel_values: a smooth random image (sinusoids and noise) normalised as SamProcessor
 * leaves it (about zero mean, unit spread), or (generate) the photo SamProcessor makes of
 * [generate] init_image; the prompt from points, labels and boxes, the same for every
 * image (a photo's scaled as the photo was); target: normal(0, 1). */
static int sam_make_inputs(const void *config, const struct tr_build_opts *o, uint64_t seed, int n,
                           struct tr_tensor *inputs, struct tr_error *err) {
    const struct tr_sam_config *c = config;
    unsigned char global[TR_SAM_MAX_LAYERS];
    int rc = sam_validate(c, o, global, err);
    if (rc) return rc;
    const int fit = o->task == TR_TASK_FIT;
    const int64_t B = o->batch, S = c->image_size, G = S / c->patch_size, C = c->output_channels;
    struct tr_sam_photo photo;
    struct prompt pr = {0};
    if (!fit && ((rc = sam_photo(c, o, &photo, err)) || (rc = sam_prompt(c, photo.h, photo.w, &pr, err)))) return rc;
    const int want = fit ? 2 : 1 + 2 * (pr.n > 0) + pr.has_box;
    if (n != want)
        return tr_error_set(err, TR_ERR_INVALID, "sam: %d inputs given, expected %d (pixel_values, %s)", n, want,
                            fit ? "target" : pr.n && pr.has_box ? "input_points, input_labels, input_boxes"
                                                                : pr.n ? "input_points, input_labels" : "input_boxes");
    rc = tr_model_check_input("sam", &inputs[0], "pixel_values", o->dtype, 4, (const int64_t[]){B, S, S, 3}, err);
    if (rc) return rc;
    const char *pic = o->task == TR_TASK_GENERATE ? o->init_image : NULL;
    if (pic && (rc = tr_sam_pixel_values(c, pic, &inputs[0], err))) return rc;
    if (!pic) tr_model_fill_image(&inputs[0], seed, "pixel_values", 1.2, 2, 1, 0.5);
    if (fit) {
        rc = tr_model_check_input("sam", &inputs[1], "target", o->dtype, 4, (const int64_t[]){B, G, G, C}, err);
        if (rc) return rc;
        tr_model_fill_normal(&inputs[1], seed, "target");
        return TR_OK;
    }
    /* SamProcessor._normalize_coordinates: x by neww / w, y by newh / h */
    const double sx = (double)photo.neww / (double)photo.w, sy = (double)photo.newh / (double)photo.h;
    const int64_t np = pr.n;
    int k = 1;
    if (np) {
        rc = tr_model_check_input("sam", &inputs[k], "input_points", TR_DTYPE_F32, 4, (const int64_t[]){B, 1, np, 2},
                                  err);
        if (!rc) rc = tr_model_check_input("sam", &inputs[k + 1], "input_labels", TR_DTYPE_I32, 3,
                                           (const int64_t[]){B, 1, np}, err);
        if (rc) return rc;
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < np; i++) {
                tr_tensor_set_f64(&inputs[k], (b * np + i) * 2, pr.xy[2 * i] * sx);
                tr_tensor_set_f64(&inputs[k], (b * np + i) * 2 + 1, pr.xy[2 * i + 1] * sy);
                tr_tensor_set_f64(&inputs[k + 1], b * np + i, (double)pr.labels[i]);
            }
        k += 2;
    }
    if (pr.has_box) {
        rc = tr_model_check_input("sam", &inputs[k], "input_boxes", TR_DTYPE_F32, 3, (const int64_t[]){B, 1, 4}, err);
        if (rc) return rc;
        for (int64_t b = 0; b < B; b++)
            for (int i = 0; i < 4; i++) tr_tensor_set_f64(&inputs[k], b * 4 + i, pr.box[i] * (i % 2 ? sy : sx));
    }
    return TR_OK;
}

/* [generate] image: each image's mask of the highest IoU prediction (the first of equals),
 * logits > 0 white (post_process_masks' threshold), the images side by side. */
static int sam_write_image(const void *config, const char *path, const struct tr_graph *g,
                           const struct tr_tensor *outs, struct tr_error *err) {
    (void)config;
    const struct tr_tensor *m = NULL, *iou = NULL;
    for (int i = 0; i < tr_graph_n_outputs(g); i++) {
        if (!strcmp(tr_graph_output_name(g, i), "masks")) m = &outs[i];
        if (!strcmp(tr_graph_output_name(g, i), "iou_scores")) iou = &outs[i];
    }
    if (!m || !iou || m->ndim != 5 || iou->ndim != 3)
        return tr_error_set(err, TR_ERR_INVALID, "sam: [generate] image: the graph has no outputs masks [B,1,M,H,W] "
                            "and iou_scores [B,1,M]");
    const int64_t B = m->shape[0], M = m->shape[2], H = m->shape[3], W = m->shape[4];
    const int64_t shape[4] = {B, H, W, 1};
    float *px = malloc(sizeof *px * (size_t)(B * H * W));
    if (!px) return tr_error_set(err, TR_ERR_NOMEM, "sam: [generate] image: out of memory");
    struct tr_tensor pic;
    int rc = tr_tensor_make(&pic, px, TR_DTYPE_F32, 4, shape, err);
    for (int64_t b = 0; !rc && b < B; b++) {
        int64_t best = 0;
        for (int64_t k = 1; k < M; k++)
            if (tr_tensor_get_f64(iou, b * M + k) > tr_tensor_get_f64(iou, b * M + best)) best = k;
        if (b < 8) {
            fprintf(stderr, "sample %lld: IoU predictions", (long long)b);
            for (int64_t k = 0; k < M; k++) fprintf(stderr, " %.4f", tr_tensor_get_f64(iou, b * M + k));
            fprintf(stderr, "; mask %lld drawn\n", (long long)best);
        }
        const int64_t off = (b * M + best) * H * W;
        for (int64_t i = 0; i < H * W; i++)
            px[b * H * W + i] = tr_tensor_get_f64(m, off + i) > 0.0 ? 1.0f : -1.0f;
    }
    if (!rc) rc = tr_image_write_png(path, &pic, err);
    free(px);
    return rc;
}

/* transformers' SamConfig config.json: vision_config's keys by name; prompt_encoder_config
 * and mask_decoder_config's where trident has them (the decoder's under decoder_* names),
 * their widths required equal to output_channels, the activations the ones built here; a
 * key the file leaves out, or a whole part, is its class's default (below). */
#define DKEY(json, field, lo, hi) {json, TR_KEY_INT, offsetof(struct tr_sam_config, field), lo, hi, NULL}
static const struct tr_model_key decoder_keys[] = {
    DKEY("mlp_dim", decoder_mlp_dim, 1, 1e6),
    DKEY("num_hidden_layers", decoder_num_hidden_layers, 1, 64),
    DKEY("num_attention_heads", decoder_num_attention_heads, 1, 4096),
    DKEY("attention_downsample_rate", attention_downsample_rate, 1, 4096),
    DKEY("iou_head_hidden_dim", iou_head_hidden_dim, 1, 65536),
    DKEY("iou_head_depth", iou_head_depth, 2, 64),
    DKEY("num_multimask_outputs", num_multimask_outputs, 1, 64),
    {"layer_norm_eps", TR_KEY_FLOAT, offsetof(struct tr_sam_config, decoder_layer_norm_eps), 0, 1, NULL},
};
static const struct tr_model_key prompt_keys[] = {DKEY("mask_input_channels", mask_input_channels, 4, 65536)};

/* The __init__ defaults (transformers 5.25) of the keys read below, each part's class's:
 * a config.json that leaves one out means this, as SamConfig reads it. The keys only
 * checked (num_channels 3, num_point_embeddings 4, the hidden_act's) are left out, their
 * defaults being the values accepted. SamVisionConfig's mlp_dim None is hidden_size ·
 * mlp_ratio, as the reader computes it from null. */
static const char VISION_DEFAULTS[] = /* SamVisionConfig */
    "{\"hidden_size\": 768, \"output_channels\": 256, \"num_hidden_layers\": 12, \"num_attention_heads\": 12, "
    "\"image_size\": 1024, \"patch_size\": 16, \"layer_norm_eps\": 1e-06, \"qkv_bias\": true, \"mlp_ratio\": 4.0, "
    "\"use_abs_pos\": true, \"use_rel_pos\": true, \"window_size\": 14, \"global_attn_indexes\": [2, 5, 8, 11], "
    "\"num_pos_feats\": 128, \"mlp_dim\": null}";
static const char PROMPT_DEFAULTS[] = /* SamPromptEncoderConfig */
    "{\"hidden_size\": 256, \"image_size\": 1024, \"patch_size\": 16, \"mask_input_channels\": 16}";
static const char DECODER_DEFAULTS[] = /* SamMaskDecoderConfig */
    "{\"hidden_size\": 256, \"mlp_dim\": 2048, \"num_hidden_layers\": 2, \"num_attention_heads\": 8, "
    "\"attention_downsample_rate\": 2, \"num_multimask_outputs\": 3, \"iou_head_depth\": 3, "
    "\"iou_head_hidden_dim\": 256, \"layer_norm_eps\": 1e-06}";

/* The sub-object `name` of root with its class defaults added (part: the path naming
 * it in errors). Absent or null, SamConfig builds the part from its defaults alone: an
 * empty object stands for it. Anything else is an error naming the file. */
static int sub_config(cJSON *root, const char *path, const char *part, const char *name, const char *defaults,
                      cJSON **obj, struct tr_error *err) {
    *obj = cJSON_GetObjectItemCaseSensitive(root, name);
    if (!*obj || cJSON_IsNull(*obj)) {
        cJSON *empty = cJSON_CreateObject();
        int added = empty && (*obj ? cJSON_ReplaceItemViaPointer(root, *obj, empty)
                                   : cJSON_AddItemToObject(root, name, empty));
        if (!added) {
            cJSON_Delete(empty);
            return tr_error_set(err, TR_ERR_NOMEM, "'%s': out of memory adding \"%s\"", path, name);
        }
        *obj = empty;
    }
    if (!cJSON_IsObject(*obj))
        return tr_error_set(err, TR_ERR_INVALID, "'%s': \"%s\" is not an object (a SamConfig config.json has "
                            "vision_config, prompt_encoder_config and mask_decoder_config)", path, name);
    return tr_hf_json_defaults(*obj, part, defaults, err);
}

/* obj's integer `key` equals want (absent: fine): the widths SAM's parts must share. */
static int expect_same(const cJSON *obj, const char *path, const char *key, int64_t want, const char *what,
                       struct tr_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) return TR_OK;
    if (cJSON_IsNumber(v) && v->valuedouble == (double)want) return TR_OK;
    return tr_error_set(err, TR_ERR_UNSUPPORTED, "'%s': \"%s\" = %g, expected %lld (%s)", path, key,
                        cJSON_IsNumber(v) ? v->valuedouble : NAN, (long long)want, what);
}

static int sam_read_hf_config(void *config, const char *path, struct tr_error *err) {
    struct tr_sam_config *c = config;
    cJSON *root;
    int rc = tr_hf_json_load(path, &root, err);
    if (rc) return rc;
    cJSON *vis = NULL, *pr = NULL, *dec = NULL;
    /* errors inside a part name it: "config.json (mask_decoder_config)" */
    char pv[TR_CONFIG_PATH + 32], pp[TR_CONFIG_PATH + 32], pd[TR_CONFIG_PATH + 32];
    snprintf(pv, sizeof pv, "%s (vision_config)", path);
    snprintf(pp, sizeof pp, "%s (prompt_encoder_config)", path);
    snprintf(pd, sizeof pd, "%s (mask_decoder_config)", path);
    rc = tr_hf_json_expect_str(root, path, "model_type", "sam", err);
    if (!rc) rc = sub_config(root, path, pv, "vision_config", VISION_DEFAULTS, &vis, err);
    if (!rc) rc = sub_config(root, path, pp, "prompt_encoder_config", PROMPT_DEFAULTS, &pr, err);
    if (!rc) rc = sub_config(root, path, pd, "mask_decoder_config", DECODER_DEFAULTS, &dec, err);
    if (!rc) rc = tr_hf_json_expect_str(vis, pv, "hidden_act", "gelu", err);
    if (!rc) rc = tr_hf_json_expect_num(vis, pv, "num_channels", 3, err);
    static const char *const vskip[] = {"mlp_dim", NULL};
    if (!rc) rc = tr_hf_json_apply(vis, pv, sam_keys, (int)(sizeof sam_keys / sizeof sam_keys[0]), config, vskip, err);
    if (!rc) { /* mlp_dim null: hidden_size · mlp_ratio, as SamVisionConfig */
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(vis, "mlp_dim"), *r = cJSON_GetObjectItemCaseSensitive(vis, "mlp_ratio");
        if (cJSON_IsNumber(m)) {
            if (m->valuedouble < 1 || m->valuedouble > 1e6 || m->valuedouble != (double)(int64_t)m->valuedouble)
                rc = tr_error_set(err, TR_ERR_INVALID, "'%s': \"mlp_dim\" = %g, expected an integer from 1 to "
                                  "1e6", pv, m->valuedouble);
            else c->mlp_dim = (int64_t)m->valuedouble;
        } else { /* mlp_ratio is there (a default), unless the file gives it null */
            double ratio = cJSON_IsNumber(r) ? r->valuedouble : 4.0;
            c->mlp_dim = (int64_t)((double)c->hidden_size * ratio);
        }
    }
    if (!rc) rc = tr_hf_json_expect_str(pr, pp, "hidden_act", "gelu", err);
    if (!rc) rc = tr_hf_json_expect_num(pr, pp, "num_point_embeddings", 4, err);
    if (!rc) rc = tr_hf_json_apply(pr, pp, prompt_keys, 1, config, NULL, err);
    if (!rc) rc = expect_same(pr, pp, "hidden_size", c->output_channels,
                              "vision_config.output_channels: the prompt encoder's width is the embedding's", err);
    if (!rc) rc = expect_same(pr, pp, "image_size", c->image_size,
                              "vision_config.image_size", err);
    if (!rc) rc = expect_same(pr, pp, "patch_size", c->patch_size,
                              "vision_config.patch_size", err);
    if (!rc) rc = tr_hf_json_expect_str(dec, pd, "hidden_act", "relu", err);
    /* each part's own eps (its default 1e-6 when absent): transformers reads the vision
     * one in the encoder, the decoder one in the two-way blocks */
    if (!rc) rc = tr_hf_json_apply(dec, pd, decoder_keys, (int)(sizeof decoder_keys / sizeof decoder_keys[0]), config,
                                   NULL, err);
    if (!rc) rc = expect_same(dec, pd, "hidden_size", c->output_channels,
                              "vision_config.output_channels: the mask decoder's width is the embedding's", err);
    cJSON_Delete(root);
    return rc;
}

/* images, no sequence: a [run] seq_len is said to be unread */
static int64_t sam_no_seq_len(const void *config) {
    (void)config;
    return -1;
}

const struct tr_model_desc tr_model_sam = {
    .name = "sam",
    .description = "SamModel (transformers names; SegmentAnything: ViT image encoder, prompt encoder, mask decoder)",
    .config_size = sizeof(struct tr_sam_config),
    TR_MODEL_TABLES(sam_keys, sam_presets),
    .tasks = 1u << TR_TASK_PREDICT | 1u << TR_TASK_FIT | 1u << TR_TASK_GENERATE,
    .build = sam_build,
    .trainable = tr_model_trainable_all, /* fit builds only what it trains */
    .make_inputs = sam_make_inputs,
    .default_seq_len = sam_no_seq_len,
    .read_hf_config = sam_read_hf_config,
    .write_image = sam_write_image,
    /* the low-resolution mask logits are dot products over few channels that cancel to
     * near 0: transformers' own bf16 masks are 0.7e-2 to 1.2e-1 from float64 on 12 random
     * configs (make_vision_reference.py --model sam --dtype bf16, seeds 1 to 6 and 11 to
     * 16), and trident's backends 0.4e-2 to 1.0e-1 apart there; the bound is about twice
     * the worst */
    .bf16_tolerance = 2e-1,
    .bf16_why = "SAM's masks (transformers': up to 1.2e-1 off f64)",
    .generate_one_pass = 1, /* its generate is predict's pass on a photo */
};
