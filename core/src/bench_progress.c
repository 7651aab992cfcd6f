/* Progress lines and the interrupt flag (bench_progress.h). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "bench_progress.h"
#include "bench_util.h"

static volatile sig_atomic_t stop_local, *stop_flag = &stop_local;

void tr_bench_interrupt(void) { *stop_flag = 1; }
void tr_bench_interrupt_clear(void) { *stop_flag = 0; }
int tr_bench_stop_requested(void) { return *stop_flag != 0; }

void tr_bench_interrupt_share(void) {
    if (stop_flag != &stop_local) return;
    void *p = mmap(NULL, sizeof *stop_flag, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return; /* the children's warm-up then runs to its end */
    volatile sig_atomic_t *shared = p;
    *shared = stop_local;
    stop_flag = shared;
    if (stop_local) *shared = 1; /* a signal taken while switching */
}

void tr_progress_init(struct tr_progress *p, const struct tr_config *cfg) {
    memset(p, 0, sizeof *p);
    const char *env = getenv("TRIDENT_PROGRESS");
    if (env && strcmp(env, "off") == 0) p->mode = TR_PROGRESS_OFF;
    else if (env && strcmp(env, "lines") == 0) p->mode = TR_PROGRESS_LINES;
    else if (env && strcmp(env, "tty") == 0) p->mode = TR_PROGRESS_TTY;
    else p->mode = isatty(STDERR_FILENO) ? TR_PROGRESS_TTY : TR_PROGRESS_LINES;
    if (cfg->rank != 0) p->mode = TR_PROGRESS_OFF; /* data parallel: rank 0 speaks for the run */
    char preset[64];
    tr_config_preset_label(cfg, preset, sizeof preset);
    snprintf(p->what, sizeof p->what, "%s/%s %s", cfg->model, preset, cfg->task);
}

static void eta_str(double ms, char *buf, size_t n) {
    long s = (long)(ms / 1000.0 + 0.5);
    if (s >= 3600) snprintf(buf, n, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    else snprintf(buf, n, "%ld:%02ld", s / 60, s % 60);
}

/* Rewrite the live line: carriage return, the text, erase to the end of the line. */
static void draw(struct tr_progress *p, const char *text) {
    fprintf(stderr, "\r%s\033[K", text);
    fflush(stderr);
    p->line_open = 1;
}

void tr_progress_end(struct tr_progress *p) {
    if (p->line_open) {
        fputc('\n', stderr);
        fflush(stderr);
    }
    p->line_open = 0;
}

void tr_progress_phase(struct tr_progress *p, const char *label, const char *phase) {
    if (p->mode != TR_PROGRESS_TTY) return;
    char text[640];
    snprintf(text, sizeof text, "%s  %s  %s", p->what, label, phase);
    draw(p, text);
    p->last_draw_ms = tr_bench_now_ms();
}

void tr_progress_step(struct tr_progress *p, const char *label, int64_t done, int64_t total, double ms_sum) {
    if (p->mode != TR_PROGRESS_TTY || done < 1) return;
    const double now = tr_bench_now_ms();
    if (done < total && now - p->last_draw_ms < 100) return;
    p->last_draw_ms = now;
    const double mean = ms_sum / (double)done;
    char text[640], eta[32];
    eta_str(mean * (double)(total - done), eta, sizeof eta);
    snprintf(text, sizeof text, "%s  %s  step %lld/%lld  %.3f ms/step  ETA %s", p->what, label, (long long)done,
             (long long)total, mean, eta);
    draw(p, text);
}

void tr_progress_round(struct tr_progress *p, const struct tr_bench_report *rep, const double *ms_sum, int64_t done,
                       int64_t total) {
    if (p->mode != TR_PROGRESS_TTY || done < 1) return;
    const double now = tr_bench_now_ms();
    if (done < total && now - p->last_draw_ms < 100) return;
    p->last_draw_ms = now;
    char text[1024], eta[32];
    double round = 0;
    int n = snprintf(text, sizeof text, "%s  step %lld/%lld ", p->what, (long long)done, (long long)total);
    for (int i = 0; i < rep->n_rows && n > 0 && n < (int)sizeof text; i++) {
        if (!rep->rows[i].ok) continue;
        const double mean = ms_sum[i] / (double)done;
        round += mean;
        n += snprintf(text + n, sizeof text - (size_t)n, " %s %.3f", rep->rows[i].label, mean);
    }
    eta_str(round * (double)(total - done), eta, sizeof eta);
    if (n > 0 && n < (int)sizeof text) snprintf(text + n, sizeof text - (size_t)n, " ms/step  ETA %s", eta);
    draw(p, text);
}

void tr_progress_done(struct tr_progress *p, const struct tr_bench_row *row, int64_t steps) {
    if (p->mode == TR_PROGRESS_OFF) return;
    tr_progress_end(p);
    if (!row->ok)
        fprintf(stderr, "trident: %s  %s  failed\n", p->what, row->label);
    else {
        char count[96];
        if (row->steps_run < steps)
            snprintf(count, sizeof count, "%lld of %lld steps (interrupted)", (long long)row->steps_run,
                     (long long)steps);
        else snprintf(count, sizeof count, "%lld step%s", (long long)steps, steps == 1 ? "" : "s");
        fprintf(stderr, "trident: %s  %s  %s, %.3f ms/step (first %.1f ms)\n", p->what, row->label, count,
                row->mean_ms, row->first_ms);
    }
    fflush(stderr);
}
