/* Reading a Hugging Face config.json into a decoder config (decoder.h), so a run can say
 * `hf_config = gemma-7b/config.json` and get the published shapes without retyping them (the
 * descriptors' read_hf_config: gemma.c, mistral.c). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "decoder.h"
#include "keys.h"
#include "hf_json.h"

/* An integer key: absent leaves *v; null sets null_value when null_ok, else an error. The
 * bounds are [model]'s for the same key (keys.h), so a config.json cannot pass what an
 * INI line could not (a 2^32-wide model, a million layers). */
static int get_int(const cJSON *root, const char *path, const char *key, int null_ok, int64_t null_value, int64_t *v,
                   struct tr_error *err) {
    static const struct tr_model_key keys[] = {TR_DECODER_KEYS};
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!j) return TR_OK;
    if (cJSON_IsNull(j) && null_ok) {
        *v = null_value;
        return TR_OK;
    }
    double lo = 0, hi = 9.0e15;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (strcmp(keys[i].name, key) == 0) lo = keys[i].min > 0 ? keys[i].min : 0, hi = keys[i].max;
    double d = cJSON_IsNumber(j) ? j->valuedouble : NAN;
    if (!(d >= lo && d <= hi && d == floor(d)))
        return tr_error_set(err, TR_ERR_FORMAT, "'%s': \"%s\" is not an integer from %.17g to %.17g%s", path, key, lo,
                            hi, null_ok ? " or null" : "");
    *v = (int64_t)d;
    return TR_OK;
}

static int get_float(const cJSON *root, const char *path, const char *key, double *v, struct tr_error *err) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!j) return TR_OK;
    if (!cJSON_IsNumber(j) || !isfinite(j->valuedouble))
        return tr_error_set(err, TR_ERR_FORMAT, "'%s': \"%s\" is not a finite number", path, key);
    *v = j->valuedouble;
    return TR_OK;
}

static int get_string(const cJSON *root, const char *path, const char *key, char *v, size_t n, struct tr_error *err) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!j || cJSON_IsNull(j)) return TR_OK;
    if (!cJSON_IsString(j) || strlen(j->valuestring) >= n)
        return tr_error_set(err, TR_ERR_FORMAT, "'%s': \"%s\" is not a string of at most %zu characters", path, key,
                            n - 1);
    memcpy(v, j->valuestring, strlen(j->valuestring) + 1);
    return TR_OK;
}

/* eos_token_id: an integer or a list of them (Gemma 2's [1, 107]) as "1,107"; null "". */
static int get_eos(const cJSON *root, const char *path, char *v, size_t n, struct tr_error *err) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, "eos_token_id");
    if (!j) return TR_OK;
    v[0] = 0;
    if (cJSON_IsNull(j)) return TR_OK;
    const int items = cJSON_IsArray(j) ? cJSON_GetArraySize(j) : cJSON_IsNumber(j) ? 1 : -1;
    int ok = items >= 0;
    size_t used = 0;
    for (int i = 0; ok && i < items; i++) {
        const cJSON *e = cJSON_IsArray(j) ? cJSON_GetArrayItem(j, i) : j;
        const double d = cJSON_IsNumber(e) ? e->valuedouble : -1;
        const int k = d >= 0 && d <= 2147483647.0 && d == floor(d)
                          ? snprintf(v + used, n - used, "%s%lld", used ? "," : "", (long long)d) : -1;
        ok = k >= 0 && (size_t)k < n - used;
        used += ok ? (size_t)k : 0;
    }
    if (!ok)
        return tr_error_set(err, TR_ERR_FORMAT, "'%s': \"eos_token_id\" is not a token id, a list of them (at most %zu "
                            "characters written) or null", path, n - 1);
    return TR_OK;
}

/* A bool key: absent leaves *v; null too where null_ok; anything else but true or false is
 * the error. */
static int get_bool(const cJSON *root, const char *path, const char *key, int null_ok, int *v, struct tr_error *err) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!j || (null_ok && cJSON_IsNull(j))) return TR_OK;
    if (!cJSON_IsBool(j)) return tr_error_set(err, TR_ERR_FORMAT, "'%s': \"%s\" is not true or false", path, key);
    *v = cJSON_IsTrue(j);
    return TR_OK;
}

/* rope_theta at the top (transformers 4.x) or in rope_parameters (5.x); a scaled RoPE
 * (linear, dynamic, yarn, llama3 ...) is not what the ROPE op computes. */
static int get_rope(const cJSON *root, const char *path, double *theta, struct tr_error *err) {
    int rc = get_float(root, path, "rope_theta", theta, err);
    if (rc) return rc;
    const char *blocks[2] = {"rope_parameters", "rope_scaling"};
    for (int i = 0; i < 2; i++) {
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(root, blocks[i]);
        if (!b || cJSON_IsNull(b)) continue;
        if (!cJSON_IsObject(b)) return tr_error_set(err, TR_ERR_FORMAT, "'%s': \"%s\" is not an object", path, blocks[i]);
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(b, "rope_type");
        if (!t) t = cJSON_GetObjectItemCaseSensitive(b, "type");
        if (t && !(cJSON_IsString(t) && strcmp(t->valuestring, "default") == 0))
            return tr_error_set(err, TR_ERR_UNSUPPORTED, "'%s': %s.%s = %s: only the default RoPE is provided",
                                path, blocks[i], t->string, cJSON_IsString(t) ? t->valuestring : "(not a string)");
        if (i == 1 && !t)
            return tr_error_set(err, TR_ERR_UNSUPPORTED, "'%s': rope_scaling is set: only the default RoPE is provided",
                                path);
        rc = get_float(b, path, "rope_theta", theta, err);
        if (rc) return rc;
    }
    return TR_OK;
}

static int apply(const cJSON *root, const char *path, struct tr_decoder_config *c, struct tr_error *err) {
    const char *family = c->family == TR_DECODER_GEMMA ? "gemma" : "mistral";
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    if (mt && !(cJSON_IsString(mt) && strcmp(mt->valuestring, family) == 0))
        return tr_error_set(err, TR_ERR_INVALID, "'%s': model_type = %s, expected \"%s\" for model '%s'", path,
                            cJSON_IsString(mt) ? mt->valuestring : "(not a string)", family, family);
    const struct {
        const char *key;
        int64_t *v;
        int null_ok;
    } ints[] = {
        {"vocab_size", &c->vocab_size, 0},
        {"hidden_size", &c->hidden_size, 0},
        {"intermediate_size", &c->intermediate_size, 0},
        {"num_hidden_layers", &c->num_hidden_layers, 0},
        {"num_attention_heads", &c->num_attention_heads, 0},
        {"num_key_value_heads", &c->num_key_value_heads, 0},
        {"head_dim", &c->head_dim, 1},          /* null: hidden_size / heads */
        {"max_position_embeddings", &c->max_position_embeddings, 0},
        {"sliding_window", &c->sliding_window, 1}, /* null: no window */
        {"pad_token_id", &c->pad_token_id, 1},     /* null: no padding row */
    };
    int rc = TR_OK;
    for (size_t i = 0; !rc && i < sizeof ints / sizeof ints[0]; i++)
        rc = get_int(root, path, ints[i].key, ints[i].null_ok, ints[i].v == &c->pad_token_id ? -1 : 0, ints[i].v, err);
    if (!rc) rc = get_float(root, path, "rms_norm_eps", &c->rms_norm_eps, err);
    if (!rc) rc = get_rope(root, path, &c->rope_theta, err);
    /* GemmaConfig's biased projections; its bidirectional attention (transformers 5.x) is not
     * trident's. MistralConfig has neither: a Mistral file's attention_bias is ignored, as
     * transformers ignores it. */
    if (!rc && c->family == TR_DECODER_GEMMA) rc = get_bool(root, path, "attention_bias", 1, &c->attention_bias, err);
    if (!rc && c->family == TR_DECODER_GEMMA)
        rc = tr_hf_json_expect_bool(root, path, "use_bidirectional_attention", 0, err);
    if (!rc) rc = get_string(root, path, "hidden_act", c->hidden_act, sizeof c->hidden_act, err);
    if (!rc) rc = get_eos(root, path, c->eos_token_id, sizeof c->eos_token_id, err);
    if (rc) return rc;
    /* As transformers' GemmaConfig: the official files say "gelu" and mean the tanh form. */
    if (c->family == TR_DECODER_GEMMA && strcmp(c->hidden_act, "gelu") == 0)
        memcpy(c->hidden_act, "gelu_pytorch_tanh", sizeof "gelu_pytorch_tanh");
    return get_bool(root, path, "tie_word_embeddings", 0, &c->tie_word_embeddings, err);
}

/* GemmaConfig's and MistralConfig's defaults (transformers 5.25) for the keys read here:
 * what a key the file leaves out means. Mistral's head_dim is derived (hidden_size /
 * heads: null here), its pad_token_id None (no padding row); rope_theta goes in
 * rope_parameters in 5.x, and a file's rope_parameters still win over it. */
static const char GEMMA_DEFAULTS[] =
    "{\"vocab_size\": 256000, \"hidden_size\": 3072, \"intermediate_size\": 24576, \"num_hidden_layers\": 28,"
    " \"num_attention_heads\": 16, \"num_key_value_heads\": 16, \"head_dim\": 256,"
    " \"hidden_act\": \"gelu_pytorch_tanh\", \"max_position_embeddings\": 8192, \"rms_norm_eps\": 1e-06,"
    " \"rope_theta\": 10000.0, \"pad_token_id\": 0, \"eos_token_id\": 1, \"tie_word_embeddings\": true,"
    " \"attention_bias\": false}";
static const char MISTRAL_DEFAULTS[] =
    "{\"vocab_size\": 32000, \"hidden_size\": 4096, \"intermediate_size\": 14336, \"num_hidden_layers\": 32,"
    " \"num_attention_heads\": 32, \"num_key_value_heads\": 8, \"head_dim\": null, \"hidden_act\": \"silu\","
    " \"max_position_embeddings\": 131072, \"rms_norm_eps\": 1e-06, \"rope_theta\": 10000.0,"
    " \"sliding_window\": 4096, \"pad_token_id\": null, \"eos_token_id\": 2, \"tie_word_embeddings\": false}";

/* The generation_config.json beside config.json, as from_pretrained reads it into the
 * model's generation_config: where it names eos_token_id, that is where generate stops
 * (Llama 3 and Gemma 2's instruction-tuned files list more ids there than config.json). */
static int read_generation_config(const char *path, struct tr_decoder_config *c, struct tr_error *err) {
    const char *slash = strrchr(path, '/');
    const int dir = slash ? (int)(slash - path) + 1 : 0;
    char gen[4096];
    struct stat sb;
    if (snprintf(gen, sizeof gen, "%.*sgeneration_config.json", dir, path) >= (int)sizeof gen ||
        stat(gen, &sb) != 0 || !S_ISREG(sb.st_mode))
        return TR_OK;
    cJSON *root = NULL;
    int rc = tr_hf_json_load(gen, &root, err);
    if (!rc) rc = get_eos(root, gen, c->eos_token_id, sizeof c->eos_token_id, err);
    cJSON_Delete(root);
    return rc;
}

/* No prefix of its own: core's names the INI line ("x.ini:4: [model] hf_config = ..."), and
 * every message here names the file. */
int tr_decoder_read_hf_config(const char *path, struct tr_decoder_config *c, struct tr_error *err) {
    cJSON *root;
    int rc = tr_hf_json_load(path, &root, err);
    /* hidden_act, as transformers 5.x reads it (default gelu_pytorch_tanh). Gemma's configs of
     * early 2024 also name the activation hidden_activation, which transformers 4.x's
     * GemmaMLP read and 5.x does not: the published files say "gelu" or "gelu_pytorch_tanh",
     * the same function as 5.x's default once "gelu" is read as Gemma reads it; another
     * value is said, since transformers 5 computes gelu_pytorch_tanh in its place too. */
    const cJSON *ha = rc ? NULL : cJSON_GetObjectItemCaseSensitive(root, "hidden_activation");
    const cJSON *act = rc ? NULL : cJSON_GetObjectItemCaseSensitive(root, "hidden_act");
    if (cJSON_IsString(ha) && (!act || cJSON_IsNull(act)) && strcmp(ha->valuestring, "gelu") != 0 &&
        strcmp(ha->valuestring, "gelu_pytorch_tanh") != 0)
        fprintf(stderr, "trident: warning: '%s': \"hidden_activation\" = %s is not read, as transformers 5 does not "
                "read it: the activation is hidden_act's (absent: gelu_pytorch_tanh); give hidden_act to choose it\n",
                path, ha->valuestring);
    if (!rc) rc = tr_hf_json_defaults(root, path, c->family == TR_DECODER_GEMMA ? GEMMA_DEFAULTS : MISTRAL_DEFAULTS, err);
    if (!rc) rc = apply(root, path, c, err);
    cJSON_Delete(root);
    return rc ? rc : read_generation_config(path, c, err);
}

int tr_decoder_read_hf_config_hook(void *config, const char *path, struct tr_error *err) {
    return tr_decoder_read_hf_config(path, config, err);
}
