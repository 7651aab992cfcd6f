/* tr_strtab (strtab.h). The table stays at most half full (init sizes it for n keys), so a
 * probe ends at an empty slot. */
#include "strtab.h"
#include <stdlib.h>
#include <string.h>
#include "trident/status.h"

static uint64_t hash(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return h;
}

int tr_strtab_init(struct tr_strtab *t, size_t n) {
    t->cap = 16;
    while (t->cap < 2 * n + 16) t->cap *= 2;
    t->e = calloc(t->cap, sizeof *t->e);
    return t->e ? TR_OK : TR_ERR_NOMEM;
}

void tr_strtab_free(struct tr_strtab *t) {
    for (size_t i = 0; t->e && i < t->cap; i++) free(t->e[i].key);
    free(t->e);
    t->e = NULL;
    t->cap = 0;
}

/* key's slot: its entry, or the empty one where it would go */
static struct tr_strtab_entry *slot(const struct tr_strtab *t, const char *key, size_t n) {
    size_t i = hash(key, n) & (t->cap - 1);
    while (t->e[i].key && (t->e[i].len != n || memcmp(t->e[i].key, key, n) != 0)) i = (i + 1) & (t->cap - 1);
    return &t->e[i];
}

int tr_strtab_put(struct tr_strtab *t, const char *key, size_t len, int32_t v, int *added) {
    struct tr_strtab_entry *e = slot(t, key, len);
    if (added) *added = !e->key;
    if (e->key) return TR_OK;
    if (!(e->key = malloc(len + 1))) return TR_ERR_NOMEM;
    memcpy(e->key, key, len);
    e->key[len] = 0;
    e->len = len;
    e->value = v;
    return TR_OK;
}

int32_t tr_strtab_get(const struct tr_strtab *t, const char *key, size_t len) {
    if (!t->e) return -1;
    const struct tr_strtab_entry *e = slot(t, key, len);
    return e->key ? e->value : -1;
}
