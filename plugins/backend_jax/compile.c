/* jax backend — the compiler, the disk cache and dlopen (jax.h).
 *
 * An entry is "<dir>/jax-<128-bit hash>.so", the hash taken over the source, the compiler
 * command, its flags, the compiler executable's size and mtime, and the cpu's model and
 * flags (the code is built with -march=native, or TRIDENT_CPU_ISA's level: a cache shared
 * between machines must not hand one the other's instructions). The entry is the shared object with a trailer
 * appended (the dynamic loader reads only what the ELF headers point at): a magic, the
 * hash, the object's length and an FNV-1a checksum of its bytes. A file that is short,
 * overwritten or from another key fails the check and is rebuilt, never loaded.
 *
 * A build writes the source next to the entry (under a name of its own, as two processes
 * may build one entry at once), runs the compiler into a temporary name,
 * appends the trailer and renames it over the entry (atomic: a reader sees the old file
 * or the new one, and a library still mapped from the old file keeps its inode). The
 * source is removed after a successful build and kept when the compiler fails, so the
 * message can point at it. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create */
#endif
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/random.h>
#include "trident/file.h"
#include "entry.h"
#include "jax.h"

extern char **environ;

#define JAX_CFLAGS_REST "-fopenmp -fPIC -shared -ffp-contract=fast -fno-math-errno -fno-trapping-math"
#define JAX_MAX_ARGV 64
#define JAX_LOG_LINES 12
#define JAX_LOG_CHARS 480

static const char trailer_magic[8] = {'T', 'R', 'J', 'A', 'X', 'S', 'O', '2'}; /* 2: the HMAC trailer */


/* The flags of the generated code: -march=native, or the level TRIDENT_CPU_ISA forces on
 * the kernels library (trident/kernels.h), so that a forced avx2 run is what an AVX2-only
 * machine runs in jax's kernels too. A value that is not a level never gets here: the
 * kernels context, made before any compile, refuses it. */
static const char *jax_cflags(void) {
    const char *isa = getenv("TRIDENT_CPU_ISA");
    if (isa && strcasecmp(isa, "avx512") == 0) return "-O3 -march=x86-64-v4 " JAX_CFLAGS_REST;
    if (isa && strcasecmp(isa, "avx2") == 0) return "-O3 -march=x86-64-v3 " JAX_CFLAGS_REST;
    if (isa && strcasecmp(isa, "baseline") == 0) return "-O3 -march=x86-64 " JAX_CFLAGS_REST;
    return "-O3 -march=native " JAX_CFLAGS_REST;
}

/* ---- hashing ---- */

static uint64_t fnv1a(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* MurmurHash64A, a second, independent 64 bits. */
static uint64_t murmur64(uint64_t seed, const void *data, size_t len) {
    const uint64_t m = 0xc6a4a7935bd1e995ull;
    const int r = 47;
    uint64_t h = seed ^ (len * m);
    const unsigned char *p = data;
    size_t nblocks = len / 8;
    for (size_t i = 0; i < nblocks; i++) {
        uint64_t k;
        memcpy(&k, p + 8 * i, 8);
        k *= m;
        k ^= k >> r;
        k *= m;
        h ^= k;
        h *= m;
    }
    const unsigned char *tail = p + 8 * nblocks;
    uint64_t t = 0;
    for (size_t i = 0; i < (len & 7); i++) t |= (uint64_t)tail[i] << (8 * i);
    if (len & 7) {
        h ^= t;
        h *= m;
    }
    h ^= h >> r;
    h *= m;
    h ^= h >> r;
    return h;
}

struct hasher {
    uint64_t a, b;
};

static void hash_add(struct hasher *h, const void *data, size_t n) {
    h->a = fnv1a(h->a, data, n);
    h->b = murmur64(h->b, data, n);
    h->a = fnv1a(h->a, "\x1f", 1); /* field separator: "ab"+"c" differs from "a"+"bc" */
}

void jax_hash_begin(struct jax_hasher *h) {
    h->a = 0xcbf29ce484222325ull;
    h->b = 0x9e3779b97f4a7c15ull;
}

void jax_hash_add(struct jax_hasher *h, const void *data, size_t n) {
    struct hasher x = {h->a, h->b};
    hash_add(&x, data, n);
    h->a = x.a;
    h->b = x.b;
}

uint64_t jax_checksum(const void *data, size_t n) { return fnv1a(0xcbf29ce484222325ull, data, n); }

double jax_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* ---- the compiler command ---- */

/* cc split at blanks into argv (a "ccache gcc" style command works); argv points into buf. */
static int split_cc(const char *cc, char *buf, size_t n, char **argv, int max) {
    snprintf(buf, n, "%s", cc);
    int argc = 0;
    char *save = NULL;
    for (char *s = strtok_r(buf, " \t", &save); s && argc < max - 1; s = strtok_r(NULL, " \t", &save)) argv[argc++] = s;
    argv[argc] = NULL;
    return argc;
}

/* The compiler executable as found on PATH (or as given with a slash); "" if not found. */
static void resolve_exe(const char *name, char *out, size_t n) {
    out[0] = '\0';
    if (strchr(name, '/')) {
        if (access(name, X_OK) == 0) snprintf(out, n, "%s", name);
        return;
    }
    const char *path = getenv("PATH");
    if (!path) path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        const char *colon = strchr(path, ':');
        size_t len = colon ? (size_t)(colon - path) : strlen(path);
        char cand[JAX_PATH_MAX];
        if (len > 0 && len + strlen(name) + 2 < sizeof cand) {
            snprintf(cand, sizeof cand, "%.*s/%s", (int)len, path, name);
            if (access(cand, X_OK) == 0) {
                snprintf(out, n, "%s", cand);
                return;
            }
        }
        if (!colon) break;
        path = colon + 1;
    }
}

/* The cpu's "model name" and "flags" lines (the first processor's). */
static void hash_cpu(struct hasher *h) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[8192];
    int got = 0;
    while (got < 2 && fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0 || strncmp(line, "flags", 5) == 0) {
            hash_add(h, line, strlen(line));
            got++;
        }
    }
    fclose(f);
}

static void compute_key(const struct tr_jax_context *ctx, const char *src, size_t len, uint64_t key[2]) {
    struct hasher h = {0xcbf29ce484222325ull, 0x9e3779b97f4a7c15ull};
    hash_add(&h, src, len);
    hash_add(&h, ctx->cc, strlen(ctx->cc));
    hash_add(&h, jax_cflags(), strlen(jax_cflags()));
    char buf[JAX_PATH_MAX], *argv[JAX_MAX_ARGV], exe[JAX_PATH_MAX];
    if (split_cc(ctx->cc, buf, sizeof buf, argv, JAX_MAX_ARGV) > 0) {
        resolve_exe(argv[0], exe, sizeof exe);
        struct stat st;
        if (exe[0] && stat(exe, &st) == 0) {
            int64_t id[3] = {(int64_t)st.st_size, (int64_t)st.st_mtim.tv_sec, (int64_t)st.st_mtim.tv_nsec};
            hash_add(&h, id, sizeof id);
        }
    }
    hash_cpu(&h);
    key[0] = h.a;
    key[1] = h.b;
}

/* ---- the cache directory ---- */

static int mkdir_p(const char *dir, char *failed, size_t n) {
    char tmp[JAX_PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", dir);
    size_t len = strlen(tmp);
    while (len > 1 && tmp[len - 1] == '/') tmp[--len] = '\0';
    for (char *s = tmp + 1;; s++) {
        if (*s != '/' && *s != '\0') continue;
        char c = *s;
        *s = '\0';
        if (mkdir(tmp, 0700) != 0 && errno != EEXIST) {
            snprintf(failed, n, "%s", tmp);
            return -1;
        }
        *s = c;
        if (!c) break;
    }
    struct stat st;
    if (stat(tmp, &st) != 0) {
        snprintf(failed, n, "%s", tmp);
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(failed, n, "%s", tmp);
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

/* The cache's secret: "<dir>/secret", 32 random bytes made on first use, afterwards read
 * only when it is a regular file of ours that no one else may read or write; an entry's
 * trailer is an HMAC under it (entry.h). It is made whole under a temporary name (0600)
 * and linked into place, which fails if another process got there first: so a process
 * starting beside another on a fresh cache never reads a secret still being written
 * (two test programs, or two ranks, on a fresh machine). */
static int cache_secret(struct tr_jax_context *ctx, struct tr_error *err) {
    char path[JAX_PATH_MAX + 16], tmp[JAX_PATH_MAX + 24];
    snprintf(path, sizeof path, "%s/secret", ctx->cache_dir);
    struct stat st;
    if (lstat(path, &st) != 0 && errno == ENOENT) {
        snprintf(tmp, sizeof tmp, "%s/secret.XXXXXX", ctx->cache_dir);
        int fd = mkstemp(tmp); /* 0600 */
        if (fd < 0)
            return tr_error_set(err, TR_ERR_IO, "jax: %s = '%s': cannot make the cache's secret %s: %s",
                                ctx->cache_dir_key, ctx->cache_dir, path, strerror(errno));
        unsigned char s[JAX_SECRET_BYTES];
        int ok = getrandom(s, sizeof s, 0) == (ssize_t)sizeof s && write(fd, s, sizeof s) == (ssize_t)sizeof s;
        ok = close(fd) == 0 && ok;
        if (ok && link(tmp, path) != 0 && errno != EEXIST) ok = 0; /* EEXIST: another's, read below */
        const int saved = errno;
        unlink(tmp);
        if (!ok)
            return tr_error_set(err, TR_ERR_IO, "jax: %s = '%s': cannot make the cache's secret %s: %s",
                                ctx->cache_dir_key, ctx->cache_dir, path, strerror(saved));
    }
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    const char *why = fd < 0 ? strerror(errno) : fstat(fd, &st) != 0 ? strerror(errno)
                    : !S_ISREG(st.st_mode) ? "not a regular file"
                    : st.st_uid != geteuid() ? "owned by another user"
                    : (st.st_mode & 077) ? "readable or writable by others (expected mode 0600)"
                    : st.st_size != JAX_SECRET_BYTES ? "not 32 bytes"
                    : read(fd, ctx->secret, JAX_SECRET_BYTES) != JAX_SECRET_BYTES ? "unreadable" : NULL;
    if (fd >= 0) close(fd);
    if (why)
        return tr_error_set(err, TR_ERR_INVALID, "jax: %s = '%s': the cache's secret %s is %s; remove it (the cache "
                            "is then rebuilt) or name another cache_dir", ctx->cache_dir_key, ctx->cache_dir, path, why);
    return TR_OK;
}

int jax_cache_dir(struct tr_jax_context *ctx, struct tr_error *err) {
    if (!ctx->cache_dir[0]) {
        const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
        if (xdg && xdg[0] == '/') {
            snprintf(ctx->cache_dir, sizeof ctx->cache_dir, "%s/trident", xdg);
            snprintf(ctx->cache_dir_key, sizeof ctx->cache_dir_key, "$XDG_CACHE_HOME/trident");
        } else if (home && home[0]) {
            snprintf(ctx->cache_dir, sizeof ctx->cache_dir, "%s/.cache/trident", home);
            snprintf(ctx->cache_dir_key, sizeof ctx->cache_dir_key, "$HOME/.cache/trident");
        } else {
            return tr_error_set(err, TR_ERR_IO,
                                "jax: no cache directory for the compiled kernels: set [backend.jax] cache_dir, "
                                "$XDG_CACHE_HOME or $HOME");
        }
    }
    char failed[JAX_PATH_MAX];
    if (mkdir_p(ctx->cache_dir, failed, sizeof failed) != 0)
        return tr_error_set(err, TR_ERR_IO, "jax: %s = '%s': cannot create the cache directory ('%s': %s)",
                            ctx->cache_dir_key, ctx->cache_dir, failed, strerror(errno));
    if (access(ctx->cache_dir, W_OK | X_OK) != 0)
        return tr_error_set(err, TR_ERR_IO, "jax: %s = '%s': the cache directory is not writable (%s)",
                            ctx->cache_dir_key, ctx->cache_dir, strerror(errno));
    return cache_secret(ctx, err);
}

static void key_hex(const uint64_t key[2], char out[33]) {
    snprintf(out, 33, "%016llx%016llx", (unsigned long long)key[0], (unsigned long long)key[1]);
}

int jax_cache_entry(struct tr_jax_context *ctx, const char *src, size_t len, uint64_t key[2], char *path, size_t n,
                    struct tr_error *err) {
    int rc = jax_cache_dir(ctx, err);
    if (rc != TR_OK) return rc;
    char hex[33];
    compute_key(ctx, src, len, key);
    key_hex(key, hex);
    if ((size_t)snprintf(path, n, "%s/jax-%s.so", ctx->cache_dir, hex) >= n)
        return tr_error_set(err, TR_ERR_IO, "jax: %s = '%s': the path is too long", ctx->cache_dir_key, ctx->cache_dir);
    return TR_OK;
}

/* ---- entries ---- */

int jax_read_file(const char *path, unsigned char **data, size_t *len) {
    *data = NULL;
    *len = 0;
    FILE *f;
    /* a FIFO, a device or a symbolic link there is no entry */
    if (tr_fopen_regular_flags(path, O_NOFOLLOW, &f, NULL)) return -1;
    if (fseek(f, 0, SEEK_END) != 0) {
        fclose(f);
        return -1;
    }
    long sz = ftell(f);
    if (sz < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return -1;
    }
    unsigned char *d = malloc((size_t)sz + 1);
    if (!d || fread(d, 1, (size_t)sz, f) != (size_t)sz) {
        free(d);
        fclose(f);
        return -1;
    }
    fclose(f);
    *data = d;
    *len = (size_t)sz;
    return 0;
}

/* HMAC-SHA256 of the entry's bytes and the trailer's fields before the MAC (OpenSSL 3's
 * EVP_MAC). */
static int trailer_mac(const struct jax_trailer *t, const void *d, size_t n, const unsigned char *secret,
                       unsigned char out[32]) {
    unsigned char head[offsetof(struct jax_trailer, mac)];
    memcpy(head, t, sizeof head);
    EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    EVP_MAC_CTX *c = mac ? EVP_MAC_CTX_new(mac) : NULL;
    char digest[] = "SHA256";
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string("digest", digest, 0), OSSL_PARAM_construct_end()};
    size_t len = 0;
    int ok = c && EVP_MAC_init(c, secret, JAX_SECRET_BYTES, params) && EVP_MAC_update(c, d, n) &&
             EVP_MAC_update(c, head, sizeof head) && EVP_MAC_final(c, out, &len, 32) && len == 32;
    EVP_MAC_CTX_free(c);
    EVP_MAC_free(mac);
    return ok ? 0 : -1;
}

int jax_trailer_fill(struct jax_trailer *t, const char magic[8], const uint64_t key[2], const void *d, size_t n,
                     size_t src_len, const unsigned char secret[JAX_SECRET_BYTES]) {
    memset(t, 0, sizeof *t);
    memcpy(t->magic, magic, sizeof t->magic);
    t->key[0] = key[0];
    t->key[1] = key[1];
    t->len = n;
    t->src_len = src_len;
    return trailer_mac(t, d, n, secret, t->mac);
}

const char *jax_trailer_check(const unsigned char *d, size_t n, const char magic[8], const uint64_t key[2],
                              size_t src_len, const unsigned char secret[JAX_SECRET_BYTES]) {
    struct jax_trailer t;
    if (n < sizeof t) return "shorter than its trailer";
    memcpy(&t, d + n - sizeof t, sizeof t);
    if (memcmp(t.magic, magic, sizeof t.magic) != 0) return "no trailer of this format (truncated, overwritten, or older)";
    if (t.key[0] != key[0] || t.key[1] != key[1] || t.src_len != src_len) return "written for another source";
    if (t.len != n - sizeof t) return "its length does not match its trailer";
    unsigned char mac[32];
    if (trailer_mac(&t, d, (size_t)t.len, secret, mac) != 0) return "its MAC cannot be computed";
    if (CRYPTO_memcmp(mac, t.mac, sizeof mac) != 0) return "its MAC does not match this cache's secret (not made here)";
    return NULL;
}

/* The entry at path loaded when it is whole, belongs to key and carries this cache's MAC:
 * its verified bytes are copied to a memfd and dlopen reads that, never the path again,
 * so a file swapped after the check is not what runs. *memfd stays open while the
 * library is loaded: dlopen knows a library by its name, and a closed fd's number (so its
 * /proc/self/fd name) would be reused by the next one, which dlopen would then take for
 * this one. NULL and *why otherwise. */
static void *load_verified(const struct tr_jax_context *ctx, const char *path, const uint64_t key[2], size_t src_len,
                           int *memfd, const char **why) {
    *memfd = -1;
    unsigned char *d;
    size_t n;
    *why = NULL;
    if (jax_read_file(path, &d, &n) != 0) {
        *why = "unreadable (or not a regular file)";
        return NULL;
    }
    *why = jax_trailer_check(d, n, trailer_magic, key, src_len, ctx->secret);
    void *so = NULL;
    if (!*why) {
        int fd = memfd_create("trident-jax", MFD_CLOEXEC);
        size_t len = n - sizeof(struct jax_trailer), off = 0;
        while (fd >= 0 && off < len) {
            ssize_t w = write(fd, d + off, len - off);
            if (w <= 0) break;
            off += (size_t)w;
        }
        if (fd >= 0 && off == len) {
            char fdpath[64];
            snprintf(fdpath, sizeof fdpath, "/proc/self/fd/%d", fd);
            so = dlopen(fdpath, RTLD_NOW | RTLD_LOCAL);
            if (!so) *why = "dlopen refused it";
        } else {
            *why = "cannot copy it to memory (memfd)";
        }
        if (so) *memfd = fd;
        else if (fd >= 0) close(fd);
    }
    free(d);
    return so;
}

static int write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fwrite(data, 1, n, f) == n;
    ok = fclose(f) == 0 && ok;
    return ok ? 0 : -1;
}

/* The first lines of the compiler's output, on one line each, for a message. */
static void log_head(const char *path, char *out, size_t n) {
    out[0] = '\0';
    unsigned char *d;
    size_t len;
    if (jax_read_file(path, &d, &len) != 0) return;
    size_t j = 0;
    int lines = 0;
    for (size_t i = 0; i < len && j + 4 < n && lines < JAX_LOG_LINES; i++) {
        char c = (char)d[i];
        if (c == '\n') {
            lines++;
            if (i + 1 < len) {
                out[j++] = ' ';
                out[j++] = '|';
                out[j++] = ' ';
            }
        } else if ((unsigned char)c >= 32 || c == '\t') {
            out[j++] = c;
        }
    }
    out[j < n ? j : n - 1] = '\0';
    if (j == 0) snprintf(out, n, "(no output)");
    free(d);
}

static int run_compiler(struct tr_jax_context *ctx, const char *src_path, const char *so_tmp, const char *log_path,
                        double *ms, struct tr_error *err) {
    char buf[JAX_PATH_MAX], flags[256], *argv[JAX_MAX_ARGV];
    snprintf(flags, sizeof flags, "%s", jax_cflags());
    int argc = split_cc(ctx->cc, buf, sizeof buf, argv, JAX_MAX_ARGV - 16);
    if (argc == 0)
        return tr_error_set(err, TR_ERR_INVALID, "jax: %s is empty; expected a C compiler command", ctx->cc_key);
    char *save = NULL;
    for (char *s = strtok_r(flags, " ", &save); s; s = strtok_r(NULL, " ", &save)) argv[argc++] = s;
    argv[argc++] = "-o";
    argv[argc++] = (char *)so_tmp;
    argv[argc++] = (char *)src_path;
    argv[argc++] = "-lm";
    argv[argc] = NULL;

    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    double t0 = jax_now_ms();
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    ctx->cc_runs++;
    if (rc != 0) {
        unlink(log_path);
        return tr_error_set(err, TR_ERR_IO,
                            "jax: cannot run the C compiler '%s' (%s): %s; install a C compiler or set "
                            "[backend.jax] cc; the generated source is kept at %s",
                            argv[0], ctx->cc_key, strerror(rc), src_path);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            unlink(log_path);
            return tr_error_set(err, TR_ERR_IO, "jax: waiting for the C compiler '%s': %s", argv[0], strerror(errno));
        }
    }
    *ms = jax_now_ms() - t0;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        unlink(log_path);
        return TR_OK;
    }
    char head[JAX_LOG_CHARS], how[64];
    log_head(log_path, head, sizeof head);
    unlink(log_path);
    unlink(so_tmp);
    if (WIFEXITED(status)) snprintf(how, sizeof how, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status)) snprintf(how, sizeof how, "was killed by signal %d", WTERMSIG(status));
    else snprintf(how, sizeof how, "failed");
    /* 127: the shell-style "not found" of wrappers such as ccache or env */
    return tr_error_set(err, TR_ERR_IO, "jax: the C compiler '%s' (%s) %s; the generated source is kept at %s; it said: %s",
                        ctx->cc, ctx->cc_key, how, src_path, head);
}

/* Append the trailer to the freshly built object at tmp, then rename it to path. */
static int seal_entry(const char *tmp, const char *path, const uint64_t key[2], size_t src_len,
                      const unsigned char *secret, struct tr_error *err) {
    unsigned char *d;
    size_t n;
    if (jax_read_file(tmp, &d, &n) != 0 || n == 0) {
        free(d);
        unlink(tmp);
        return tr_error_set(err, TR_ERR_IO, "jax: the compiler wrote no shared object at %s", tmp);
    }
    struct jax_trailer t;
    int sealed = jax_trailer_fill(&t, trailer_magic, key, d, n, src_len, secret);
    free(d);
    FILE *f = sealed == 0 ? fopen(tmp, "ab") : NULL;
    int ok = f && fwrite(&t, sizeof t, 1, f) == 1;
    if (f) ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return tr_error_set(err, TR_ERR_IO, "jax: cannot write the cache entry %s: %s", path, strerror(e));
    }
    return TR_OK;
}

/* The build files a process left beside entry path (its source NAME.PID.ID.c, the
 * compiler's NAME.so.tmp.PID.ID and NAME.so.log.PID.ID) where that process is gone: one
 * killed mid-compile (a backend_timeout) never removes them, and the entry it was making
 * is being made again now. A live process's are left alone. */
static void sweep_dead_builds(const char *path) {
    const char *slash = strrchr(path, '/');
    char dir[JAX_PATH_MAX];
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
    const char *name = slash ? slash + 1 : path;
    const size_t stem = strlen(name) - 3; /* without ".so" */
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        const char *r = e->d_name;
        if (strncmp(r, name, stem) != 0 || r[stem] != '.') continue;
        r += stem + 1;
        if (!strncmp(r, "so.tmp.", 7) || !strncmp(r, "so.log.", 7)) r += 7;
        char *end;
        const long pid = strtol(r, &end, 10);
        if (end == r || *end != '.' || pid <= 0 || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        char full[JAX_PATH_MAX + 300];
        snprintf(full, sizeof full, "%s/%s", dir, e->d_name);
        unlink(full);
    }
    if (d) closedir(d);
}

int jax_build(struct tr_jax_context *ctx, const char *src, size_t len, struct jax_build *b, struct tr_error *err) {
    memset(b, 0, sizeof *b);
    b->memfd = -1;
    uint64_t key[2];
    int rc = jax_cache_entry(ctx, src, len, key, b->path, sizeof b->path, err);
    if (rc != TR_OK) return rc;
    const char *why = NULL;
    if (access(b->path, F_OK) == 0) {
        b->so = load_verified(ctx, b->path, key, len, &b->memfd, &why);
        if (b->so) {
            b->cache_hit = 1;
            ctx->cache_hits++;
            return TR_OK;
        }
        ctx->host->log(TR_LOG_WARN, "jax: cache entry %s is invalid (%s): rebuilding it", b->path, why);
    }
    ctx->cache_misses++;
    sweep_dead_builds(b->path);

    size_t plen = strlen(b->path);
    char src_path[JAX_PATH_MAX + 32], tmp[JAX_PATH_MAX + 64], log_path[JAX_PATH_MAX + 64];
    static unsigned counter;
    unsigned id = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
    /* the source under a name of this build's own: two processes building one entry at once
     * (the ranks of a data-parallel run on a fresh cache) must not truncate each other's
     * source under the other's compiler, which would build, seal and load a library without
     * its kernels */
    snprintf(src_path, sizeof src_path, "%.*s.%ld.%u.c", (int)(plen - 3), b->path, (long)getpid(), id);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%u", b->path, (long)getpid(), id);
    snprintf(log_path, sizeof log_path, "%s.log.%ld.%u", b->path, (long)getpid(), id);
    if (write_file(src_path, src, len) != 0)
        return tr_error_set(err, TR_ERR_IO, "jax: %s = '%s': cannot write the generated source %s: %s",
                            ctx->cache_dir_key, ctx->cache_dir, src_path, strerror(errno));
    if ((rc = run_compiler(ctx, src_path, tmp, log_path, &b->cc_ms, err)) != TR_OK) return rc;
    if ((rc = seal_entry(tmp, b->path, key, len, ctx->secret, err)) != TR_OK) return rc;
    unlink(src_path);
    b->so = load_verified(ctx, b->path, key, len, &b->memfd, &why);
    if (!b->so) {
        const char *e = dlerror();
        return tr_error_set(err, TR_ERR_IO, "jax: cannot load the compiled kernels %s: %s%s%s", b->path, why,
                            e ? ": " : "", e ? e : "");
    }
    return TR_OK;
}

void jax_build_close(struct jax_build *b) {
    if (b && b->so) dlclose(b->so);
    if (b && b->so && b->memfd >= 0) close(b->memfd);
    if (b) b->so = NULL, b->memfd = -1;
}
