/* Progress of a run and its interruption (internal to libtrident).
 *
 * On a terminal (stderr) one live line is rewritten as steps complete: the row, the
 * backend(s), step i/N, ms/step so far and the time left; elsewhere (a log, a pipe) one
 * line per backend when its timed steps end, so a log stays readable. TRIDENT_PROGRESS
 * overrides the choice: "tty" (live line), "lines", "off". */
#ifndef TRIDENT_BENCH_PROGRESS_H
#define TRIDENT_BENCH_PROGRESS_H

#include <stdint.h>
#include "trident/bench.h"

enum tr_progress_mode { TR_PROGRESS_OFF, TR_PROGRESS_LINES, TR_PROGRESS_TTY };

struct tr_progress {
    enum tr_progress_mode mode;
    char what[160];             /* "bert/tiny predict" */
    double last_draw_ms;        /* the live line is redrawn at most 10 times a second */
    int line_open;              /* a live line is on screen (no newline yet) */
};

void tr_progress_init(struct tr_progress *p, const struct tr_config *cfg);
/* A phase before the timed steps: "loading", "compiling and step 1", "warm-up". */
void tr_progress_phase(struct tr_progress *p, const char *label, const char *phase);
/* After timed step `done` of `total`; ms_sum: the timed steps' time so far. */
void tr_progress_step(struct tr_progress *p, const char *label, int64_t done, int64_t total, double ms_sum);
/* Interleaved: after round `done` of `total`, every live backend's mean so far. */
void tr_progress_round(struct tr_progress *p, const struct tr_bench_report *rep, const double *ms_sum,
                       int64_t done, int64_t total);
/* A backend's timed steps ended (or it failed: row->ok 0, error set). */
void tr_progress_done(struct tr_progress *p, const struct tr_bench_row *row, int64_t steps);
/* Close a live line before other output. */
void tr_progress_end(struct tr_progress *p);

/* The interrupt flag tr_bench_interrupt sets. */
int tr_bench_stop_requested(void);
/* The flag moved to memory that the processes forked after this call share: an isolated
 * backend's child (isolate.c ignores SIGINT, the parent takes it) then sees a Ctrl-C in
 * its load-compile-warm-up command, which runs the whole warm-up without the parent. */
void tr_bench_interrupt_share(void);

#endif
