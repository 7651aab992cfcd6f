/* Model registry lookup and config resolution: a preset's config struct, then the INI's
 * [model] overrides parsed by each key's type. A key's min/max bound INT and FLOAT
 * values when min < max; a descriptor that leaves both at 0 gets no bound. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include "trident/parse.h"
#include "trident/model.h"
#include "trident/safetensors.h"
#include "shard_index.h"

static const char *const task_names[TR_TASK_COUNT] = {"predict", "fit", "generate"};

const char *tr_task_name(enum tr_task t) {
    return (unsigned)t < TR_TASK_COUNT ? task_names[t] : "?";
}

int tr_task_from_name(const char *s, enum tr_task *out) {
    for (int i = 0; s && i < TR_TASK_COUNT; i++) {
        if (strcmp(s, task_names[i]) == 0) {
            *out = (enum tr_task)i;
            return TR_OK;
        }
    }
    return TR_ERR_NOT_FOUND;
}

/* Append ", name" (or "name" first) to a list being built in buf. */
static void list_add(char *buf, size_t n, const char *name) {
    size_t len = strlen(buf);
    if (len + 1 < n) snprintf(buf + len, n - len, "%s%s", len ? ", " : "", name);
}

int tr_model_find(const struct tr_model_desc *const *models, const char *name, const struct tr_model_desc **out,
                  struct tr_error *err) {
    if (!models || !name || !out) return tr_error_set(err, TR_ERR_INVALID, "tr_model_find: NULL argument");
    char names[512] = "";
    for (int i = 0; models[i]; i++) {
        if (strcmp(models[i]->name, name) == 0) {
            *out = models[i];
            return TR_OK;
        }
        list_add(names, sizeof names, models[i]->name);
    }
    return tr_error_set(err, TR_ERR_NOT_FOUND, "unknown model '%s' (models: %s)", name,
                        names[0] ? names : "none built in");
}

static int key_is_bounded(const struct tr_model_key *k) {
    return k->min < k->max;
}

/* What a key accepts, for messages: "an integer from 1 to 64". */
static void key_expect(const struct tr_model_key *k, char *buf, size_t n) {
    switch (k->type) {
    case TR_KEY_INT:
        if (key_is_bounded(k)) snprintf(buf, n, "an integer from %.0f to %.0f", k->min, k->max);
        else snprintf(buf, n, "an integer");
        return;
    case TR_KEY_FLOAT:
        if (key_is_bounded(k)) snprintf(buf, n, "a number from %g to %g", k->min, k->max);
        else snprintf(buf, n, "a finite number");
        return;
    case TR_KEY_BOOL:
        snprintf(buf, n, "%s", TR_BOOL_WORDS);
        return;
    case TR_KEY_STRING:
        snprintf(buf, n, "a string of at most 63 characters");
        return;
    }
    snprintf(buf, n, "nothing (the key has an unknown type %d)", (int)k->type);
}

/* Parse v by k's type into the config struct; 0 when v does not fit. */
static int key_set(const struct tr_model_key *k, const char *v, char *config) {
    char *end;
    errno = 0;
    switch (k->type) {
    case TR_KEY_INT: {
        const char *d = (*v == '+' || *v == '-') ? v + 1 : v;
        if (!isdigit((unsigned char)*d)) return 0;
        long long x = strtoll(v, &end, 10);
        if (*end || errno == ERANGE) return 0;
        if (key_is_bounded(k) && ((double)x < k->min || (double)x > k->max)) return 0;
        int64_t x64 = x;
        memcpy(config + k->offset, &x64, sizeof x64);
        return 1;
    }
    case TR_KEY_FLOAT: {
        if (!*v || isspace((unsigned char)*v)) return 0;
        double x = strtod(v, &end);
        if (*end || errno == ERANGE || !isfinite(x)) return 0;
        if (key_is_bounded(k) && (x < k->min || x > k->max)) return 0;
        memcpy(config + k->offset, &x, sizeof x);
        return 1;
    }
    case TR_KEY_BOOL: {
        int b;
        if (tr_parse_bool(v, &b)) return 0; /* the words backend options take too */
        memcpy(config + k->offset, &b, sizeof b);
        return 1;
    }
    case TR_KEY_STRING: {
        size_t len = strlen(v);
        if (len >= 64) return 0;
        memcpy(config + k->offset, v, len + 1);
        return 1;
    }
    }
    return 0;
}

/* kv's key among keys (or skip's, the keys read elsewhere: *k NULL); an unknown key is
 * an error listing every key of the section. */
static int find_key(const struct tr_config *cfg, const struct tr_config_kv *kv, const struct tr_model_key *keys,
                    int n_keys, const char *owner, const char *const *skip, const struct tr_model_key **k,
                    struct tr_error *err) {
    *k = NULL;
    for (int j = 0; skip && skip[j]; j++)
        if (strcmp(kv->key, skip[j]) == 0) return TR_OK;
    for (int j = 0; j < n_keys; j++)
        if (strcmp(keys[j].name, kv->key) == 0) {
            *k = &keys[j];
            return TR_OK;
        }
    char names[768] = "", hint[128];
    const char *words[256];
    int n_words = 0;
    for (int j = 0; j < n_keys; j++) {
        list_add(names, sizeof names, keys[j].name);
        if (n_words < 256) words[n_words++] = keys[j].name;
    }
    for (int j = 0; skip && skip[j]; j++) {
        list_add(names, sizeof names, skip[j]);
        if (n_words < 256) words[n_words++] = skip[j];
    }
    return tr_error_set(err, TR_ERR_NOT_FOUND, "%s:%d: [%s] %s = %s: unknown key for %s%s (keys: %s)", cfg->file,
                        kv->line, kv->section, kv->key, kv->value, owner,
                        tr_config_key_hint(kv->key, kv->section, words, n_words, hint, sizeof hint),
                        names[0] ? names : "none");
}

/* cfg's [section] keys into out; a key named `skip` (not NULL) is left to the caller. */
static int keys_apply(const struct tr_config *cfg, const char *section, const struct tr_model_key *keys, int n_keys,
                      const char *owner, void *out, const char *const *skip, struct tr_error *err) {
    for (int i = 0; i < cfg->n_kv; i++) {
        const struct tr_config_kv *kv = &cfg->kv[i];
        if (strcmp(kv->section, section) != 0) continue;
        const struct tr_model_key *k;
        int rc = find_key(cfg, kv, keys, n_keys, owner, skip, &k, err);
        if (rc) return rc;
        if (k && !key_set(k, kv->value, out)) {
            char expect[128];
            key_expect(k, expect, sizeof expect);
            return tr_error_set(err, TR_ERR_INVALID, "%s:%d: [%s] %s = %s: expected %s", cfg->file, kv->line, section,
                                kv->key, kv->value, expect);
        }
    }
    return TR_OK;
}

int tr_keys_check_names(const struct tr_config *cfg, const char *section, const struct tr_model_key *keys,
                        int n_keys, const char *owner, const char *const *also, struct tr_error *err) {
    for (int i = 0; i < cfg->n_kv; i++) {
        const struct tr_model_key *k;
        int rc = strcmp(cfg->kv[i].section, section) ? TR_OK
                                                     : find_key(cfg, &cfg->kv[i], keys, n_keys, owner, also, &k, err);
        if (rc) return rc;
    }
    return TR_OK;
}

static int model_key_given(const struct tr_config *cfg, const char *key) {
    for (int i = 0; i < cfg->n_kv; i++)
        if (!strcmp(cfg->kv[i].section, "model") && !strcmp(cfg->kv[i].key, key)) return 1;
    return 0;
}

/* [run] weights = a model's directory (a Hub download) whose config.json no hf_config
 * names: from_pretrained would build the model from it, trident builds the preset. Where
 * the two differ the logits do, so the keys that differ are said (the [model] lines' own
 * keys left out: the user chose those). */
static void warn_unread_config_json(const struct tr_model_desc *m, const struct tr_config *cfg, const void *config) {
    if (!m->read_hf_config || !cfg->weights[0] || model_key_given(cfg, "hf_config")) return;
    char path[TR_CONFIG_PATH + 16];
    struct stat sb;
    if (stat(cfg->weights, &sb) != 0 || !S_ISDIR(sb.st_mode)) return;
    snprintf(path, sizeof path, "%s/config.json", cfg->weights);
    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) return;
    void *file = malloc(m->config_size);
    if (!file) return;
    memcpy(file, config, m->config_size);
    struct tr_error e = {0};
    char diff[768] = "";
    size_t off = 0;
    int n = 0;
    if (m->read_hf_config(file, path, &e) != TR_OK) {
        fprintf(stderr, "trident: warning: %s: [run] weights = %s holds a config.json that [model] hf_config does "
                "not name, and it does not read as model '%s''s (%s); the model is preset %s\n", cfg->file,
                cfg->weights, m->name, e.msg, cfg->preset);
        free(file);
        return;
    }
    for (int k = 0; k < m->n_keys; k++) {
        char a[80], b[80];
        if (model_key_given(cfg, m->keys[k].name) || tr_model_key_str(m, config, &m->keys[k], a, sizeof a) ||
            tr_model_key_str(m, file, &m->keys[k], b, sizeof b) || !strcmp(a, b))
            continue;
        if (off < sizeof diff)
            off += (size_t)snprintf(diff + off, sizeof diff - off, "%s%s = %s there, %s here", n ? "; " : "",
                                    m->keys[k].name, b, a);
        n++;
    }
    if (n)
        fprintf(stderr, "trident: warning: %s: [run] weights = %s holds a config.json that [model] hf_config does "
                "not name, and it differs from preset %s in %d key%s (%s): the outputs will not be that model's; add "
                "[model] hf_config = %s to build the model from it, as from_pretrained does\n", cfg->file,
                cfg->weights, cfg->preset, n, n == 1 ? "" : "s", diff, cfg->weights);
    free(file);
}

/* The model's key `name` as text, "" where it has none. */
static const char *key_text(const struct tr_model_desc *m, const void *config, const char *name, char *buf, size_t n) {
    buf[0] = '\0';
    for (int k = 0; k < m->n_keys; k++)
        if (!strcmp(m->keys[k].name, name) && tr_model_key_str(m, config, &m->keys[k], buf, n)) buf[0] = '\0';
    return buf;
}

/* The names of a comma list, or of a JSON array of strings, sorted into one canonical
 * "a,b,c" (peft's target_modules against [model] lora_targets). */
static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }
static void canonical_list(const char *text, char *out, size_t n) {
    char buf[512], *names[64];
    int k = 0;
    snprintf(buf, sizeof buf, "%s", text);
    for (char *save = NULL, *t = strtok_r(buf, ", ", &save); t && k < 64; t = strtok_r(NULL, ", ", &save)) names[k++] = t;
    qsort(names, (size_t)k, sizeof *names, cmp_str);
    out[0] = '\0';
    for (int i = 0; i < k; i++) {
        const size_t l = strlen(out);
        snprintf(out + l, n - l, "%s%s", i ? "," : "", names[i]);
    }
}

/* The lora_targets names whose module (m->lora_modules' PATH) peft's target_modules list
 * (comma-separated) reaches as peft matches a list: the path itself or a suffix of it
 * after a dot; into out, comma-separated. 0 when the model names no modules. */
static int peft_targets(const struct tr_model_desc *m, const char *list, char *out, size_t n) {
    out[0] = '\0';
    if (!m->lora_modules) return 0;
    for (const char *const *e = m->lora_modules; *e; e++) {
        const char *eq = strchr(*e, '='), *path = eq ? eq + 1 : *e;
        const size_t pl = strlen(path);
        int hit = 0;
        char buf[512];
        snprintf(buf, sizeof buf, "%s", list);
        for (char *save = NULL, *t = strtok_r(buf, ", ", &save); t && !hit; t = strtok_r(NULL, ", ", &save)) {
            const size_t tl = strlen(t);
            hit = !strcmp(path, t) || (tl < pl && path[pl - tl - 1] == '.' && !strcmp(path + pl - tl, t));
        }
        const size_t l = strlen(out);
        if (hit) snprintf(out + l, n - l, "%s%.*s", l ? "," : "", eq ? (int)(eq - *e) : (int)strlen(*e), *e);
    }
    return 1;
}

/* The adapters are applied: a fit starts from them; predict and generate apply them where
 * the model has no lora_predict key (BERT) or it is true. */
static int adapters_applied(const struct tr_model_desc *m, const struct tr_config *cfg, const void *config) {
    char on[16];
    if (!strcmp(cfg->task, "fit")) return 1;
    for (int k = 0; k < m->n_keys; k++)
        if (!strcmp(m->keys[k].name, "lora_predict")) return !strcmp(key_text(m, config, "lora_predict", on, sizeof on), "true");
    return 1;
}

/* What adapter_config.json (path, parsed as root) asks for that trident does not compute,
 * refused rather than run to other numbers than the PeftModel's: use_dora (DoRA: the
 * weight's norm rescaled by lora_magnitude_vector), an alpha_pattern or rank_pattern entry
 * other than the file's lora_alpha or r (one scale and one rank for every targeted layer
 * here). Only where the adapters are applied (adapters_applied). */
static int adapter_refused(const struct tr_model_desc *m, const struct tr_config *cfg, const void *config,
                           const char *path, const cJSON *root, struct tr_error *err) {
    if (!adapters_applied(m, cfg, config)) return TR_OK;
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "use_dora")))
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "%s: [run] weights: %s: use_dora = true (DoRA: each weight's "
                            "norm rescaled by its lora_magnitude_vector), which trident does not compute: the outputs "
                            "would not be the PeftModel's; merge the adapter into the base model (merge_and_unload) "
                            "and read that", cfg->file, path);
    static const char *const pat[2] = {"alpha_pattern", "rank_pattern"}, *const of[2] = {"lora_alpha", "r"};
    for (int p = 0; p < 2; p++) {
        const cJSON *obj = cJSON_GetObjectItemCaseSensitive(root, pat[p]), *e;
        const cJSON *base = cJSON_GetObjectItemCaseSensitive(root, of[p]), *entries = cJSON_IsObject(obj) ? obj : NULL;
        cJSON_ArrayForEach(e, entries) {
            if (cJSON_IsNumber(e) && cJSON_IsNumber(base) && e->valuedouble == base->valuedouble) continue;
            char v[64];
            if (cJSON_IsNumber(e)) snprintf(v, sizeof v, "%g", e->valuedouble);
            else snprintf(v, sizeof v, "(not a number)");
            return tr_error_set(err, TR_ERR_UNSUPPORTED, "%s: [run] weights: %s: %s gives \"%.64s\" %s = %s, not the "
                                "file's %s = %g: trident computes one %s for every layer LoRA targets ([model] %s), "
                                "so those layers would not be the PeftModel's; %s", cfg->file, path, pat[p],
                                e->string ? e->string : "?", of[p], v, of[p],
                                cJSON_IsNumber(base) ? base->valuedouble : 0.0, p ? "rank" : "scale alpha/r",
                                p ? "lora_rank" : "lora_alpha",
                                p ? "their adapters' shapes are not lora_rank's"
                                  : "merge the adapter into the base model (merge_and_unload) and read that");
        }
    }
    return TR_OK;
}

/* A LoRA fit trains the factors (and BERT's classifier, as peft's SEQ_CLS does); a peft fit
 * with bias = "all" or "lora_only" trains those biases too, and one with modules_to_save
 * those modules: what peft would train that this fit does not is said, by name, from the
 * fit's own graph (the model's trainable parameters against its biases and modules). */
static void warn_peft_trains(const struct tr_model_desc *m, const struct tr_config *cfg, const void *config,
                             const char *path, const cJSON *root) {
    const cJSON *bias = cJSON_GetObjectItemCaseSensitive(root, "bias");
    const cJSON *mts = cJSON_GetObjectItemCaseSensitive(root, "modules_to_save");
    const int all = cJSON_IsString(bias) && !strcmp(bias->valuestring, "all");
    const int lora_only = cJSON_IsString(bias) && !strcmp(bias->valuestring, "lora_only");
    if ((!all && !lora_only && cJSON_GetArraySize(mts) == 0) || !m->build || !m->trainable) return;
    struct tr_graph *g = NULL;
    struct tr_error e = {0};
    const struct tr_build_opts o = {.task = TR_TASK_FIT, .dtype = TR_DTYPE_F32, .batch = 1, .seq_len = 8};
    enum { MAX_IDS = 4096 };
    int *ids = malloc(MAX_IDS * sizeof *ids), n_ids = 0;
    if (!ids || tr_graph_init(&g, &e) || m->build(config, &o, g, &e) || m->trainable(config, g, ids, MAX_IDS, &n_ids, &e)) {
        free(ids);
        tr_graph_free(g);
        return;
    }
    char list[1024] = "";
    int n = 0;
    for (int i = 0; i < tr_graph_n_params(g); i++) {
        const int id = tr_graph_param(g, i);
        const char *name = tr_node_name(g, id), *last = strrchr(name, '.');
        int trained = tr_param_is_fresh(g, id); /* the factors, optimizer state */
        for (int j = 0; j < n_ids && !trained; j++) trained = ids[j] == id;
        if (trained || !last) continue;
        int peft = 0;
        if (!strcmp(last, ".bias") && (all || lora_only)) {
            char a[512];
            snprintf(a, sizeof a, "%.*s.lora_A.weight", (int)(last - name), name);
            peft = all || tr_graph_find(g, a) >= 0;
        }
        const cJSON *s, *modules = cJSON_IsArray(mts) ? mts : NULL;
        cJSON_ArrayForEach(s, modules) { /* peft's _set_trainable: the module's name ends with it */
            const size_t l = cJSON_IsString(s) ? strlen(s->valuestring) : 0, ml = (size_t)(last - name);
            peft = peft || (l && l <= ml && !strncmp(name + ml - l, s->valuestring, l));
        }
        if (!peft) continue;
        /* the name, its layer numbers as '*', each pattern once */
        char pattern[256];
        tr_text_layer_pattern(name, pattern, sizeof pattern);
        char needle[260], hay[1100];
        snprintf(needle, sizeof needle, ", %s, ", pattern);
        snprintf(hay, sizeof hay, ", %s, ", list);
        if (strstr(hay, needle)) continue;
        if (strlen(list) + strlen(pattern) + 8 >= sizeof list) continue;
        list_add(list, sizeof list, pattern);
        n++;
    }
    free(ids);
    tr_graph_free(g);
    if (!n) return;
    char what[256] = "";
    if (all || lora_only) list_add(what, sizeof what, all ? "bias = \"all\"" : "bias = \"lora_only\"");
    if (cJSON_GetArraySize(mts) > 0) list_add(what, sizeof what, "modules_to_save");
    fprintf(stderr, "trident: warning: %s: [run] weights: %s (peft's) has %s: a peft fit trains these beside the "
            "LoRA factors, this fit does not (it keeps them as read): %s; the trained model will not be the "
            "PeftModel's\n", cfg->file, path, what, list);
}

/* [run] weights = a directory with peft's adapter_config.json: trident reads the adapters'
 * tensors but takes r, alpha and the targets from [model] (lora_rank, lora_alpha,
 * lora_targets); where they differ from the file's, the PeftModel computes another scale
 * (alpha / r) or other layers, so each difference is said. What trident does not compute
 * at all, where the adapters are applied, is refused (adapter_refused); what a peft fit
 * trains beside the factors is said for a fit (warn_peft_trains). */
static int check_adapter_config(const struct tr_model_desc *m, const struct tr_config *cfg, const void *config,
                                struct tr_error *err) {
    char path[TR_CONFIG_PATH + 128], rank[80], alpha[80], targets[512];
    struct stat sb;
    if (!cfg->weights[0] || stat(cfg->weights, &sb) != 0 || !S_ISDIR(sb.st_mode) ||
        !key_text(m, config, "lora_rank", rank, sizeof rank)[0] || !strcmp(rank, "0"))
        return TR_OK;
    /* in the directory or one below it (weights/adapter/), as the weights are read */
    snprintf(path, sizeof path, "%s/adapter_config.json", cfg->weights);
    int found = stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
    DIR *d = found ? NULL : opendir(cfg->weights);
    for (struct dirent *de; d && !found && (de = readdir(d));) {
        if (de->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%.64s/adapter_config.json", cfg->weights, de->d_name);
        found = stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
    }
    if (d) closedir(d);
    if (!found) return TR_OK;
    FILE *f = fopen(path, "rb");
    char *text = f ? malloc((size_t)sb.st_size + 1) : NULL;
    const size_t got = text ? fread(text, 1, (size_t)sb.st_size, f) : 0;
    if (f) fclose(f);
    if (!text) return TR_OK;
    text[got] = '\0';
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!root) return TR_OK;
    int rc = adapter_refused(m, cfg, config, path, root, err);
    if (!rc && !strcmp(cfg->task, "fit")) warn_peft_trains(m, cfg, config, path, root);
    key_text(m, config, "lora_alpha", alpha, sizeof alpha);
    key_text(m, config, "lora_targets", targets, sizeof targets);
    const double r = atof(rank), a = atof(alpha) > 0 ? atof(alpha) : r;
    char diff[768] = "";
    size_t off = 0;
    const cJSON *fr = cJSON_GetObjectItemCaseSensitive(root, "r"), *fa = cJSON_GetObjectItemCaseSensitive(root, "lora_alpha");
    const cJSON *ft = cJSON_GetObjectItemCaseSensitive(root, "target_modules");
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(root, "use_rslora");
    if (cJSON_IsNumber(fr) && fr->valuedouble != r)
        off += (size_t)snprintf(diff + off, sizeof diff - off, "%sr = %g there, lora_rank = %g here", off ? "; " : "",
                                fr->valuedouble, r);
    if (cJSON_IsNumber(fa) && cJSON_IsNumber(fr) && fr->valuedouble > 0 && r > 0 &&
        fa->valuedouble / fr->valuedouble != a / r && off < sizeof diff)
        off += (size_t)snprintf(diff + off, sizeof diff - off, "%slora_alpha = %g there (scale %g), %g here (scale %g)",
                                off ? "; " : "", fa->valuedouble, fa->valuedouble / fr->valuedouble, a, a / r);
    if (cJSON_IsTrue(rs) && off < sizeof diff)
        off += (size_t)snprintf(diff + off, sizeof diff - off, "%suse_rslora = true there (scale alpha/sqrt(r)), "
                                "which trident does not compute", off ? "; " : "");
    if ((cJSON_IsArray(ft) || cJSON_IsString(ft)) && targets[0] && off < sizeof diff) {
        char list[512] = "", a_c[512], b_c[512];
        const cJSON *e;
        if (cJSON_IsString(ft)) snprintf(list, sizeof list, "%s", ft->valuestring);
        const cJSON *arr = cJSON_IsArray(ft) ? ft : NULL;
        cJSON_ArrayForEach(e, arr) {
            const size_t l = strlen(list);
            if (cJSON_IsString(e)) snprintf(list + l, sizeof list - l, "%s%s", l ? "," : "", e->valuestring);
        }
        char mapped[512];
        const int by_module = cJSON_IsArray(ft) && peft_targets(m, list, mapped, sizeof mapped);
        canonical_list(by_module ? mapped : list, a_c, sizeof a_c);
        canonical_list(targets, b_c, sizeof b_c);
        char file_list[600];
        canonical_list(list, file_list, sizeof file_list);
        if (by_module && strcmp(file_list, a_c) != 0) /* peft's names are not trident's: say both */
            snprintf(file_list + strlen(file_list), sizeof file_list - strlen(file_list), " (lora_targets = %s)",
                     a_c[0] ? a_c : "none of trident's");
        if (strcmp(a_c, b_c) != 0)
            off += (size_t)snprintf(diff + off, sizeof diff - off, "%starget_modules = %s there, lora_targets = %s here",
                                    off ? "; " : "", file_list, b_c);
    }
    cJSON_Delete(root);
    if (rc) return rc;
    if (off)
        fprintf(stderr, "trident: warning: %s: [run] weights: %s (peft's), which trident does not read, differs from "
                "the run's [model] LoRA keys (%s): the outputs will not be the PeftModel's; set [model] lora_rank, "
                "lora_alpha and lora_targets as the file says\n", cfg->file, path, diff);
    return TR_OK;
}

/* [model] LoRA keys under lora_rank = 0 (LoRA off): not read, so a typo in them would
 * pass unseen; said, each with its line. */
static void warn_lora_off(const struct tr_model_desc *m, const struct tr_config *cfg, const void *config) {
    char rank[32];
    if (strcmp(key_text(m, config, "lora_rank", rank, sizeof rank), "0") != 0) return;
    for (int i = 0; i < cfg->n_kv; i++) {
        const struct tr_config_kv *kv = &cfg->kv[i];
        if (strcmp(kv->section, "model") || strncmp(kv->key, "lora_", 5) || !strcmp(kv->key, "lora_rank")) continue;
        fprintf(stderr, "trident: warning: %s:%d: [model] %s = %s is not read: lora_rank = 0 (LoRA off)\n", cfg->file,
                kv->line, kv->key, kv->value);
    }
}

/* Tensor `name` of the .safetensors files at path (a file, or a directory and its
 * immediate subdirectories, as the weights are read): its dtype, shape and bytes into
 * *t (the file stays open in *st, the caller closes it). 0 when none has it. */
static int find_tensor(const char *path, const char *name, struct tr_safetensors **st, const char **dt, int *nd,
                       int64_t shape[TR_MAX_DIMS], const void **data, int depth) {
    struct stat sb;
    if (stat(path, &sb) != 0) return 0;
    if (S_ISREG(sb.st_mode)) {
        const size_t n = strlen(path);
        struct tr_error e = {0};
        if (n < 12 || strcmp(path + n - 12, ".safetensors") || tr_shard_index_skips(path, NULL, 0) ||
            tr_safetensors_open(path, st, &e))
            return 0;
        if (tr_safetensors_find(*st, name) >= 0 && tr_safetensors_get_bytes(*st, name, dt, nd, shape, data, &e) == TR_OK)
            return 1;
        tr_safetensors_close(*st);
        *st = NULL;
        return 0;
    }
    DIR *d = S_ISDIR(sb.st_mode) && depth < 2 ? opendir(path) : NULL;
    int hit = 0;
    for (struct dirent *de; d && !hit && (de = readdir(d));) {
        char p[TR_CONFIG_PATH + 300];
        if (de->d_name[0] == '.' || snprintf(p, sizeof p, "%s/%s", path, de->d_name) >= (int)sizeof p) continue;
        hit = find_tensor(p, name, st, dt, nd, shape, data, depth + 1);
    }
    if (d) closedir(d);
    return hit;
}

/* The same tensor: dtype, shape and bytes (float dtypes only). */
static int same_tensor(const char *da, int na, const int64_t *sa, const void *pa, const char *db, int nb,
                       const int64_t *sb, const void *pb) {
    int same = !strcmp(da, db) && na == nb && (!strcmp(da, "F32") || !strcmp(da, "BF16") || !strcmp(da, "F16"));
    size_t bytes = strcmp(da, "F32") ? 2 : 4;
    for (int d = 0; same && d < na; d++) same = sa[d] == sb[d], bytes *= (size_t)sa[d];
    return same && !memcmp(pa, pb, bytes);
}

/* A config that ties the head to the embedding table (tie_word_embeddings, from the preset
 * or hf_config, not a [model] line) over weights whose head differs from the table the
 * model embeds with is untied, with a note, so that it computes what the reference does:
 * - a checkpoint with its own lm_head.weight: transformers' from_pretrained does not tie
 *   them and uses the file's head (its tie_weights: "both are present in the checkpoints
 *   with different values, so we will NOT tie them");
 * - a peft adapter with a copy of lm_head (modules_to_save = ["lm_head"], saved as
 *   base_model.model.lm_head.weight): the PeftModel's head is that copy, the embedding
 *   the base model's table;
 * - a peft adapter with a copy of the embedding (modules_to_save = ["embed_tokens"]): the
 *   PeftModel embeds with the copy and keeps its head on the original table (the base
 *   checkpoint's model.embed_tokens.weight, which the weights loader reads for the untied
 *   lm_head.weight: weights.c's find_from); unless the adapter holds a head equal to its
 *   copy (peft's ensure_weight_tying = true saves both, one tensor).
 * Equal ones stay tied. */
static void untie_head(const struct tr_model_desc *m, const struct tr_config *cfg, void *config) {
    const struct tr_model_key *k = NULL;
    for (int i = 0; i < m->n_keys; i++)
        if (!strcmp(m->keys[i].name, "tie_word_embeddings") && m->keys[i].type == TR_KEY_BOOL) k = &m->keys[i];
    int tied = 0;
    if (!k || !cfg->weights[0] || model_key_given(cfg, "tie_word_embeddings")) return;
    memcpy(&tied, (char *)config + k->offset, sizeof tied);
    if (!tied) return;
    static const char *const head_names[2] = {"base_model.model.lm_head.weight", "lm_head.weight"},
                             *const embed_names[3] = {"base_model.model.model.embed_tokens.weight",
                                                      "model.embed_tokens.weight", NULL};
    struct tr_safetensors *sh = NULL, *se = NULL;
    const char *dh = NULL, *de = NULL;
    int nh = 0, ne = 0, h = -1, e = -1;
    int64_t shh[TR_MAX_DIMS], she[TR_MAX_DIMS];
    const void *ph = NULL, *pe = NULL;
    for (int i = 0; i < 2 && h < 0; i++)
        if (find_tensor(cfg->weights, head_names[i], &sh, &dh, &nh, shh, &ph, 0)) h = i;
    for (int i = 0; i < 2 && e < 0; i++)
        if (find_tensor(cfg->weights, embed_names[i], &se, &de, &ne, she, &pe, 0)) e = i;
    if (h < 0 && e == 0) /* no head anywhere: the PeftModel's is the base model's table */
        h = find_tensor(cfg->weights, embed_names[1], &sh, &dh, &nh, shh, &ph, 0) ? 2 : -1;
    if (h >= 0 && e >= 0 && !same_tensor(dh, nh, shh, ph, de, ne, she, pe)) {
        const int untied = 0;
        memcpy((char *)config + k->offset, &untied, sizeof untied);
        if (h == 1)
            fprintf(stderr, "trident: note: %s: [run] weights = %s has an lm_head.weight of its own, not the "
                    "embedding table: the head is untied (tie_word_embeddings = false), as transformers' "
                    "from_pretrained reads such a checkpoint; [model] tie_word_embeddings = true ties it\n",
                    cfg->file, cfg->weights);
        else if (h == 0)
            fprintf(stderr, "trident: note: %s: [run] weights = %s holds peft's trained copy of lm_head "
                    "(modules_to_save: base_model.model.lm_head.weight), not the embedding table: the head is "
                    "untied (tie_word_embeddings = false) and is that copy, as the PeftModel computes; [model] "
                    "tie_word_embeddings = true ties it\n", cfg->file, cfg->weights);
        else
            fprintf(stderr, "trident: note: %s: [run] weights = %s holds peft's trained copy of embed_tokens "
                    "(modules_to_save: base_model.model.model.embed_tokens.weight): the PeftModel embeds with "
                    "the copy and keeps its head on the base model's table, so the head is untied "
                    "(tie_word_embeddings = false) and reads model.embed_tokens.weight; [model] "
                    "tie_word_embeddings = true ties it to the copy\n", cfg->file, cfg->weights);
    }
    tr_safetensors_close(sh);
    tr_safetensors_close(se);
}

int tr_model_resolve(const struct tr_model_desc *m, const char *preset, const struct tr_config *cfg, void *config,
                     struct tr_error *err) {
    if (!m || !preset || !config) return tr_error_set(err, TR_ERR_INVALID, "tr_model_resolve: NULL argument");
    const struct tr_model_preset *p = NULL;
    char names[512] = "";
    for (int i = 0; i < m->n_presets; i++) {
        if (strcmp(m->presets[i].name, preset) == 0) p = &m->presets[i];
        list_add(names, sizeof names, m->presets[i].name);
    }
    if (!p) {
        if (cfg && strcmp(cfg->preset, preset) == 0) {
            char where[TR_CONFIG_PATH + 96];
            return tr_error_set(err, TR_ERR_NOT_FOUND, "%s = %s: model '%s' has no such preset (presets: %s)",
                                tr_config_where(cfg, "preset", cfg->preset_line, where, sizeof where), preset, m->name,
                                names[0] ? names : "none");
        }
        return tr_error_set(err, TR_ERR_NOT_FOUND, "preset '%s' of model '%s' does not exist; presets: %s", preset,
                            m->name, names[0] ? names : "none");
    }
    if (!p->config || m->config_size == 0)
        return tr_error_set(err, TR_ERR_INTERNAL, "model '%s': preset '%s' has no config (a broken descriptor)",
                            m->name, p->name);
    memcpy(config, p->config, m->config_size);
    if (!cfg) return TR_OK;
    /* hf_config first: the file (with its class's defaults) over the preset, the other
     * [model] keys over the file */
    for (int i = 0; m->read_hf_config && i < cfg->n_kv; i++) {
        const struct tr_config_kv *kv = &cfg->kv[i];
        if (strcmp(kv->section, "model") != 0 || strcmp(kv->key, "hf_config") != 0) continue;
        char path[TR_CONFIG_PATH];
        int rc = tr_config_path(cfg, kv->value, path, sizeof path, err);
        /* a model's directory (a Hub download, as from_pretrained takes it): its config.json */
        struct stat sb;
        const size_t n = strlen(path);
        if (!rc && stat(path, &sb) == 0 && S_ISDIR(sb.st_mode) && n + 13 < sizeof path) {
            char file[TR_CONFIG_PATH];
            snprintf(file, sizeof file, "%s/config.json", path);
            if (stat(file, &sb) == 0 && S_ISREG(sb.st_mode)) memcpy(path, file, n + 13);
        }
        if (!rc) rc = m->read_hf_config(config, path, err);
        if (rc) return tr_error_prefix(err, "%s:%d: [model] hf_config = %s", cfg->file, kv->line, kv->value);
    }
    char owner[96];
    snprintf(owner, sizeof owner, "model '%s'", m->name);
    static const char *const hf[] = {"hf_config", NULL};
    int rc = keys_apply(cfg, "model", m->keys, m->n_keys, owner, config, m->read_hf_config ? hf : NULL, err);
    if (!rc) untie_head(m, cfg, config);
    if (!rc) warn_lora_off(m, cfg, config);
    if (!rc) warn_unread_config_json(m, cfg, config);
    if (!rc) rc = check_adapter_config(m, cfg, config, err);
    return rc;
}

int tr_keys_apply(const struct tr_config *cfg, const char *section, const struct tr_model_key *keys, int n_keys,
                  const char *owner, void *out, struct tr_error *err) {
    return keys_apply(cfg, section, keys, n_keys, owner, out, NULL, err);
}

int tr_keys_apply_except(const struct tr_config *cfg, const char *section, const struct tr_model_key *keys,
                         int n_keys, const char *owner, void *out, const char *const *skip, struct tr_error *err) {
    return keys_apply(cfg, section, keys, n_keys, owner, out, skip, err);
}

/* The shortest %g that reads back as the same double, so 0.1 prints as "0.1". */
static int format_double(double x, char *buf, size_t n) {
    int len = 0;
    for (int prec = 6; prec <= 17; prec++) {
        len = snprintf(buf, n, "%.*g", prec, x);
        if (len < 0 || (size_t)len >= n || strtod(buf, NULL) == x) break;
    }
    return len;
}

int tr_model_key_str(const struct tr_model_desc *m, const void *config, const struct tr_model_key *k, char *buf,
                     size_t n) {
    if (!m || !config || !k || !buf || n == 0) return TR_ERR_INVALID;
    const char *c = config;
    int len;
    switch (k->type) {
    case TR_KEY_INT: {
        int64_t x;
        memcpy(&x, c + k->offset, sizeof x);
        len = snprintf(buf, n, "%lld", (long long)x);
        break;
    }
    case TR_KEY_FLOAT: {
        double x;
        memcpy(&x, c + k->offset, sizeof x);
        len = format_double(x, buf, n);
        break;
    }
    case TR_KEY_BOOL: {
        int x;
        memcpy(&x, c + k->offset, sizeof x);
        len = snprintf(buf, n, "%s", x ? "true" : "false");
        break;
    }
    case TR_KEY_STRING:
        len = snprintf(buf, n, "%.63s", c + k->offset);
        break;
    default:
        buf[0] = '\0';
        return TR_ERR_INVALID;
    }
    return len < 0 || (size_t)len >= n ? TR_ERR_INVALID : TR_OK;
}

int tr_name_list_mask(const char *list, const char *const *names, int n, uint32_t *mask, const char **bad,
                      int *bad_len) {
    *mask = 0;
    for (const char *p = list;;) {
        while (*p == ' ' || *p == '\t') p++;
        const char *end = p;
        while (*end && *end != ',') end++;
        size_t len = (size_t)(end - p);
        while (len && (p[len - 1] == ' ' || p[len - 1] == '\t')) len--;
        int found = -1;
        for (int i = 0; i < n && i < 32; i++)
            if (strlen(names[i]) == len && strncmp(names[i], p, len) == 0) found = i;
        if (found < 0) {
            *bad = p;
            *bad_len = (int)len;
            return TR_ERR_NOT_FOUND;
        }
        *mask |= 1u << found;
        if (!*end) return TR_OK;
        p = end + 1;
    }
}
