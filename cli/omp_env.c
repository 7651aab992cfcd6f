/* OpenMP's settings for the trident program: the wait policy, chosen before libgomp reads
 * it, and [run] threads.
 *
 * libgomp reads OMP_WAIT_POLICY and GOMP_SPINCOUNT once, in its constructor, before main
 * runs (it is a dependency of libtrident_kernels and of oneDNN). Setting them in main
 * would be too late, so when the user set neither the program sets its default and
 * executes itself again (the file /proc/self/exe names, the same argv); TR_BENCH_OMP_WAIT_MARK says that
 * it did, which stops a second re-exec and lets the report tell the program's choice
 * from the user's. A user's OMP_WAIT_POLICY or GOMP_SPINCOUNT is never touched.
 *
 * Why a spin of 1000 (GOMP_SPINCOUNT=1000, some 10 us): a thread that finishes its share
 * of a parallel region spins that long for the next region, then sleeps. libgomp's default
 * (300000, about 3 ms) holds a core through the gaps between a step's regions; when another
 * process wants the core the team waits for the scheduler: with a second quickstart beside
 * it, the torch row went from 3.0 ms to a median 17 ms (single runs to 210 ms), BERT small
 * from 47 to 256 ms. Passive (sleep at once) never collapses but pays a wake-up per region
 * on a quiet machine too: 1.9x on the quickstart's torch row, which moved the ratios between
 * backends by 28% from quiet to loaded. 1000 was as fast as the default when quiet (3.2 ms),
 * 2.4x slower with a second run (its fair share of the 2 cores; BERT small 2x), and kept the
 * ratios within 16%. docs/perf.md ("OpenMP wait policy") has the table (2-core AMD EPYC VM,
 * oneDNN 2.6.3); re-measure on another machine kind: a spin is counted in iterations. */
#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli.h"
#include "trident/bench.h"

#define TR_CLI_THREADS_MAX 1024 /* [run] threads' bound (core/src/config.c) */
#define DEFAULT_NAME "GOMP_SPINCOUNT"
#define DEFAULT_VALUE "1000"

void tr_cli_omp_wait_default(char **argv) {
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT") || getenv(TR_BENCH_OMP_WAIT_MARK)) return;
    if (setenv(DEFAULT_NAME, DEFAULT_VALUE, 1) == 0 &&
        setenv(TR_BENCH_OMP_WAIT_MARK, DEFAULT_NAME "=" DEFAULT_VALUE, 1) == 0) {
        /* The file itself, so that ps and pgrep still say "trident" (exec of /proc/self/exe
         * names the process "exe"); the link serves when the file is gone (rebuilt). */
        char self[4096];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n > 0) {
            self[n] = '\0';
            execv(self, argv);
        }
        execv("/proc/self/exe", argv);
    }
    /* Still here: run with libgomp's default, which the report then states (the variables
     * set above would say otherwise, so they go). */
    int e = errno;
    unsetenv(DEFAULT_NAME);
    unsetenv(TR_BENCH_OMP_WAIT_MARK);
    fprintf(stderr,
            "trident: note: could not re-execute /proc/self/exe to set " DEFAULT_NAME "=" DEFAULT_VALUE
            " (%s); OpenMP waits with libgomp's default (set " DEFAULT_NAME " yourself to choose)\n",
            strerror(e));
}

void tr_cli_apply_threads(const struct tr_config *cfg) {
    /* The INI's threads win; without them, OMP_NUM_THREADS, else every core we may use. */
    const char *env = getenv("OMP_NUM_THREADS");
    if (!cfg->threads_line && env) {
        /* libgomp takes any count (100000 threads ended in a crash, not an error): past
         * [run] threads' bound it is said and the default kept */
        char *end;
        errno = 0;
        const unsigned long long n = strtoull(env, &end, 10);
        if (end != env && !errno && n >= 1 && n <= TR_CLI_THREADS_MAX) return;
        fprintf(stderr, "trident: warning: OMP_NUM_THREADS=%.40s: expected a count from 1 to %d, as [run] threads "
                "takes; the run uses %d (every core this process may run on)\n", env, TR_CLI_THREADS_MAX,
                cfg->threads);
    }
    omp_set_num_threads(cfg->threads);
}
