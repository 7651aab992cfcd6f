/* jax backend — the trailer that ends an entry of either cache (compile.c's shared
 * objects, cubin.c's cubins), so that a short, overwritten or foreign file is found out
 * and rebuilt rather than loaded. Private to the backend. */
#ifndef TRIDENT_JAX_ENTRY_H
#define TRIDENT_JAX_ENTRY_H

#include <stddef.h>
#include <stdint.h>

struct jax_trailer {
    char magic[8];                     /* which cache, and its format */
    uint64_t key[2];
    uint64_t len;                      /* of the entry before the trailer */
    uint64_t sum;                      /* jax_checksum of those bytes */
    uint64_t src_len;                  /* a second check of the key */
};

/* The trailer of the n bytes at d (compile.c). */
void jax_trailer_fill(struct jax_trailer *t, const char magic[8], const uint64_t key[2], const void *d, size_t n,
                      size_t src_len);
/* NULL if the n bytes at d are a whole entry of key, trailer included; else why not. */
const char *jax_trailer_check(const unsigned char *d, size_t n, const char magic[8], const uint64_t key[2],
                              size_t src_len);

#endif
