/* The report as files (report.h): Markdown, CSV and an SVG chart beside the JSON of
 * bench_report.c. Our own writers, no library: the formats are small, and what goes into
 * them from outside (labels, paths, notes) is escaped here, for each format its way. */
#include "trident/parse.h"
#include "trident/report.h"
#include "bench_util.h"
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifndef TRIDENT_VERSION
#define TRIDENT_VERSION "unknown"
#endif
#ifndef TRIDENT_GIT_COMMIT
#define TRIDENT_GIT_COMMIT "unknown"
#endif

const char *tr_report_version(void) { return TRIDENT_VERSION; }
const char *tr_report_git_commit(void) { return TRIDENT_GIT_COMMIT; }

/* ---- UTF-8 ---- */

/* The length (1..4) of the valid sequence s starts, or 0 when it starts an invalid one,
 * with in *bad the length of its maximal subpart (>= 1): the bytes that could still have
 * begun a valid sequence, replaced as one. The second byte's range excludes overlongs
 * (E0, F0), surrogates (ED) and code points past U+10FFFF (F4). NUL ends a sequence. */
static int utf8_seq(const unsigned char *s, int *bad) {
    unsigned c = s[0], lo = 0x80, hi = 0xBF;
    int len;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) len = 3, lo = 0xA0;
    else if (c == 0xED) len = 3, hi = 0x9F;
    else if (c >= 0xE1 && c <= 0xEF) len = 3;
    else if (c == 0xF0) len = 4, lo = 0x90;
    else if (c == 0xF4) len = 4, hi = 0x8F;
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else {
        *bad = 1;  /* a continuation byte, C0, C1, F5..FF */
        return 0;
    }
    for (int i = 1; i < len; i++) {
        if (s[i] < lo || s[i] > hi) {
            *bad = i;
            return 0;
        }
        lo = 0x80, hi = 0xBF;
    }
    return len;
}

static const char replacement[] = "\xEF\xBF\xBD"; /* U+FFFD */

int tr_utf8_valid(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    int bad, len;
    while (*p) {
        if (!(len = utf8_seq(p, &bad))) return 0;
        p += len;
    }
    return 1;
}

size_t tr_utf8_sanitize(char *dst, size_t n, const char *src) {
    const unsigned char *p = (const unsigned char *)src;
    size_t total = 0, written = 0;
    int cut = 0;
    while (*p) {
        int bad = 0, len = utf8_seq(p, &bad);
        const char *piece = len ? (const char *)p : replacement;
        size_t plen = len ? (size_t)len : 3;
        if (!cut && written + plen < n) {
            memcpy(dst + written, piece, plen);
            written += plen;
        } else cut = 1;
        total += plen;
        p += len ? len : bad;
    }
    if (n) dst[written] = '\0';
    return total;
}

/* ---- text out, escaped per format ---- */

enum esc { ESC_MD, ESC_CSV, ESC_XML };

/* s as valid UTF-8 (U+FFFD for what is not), escaped: Markdown's table and emphasis
 * characters behind a backslash and line breaks as spaces (a cell is one line); CSV's
 * quote doubled (the caller writes the quotes around); XML's five entities, and the
 * characters XML 1.0 forbids (controls, U+FFFE, U+FFFF) as U+FFFD, else the file would
 * not parse. */
static void put_text(FILE *f, const char *s, enum esc esc) {
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        int bad = 0, len = utf8_seq(p, &bad);
        if (!len) {
            fputs(replacement, f);
            p += bad;
            continue;
        }
        unsigned c = p[0];
        if (len == 3 && c == 0xEF && p[1] == 0xBF && p[2] >= 0xBE && esc == ESC_XML) fputs(replacement, f);
        else if (len > 1) fwrite(p, 1, (size_t)len, f);
        else if (esc == ESC_MD && (c == '\n' || c == '\r')) fputc(' ', f);
        else if (esc == ESC_MD && strchr("\\|*_`<>[]", (int)c)) fprintf(f, "\\%c", c);
        else if (esc == ESC_CSV && c == '"') fputs("\"\"", f);
        else if (esc == ESC_XML && c < 0x20 && c != '\t' && c != '\n' && c != '\r') fputs(replacement, f);
        else if (esc == ESC_XML && c == '&') fputs("&amp;", f);
        else if (esc == ESC_XML && c == '<') fputs("&lt;", f);
        else if (esc == ESC_XML && c == '>') fputs("&gt;", f);
        else if (esc == ESC_XML && c == '"') fputs("&quot;", f);
        else if (esc == ESC_XML && c == '\'') fputs("&apos;", f);
        else fputc((int)c, f);
        p += len;
    }
}

void tr_md_text(FILE *f, const char *s) { put_text(f, s, ESC_MD); }

/* The timed steps the run took: its rows' most (fewer than steps when interrupted). */
static int64_t steps_taken(const struct tr_bench_report *rep) {
    int64_t n = 0;
    for (int i = 0; i < rep->n_rows; i++) n = rep->rows[i].steps_run > n ? rep->rows[i].steps_run : n;
    return n;
}

/* "MODEL/PRESET TASK", the name of a report in its title and headings. */
static void put_run_name(FILE *f, const struct tr_bench_report *rep, enum esc esc) {
    put_text(f, rep->model, esc);
    fputc('/', f);
    put_text(f, rep->preset, esc);
    fputc(' ', f);
    put_text(f, rep->task, esc);
}

/* One CSV field, quoted only when it must be (RFC 4180: it holds a comma, a quote, CR or LF). */
static void csv_text(FILE *f, const char *s) {
    int quote = strpbrk(s, ",\"\r\n") != NULL;
    if (quote) fputc('"', f);
    put_text(f, s, ESC_CSV);
    if (quote) fputc('"', f);
}

/* The characters (not bytes) of s, for the chart's layout. */
static int text_width(const char *s) {
    int n = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) n += (*p & 0xC0) != 0x80;
    return n;
}

/* What f reported, as a status: a stream's write errors stick until fclose. */
static int stream_status(FILE *f, const char *what, struct tr_error *err) {
    if (ferror(f)) return tr_error_set(err, TR_ERR_IO, "%s: write failed", what);
    return TR_OK;
}

/* ---- the numbers the files share ---- */

static double worst_mean(const struct tr_bench_report *rep) {
    double worst = 0;
    for (int i = 0; i < rep->n_rows; i++)
        if (rep->rows[i].ok && rep->rows[i].mean_ms > worst) worst = rep->rows[i].mean_ms;
    return worst;
}

static int is_best(const struct tr_bench_row *r, double best) { return r->ok && best > 0 && r->mean_ms == best; }

/* The table's last column: "reference", "3.1e-07 ok", "2.0e-01 NO", "inf NO". */
static const char *agreement(const struct tr_bench_row *r, char *buf, size_t n) {
    if (r->is_reference) snprintf(buf, n, "reference");
    else if (!isfinite(r->max_rel_diff)) snprintf(buf, n, "inf NO");
    else snprintf(buf, n, "%.1e %s", r->max_rel_diff, r->agrees ? "ok" : "NO");
    return buf;
}

/* ---- report.md ---- */

static void md_host(const struct tr_bench_report *rep, FILE *f) {
    char *line = NULL;
    size_t n = 0;
    FILE *m = open_memstream(&line, &n);
    if (!m) return;
    tr_bench_print_host(rep, m);
    if (fclose(m) == 0 && line && line[0]) {
        line[strcspn(line, "\n")] = '\0';
        fputs("Host: ", f);
        put_text(f, line, ESC_MD);
        fputs(".\n\n", f);
    }
    free(line);
}

int tr_report_write_md(const struct tr_bench_report *rep, FILE *f, struct tr_error *err) {
    fputs("# trident report: ", f);
    put_run_name(f, rep, ESC_MD);
    fputs("\n\n", f);
    fputs("Device ", f);
    put_text(f, rep->device, ESC_MD);
    fputs(", dtype ", f);
    put_text(f, rep->dtype, ESC_MD);
    fprintf(f, ", batch %lld, input ", (long long)rep->batch);
    put_text(f, rep->input, ESC_MD);
    fprintf(f, ", params %.2fM (%.1f MiB), %.3f GFLOP/step. ", (double)rep->param_count / 1e6,
            (double)rep->param_bytes / 1048576.0, rep->flops_per_step / 1e9);
    if (rep->weights[0]) {
        fputs("Weights from ", f);
        put_text(f, rep->weights, ESC_MD);
    } else fprintf(f, "Weights made from [run] seed %llu", (unsigned long long)rep->seed);
    const int64_t ran = steps_taken(rep);
    const char *ws = rep->warmup == 1 ? "" : "s";
    if (rep->interrupted && ran == 0)
        fprintf(f, ". Interrupted before any of its %lld timed steps, in the %lld warm-up step%s; trident %s, commit "
                "%s.\n\n", (long long)rep->steps, (long long)rep->warmup, ws, tr_report_version(), tr_report_git_commit());
    else if (rep->interrupted && ran < rep->steps)
        fprintf(f, ". Interrupted after %lld of %lld timed steps, after %lld warm-up step%s; trident %s, commit %s.\n\n",
                (long long)ran, (long long)rep->steps, (long long)rep->warmup, ws, tr_report_version(),
                tr_report_git_commit());
    else
        fprintf(f, ". %lld timed step%s after %lld warm-up step%s; trident %s, commit %s.\n\n", (long long)rep->steps,
                rep->steps == 1 ? "" : "s",
                (long long)rep->warmup, ws, tr_report_version(), tr_report_git_commit());
    if (rep->ranks > 1) /* the figures are rank 0's, each on its share of the batch */
        fprintf(f, "Data parallel: %d ranks, batch %lld = %d x %lld; ms/step, memory and GFLOP/s are rank 0's, on "
                "its share; samples/s is the whole batch's.\n\n", rep->ranks, (long long)rep->batch, rep->ranks,
                (long long)(rep->batch / rep->ranks));
    md_host(rep, f);
    if (rep->gpu[0]) {
        fputs("GPU: ", f);
        put_text(f, rep->gpu, ESC_MD);
        fputs(".\n\n", f);
    }

    fputs("| backend | math | first ms | mean ms | median | p90 | vs best | samples/s | GFLOP/s | kern/st | hit/miss "
          "| peak MiB | arena MiB | max rel diff |\n",
          f);
    fputs("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n", f);
    const double best = tr_bench_best_mean(rep);
    for (int i = 0; i < rep->n_rows; i++) {
        const struct tr_bench_row *r = &rep->rows[i];
        fputs("| ", f);
        put_text(f, r->label, ESC_MD);
        if (!r->ok) {
            fputs(" | FAILED | | | | | | | | | | | | |\n", f);
            continue;
        }
        char agree[32];
        const char *b = is_best(r, best) ? "**" : "";
        fputs(" | ", f);
        put_text(f, rep->math, ESC_MD);
        fprintf(f, " | %.2f | %s%.3f%s | %.3f | %.3f | %.2fx | %.1f | %.1f | %llu | %llu/%llu | %.1f | %.1f | %s |\n",
                r->first_ms, b, r->mean_ms, b, r->median_ms, r->p90_ms, best > 0 ? r->mean_ms / best : 0,
                r->items_per_s, r->gflops, (unsigned long long)r->stats.kernel_calls,
                (unsigned long long)r->stats.alloc_hits, (unsigned long long)r->stats.alloc_misses,
                (double)r->stats.peak_bytes / 1048576.0, (double)r->stats.arena_bytes / 1048576.0,
                agreement(r, agree, sizeof agree));
    }
    fputs("\nThe fastest mean is in **bold**; \"vs best\" is a row's mean over it. \"first ms\" is init + compile + "
          "step 1, left out of the other times. docs/report.md describes every column.\n",
          f);
    for (int i = 0, head = 0; i < rep->n_rows; i++) {
        const struct tr_bench_row *r = &rep->rows[i];
        if (!tr_bench_row_noisy(r)) continue;
        if (!head++) fputc('\n', f);
        fputs("- noisy: ", f);
        put_text(f, r->label, ESC_MD);
        fprintf(f, " p90 %s ms is %.1fx its median %s ms (other load on the machine?)\n",
                tr_bench_ms_str(r->p90_ms, (char[32]){0}, 32), r->p90_ms / r->median_ms,
                tr_bench_ms_str(r->median_ms, (char[32]){0}, 32));
    }
    for (int i = 0, head = 0; i < rep->n_rows; i++) {
        const struct tr_bench_row *r = &rep->rows[i];
        const char *text = r->ok ? r->stats.notes : r->error;
        if (!text[0]) continue;
        if (!head++) fputc('\n', f);
        fputs("- ", f);
        put_text(f, r->label, ESC_MD);
        fputs(r->ok ? ": " : ": FAILED: ", f);
        put_text(f, text, ESC_MD);
        fputc('\n', f);
    }
    for (int i = 0, head = 0; i < rep->n_rows; i++) { /* fit: the losses, as the terminal's block */
        const struct tr_bench_row *r = &rep->rows[i];
        if (!r->ok || r->n_fit_losses < 1) continue;
        if (!head++) fputs("\n| loss | step 1 | last | first steps |\n|---|--:|--:|---|\n", f);
        fputs("| ", f);
        put_text(f, r->label, ESC_MD);
        fprintf(f, " | %.6f | %.6f |", r->loss_first, r->loss_last);
        for (int k = 0; k < r->n_fit_losses; k++) fprintf(f, " %.6f", r->fit_losses[k]);
        fputs(" |\n", f);
    }
    int ref_no = 0;
    if (rep->reference[0]) { /* each row against the file, as the terminal's block after the table */
        fputs("\nAgainst [run] reference = ", f);
        put_text(f, rep->reference, ESC_MD);
        fprintf(f, " (within %s, ", tr_tol_str(rep->reference_tolerance, (char[32]){0}, 32));
        put_text(f, rep->reference_why, ESC_MD);
        fputs("):\n\n| backend | agrees | worst |\n|---|---|---|\n", f);
        for (int i = 0; i < rep->n_rows; i++) {
            const struct tr_bench_row *r = &rep->rows[i];
            if (!r->ok) continue;
            ref_no += !r->ref_agrees;
            fputs("| ", f);
            put_text(f, r->label, ESC_MD);
            fputs(r->ref_agrees ? " | ok | " : " | **NO** | ", f);
            put_text(f, r->ref_worst, ESC_MD);
            fputs(" |\n", f);
        }
    }
    if (worst_mean(rep) > 0) fputs("\n![mean ms per step, per backend](chart.svg)\n", f);
    if (rep->interrupted)
        fprintf(f, "\n**Interrupted**: the run was stopped (Ctrl-C) after %lld of its %lld timed steps; each row's "
                "times are over the steps it ran (`steps_run` in report.csv).\n", (long long)steps_taken(rep),
                (long long)rep->steps);
    int ran_agree = 1; /* among themselves; the reference's verdict is said apart */
    for (int i = 0; i < rep->n_rows; i++) ran_agree &= rep->rows[i].ok && rep->rows[i].agrees;
    const int agree = ran_agree && (rep->all_ok || ref_no);
    char verdict[160];
    int compared = 2;
    if (rep->interrupted) {
        compared = tr_bench_interrupted_verdict(rep, verdict, sizeof verdict);
        fputs("\nInterrupted: ", f);
        put_text(f, verdict, ESC_MD);
    } else fputs(agree ? "\nAll backends ran and agree" : "\n**NOT** all backends ran and agree", f);
    if (rep->tolerance > 0 && compared > 1) {
        fprintf(f, " (within %s%s", tr_tol_str(rep->tolerance, (char[32]){0}, 32), rep->tolerance_why[0] ? ", " : "");
        put_text(f, rep->tolerance_why, ESC_MD);
        fputc(')', f);
    }
    if (ref_no) fprintf(f, "; **%d %s NOT** agree with [run] reference", ref_no, ref_no == 1 ? "does" : "do");
    fputs(".\n", f);
    return stream_status(f, "report.md", err);
}

/* ---- report.csv ---- */

static void csv_num(FILE *f, double v) {
    if (isfinite(v)) fprintf(f, ",%.9g", v);
    else fputs(v > 0 ? ",inf" : v < 0 ? ",-inf" : ",nan", f);
}

int tr_report_write_csv(const struct tr_bench_report *rep, FILE *f, struct tr_error *err) {
    fputs("backend,plugin,ok,steps_run,math,first_ms,mean_ms,median_ms,p90_ms,min_ms,vs_best,samples_per_s,gflops,"
          "kernel_calls_per_step,alloc_hits,alloc_misses,peak_bytes,arena_bytes,max_rel_diff,agrees,reference,noisy,"
          "ref_max_rel_diff,ref_agrees,error\r\n",
          f);
    const double best = tr_bench_best_mean(rep);
    for (int i = 0; i < rep->n_rows; i++) {
        const struct tr_bench_row *r = &rep->rows[i];
        csv_text(f, r->label);
        fputc(',', f);
        csv_text(f, r->plugin_path);
        fprintf(f, ",%d,%lld,", r->ok, (long long)r->steps_run);
        if (!r->ok) {
            /* math .. ref_agrees empty (20 fields): a failed row has no numbers, only its error */
            for (int k = 0; k < 20; k++) fputc(',', f);
            csv_text(f, r->error);
            fputs("\r\n", f);
            continue;
        }
        csv_text(f, rep->math);
        csv_num(f, r->first_ms);
        csv_num(f, r->mean_ms);
        csv_num(f, r->median_ms);
        csv_num(f, r->p90_ms);
        csv_num(f, r->min_ms);
        csv_num(f, best > 0 ? r->mean_ms / best : 0);
        csv_num(f, r->items_per_s);
        csv_num(f, r->gflops);
        fprintf(f, ",%llu,%llu,%llu,%llu,%llu", (unsigned long long)r->stats.kernel_calls,
                (unsigned long long)r->stats.alloc_hits, (unsigned long long)r->stats.alloc_misses,
                (unsigned long long)r->stats.peak_bytes, (unsigned long long)r->stats.arena_bytes);
        if (r->is_reference) fputc(',', f);  /* the reference is compared with nothing */
        else csv_num(f, r->max_rel_diff);
        fprintf(f, ",%d,%d,%d", r->agrees, r->is_reference, tr_bench_row_noisy(r));
        if (r->ref_compared > 0) { /* against [run] reference; empty without one */
            csv_num(f, r->ref_rel_diff);
            fprintf(f, ",%d,\r\n", r->ref_agrees);
        } else fputs(",,,\r\n", f);
    }
    return stream_status(f, "report.csv", err);
}

/* ---- chart.svg ---- */

/* The layout, in pixels: a label column as wide as the longest label, the plot, room for
 * the value after the longest bar. Text is about 7 px a character at 12 px sans-serif. */
enum { SVG_CHAR_W = 7, SVG_PLOT_W = 480, SVG_VALUE_W = 150, SVG_TOP = 48, SVG_ROW_H = 26, SVG_BAR_H = 18,
       SVG_BOTTOM = 48, SVG_PAD = 12 };

/* 1, 2 or 5 times a power of ten, at least x: a linear axis's tick step. */
static double nice_step(double x) {
    double p = pow(10, floor(log10(x))), m = x / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
}

struct svg_axis {
    int log;
    double lo, hi;              /* the axis's ends: linear [0, hi], log [lo, hi] in decades */
    double step;                /* linear: between ticks */
};

static double axis_x(const struct svg_axis *ax, double v) {
    double t;
    if (ax->log) t = v > 0 ? (log10(v) - log10(ax->lo)) / (log10(ax->hi) - log10(ax->lo)) : 0;
    else t = v / ax->hi;
    return SVG_PLOT_W * (t < 0 ? 0 : t > 1 ? 1 : t);
}

static void svg_ms(FILE *f, double ms) { fprintf(f, "%s", tr_bench_ms_str(ms, (char[32]){0}, 32)); }

int tr_report_write_svg(const struct tr_bench_report *rep, const struct tr_report_opts *opts, FILE *f,
                        struct tr_error *err) {
    const double best = tr_bench_best_mean(rep), worst = worst_mean(rep);
    int label_w = 8;
    for (int i = 0; i < rep->n_rows; i++) {
        int w = text_width(rep->rows[i].label);
        if (w > label_w) label_w = w;
    }
    const int x0 = SVG_PAD + label_w * SVG_CHAR_W + SVG_PAD;  /* the plot's left edge */
    const int width = x0 + SVG_PLOT_W + SVG_VALUE_W;
    const int rows = rep->n_rows > 0 ? rep->n_rows : 1;
    const int axis_y = SVG_TOP + rows * SVG_ROW_H;
    const int height = axis_y + SVG_BOTTOM;

    struct svg_axis ax = {.log = opts && opts->log_scale, .lo = 0, .hi = 1, .step = 0.2};
    if (worst > 0 && ax.log) {
        double lo = worst;
        for (int i = 0; i < rep->n_rows; i++)
            if (rep->rows[i].ok && rep->rows[i].mean_ms > 0 && rep->rows[i].mean_ms < lo) lo = rep->rows[i].mean_ms;
        ax.lo = pow(10, floor(log10(lo)));
        ax.hi = pow(10, ceil(log10(worst)));
        if (ax.hi <= ax.lo) ax.hi = ax.lo * 10;
    } else if (worst > 0) {
        ax.step = nice_step(worst / 5);
        ax.hi = ceil(worst / ax.step) * ax.step;
    }

    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n",
            width, height, width, height);
    fputs("<title>", f);
    put_run_name(f, rep, ESC_XML);
    fputs(": mean ms per step</title>\n", f);
    fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", width, height);
    fprintf(f, "<text x=\"%d\" y=\"20\" font-size=\"14\" font-weight=\"bold\">", SVG_PAD);
    put_run_name(f, rep, ESC_XML);
    fputs(", ", f);
    put_text(f, rep->device, ESC_XML);
    fputc(' ', f);
    put_text(f, rep->dtype, ESC_XML);
    fprintf(f, ": mean ms per step (lower is better)%s</text>\n", ax.log ? ", log scale" : "");
    if (rep->interrupted && steps_taken(rep) < rep->steps)
        fprintf(f, "<text x=\"%d\" y=\"36\" fill=\"#555555\">batch %lld, interrupted after %lld of %lld timed steps%s</text>\n",
                SVG_PAD, (long long)rep->batch, (long long)steps_taken(rep), (long long)rep->steps,
                worst > 0 ? "; the fastest in green" : "");
    else
        fprintf(f, "<text x=\"%d\" y=\"36\" fill=\"#555555\">batch %lld, %lld timed step%s%s</text>\n", SVG_PAD,
                (long long)rep->batch, (long long)rep->steps, rep->steps == 1 ? "" : "s",
                worst > 0 ? "; the fastest in green" : "");

    /* the grid and the axis's ticks, under the bars */
    fprintf(f, "<g stroke=\"#dddddd\">\n");
    int n_ticks = 0;
    double ticks[64];
    if (worst > 0 && ax.log)
        for (double t = ax.lo; t <= ax.hi * 1.0001 && n_ticks < 64; t *= 10) ticks[n_ticks++] = t;
    else if (worst > 0)
        for (int k = 0; k * ax.step <= ax.hi * 1.0001 && n_ticks < 64; k++) ticks[n_ticks++] = k * ax.step;
    for (int k = 0; k < n_ticks; k++) {
        double x = x0 + axis_x(&ax, ticks[k]);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\"/>\n", x, SVG_TOP - 4, x, axis_y);
    }
    fprintf(f, "</g>\n");

    for (int i = 0; i < rep->n_rows; i++) {
        const struct tr_bench_row *r = &rep->rows[i];
        const int y = SVG_TOP + i * SVG_ROW_H + (SVG_ROW_H - SVG_BAR_H) / 2, ty = y + SVG_BAR_H - 5;
        const int top = is_best(r, best);
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\"%s>", x0 - 6, ty, top ? " font-weight=\"bold\"" : "");
        put_text(f, r->label, ESC_XML);
        fputs("</text>\n", f);
        if (!r->ok) {
            fprintf(f, "<text x=\"%d\" y=\"%d\" fill=\"#c0392b\">FAILED</text>\n", x0 + 4, ty);
            continue;
        }
        double w = axis_x(&ax, r->mean_ms);
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\"/>\n", x0, y, w, SVG_BAR_H,
                top ? "#2e9e5b" : "#7f9cc0");
        fprintf(f, "<text x=\"%.1f\" y=\"%d\"%s>", x0 + w + 6, ty, top ? " font-weight=\"bold\"" : "");
        svg_ms(f, r->mean_ms);
        if (top) fputs(" ms (best)</text>\n", f);
        else fprintf(f, " ms (%.2fx)</text>\n", r->mean_ms / best);
    }
    if (worst <= 0) /* beside the rows' FAILED, not on them */
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" fill=\"#c0392b\">%s</text>\n",
                x0 + SVG_PLOT_W / 2, SVG_TOP + SVG_ROW_H / 2 + 4,
                rep->n_rows ? "every backend failed: no times to draw" : "no backend ran");

    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#000000\"/>\n", x0, axis_y, x0 + SVG_PLOT_W,
            axis_y);
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#000000\"/>\n", x0, SVG_TOP - 4, x0, axis_y);
    for (int k = 0; k < n_ticks; k++) {
        double x = x0 + axis_x(&ax, ticks[k]);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#000000\"/>\n", x, axis_y, x, axis_y + 4);
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%g</text>\n", x, axis_y + 17, ticks[k]);
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">ms per step%s</text>\n", x0 + SVG_PLOT_W / 2,
            axis_y + 36, ax.log ? " (log scale)" : "");
    fputs("</svg>\n", f);
    return stream_status(f, "chart.svg", err);
}

/* ---- the directory ---- */

/* Each missing component made in turn; one that exists must be a directory. */
int tr_report_make_dir(const char *dir, struct tr_error *err) {
    char path[4096];
    if (!dir[0]) return tr_error_set(err, TR_ERR_INVALID, "--report: an empty directory name");
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return tr_error_set(err, TR_ERR_INVALID, "%.64s...: the report directory's name is too long", dir);
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != '\0') continue;
        char keep = *p;
        *p = '\0';
        struct stat st;
        if (mkdir(path, 0777) != 0 && errno != EEXIST)
            return tr_error_set(err, TR_ERR_IO, "%s: cannot make the report directory: %s", path, strerror(errno));
        if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
            return tr_error_set(err, TR_ERR_IO, "%s: cannot make the report directory: it exists and is not a "
                                "directory", path);
        *p = keep;
        if (!keep) break;
    }
    return TR_OK;
}

typedef int (*write_fn)(const struct tr_bench_report *, const struct tr_report_opts *, FILE *, struct tr_error *);

static int md_fn(const struct tr_bench_report *r, const struct tr_report_opts *o, FILE *f, struct tr_error *e) {
    (void)o;
    return tr_report_write_md(r, f, e);
}
static int csv_fn(const struct tr_bench_report *r, const struct tr_report_opts *o, FILE *f, struct tr_error *e) {
    (void)o;
    return tr_report_write_csv(r, f, e);
}

static int write_file(const char *dir, const char *name, write_fn fn, const struct tr_bench_report *rep,
                      const struct tr_report_opts *opts, struct tr_error *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");  /* binary: the CSV's CRLF stays as written */
    if (!f) return tr_error_set(err, TR_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    int rc = fn(rep, opts, f, err);
    if (rc) tr_error_set(err, rc, "%s: write failed: %s", path, strerror(errno)); /* errno: the failed write's */
    if (fclose(f) != 0 && !rc) rc = tr_error_set(err, TR_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    return rc;
}

static const char *const file_names[TR_REPORT_N_FILES] = {"report.md", "report.csv", "chart.svg", "report.json"};

const char *tr_report_file_name(int i) { return i >= 0 && i < TR_REPORT_N_FILES ? file_names[i] : NULL; }

int tr_report_write_dir(const struct tr_bench_report *rep, const char *dir, const struct tr_report_opts *opts,
                        struct tr_error *err) {
    static const write_fn writers[TR_REPORT_N_FILES - 1] = {md_fn, csv_fn, tr_report_write_svg};
    int rc = tr_report_make_dir(dir, err);
    for (int i = 0; !rc && i < TR_REPORT_N_FILES - 1; i++) rc = write_file(dir, file_names[i], writers[i], rep, opts, err);
    if (!rc) {  /* the JSON is bench_report.c's, as --json writes it */
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, file_names[TR_REPORT_N_FILES - 1]);
        rc = tr_bench_write_json(rep, path, err);
    }
    return rc;
}
