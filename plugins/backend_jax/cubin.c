/* jax backend — the generated CUDA C compiled by NVRTC for one architecture, and the
 * cubins cached on disk (jax.h).
 *
 * The key is a 128-bit hash of the source, "sm_<N>", NVRTC's version and the options it
 * compiles with: a new driver or toolkit, another card or another flag is a new entry,
 * never a stale cubin. An entry is the cubin with a trailer appended (magic, key,
 * length, FNV-1a checksum, the source's length); a file that is short, overwritten or
 * from another key fails the check, is reported in the log and rebuilt. Entries are
 * written to a temporary name and renamed (atomic: a reader sees the old file or the
 * new). When NVRTC refuses the source, the source is kept beside the entry as .cu and
 * the message says where, with the start of NVRTC's log. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "entry.h"
#include "jax.h"
#include "trident/kernels_cuda.h"

static const char cubin_magic[8] = {'T', 'R', 'J', 'A', 'X', 'C', 'U', '2'}; /* 2: the HMAC trailer */

void jax_cu_key(const char *src, size_t len, int sm, int nvrtc_major, int nvrtc_minor, const char *options,
                uint64_t key[2]) {
    struct jax_hasher h;
    jax_hash_begin(&h);
    jax_hash_add(&h, "jax cubin 1", 11);
    jax_hash_add(&h, src, len);
    char arch[32];
    snprintf(arch, sizeof arch, "sm_%d", sm);
    jax_hash_add(&h, arch, strlen(arch));
    int32_t v[2] = {nvrtc_major, nvrtc_minor};
    jax_hash_add(&h, v, sizeof v);
    if (!options) options = "";
    jax_hash_add(&h, options, strlen(options));
    key[0] = h.a;
    key[1] = h.b;
}

/* NULL if d (n bytes) is a whole entry of key; else why not. On NULL, *cubin_len. */
static const char *cubin_invalid(const unsigned char *d, size_t n, const uint64_t key[2], size_t src_len,
                                 const unsigned char *secret, size_t *cubin_len) {
    const char *why = jax_trailer_check(d, n, cubin_magic, key, src_len, secret);
    if (why) return why;
    size_t len = n - sizeof(struct jax_trailer);
    if (len < 4 || memcmp(d, "\x7f" "ELF", 4) != 0) return "not a cubin";
    *cubin_len = len;
    return NULL;
}

/* The cubin and its trailer to a temporary name, renamed over path. */
static int cubin_store(const char *path, const void *cubin, size_t size, const uint64_t key[2], size_t src_len,
                       const unsigned char *secret) {
    static unsigned counter;
    char tmp[JAX_PATH_MAX + 64];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%u", path, (long)getpid(),
             __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED));
    struct jax_trailer t;
    if (jax_trailer_fill(&t, cubin_magic, key, cubin, size, src_len, secret) != 0) return -1;
    FILE *f = fopen(tmp, "wb");
    int ok = f && fwrite(cubin, 1, size, f) == size && fwrite(&t, sizeof t, 1, f) == 1;
    if (f) ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        errno = e;
        return -1;
    }
    return 0;
}

int jax_cu_build(struct tr_jax_context *ctx, const char *src, size_t len, int sm, struct jax_cubin *out,
                 struct tr_error *err) {
    memset(out, 0, sizeof *out);
    int major = 0, minor = 0;
    int rc = tr_cuda_nvrtc_version(&major, &minor, err);
    if (rc != TR_OK) return tr_error_prefix(err, "jax");
    if ((rc = jax_cache_dir(ctx, err)) != TR_OK) return rc;
    uint64_t key[2];
    jax_cu_key(src, len, sm, major, minor, JAX_NVRTC_OPTIONS, key);
    char hex[33];
    snprintf(hex, sizeof hex, "%016llx%016llx", (unsigned long long)key[0], (unsigned long long)key[1]);
    if ((size_t)snprintf(out->path, sizeof out->path, "%s/jax-%s.cubin", ctx->cache_dir, hex) >= sizeof out->path)
        return tr_error_set(err, TR_ERR_IO, "jax: %s = '%s': the path is too long", ctx->cache_dir_key, ctx->cache_dir);

    if (access(out->path, F_OK) == 0) {
        unsigned char *d = NULL;
        size_t n = 0, clen = 0;
        const char *why = jax_read_file(out->path, &d, &n) != 0 ? "unreadable" : cubin_invalid(d, n, key, len, ctx->secret, &clen);
        if (!why) {
            out->data = d; /* the trailer stays behind the cubin, unread */
            out->size = clen;
            out->cache_hit = 1;
            ctx->cache_hits++;
            return TR_OK;
        }
        free(d);
        ctx->host->log(TR_LOG_WARN, "jax: cache entry %s is invalid (%s): rebuilding it", out->path, why);
    }
    ctx->cache_misses++;
    ctx->nvrtc_runs++;

    char name[64], *log = NULL;
    snprintf(name, sizeof name, "jax-%s.cu", hex);
    double t0 = jax_now_ms();
    rc = tr_cuda_nvrtc_compile(src, name, sm, &out->data, &out->size, &log, err);
    out->nvrtc_ms = jax_now_ms() - t0;
    if (rc != TR_OK) {
        char first[TR_ERROR_MSG_MAX], src_path[JAX_PATH_MAX + 8];
        snprintf(first, sizeof first, "%s", err ? err->msg : "");
        size_t plen = strlen(out->path);
        snprintf(src_path, sizeof src_path, "%.*s.cu", (int)(plen - 6), out->path);
        FILE *f = fopen(src_path, "wb");
        int kept = f && fwrite(src, 1, len, f) == len;
        if (f) kept = fclose(f) == 0 && kept;
        rc = tr_error_set(err, rc, "jax: NVRTC did not compile the generated kernels for sm_%d (%s); %s%s; NVRTC said: %.600s",
                          sm, JAX_NVRTC_OPTIONS, kept ? "the source is kept at " : "the source could not be kept at ",
                          src_path, log ? log : first);
        free(log);
        jax_cubin_free(out);
        return rc;
    }
    free(log);
    if (cubin_store(out->path, out->data, out->size, key, len, ctx->secret) != 0)
        ctx->host->log(TR_LOG_WARN, "jax: cannot write the cache entry %s: %s (the kernels run, uncached)", out->path,
                       strerror(errno));
    return TR_OK;
}

void jax_cubin_free(struct jax_cubin *c) {
    if (!c) return;
    free(c->data);
    c->data = NULL;
    c->size = 0;
}
