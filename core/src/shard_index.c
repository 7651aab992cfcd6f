/* The shards a checkpoint's index names (shard_index.h). */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "ini_text.h"
#include "shard_index.h"

static const char SUFFIX[] = ".safetensors.index.json";

/* The index at path, parsed (NULL: unreadable or not JSON, and the shards speak for
 * themselves); a small text file (tens of KiB for 7B), read as an INI is. */
static cJSON *index_load(const char *path) {
    char *text = NULL;
    struct tr_error ignored = {0};
    if (tr_ini_text_load(path, "index", &text, &ignored) != TR_OK) return NULL;
    cJSON *root = cJSON_Parse(text);
    free(text);
    return root;
}

/* Whether the index at path names shard `name` in its weight_map. */
static int index_names(const char *path, const char *name) {
    cJSON *root = index_load(path);
    const cJSON *t, *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    int hit = 0;
    cJSON_ArrayForEach(t, map) if (cJSON_IsString(t) && !strcmp(t->valuestring, name)) hit = 1;
    cJSON_Delete(root);
    return hit;
}

/* dir's entry d_name is an index (NAME.safetensors.index.json). */
static int is_index(const char *d_name) {
    const size_t n = strlen(d_name), ls = sizeof SUFFIX - 1;
    return n > ls && strcmp(d_name + n - ls, SUFFIX) == 0;
}

int tr_shard_index_check(const char *dir, struct tr_error *err) {
    DIR *d = opendir(dir);
    if (!d) return TR_OK;
    int rc = TR_OK;
    for (struct dirent *e; rc == TR_OK && (e = readdir(d)) != NULL;) {
        if (!is_index(e->d_name)) continue;
        char index[4096];
        snprintf(index, sizeof index, "%s/%s", dir, e->d_name);
        cJSON *root = index_load(index);
        const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map"), *t;
        const char *last = "";
        cJSON_ArrayForEach(t, map) { /* a shard names many tensors in a row: each shard stat'ed once a run of them */
            if (!cJSON_IsString(t) || strchr(t->valuestring, '/') || !strcmp(t->valuestring, last)) continue;
            last = t->valuestring;
            char shard[4096];
            struct stat sb;
            snprintf(shard, sizeof shard, "%s/%s", dir, t->valuestring);
            if (stat(shard, &sb) != 0) {
                rc = tr_error_set(err, TR_ERR_NOT_FOUND, "weights: %s names the shard %s (of '%s' and others), which is "
                                  "not in %s: a download that stopped short?", index, t->valuestring, t->string, dir);
                break;
            }
        }
        cJSON_Delete(root);
    }
    closedir(d);
    return rc;
}

int tr_shard_index_skips(const char *file, char *why, size_t cap) {
    if (cap) why[0] = '\0';
    const char *slash = strrchr(file, '/'), *name = slash ? slash + 1 : file;
    if (!strcmp(name, "adapter_model.safetensors")) return 0;
    char dir[4096];
    if (snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - file) : 1, slash ? file : ".") >= (int)sizeof dir)
        return 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    int indexes = 0, reads = 0;
    char first[256] = "", shard_of[256] = "", single[256] = "";
    for (struct dirent *e; !reads && (e = readdir(d)) != NULL;) {
        const size_t n = strlen(e->d_name);
        if (!is_index(e->d_name) || n >= sizeof first) continue;
        if (!indexes++) snprintf(first, sizeof first, "%s", e->d_name);
        const size_t base = n - strlen(".index.json"), stem = base - strlen(".safetensors"); /* NAME */
        if ((strlen(name) == base && !strncmp(name, e->d_name, base)) ||
            (!strncmp(name, e->d_name, stem) && name[stem] == '.')) {
            reads = 1; /* the single file itself, or a variant's NAME.V[-shard].safetensors (weights.h) */
            continue;
        }
        char path[4400], one[4400];
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (!index_names(path, name)) continue;
        snprintf(one, sizeof one, "%s/%.*s", dir, (int)base, e->d_name);
        if (stat(one, &sb) == 0 && S_ISREG(sb.st_mode)) {
            snprintf(shard_of, sizeof shard_of, "%s", e->d_name);
            snprintf(single, sizeof single, "%.*s", (int)base, e->d_name);
        } else reads = 1;
    }
    closedir(d);
    if (!indexes || reads) return 0;
    if (cap && single[0])
        snprintf(why, cap, "%s is a shard of %s, and %s is there too: that single file is read, as from_pretrained "
                 "takes it first", file, shard_of, single);
    else if (cap)
        snprintf(why, cap, "%s is not among the shards %s names: not read, as from_pretrained reads a sharded "
                 "checkpoint (left from an earlier save?)", file, first);
    return 1;
}
