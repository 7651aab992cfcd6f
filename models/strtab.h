/* A string -> int32 table (open addressing, FNV-1a), for the tokenizers' vocabularies and
 * merge ranks: built once at load, read while tokenizing. Keys are copied. */
#ifndef TRIDENT_MODELS_STRTAB_H
#define TRIDENT_MODELS_STRTAB_H

#include <stddef.h>
#include <stdint.h>

struct tr_strtab {
    struct tr_strtab_entry {
        char *key;
        size_t len;
        int32_t value;
    } *e;
    size_t cap;
};

/* Room for n keys; TR_ERR_NOMEM where there is no memory. */
int tr_strtab_init(struct tr_strtab *t, size_t n);
void tr_strtab_free(struct tr_strtab *t);
/* key[0..len) -> v; a key already there keeps its first value (*added = 0). */
int tr_strtab_put(struct tr_strtab *t, const char *key, size_t len, int32_t v, int *added);
/* key[0..len)'s value, -1 where it is not there. */
int32_t tr_strtab_get(const struct tr_strtab *t, const char *key, size_t len);

#endif
