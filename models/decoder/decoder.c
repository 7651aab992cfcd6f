/* The decoder pass shared by Gemma and Mistral (decoder.h), as transformers writes
 * GemmaForCausalLM and MistralForCausalLM: pre-norm blocks (RMS norm, attention with
 * RoPE and grouped key/value heads, residual; RMS norm, gated feed-forward, residual),
 * a final RMS norm and the logits; for fit, LoRA adapters (lora.c) and the causal LM
 * loss. Dropout is absent (HF's attention_dropout is 0 in these configs). */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "decoder.h"
#include "layers.h"
#include "models.h"
#include "trident/autodiff.h"
#include "trident/rng.h"

static const char *family_name(enum tr_decoder_family f) { return f == TR_DECODER_GEMMA ? "gemma" : "mistral"; }

int64_t tr_decoder_head_dim(const struct tr_decoder_config *c) {
    if (c->head_dim > 0) return c->head_dim;
    return c->num_attention_heads > 0 ? c->hidden_size / c->num_attention_heads : 0;
}

/* The MLP's activation: hidden_act as transformers' ACT2FN names it, except that Gemma
 * reads "gelu" as the tanh form, as transformers' GemmaConfig does (the official configs
 * say "gelu" but mean tanh). */
static const char *act_name(const struct tr_decoder_config *c) {
    return c->family == TR_DECODER_GEMMA && strcmp(c->hidden_act, "gelu") == 0 ? "gelu_pytorch_tanh" : c->hidden_act;
}

int tr_decoder_validate(const struct tr_decoder_config *c, const struct tr_build_opts *o, struct tr_error *err) {
    const char *m = family_name(c->family);
    const struct tr_model_pos pos[] = {
        {"vocab_size", c->vocab_size},
        {"hidden_size", c->hidden_size},
        {"intermediate_size", c->intermediate_size},
        {"num_hidden_layers", c->num_hidden_layers},
        {"num_attention_heads", c->num_attention_heads},
        {"num_key_value_heads", c->num_key_value_heads},
        {"max_position_embeddings", c->max_position_embeddings},
    };
    int rc = tr_model_check_positive(m, pos, (int)(sizeof pos / sizeof pos[0]), err);
    if (rc) return rc;
    if (c->pad_token_id >= c->vocab_size)
        return tr_error_set(err, TR_ERR_INVALID, "%s: pad_token_id = %lld is not a row of the %lld-row embed_tokens "
                            "(vocab_size); expected -1 (none) or below it", m, (long long)c->pad_token_id,
                            (long long)c->vocab_size);
    int64_t eos[8];
    int n_eos = 0;
    if (c->eos_token_id[0] &&
        (rc = tr_model_int_list(m, "eos_token_id", c->eos_token_id, sizeof c->eos_token_id, 0, c->vocab_size - 1, "1",
                                eos, 8, &n_eos, err)) != TR_OK)
        return rc;
    if (c->vocab_size > INT32_MAX)
        return tr_error_set(err, TR_ERR_INVALID, "%s: vocab_size = %lld does not fit the i32 token ids", m,
                            (long long)c->vocab_size);
    if (c->num_attention_heads % c->num_key_value_heads != 0)
        return tr_error_set(err, TR_ERR_INVALID,
                            "%s: num_attention_heads = %lld is not a multiple of num_key_value_heads = %lld", m,
                            (long long)c->num_attention_heads, (long long)c->num_key_value_heads);
    if (c->head_dim < 0)
        return tr_error_set(err, TR_ERR_INVALID, "%s: head_dim = %lld, expected >= 0 (0: hidden_size / heads)", m,
                            (long long)c->head_dim);
    /* head_dim 0 with hidden_size not a multiple of the heads: hidden_size // heads, as
     * MistralConfig takes it (q_proj then has heads * head_dim outputs, fewer than hidden) */
    int64_t dh = tr_decoder_head_dim(c);
    if (dh % 2 != 0)
        return tr_error_set(err, TR_ERR_INVALID, "%s: head_dim = %lld is odd; RoPE rotates pairs of dimensions", m,
                            (long long)dh);
    if (c->sliding_window < 0)
        return tr_error_set(err, TR_ERR_INVALID, "%s: sliding_window = %lld, expected >= 0 (0: none)", m,
                            (long long)c->sliding_window);
    if (!(c->rms_norm_eps >= 0 && isfinite(c->rms_norm_eps)))
        return tr_error_set(err, TR_ERR_INVALID, "%s: rms_norm_eps = %g, expected >= 0", m, c->rms_norm_eps);
    if (!(c->rope_theta > 0 && isfinite(c->rope_theta)))
        return tr_error_set(err, TR_ERR_INVALID, "%s: rope_theta = %g, expected > 0", m, c->rope_theta);
    if (c->attention_bias && c->family != TR_DECODER_GEMMA)
        return tr_error_set(err, TR_ERR_INVALID, "%s: attention_bias = true: MistralConfig's projections have no bias "
                            "(GemmaConfig's attention_bias is the one provided)", m);
    if (c->lora_predict && c->lora_rank < 1)
        return tr_error_set(err, TR_ERR_INVALID, "%s: lora_predict = true with lora_rank = %lld: there are no adapters "
                            "to apply; expected lora_rank >= 1 (the adapter's r)", m, (long long)c->lora_rank);
    if (!(c->pad_fraction >= 0 && c->pad_fraction <= 1))
        return tr_error_set(err, TR_ERR_INVALID, "%s: pad_fraction = %g, expected in [0,1]", m, c->pad_fraction);
    if (strnlen(c->hidden_act, sizeof c->hidden_act) == sizeof c->hidden_act || !tr_nn_act_known(act_name(c)))
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "%s: hidden_act = '%.63s' is not provided (%s)", m,
                            c->hidden_act, TR_NN_ACTS);
    if (!o) return TR_OK;
    if (o->batch < 1 || o->seq_len < 1)
        return tr_error_set(err, TR_ERR_INVALID, "%s: batch = %lld, seq_len = %lld, expected both at least 1", m,
                            (long long)o->batch, (long long)o->seq_len);
    if (o->task == TR_TASK_FIT && o->seq_len < 2) /* transformers' shifted loss over no token: NaN */
        return tr_error_set(err, TR_ERR_INVALID, "%s: fit with seq_len = %lld: the causal LM loss predicts each "
                            "token from those before it, so one token leaves nothing to predict; expected at "
                            "least 2", m, (long long)o->seq_len);
    /* seq_len may pass max_position_embeddings, as in transformers: RoPE has no table to
     * run off (what the model makes of positions it was not trained on is its own) */
    if (!tr_dtype_is_float(o->dtype) || o->dtype == TR_DTYPE_F64)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "%s: dtype %s is not provided (f32, bf16 or f16)", m,
                            tr_dtype_name(o->dtype));
    return TR_OK;
}

int tr_decoder_resolve(const struct tr_decoder_config *c, struct tr_decoder_config *out, struct tr_error *err) {
    *out = *c;
    return tr_decoder_validate(out, NULL, err);
}

int64_t tr_decoder_param_count(const struct tr_decoder_config *c) {
    const int64_t D = c->hidden_size, V = c->vocab_size, I = c->intermediate_size, dh = tr_decoder_head_dim(c);
    const int64_t q = c->num_attention_heads * dh, kv = c->num_key_value_heads * dh;
    const int64_t bias = c->attention_bias ? q + 2 * kv + D : 0;
    const int64_t layer = D * q + 2 * D * kv + q * D + 3 * D * I + 2 * D + bias;
    return V * D + c->num_hidden_layers * layer + D + (c->tie_word_embeddings ? 0 : V * D);
}

/* HF nn.Linear inside scope `name`: x (..., in) · weight (out, in)ᵀ (+ bias (out) where
 * `bias`: the attention projections of a GemmaConfig with attention_bias), plus the LoRA
 * term when lr adapts this layer (lr NULL: never), added last as peft does. The one place
 * every Linear is made. x32: x's f32 cast shared by the layers that read x (lora.c), or
 * NULL. */
static int proj(struct tr_graph *g, int x, int64_t in, int64_t out, enum tr_dtype dt, const char *name,
                const struct tr_decoder_lora *lr, int *x32, int bias) {
    const int64_t ws[2] = {out, in}, bs[1] = {out};
    tr_graph_push_scope(g, "%s", name);
    int w = tr_param(g, "weight", dt, 2, ws, 0.0f, 0.02f);
    int b = bias ? tr_param(g, "bias", dt, 1, bs, 0.0f, 0.02f) : -1;
    int y = tr_matmul(g, x, w, 0, 1);
    if (bias) y = tr_add(g, y, b);
    y = tr_decoder_lora_apply(g, lr, tr_decoder_lora_target(name), x, x32, y, in, out, dt);
    tr_graph_pop_scope(g);
    if (y >= 0) tr_graph_set_name(g, y, name);
    return y;
}

static int rms_norm(struct tr_graph *g, const struct tr_decoder_config *c, int x, enum tr_dtype dt,
                    const char *name) {
    const int64_t s[1] = {c->hidden_size};
    const int gemma = c->family == TR_DECODER_GEMMA;
    tr_graph_push_scope(g, "%s", name);
    int w = tr_param(g, "weight", dt, 1, s, gemma ? 0.0f : 1.0f, 0.02f);
    tr_graph_pop_scope(g);
    int y = tr_rms_norm(g, x, w, (float)c->rms_norm_eps, gemma);
    if (y >= 0) tr_graph_set_name(g, y, name);
    return y;
}

/* x (B,T,n·Dh) -> (B,n,T,Dh). */
static int split_heads(struct tr_graph *g, int x, int64_t B, int64_t T, int64_t n, int64_t dh) {
    const int64_t s[4] = {B, T, n, dh};
    const int perm[4] = {0, 2, 1, 3};
    return tr_transpose(g, tr_reshape(g, x, 4, s), 4, perm);
}

/* Node ids of the pass-wide inputs one layer needs. */
struct pass_ctx {
    const struct tr_decoder_config *c;
    const struct tr_decoder_pass *p;
    int pos, mask;
    const int *past;  /* 2 per layer (key, value), or NULL */
    const int *cache; /* cache_slots: 2 PARAMs per layer (key, value), or NULL */
    int cache_pos;    /* the slot the cache's writes start at (an i32 [1] node) */
};

/* One decoder layer on x (B,T,D); *k_new / *v_new get this pass's rotated keys and values. */
static int decoder_layer(struct tr_graph *g, const struct pass_ctx *ctx, int64_t l, int x, int *k_new, int *v_new) {
    const struct tr_decoder_config *c = ctx->c;
    const struct tr_decoder_pass *p = ctx->p;
    const enum tr_dtype dt = p->dtype;
    const int64_t B = p->batch, T = p->seq_len, P = p->past_len, D = c->hidden_size;
    const int64_t H = c->num_attention_heads, Hk = c->num_key_value_heads, dh = tr_decoder_head_dim(c);
    const float theta = (float)c->rope_theta;

    const struct tr_decoder_lora *lr = p->lora;
    const int ab = c->attention_bias;
    int h = rms_norm(g, c, x, dt, "input_layernorm"), h32 = -1;
    tr_graph_push_scope(g, "self_attn");
    int q = tr_rope(g, split_heads(g, proj(g, h, D, H * dh, dt, "q_proj", lr, &h32, ab), B, T, H, dh), ctx->pos, theta,
                    0);
    int k = tr_rope(g, split_heads(g, proj(g, h, D, Hk * dh, dt, "k_proj", lr, &h32, ab), B, T, Hk, dh), ctx->pos, theta,
                    0);
    int v = split_heads(g, proj(g, h, D, Hk * dh, dt, "v_proj", lr, &h32, ab), B, T, Hk, dh);
    *k_new = k;
    *v_new = v;
    if (ctx->cache) {
        const int ck = ctx->cache[2 * l], cv = ctx->cache[2 * l + 1];
        const int nk = tr_update_slice(g, ck, k, ctx->cache_pos, 2), nv = tr_update_slice(g, cv, v, ctx->cache_pos, 2);
        tr_graph_add_update(g, ck, nk);
        tr_graph_add_update(g, cv, nv);
        if (p->full_mask) k = nk, v = nv;
    }
    if (P > 0) {
        const int ks[2] = {ctx->past[2 * l], k}, vs[2] = {ctx->past[2 * l + 1], v};
        k = tr_concat(g, 2, ks, 2);
        v = tr_concat(g, 2, vs, 2);
    }
    const int causal = !p->full_mask;
    const int window = p->full_mask ? 0 : (int)c->sliding_window;
    int a = tr_attention(g, q, k, v, ctx->mask, tr_attention_default_scale(dh), causal, window);
    const int perm[4] = {0, 2, 1, 3};
    const int64_t merged[3] = {B, T, H * dh};
    a = tr_reshape(g, tr_transpose(g, a, 4, perm), 3, merged);
    int y = tr_add(g, proj(g, a, H * dh, D, dt, "o_proj", lr, NULL, ab), x);
    tr_graph_pop_scope(g);

    h = rms_norm(g, c, y, dt, "post_attention_layernorm");
    h32 = -1;
    tr_graph_push_scope(g, "mlp");
    int gate = proj(g, h, D, c->intermediate_size, dt, "gate_proj", lr, &h32, 0);
    int act = tr_nn_act(g, act_name(c), gate);
    int up = proj(g, h, D, c->intermediate_size, dt, "up_proj", lr, &h32, 0);
    int f = proj(g, tr_mul(g, act, up), c->intermediate_size, D, dt, "down_proj", lr, NULL, 0);
    tr_graph_pop_scope(g);
    return tr_add(g, f, y);
}

/* sqrt(hidden) rounded to the activation dtype, as HF multiplies by a tensor of it
 * (bf16: √3072 = 55.4256 becomes 55.5). */
static float embed_scale(int64_t D, enum tr_dtype dt) {
    float s = (float)sqrt((double)D);
    if (dt == TR_DTYPE_BF16) return tr_bf16_to_f32(tr_f32_to_bf16(s));
    if (dt == TR_DTYPE_F16) return tr_f16_to_f32(tr_f32_to_f16(s));
    return s;
}

/* fit: input "labels" i32 [B,T] and the node "loss", the mean cross-entropy of logits
 * (B,T,V) against the labels that are not TR_DECODER_IGNORE (decoder.h). The labels are
 * transformers' (labels = input_ids, -100 where nothing is learnt): position t predicts
 * labels[t + 1]. The shift is the labels', not the logits': labels[:, 1:] and an ignored
 * last column, so the logits rows stay a view (a slice of them would copy B·T·V). The
 * labels go through f32 for the slice and the concatenation (exact: ids below 2^24). */
static int causal_lm_loss(struct tr_graph *g, int logits, int64_t B, int64_t T, int64_t V) {
    const int64_t bt[2] = {B, T}, rows[2] = {B * T, V}, n[1] = {B * T}, b1[2] = {B, 1};
    int labels = tr_input(g, "labels", TR_DTYPE_I32, 2, bt);
    float *ignored = malloc((size_t)B * sizeof *ignored);
    if (!ignored) return -1;
    for (int64_t b = 0; b < B; b++) ignored[b] = (float)TR_DECODER_IGNORE;
    int parts[2] = {tr_slice(g, tr_cast(g, labels, TR_DTYPE_F32), 1, 1, T, 1),
                    tr_const(g, "labels_last", TR_DTYPE_F32, 2, b1, ignored)};
    free(ignored);
    int next = tr_cast(g, tr_concat(g, 2, parts, 1), TR_DTYPE_I32);
    int loss = tr_cross_entropy(g, tr_reshape(g, logits, 2, rows), tr_reshape(g, next, 1, n), TR_DECODER_IGNORE);
    if (loss >= 0) tr_graph_set_name(g, loss, "loss");
    return loss;
}

int tr_decoder_build_pass(const struct tr_decoder_config *c, const struct tr_decoder_pass *p, struct tr_graph *g,
                          int *logits_out, struct tr_error *err) {
    const char *m = family_name(c->family);
    const enum tr_dtype dt = p->dtype;
    const int64_t B = p->batch, T = p->seq_len, P = p->past_len, D = c->hidden_size, V = c->vocab_size;
    if (B < 1 || T < 1 || P < 0)
        return tr_error_set(err, TR_ERR_INVALID, "%s: pass with batch %lld, seq_len %lld, past_len %lld", m,
                            (long long)B, (long long)T, (long long)P);
    if (p->loss && (P > 0 || p->last_logits || p->present || p->cache_slots))
        return tr_error_set(err, TR_ERR_INVALID, "%s: a fit pass has no past, present, cache or last_logits", m);
    const int64_t S = p->cache_slots;
    if (S < 0 || (S > 0 && (P > 0 || p->present || T > S)))
        return tr_error_set(err, TR_ERR_INVALID,
                            "%s: cache_slots = %lld with past_len %lld, present %d, seq_len %lld: a pass with its cache "
                            "as state has no past inputs or present outputs, and at most cache_slots new tokens",
                            m, (long long)S, (long long)P, p->present, (long long)T);
    /* Keys attended to: the updated cache (decode with the cache as state), else past + new. */
    const int64_t K = S > 0 && p->full_mask ? S : P + T;
    const int64_t bt[2] = {B, T}, full[3] = {B, T, K}, keys[2] = {B, K};
    int ids = tr_input(g, "input_ids", TR_DTYPE_I32, 2, bt);
    struct pass_ctx ctx = {.c = c, .p = p};
    ctx.pos = tr_input(g, "position_ids", TR_DTYPE_I32, 2, bt);
    int mask_in = p->full_mask ? tr_input(g, "attention_mask", TR_DTYPE_F32, 3, full)
                               : tr_input(g, "attention_mask", TR_DTYPE_F32, 2, keys);
    /* Hugging Face's mask, 1 attend / 0 hide, made the attention op's additive one:
     * 0 / TR_DECODER_MASK_NEG, exact in f32 for 1 and 0 (1e9 is a multiple of 64). */
    const int64_t ms[4] = {B, 1, p->full_mask ? T : 1, K};
    ctx.mask = tr_reshape(g, tr_scale(g, mask_in, -TR_DECODER_MASK_NEG, TR_DECODER_MASK_NEG), 4, ms);
    if (S > 0) {
        const int64_t one[1] = {1};
        const int32_t zero = 0;
        ctx.cache_pos = p->full_mask ? tr_input(g, "cache_pos", TR_DTYPE_I32, 1, one)
                                     : tr_const(g, "cache_start", TR_DTYPE_I32, 1, one, &zero);
    }

    const int64_t L = c->num_hidden_layers, Hk = c->num_key_value_heads, dh = tr_decoder_head_dim(c);
    int *present = NULL, *past = NULL, *cache = NULL;
    if ((p->present && !(present = calloc((size_t)(2 * L), sizeof *present))) ||
        (P > 0 && !(past = calloc((size_t)(2 * L), sizeof *past))) ||
        (S > 0 && !(cache = calloc((size_t)(2 * L), sizeof *cache)))) {
        free(present);
        free(past);
        return tr_error_set(err, TR_ERR_NOMEM, "%s: no memory for %lld layers' caches", m, (long long)L);
    }
    for (int64_t i = 0; past && i < 2 * L; i++) {
        const int64_t cs[4] = {B, Hk, P, dh};
        char name[64];
        snprintf(name, sizeof name, "past_key_values.%lld.%s", (long long)(i / 2), i % 2 ? "value" : "key");
        past[i] = tr_input(g, name, dt, 4, cs);
    }
    ctx.past = past;
    for (int64_t i = 0; cache && i < 2 * L; i++) {
        const int64_t cs[4] = {B, Hk, S, dh};
        char name[64];
        snprintf(name, sizeof name, "cache.%lld.%s", (long long)(i / 2), i % 2 ? "value" : "key");
        cache[i] = tr_param(g, name, dt, 4, cs, 0.0f, 0.0f);
    }
    ctx.cache = cache;

    tr_graph_push_scope(g, "model");
    const int64_t es[2] = {V, D};
    int embed = tr_param(g, "embed_tokens.weight", dt, 2, es, 0.0f, 0.02f);
    int x = tr_embedding_pad(g, embed, ids, c->pad_token_id);
    if (c->family == TR_DECODER_GEMMA) x = tr_scale(g, x, embed_scale(D, dt), 0.0f);
    for (int64_t l = 0; l < L; l++) {
        tr_graph_push_scope(g, "layers.%lld", (long long)l);
        int kn, vn;
        x = decoder_layer(g, &ctx, l, x, &kn, &vn);
        tr_graph_pop_scope(g);
        if (present) present[2 * l] = kn, present[2 * l + 1] = vn;
    }
    if (p->last_logits) {
        const int64_t bd[2] = {B, D};
        x = tr_reshape(g, tr_slice(g, x, 1, T - 1, T, 1), 2, bd);
    }
    x = rms_norm(g, c, x, dt, "norm");
    tr_graph_pop_scope(g);
    int logits = c->tie_word_embeddings ? tr_matmul(g, x, embed, 0, 1) : proj(g, x, D, V, dt, "lm_head", NULL, NULL, 0);
    if (logits >= 0 && c->tie_word_embeddings) tr_graph_set_name(g, logits, "logits");
    if (p->loss) causal_lm_loss(g, logits, B, T, V);
    else tr_graph_set_output(g, logits, "logits");
    for (int64_t l = 0; present && l < L; l++) {
        char name[64];
        snprintf(name, sizeof name, "present.%lld.key", (long long)l);
        tr_graph_set_output(g, present[2 * l], name);
        snprintf(name, sizeof name, "present.%lld.value", (long long)l);
        tr_graph_set_output(g, present[2 * l + 1], name);
    }
    free(present);
    free(past);
    free(cache);
    int rc = tr_graph_status(g, err);
    if (rc) return tr_error_prefix(err, "%s", m);
    if (logits_out) *logits_out = logits;
    return TR_OK;
}

int tr_decoder_build(const void *config, const struct tr_build_opts *o, struct tr_graph *g, struct tr_error *err) {
    struct tr_decoder_config c;
    int rc = tr_decoder_resolve(config, &c, err);
    if (!rc) rc = tr_decoder_validate(&c, o, err);
    struct tr_decoder_lora lr;
    if (!rc) rc = tr_decoder_lora_resolve(&c, &lr, err);
    if (rc) return rc;
    if (o->task != TR_TASK_PREDICT && o->task != TR_TASK_FIT)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "%s: task '%s' is not built here (offered: predict, fit)",
                            family_name(c.family), tr_task_name(o->task));
    const int fit = o->task == TR_TASK_FIT;
    const struct tr_decoder_pass p = {.dtype = o->dtype, .batch = o->batch, .seq_len = o->seq_len,
                                      .lora = (fit || c.lora_predict) && lr.rank > 0 ? &lr : NULL, .loss = fit};
    return tr_decoder_build_pass(&c, &p, g, NULL, err);
}

int tr_decoder_pad_len(const struct tr_decoder_config *c, int64_t b, int64_t seq_len) {
    int64_t pad = (int64_t)floor((double)(b % 4) * c->pad_fraction * (double)seq_len);
    return (int)(pad > seq_len - 1 ? seq_len - 1 : pad);
}

static int check_input(const char *m, const struct tr_tensor *t, const char *name, enum tr_dtype dt, int64_t B,
                       int64_t T, struct tr_error *err) {
    if (t->dtype != (int32_t)dt || t->ndim != 2 || t->shape[0] != B || t->shape[1] != T || !t->data ||
        t->device != TR_DEVICE_CPU || !tr_tensor_is_contiguous(t)) {
        char sh[96];
        return tr_error_set(err, TR_ERR_SHAPE, "%s: input '%s' is %s%s, expected a contiguous host %s[%lld,%lld]", m,
                            name, tr_dtype_name((enum tr_dtype)t->dtype), tr_shape_str(t->ndim, t->shape, sh, sizeof sh),
                            tr_dtype_name(dt), (long long)B, (long long)T);
    }
    return TR_OK;
}

int tr_decoder_make_inputs(const void *config, const struct tr_build_opts *o, uint64_t seed, int n,
                           struct tr_tensor *inputs, struct tr_error *err) {
    struct tr_decoder_config c;
    int rc = tr_decoder_resolve(config, &c, err);
    if (rc) return rc;
    const char *m = family_name(c.family);
    const int64_t B = o->batch, T = o->seq_len;
    const int fit = o->task == TR_TASK_FIT, want = fit ? 4 : 3;
    if (n != want)
        return tr_error_set(err, TR_ERR_INVALID,
                            "%s: %d inputs given, expected %d (input_ids, position_ids, attention_mask%s)", m, n, want,
                            fit ? ", labels" : "");
    rc = check_input(m, &inputs[0], "input_ids", TR_DTYPE_I32, B, T, err);
    if (!rc) rc = check_input(m, &inputs[1], "position_ids", TR_DTYPE_I32, B, T, err);
    if (!rc) rc = check_input(m, &inputs[2], "attention_mask", TR_DTYPE_F32, B, T, err);
    if (!rc && fit) rc = check_input(m, &inputs[3], "labels", TR_DTYPE_I32, B, T, err);
    if (rc) return rc;
    int32_t *ids = inputs[0].data, *pos = inputs[1].data;
    float *mask = inputs[2].data;
    const uint64_t key = tr_hash_str("input_ids");
    for (int64_t b = 0; b < B; b++) {
        const int64_t pad = tr_decoder_pad_len(&c, b, T);
        for (int64_t t = 0; t < T; t++) {
            const int64_t i = b * T + t;
            if (t < pad) {
                ids[i] = 0, pos[i] = 1, mask[i] = 0.0f;
                continue;
            }
            /* Ids in [1, V): 0 is the pad token. */
            int64_t id = 1 + (int64_t)(tr_rng_uniform(seed, key, (uint64_t)i) * (double)(c.vocab_size - 1));
            ids[i] = (int32_t)(id < c.vocab_size ? id : c.vocab_size - 1);
            pos[i] = (int32_t)(t - pad);
            mask[i] = 1.0f;
        }
    }
    /* fit: each token predicts the next one, the labels as transformers takes them (the
     * tokens, ignored on pads and on a padded sample's first token, which a pad position
     * would predict); the batch is the same every step, so a falling loss is the model
     * fitting it. */
    for (int64_t b = 0; fit && b < B; b++) {
        const int64_t pad = tr_decoder_pad_len(&c, b, T);
        int32_t *labels = (int32_t *)inputs[3].data + b * T;
        for (int64_t t = 0; t < T; t++) labels[t] = pad == 0 || t > pad ? ids[b * T + t] : TR_DECODER_IGNORE;
    }
    return TR_OK;
}
