/* Hugging Face config.json files into model configs (hf_json.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "trident/file.h"
#include "hf_json.h"

/* config.json files are a few KiB; anything far larger is not one. */
#define MAX_JSON_BYTES (1 << 20)

/* Python's json writes float("inf") as Infinity and NaN as NaN, and transformers' and
 * diffusers' save_config pass them through (DPMSolverMultistepScheduler's
 * lambda_min_clipped is -Infinity); JSON and cJSON have neither. Outside strings, where a
 * value starts, Infinity becomes 1e999 (strtod's inf) and NaN the string "NaN", which a
 * key read as a number refuses (null would have meant the class's default, where
 * transformers computes with the NaN): a new string (free it), or NULL without memory. */
static char *python_literals(const char *in, size_t n) {
    char *out = malloc(2 * n + 2), *o = out;
    if (!out) return NULL;
    int str = 0;
    char last = 0; /* the last character outside strings that is not blank */
    for (size_t i = 0; i < n; i++) {
        const char c = in[i];
        if (str) {
            *o++ = c;
            if (c == '\\' && i + 1 < n) *o++ = in[++i];
            else if (c == '"') str = 0;
            continue;
        }
        const int value = last == ':' || last == '[' || last == ',' || last == '-';
        if (value && c == 'I' && n - i >= 8 && strncmp(in + i, "Infinity", 8) == 0) {
            memcpy(o, "1e999", 5), o += 5, i += 7, last = '9';
            continue;
        }
        if (value && c == 'N' && n - i >= 3 && strncmp(in + i, "NaN", 3) == 0) {
            memcpy(o, "\"NaN\"", 5), o += 5, i += 2, last = '"';
            continue;
        }
        if (c == '"') str = 1;
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') last = c;
        *o++ = c;
    }
    *o = '\0';
    return out;
}

/* A key an object holds twice: Python's json (and so transformers) keeps the last value,
 * cJSON would find the first. The earlier ones are dropped, as Python drops them, and said.
 * Objects of a config's size only (pairwise, so quadratic): a vocabulary of 50,000 words
 * read through here is left as it is. */
#define KEEP_LAST_MAX 1024

static void keep_last(cJSON *o, const char *path) {
    const int small = cJSON_IsObject(o) && cJSON_GetArraySize(o) <= KEEP_LAST_MAX;
    cJSON *c = o ? o->child : NULL;
    while (c) {
        cJSON *next = c->next;
        if (small && c->string)
            for (const cJSON *d = next; d; d = d->next)
                if (d->string && strcmp(d->string, c->string) == 0) {
                    fprintf(stderr, "trident: warning: '%s': \"%s\" is given twice; the last is read, as Python's "
                            "json reads it\n", path, c->string);
                    cJSON_Delete(cJSON_DetachItemViaPointer(o, c));
                    c = NULL;
                    break;
                }
        if (c) keep_last(c, path);
        c = next;
    }
}

int tr_hf_json_load(const char *path, cJSON **root, struct tr_error *err) {
    return tr_hf_json_load_max(path, MAX_JSON_BYTES, "a config.json", root, err);
}

int tr_hf_json_load_max(const char *path, size_t max, const char *what, cJSON **root, struct tr_error *err) {
    *root = NULL;
    FILE *f;
    int rc0 = tr_fopen_regular(path, &f, err);
    if (rc0) return rc0;
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return tr_error_set(err, TR_ERR_IO, "cannot read '%s'", path);
    }
    if ((unsigned long)size > max) {
        fclose(f);
        return tr_error_set(err, TR_ERR_FORMAT, "'%s' is %ld bytes, larger than %zu: not %s", path, size, max, what);
    }
    char *buf = malloc((size_t)size + 1);
    if (!buf) {
        fclose(f);
        return tr_error_set(err, TR_ERR_NOMEM, "no memory to read '%s'", path);
    }
    size_t n = fread(buf, 1, (size_t)size, f);
    int bad = ferror(f);
    fclose(f);
    if (bad || n != (size_t)size) {
        free(buf);
        return tr_error_set(err, TR_ERR_IO, "cannot read '%s'", path);
    }
    buf[n] = '\0';
    char *text = python_literals(buf, n);
    free(buf);
    if (!text) return tr_error_set(err, TR_ERR_NOMEM, "no memory to read '%s'", path);
    buf = text, n = strlen(text);
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithOpts(buf, &end, 0);
    int rc = TR_OK;
    while (j && end && (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r')) end++;
    if (!j) {
        const char *at = cJSON_GetErrorPtr();
        rc = tr_error_set(err, TR_ERR_FORMAT, "'%s' is not valid JSON (near byte %ld)", path,
                          at && at >= buf && at <= buf + n ? (long)(at - buf) : -1L);
    } else if (end && *end) { /* json.load's "Extra data": from_pretrained stops there too */
        rc = tr_error_set(err, TR_ERR_FORMAT, "'%s' is not valid JSON: more follows the value that ends at byte %ld",
                          path, (long)(end - buf));
        cJSON_Delete(j);
        j = NULL;
    } else if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        j = NULL;
        rc = tr_error_set(err, TR_ERR_FORMAT, "'%s' is not a JSON object", path);
    } else {
        keep_last(j, path);
    }
    free(buf);
    *root = j;
    return rc;
}

static int is_int(const cJSON *j, double lo, double hi) {
    return cJSON_IsNumber(j) && j->valuedouble == floor(j->valuedouble) && j->valuedouble >= lo && j->valuedouble <= hi;
}

static int apply_one(const cJSON *j, const char *path, const struct tr_model_key *k, char *config,
                     struct tr_error *err) {
    char *dst = config + k->offset;
    switch (k->type) {
    case TR_KEY_INT:
        if (!is_int(j, k->min, k->max))
            return tr_error_set(err, TR_ERR_FORMAT, "'%s': \"%s\" is not an integer from %.17g to %.17g", path, k->name,
                                k->min, k->max);
        *(int64_t *)dst = (int64_t)j->valuedouble;
        return TR_OK;
    case TR_KEY_FLOAT:
        if (!cJSON_IsNumber(j) || !isfinite(j->valuedouble) || j->valuedouble < k->min || j->valuedouble > k->max)
            return tr_error_set(err, TR_ERR_FORMAT, "'%s': \"%s\" is not a number from %.17g to %.17g", path, k->name,
                                k->min, k->max);
        *(double *)dst = j->valuedouble;
        return TR_OK;
    case TR_KEY_BOOL:
        if (!cJSON_IsBool(j)) return tr_error_set(err, TR_ERR_FORMAT, "'%s': \"%s\" is not true or false", path, k->name);
        *(int *)dst = cJSON_IsTrue(j);
        return TR_OK;
    case TR_KEY_STRING: {
        char buf[64];
        size_t len = 0;
        if (cJSON_IsString(j)) {
            len = strlen(j->valuestring);
            if (len < sizeof buf) memcpy(buf, j->valuestring, len + 1);
        } else if (cJSON_IsArray(j)) { /* [] is "" (SAM's global_attn_indexes: no global block) */
            const cJSON *e;
            buf[0] = '\0';
            cJSON_ArrayForEach(e, j) {
                if (!is_int(e, -9.0e15, 9.0e15))
                    return tr_error_set(err, TR_ERR_FORMAT, "'%s': \"%s\" holds a value that is not an integer", path,
                                        k->name);
                int w = snprintf(buf + len, len < sizeof buf ? sizeof buf - len : 0, "%s%.0f", len ? "," : "",
                                 e->valuedouble);
                len += w > 0 ? (size_t)w : 0;
            }
        } else {
            return tr_error_set(err, TR_ERR_FORMAT, "'%s': \"%s\" is %s, expected a string", path, k->name,
                                cJSON_IsNumber(j) ? "a number" : cJSON_IsBool(j) ? "true or false"
                                : cJSON_IsNull(j) ? "null" : "an object");
        }
        if (len >= sizeof buf)
            return tr_error_set(err, TR_ERR_FORMAT, "'%s': \"%s\" is longer than %zu characters", path, k->name,
                                sizeof buf - 1);
        memcpy(dst, buf, len + 1);
        return TR_OK;
    }
    }
    return tr_error_set(err, TR_ERR_INTERNAL, "'%s': key \"%s\" has no type", path, k->name);
}

int tr_hf_json_apply(const cJSON *obj, const char *path, const struct tr_model_key *keys, int n, void *config,
                     const char *const *skip, struct tr_error *err) {
    for (int i = 0; i < n; i++) {
        int skipped = 0;
        for (const char *const *s = skip; s && *s && !skipped; s++) skipped = strcmp(*s, keys[i].name) == 0;
        const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, keys[i].name);
        if (skipped || !j || cJSON_IsNull(j)) continue;
        int rc = apply_one(j, path, &keys[i], config, err);
        if (rc) return rc;
    }
    return TR_OK;
}

int tr_hf_json_defaults(cJSON *obj, const char *path, const char *defaults, struct tr_error *err) {
    cJSON *d = cJSON_Parse(defaults);
    if (!cJSON_IsObject(d)) {
        cJSON_Delete(d);
        return tr_error_set(err, TR_ERR_INTERNAL, "'%s': the class defaults do not parse: %.60s", path, defaults);
    }
    const cJSON *e;
    int rc = TR_OK;
    cJSON_ArrayForEach(e, d) {
        if (cJSON_GetObjectItemCaseSensitive(obj, e->string)) continue;
        cJSON *copy = cJSON_Duplicate(e, 1);
        if (!copy || !cJSON_AddItemToObject(obj, e->string, copy)) {
            cJSON_Delete(copy);
            rc = tr_error_set(err, TR_ERR_NOMEM, "'%s': out of memory adding the class defaults", path);
            break;
        }
    }
    cJSON_Delete(d);
    return rc;
}

int tr_hf_json_expect_str(const cJSON *obj, const char *path, const char *key, const char *want,
                          struct tr_error *err) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!j || cJSON_IsNull(j) || (cJSON_IsString(j) && strcmp(j->valuestring, want) == 0)) return TR_OK;
    return tr_error_set(err, TR_ERR_UNSUPPORTED, "'%s': \"%s\" = %s: only \"%s\" is provided", path, key,
                        cJSON_IsString(j) ? j->valuestring : "(not a string)", want);
}

int tr_hf_json_expect_bool(const cJSON *obj, const char *path, const char *key, int want, struct tr_error *err) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!j || cJSON_IsNull(j) || (cJSON_IsBool(j) && cJSON_IsTrue(j) == want)) return TR_OK;
    return tr_error_set(err, TR_ERR_UNSUPPORTED, "'%s': \"%s\" = %s: only %s is provided", path, key,
                        cJSON_IsBool(j) ? (cJSON_IsTrue(j) ? "true" : "false") : "(not a bool)",
                        want ? "true" : "false");
}

int tr_hf_json_expect_num(const cJSON *obj, const char *path, const char *key, double want, struct tr_error *err) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!j || cJSON_IsNull(j) || (cJSON_IsNumber(j) && j->valuedouble == want)) return TR_OK;
    if (!cJSON_IsNumber(j)) return tr_error_set(err, TR_ERR_FORMAT, "'%s': \"%s\" is not a number", path, key);
    return tr_error_set(err, TR_ERR_UNSUPPORTED, "'%s': \"%s\" = %g: only %g is provided", path, key, j->valuedouble,
                        want);
}

int tr_hf_json_expect_null(const cJSON *obj, const char *path, const char *key, struct tr_error *err) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!j || cJSON_IsNull(j)) return TR_OK;
    char *v = cJSON_PrintUnformatted(j);
    int rc = tr_error_set(err, TR_ERR_UNSUPPORTED, "'%s': \"%s\" = %.60s: only null is provided", path, key,
                          v ? v : "(a value)");
    cJSON_free(v);
    return rc;
}

int tr_hf_json_names(const cJSON *obj, const char *path, const char *key, const char *const *names, int n_names,
                     int64_t *idx, int max, int *count, struct tr_error *err) {
    *count = 0;
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!j || cJSON_IsNull(j)) return TR_OK;
    if (!cJSON_IsArray(j)) return tr_error_set(err, TR_ERR_FORMAT, "'%s': \"%s\" is not a list", path, key);
    const cJSON *e;
    cJSON_ArrayForEach(e, j) {
        int found = -1;
        for (int i = 0; i < n_names && found < 0; i++)
            if (cJSON_IsString(e) && strcmp(e->valuestring, names[i]) == 0) found = i;
        if (found < 0) {
            char list[256] = "";
            for (int i = 0; i < n_names; i++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", names[i]);
            return tr_error_set(err, TR_ERR_UNSUPPORTED, "'%s': \"%s\" holds %s: the blocks provided are %s", path, key,
                                cJSON_IsString(e) ? e->valuestring : "(not a string)", list);
        }
        if (*count == max)
            return tr_error_set(err, TR_ERR_UNSUPPORTED, "'%s': \"%s\" has more than %d entries", path, key, max);
        idx[(*count)++] = found;
    }
    return TR_OK;
}
