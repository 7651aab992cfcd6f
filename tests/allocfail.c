#include "allocfail.h"

#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* This file is compiled without instrumentation (tests/CMakeLists.txt), so the build says
 * whether the program around it has ASan. */
#if defined(TR_ALLOCFAIL_ASAN)
#define TR_ASAN 1
#endif

/* What the replacements forward to: ASan's allocator under ASan (its malloc is a weak
 * alias of these), glibc's own otherwise (the names it exports for replacing malloc). */
#ifdef TR_ASAN
extern void *__interceptor_malloc(size_t n);
extern void *__interceptor_calloc(size_t a, size_t b);
extern void *__interceptor_realloc(void *p, size_t n);
extern void __interceptor_free(void *p);
extern void *__interceptor_aligned_alloc(size_t al, size_t n);
extern void *__interceptor_memalign(size_t al, size_t n);
extern int __interceptor_posix_memalign(void **p, size_t al, size_t n);
#define REAL_MALLOC __interceptor_malloc
#define REAL_CALLOC __interceptor_calloc
#define REAL_REALLOC __interceptor_realloc
#define REAL_FREE __interceptor_free
#define REAL_ALIGNED_ALLOC __interceptor_aligned_alloc
#define REAL_MEMALIGN __interceptor_memalign
#else
extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t a, size_t b);
extern void *__libc_realloc(void *p, size_t n);
extern void __libc_free(void *p);
extern void *__libc_memalign(size_t al, size_t n);
#define REAL_MALLOC __libc_malloc
#define REAL_CALLOC __libc_calloc
#define REAL_REALLOC __libc_realloc
#define REAL_FREE __libc_free
#define REAL_ALIGNED_ALLOC __libc_memalign
#define REAL_MEMALIGN __libc_memalign
#endif

/* ---- whose call site: one dladdr per return address, remembered as (addr << 1) | ours.
 * Forgotten at every arm, so an object unloaded between runs cannot lend its verdict to
 * another mapped at its addresses. */
#define SITES (1 << 14)
static _Atomic uint64_t sites[SITES];
static void *exe_base;
static _Thread_local int in_hook;

static int site_is_ours_uncached(const void *a) {
    Dl_info di;
    if (!dladdr(a, &di)) return 0;
    if (di.dli_fbase == exe_base) return 1;
    const char *name = di.dli_fname ? strrchr(di.dli_fname, '/') : NULL;
    name = name ? name + 1 : di.dli_fname;
    return name && strstr(name, "trident") != NULL;
}

static int site_is_ours(const void *a) {
    uint64_t key = (uint64_t)(uintptr_t)a << 1;
    size_t h = (size_t)(((uint64_t)(uintptr_t)a * 0x9E3779B97F4A7C15ull) >> 50) & (SITES - 1);
    for (int probe = 0; probe < 64; probe++) {
        uint64_t v = atomic_load_explicit(&sites[(h + probe) & (SITES - 1)], memory_order_relaxed);
        if (v == 0) break;
        if ((v & ~(uint64_t)1) == key) return (int)(v & 1);
    }
    int ours = site_is_ours_uncached(a);
    for (int probe = 0; probe < 64; probe++) {
        uint64_t zero = 0;
        if (atomic_compare_exchange_strong(&sites[(h + probe) & (SITES - 1)], &zero, key | (uint64_t)ours)) break;
        if ((zero & ~(uint64_t)1) == key) break;
    }
    return ours;
}

/* ---- the armed run */
static atomic_int armed;
static atomic_long n_ours, fail_at;
static atomic_int failed;
static const void *_Atomic failed_caller;
static int cur_run;
#define STACK_MAX 24
static void *failed_stack[STACK_MAX];
static char failed_text[4096];
static void describe_stack(int depth);

enum verdict { NOT_COUNTED, COUNTED, FAIL };

static enum verdict judge(const void *caller) {
    if (!atomic_load_explicit(&armed, memory_order_acquire) || in_hook) return NOT_COUNTED;
    in_hook = 1;
    int ours = site_is_ours(caller);
    in_hook = 0;
    if (!ours) return NOT_COUNTED;
    long k = atomic_fetch_add(&n_ours, 1) + 1;
    if (k == atomic_load(&fail_at)) {
        in_hook = 1;
        describe_stack(backtrace(failed_stack, STACK_MAX)); /* now: a plugin is unloaded by the end */
        in_hook = 0;
        atomic_store(&failed_caller, caller);
        atomic_store(&failed, 1);
        return FAIL;
    }
    return COUNTED;
}

/* ---- our live allocations: open addressing, linear probing, deletion by backward shift */
#define LIVE_BITS 18
#define LIVE_CAP (1u << LIVE_BITS)
struct live {
    void *p;
    const void *caller;
    size_t size;
    int run;
};
static struct live live_tab[LIVE_CAP];
static atomic_long live_n;
static atomic_int live_overflow;
static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;

static size_t live_hash(const void *p) {
    return (size_t)(((uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ull) >> (64 - LIVE_BITS));
}

static void live_add(void *p, const void *caller, size_t size, int run) {
    pthread_mutex_lock(&live_mu);
    if (atomic_load(&live_n) >= (long)(LIVE_CAP / 4 * 3)) {
        atomic_store(&live_overflow, 1);
    } else {
        size_t i = live_hash(p);
        while (live_tab[i].p) i = (i + 1) & (LIVE_CAP - 1);
        live_tab[i] = (struct live){p, caller, size, run};
        atomic_fetch_add(&live_n, 1);
    }
    pthread_mutex_unlock(&live_mu);
}

/* Forget p; *was (if not NULL) gets its entry. Returns whether p was ours. */
static int live_remove(void *p, struct live *was) {
    if (!p || atomic_load_explicit(&live_n, memory_order_relaxed) == 0) return 0;
    pthread_mutex_lock(&live_mu);
    size_t i = live_hash(p);
    while (live_tab[i].p && live_tab[i].p != p) i = (i + 1) & (LIVE_CAP - 1);
    int found = live_tab[i].p == p;
    if (found) {
        if (was) *was = live_tab[i];
        for (size_t j = i;;) {
            j = (j + 1) & (LIVE_CAP - 1);
            if (!live_tab[j].p) break;
            size_t k = live_hash(live_tab[j].p);
            if (i <= j ? (i < k && k <= j) : (i < k || k <= j)) continue;
            live_tab[i] = live_tab[j];
            i = j;
        }
        live_tab[i].p = NULL;
        atomic_fetch_sub(&live_n, 1);
    }
    pthread_mutex_unlock(&live_mu);
    return found;
}

/* ---- the replacements */
static void *after(void *p, enum verdict v, const void *caller, size_t size) {
    if (p && v == COUNTED) live_add(p, caller, size, cur_run);
    return p;
}

#define RA __builtin_return_address(0)

void *malloc(size_t n) {
    enum verdict v = judge(RA);
    if (v == FAIL) return errno = ENOMEM, NULL;
    return after(REAL_MALLOC(n), v, RA, n);
}

void *calloc(size_t a, size_t b) {
    enum verdict v = judge(RA);
    if (v == FAIL) return errno = ENOMEM, NULL;
    return after(REAL_CALLOC(a, b), v, RA, a * b);
}

void *realloc(void *p, size_t n) {
    enum verdict v = judge(RA);
    if (v == FAIL) return errno = ENOMEM, NULL; /* p stays valid, and ours if it was */
    struct live was;
    int tracked = p && live_remove(p, &was);
    void *q = REAL_REALLOC(p, n);
    if (!q && n != 0 && tracked) live_add(p, was.caller, was.size, was.run); /* failed: p is still there */
    else if (q && v == COUNTED) live_add(q, RA, n, cur_run);
    else if (q && tracked) live_add(q, was.caller, n, was.run);
    return q;
}

void free(void *p) {
    live_remove(p, NULL);
    REAL_FREE(p);
}

void *aligned_alloc(size_t al, size_t n) {
    enum verdict v = judge(RA);
    if (v == FAIL) return errno = ENOMEM, NULL;
    return after(REAL_ALIGNED_ALLOC(al, n), v, RA, n);
}

void *memalign(size_t al, size_t n) {
    enum verdict v = judge(RA);
    if (v == FAIL) return errno = ENOMEM, NULL;
    return after(REAL_MEMALIGN(al, n), v, RA, n);
}

int posix_memalign(void **p, size_t al, size_t n) {
    enum verdict v = judge(RA);
    if (v == FAIL) return ENOMEM;
    void *q = REAL_MEMALIGN(al, n);
    if (!q) return ENOMEM;
    *p = after(q, v, RA, n);
    return 0;
}

static char *dup_n(const char *s, size_t n, const void *caller) {
    enum verdict v = judge(caller);
    if (v == FAIL) return errno = ENOMEM, NULL;
    char *d = REAL_MALLOC(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return after(d, v, caller, n + 1);
}

char *strdup(const char *s) { return dup_n(s, strlen(s), RA); }
char *strndup(const char *s, size_t n) { return dup_n(s, strnlen(s, n), RA); }

/* ---- the test's side */
void tr_allocfail_arm(int run, long at) {
    if (!exe_base) {
        Dl_info di;
        if (dladdr((const void *)&tr_allocfail_arm, &di)) exe_base = di.dli_fbase;
    }
    static int unwinder_loaded;
    if (!unwinder_loaded) backtrace(failed_stack, STACK_MAX); /* loads libgcc_s now, not mid-run */
    unwinder_loaded = 1;
    failed_text[0] = '\0';
    for (size_t i = 0; i < SITES; i++) atomic_store_explicit(&sites[i], 0, memory_order_relaxed);
    cur_run = run;
    atomic_store(&n_ours, 0);
    atomic_store(&failed, 0);
    atomic_store(&failed_caller, NULL);
    atomic_store(&fail_at, at);
    atomic_store_explicit(&armed, 1, memory_order_release);
}

long tr_allocfail_disarm(int *was_failed) {
    atomic_store(&armed, 0);
    if (was_failed) *was_failed = atomic_load(&failed);
    return atomic_load(&n_ours);
}

const void *tr_allocfail_failed_caller(void) { return atomic_load(&failed_caller); }

void tr_allocfail_failed_stack(char *buf, size_t size) { snprintf(buf, size, "%s", failed_text); }

void tr_allocfail_where(const void *addr, char *buf, size_t size) {
    Dl_info di;
    if (!dladdr(addr, &di)) {
        snprintf(buf, size, "%p", addr);
        return;
    }
    const char *obj = di.dli_fname ? strrchr(di.dli_fname, '/') : NULL;
    obj = obj ? obj + 1 : (di.dli_fname && *di.dli_fname ? di.dli_fname : "the program");
    /* the object's offset is what addr2line -e OBJECT takes; the symbol is only the
     * nearest exported one (static functions are not in the dynamic table) */
    int n = snprintf(buf, size, "%s+0x%zx", obj, (size_t)((const char *)addr - (const char *)di.dli_fbase));
    if (di.dli_sname && n >= 0 && (size_t)n < size)
        snprintf(buf + n, size - (size_t)n, " (after %s)", di.dli_sname);
}

static void describe_stack(int depth) {
    size_t off = 0;
    failed_text[0] = '\0';
    for (int i = 1; i < depth && off < sizeof failed_text; i++) { /* from the replacement's caller */
        char where[256];
        tr_allocfail_where((const char *)failed_stack[i] - 1, where, sizeof where);
        int w = snprintf(failed_text + off, sizeof failed_text - off, "    %s\n", where);
        if (w < 0) break;
        off += (size_t)w;
    }
}

long tr_allocfail_live(int run, size_t *bytes, char *buf, size_t size, int n) {
    long count = 0;
    size_t total = 0, off = 0;
    struct live found[16];
    int nf = 0;
    if (buf && size) buf[0] = '\0';
    pthread_mutex_lock(&live_mu);
    for (size_t i = 0; i < LIVE_CAP; i++) {
        if (!live_tab[i].p || live_tab[i].run != run) continue;
        count++;
        total += live_tab[i].size;
        if (nf < n && nf < 16) found[nf++] = live_tab[i];
    }
    pthread_mutex_unlock(&live_mu);
    /* described outside the lock: dladdr takes the loader's lock, which a thread in
     * dlopen holds while it allocates */
    for (int i = 0; i < nf && buf && off < size; i++) {
        char where[256];
        tr_allocfail_where(found[i].caller, where, sizeof where);
        int w = snprintf(buf + off, size - off, "  %zu bytes from %s\n", found[i].size, where);
        if (w < 0) break;
        off += (size_t)w;
    }
    if (atomic_load(&live_overflow) && buf && off < size)
        snprintf(buf + off, size - off, "  (more live allocations than the table holds: some not tracked)\n");
    if (bytes) *bytes = total;
    return count + (atomic_load(&live_overflow) ? 1 : 0);
}
