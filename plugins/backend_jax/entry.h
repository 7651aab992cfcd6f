/* jax backend — the trailer that ends an entry of either cache (compile.c's shared
 * objects, cubin.c's cubins), so that a short, overwritten, foreign or forged file is
 * found out and rebuilt rather than loaded. The trailer carries an HMAC-SHA256 of the
 * entry under the cache's own secret (a 0600 file made on first use, compile.c): a file
 * replaced by anyone who cannot read that secret fails, whatever checksum it carries.
 * Private to the backend. */
#ifndef TRIDENT_JAX_ENTRY_H
#define TRIDENT_JAX_ENTRY_H

#include <stddef.h>
#include <stdint.h>

#define JAX_SECRET_BYTES 32

struct jax_trailer {
    char magic[8];                     /* which cache, and its format */
    uint64_t key[2];
    uint64_t len;                      /* of the entry before the trailer */
    uint64_t src_len;                  /* a second check of the key */
    unsigned char mac[32];             /* HMAC-SHA256(secret, the entry, then the fields above) */
};

/* The trailer of the n bytes at d (compile.c); 0, or -1 when the MAC cannot be made. */
int jax_trailer_fill(struct jax_trailer *t, const char magic[8], const uint64_t key[2], const void *d, size_t n,
                     size_t src_len, const unsigned char secret[JAX_SECRET_BYTES]);
/* NULL if the n bytes at d are a whole entry of key, trailer included, sealed under
 * secret; else why not. */
const char *jax_trailer_check(const unsigned char *d, size_t n, const char magic[8], const uint64_t key[2],
                              size_t src_len, const unsigned char secret[JAX_SECRET_BYTES]);

#endif
