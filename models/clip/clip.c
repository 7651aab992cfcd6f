/* CLIPTextModel: transformers' CLIP text encoder as a trident graph (clip.h).
 *
 * embeddings (token + position), then per layer x += out_proj(attn(layer_norm1(x))) with
 * a causal mask, x += fc2(act(fc1(layer_norm2(x)))), then final_layer_norm. Dropout is
 * absent (0 in every CLIP config).
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "clip.h"
#include "hf_json.h"
#include "layers.h"
#include "models.h"
#include "trident/rng.h"

#define KEY_(field, type, lo, hi, doc) {#field, type, offsetof(struct tr_clip_text_config, field), lo, hi, doc}

static const struct tr_model_key clip_keys[] = {
    KEY_(vocab_size, TR_KEY_INT, 3, 1e7, "rows of the token embedding table (the last two ids start and end a text)"),
    KEY_(hidden_size, TR_KEY_INT, 1, 65536, "model width D; a multiple of num_attention_heads"),
    KEY_(intermediate_size, TR_KEY_INT, 1, 1e6, "width of the feed-forward block"),
    KEY_(num_hidden_layers, TR_KEY_INT, 1, 1024, "encoder layers"),
    KEY_(num_attention_heads, TR_KEY_INT, 1, 4096, "attention heads per layer"),
    KEY_(max_position_embeddings, TR_KEY_INT, 1, 1e6, "rows of the position table; seq_len may not exceed it"),
    KEY_(layer_norm_eps, TR_KEY_FLOAT, 0, 1, "epsilon of every LayerNorm"),
    KEY_(hidden_act, TR_KEY_STRING, 0, 0, "the feed-forward's activation, as transformers' ACT2FN names it: quick_gelu (x*sigmoid(1.702x), CLIP's), "
                                     "gelu, or another of " TR_NN_ACTS),
};

/* The values of transformers' CLIPTextConfig for each (sd-v1-4: the text_encoder of
 * CompVis/stable-diffusion-v1-4, openai/clip-vit-large-patch14's text model). */
static const struct tr_clip_text_config clip_tiny = {
    .vocab_size = 1000, .hidden_size = 64, .intermediate_size = 256, .num_hidden_layers = 2,
    .num_attention_heads = 4, .max_position_embeddings = 16, .layer_norm_eps = 1e-5, .hidden_act = "quick_gelu",
};
static const struct tr_clip_text_config clip_small = {
    .vocab_size = 49408, .hidden_size = 256, .intermediate_size = 1024, .num_hidden_layers = 4,
    .num_attention_heads = 4, .max_position_embeddings = 77, .layer_norm_eps = 1e-5, .hidden_act = "quick_gelu",
};
static const struct tr_clip_text_config clip_sd = {
    .vocab_size = 49408, .hidden_size = 768, .intermediate_size = 3072, .num_hidden_layers = 12,
    .num_attention_heads = 12, .max_position_embeddings = 77, .layer_norm_eps = 1e-5, .hidden_act = "quick_gelu",
};

/* stabilityai/stable-diffusion-2-1's text_encoder (OpenCLIP ViT-H/14's text tower, its last
 * layer dropped as SD 2 takes the penultimate one's output) */
static const struct tr_clip_text_config clip_sd21 = {
    .vocab_size = 49408, .hidden_size = 1024, .intermediate_size = 4096, .num_hidden_layers = 23,
    .num_attention_heads = 16, .max_position_embeddings = 77, .layer_norm_eps = 1e-5, .hidden_act = "gelu",
};

static const struct tr_model_preset clip_presets[] = {
    {"tiny", &clip_tiny, "2 layers, hidden 64, 4 heads, 16 positions, vocabulary 1000 (tests)"},
    {"small", &clip_small, "4 layers, hidden 256, 4 heads, 77 positions, CLIP's vocabulary (CPU benchmarks)"},
    {"sd-v1-4", &clip_sd,
     "CompVis/stable-diffusion-v1-4's text_encoder (openai/clip-vit-large-patch14's text model): 12 layers, "
     "hidden 768, 12 heads, MLP 3072, quick_gelu, 77 positions; 123,060,480 parameters"},
    {"sd-2-1", &clip_sd21,
     "stabilityai/stable-diffusion-2-1's text_encoder (OpenCLIP ViT-H/14's text tower): 23 layers, hidden 1024, "
     "16 heads, MLP 4096, gelu, 77 positions; 340,387,840 parameters"},
};

int64_t tr_clip_prompt_len(int64_t b, int64_t T) {
    int64_t n = T - (b % 4) * T / 4; /* T, 3T/4, T/2, T/4 */
    return n < 2 ? (T < 2 ? T : 2) : n;
}


static int clip_validate(const struct tr_clip_text_config *c, const struct tr_build_opts *o, struct tr_error *err) {
    if (strnlen(c->hidden_act, sizeof c->hidden_act) == sizeof c->hidden_act || !tr_nn_act_known(c->hidden_act))
        return tr_error_set(err, TR_ERR_INVALID, "clip_text: hidden_act = '%.*s': expected one of %s",
                            (int)sizeof c->hidden_act - 1, c->hidden_act, TR_NN_ACTS);
    if (c->hidden_size % c->num_attention_heads != 0)
        return tr_error_set(err, TR_ERR_INVALID, "clip_text: hidden_size = %lld is not a multiple of "
                            "num_attention_heads = %lld", (long long)c->hidden_size, (long long)c->num_attention_heads);
    if (o->seq_len < 1 || o->seq_len > c->max_position_embeddings)
        return tr_error_set(err, TR_ERR_INVALID, "clip_text: seq_len = %lld, expected 1 to max_position_embeddings = "
                            "%lld", (long long)o->seq_len, (long long)c->max_position_embeddings);
    if (o->batch < 1)
        return tr_error_set(err, TR_ERR_INVALID, "clip_text: batch = %lld, expected at least 1", (long long)o->batch);
    if (!tr_dtype_is_float(o->dtype) || o->dtype == TR_DTYPE_F64)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "clip_text: dtype %s is not provided (f32, bf16 or f16)",
                            tr_dtype_name(o->dtype));
    if (o->task != TR_TASK_PREDICT)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "clip_text: task '%s' is not provided (clip_text offers: "
                            "predict)", tr_task_name(o->task));
    return TR_OK;
}

static int linear(struct tr_graph *g, int x, int64_t in, int64_t out, enum tr_dtype dt, const char *name) {
    return tr_nn_linear(g, x, in, out, dt, 1, 0.02f, name);
}

static int layer_norm(struct tr_graph *g, int x, int64_t d, enum tr_dtype dt, double eps, const char *name) {
    return tr_nn_layer_norm(g, x, d, dt, (float)eps, name);
}

/* One pre-LN layer on x (B,T,D). */
static int encoder_layer(struct tr_graph *g, const struct tr_clip_text_config *c, enum tr_dtype dt, int64_t B,
                         int64_t T, int x) {
    const int64_t D = c->hidden_size, H = c->num_attention_heads, Dh = D / H;
    const int64_t split[4] = {B, T, H, Dh}, merged[3] = {B, T, D};
    const int perm[4] = {0, 2, 1, 3}; /* (B,T,H,Dh) <-> (B,H,T,Dh) */
    int h = layer_norm(g, x, D, dt, c->layer_norm_eps, "layer_norm1");
    tr_graph_push_scope(g, "self_attn");
    int qkv[3];
    const char *names[3] = {"q_proj", "k_proj", "v_proj"};
    for (int i = 0; i < 3; i++)
        qkv[i] = tr_transpose(g, tr_reshape(g, linear(g, h, D, D, dt, names[i]), 4, split), 4, perm);
    int ctx = tr_attention(g, qkv[0], qkv[1], qkv[2], -1, tr_attention_default_scale(Dh), 1, 0);
    ctx = tr_reshape(g, tr_transpose(g, ctx, 4, perm), 3, merged);
    x = tr_add(g, x, linear(g, ctx, D, D, dt, "out_proj"));
    tr_graph_pop_scope(g);

    h = layer_norm(g, x, D, dt, c->layer_norm_eps, "layer_norm2");
    tr_graph_push_scope(g, "mlp");
    int f = linear(g, h, D, c->intermediate_size, dt, "fc1");
    f = tr_nn_act(g, c->hidden_act, f);
    x = tr_add(g, x, linear(g, f, c->intermediate_size, D, dt, "fc2"));
    tr_graph_pop_scope(g);
    return x;
}

int tr_clip_text_graph(const struct tr_clip_text_config *c, const struct tr_build_opts *o, struct tr_graph *g,
                       int ids, int *out, struct tr_error *err) {
    return tr_clip_text_graph_skip(c, o, g, ids, 0, out, NULL, err);
}

int tr_clip_text_graph_skip(const struct tr_clip_text_config *c, const struct tr_build_opts *o, struct tr_graph *g,
                            int ids, int64_t skip, int *out, int *skipped, struct tr_error *err) {
    int rc = clip_validate(c, o, err);
    if (rc) return rc;
    if (skip < 0 || skip >= c->num_hidden_layers || (skip > 0 && !skipped))
        return tr_error_set(err, TR_ERR_INVALID, "clip_text: clip_skip = %lld, expected 0 to num_hidden_layers - 1 = "
                            "%lld", (long long)skip, (long long)(c->num_hidden_layers - 1));
    const enum tr_dtype dt = o->dtype;
    const int64_t B = o->batch, T = o->seq_len, D = c->hidden_size;
    int32_t *pos_ids = malloc(sizeof(int32_t) * (size_t)T);
    if (!pos_ids) return tr_error_set(err, TR_ERR_NOMEM, "clip_text: no memory for %lld position ids", (long long)T);
    for (int64_t t = 0; t < T; t++) pos_ids[t] = (int32_t)t;
    int pos = tr_const(g, "position_ids", TR_DTYPE_I32, 1, &T, pos_ids);
    free(pos_ids);

    tr_graph_push_scope(g, "text_model");
    tr_graph_push_scope(g, "embeddings");
    const int64_t tsh[2] = {c->vocab_size, D}, psh[2] = {c->max_position_embeddings, D};
    int wte = tr_param(g, "token_embedding.weight", dt, 2, tsh, 0.0f, 0.02f);
    int wpe = tr_param(g, "position_embedding.weight", dt, 2, psh, 0.0f, 0.02f);
    int x = tr_embedding(g, wte, ids);
    x = tr_add(g, x, tr_embedding(g, wpe, pos));
    tr_graph_pop_scope(g);
    int before_skip = -1;
    for (int64_t l = 0; l < c->num_hidden_layers; l++) {
        if (skip > 0 && l == c->num_hidden_layers - skip) before_skip = x;
        tr_graph_push_scope(g, "encoder.layers.%lld", (long long)l);
        x = encoder_layer(g, c, dt, B, T, x);
        tr_graph_pop_scope(g);
    }
    x = layer_norm(g, x, D, dt, c->layer_norm_eps, "final_layer_norm");
    if (skip > 0) { /* final_layer_norm again, its weights shared (an instance of it) */
        tr_graph_set_instance(g, 1);
        *skipped = layer_norm(g, before_skip, D, dt, c->layer_norm_eps, "final_layer_norm");
        tr_graph_set_instance(g, 0);
    }
    tr_graph_pop_scope(g);
    rc = tr_graph_status(g, err);
    if (rc) return tr_error_prefix(err, "clip_text");
    *out = x;
    return TR_OK;
}

static int clip_build(const void *config, const struct tr_build_opts *o, struct tr_graph *g, struct tr_error *err) {
    const int64_t bt[2] = {o->batch, o->seq_len};
    int ids = tr_input(g, "input_ids", TR_DTYPE_I32, 2, bt), h;
    int rc = tr_clip_text_graph(config, o, g, ids, &h, err);
    if (rc) return rc;
    tr_graph_set_output(g, h, "last_hidden_state");
    return tr_graph_status(g, err);
}

/* Prompts as CLIP's tokenizer makes them: start, random words, end, end-padding. */
static int clip_make_inputs(const void *config, const struct tr_build_opts *o, uint64_t seed, int n,
                            struct tr_tensor *inputs, struct tr_error *err) {
    const struct tr_clip_text_config *c = config;
    int rc = clip_validate(c, o, err);
    if (rc) return rc;
    const int64_t B = o->batch, T = o->seq_len, bt[2] = {B, T};
    if (n != 1) return tr_error_set(err, TR_ERR_INVALID, "clip_text: %d inputs given, expected 1 (input_ids)", n);
    const struct tr_tensor *t = &inputs[0];
    if ((rc = tr_model_check_input("clip_text", t, "input_ids", TR_DTYPE_I32, 2, bt, err)) != TR_OK) return rc;
    const int32_t bos = (int32_t)(c->vocab_size - 2), eos = (int32_t)(c->vocab_size - 1);
    const uint64_t key = tr_hash_str("input_ids");
    int32_t *ids = t->data;
    for (int64_t b = 0; b < B; b++) {
        const int64_t len = tr_clip_prompt_len(b, T);
        for (int64_t i = 0; i < T; i++) {
            int32_t v = eos; /* words are ids 0 .. bos-1 */
            if (i == 0 && len > 1) v = bos;
            else if (i < len - 1)
                v = (int32_t)(tr_rng_uniform(seed, key, (uint64_t)(b * T + i)) * (double)bos);
            ids[b * T + i] = v;
        }
    }
    return TR_OK;
}

/* CLIPTextConfig's defaults (transformers 5.25) for the keys read here. */
static const char CLIP_DEFAULTS[] =
    "{\"vocab_size\": 49408, \"hidden_size\": 512, \"intermediate_size\": 2048, \"num_hidden_layers\": 12,"
    " \"num_attention_heads\": 8, \"max_position_embeddings\": 77, \"layer_norm_eps\": 1e-05,"
    " \"hidden_act\": \"quick_gelu\"}";

/* transformers' CLIPTextConfig config.json (a whole CLIPConfig's text_config too); a key
 * it leaves out is CLIPTextConfig's default. */
static int clip_read_hf_config(void *config, const char *path, struct tr_error *err) {
    cJSON *root;
    int rc = tr_hf_json_load(path, &root, err);
    if (rc) return rc;
    cJSON *text = cJSON_GetObjectItemCaseSensitive(root, "text_config");
    cJSON *obj = cJSON_IsObject(text) ? text : root;
    rc = tr_hf_json_defaults(obj, path, CLIP_DEFAULTS, err);
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    if (!rc && mt && !(cJSON_IsString(mt) && (!strcmp(mt->valuestring, "clip_text_model") || !strcmp(mt->valuestring, "clip"))))
        rc = tr_error_set(err, TR_ERR_INVALID, "'%s': model_type = %s, expected \"clip_text_model\" or \"clip\"", path,
                          cJSON_IsString(mt) ? mt->valuestring : "(not a string)");
    /* diffusers' pipelines then hand the tokenizer's attention mask to the text encoder,
     * which this one (every position attended, as CLIP's checkpoints run) does not take */
    const cJSON *um = cJSON_GetObjectItemCaseSensitive(obj, "use_attention_mask");
    if (!rc && cJSON_IsTrue(um))
        rc = tr_error_set(err, TR_ERR_UNSUPPORTED, "'%s': use_attention_mask = true: Stable Diffusion's pipeline then "
                          "masks the padding in the text encoder, which trident's does not; expected false or absent",
                          path);
    if (!rc) rc = tr_hf_json_apply(obj, path, clip_keys, (int)(sizeof clip_keys / sizeof clip_keys[0]), config, NULL, err);
    cJSON_Delete(root);
    return rc;
}

/* What Stable Diffusion's pipeline feeds it: every position (77 at sd-v1-4). */
static int64_t clip_default_seq_len(const void *config) {
    return ((const struct tr_clip_text_config *)config)->max_position_embeddings;
}

const struct tr_model_desc tr_model_clip_text = {
    .name = "clip_text",
    .description = "CLIPTextModel (transformers names; Stable Diffusion's text encoder)",
    .config_size = sizeof(struct tr_clip_text_config),
    TR_MODEL_TABLES(clip_keys, clip_presets),
    .tasks = 1u << TR_TASK_PREDICT,
    .build = clip_build,
    .make_inputs = clip_make_inputs,
    .read_hf_config = clip_read_hf_config,
    .default_seq_len = clip_default_seq_len,
};
