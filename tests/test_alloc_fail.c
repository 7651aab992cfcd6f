/* Allocation failure, SQLite's way (issue 18): BERT tiny predict and fit, through the
 * public API (tr_config_load_string + tr_bench_run, all four backend configurations, in
 * this process), run once clean to count the allocations trident's own code makes, then
 * again with the 1st of them failed, the 2nd, ... (tests/allocfail.h says which count:
 * those called from the program, libtrident.so and the plugins; libc's, oneDNN's and
 * libgomp's own are left alone). Every run with a failed allocation must
 *   - return a status other than TR_OK with a message, or a FAILED row with its error
 *     (an injected failure inside a backend costs that row only);
 *   - not crash: a signal or a sanitizer report names the allocation that was failed and
 *     prints the run's stderr;
 *   - leave none of its allocations behind once tr_bench_run has returned (checked here
 *     in every build, by the table of live allocations; under ASan, LSan and every
 *     use-after-free or double free on the error paths as well).
 * A run may also complete when the code has a way around the failure (torch's caching
 * allocator empties its cache and asks again, as PyTorch's does; dead-code elimination
 * and buffer donation are skipped when their scratch cannot be had); such runs are counted
 * (TRIDENT_ALLOC_FAIL_VERBOSE=1 names each, with its stack) and must agree with the others.
 * The run just past the last counted allocation must complete with no failure injected.
 *
 * How many runs: every k-th allocation is failed, k chosen so a sweep takes about
 * TRIDENT_ALLOC_FAIL_BUDGET seconds (default 20, 60 under ASan) from the clean run's
 * time; TRIDENT_ALLOC_FAIL_EVERY=1 fails every one of them (a longer local run). The
 * counts are printed: "predict: N allocation points; swept M (every k-th) ...".
 *
 * Not covered: allocations inside libc on our behalf (fopen's buffer, scandir, dlopen,
 * qsort), oneDNN's and libgomp's (a C++ new that fails there throws inside oneDNN), the
 * child processes of [run] isolate = on (the runs here are in one process), and cuda. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "allocfail.h"
#include "models.h"
#include "testutil.h"
#include "trident/bench.h"
#include "trident/config.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TR_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define TR_ASAN 1
#endif

/* ---- a run's stderr goes to a log, shown when the run crashes */
static int saved_stderr = -1, log_fd = -1;
static char crash_msg[512];

static void show_log(void) {
    if (saved_stderr < 0) return;
    if (write(saved_stderr, crash_msg, strlen(crash_msg)) < 0) return;
    char buf[4096];
    ssize_t n;
    off_t off = 0;
    while (log_fd >= 0 && (n = pread(log_fd, buf, sizeof buf, off)) > 0) {
        if (write(saved_stderr, buf, (size_t)n) < 0) return;
        off += n;
    }
}

#ifdef TR_ASAN
extern void __sanitizer_set_death_callback(void (*callback)(void));
#else
static void on_crash(int sig) {
    show_log();
    raise(sig); /* SA_RESETHAND: the default action now */
}
#endif

static void log_open(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/alloc_fail.log", tr_test_dir);
    log_fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    assert_true(log_fd >= 0);
    saved_stderr = dup(2);
    assert_true(saved_stderr >= 0);
#ifdef TR_ASAN
    __sanitizer_set_death_callback(show_log);
#else
    struct sigaction sa = {.sa_handler = on_crash, .sa_flags = SA_RESETHAND};
    const int sigs[] = {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) sigaction(sigs[i], &sa, NULL);
#endif
}

static void log_begin(void) {
    assert_int_equal(ftruncate(log_fd, 0), 0);
    assert_int_equal(lseek(log_fd, 0, SEEK_SET), 0); /* or the next write leaves a hole of NULs */
    dup2(log_fd, 2);
}

static void log_end(void) { dup2(saved_stderr, 2); }

/* ---- one run */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int next_run;
static struct tr_config cfg;
static struct tr_bench_report rep;

/* fail_at: the allocation to fail (0: none). *count: our allocations the run made. */
static int run_once(const char *ini, const char *task, long fail_at, struct tr_error *e, int *failed, long *count,
                    int *run) {
    memset(e, 0, sizeof *e);
    memset(&rep, 0, sizeof rep);
    *run = next_run++;
    snprintf(crash_msg, sizeof crash_msg,
             "test_alloc_fail: BERT tiny %s crashed with its allocation %ld failed; the run's stderr:\n", task,
             fail_at);
    log_begin();
    tr_allocfail_arm(*run, fail_at);
    int rc = tr_config_load_string(ini, "alloc_fail.ini", &cfg, e);
    if (rc == TR_OK) rc = tr_bench_run(&cfg, tr_builtin_models, &rep, e);
    *count = tr_allocfail_disarm(failed);
    log_end();
    return rc;
}

/* The first FAILED row's error ("" when every row ran). */
static const char *row_error(void) {
    for (int i = 0; i < rep.n_rows; i++)
        if (!rep.rows[i].ok) return rep.rows[i].error[0] ? rep.rows[i].error : "(a FAILED row without an error)";
    return "";
}

static long env_long(const char *name, long dflt) {
    const char *s = getenv(name);
    char *end;
    long v = s && *s ? strtol(s, &end, 10) : dflt;
    return s && *s && (*end || v < 1) ? dflt : v;
}

static int leaks_of(int run, long fail_at, const char *task) {
    char what[2048];
    size_t bytes;
    long n = tr_allocfail_live(run, &bytes, what, sizeof what, 8);
    if (n == 0) return 0;
    printf("%s, allocation %ld failed: %ld of its allocations (%zu bytes) left behind:\n%s", task, fail_at, n, bytes,
           what);
    return 1;
}

/* 1, 1 + every, 1 + 2·every, ..., the last point, then one past it; 0 after that. */
static long next_point(long n, long every, long points) {
    if (n > points) return 0;
    if (n == points) return points + 1;
    return n + every > points ? points : n + every;
}

static void sweep(const char *task) {
    char ini[1024];
    snprintf(ini, sizeof ini,
             "[run]\nmodel = bert\npreset = tiny\ntask = %s\n"
             "backends = torch, torch:reduce-overhead, tf, jax\n"
             "batch = 2\nseq_len = 8\nsteps = 1\nwarmup = 1\nisolate = off\n"
             "[backend.jax]\ncache_dir = %s\n",
             task, tr_test_dir);
    struct tr_error e;
    int failed, run, rc;
    long points;

    /* Clean, twice: the first makes what lives as long as the process (the plugins'
     * caches, jax's compiled programs); the second is the count, and must leave nothing. */
    for (int i = 0; i < 2; i++) {
        rc = run_once(ini, task, 0, &e, &failed, &points, &run);
        if (rc != TR_OK) fail_msg("BERT tiny %s, nothing failed: %s%s", task, e.msg, row_error());
        assert_true(rep.all_ok);
        char what[2048];
        size_t bytes;
        long kept = tr_allocfail_live(run, &bytes, what, sizeof what, 8);
        if (i == 0 && kept) printf("%s: the first clean run keeps %ld allocations (%zu bytes) for later runs:\n%s",
                                   task, kept, bytes, what);
        if (i == 1) assert_int_equal(leaks_of(run, 0, task), 0);
    }
    double t0 = now_s();
    rc = run_once(ini, task, 0, &e, &failed, &points, &run);
    double clean_s = now_s() - t0;
    assert_int_equal(rc, TR_OK);
    if (getenv("TRIDENT_ALLOC_FAIL_VERBOSE")) tr_bench_print(&rep, stdout);
    assert_true(points > 0);

    const double budget = (double)env_long("TRIDENT_ALLOC_FAIL_BUDGET",
#ifdef TR_ASAN
                                           60
#else
                                           20
#endif
    );
    long every = env_long("TRIDENT_ALLOC_FAIL_EVERY", 0);
    if (every == 0) {
        every = (long)((double)points * clean_s / budget) + 1;
        if (every > points) every = points;
    }

    long swept = 0, with_error = 0, with_row = 0, not_reached = 0, leaky = 0, bad = 0;
    long nomem = 0;
    long absorbed = 0;
    t0 = now_s();
    for (long n = 1; n; n = next_point(n, every, points)) {
        long count;
        rc = run_once(ini, task, n, &e, &failed, &count, &run);
        char where[256] = "";
        if (failed) tr_allocfail_where(tr_allocfail_failed_caller(), where, sizeof where);
        if (!failed) {
            /* past the last allocation (or a run that made fewer: threads may order them
             * differently): nothing was failed, so the run must complete */
            not_reached++;
            if (rc != TR_OK) {
                printf("%s: allocation %ld was not reached (%ld made), yet the run failed: %s%s\n", task, n, count,
                       e.msg, row_error());
                bad++;
            }
        } else {
            swept++;
            const char *row = row_error();
            if (rc == TR_OK) {
                /* Where the code has a way around (torch's allocator retries after emptying
                 * its cache; a pass that cannot get its scratch is skipped), named on request. */
                absorbed++;
                if (getenv("TRIDENT_ALLOC_FAIL_VERBOSE")) {
                    char stack[4096];
                    tr_allocfail_failed_stack(stack, sizeof stack);
                    printf("%s: allocation %ld failed and the run completed anyway; it was made from\n%s", task, n,
                           stack);
                }
            } else if (rc == TR_ERR_NUMERIC) {
                printf("%s: allocation %ld (%s) failed and a backend's outputs disagree: %s\n", task, n, where, e.msg);
                bad++;
            } else if (*row) {
                with_row++;
            } else if (e.msg[0]) {
                with_error++;
                nomem += rc == TR_ERR_NOMEM;
            } else {
                printf("%s: allocation %ld (%s) failed: status %d without a message\n", task, n, where, rc);
                bad++;
            }
            if (rc != TR_OK && rc != TR_ERR_NOMEM && !*row && getenv("TRIDENT_ALLOC_FAIL_VERBOSE"))
                printf("%s: allocation %ld (%s): status %d: %s\n", task, n, where, rc, e.msg);
        }
        if (leaks_of(run, n, task)) {
            printf("  (the allocation failed was at %s)\n", where);
            leaky++;
        }
        fflush(stdout);
    }
    double sweep_s = now_s() - t0;
    printf("%s: %ld allocation points of trident's own per run (a clean run %.0f ms); failed %ld of them (%s%ld%s; "
           "TRIDENT_ALLOC_FAIL_EVERY=1 fails all) in %.1f s: %ld returned an error (%ld of them "
           "TR_ERR_NOMEM), %ld a FAILED row, %ld completed (a way around it; TRIDENT_ALLOC_FAIL_VERBOSE=1 names "
           "them); %ld runs reached no failure; %ld left allocations behind; %ld wrong\n",
           task, points, 1e3 * clean_s, swept, every == 1 ? "all: every " : "one in ", every,
           every == 1 ? "" : ", and the last", sweep_s, with_error, nomem,
           with_row, absorbed, not_reached, leaky, bad);
    fflush(stdout);
    assert_true(not_reached >= 1); /* the run past the last point completed */
    assert_int_equal(leaky, 0);
    assert_int_equal(bad, 0);
}

static void test_predict(void **state) { sweep("predict"); }
static void test_fit(void **state) { sweep("fit"); }

static int setup(void **state) {
    if (tr_test_dir_setup(state)) return -1;
    setenv("TRIDENT_PROGRESS", "off", 1);
    log_open();
    return 0;
}

TR_TEST_MAIN(setup, tr_test_dir_teardown, test_predict, test_fit)
