/* BERT: Hugging Face's BertForSequenceClassification, the model of the Keras 3
 * benchmark's bert_base_en classifier (bert-base-cased), as a trident graph.
 *
 * Parameters carry the names of its state_dict, so a checkpoint saved by transformers
 * loads as is (tr_weights_load). Post-LN encoder, hidden_act (GELU in the erf form), an additive
 * attention mask from a 1-keep/0-pad mask, pooler (token 0, dense, tanh), classifier.
 * Dropout is absent: predict is inference.
 */
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "bert.h"
#include "hf_json.h"
#include "layers.h"
#include "models.h"
#include "trident/autodiff.h"
#include "trident/rng.h"

#define KEY_INT(field, lo, hi, doc) {#field, TR_KEY_INT, offsetof(struct tr_bert_config, field), lo, hi, doc}
#define KEY_FLOAT(field, lo, hi, doc) {#field, TR_KEY_FLOAT, offsetof(struct tr_bert_config, field), lo, hi, doc}
#define KEY_STRING(field, doc) {#field, TR_KEY_STRING, offsetof(struct tr_bert_config, field), 0, 0, doc}

static const struct tr_model_key bert_keys[] = {
    KEY_INT(vocab_size, 1, 1e7, "rows of the word embedding table"),
    KEY_INT(hidden_size, 1, 65536, "model width D; a multiple of num_attention_heads"),
    KEY_INT(num_hidden_layers, 1, 1024, "encoder layers"),
    KEY_INT(num_attention_heads, 1, 4096, "attention heads per layer"),
    KEY_INT(intermediate_size, 1, 1e6, "width of the feed-forward block"),
    KEY_INT(max_position_embeddings, 1, 1e6, "rows of the position table; seq_len may not exceed it"),
    KEY_INT(type_vocab_size, 1, 1024, "rows of the token type table"),
    KEY_INT(num_labels, 1, 1e6, "classifier outputs"),
    KEY_FLOAT(layer_norm_eps, 0, 1, "epsilon of every LayerNorm"),
    KEY_STRING(hidden_act, "the feed-forward's activation, as transformers' ACT2FN names it: " TR_NN_ACTS),
    KEY_STRING(problem_type, "fit's loss, as transformers' problem_type: single_label_classification (cross-entropy "
                             "against a class per sample), regression (MSE against num_labels floats per sample), "
                             "multi_label_classification (BCE with logits against num_labels 0/1 floats); empty: "
                             "regression with num_labels = 1, else single_label_classification"),
    KEY_FLOAT(pad_fraction, 0, 1,
              "synthetic batch: sample b pads its last floor((b mod 4) * pad_fraction * seq_len) tokens"),
    KEY_INT(pad_token_id, -1, 1e7,
            "the word embedding's padding row (transformers' padding_idx: no gradient reaches it); -1: none"),
    KEY_INT(lora_rank, 0, 65536, "LoRA rank r of the adapters on lora_targets; 0: LoRA off"),
    KEY_FLOAT(lora_alpha, 0, 1e6, "LoRA alpha; the adapter output is scaled by lora_alpha / lora_rank; 0: alpha = rank"),
    KEY_STRING(lora_targets, "comma-separated Linear layers that get LoRA adapters, among query, key, value, "
                             "attention_output, intermediate, output (default query,value)"),
};

/* LoRA target names (lora_targets) and the bit of each in a mask. */
enum { LORA_QUERY, LORA_KEY, LORA_VALUE, LORA_ATTENTION_OUTPUT, LORA_INTERMEDIATE, LORA_OUTPUT, LORA_N };
static const char *const lora_names[LORA_N] = {"query", "key", "value", "attention_output", "intermediate", "output"};
/* each one's module in a layer (tr_model_desc.lora_modules) */
static const char *const lora_modules[] = {"query=attention.self.query", "key=attention.self.key",
                                           "value=attention.self.value", "attention_output=attention.output.dense",
                                           "intermediate=intermediate.dense", "output=output.dense", NULL};
#define LORA_VALID "query, key, value, attention_output, intermediate, output"
#define LORA_DEFAULT "query,value"

/* What bert_validate resolved of the LoRA keys; rank 0 or mask 0: no adapters. */
struct lora {
    int64_t rank;
    float scale; /* alpha / rank */
    unsigned mask;
};

/* The values of transformers' BertConfig for each; pad_fraction is trident's. */
static const struct tr_bert_config bert_tiny = {
    .vocab_size = 1000, .hidden_size = 64, .num_hidden_layers = 2, .num_attention_heads = 2,
    .intermediate_size = 128, .max_position_embeddings = 128, .type_vocab_size = 2, .num_labels = 2,
    .layer_norm_eps = 1e-12, .hidden_act = "gelu", .pad_fraction = 0.125, .pad_token_id = 0, .lora_targets = LORA_DEFAULT,
};
static const struct tr_bert_config bert_small = {
    .vocab_size = 28996, .hidden_size = 256, .num_hidden_layers = 4, .num_attention_heads = 4,
    .intermediate_size = 1024, .max_position_embeddings = 512, .type_vocab_size = 2, .num_labels = 2,
    .layer_norm_eps = 1e-12, .hidden_act = "gelu", .pad_fraction = 0.125, .pad_token_id = 0, .lora_targets = LORA_DEFAULT,
};
static const struct tr_bert_config bert_base = {
    .vocab_size = 28996, .hidden_size = 768, .num_hidden_layers = 12, .num_attention_heads = 12,
    .intermediate_size = 3072, .max_position_embeddings = 512, .type_vocab_size = 2, .num_labels = 2,
    .layer_norm_eps = 1e-12, .hidden_act = "gelu", .pad_fraction = 0.125, .pad_token_id = 0, .lora_targets = LORA_DEFAULT,
};

static const struct tr_model_preset bert_presets[] = {
    {"tiny", &bert_tiny, "2 layers, hidden 64, 2 heads, ffn 128, vocab 1000, 128 positions (tests, quickstart)"},
    {"small", &bert_small, "4 layers, hidden 256, 4 heads, ffn 1024, cased vocab 28996, 512 positions"},
    {"base", &bert_base,
     "bert-base-cased (Keras bert_base_en): 12 layers, hidden 768, 12 heads, ffn 3072, vocab 28996, 512 positions, "
     "108,311,810 parameters with 2 labels"},
};

/* Parse lora_targets into lr->mask and check lora_rank against each target's sizes. */
static int lora_validate(const struct tr_bert_config *c, struct lora *lr, struct tr_error *err) {
    *lr = (struct lora){0};
    if (c->lora_rank < 0)
        return tr_error_set(err, TR_ERR_INVALID, "bert: lora_rank = %lld, expected >= 0 (0: LoRA off)",
                            (long long)c->lora_rank);
    if (c->lora_rank == 0) return TR_OK;
    if (!(c->lora_alpha >= 0 && isfinite(c->lora_alpha)))
        return tr_error_set(err, TR_ERR_INVALID, "bert: lora_alpha = %g, expected >= 0 (0: alpha = lora_rank)",
                            c->lora_alpha);
    size_t len = strnlen(c->lora_targets, sizeof c->lora_targets);
    if (len == sizeof c->lora_targets)
        return tr_error_set(err, TR_ERR_INVALID, "bert: lora_targets is not terminated within %zu bytes",
                            sizeof c->lora_targets);
    const char *list = len ? c->lora_targets : LORA_DEFAULT;
    const char *bad;
    int bad_len;
    if (tr_name_list_mask(list, lora_names, LORA_N, &lr->mask, &bad, &bad_len) != TR_OK)
        return tr_error_set(err, TR_ERR_INVALID,
                            "bert: lora_targets = '%s': unknown layer '%.*s' (valid: " LORA_VALID ")", list, bad_len,
                            bad);
    const int64_t D = c->hidden_size, I = c->intermediate_size;
    for (int i = 0; i < LORA_N; i++) {
        if (!(lr->mask & (1u << i))) continue;
        int64_t in = i == LORA_OUTPUT ? I : D, out = i == LORA_INTERMEDIATE ? I : D;
        int64_t lim = in < out ? in : out;
        if (c->lora_rank > lim)
            return tr_error_set(err, TR_ERR_INVALID,
                                "bert: lora_rank = %lld is larger than min(in, out) = %lld of the '%s' layers "
                                "(in %lld, out %lld); use lora_rank <= %lld or drop '%s' from lora_targets",
                                (long long)c->lora_rank, (long long)lim, lora_names[i], (long long)in,
                                (long long)out, (long long)lim, lora_names[i]);
    }
    lr->rank = c->lora_rank;
    lr->scale = (float)((c->lora_alpha > 0 ? c->lora_alpha : (double)c->lora_rank) / (double)c->lora_rank);
    return TR_OK;
}

/* transformers' problem_type, which picks fit's loss. */
enum problem { PROBLEM_SINGLE, PROBLEM_REGRESSION, PROBLEM_MULTI, PROBLEM_N };
static const char *const problem_names[PROBLEM_N] = {"single_label_classification", "regression",
                                                     "multi_label_classification"};

/* c's problem_type, or, where it is empty, what transformers infers from integer class
 * labels: regression for one label, else single_label_classification. */
static int problem_of(const struct tr_bert_config *c, enum problem *p, struct tr_error *err) {
    if (!c->problem_type[0]) {
        *p = c->num_labels == 1 ? PROBLEM_REGRESSION : PROBLEM_SINGLE;
        return TR_OK;
    }
    for (int i = 0; i < PROBLEM_N; i++)
        if (strcmp(c->problem_type, problem_names[i]) == 0) return *p = (enum problem)i, TR_OK;
    return tr_error_set(err, TR_ERR_INVALID,
                        "bert: problem_type = '%.63s' is not one of single_label_classification, regression, "
                        "multi_label_classification (or empty: transformers' inference)",
                        c->problem_type);
}

static int bert_validate(const struct tr_bert_config *c, const struct tr_build_opts *o, struct tr_error *err) {
    const struct tr_model_pos pos[] = {
        {"vocab_size", c->vocab_size},           {"hidden_size", c->hidden_size},
        {"num_hidden_layers", c->num_hidden_layers}, {"num_attention_heads", c->num_attention_heads},
        {"intermediate_size", c->intermediate_size}, {"max_position_embeddings", c->max_position_embeddings},
        {"type_vocab_size", c->type_vocab_size}, {"num_labels", c->num_labels},
        {"batch", o->batch},                     {"seq_len", o->seq_len},
    };
    int rc = tr_model_check_positive("bert", pos, (int)(sizeof pos / sizeof pos[0]), err);
    if (rc) return rc;
    if (c->hidden_size % c->num_attention_heads != 0)
        return tr_error_set(err, TR_ERR_INVALID,
                            "bert: hidden_size = %lld is not a multiple of num_attention_heads = %lld",
                            (long long)c->hidden_size, (long long)c->num_attention_heads);
    if (o->seq_len > c->max_position_embeddings)
        return tr_error_set(err, TR_ERR_INVALID,
                            "bert: seq_len = %lld is longer than max_position_embeddings = %lld (the position table "
                            "has that many rows)",
                            (long long)o->seq_len, (long long)c->max_position_embeddings);
    if (!(c->layer_norm_eps >= 0))
        return tr_error_set(err, TR_ERR_INVALID, "bert: layer_norm_eps = %g, expected >= 0", c->layer_norm_eps);
    if (!tr_nn_act_known(c->hidden_act))
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "bert: hidden_act = '%.*s' is not provided (%s)",
                            (int)sizeof c->hidden_act - 1, c->hidden_act, TR_NN_ACTS);
    if (!(c->pad_fraction >= 0 && c->pad_fraction <= 1))
        return tr_error_set(err, TR_ERR_INVALID, "bert: pad_fraction = %g, expected in [0,1]", c->pad_fraction);
    if (c->pad_token_id >= c->vocab_size)
        return tr_error_set(err, TR_ERR_INVALID, "bert: pad_token_id = %lld is not a row of the %lld-row word "
                            "embedding (vocab_size); expected -1 (none) or below it", (long long)c->pad_token_id,
                            (long long)c->vocab_size);
    enum problem p = PROBLEM_SINGLE;
    rc = problem_of(c, &p, err);
    if (rc) return rc;
    if (o->task == TR_TASK_FIT && p == PROBLEM_SINGLE && c->num_labels < 2)
        return tr_error_set(err, TR_ERR_INVALID,
                            "bert: fit with problem_type = single_label_classification and num_labels = 1: the "
                            "cross-entropy over one class is 0 whatever the weights, so nothing would train; use "
                            "num_labels >= 2, or problem_type = regression (transformers' choice for one label)");
    if (!tr_dtype_is_float(o->dtype) || o->dtype == TR_DTYPE_F64)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "bert: dtype %s is not provided (f32, bf16 or f16)",
                            tr_dtype_name(o->dtype));
    return TR_OK;
}

/* HF nn.Linear inside scope `name`: x (..., in) · weight (out, in)ᵀ + bias (out); with
 * target `bit` in lr's mask, plus peft's LoRA term scale·(x·Aᵀ)·Bᵀ added last (as peft
 * does), so zero B leaves the output bit for bit the base layer's. bit < 0: never. */
static int linear(struct tr_graph *g, int x, int64_t in, int64_t out, enum tr_dtype dt, const char *name,
                  const struct lora *lr, int bit) {
    int64_t ws[2] = {out, in}, bs[1] = {out};
    int lora = lr && bit >= 0 && lr->rank > 0 && (lr->mask & (1u << bit));
    tr_graph_push_scope(g, "%s", name);
    int w = tr_param(g, "weight", dt, 2, ws, 0.0f, 0.02f);
    int b = tr_param(g, "bias", dt, 1, bs, 0.0f, 0.02f);
    int a = -1, bb = -1;
    if (lora) {
        int64_t as[2] = {lr->rank, in}, bsh[2] = {out, lr->rank};
        a = tr_param(g, "lora_A.weight", dt, 2, as, 0.0f, (float)(1.0 / (double)lr->rank));
        bb = tr_param(g, "lora_B.weight", dt, 2, bsh, 0.0f, 0.0f);
        tr_param_set_fresh(g, a);  /* a base checkpoint has no adapters */
        tr_param_set_fresh(g, bb);
    }
    tr_graph_pop_scope(g);
    int y = tr_add(g, tr_matmul(g, x, w, 0, 1), b);
    if (lora) {
        int d = tr_matmul(g, tr_matmul(g, x, a, 0, 1), bb, 0, 1);
        y = tr_add(g, y, tr_scale(g, d, lr->scale, 0.0f));
    }
    if (y >= 0) tr_graph_set_name(g, y, name);
    return y;
}

static int layer_norm(struct tr_graph *g, int x, int64_t d, enum tr_dtype dt, double eps, const char *name) {
    return tr_nn_layer_norm(g, x, d, dt, (float)eps, name);
}

/* One post-LN encoder layer; x (B,T,D), mask (B,1,1,T) additive. */
static int encoder_layer(struct tr_graph *g, const struct tr_bert_config *c, const struct lora *lr,
                         enum tr_dtype dt, int64_t B, int64_t T, int x, int mask) {
    const int64_t D = c->hidden_size, H = c->num_attention_heads, Dh = D / H;
    const int64_t split[4] = {B, T, H, Dh}, merged[3] = {B, T, D};
    const int perm[4] = {0, 2, 1, 3}; /* (B,T,H,Dh) <-> (B,H,T,Dh) */
    tr_graph_push_scope(g, "attention");
    tr_graph_push_scope(g, "self");
    int qkv[3];
    const char *names[3] = {"query", "key", "value"};
    for (int i = 0; i < 3; i++)
        qkv[i] = tr_transpose(g, tr_reshape(g, linear(g, x, D, D, dt, names[i], lr, LORA_QUERY + i), 4, split), 4, perm);
    int ctx = tr_attention(g, qkv[0], qkv[1], qkv[2], mask, tr_attention_default_scale(Dh), 0, 0);
    ctx = tr_reshape(g, tr_transpose(g, ctx, 4, perm), 3, merged);
    tr_graph_pop_scope(g);
    tr_graph_push_scope(g, "output");
    int h = tr_add(g, linear(g, ctx, D, D, dt, "dense", lr, LORA_ATTENTION_OUTPUT), x);
    h = layer_norm(g, h, D, dt, c->layer_norm_eps, "LayerNorm");
    tr_graph_pop_scope(g);
    tr_graph_pop_scope(g);

    tr_graph_push_scope(g, "intermediate");
    int f = tr_nn_act(g, c->hidden_act, linear(g, h, D, c->intermediate_size, dt, "dense", lr, LORA_INTERMEDIATE));
    tr_graph_pop_scope(g);
    tr_graph_push_scope(g, "output");
    int y = tr_add(g, linear(g, f, c->intermediate_size, D, dt, "dense", lr, LORA_OUTPUT), h);
    y = layer_norm(g, y, D, dt, c->layer_norm_eps, "LayerNorm");
    tr_graph_pop_scope(g);
    return y;
}

/* The predict graph, inputs and outputs included; *logits_out gets the logits node. The
 * caller has validated c and o. */
static int bert_graph(const struct tr_bert_config *c, const struct lora *lr, const struct tr_build_opts *o,
                      struct tr_graph *g, int *logits_out, struct tr_error *err) {
    int rc;
    const enum tr_dtype dt = o->dtype;
    const int64_t B = o->batch, T = o->seq_len, D = c->hidden_size;
    const int64_t bt[2] = {B, T};

    int ids = tr_input(g, "input_ids", TR_DTYPE_I32, 2, bt);
    int keep = tr_input(g, "attention_mask", TR_DTYPE_F32, 2, bt);
    int types = tr_input(g, "token_type_ids", TR_DTYPE_I32, 2, bt);

    int32_t *pos_ids = malloc(sizeof(int32_t) * (size_t)T);
    if (!pos_ids) return tr_error_set(err, TR_ERR_NOMEM, "bert: no memory for %lld position ids", (long long)T);
    for (int64_t t = 0; t < T; t++) pos_ids[t] = (int32_t)t;
    int pos = tr_const(g, "position_ids", TR_DTYPE_I32, 1, &T, pos_ids);
    free(pos_ids);

    /* 1 keep / 0 pad -> 0 / -1e9 added to the scores, kept in f32 (the attention op
     * takes an f32 mask whatever q's dtype), broadcast over heads and queries. transformers'
     * mask is now the dtype's minimum: its older -10000 let a padded key through once the
     * scores reach 1e4 (a diverging fit). */
    const int64_t ms[4] = {B, 1, 1, T};
    int mask = tr_reshape(g, tr_scale(g, keep, 1e9f, -1e9f), 4, ms);
    if (mask >= 0) tr_graph_set_name(g, mask, "extended_attention_mask");

    tr_graph_push_scope(g, "bert");
    tr_graph_push_scope(g, "embeddings");
    const int64_t wsh[2] = {c->vocab_size, D}, psh[2] = {c->max_position_embeddings, D},
                  tsh[2] = {c->type_vocab_size, D};
    int wte = tr_param(g, "word_embeddings.weight", dt, 2, wsh, 0.0f, 0.02f);
    int wpe = tr_param(g, "position_embeddings.weight", dt, 2, psh, 0.0f, 0.02f);
    int wtt = tr_param(g, "token_type_embeddings.weight", dt, 2, tsh, 0.0f, 0.02f);
    /* HF's order: words + token types, then + positions (T,D) broadcast over the batch.
     * One node per statement, so node order does not depend on argument evaluation. */
    int words = tr_embedding_pad(g, wte, ids, c->pad_token_id);
    int type_emb = tr_embedding(g, wtt, types);
    int x = tr_add(g, words, type_emb);
    x = tr_add(g, x, tr_embedding(g, wpe, pos));
    x = layer_norm(g, x, D, dt, c->layer_norm_eps, "LayerNorm");
    tr_graph_pop_scope(g);

    for (int64_t l = 0; l < c->num_hidden_layers; l++) {
        tr_graph_push_scope(g, "encoder.layer.%lld", (long long)l);
        x = encoder_layer(g, c, lr, dt, B, T, x, mask);
        tr_graph_pop_scope(g);
    }
    int last_hidden = x;

    tr_graph_push_scope(g, "pooler");
    const int64_t bd[2] = {B, D};
    int first = tr_reshape(g, tr_slice(g, x, 1, 0, 1, 1), 2, bd);
    int pooled = tr_unary(g, TR_OP_TANH, linear(g, first, D, D, dt, "dense", NULL, -1));
    tr_graph_pop_scope(g);
    tr_graph_pop_scope(g);

    int logits = linear(g, pooled, D, c->num_labels, dt, "classifier", NULL, -1);

    if (o->task != TR_TASK_FIT) { /* fit's one output is the loss (train.h) */
        tr_graph_set_output(g, logits, "logits");
        tr_graph_set_output(g, last_hidden, "last_hidden_state");
        tr_graph_set_output(g, pooled, "pooler_output");
    }
    *logits_out = logits;
    rc = tr_graph_status(g, err);
    if (rc) return tr_error_prefix(err, "bert");
    return TR_OK;
}

static int bert_build(const void *config, const struct tr_build_opts *o, struct tr_graph *g, struct tr_error *err) {
    const struct tr_bert_config *c = config;
    struct lora lr;
    int rc = bert_validate(c, o, err);
    if (!rc) rc = lora_validate(c, &lr, err);
    if (rc) return rc;
    if (o->task == TR_TASK_FIT) {
        int loss;
        return tr_bert_build_classifier_loss(c, o, g, &loss, err);
    }
    if (o->task != TR_TASK_PREDICT)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "bert: task '%s' is not provided (bert offers: predict, fit)",
                            tr_task_name(o->task));
    int logits;
    return bert_graph(c, &lr, o, g, &logits, err);
}

/* Input "labels" and fit's loss on logits (B,L), as BertForSequenceClassification
 * computes it for problem p; the float losses in f32 whatever the model's dtype. */
static int loss_of(struct tr_graph *g, enum problem p, int logits, int64_t B, int64_t L) {
    if (p == PROBLEM_SINGLE) {
        const int64_t b[1] = {B};
        return tr_cross_entropy(g, logits, tr_input(g, "labels", TR_DTYPE_I32, 1, b), -100);
    }
    const int64_t bl[2] = {B, L}, n = B * L;
    int x = tr_node_dtype(g, logits) == TR_DTYPE_F32 ? logits : tr_cast(g, logits, TR_DTYPE_F32);
    if (p == PROBLEM_REGRESSION) { /* MSELoss; one label: logits.squeeze() against labels (B) */
        if (L == 1) x = tr_reshape(g, x, 1, bl);
        return tr_mse(g, x, tr_input(g, "labels", TR_DTYPE_F32, L == 1 ? 1 : 2, bl));
    }
    /* BCEWithLogitsLoss: the mean of softplus(x) - x·y. softplus(x) = log(1 + e^x) is the
     * cross-entropy of the logits (0, x) against class 0, so the fused, stable
     * CROSS_ENTROPY (and its gradient, sigmoid(x)) computes it on every backend with no
     * op of its own; the rest is a product and a mean. */
    int y = tr_input(g, "labels", TR_DTYPE_F32, 2, bl);
    float *zeros = calloc((size_t)n, sizeof *zeros);
    if (!zeros) return tr_const(g, "bce.zeros", TR_DTYPE_F32, 0, NULL, NULL); /* fails the graph: no data */
    const int64_t bl1[3] = {B, L, 1}, pairs[2] = {n, 2};
    int zero = tr_const(g, "bce.zero_logit", TR_DTYPE_F32, 3, bl1, zeros);
    int class0 = tr_const(g, "bce.class0", TR_DTYPE_I32, 1, &n, zeros); /* 0.0f and (int32_t)0: both all-zero bits */
    free(zeros);
    const int pair[2] = {zero, tr_reshape(g, x, 3, bl1)};
    int softplus = tr_cross_entropy(g, tr_reshape(g, tr_concat(g, 2, pair, 2), 2, pairs), class0, TR_IGNORE_NONE);
    int xy = tr_reduce(g, TR_OP_MEAN, tr_reshape(g, tr_mul(g, x, y), 1, &n), 0, 0);
    return tr_sub(g, softplus, xy);
}

int tr_bert_build_classifier_loss(const struct tr_bert_config *c, const struct tr_build_opts *o, struct tr_graph *g,
                                  int *loss, struct tr_error *err) {
    struct lora lr;
    int rc = bert_validate(c, o, err);
    if (!rc) rc = lora_validate(c, &lr, err);
    if (rc) return rc;
    int logits;
    rc = bert_graph(c, &lr, o, g, &logits, err);
    if (rc) return rc;
    enum problem p = PROBLEM_SINGLE;
    problem_of(c, &p, err); /* validated */
    int l = loss_of(g, p, logits, o->batch, c->num_labels);
    if (l >= 0) tr_graph_set_name(g, l, "loss");
    rc = tr_graph_status(g, err);
    if (rc) return tr_error_prefix(err, "bert: classifier loss");
    *loss = l;
    return TR_OK;
}

static int is_trainable(const char *name, int lora) {
    if (!lora) return 1;
    return strstr(name, ".lora_A.weight") || strstr(name, ".lora_B.weight") || strcmp(name, "classifier.weight") == 0 ||
           strcmp(name, "classifier.bias") == 0;
}

int tr_bert_trainable_params(const struct tr_bert_config *c, const struct tr_graph *g, int *ids, int max, int *n,
                             struct tr_error *err) {
    if (!c || !g || !n || max < 0 || (max > 0 && !ids))
        return tr_error_set(err, TR_ERR_INVALID, "tr_bert_trainable_params: NULL argument or max < 0");
    int lora = c->lora_rank > 0, k = 0;
    for (int i = 0; i < tr_graph_n_params(g); i++) {
        int id = tr_graph_param(g, i);
        const char *name = tr_node_name(g, id);
        if (!name || !is_trainable(name, lora)) continue;
        if (k < max) ids[k] = id;
        k++;
    }
    *n = k;
    if (k > max)
        return tr_error_set(err, TR_ERR_INVALID, "tr_bert_trainable_params: %d trainable parameters, room for %d",
                            k, max);
    return TR_OK;
}

static int bert_trainable(const void *config, const struct tr_graph *g, int *ids, int max, int *n,
                          struct tr_error *err) {
    return tr_bert_trainable_params(config, g, ids, max, n, err);
}

static int check_input(const struct tr_tensor *t, const char *name, enum tr_dtype dt, int64_t B, int64_t T,
                       struct tr_error *err) {
    if (t->dtype != (int32_t)dt || t->ndim != 2 || t->shape[0] != B || t->shape[1] != T || !t->data ||
        t->device != TR_DEVICE_CPU || !tr_tensor_is_contiguous(t)) {
        char sh[96];
        return tr_error_set(err, TR_ERR_SHAPE, "bert: input '%s' is %s%s, expected a contiguous host %s[%lld,%lld]",
                            name, tr_dtype_name((enum tr_dtype)t->dtype),
                            tr_shape_str(t->ndim, t->shape, sh, sizeof sh), tr_dtype_name(dt), (long long)B,
                            (long long)T);
    }
    return TR_OK;
}

int tr_bert_tokens_kept(const struct tr_bert_config *c, int64_t b, int64_t seq_len) {
    int64_t pad = (int64_t)floor((double)(b % 4) * c->pad_fraction * (double)seq_len);
    int64_t keep = seq_len - pad;
    return (int)(keep < 1 ? 1 : keep);
}

static int bert_make_inputs(const void *config, const struct tr_build_opts *o, uint64_t seed, int n,
                            struct tr_tensor *inputs, struct tr_error *err) {
    const struct tr_bert_config *c = config;
    const int64_t B = o->batch, T = o->seq_len;
    const int want = o->task == TR_TASK_FIT ? 4 : 3;
    if (n != want)
        return tr_error_set(err, TR_ERR_INVALID, "bert: %d inputs given, expected %d (input_ids, attention_mask, "
                            "token_type_ids%s)", n, want, want == 4 ? ", labels" : "");
    enum problem p = PROBLEM_SINGLE;
    int rc = want == 4 ? problem_of(c, &p, err) : TR_OK;
    if (rc) return rc;
    const int64_t L = c->num_labels;
    const int lab_nd = p == PROBLEM_SINGLE || (p == PROBLEM_REGRESSION && L == 1) ? 1 : 2;
    const enum tr_dtype lab_dt = p == PROBLEM_SINGLE ? TR_DTYPE_I32 : TR_DTYPE_F32;
    if (want == 4 && (inputs[3].dtype != (int32_t)lab_dt || inputs[3].ndim != lab_nd || inputs[3].shape[0] != B ||
                      (lab_nd == 2 && inputs[3].shape[1] != L) || !inputs[3].data))
        return lab_nd == 1 ? tr_error_set(err, TR_ERR_SHAPE, "bert: input 'labels' is not a host %s[%lld]",
                                          tr_dtype_name(lab_dt), (long long)B)
                           : tr_error_set(err, TR_ERR_SHAPE, "bert: input 'labels' is not a host %s[%lld,%lld]",
                                          tr_dtype_name(lab_dt), (long long)B, (long long)L);
    rc = check_input(&inputs[0], "input_ids", TR_DTYPE_I32, B, T, err);
    if (!rc) rc = check_input(&inputs[1], "attention_mask", TR_DTYPE_F32, B, T, err);
    if (!rc) rc = check_input(&inputs[2], "token_type_ids", TR_DTYPE_I32, B, T, err);
    if (rc) return rc;
    int32_t *ids = inputs[0].data, *types = inputs[2].data;
    float *keep = inputs[1].data;
    const uint64_t key = tr_hash_str("input_ids");
    const int32_t second_type = c->type_vocab_size > 1 ? 1 : 0;
    for (int64_t b = 0; b < B; b++) {
        int64_t kept = tr_bert_tokens_kept(c, b, T);
        for (int64_t t = 0; t < T; t++) {
            int64_t i = b * T + t;
            int64_t id = (int64_t)(tr_rng_uniform(seed, key, (uint64_t)i) * (double)c->vocab_size);
            ids[i] = (int32_t)(id < c->vocab_size ? id : c->vocab_size - 1);
            keep[i] = t < kept ? 1.0f : 0.0f;
            types[i] = t < T / 2 ? 0 : second_type;
        }
    }
    /* fit: labels a fixed function of the tokens (the first token's id), so the task can
     * be learned and a falling loss means learning: a class; a label j in [0,1] (regression)
     * or in {0,1} (multi-label) from the id's residue mod j + 2. */
    for (int64_t b = 0; want == 4 && b < B; b++) {
        const int32_t first = ids[b * T];
        if (p == PROBLEM_SINGLE) {
            ((int32_t *)inputs[3].data)[b] = first % (int32_t)L;
            continue;
        }
        for (int64_t j = 0; j < L; j++) {
            const int64_t m = first % (j + 2);
            ((float *)inputs[3].data)[b * L + j] = p == PROBLEM_MULTI ? (float)(m == 0) : (float)m / (float)(j + 1);
        }
    }
    return TR_OK;
}

/* BertConfig's defaults (transformers 5.25) for the keys read here: what a key the file
 * leaves out means. Labels: 2 (PretrainedConfig's), where neither id2label nor num_labels
 * is given. */
static const char BERT_DEFAULTS[] =
    "{\"vocab_size\": 30522, \"hidden_size\": 768, \"num_hidden_layers\": 12, \"num_attention_heads\": 12,"
    " \"intermediate_size\": 3072, \"hidden_act\": \"gelu\", \"max_position_embeddings\": 512,"
    " \"type_vocab_size\": 2, \"layer_norm_eps\": 1e-12, \"pad_token_id\": 0,"
    " \"position_embedding_type\": \"absolute\"}";

/* [model] hf_config = PATH: transformers' BertConfig config.json (bert-base-cased's, or a
 * BertForSequenceClassification's): the shapes by their names, a key left out BertConfig's
 * default; num_labels from id2label as transformers counts it; pad_token_id null is no
 * padding row. What trident's BERT is not (an activation it does not compute, another
 * position embedding, a decoder) is refused by its key. */
static int bert_read_hf_config(void *config, const char *path, struct tr_error *err) {
    cJSON *root;
    int rc = tr_hf_json_load(path, &root, err);
    if (rc) return rc;
    struct tr_bert_config *c = config;
    rc = tr_hf_json_defaults(root, path, BERT_DEFAULTS, err);
    const cJSON *id2label = cJSON_GetObjectItemCaseSensitive(root, "id2label"),
                *n_labels = cJSON_GetObjectItemCaseSensitive(root, "num_labels");
    if (!rc && (!id2label || cJSON_IsNull(id2label)) && (!n_labels || cJSON_IsNull(n_labels))) c->num_labels = 2;
    static const char *const trident_only[] = {"pad_fraction", "lora_rank", "lora_alpha", "lora_targets", NULL};
    const cJSON *pt = cJSON_GetObjectItemCaseSensitive(root, "problem_type");
    if (!rc && pt && cJSON_IsNull(pt)) cJSON_DeleteItemFromObjectCaseSensitive(root, "problem_type"); /* inferred */
    if (!rc) rc = tr_hf_json_expect_str(root, path, "model_type", "bert", err);
    if (!rc) rc = tr_hf_json_expect_str(root, path, "position_embedding_type", "absolute", err);
    if (!rc) rc = tr_hf_json_expect_bool(root, path, "is_decoder", 0, err);
    if (!rc) rc = tr_hf_json_expect_bool(root, path, "add_cross_attention", 0, err);
    if (!rc) rc = tr_hf_json_apply(root, path, bert_keys, (int)(sizeof bert_keys / sizeof bert_keys[0]), config,
                                   trident_only, err);
    if (!rc && !tr_nn_act_known(c->hidden_act))
        rc = tr_error_set(err, TR_ERR_UNSUPPORTED, "'%s': \"hidden_act\" = %.63s: not provided (%s)", path,
                          c->hidden_act, TR_NN_ACTS);
    const cJSON *pad = cJSON_GetObjectItemCaseSensitive(root, "pad_token_id");
    if (!rc && cJSON_IsNull(pad)) c->pad_token_id = -1;
    const cJSON *labels = cJSON_GetObjectItemCaseSensitive(root, "id2label");
    if (!rc && labels && !cJSON_IsNull(labels)) {
        if (!cJSON_IsObject(labels) || cJSON_GetArraySize(labels) < 1)
            rc = tr_error_set(err, TR_ERR_INVALID, "'%s': \"id2label\" is not an object of at least one label", path);
        else if (cJSON_IsNumber(n_labels) && n_labels->valuedouble != cJSON_GetArraySize(labels))
            /* transformers: "num_labels=5 which is incompatible to the id2label map of length 3", and
             * num_labels wins (its id2label made anew, LABEL_0 ..) */
            fprintf(stderr, "trident: note: '%s': \"num_labels\" = %g and an \"id2label\" of %d labels: %g "
                    "labels, as transformers takes them\n", path, n_labels->valuedouble, cJSON_GetArraySize(labels),
                    n_labels->valuedouble);
        else c->num_labels = cJSON_GetArraySize(labels);
    }
    cJSON_Delete(root);
    return rc;
}

const struct tr_model_desc tr_model_bert = {
    .name = "bert",
    .description = "BertForSequenceClassification (Hugging Face names; Keras bert_base_en classifier)",
    .config_size = sizeof(struct tr_bert_config),
    TR_MODEL_TABLES(bert_keys, bert_presets),
    .tasks = 1u << TR_TASK_PREDICT | 1u << TR_TASK_FIT,
    .build = bert_build,
    .trainable = bert_trainable,
    .make_inputs = bert_make_inputs,
    .read_hf_config = bert_read_hf_config,
    .lora_modules = lora_modules,
};
