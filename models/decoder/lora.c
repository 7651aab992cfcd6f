/* LoRA for the decoder LLMs (decoder.h: lora_rank, lora_alpha, lora_targets), as peft's
 * LoraConfig and keras-hub's enable_lora: the adapters of one Linear, the parsing of the
 * keys, and the list of what a fit trains.
 *
 * Adapters are f32 whatever the build's dtype (issue 7: f32 adapters and optimizer state
 * on a bf16 model): the layer's input is cast to f32 once, goes through A then B, is
 * scaled by alpha / rank and cast back to the activation dtype before it is added to the
 * frozen base output (peft adds it last too, so zero B leaves the base output as is). */
#include <math.h>
#include <string.h>
#include "decoder.h"

static const char *const target_names[TR_DECODER_LORA_N] = {"q_proj",    "k_proj",  "v_proj",  "o_proj",
                                                             "gate_proj", "up_proj", "down_proj"};
#define VALID "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj"

const char *const tr_decoder_lora_modules[] = {"q_proj=self_attn.q_proj", "k_proj=self_attn.k_proj",
                                               "v_proj=self_attn.v_proj", "o_proj=self_attn.o_proj",
                                               "gate_proj=mlp.gate_proj", "up_proj=mlp.up_proj",
                                               "down_proj=mlp.down_proj", NULL};

static const char *family_name(enum tr_decoder_family f) { return f == TR_DECODER_GEMMA ? "gemma" : "mistral"; }

int tr_decoder_lora_target(const char *layer) {
    for (int i = 0; i < TR_DECODER_LORA_N; i++)
        if (strcmp(target_names[i], layer) == 0) return i;
    return -1;
}

/* in and out features of target t's Linear. */
static void target_dims(const struct tr_decoder_config *c, int t, int64_t *in, int64_t *out) {
    const int64_t D = c->hidden_size, I = c->intermediate_size, dh = tr_decoder_head_dim(c);
    const int64_t q = c->num_attention_heads * dh, kv = c->num_key_value_heads * dh;
    const int64_t ins[TR_DECODER_LORA_N] = {D, D, D, q, D, D, I}, outs[TR_DECODER_LORA_N] = {q, kv, kv, D, I, I, D};
    *in = ins[t];
    *out = outs[t];
}

int tr_decoder_lora_resolve(const struct tr_decoder_config *c, struct tr_decoder_lora *lr, struct tr_error *err) {
    const char *m = family_name(c->family);
    *lr = (struct tr_decoder_lora){0};
    if (c->lora_rank < 0)
        return tr_error_set(err, TR_ERR_INVALID, "%s: lora_rank = %lld, expected >= 0 (0: LoRA off)", m,
                            (long long)c->lora_rank);
    if (c->lora_rank == 0) return TR_OK;
    if (!(c->lora_alpha >= 0 && isfinite(c->lora_alpha)))
        return tr_error_set(err, TR_ERR_INVALID, "%s: lora_alpha = %g, expected >= 0 (0: alpha = lora_rank)", m,
                            c->lora_alpha);
    size_t len = strnlen(c->lora_targets, sizeof c->lora_targets);
    if (len == sizeof c->lora_targets)
        return tr_error_set(err, TR_ERR_INVALID, "%s: lora_targets is not terminated within %zu bytes", m,
                            sizeof c->lora_targets);
    const char *list = len ? c->lora_targets : TR_DECODER_LORA_DEFAULT;
    const char *bad;
    int bad_len;
    if (tr_name_list_mask(list, target_names, TR_DECODER_LORA_N, &lr->mask, &bad, &bad_len) != TR_OK)
        return tr_error_set(err, TR_ERR_INVALID, "%s: lora_targets = '%s': unknown layer '%.*s' (valid: " VALID ")",
                            m, list, bad_len, bad);
    for (int i = 0; i < TR_DECODER_LORA_N; i++) {
        if (!(lr->mask & (1u << i))) continue;
        int64_t in, out;
        target_dims(c, i, &in, &out);
        const int64_t lim = in < out ? in : out;
        if (c->lora_rank > lim)
            return tr_error_set(err, TR_ERR_INVALID,
                                "%s: lora_rank = %lld is larger than min(in, out) = %lld of the '%s' layers (in %lld, "
                                "out %lld); use lora_rank <= %lld or drop '%s' from lora_targets",
                                m, (long long)c->lora_rank, (long long)lim, target_names[i], (long long)in,
                                (long long)out, (long long)lim, target_names[i]);
    }
    lr->rank = c->lora_rank;
    lr->scale = (float)((c->lora_alpha > 0 ? c->lora_alpha : (double)c->lora_rank) / (double)c->lora_rank);
    return TR_OK;
}

int tr_decoder_lora_apply(struct tr_graph *g, const struct tr_decoder_lora *lr, int target, int x, int *x32, int y,
                          int64_t in, int64_t out, enum tr_dtype dt) {
    if (!lr || lr->rank <= 0 || target < 0 || !(lr->mask & (1u << target))) return y;
    const int64_t as[2] = {lr->rank, in}, bs[2] = {out, lr->rank};
    int a = tr_param(g, "lora_A.weight", TR_DTYPE_F32, 2, as, 0.0f, (float)(1.0 / (double)lr->rank));
    int b = tr_param(g, "lora_B.weight", TR_DTYPE_F32, 2, bs, 0.0f, 0.0f);
    tr_param_set_fresh(g, a);  /* a base checkpoint has no adapters */
    tr_param_set_fresh(g, b);
    /* One cast of the input serves every adapter that reads it (q, k and v share h). */
    int xf = x;
    if (dt != TR_DTYPE_F32) {
        if (!x32 || *x32 < 0) xf = tr_cast(g, x, TR_DTYPE_F32);
        else xf = *x32;
        if (x32) *x32 = xf;
    }
    int d = tr_scale(g, tr_matmul(g, tr_matmul(g, xf, a, 0, 1), b, 0, 1), lr->scale, 0.0f);
    if (dt != TR_DTYPE_F32) d = tr_cast(g, d, dt);
    return tr_add(g, y, d);
}

static int is_adapter(const char *name) {
    size_t n = strlen(name);
    const char *sfx[2] = {".lora_A.weight", ".lora_B.weight"};
    for (int i = 0; i < 2; i++) {
        size_t k = strlen(sfx[i]);
        if (n > k && strcmp(name + n - k, sfx[i]) == 0) return 1;
    }
    return 0;
}

int tr_decoder_trainable(const void *config, const struct tr_graph *g, int *ids, int max, int *n,
                         struct tr_error *err) {
    const struct tr_decoder_config *c = config;
    if (!c || !g || !n || max < 0 || (max > 0 && !ids))
        return tr_error_set(err, TR_ERR_INVALID, "tr_decoder_trainable: NULL argument or max < 0");
    const int lora = c->lora_rank > 0;
    int k = 0;
    for (int i = 0; i < tr_graph_n_params(g); i++) {
        int id = tr_graph_param(g, i);
        const char *name = tr_node_name(g, id);
        if (!name || (lora && !is_adapter(name))) continue;
        if (k < max) ids[k] = id;
        k++;
    }
    *n = k;
    if (k > max)
        return tr_error_set(err, TR_ERR_INVALID, "%s: %d trainable parameters, room for %d", family_name(c->family), k,
                            max);
    if (k == 0)
        return tr_error_set(err, TR_ERR_INVALID,
                            "%s: the graph has no %s to train (was it built for task fit?)", family_name(c->family),
                            lora ? "LoRA adapter" : "parameter");
    return TR_OK;
}
