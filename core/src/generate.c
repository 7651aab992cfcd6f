/* The generate task (generate.h): its [generate] keys, the two passes and the weights
 * graph, one backend's generator (compiled passes, the cache, the token loop); the runner
 * that puts every backend's generator side by side is generate_bench.c.
 *
 * The cache is state of the passes by default: the generator feeds only the per-token
 * inputs and reads only the logits. With kv_cache = inputs it lives in host memory as the
 * decode pass's cache inputs instead, and the host writes each pass's new entries into it
 * (the report's cache figures say what that costs). */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <time.h>
#include "trident/bench.h"
#include "trident/file.h"
#include "bench_util.h"
#include "trident/generate.h"
#include "trident/kernels.h"
#include "trident/loader.h"
#include "trident/rng.h"
#include "trident/weights.h"

/* ---- [generate] ---- */

#define KEY(field, type, lo, hi, doc) {#field, type, offsetof(struct tr_generate_config, field), lo, hi, doc}
static const struct tr_model_key generate_keys[] = {
    KEY(max_length, TR_KEY_INT, 2, 1e7, "prompt + new tokens"),
    KEY(prompt_len, TR_KEY_INT, 1, 1e7, "prompt tokens (left-padded to it)"),
    KEY(sampling, TR_KEY_STRING, 0, 0, "greedy, top_k or top_p"),
    KEY(top_k, TR_KEY_INT, 0, TR_GENERATE_TOP_K_MAX,
        "top_k sampling draws from the top_k largest logits (given with top_p: the nucleus is among them; 0: no "
        "top_k, as transformers reads it)"),
    KEY(top_p, TR_KEY_FLOAT, 1e-9, 1,
        "top_p sampling draws from the most likely tokens whose probability reaches it (given with top_k: among the "
        "top_k largest)"),
    KEY(temperature, TR_KEY_FLOAT, 1e-6, 1e6, "top_k and top_p sampling divide the logits by it"),
    KEY(seed, TR_KEY_INT, 0, 9007199254740992.0, "top_k and top_p sampling's seed"),
    KEY(kv_cache, TR_KEY_STRING, 0, 0, "state (the passes update it in place) or inputs (host memory, copied in)"),
};

const struct tr_model_key *tr_generate_keys(int *n) {
    *n = (int)(sizeof generate_keys / sizeof generate_keys[0]);
    return generate_keys;
}

static int key_line(const struct tr_config *cfg, const char *key) {
    for (int i = 0; cfg && i < cfg->n_kv; i++)
        if (!strcmp(cfg->kv[i].section, "generate") && !strcmp(cfg->kv[i].key, key)) return cfg->kv[i].line;
    return 0;
}

int tr_generate_config_resolve(const struct tr_config *cfg, uint64_t run_seed, struct tr_generate_config *gc,
                               struct tr_error *err) {
    memset(gc, 0, sizeof *gc);
    gc->max_length = 50;
    gc->prompt_len = 5;
    strcpy(gc->sampling, "greedy");
    gc->top_k = 50;
    gc->top_p = 0.9;
    gc->temperature = 1.0;
    gc->seed = (int64_t)(run_seed & ((1ull << 53) - 1));
    strcpy(gc->kv_cache, "state");
    if (!cfg) return TR_OK;
    const char *file = cfg->file;
    /* prompt and tokenizer are the task graph's (bench.c: they decide prompt_len) */
    static const char *const text_keys[] = {"prompt", "prompts", "tokenizer", NULL};
    int rc = tr_keys_apply_except(cfg, "generate", generate_keys,
                                  (int)(sizeof generate_keys / sizeof generate_keys[0]), "generate", gc, text_keys, err);
    if (rc) return rc;
    if (strcmp(gc->sampling, "greedy") != 0 && strcmp(gc->sampling, "top_k") != 0 && strcmp(gc->sampling, "top_p") != 0)
        return tr_error_set(err, TR_ERR_INVALID, "%s:%d: [generate] sampling = %s: expected greedy, top_k or top_p",
                            file, key_line(cfg, "sampling"), gc->sampling);
    gc->top_k_sampling = strcmp(gc->sampling, "top_k") == 0;
    gc->top_p_sampling = strcmp(gc->sampling, "top_p") == 0;
    if (!gc->top_k_sampling && !gc->top_p_sampling) /* greedy: what only sampling reads is said, as transformers does */
        for (int i = 0; i < cfg->n_kv; i++)
            if (!strcmp(cfg->kv[i].section, "generate") &&
                (!strcmp(cfg->kv[i].key, "top_k") || !strcmp(cfg->kv[i].key, "top_p") ||
                 !strcmp(cfg->kv[i].key, "temperature") || !strcmp(cfg->kv[i].key, "seed")))
                fprintf(stderr, "trident: warning: %s:%d: [generate] %s is read by top_k and top_p sampling; sampling "
                        "= greedy leaves it unread\n", file, cfg->kv[i].line, cfg->kv[i].key);
    if (gc->top_k == 0 && gc->top_k_sampling && !key_line(cfg, "top_p")) { /* no top_k: the whole softmax */
        gc->top_k_sampling = 0, gc->top_p_sampling = 1, gc->top_p = 1.0;
        strcpy(gc->sampling, "top_p"); /* what reports say: the nucleus of p = 1, every token */
    }
    /* both given: transformers' chain, the top_k largest and then the nucleus among them */
    if ((gc->top_k_sampling && key_line(cfg, "top_p")) || (gc->top_p_sampling && key_line(cfg, "top_k") && gc->top_k)) {
        gc->top_p_top_k = gc->top_k;
        gc->top_k_sampling = 0, gc->top_p_sampling = 1;
        strcpy(gc->sampling, "top_k+top_p"); /* what reports say */
    }
    if (strcmp(gc->kv_cache, "state") != 0 && strcmp(gc->kv_cache, "inputs") != 0)
        return tr_error_set(err, TR_ERR_INVALID, "%s:%d: [generate] kv_cache = %s: expected state or inputs", file,
                            key_line(cfg, "kv_cache"), gc->kv_cache);
    gc->cache_inputs = strcmp(gc->kv_cache, "inputs") == 0;
    if (gc->prompt_len >= gc->max_length) {
        int line = key_line(cfg, "prompt_len") ? key_line(cfg, "prompt_len") : key_line(cfg, "max_length");
        return tr_error_set(err, TR_ERR_INVALID,
                            "%s:%d: [generate] prompt_len = %lld, max_length = %lld: expected prompt_len < max_length "
                            "(max_length counts the prompt and the new tokens)",
                            file, line, (long long)gc->prompt_len, (long long)gc->max_length);
    }
    return TR_OK;
}

/* ---- a prompt as text ---- */

/* text->n more prompts' room; 0, or -1 without memory */
static int text_grow(struct tr_generate_text *text, int cap) {
    char **p = realloc(text->prompt, (size_t)cap * sizeof *p);
    if (p) text->prompt = p;
    int32_t **ids = p ? realloc(text->ids, (size_t)cap * sizeof *ids) : NULL;
    if (ids) text->ids = ids;
    int *n = ids ? realloc(text->n_ids, (size_t)cap * sizeof *n) : NULL;
    if (n) text->n_ids = n;
    return n ? 0 : -1;
}

static int text_add(struct tr_generate_text *text, const char *s, size_t len, int *cap) {
    if (text->n == *cap && text_grow(text, *cap = *cap ? 2 * *cap : 8)) return -1;
    char *copy = malloc(len + 1);
    if (!copy) return -1;
    memcpy(copy, s, len);
    copy[len] = 0;
    text->prompt[text->n] = copy, text->ids[text->n] = NULL, text->n_ids[text->n] = 0;
    text->n++;
    return 0;
}

int tr_generate_read_prompts(const char *path, char ***lines, int *n, struct tr_error *err) {
    *lines = NULL, *n = 0;
    FILE *f;
    int rc = tr_fopen_regular(path, &f, err), k = 0;
    if (rc) return rc;
    char *line = NULL, *buf = NULL; /* the prompts one after another, each 0-terminated */
    size_t room = 0, used = 0, cap = 0;
    ssize_t len;
    int lineno = 0;
    for (int first = 1; !rc && (len = getline(&line, &room, f)) >= 0; first = 0) {
        lineno++;
        if (first && len >= 3 && !memcmp(line, "\xEF\xBB\xBF", 3)) /* a UTF-8 byte order mark is not the text's */
            memmove(line, line + 3, (size_t)(len -= 3) + 1);
        if (memchr(line, '\0', (size_t)len)) { /* it would end the prompt there, the rest dropped */
            rc = tr_error_set(err, TR_ERR_FORMAT, "'%s':%d: a NUL byte in the line; expected text", path, lineno);
            break;
        }
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) len--;
        int blank = 1;
        for (ssize_t i = 0; i < len && blank; i++) blank = line[i] == ' ' || line[i] == '\t';
        if (blank) continue;
        if (used + (size_t)len + 1 > cap) {
            char *grown = realloc(buf, cap = 2 * (used + (size_t)len + 1));
            if (!grown) {
                rc = tr_error_set(err, TR_ERR_NOMEM, "no memory");
                break;
            }
            buf = grown;
        }
        memcpy(buf + used, line, (size_t)len);
        buf[used + (size_t)len] = 0;
        used += (size_t)len + 1, k++;
    }
    if (!rc && ferror(f)) rc = tr_error_set(err, TR_ERR_IO, "cannot read '%s'", path);
    free(line);
    fclose(f);
    if (!rc && k == 0) rc = tr_error_set(err, TR_ERR_INVALID, "'%s' holds no prompt (one a line)", path);
    char **v = rc ? NULL : malloc(sizeof *v * (size_t)k + used);
    if (!rc && !v) rc = tr_error_set(err, TR_ERR_NOMEM, "no memory");
    if (!rc) { /* the pointers, then the text they point into */
        char *text = memcpy(v + k, buf, used);
        for (int i = 0; i < k; i++, text += strlen(text) + 1) v[i] = text;
        *lines = v, *n = k;
    }
    free(buf);
    return rc;
}

/* The prompts of a file (tr_generate_read_prompts) added to text. */
static int read_prompts(const char *path, struct tr_generate_text *text, struct tr_error *err) {
    char **lines;
    int n, cap = 0;
    int rc = tr_generate_read_prompts(path, &lines, &n, err);
    for (int i = 0; i < n && !rc; i++)
        if (text_add(text, lines[i], strlen(lines[i]), &cap)) rc = tr_error_set(err, TR_ERR_NOMEM, "no memory");
    free(lines);
    return rc;
}

int tr_generate_text_prompt(const struct tr_config *cfg, const struct tr_model_desc *m, const void *config,
                            int64_t batch, struct tr_generate_config *gc, struct tr_generate_text *text,
                            struct tr_error *err) {
    memset(text, 0, sizeof *text);
    int line = 0, rc = TR_OK, cap = 0, tok_line = 0;
    const char *key = "prompt";
    char file[TR_CONFIG_PATH] = "";
    for (int i = 0; cfg && i < cfg->n_kv && !rc; i++) {
        const struct tr_config_kv *kv = &cfg->kv[i];
        if (strcmp(kv->section, "generate") != 0) continue;
        const int one = strcmp(kv->key, "prompt") == 0, many = strcmp(kv->key, "prompts") == 0;
        if ((one || many) && line)
            rc = tr_error_set(err, TR_ERR_INVALID, "%s:%d: [generate] %s: %s is given on line %d; give one of prompt "
                              "and prompts", cfg->file, kv->line, kv->key, key, line);
        else if (one)
            rc = text_add(text, kv->value, strlen(kv->value), &cap) ? tr_error_set(err, TR_ERR_NOMEM, "no memory") : 0;
        else if (many && (rc = tr_config_path(cfg, kv->value, file, sizeof file, err)) != TR_OK)
            tr_error_prefix(err, "%s:%d: [generate] prompts", cfg->file, kv->line);
        if (one || many) line = kv->line, key = kv->key;
        if (strcmp(kv->key, "tokenizer") == 0) tok_line = kv->line;
        if (!rc && strcmp(kv->key, "tokenizer") == 0 &&
            (rc = tr_config_path(cfg, kv->value, text->tokenizer, sizeof text->tokenizer, err)) != TR_OK)
            tr_error_prefix(err, "%s:%d: [generate] tokenizer", cfg->file, kv->line);
    }
    if (!rc && line && cfg->inputs[0]) /* one source of prompts: the file's ids would run under the text's name */
        rc = tr_error_set(err, TR_ERR_INVALID, "%s:%d: [generate] %s and [run] inputs (line %d) both give the "
                          "prompts; give one of them", cfg->file, line, key, cfg->inputs_line);
    if (!rc && file[0] && (rc = read_prompts(file, text, err)) != TR_OK)
        tr_error_prefix(err, "%s:%d: [generate] prompts", cfg->file, line);
    if (!rc && line && text->n > batch)
        rc = tr_error_set(err, TR_ERR_INVALID, "%s:%d: [generate] prompts: %d prompts for [run] batch = %lld: expected "
                          "at most one a sample (sample b takes prompt b mod their count)", cfg->file, line, text->n,
                          (long long)batch);
    if (!rc && line && !m->generate->text_open)
        rc = tr_error_set(err, TR_ERR_UNSUPPORTED, "%s:%d: [generate] %s: model '%s' reads no text (its prompts are "
                          "synthetic); leave %s out", cfg->file, line, key, m->name, key);
    if (!rc && line && !text->tokenizer[0]) { /* the tokenizer beside the weights, as a Hub repo keeps them */
        const char *slash = strrchr(cfg->weights, '/');
        struct stat sb;
        if (cfg->weights[0] && stat(cfg->weights, &sb) == 0 && S_ISDIR(sb.st_mode))
            snprintf(text->tokenizer, sizeof text->tokenizer, "%s", cfg->weights);
        else if (slash)
            snprintf(text->tokenizer, sizeof text->tokenizer, "%.*s", (int)(slash - cfg->weights), cfg->weights);
        else
            rc = tr_error_set(err, TR_ERR_INVALID, "%s:%d: [generate] %s needs a tokenizer: [generate] tokenizer = "
                              "its tokenizer.json (or the directory), or [run] weights = a model's directory that "
                              "holds one", cfg->file, line, key);
    }
    if (!rc && !line && text->tokenizer[0]) /* a tokenizer with nothing to tokenize: said */
        fprintf(stderr, "trident: warning: %s: [generate] tokenizer is read for prompt or prompts; without either "
                "the prompts are synthetic ids and it goes unread\n", cfg->file);
    if (rc || !line) {
        tr_generate_text_free(m, text);
        return rc;
    }
    rc = m->generate->text_open(config, text->tokenizer, &text->tok, err);
    if (rc) { /* a [model] key's fault (its eos_token_id), else the tokenizer's line, else the prompt's */
        const int ml = tr_config_model_line(cfg, err->msg);
        tr_generate_text_free(m, text);
        if (ml) return tr_error_prefix(err, "%s:%d: [model]", cfg->file, ml);
        return tok_line ? tr_error_prefix(err, "%s:%d: [generate] tokenizer", cfg->file, tok_line)
                        : tr_error_prefix(err, "%s:%d: [generate] %s (the tokenizer beside [run] weights)", cfg->file,
                                          line, key);
    }
    int longest = 0;
    for (int k = 0; !rc && k < text->n; k++) {
        rc = m->generate->text_encode(text->tok, text->prompt[k], &text->ids[k], &text->n_ids[k], err);
        if (rc && text->n > 1) tr_error_prefix(err, "prompt %d", k + 1);
        if (!rc && text->n_ids[k] > longest) longest = text->n_ids[k];
    }
    if (rc) {
        tr_generate_text_free(m, text);
        return tr_error_prefix(err, "%s:%d: [generate] %s", cfg->file, line, key);
    }
    const int asked = key_line(cfg, "prompt_len");
    if (asked && gc->prompt_len < longest) {
        rc = tr_error_set(err, TR_ERR_INVALID, "%s:%d: [generate] prompt_len = %lld is shorter than the %s's %d "
                          "tokens (leave prompt_len out: it is then the %s's)", cfg->file, asked,
                          (long long)gc->prompt_len, text->n > 1 ? "longest prompt" : "prompt", longest,
                          text->n > 1 ? "longest prompt" : "prompt");
    } else {
        if (!asked) gc->prompt_len = longest; /* else left-padded to prompt_len */
        if (gc->prompt_len >= gc->max_length)
            rc = tr_error_set(err, TR_ERR_INVALID, "%s:%d: [generate] max_length = %lld leaves no new token after the "
                              "%s's %lld tokens (max_length counts the prompt and the new tokens)", cfg->file,
                              key_line(cfg, "max_length") ? key_line(cfg, "max_length") : line,
                              (long long)gc->max_length, text->n > 1 ? "longest prompt" : "prompt",
                              (long long)gc->prompt_len);
    }
    if (rc) tr_generate_text_free(m, text);
    return rc;
}

void tr_generate_text_free(const struct tr_model_desc *m, struct tr_generate_text *text) {
    if (text->tok && m && m->generate && m->generate->text_close) m->generate->text_close(text->tok);
    for (int k = 0; k < text->n; k++) free(text->prompt[k]), free(text->ids[k]);
    free(text->prompt);
    free(text->ids);
    free(text->n_ids);
    text->tok = NULL, text->prompt = NULL, text->ids = NULL, text->n_ids = NULL, text->n = 0;
}

/* ---- the passes ---- */

/* Whether PARAM id is updated by its graph: in a generate pass, a cache tensor. */
static int is_updated(const struct tr_graph *g, int id) {
    for (int u = 0; u < tr_graph_n_updates(g); u++)
        if (tr_graph_update_param(g, u) == id) return 1;
    return 0;
}

/* The cache as state: each pass updates n_cache PARAMs and nothing else, decode's are
 * prefill's (by name, shape and dtype), and the passes have no cache inputs or outputs. */
static int check_state_plan(const struct tr_model_desc *m, const struct tr_generate_graphs *gg,
                            struct tr_error *err) {
    const struct tr_generate_plan *p = &gg->plan;
    if (p->n_prompt_inputs != tr_graph_n_inputs(gg->prefill) || p->n_step_inputs != tr_graph_n_inputs(gg->decode) ||
        tr_graph_n_outputs(gg->prefill) != 1 || tr_graph_n_outputs(gg->decode) != 1 ||
        tr_graph_n_updates(gg->prefill) != p->n_cache || tr_graph_n_updates(gg->decode) != p->n_cache)
        return tr_error_set(err, TR_ERR_INTERNAL,
                            "model '%s': generate passes do not match their plan (cache as state: %d prompt inputs, "
                            "%d step inputs, %d cache tensors; the passes have %d and %d inputs, %d and %d outputs, "
                            "%d and %d updates)",
                            m->name, p->n_prompt_inputs, p->n_step_inputs, p->n_cache, tr_graph_n_inputs(gg->prefill),
                            tr_graph_n_inputs(gg->decode), tr_graph_n_outputs(gg->prefill),
                            tr_graph_n_outputs(gg->decode), tr_graph_n_updates(gg->prefill),
                            tr_graph_n_updates(gg->decode));
    for (int u = 0; u < p->n_cache; u++) {
        const int d = tr_graph_update_param(gg->decode, u);
        const char *name = tr_node_name(gg->decode, d);
        const int s = tr_graph_find(gg->prefill, name);
        struct tr_tensor a = tr_node_tensor(gg->decode, d), b = {0};
        if (s >= 0) b = tr_node_tensor(gg->prefill, s);
        if (s < 0 || !is_updated(gg->prefill, s) || a.dtype != b.dtype || a.ndim != b.ndim ||
            memcmp(a.shape, b.shape, sizeof(int64_t) * (size_t)a.ndim) != 0 || p->cache_axis < 0 ||
            p->cache_axis >= a.ndim || a.shape[p->cache_axis] != p->cache_slots)
            return tr_error_set(err, TR_ERR_INTERNAL,
                                "model '%s': decode's cache tensor '%s' is not a cache tensor of prefill with its "
                                "dtype and shape, %lld slots along axis %d",
                                m->name, name, (long long)p->cache_slots, p->cache_axis);
    }
    return TR_OK;
}

/* The model's PARAMs (prefill's, the cache left out) as a graph of their own. */
static int build_weights_graph(struct tr_generate_graphs *gg, struct tr_error *err) {
    int rc = tr_graph_init(&gg->weights, err);
    for (int i = 0; !rc && i < tr_graph_n_params(gg->prefill); i++) {
        const int id = tr_graph_param(gg->prefill, i);
        if (is_updated(gg->prefill, id)) continue;
        const struct tr_attrs *a = tr_node_attrs(gg->prefill, id);
        tr_param(gg->weights, tr_node_name(gg->prefill, id), (enum tr_dtype)tr_node_dtype(gg->prefill, id),
                 tr_node_ndim(gg->prefill, id), tr_node_shape(gg->prefill, id), a ? a->floats[0] : 0.0f,
                 a ? a->floats[1] : 0.0f);
    }
    if (!rc) rc = tr_graph_status(gg->weights, err);
    return rc ? tr_error_prefix(err, "generate: the weights graph") : TR_OK;
}

int tr_generate_build(const struct tr_model_desc *m, const void *config, const struct tr_generate_opts *o,
                      struct tr_generate_graphs *gg, struct tr_error *err) {
    memset(gg, 0, sizeof *gg);
    if (!m->generate || !m->generate->build || !m->generate->make_prompt || !m->generate->step_inputs)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "model '%s' has no generate passes", m->name);
    gg->opts = *o;
    int rc = tr_graph_init(&gg->prefill, err);
    if (!rc) rc = tr_graph_init(&gg->decode, err);
    if (!rc) rc = m->generate->build(config, o, gg->prefill, gg->decode, &gg->plan, err);
    if (!rc) rc = tr_graph_status(gg->prefill, err);
    if (!rc) rc = tr_graph_status(gg->decode, err);
    const struct tr_generate_plan *p = &gg->plan;
    if (!rc && p->cache_slots < o->max_length - 1)
        rc = tr_error_set(err, TR_ERR_INTERNAL, "model '%s': a generate cache of %lld slots, max_length %lld needs %lld",
                          m->name, (long long)p->cache_slots, (long long)o->max_length, (long long)o->max_length - 1);
    if (!rc && p->cache_state == o->cache_inputs)
        rc = tr_error_set(err, TR_ERR_INTERNAL, "model '%s': generate passes built with the cache %s, asked for %s",
                          m->name, p->cache_state ? "as state" : "as inputs", o->cache_inputs ? "inputs" : "state");
    if (!rc && p->cache_state) rc = check_state_plan(m, gg, err);
    else if (!rc && (p->n_prompt_inputs != tr_graph_n_inputs(gg->prefill) ||
                     p->n_step_inputs + p->n_cache != tr_graph_n_inputs(gg->decode) ||
                     1 + p->n_cache != tr_graph_n_outputs(gg->prefill) ||
                     1 + p->n_cache != tr_graph_n_outputs(gg->decode)))
        rc = tr_error_set(err, TR_ERR_INTERNAL,
                          "model '%s': generate passes do not match their plan (%d prompt inputs, %d step inputs, %d "
                          "cache tensors, %lld slots)",
                          m->name, p->n_prompt_inputs, p->n_step_inputs, p->n_cache, (long long)p->cache_slots);
    if (!rc) rc = build_weights_graph(gg, err);
    if (rc) tr_generate_graphs_free(gg);
    return rc;
}

void tr_generate_graphs_free(struct tr_generate_graphs *gg) {
    tr_graph_free(gg->prefill);
    tr_graph_free(gg->decode);
    tr_graph_free(gg->weights);
    for (int i = 0; gg->cache && i < gg->plan.n_cache; i++) tr_host_free(gg->cache[i]);
    free(gg->cache);
    memset(gg, 0, sizeof *gg);
}

/* g's PARAMs that are not cache to the weights graph's memory, by name. */
static int bind_weights(struct tr_generate_graphs *gg, struct tr_graph *g, const char *pass, struct tr_error *err) {
    for (int i = 0; i < tr_graph_n_params(g); i++) {
        const int id = tr_graph_param(g, i);
        if (gg->plan.cache_state && is_updated(g, id)) continue;
        const char *name = tr_node_name(g, id);
        const int src = tr_graph_find(gg->weights, name);
        const void *data = src >= 0 ? tr_node_data(gg->weights, src) : NULL;
        if (!data)
            return tr_error_set(err, TR_ERR_INVALID,
                                "generate: %s parameter '%s' has %s in the weights graph (make or load the weights "
                                "on it first)",
                                pass, name, src < 0 ? "no twin" : "no bound twin");
        int rc = tr_graph_bind_param(g, id, data, err);
        if (rc) return tr_error_prefix(err, "generate: binding %s's '%s'", pass, name);
    }
    return TR_OK;
}

/* One host buffer per cache tensor, zeroed once (a slot not written is masked, but a
 * masked NaN would still poison the attention's sums), bound to both passes. */
static int bind_cache(struct tr_generate_graphs *gg, struct tr_error *err) {
    const int n = gg->plan.n_cache;
    if (!gg->cache) {
        if (!(gg->cache = calloc((size_t)n, sizeof *gg->cache)))
            return tr_error_set(err, TR_ERR_NOMEM, "generate: out of memory for %d cache tensors", n);
        for (int u = 0; u < n; u++) {
            struct tr_tensor t = tr_node_tensor(gg->prefill, tr_graph_update_param(gg->prefill, u));
            const size_t nb = tr_tensor_nbytes(&t);
            int rc = tr_host_alloc(&gg->cache[u], nb, err);
            if (rc) return tr_error_prefix(err, "generate: the KV cache (%s)", tr_node_name(gg->prefill, tr_graph_update_param(gg->prefill, u)));
            memset(gg->cache[u], 0, nb);
            gg->cache_bytes += nb;
        }
    }
    for (int u = 0; u < n; u++) {
        const int pid = tr_graph_update_param(gg->prefill, u);
        const char *name = tr_node_name(gg->prefill, pid);
        int rc = tr_graph_bind_param(gg->prefill, pid, gg->cache[u], err);
        if (!rc) rc = tr_graph_bind_param(gg->decode, tr_graph_find(gg->decode, name), gg->cache[u], err);
        if (rc) return tr_error_prefix(err, "generate: binding the cache tensor '%s'", name);
    }
    return TR_OK;
}

int tr_generate_share_params(struct tr_generate_graphs *gg, struct tr_error *err) {
    int rc = bind_weights(gg, gg->prefill, "prefill", err);
    if (!rc) rc = bind_weights(gg, gg->decode, "decode", err);
    if (!rc && gg->plan.cache_state) rc = bind_cache(gg, err);
    return rc;
}

/* ---- memory ---- */

static uint64_t node_bytes(const struct tr_graph *g, int id) {
    struct tr_tensor t = tr_node_tensor(g, id);
    return (uint64_t)tr_tensor_nbytes(&t);
}

/* Every computed node's output but the updates' values (computed in their PARAM's
 * memory, the cache): an upper bound on one pass's activations. */
static uint64_t activation_bytes(const struct tr_graph *g) {
    uint64_t n = 0;
    for (int id = 0; id < tr_graph_n_nodes(g); id++) {
        int op = tr_node_op(g, id);
        if (op != TR_OP_INPUT && op != TR_OP_PARAM && op != TR_OP_CONST) n += node_bytes(g, id);
    }
    for (int u = 0; u < tr_graph_n_updates(g); u++) n -= node_bytes(g, tr_graph_update_value(g, u));
    return n;
}

void tr_generate_memory_estimate(const struct tr_generate_graphs *gg, struct tr_generate_memory *mem) {
    memset(mem, 0, sizeof *mem);
    mem->weights = tr_graph_param_bytes(gg->weights);
    for (int i = 0; i < tr_graph_n_inputs(gg->decode); i++) mem->kv_cache += node_bytes(gg->decode, tr_graph_input(gg->decode, i));
    for (int u = 0; gg->plan.cache_state && u < gg->plan.n_cache; u++)
        mem->kv_cache += node_bytes(gg->prefill, tr_graph_update_param(gg->prefill, u));
    uint64_t a = activation_bytes(gg->prefill), b = activation_bytes(gg->decode);
    mem->activations = a > b ? a : b;
    mem->total = mem->weights + mem->kv_cache + mem->activations;
}

int tr_host_mem_available(uint64_t *bytes, struct tr_error *err) {
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f)) {
        unsigned long long kb;
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
            fclose(f);
            *bytes = (uint64_t)kb * 1024;
            return TR_OK;
        }
    }
    if (f) fclose(f);
    struct sysinfo si;
    if (sysinfo(&si) != 0) return tr_error_set(err, TR_ERR_IO, "cannot read the available memory (/proc/meminfo, sysinfo)");
    *bytes = ((uint64_t)si.freeram + (uint64_t)si.bufferram) * si.mem_unit;
    return TR_OK;
}

/* ---- choosing tokens ---- */

/* Logits are read by dtype, not through tr_tensor_get_f64: at batch 32 and a 256k
 * vocabulary that is 8M reads per token, which would cost more than a GPU's decode pass. */
static double logit(const struct tr_tensor *x, int64_t b, int64_t V, int64_t v) {
    const int64_t i = b * V + v;
    switch (x->dtype) {
    case TR_DTYPE_F32: return ((const float *)x->data)[i];
    case TR_DTYPE_BF16: return tr_bf16_to_f32(((const uint16_t *)x->data)[i]);
    default: return tr_tensor_get_f64(x, i);
    }
}

static int64_t argmax_f32(const float *r, int64_t V) {
    int64_t best = 0;
    float bv = -INFINITY;
    for (int64_t v = 0; v < V; v++)
        if (r[v] > bv) bv = r[v], best = v;
    return best;
}

static int64_t argmax_bf16(const uint16_t *r, int64_t V) {
    int64_t best = 0;
    float bv = -INFINITY;
    for (int64_t v = 0; v < V; v++) {
        float x = tr_bf16_to_f32(r[v]);
        if (x > bv) bv = x, best = v;
    }
    return best;
}

/* The k largest logits of row b (k clamped to [1, min(V, TR_GENERATE_TOP_K_MAX)]) into
 * ids and vals, largest first, the lower id first on a tie; returns how many. Most
 * logits fail the test against the smallest kept one. */
static int64_t top_sorted(const struct tr_tensor *logits, int64_t b, int64_t V, int64_t k, int64_t *ids,
                          double *vals) {
    if (k > V) k = V;
    if (k > TR_GENERATE_TOP_K_MAX) k = TR_GENERATE_TOP_K_MAX;
    if (k < 1) k = 1;
    int64_t n = 0;
    for (int64_t v = 0; v < V; v++) {
        double x = logit(logits, b, V, v);
        if (n == k && !(x > vals[k - 1])) continue;
        int64_t i = n < k ? n++ : k - 1;
        while (i > 0 && x > vals[i - 1]) vals[i] = vals[i - 1], ids[i] = ids[i - 1], i--;
        vals[i] = x, ids[i] = v;
    }
    return n;
}

/* Where a top_k or top_p draw fell, for tr_generate_pick_reach: its distance to the lower
 * and upper edges of the chosen token's share (fractions of the candidates' mass; +inf at
 * the ends of the candidates, which no error crosses); a candidate j's share,
 * exp((l_j − top)/temperature)/norm; the last candidate's logit; and for top_p, the mass
 * before the nucleus's last token and all of it (the nucleus may change near top_p). */
struct draw {
    double lo, hi, top, norm, last;
    double before_last, kept;
    double u;  /* top_p: the draw, a fraction of the nucleus's mass */
    double floor; /* top_p with top_k: the k-th largest logit (-inf: no top_k) */
    int64_t k; /* top_p: the nucleus's size (c[0, k); c[k - 1] its last in probability order) */
};

/* A token and its probability (top_p's candidates). */
struct cand {
    double p;
    int64_t id;
};

/* top_p's scratch for a vocabulary of V: V candidates, then V doubles that start (and are
 * left) zero. */
static struct cand *scratch_alloc(int64_t V) {
    return calloc(1, (sizeof(struct cand) + sizeof(double)) * (size_t)V);
}

/* a comes before b in the nucleus's order: more probable first, then the lower id */
static int before(const struct cand *a, const struct cand *b) { return a->p > b->p || (a->p == b->p && a->id < b->id); }

static void swap_cand(struct cand *a, struct cand *b) {
    struct cand t = *a;
    *a = *b, *b = t;
}

/* top_p (nucleus) sampling, as keras_hub's TopPSampler and transformers' top_p with
 * top_k off (with top_p_top_k, on: the top_k largest first): softmax(logits /
 * temperature), the most likely tokens in order until their probability reaches top_p
 * (the one that crosses it kept; at least one), drawn in proportion to their
 * probabilities. A random model's logits are nearly flat, so the
 * nucleus can be most of the vocabulary: it is found without sorting. The tokens above a
 * threshold go first (lowered until their mass reaches top_p: every token above it
 * outranks every token below, so the nucleus is among them), then a quickselect on the
 * nucleus's order finds where the mass crosses top_p: expected O(V) a token. c: the
 * scratch of scratch_alloc (V candidates, then V zeros). */
static int32_t pick_top_p(const struct tr_generate_config *gc, const struct tr_tensor *logits, int64_t b, int64_t pos,
                          struct cand *c, struct draw *d, int keep_marks) {
    const int64_t VL = logits->shape[logits->ndim - 1];
    const double t = gc->temperature, need = gc->top_p;
    /* top_k given too: only logits at least the k-th largest take part (ties with it
     * included, as transformers' TopKLogitsWarper keeps them), renormalised */
    double floor_logit = -INFINITY;
    if (gc->top_p_top_k > 0 && gc->top_p_top_k < VL) {
        int64_t ids[TR_GENERATE_TOP_K_MAX];
        double vals[TR_GENERATE_TOP_K_MAX];
        floor_logit = vals[top_sorted(logits, b, VL, gc->top_p_top_k, ids, vals) - 1];
    }
    double mx = -INFINITY, z = 0;
    for (int64_t v = 0; v < VL; v++) mx = fmax(mx, logit(logits, b, VL, v));
    int64_t V = 0; /* candidates */
    for (int64_t v = 0; v < VL; v++) {
        const double x = logit(logits, b, VL, v);
        if (x >= floor_logit) c[V] = (struct cand){exp((x - mx) / t), v}, z += c[V++].p;
    }
    for (int64_t v = 0; v < V; v++) c[v].p /= z;
    int64_t n = 0;
    double mass = 0;
    for (double eps = 1.0 / 64; n < V; eps /= 64) {
        for (int64_t v = n; v < V; v++)
            if (c[v].p >= eps || eps < 1e-300) mass += c[v].p, swap_cand(&c[n++], &c[v]);
        /* (top_p = 1 stops a rounding's width short of the whole vocabulary) */
        if (mass >= need * (1 - 1e-12)) break;
    }
    /* Invariant: c[0, lo) is in the nucleus with mass acc < need, and acc plus the mass of
     * c[lo, hi) reaches need (or c[lo, n) is all there is). */
    int64_t lo = 0, hi = n, k = n;
    double acc = 0;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        swap_cand(&c[mid], &c[hi - 1]); /* the pivot at the end */
        const struct cand pv = c[hi - 1];
        int64_t i = lo;
        double m = 0;
        for (int64_t j = lo; j < hi - 1; j++)
            if (before(&c[j], &pv)) m += c[j].p, swap_cand(&c[i++], &c[j]);
        swap_cand(&c[i], &c[hi - 1]); /* c[lo, i) before the pivot, the pivot at i */
        if (i > lo && acc + m >= need) {
            hi = i;
        } else if (acc + m + pv.p >= need) {
            k = i + 1;
            break;
        } else {
            acc += m + pv.p;
            lo = i + 1;
        }
    }
    if (lo >= hi && k == n) k = lo > 0 ? lo : 1;
    double kept = 0;
    for (int64_t i = 0; i < k; i++) kept += c[i].p;
    const double f = tr_rng_uniform((uint64_t)gc->seed, tr_hash_str("generate.top_p"),
                                    ((uint64_t)b << 32) | (uint64_t)pos), u = f * kept;
    /* The draw walks the nucleus in vocabulary order, as transformers' multinomial over the
     * masked probabilities does: each token's share then sits where it sits whatever the
     * other logits are, so logits that differ a little move the draw a little (the order
     * the quickselect leaves would reshuffle on one changed comparison). w: VL zeros of
     * scratch, given back as zeros. */
    double *w = (double *)(c + VL);
    for (int64_t i = 0; i < k; i++) w[c[i].id] = c[i].p;
    double run = 0, before = 0;
    int64_t id = -1, last_member = 0;
    for (int64_t v = 0; v < VL; v++)
        if (w[v] > 0) {
            before = run, run += w[v], last_member = v;
            if (u < run) {
                id = v;
                break;
            }
        }
    if (id < 0) id = last_member, before = run - w[last_member]; /* u at the very end, by rounding */
    if (d)
        *d = (struct draw){(u - before) / kept, (run - u) / kept, mx, z * kept, logit(logits, b, VL, c[k - 1].id),
                           kept - c[k - 1].p, kept, f, floor_logit, k};
    if (!keep_marks) /* (tr_generate_pick_reach reads them, then clears them) */
        for (int64_t i = 0; i < k; i++) w[c[i].id] = 0;
    return (int32_t)id;
}

static int32_t pick(const struct tr_generate_config *gc, const struct tr_tensor *logits, int64_t b, int64_t pos,
                    struct cand *scratch, struct draw *d) {
    if (d) *d = (struct draw){INFINITY, INFINITY, 0, 1, -INFINITY, 0, 1, 0, -INFINITY, 0};
    if (gc->top_p_sampling) return pick_top_p(gc, logits, b, pos, scratch, d, 0);
    const int64_t V = logits->shape[logits->ndim - 1];
    if (!gc->top_k_sampling) {
        if (logits->dtype == TR_DTYPE_F32) return (int32_t)argmax_f32((const float *)logits->data + b * V, V);
        if (logits->dtype == TR_DTYPE_BF16) return (int32_t)argmax_bf16((const uint16_t *)logits->data + b * V, V);
        int64_t best = 0;
        double bv = -INFINITY;
        for (int64_t v = 0; v < V; v++) {
            double x = logit(logits, b, V, v);
            if (x > bv) bv = x, best = v;
        }
        return (int32_t)best;
    }
    int64_t ids[TR_GENERATE_TOP_K_MAX];
    double vals[TR_GENERATE_TOP_K_MAX];
    const int64_t n = top_sorted(logits, b, V, gc->top_k, ids, vals);
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += exp((vals[i] - vals[0]) / gc->temperature);
    const double u = tr_rng_uniform((uint64_t)gc->seed, tr_hash_str("generate.top_k"),
                                    ((uint64_t)b << 32) | (uint64_t)pos) * sum;
    double acc = 0;
    int64_t pick = ids[n - 1];
    for (int64_t i = 0; i < n; i++) {
        const double w = exp((vals[i] - vals[0]) / gc->temperature);
        acc += w;
        if (u < acc || i == n - 1) {
            pick = ids[i];
            if (d)
                *d = (struct draw){i > 0 ? (u - (acc - w)) / sum : INFINITY, i < n - 1 ? (acc - u) / sum : INFINITY,
                                   vals[0], sum, vals[n - 1], 0, 1, 0, -INFINITY, 0};
            break;
        }
    }
    return (int32_t)pick;
}

/* The tokens nearest a logit, by logit (tr_generate_pick_reach's neighbourhood). */
#define REACH_NEAR 256

struct near {
    double l;
    int32_t id;
};

static int near_desc(const void *a, const void *b) { /* the sampler's order: larger first, lower id on a tie */
    const struct near *x = a, *y = b;
    return x->l != y->l ? (x->l < y->l) - (x->l > y->l) : (x->id > y->id) - (x->id < y->id);
}

/* The REACH_NEAR tokens of row b whose logits are nearest l, sorted as the sampler orders
 * them (nb, *n of them): every token within *far of l is among them (*far infinite when
 * they are the whole vocabulary). */
static void nearest(const struct tr_tensor *logits, int64_t b, double l, struct near *nb, int *n, double *far) {
    const int64_t V = logits->shape[logits->ndim - 1];
    int worst = 0;
    *n = 0;
    for (int64_t v = 0; v < V; v++) {
        const double x = logit(logits, b, V, v);
        if (*n < REACH_NEAR) {
            nb[(*n)++] = (struct near){x, (int32_t)v};
        } else if (fabs(x - l) < fabs(nb[worst].l - l)) {
            nb[worst] = (struct near){x, (int32_t)v};
        } else {
            continue;
        }
        if (*n == REACH_NEAR)
            for (int i = 0; i < *n; i++)
                if (fabs(nb[i].l - l) > fabs(nb[worst].l - l)) worst = i;
    }
    *far = V <= REACH_NEAR ? INFINITY : fabs(nb[worst].l - l);
    qsort(nb, (size_t)*n, sizeof *nb, near_desc);
}

/* top_p's reach: the nucleus is marked in w (c's second half, by pick_top_p). A token's
 * membership may change where the mass before it (in probability order) lies within delta
 * of top_p, widened by the mass of the tokens within 2e of it (which may swap with it);
 * those tokens (U), found around the nucleus's last token, may join or leave, moving every
 * share's edge by up to 2·mass(U)/kept more. Every token, of the nucleus or of U, whose
 * share (in vocabulary order) lies within that of the draw is within reach. */
static int reach_top_p(const struct tr_generate_config *gc, const struct tr_tensor *logits, int64_t b, double e,
                       double delta, const struct draw *d, struct cand *c, int32_t *ids, int max) {
    const int64_t VL = logits->shape[logits->ndim - 1];
    double *w = (double *)(c + VL);
    const double t = gc->temperature, z = d->norm / d->kept;
    const int32_t th = (int32_t)c[d->k - 1].id;
    static _Thread_local struct near nb[REACH_NEAR];
    int n, it = 0, any = 0;
    double far, mass_u = 0;
    if (isfinite(d->floor)) { /* top_k's floor: tokens within 2e of it may enter or leave the candidates */
        nearest(logits, b, d->floor, nb, &n, &far);
        for (int i = 0; i < n; i++)
            if (fabs(nb[i].l - d->floor) <= 2.0 * e) {
                const double q = exp((nb[i].l - d->top) / t) / z;
                mass_u += q;
                if (w[nb[i].id] == 0) w[nb[i].id] = -q;
            }
        if (2.0 * e >= far) any = 1;
    }
    nearest(logits, b, d->last, nb, &n, &far);
    while (nb[it].id != th) it++;
    double p[REACH_NEAR], before[REACH_NEAR]; /* each one's probability, and the mass before it */
    for (int i = 0; i < n; i++) p[i] = exp((nb[i].l - d->top) / t) / z;
    before[it] = d->before_last;
    for (int i = it - 1; i >= 0; i--) before[i] = before[i + 1] - p[i];
    for (int i = it + 1; i < n; i++) before[i] = before[i - 1] + p[i - 1];
    for (int i = 0; i < n && !any; i++) {
        double g = 0;
        for (int j = 0; j < n; j++)
            if (j != i && fabs(nb[j].l - nb[i].l) <= 2.0 * e) g += p[j];
        if (fabs(before[i] - gc->top_p) > delta + g) continue;
        if ((i == 0 || i == n - 1) && isfinite(far)) any = 1; /* U may reach past what was looked at */
        if (fabs(nb[i].l - d->last) + 2.0 * e >= far) any = 1;
        mass_u += p[i];
        if (w[nb[i].id] == 0) w[nb[i].id] = -p[i]; /* outside the nucleus: marked to be placed */
    }
    const double win = delta + 2.0 * mass_u / d->kept;
    int k = 0;
    double f = 0;
    for (int64_t v = 0; v < VL && !any; v++) {
        if (w[v] == 0) continue;
        const double share = fabs(w[v]) / d->kept;
        if (f <= d->u + win && f + share >= d->u - win) {
            if (k < max) ids[k] = (int32_t)v;
            k++;
        }
        if (w[v] > 0) f += share;
        if (f > d->u + win + 1.0) break;
    }
    for (int64_t v = 0; v < VL; v++) /* U's marks (the nucleus's are cleared by the caller) */
        if (w[v] < 0) w[v] = 0;
    return any ? max + 1 : k;
}

int tr_generate_pick_reach(const struct tr_generate_config *gc, const struct tr_tensor *logits, int64_t b,
                           int64_t pos, double e, int32_t *ids, int max) {
    if (max < 1) return -1;
    /* Logits within e scale every odds ratio by at most k = exp(2e/t), which moves a share's
     * edge F = A/(A + B) by at most (√k − 1)/(√k + 1) = tanh(e/2t). */
    const double t = gc->temperature, delta = tanh(e / (2.0 * t));
    struct draw d;
    if (gc->top_p_sampling) {
        const int64_t VL = logits->shape[logits->ndim - 1];
        struct cand *c = scratch_alloc(VL);
        if (!c) return -1;
        const int32_t r = pick_top_p(gc, logits, b, pos, c, &d, 1);
        int32_t got[REACH_NEAR + 1];
        int n = reach_top_p(gc, logits, b, e, delta, &d, c, got, REACH_NEAR + 1);
        double *w = (double *)(c + VL);
        for (int64_t i = 0; i < d.k; i++) w[c[i].id] = 0;
        free(c);
        ids[0] = r; /* the pick first, then the others within reach */
        int k = 1;
        for (int i = 0; i < n && i < REACH_NEAR + 1; i++)
            if (got[i] != r) {
                if (k < max) ids[k] = got[i];
                k++;
            }
        return n > REACH_NEAR + 1 ? max + 1 : k;
    }
    const int32_t r = pick(gc, logits, b, pos, NULL, &d);
    ids[0] = r;
    if (!gc->top_k_sampling) return 1;
    const double reach = delta, last = d.last;
    /* The tokens nearest r's logit: every token within `far` of it is among them. */
    const int64_t V = logits->shape[logits->ndim - 1];
    const double lr = logit(logits, b, V, r);
    struct near nb[REACH_NEAR];
    int n;
    double far;
    nearest(logits, b, lr, nb, &n, &far);
    const int all = !isfinite(far);
    int ir = 0;
    while (nb[ir].id != r) ir++;
    /* Every edge moves by less than delta: the tokens whose shares lie within delta of the
     * draw, walked out from r on both sides (within the candidates), span [lmin, lmax]. */
    double lmin = lr, lmax = lr, need = reach - d.lo;
    int i = ir - 1;
    for (; need > 0 && i >= 0; i--) lmax = nb[i].l, need -= exp((nb[i].l - d.top) / t) / d.norm;
    if (need > 0 && i < 0 && !all && nb[0].l < d.top) return max + 1; /* (at d.top: the first candidate) */
    need = (isfinite(d.hi) || !isfinite(last) ? reach : -INFINITY) - (isfinite(d.hi) ? d.hi : 0);
    for (i = ir + 1; need > 0 && i < n && nb[i].l >= last; i++) lmin = nb[i].l, need -= exp((nb[i].l - d.top) / t) / d.norm;
    if (need > 0 && i >= n && !all) return max + 1;
    /* and the order may swap any of them with a token whose logit is within 2e */
    const double lo = lmin - 2.0 * e, hi = lmax + 2.0 * e;
    if (lr - lo >= far || hi - lr >= far) return max + 1;
    int k = 1;
    for (i = 0; i < n; i++)
        if (nb[i].id != r && nb[i].l >= lo && nb[i].l <= hi) {
            if (k < max) ids[k] = nb[i].id;
            k++;
        }
    return k;
}

int32_t tr_generate_pick(const struct tr_generate_config *gc, const struct tr_tensor *logits, int64_t b, int64_t pos) {
    if (!gc->top_p_sampling) return pick(gc, logits, b, pos, NULL, NULL);
    struct cand *c = scratch_alloc(logits->shape[logits->ndim - 1]);
    if (!c) return -1;
    int32_t id = pick(gc, logits, b, pos, c, NULL);
    free(c);
    return id;
}

/* ---- one backend's generator ---- */

struct tr_generator {
    struct tr_backend *be;
    const struct tr_model_desc *m;
    const void *config;
    const struct tr_generate_graphs *gg;
    struct tr_generate_config gc;
    struct tr_program *prefill, *decode;
    /* kv_cache = inputs: the cache tensors after the step inputs and entries after the logits */
    int host_cache;             /* n_cache tensors the host holds, or 0 (the cache as state) */
    struct tr_tensor *pre_out;  /* logits, then the prompt's cache entries */
    struct tr_tensor *dec_in;   /* step inputs, then the cache */
    struct tr_tensor *dec_out;  /* logits, then the fed token's entries */
    int32_t *fed;
    struct cand *scratch;       /* top_p: a vocabulary's candidates */
    int64_t calls, prefills, decodes;
};

int tr_generator_init(struct tr_backend *be, const struct tr_model_desc *m, const void *config,
                      const struct tr_generate_graphs *gg, const struct tr_generate_config *gc,
                      struct tr_generator **out, struct tr_error *err) {
    *out = NULL;
    struct tr_generator *gen = calloc(1, sizeof *gen);
    if (!gen) return tr_error_set(err, TR_ERR_NOMEM, "generate: out of memory");
    *gen = (struct tr_generator){.be = be, .m = m, .config = config, .gg = gg, .gc = *gc};
    const struct tr_generate_plan *p = &gg->plan;
    const int K = gen->host_cache = p->cache_state ? 0 : p->n_cache;
    int rc = TR_OK;
    for (int i = 0; i < tr_graph_n_params(gg->decode) && !rc; i++)
        if (!tr_node_data(gg->decode, tr_graph_param(gg->decode, i)))
            rc = tr_error_set(err, TR_ERR_INVALID,
                              "generate: the decode pass's parameter '%s' is not bound (make the weights on the "
                              "weights graph, then tr_generate_share_params)",
                              tr_node_name(gg->decode, tr_graph_param(gg->decode, i)));
    if (!rc && (rc = tr_backend_compile(be, gg->prefill, &gen->prefill, err)) != TR_OK)
        tr_error_prefix(err, "compiling the prefill pass");
    if (!rc && (rc = tr_backend_compile(be, gg->decode, &gen->decode, err)) != TR_OK)
        tr_error_prefix(err, "compiling the decode pass");
    if (!rc) rc = tr_bench_io_alloc(gg->prefill, 1 + K, tr_graph_output, &gen->pre_out, err);
    if (!rc) rc = tr_bench_io_alloc(gg->decode, p->n_step_inputs + K, tr_graph_input, &gen->dec_in, err);
    if (!rc) rc = tr_bench_io_alloc(gg->decode, 1 + K, tr_graph_output, &gen->dec_out, err);
    if (!rc && !(gen->fed = calloc((size_t)gg->opts.batch, sizeof *gen->fed)))
        rc = tr_error_set(err, TR_ERR_NOMEM, "generate: out of memory");
    if (!rc && gc->top_p_sampling &&
        !(gen->scratch = scratch_alloc(gen->pre_out[0].shape[gen->pre_out[0].ndim - 1])))
        rc = tr_error_set(err, TR_ERR_NOMEM, "generate: out of memory for top_p's candidates");
    if (rc) tr_generator_free(gen);
    else *out = gen;
    return rc;
}

void tr_generator_free(struct tr_generator *gen) {
    if (!gen) return;
    const struct tr_generate_plan *p = &gen->gg->plan;
    tr_bench_io_free(gen->pre_out, 1 + gen->host_cache);
    tr_bench_io_free(gen->dec_in, p->n_step_inputs + gen->host_cache);
    tr_bench_io_free(gen->dec_out, 1 + gen->host_cache);
    free(gen->fed);
    free(gen->scratch);
    tr_program_free(gen->prefill);
    tr_program_free(gen->decode);
    free(gen);
}

/* n entries starting at slot `slot` of cache tensor c, from src (n slots on the same axis). */
static void cache_write(struct tr_tensor *c, const struct tr_tensor *src, int axis, int64_t slot) {
    const int64_t n = src->shape[axis], slots = c->shape[axis];
    int64_t outer = 1, inner = (int64_t)tr_dtype_size((enum tr_dtype)c->dtype);
    for (int d = 0; d < axis; d++) outer *= c->shape[d];
    for (int d = axis + 1; d < c->ndim; d++) inner *= c->shape[d];
    char *dst = c->data;
    const char *s = src->data;
    for (int64_t o = 0; o < outer; o++)
        memcpy(dst + (size_t)((o * slots + slot) * inner), s + (size_t)(o * n * inner), (size_t)(n * inner));
}

int tr_generator_run(struct tr_generator *gen, const struct tr_tensor *prompt, int32_t *tokens,
                     struct tr_generate_times *times, tr_generate_logits_fn on_logits, void *user,
                     struct tr_error *err) {
    const struct tr_generate_graphs *gg = gen->gg;
    const struct tr_generate_plan *p = &gg->plan;
    const int64_t B = gg->opts.batch, T = gg->opts.prompt_len, NEW = gg->opts.max_length - T;
    const int S = p->n_step_inputs, K = gen->host_cache;
    struct tr_tensor *cache = gen->dec_in + S;
    struct tr_generate_times tm = {0};
    double t0 = tr_bench_now_ms();
    int rc = tr_backend_execute(gen->be, gen->prefill, p->n_prompt_inputs, prompt, 1 + K, gen->pre_out, err);
    if (rc) return tr_error_prefix(err, "prefill");
    gen->prefills++;
    if (on_logits) on_logits(user, 0, &gen->pre_out[0]);
    for (int64_t b = 0; b < B; b++) tokens[b * NEW] = pick(&gen->gc, &gen->pre_out[0], b, T, gen->scratch, NULL);
    if (K > 0) { /* kv_cache = inputs; as state, the pass wrote its entries itself */
        double tw = tr_bench_now_ms();
        for (int k = 0; NEW > 1 && k < K; k++) cache_write(&cache[k], &gen->pre_out[1 + k], p->cache_axis, 0);
        tm.cache_write_ms += tr_bench_now_ms() - tw;
    }
    double t1 = tr_bench_now_ms();
    tm.prefill_ms = t1 - t0;
    for (int64_t s = 1; s < NEW; s++) {
        const int64_t pos = T + s - 1; /* the fed token's position */
        for (int64_t b = 0; b < B; b++) gen->fed[b] = tokens[b * NEW + s - 1];
        rc = gen->m->generate->step_inputs(gen->config, &gg->opts, prompt, pos, gen->fed, S, gen->dec_in, err);
        if (!rc) rc = tr_backend_execute(gen->be, gen->decode, S + K, gen->dec_in, 1 + K, gen->dec_out, err);
        if (rc) return tr_error_prefix(err, "decode pass for new token %lld", (long long)s + 1);
        gen->decodes++;
        tm.decode_passes++;
        if (on_logits) on_logits(user, s, &gen->dec_out[0]);
        for (int64_t b = 0; b < B; b++) tokens[b * NEW + s] = pick(&gen->gc, &gen->dec_out[0], b, pos + 1, gen->scratch, NULL);
        if (K > 0) {
            double tw = tr_bench_now_ms();
            for (int k = 0; s + 1 < NEW && k < K; k++) cache_write(&cache[k], &gen->dec_out[1 + k], p->cache_axis, pos);
            tm.cache_write_ms += tr_bench_now_ms() - tw;
        }
    }
    tm.decode_ms = tr_bench_now_ms() - t1;
    gen->calls++;
    if (times) *times = tm;
    return TR_OK;
}

int tr_generator_stats(struct tr_generator *gen, struct tr_backend_stats *decode, struct tr_backend_stats *prefill,
                       struct tr_error *err) {
    int rc = TR_OK;
    if (decode) rc = tr_backend_get_stats(gen->be, gen->decode, decode, err);
    if (!rc && prefill) rc = tr_backend_get_stats(gen->be, gen->prefill, prefill, err);
    return rc;
}

void tr_generator_counts(const struct tr_generator *gen, int *compiles, int64_t *prefills, int64_t *decodes) {
    if (compiles) *compiles = (gen->prefill != NULL) + (gen->decode != NULL);
    if (prefills) *prefills = gen->prefills;
    if (decodes) *decodes = gen->decodes;
}
