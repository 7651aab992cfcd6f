/* The shards a checkpoint's index names (shard_index.h). */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "ini_text.h"
#include "shard_index.h"

/* Whether the index at path names shard `name` in its weight_map. */
static int index_names(const char *path, const char *name) {
    char *text = NULL;
    struct tr_error ignored = {0};
    if (tr_ini_text_load(path, "index", &text, &ignored) != TR_OK) return 0;
    cJSON *root = cJSON_Parse(text);
    free(text);
    const cJSON *t, *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    int hit = 0;
    cJSON_ArrayForEach(t, map) if (cJSON_IsString(t) && !strcmp(t->valuestring, name)) hit = 1;
    cJSON_Delete(root);
    return hit;
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
    static const char suf[] = ".safetensors.index.json";
    const size_t ls = sizeof suf - 1;
    int indexes = 0, reads = 0;
    char first[256] = "", shard_of[256] = "", single[256] = "";
    for (struct dirent *e; !reads && (e = readdir(d)) != NULL;) {
        const size_t n = strlen(e->d_name);
        if (n <= ls || strcmp(e->d_name + n - ls, suf) != 0 || n >= sizeof first) continue;
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
