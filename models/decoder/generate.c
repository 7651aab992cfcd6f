/* The generate task's passes for the decoder LLMs (model.h, struct tr_generate_i). The
 * cache has L = max_length - 1 slots, n_cache = 2·layers tensors [B,Hk,L,Dh], cache_axis 2.
 * By default it is state of both passes (decoder.h, cache_slots):
 *
 *   prefill  tr_decoder_build_pass over the T prompt tokens, last_logits: inputs
 *            input_ids, position_ids, attention_mask [B,T]; output logits [B,V]; writes
 *            its keys and values into slots 0 .. T-1 of the PARAMs cache.<l>.key / .value
 *   decode   one token, full_mask: inputs input_ids, position_ids [B,1], attention_mask
 *            [B,1,L], cache_pos i32 [1] (the fed token's position: its slot); output
 *            logits [B,V]; writes its key and value into slot cache_pos, then attends
 *            over the whole cache
 *
 * With cache_inputs (the host holds the cache):
 *   prefill  the same, present: outputs logits, then present.<l>.key / .value [B,Hk,T,Dh]
 *   decode   inputs input_ids, position_ids [B,1], attention_mask [B,1,L+1], then
 *            past_key_values.<l>.key / .value [B,Hk,L,Dh]; outputs logits [B,V] and
 *            present.<l>.* [B,Hk,1,Dh]; attention over the cache and then the new key
 *
 * The decode mask carries everything the attention op does not: the prompt's padding,
 * slots not written yet (or stale from an earlier call), and Mistral's window (a key at
 * position j is seen from position i when i - j < sliding_window, as transformers does);
 * the new key is always seen. Positions continue the prompt's (HF's cumsum(mask) - 1):
 * the last prompt token's position + the tokens since. */
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include "decoder.h"
#include "models.h"
#include "tokenizer.h"

static const char *family_of(const struct tr_decoder_config *c) {
    return c->family == TR_DECODER_GEMMA ? "gemma" : "mistral";
}

static int check_opts(const struct tr_decoder_config *c, const struct tr_generate_opts *o, struct tr_error *err) {
    const char *m = family_of(c);
    if (o->batch < 1 || o->prompt_len < 1)
        return tr_error_set(err, TR_ERR_INVALID, "%s: batch = %lld, prompt_len = %lld, expected both at least 1", m,
                            (long long)o->batch, (long long)o->prompt_len);
    if (o->max_length <= o->prompt_len)
        return tr_error_set(err, TR_ERR_INVALID,
                            "%s: max_length = %lld is not longer than prompt_len = %lld (max_length counts the "
                            "prompt and the new tokens)",
                            m, (long long)o->max_length, (long long)o->prompt_len);
    return TR_OK;
}

static int gen_build(const void *config, const struct tr_generate_opts *o, struct tr_graph *prefill,
                     struct tr_graph *decode, struct tr_generate_plan *plan, struct tr_error *err) {
    struct tr_decoder_config c;
    int rc = tr_decoder_resolve(config, &c, err);
    if (rc) return rc;
    rc = check_opts(&c, o, err);
    if (rc) return rc;
    const struct tr_build_opts bo = {.task = TR_TASK_GENERATE, .dtype = o->dtype, .batch = o->batch,
                                     .seq_len = o->prompt_len};
    rc = tr_decoder_validate(&c, &bo, err);
    if (rc) return rc;
    struct tr_decoder_lora lr;
    if ((rc = tr_decoder_lora_resolve(&c, &lr, err))) return rc;
    const struct tr_decoder_lora *lora = c.lora_predict && lr.rank > 0 ? &lr : NULL; /* the same adapters in both */
    const int64_t P = o->max_length - 1;
    const int state = !o->cache_inputs;
    const struct tr_decoder_pass pre = {.dtype = o->dtype, .batch = o->batch, .seq_len = o->prompt_len,
                                        .present = !state, .last_logits = 1, .cache_slots = state ? P : 0,
                                        .lora = lora};
    const struct tr_decoder_pass dec = {.dtype = o->dtype, .batch = o->batch, .seq_len = 1,
                                        .past_len = state ? 0 : P, .full_mask = 1, .present = !state,
                                        .last_logits = 1, .cache_slots = state ? P : 0, .lora = lora};
    rc = tr_decoder_build_pass(&c, &pre, prefill, NULL, err);
    if (rc) return tr_error_prefix(err, "prefill");
    rc = tr_decoder_build_pass(&c, &dec, decode, NULL, err);
    if (rc) return tr_error_prefix(err, "decode");
    *plan = (struct tr_generate_plan){.n_prompt_inputs = 3, .n_step_inputs = state ? 4 : 3,
                                      .n_cache = 2 * (int)c.num_hidden_layers, .cache_axis = 2, .cache_slots = P,
                                      .cache_state = state};
    return TR_OK;
}

static int gen_make_prompt(const void *config, const struct tr_generate_opts *o, uint64_t seed, int n,
                           struct tr_tensor *inputs, struct tr_error *err) {
    /* The predict batch at seq_len T: sample b left-padded by floor((b mod 4)·pad_fraction·T). */
    const struct tr_build_opts bo = {.task = TR_TASK_GENERATE, .dtype = o->dtype, .batch = o->batch,
                                     .seq_len = o->prompt_len};
    int rc = tr_decoder_make_inputs(config, &bo, seed, n, inputs, err);
    if (rc || !o->prompt_ids) return rc;
    /* Prompts given as text: sample b's is prompt b mod n_prompts, left-padded to T as
     * transformers pads a batch for generate (positions cumsum(mask) - 1, the padding's 1
     * as the synthetic ones) */
    struct tr_decoder_config c;
    if ((rc = tr_decoder_resolve(config, &c, err)) != TR_OK) return rc;
    const int64_t B = o->batch, T = o->prompt_len;
    int32_t *ids = inputs[0].data, *pos = inputs[1].data;
    float *mask = inputs[2].data;
    for (int64_t b = 0; b < B; b++) {
        const int k = o->n_prompts > 0 ? (int)(b % o->n_prompts) : 0;
        const int64_t P = o->n_prompts > 0 ? o->n_prompt_ids[k] : 0, pad = T - P;
        if (P < 1 || P > T)
            return tr_error_set(err, TR_ERR_INVALID, "%s: a prompt of %lld tokens for prompt_len %lld", family_of(&c),
                                (long long)P, (long long)T);
        for (int64_t t = 0; t < T; t++) {
            const int64_t i = b * T + t;
            ids[i] = t < pad ? (int32_t)(c.pad_token_id >= 0 ? c.pad_token_id : 0) : o->prompt_ids[k][t - pad];
            pos[i] = t < pad ? 1 : (int32_t)(t - pad);
            mask[i] = t < pad ? 0.0f : 1.0f;
        }
    }
    return TR_OK;
}

/* ---- text: the model's tokenizer.json (tokenizer.h) and its end-of-sequence ids ---- */

struct text {
    struct tr_hf_tokenizer *tok;
    int64_t eos[8];
    int n_eos;
};

static void text_close(void *p) {
    struct text *t = p;
    if (!t) return;
    tr_hf_tokenizer_free(t->tok);
    free(t);
}

static int text_open(const void *config, const char *path, void **out, struct tr_error *err) {
    struct tr_decoder_config c;
    int rc = tr_decoder_resolve(config, &c, err);
    struct text *t = rc ? NULL : calloc(1, sizeof *t);
    if (!rc && !t) rc = tr_error_set(err, TR_ERR_NOMEM, "no memory");
    if (!rc && c.eos_token_id[0])
        rc = tr_model_int_list(family_of(&c), "eos_token_id", c.eos_token_id, sizeof c.eos_token_id, 0,
                               c.vocab_size - 1, "1", t->eos, 8, &t->n_eos, err);
    if (!rc) rc = tr_hf_tokenizer_load(path, &t->tok, err);
    if (!rc && tr_hf_tokenizer_n_ids(t->tok) > c.vocab_size)
        rc = tr_error_set(err, TR_ERR_INVALID, "%s: the tokenizer '%s' has %d ids, the model's vocab_size is %lld: "
                          "not this model's tokenizer", family_of(&c), path, (int)tr_hf_tokenizer_n_ids(t->tok),
                          (long long)c.vocab_size);
    if (rc) {
        text_close(t);
        return rc;
    }
    *out = t;
    return TR_OK;
}

static int text_encode(void *p, const char *text, int32_t **ids, int *n, struct tr_error *err) {
    int rc = tr_hf_encode(((struct text *)p)->tok, text, ids, n, err);
    if (!rc && *n == 0) {
        free(*ids);
        *ids = NULL;
        rc = tr_error_set(err, TR_ERR_INVALID, "'%s' is no token at all (a prompt needs one)", text);
    }
    return rc;
}

static int text_decode(void *p, const int32_t *ids, int n, char **text, int *used, struct tr_error *err) {
    const struct text *t = p;
    int k = 0, end = 0;
    for (; k < n && !end; k += !end)
        for (int e = 0; e < t->n_eos; e++) end |= ids[k] == t->eos[e];
    *used = k;
    /* the end-of-sequence token decoded too: a special one is skipped there, an ordinary
     * token named as one (a generation_config's) kept, as transformers' decode keeps it */
    return tr_hf_decode(t->tok, ids, k + (end && k < n), text, err);
}

static int check_step_tensor(const char *m, const struct tr_tensor *t, const char *name, enum tr_dtype dt, int ndim,
                             const int64_t *shape, struct tr_error *err) {
    int ok = t->dtype == (int32_t)dt && t->ndim == ndim && t->data && tr_tensor_is_contiguous(t);
    for (int d = 0; ok && d < ndim; d++) ok = t->shape[d] == shape[d];
    if (ok) return TR_OK;
    char have[96], want[96];
    return tr_error_set(err, TR_ERR_SHAPE, "%s: step input '%s' is %s%s, expected a contiguous host %s%s", m, name,
                        tr_dtype_name((enum tr_dtype)t->dtype), tr_shape_str(t->ndim, t->shape, have, sizeof have),
                        tr_dtype_name(dt), tr_shape_str(ndim, shape, want, sizeof want));
}

static int gen_step_inputs(const void *config, const struct tr_generate_opts *o, const struct tr_tensor *prompt,
                           int64_t pos, const int32_t *tokens, int n, struct tr_tensor *inputs,
                           struct tr_error *err) {
    struct tr_decoder_config c;
    int rc = tr_decoder_resolve(config, &c, err);
    if (rc) return rc;
    const char *m = family_of(&c);
    const int64_t B = o->batch, T = o->prompt_len, P = o->max_length - 1, W = c.sliding_window;
    const int state = !o->cache_inputs;
    /* the keys the mask covers: the cache's slots (the new key in slot pos), or the
     * cache and then the new key */
    const int64_t K = state ? P : P + 1;
    if (n != 3 + state)
        return tr_error_set(err, TR_ERR_INVALID, "%s: %d step inputs given, expected %d (input_ids, position_ids, "
                            "attention_mask%s)", m, n, 3 + state, state ? ", cache_pos" : "");
    if (pos < T || pos > o->max_length - 2)
        return tr_error_set(err, TR_ERR_INVALID, "%s: decode position %lld is outside [%lld, %lld]", m, (long long)pos,
                            (long long)T, (long long)(o->max_length - 2));
    const int64_t b1[2] = {B, 1}, ms[3] = {B, 1, K}, bt[2] = {B, T}, one[1] = {1};
    rc = check_step_tensor(m, &inputs[0], "input_ids", TR_DTYPE_I32, 2, b1, err);
    if (!rc) rc = check_step_tensor(m, &inputs[1], "position_ids", TR_DTYPE_I32, 2, b1, err);
    if (!rc) rc = check_step_tensor(m, &inputs[2], "attention_mask", TR_DTYPE_F32, 3, ms, err);
    if (!rc && state) rc = check_step_tensor(m, &inputs[3], "cache_pos", TR_DTYPE_I32, 1, one, err);
    if (!rc) rc = check_step_tensor(m, &prompt[1], "prompt position_ids", TR_DTYPE_I32, 2, bt, err);
    if (!rc) rc = check_step_tensor(m, &prompt[2], "prompt attention_mask", TR_DTYPE_F32, 2, bt, err);
    if (rc) return rc;
    int32_t *ids = inputs[0].data, *p = inputs[1].data;
    float *mask = inputs[2].data;
    const int32_t *pos0 = prompt[1].data;
    const float *pad = prompt[2].data;
    for (int64_t b = 0; b < B; b++) {
        ids[b] = tokens[b];
        p[b] = pos0[b * T + T - 1] + (int32_t)(pos - (T - 1));
        float *row = mask + b * K;
        for (int64_t j = 0; j < P; j++) {
            int seen = j < pos && !(j < T && pad[b * T + j] == 0.0f) && (W == 0 || pos - j < W);
            row[j] = seen || (state && j == pos) ? 1.0f : 0.0f;
        }
        if (!state) row[P] = 1.0f;
    }
    if (state) *(int32_t *)inputs[3].data = (int32_t)pos;
    return TR_OK;
}

const struct tr_generate_i tr_decoder_generate = {
    .build = gen_build,
    .make_prompt = gen_make_prompt,
    .step_inputs = gen_step_inputs,
    .text_open = text_open,
    .text_encode = text_encode,
    .text_decode = text_decode,
    .text_close = text_close,
};
