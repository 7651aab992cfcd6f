/* The benchmark's reports: an aligned table for people, JSON (cJSON) for tools. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "trident/parse.h"
#include "trident/bench.h"
#include "trident/report.h"
#include "bench_json.h"
#include "bench_util.h"

static const char *agreement_str(const struct tr_bench_row *r, char *buf, size_t n) {
    if (r->is_reference) snprintf(buf, n, "reference");
    else if (isinf(r->max_rel_diff)) snprintf(buf, n, "inf  NO");
    else snprintf(buf, n, "%.1e %s", r->max_rel_diff, r->agrees ? "ok" : "NO");
    return buf;
}

/* A model's text on one line of the terminal: a control character (a newline, a bell, an
 * escape sequence's start) as its C escape, the rest as it is. */
static void put_visible(FILE *f, const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '\n') fputs("\\n", f);
        else if (*p == '\t') fputs("\\t", f);
        else if (*p == '\r') fputs("\\r", f);
        else if (*p < 0x20 || *p == 0x7f) fprintf(f, "\\x%02x", *p);
        else fputc(*p, f);
    }
}

int tr_bench_row_noisy(const struct tr_bench_row *r) {
    return r->ok && r->median_ms > 0 && r->p90_ms > TR_BENCH_NOISY_P90 * r->median_ms;
}

/* A time for a sentence: three significant digits, no exponent. */
/* MiB in a column of 8: "%.1f", or "%.2e" past what 8 characters hold (a backend's
 * stats are its own word: UINT64_MAX must not push the table out of line). */
static const char *mib_str(uint64_t bytes, char *buf, size_t n) {
    const double mib = (double)bytes / 1048576.0;
    snprintf(buf, n, mib < 1e6 ? "%.1f" : "%.2e", mib);
    return buf;
}

/* The host the numbers come from: without it, two reports from two machines (or from one
 * machine with TRIDENT_CPU_ISA set) cannot be told apart. */
void tr_bench_print_host(const struct tr_bench_report *rep, FILE *f) {
    const struct tr_cpu_info *c = &rep->cpu;
    if (!c->model[0]) return;  /* a report made by hand, without tr_bench_host_info */
    fprintf(f, "cpu %s, isa %s", c->model, tr_cpu_isa_name(c->isa));
    if (c->forced) fprintf(f, " (forced by TRIDENT_CPU_ISA; native %s)", tr_cpu_isa_name(c->native));
    else fprintf(f, " (native)");
    fprintf(f, ", oneDNN %s, bf16 GEMM %s, %d thread%s, OpenMP wait %s%s\n", c->onednn_isa[0] ? c->onednn_isa : "?",
            c->bf16_native ? "native" : "via f32", rep->threads, rep->threads == 1 ? "" : "s", rep->omp_wait,
            strcmp(rep->omp_wait_by, "environment") == 0 ? " (set in the environment)"
            : strcmp(rep->omp_wait_by, "trident") == 0  ? " (trident's default)"
                                                        : "");
}

/* generate: a step is a whole generate call; its parts, and whether the tokens agree. */
static void print_generate(const struct tr_bench_report *rep, FILE *f) {
    const struct tr_generate_config *g = &rep->gen;
    fprintf(f, "\ngenerate: prompt_len %lld, max_length %lld (%lld new tokens, %lld decode passes per call), %s",
            (long long)g->prompt_len, (long long)g->max_length, (long long)rep->new_tokens,
            (long long)(rep->new_tokens - 1), g->sampling);
    if (g->top_k_sampling) fprintf(f, " (top_k %lld, temperature %g, seed %lld)", (long long)g->top_k, g->temperature,
                                   (long long)g->seed);
    if (g->top_p_top_k) fprintf(f, " (top_k %lld, then top_p %g, temperature %g, seed %lld)", (long long)g->top_p_top_k,
                                g->top_p, g->temperature, (long long)g->seed);
    else if (g->top_p_sampling) fprintf(f, " (top_p %g, temperature %g, seed %lld)", g->top_p, g->temperature,
                                        (long long)g->seed);
    /* The cache as state: no host writes, so no column for them (kv_cache = inputs has one). */
    const int inputs = g->cache_inputs;
    fprintf(f, "; KV cache %.2f MiB, %s; host memory needed %.1f MiB of %.2f GiB available\n",
            (double)rep->kv_cache_bytes / 1048576.0,
            inputs ? "host memory fed as decode inputs" : "backend state updated in place",
            (double)rep->mem_needed_bytes / 1048576.0, (double)rep->mem_available_bytes / 1073741824.0);
    fprintf(f, "%-24s %10s %10s %10s ", "backend", "prefill ms", "ms/token", "tokens/s");
    if (inputs) fprintf(f, "%11s ", "cache wr ms");
    fprintf(f, "%9s %9s  %s\n", "compiles", "decodes", "tokens");
    for (int i = 0; i < rep->n_rows; i++) {
        const struct tr_bench_row *r = &rep->rows[i];
        if (!r->ok) continue;
        char tok[96];
        if (r->is_reference) snprintf(tok, sizeof tok, "reference");
        else if (r->tokens_agree) snprintf(tok, sizeof tok, "same");
        else if (r->tokens_tie && isfinite(r->tie_gap))
            snprintf(tok, sizeof tok, "same up to a near tie (sample %lld, new token %lld: %d for %d, gap %.2g)",
                     (long long)r->mismatch_sample, (long long)r->mismatch_step + 1, (int)r->mismatch_token,
                     (int)r->reference_token, r->tie_gap);
        else if (r->tokens_tie) /* sampled: within reach of the draw, no logit gap */
            snprintf(tok, sizeof tok, "same up to a near tie (sample %lld, new token %lld: drew %d for %d)",
                     (long long)r->mismatch_sample, (long long)r->mismatch_step + 1, (int)r->mismatch_token,
                     (int)r->reference_token);
        else snprintf(tok, sizeof tok, "DIFFER (sample %lld, new token %lld)", (long long)r->mismatch_sample,
                      (long long)r->mismatch_step + 1);
        fprintf(f, "%-24s %10.3f %10.3f %10.1f ", r->label, r->prefill_ms, r->ms_per_token, r->tokens_per_s);
        if (inputs) fprintf(f, "%11.3f ", r->cache_write_ms);
        fprintf(f, "%9d %9lld  %s\n", r->compiles, (long long)r->decode_execs, tok);
    }
    if (rep->n_sample_tokens > 0) {
        fprintf(f, "sample 0, first new tokens:");
        for (int k = 0; k < rep->n_sample_tokens; k++) fprintf(f, " %d", rep->sample_tokens[k]);
        fputc('\n', f);
    }
    for (int k = 0; k < rep->n_texts; k++) {
        const struct tr_bench_text *t = &rep->texts[k];
        fprintf(f, "sample %lld: ", (long long)t->sample);
        put_visible(f, t->prompt);
        fputc('|', f);
        put_visible(f, t->text);
        fputc('\n', f);
        if (t->text_tokens < rep->new_tokens)
            fprintf(f, "  (then the end-of-sequence token, after %lld new tokens: transformers' generate stops "
                    "there; the run made all %lld, as the benchmark counts)\n", (long long)t->text_tokens,
                    (long long)rep->new_tokens);
    }
}

void tr_bench_print(const struct tr_bench_report *rep, FILE *f) {
    fprintf(f, "%s/%s %s  device %s  dtype %s  math %s  batch %lld  input %s  params %.2fM (%.1f MiB)  %.3f "
            "GFLOP/step\n", rep->model, rep->preset, rep->task, rep->device, rep->dtype, rep->math, (long long)rep->batch,
            rep->input, (double)rep->param_count / 1e6, (double)rep->param_bytes / 1048576.0,
            rep->flops_per_step / 1e9);
    tr_bench_print_host(rep, f);
    if (rep->gpu[0]) fprintf(f, "gpu %s\n", rep->gpu);
    fprintf(f, "%lld timed step%s after %lld warm-up step%s%s%s; 'first' is init + compile + step 1, left out of the "
            "rest\n", (long long)rep->steps, rep->steps == 1 ? "" : "s", (long long)rep->warmup, rep->warmup == 1 ? "" : "s",
            rep->schedule[0] ? ", " : "",
            strcmp(rep->schedule, "interleaved") == 0  ? "interleaved (the backends took their steps in turns)"
            : strcmp(rep->schedule, "sequential") == 0 ? "sequential (one backend after another)"
                                                       : "");
    if (rep->isolation[0]) fprintf(f, "backends: %s\n", rep->isolation);
    if (rep->parallel) {
        fprintf(f, "data parallel: %d rank%s, batch %lld = %d x %lld; gradients summed in buckets of about %g MiB, "
                "each started amid the backward pass; ", rep->ranks, rep->ranks == 1 ? "" : "s", (long long)rep->batch,
                rep->ranks, (long long)(rep->batch / rep->ranks), rep->bucket_mb);
        if (rep->check_every > 0)
            fprintf(f, "the ranks' trained state compared every %lld steps and at the end\n", (long long)rep->check_every);
        else fprintf(f, "the ranks' trained state not compared ([run] check_every = 0)\n");
    }
    if (rep->interrupted) {
        fprintf(f, "INTERRUPTED: timed steps run:");
        for (int i = 0; i < rep->n_rows; i++)
            fprintf(f, " %s %lld%s", rep->rows[i].label, (long long)rep->rows[i].steps_run,
                    i + 1 < rep->n_rows ? "," : "");
        fputc('\n', f);
    }
    fputc('\n', f);
    /* Narrow enough for a terminal: the label column as wide as the longest label, the
     * math (one for the run) in the header, the allocator's hits and misses in the JSON,
     * CSV and Markdown only. */
    int w = 7;
    for (int i = 0; i < rep->n_rows; i++)
        if ((int)strlen(rep->rows[i].label) > w) w = (int)strlen(rep->rows[i].label);
    fprintf(f, "%-*s %8s %8s %8s %8s %7s %9s %7s %7s %8s %8s  %s\n", w, "backend", "first ms", "mean ms", "median",
            "p90", "vs best", "samples/s", "GFLOP/s", "kern/st", "peak MiB", "arena", "max rel diff");
    double best = tr_bench_best_mean(rep);
    for (int i = 0; i < rep->n_rows; i++) {
        const struct tr_bench_row *r = &rep->rows[i];
        if (!r->ok) {
            fprintf(f, "%-*s FAILED\n", w, r->label);
            continue;
        }
        char agree[32], peak[24], arena[24];
        fprintf(f, "%-*s %8.2f %8.3f %8.3f %8.3f %6.2fx %9.1f %7.1f %7llu %8s %8s  %s\n", w, r->label, r->first_ms,
                r->mean_ms, r->median_ms, r->p90_ms, best > 0 ? r->mean_ms / best : 0, r->items_per_s, r->gflops,
                (unsigned long long)r->stats.kernel_calls, mib_str(r->stats.peak_bytes, peak, sizeof peak),
                mib_str(r->stats.arena_bytes, arena, sizeof arena), agreement_str(r, agree, sizeof agree));
    }
    /* A slow tail means steps waited for the cores: the row's mean then measures the
     * machine's other load as much as the backend. Said under the table it qualifies. */
    for (int i = 0, head = 0; i < rep->n_rows; i++) {
        const struct tr_bench_row *r = &rep->rows[i];
        if (!tr_bench_row_noisy(r)) continue;
        char p90[32], med[32];
        if (!head++) fputc('\n', f);
        fprintf(f, "noisy: %s p90 %s ms is %.1fx its median %s ms (other load on the machine?)\n", r->label,
                tr_bench_ms_str(r->p90_ms, p90, sizeof p90), r->p90_ms / r->median_ms,
                tr_bench_ms_str(r->median_ms, med, sizeof med));
    }
    /* A bar per backend, mean ms/step to scale (the slowest fills the width): the chart of
     * the table's "vs best" column, for a glance. */
    double worst = 0;
    for (int i = 0; i < rep->n_rows; i++)
        if (rep->rows[i].ok && rep->rows[i].mean_ms > worst) worst = rep->rows[i].mean_ms;
    if (worst > 0 && rep->n_rows > 1) {
        fputc('\n', f);
        for (int i = 0; i < rep->n_rows; i++) {
            const struct tr_bench_row *r = &rep->rows[i];
            if (!r->ok) continue;
            int w = (int)lround(48.0 * r->mean_ms / worst);
            fprintf(f, "%-24s |", r->label);
            for (int k = 0; k < w; k++) fputc('#', f);
            fprintf(f, " %.3f ms\n", r->mean_ms);
        }
    }
    /* fit: did it learn, and did every backend learn alike */
    int is_fit = strcmp(rep->task, "fit") == 0;
    for (int i = 0, head = 0; is_fit && i < rep->n_rows; i++) {
        const struct tr_bench_row *r = &rep->rows[i];
        if (!r->ok) continue;
        if (!head++) fprintf(f, "\n%-24s %10s %10s   %s\n", "loss", "step 1", "last", "first steps");
        fprintf(f, "%-24s %10.5f %10.5f  ", r->label, r->loss_first, r->loss_last);
        for (int k = 0; k < r->n_fit_losses; k++) fprintf(f, " %.6f", r->fit_losses[k]);
        fputc('\n', f);
    }
    if (strcmp(rep->task, "generate") == 0 && rep->gen.max_length > 0) print_generate(rep, f);
    int notes = 0;
    for (int i = 0; i < rep->n_rows; i++) {
        const struct tr_bench_row *r = &rep->rows[i];
        const char *text = r->ok ? r->stats.notes : r->error;
        if (!text[0]) continue;
        if (!notes++) fputc('\n', f);
        fprintf(f, "%s: %s%s\n", r->label, r->ok ? "" : "FAILED: ", text);
    }
    for (int i = 0; rep->parallel && i < rep->n_rows; i++) {
        const struct tr_bench_row *r = &rep->rows[i];
        if (!r->ok) continue;
        if (!notes++) fputc('\n', f);
        fprintf(f, "%s: rank 0 waited %.3f ms a step for collectives (%.1f%% of the step); ", r->label, r->comm_ms,
                r->mean_ms > 0 ? 100.0 * r->comm_ms / r->mean_ms : 0.0);
        if (r->weight_checks > 0)
            fprintf(f, "the trained state was the same on all %d ranks at %lld check%s\n", rep->ranks,
                    (long long)r->weight_checks, r->weight_checks == 1 ? "" : "s");
        else fprintf(f, "the trained state was not compared\n");
    }
    char verdict[160];
    int compared = 2;
    if (rep->interrupted) {
        compared = tr_bench_interrupted_verdict(rep, verdict, sizeof verdict);
        fprintf(f, "\ninterrupted: %s", verdict);
    } else fprintf(f, "\n%s", rep->all_ok ? "all backends ran and agree" : "NOT all backends ran and agree");
    if (rep->tolerance > 0 && compared > 1)
        fprintf(f, " (within %s%s%s)", tr_tol_str(rep->tolerance, (char[32]){0}, 32), rep->tolerance_why[0] ? ", " : "",
                rep->tolerance_why);
    fputc('\n', f);
}

/* JSON text is UTF-8 (RFC 8259), and cJSON copies bytes as they are: a label or path with
 * an invalid byte (a file name in Latin-1) would make a file no strict reader takes. Such
 * a string goes in with U+FFFD for what is invalid (tr_utf8_sanitize). */
cJSON *tr_json_add_str(cJSON *o, const char *key, const char *s) {
    if (tr_utf8_valid(s)) return cJSON_AddStringToObject(o, key, s);
    size_t n = tr_utf8_sanitize(NULL, 0, s) + 1;
    char *buf = malloc(n);
    if (!buf) return NULL;
    tr_utf8_sanitize(buf, n, s);
    cJSON *item = cJSON_AddStringToObject(o, key, buf);
    free(buf);
    return item;
}

/* A seed as the integer it is: cJSON's numbers are doubles, which round those past 2^53
 * (a report must let the run be made again). */
static void add_u64(cJSON *o, const char *key, uint64_t v) {
    char digits[24];
    snprintf(digits, sizeof digits, "%llu", (unsigned long long)v);
    cJSON_AddRawToObject(o, key, digits);
}

cJSON *tr_bench_json(const struct tr_bench_report *rep) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    /* what wrote it first: a reader checks the schema before any other field */
    cJSON_AddNumberToObject(root, "schema", TR_REPORT_SCHEMA);
    tr_json_add_str(root, "trident_version", tr_report_version());
    tr_json_add_str(root, "git_commit", tr_report_git_commit());
    cJSON_AddBoolToObject(root, "interrupted", rep->interrupted);
    tr_json_add_str(root, "model", rep->model);
    tr_json_add_str(root, "preset", rep->preset);
    tr_json_add_str(root, "task", rep->task);
    tr_json_add_str(root, "device", rep->device);
    tr_json_add_str(root, "dtype", rep->dtype);
    tr_json_add_str(root, "math", rep->math);
    cJSON_AddNumberToObject(root, "batch", (double)rep->batch);
    cJSON_AddNumberToObject(root, "seq_len", (double)rep->seq_len);
    tr_json_add_str(root, "input", rep->input);
    cJSON_AddNumberToObject(root, "steps", (double)rep->steps);
    cJSON_AddNumberToObject(root, "warmup", (double)rep->warmup);
    tr_json_add_str(root, "schedule", rep->schedule);
    tr_json_add_str(root, "isolation", rep->isolation);
    cJSON_AddNumberToObject(root, "ranks", rep->ranks > 1 ? rep->ranks : 1);
    if (rep->parallel) {
        cJSON_AddNumberToObject(root, "batch_per_rank", (double)(rep->batch / rep->ranks));
        cJSON_AddNumberToObject(root, "bucket_mb", rep->bucket_mb);
        cJSON_AddNumberToObject(root, "check_every", (double)rep->check_every);
    }
    add_u64(root, "seed", rep->seed);
    cJSON *w = cJSON_AddObjectToObject(root, "weights");
    tr_json_add_str(w, "source", rep->weights[0] ? "file" : "seed");
    if (rep->weights[0]) tr_json_add_str(w, "path", rep->weights);
    else add_u64(w, "seed", rep->seed);
    if (rep->reference[0]) { /* each row's against_reference is held to this */
        cJSON *rf = cJSON_AddObjectToObject(root, "reference");
        tr_json_add_str(rf, "path", rep->reference);
        cJSON_AddNumberToObject(rf, "tolerance", rep->reference_tolerance);
        tr_json_add_str(rf, "tolerance_why", rep->reference_why);
    }
    cJSON_AddNumberToObject(root, "param_count", (double)rep->param_count);
    cJSON_AddNumberToObject(root, "param_bytes", (double)rep->param_bytes);
    cJSON_AddNumberToObject(root, "flops_per_step", rep->flops_per_step);
    cJSON_AddNumberToObject(root, "nodes", rep->n_nodes);
    cJSON_AddNumberToObject(root, "tolerance", rep->tolerance);
    tr_json_add_str(root, "tolerance_from", rep->tolerance_why);
    cJSON_AddBoolToObject(root, "all_ok", rep->all_ok);
    cJSON *cpu = cJSON_AddObjectToObject(root, "cpu");
    tr_json_add_str(cpu, "model", rep->cpu.model);
    tr_json_add_str(cpu, "isa", tr_cpu_isa_name(rep->cpu.isa));
    tr_json_add_str(cpu, "native_isa", tr_cpu_isa_name(rep->cpu.native));
    cJSON_AddBoolToObject(cpu, "isa_forced", rep->cpu.forced);
    cJSON_AddBoolToObject(cpu, "avx512_bf16", rep->cpu.avx512_bf16);
    cJSON_AddBoolToObject(cpu, "amx", rep->cpu.amx);
    cJSON_AddBoolToObject(cpu, "bf16_native", rep->cpu.bf16_native);
    tr_json_add_str(cpu, "onednn_isa", rep->cpu.onednn_isa);
    if (rep->gpu[0]) tr_json_add_str(root, "gpu", rep->gpu);
    else cJSON_AddNullToObject(root, "gpu");
    cJSON_AddNumberToObject(root, "threads", rep->threads);
    tr_json_add_str(root, "omp_wait", rep->omp_wait);
    tr_json_add_str(root, "omp_wait_set_by", rep->omp_wait_by);
    if (strcmp(rep->task, "generate") == 0 && rep->gen.max_length > 0) {
        cJSON *g = cJSON_AddObjectToObject(root, "generate");
        cJSON_AddNumberToObject(g, "prompt_len", (double)rep->gen.prompt_len);
        cJSON_AddNumberToObject(g, "max_length", (double)rep->gen.max_length);
        cJSON_AddNumberToObject(g, "new_tokens", (double)rep->new_tokens);
        tr_json_add_str(g, "sampling", rep->gen.sampling);
        /* what the sampler read; null where it read nothing (greedy reads none of them) */
        const struct tr_generate_config *gc = &rep->gen;
        const int sampled = gc->top_k_sampling || gc->top_p_sampling;
        const int64_t k = gc->top_k_sampling ? gc->top_k : gc->top_p_top_k;
        if (k > 0) cJSON_AddNumberToObject(g, "top_k", (double)k);
        else cJSON_AddNullToObject(g, "top_k");
        if (gc->top_p_sampling) cJSON_AddNumberToObject(g, "top_p", gc->top_p);
        else cJSON_AddNullToObject(g, "top_p");
        if (sampled) {
            cJSON_AddNumberToObject(g, "temperature", gc->temperature);
            add_u64(g, "seed", (uint64_t)gc->seed);
        } else {
            cJSON_AddNullToObject(g, "temperature");
            cJSON_AddNullToObject(g, "seed");
        }
        cJSON_AddNumberToObject(g, "kv_cache_bytes", (double)rep->kv_cache_bytes);
        tr_json_add_str(g, "kv_cache", rep->gen.kv_cache);
        cJSON *texts = rep->n_texts ? cJSON_AddArrayToObject(g, "texts") : NULL;
        for (int k = 0; texts && k < rep->n_texts; k++) {
            cJSON *t = cJSON_CreateObject();
            cJSON_AddItemToArray(texts, t);
            cJSON_AddNumberToObject(t, "sample", (double)rep->texts[k].sample);
            tr_json_add_str(t, "prompt", rep->texts[k].prompt);
            tr_json_add_str(t, "text", rep->texts[k].text);
            cJSON_AddNumberToObject(t, "text_tokens", (double)rep->texts[k].text_tokens);
        }
        cJSON_AddNumberToObject(g, "mem_needed_bytes", (double)rep->mem_needed_bytes);
        cJSON_AddNumberToObject(g, "mem_available_bytes", (double)rep->mem_available_bytes);
    }
    cJSON *rows = cJSON_AddArrayToObject(root, "backends");
    for (int i = 0; i < rep->n_rows; i++) {
        const struct tr_bench_row *r = &rep->rows[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToArray(rows, o);
        tr_json_add_str(o, "backend", r->label);
        tr_json_add_str(o, "plugin", r->plugin_path);
        cJSON_AddBoolToObject(o, "ok", r->ok);
        if (!r->ok) {
            tr_json_add_str(o, "error", r->error);
            continue;
        }
        tr_json_add_str(o, "mode", r->stats.mode);
        tr_json_add_str(o, "math", rep->math);
        cJSON_AddNumberToObject(o, "compile_ms", r->compile_ms);
        cJSON_AddNumberToObject(o, "first_step_ms", r->first_ms);
        cJSON_AddNumberToObject(o, "mean_ms", r->mean_ms);
        cJSON_AddNumberToObject(o, "median_ms", r->median_ms);
        cJSON_AddNumberToObject(o, "p90_ms", r->p90_ms);
        cJSON_AddNumberToObject(o, "min_ms", r->min_ms);
        cJSON_AddNumberToObject(o, "steps_run", (double)r->steps_run);
        cJSON_AddItemToObject(o, "step_ms", cJSON_CreateDoubleArray(r->step_ms, r->n_step_ms));
        if (r->ref_compared > 0) {
            cJSON *ref = cJSON_AddObjectToObject(o, "against_reference");
            cJSON_AddNumberToObject(ref, "outputs_compared", r->ref_compared);
            if (isfinite(r->ref_rel_diff)) cJSON_AddNumberToObject(ref, "max_rel_diff", r->ref_rel_diff);
            else cJSON_AddNullToObject(ref, "max_rel_diff");
            cJSON_AddBoolToObject(ref, "agrees", r->ref_agrees);
            tr_json_add_str(ref, "worst", r->ref_worst);
        }
        cJSON_AddBoolToObject(o, "noisy", tr_bench_row_noisy(r));
        if (rep->parallel) {
            cJSON_AddNumberToObject(o, "comm_ms_per_step", r->comm_ms);
            cJSON_AddNumberToObject(o, "weight_checks", (double)r->weight_checks);
        }
        cJSON_AddNumberToObject(o, "samples_per_s", r->items_per_s);
        cJSON_AddNumberToObject(o, "gflops", r->gflops);
        cJSON_AddNumberToObject(o, "kernel_calls_per_step", (double)r->stats.kernel_calls);
        cJSON_AddNumberToObject(o, "alloc_hits", (double)r->stats.alloc_hits);
        cJSON_AddNumberToObject(o, "alloc_misses", (double)r->stats.alloc_misses);
        cJSON_AddNumberToObject(o, "peak_bytes", (double)r->stats.peak_bytes);
        cJSON_AddNumberToObject(o, "arena_bytes", (double)r->stats.arena_bytes);
        tr_json_add_str(o, "notes", r->stats.notes);
        cJSON_AddBoolToObject(o, "reference", r->is_reference);
        if (r->n_fit_losses > 0) {
            cJSON_AddNumberToObject(o, "loss_first", r->loss_first);
            cJSON_AddNumberToObject(o, "loss_last", r->loss_last);
            cJSON *ls = cJSON_AddArrayToObject(o, "losses_first_steps");
            for (int k = 0; k < r->n_fit_losses; k++) cJSON_AddItemToArray(ls, cJSON_CreateNumber(r->fit_losses[k]));
        }
        if (!r->is_reference) {
            /* JSON has no infinity: a non-finite difference is written as null. */
            if (isfinite(r->max_rel_diff)) cJSON_AddNumberToObject(o, "max_rel_diff", r->max_rel_diff);
            else cJSON_AddNullToObject(o, "max_rel_diff");
            tr_json_add_str(o, "worst_output", r->worst_output);
        }
        if (strcmp(rep->task, "generate") == 0 && rep->gen.max_length > 0) {
            cJSON_AddNumberToObject(o, "prefill_ms", r->prefill_ms);
            cJSON_AddNumberToObject(o, "ms_per_token", r->ms_per_token);
            cJSON_AddNumberToObject(o, "tokens_per_s", r->tokens_per_s);
            if (rep->gen.cache_inputs) cJSON_AddNumberToObject(o, "cache_write_ms", r->cache_write_ms);
            cJSON_AddNumberToObject(o, "compiles", r->compiles);
            cJSON_AddNumberToObject(o, "decode_passes", (double)r->decode_execs);
            cJSON_AddBoolToObject(o, "tokens_agree", r->tokens_agree);
            if (!r->tokens_agree) {
                cJSON_AddNumberToObject(o, "mismatch_sample", (double)r->mismatch_sample);
                cJSON_AddNumberToObject(o, "mismatch_new_token", (double)r->mismatch_step + 1);
                cJSON_AddBoolToObject(o, "near_tie", r->tokens_tie);
                cJSON_AddNumberToObject(o, "mismatch_token", r->mismatch_token);
                cJSON_AddNumberToObject(o, "reference_token", r->reference_token);
                if (isfinite(r->tie_gap)) cJSON_AddNumberToObject(o, "tie_gap", r->tie_gap);
            }
        }
        cJSON_AddBoolToObject(o, "agrees", r->agrees);
    }
    return root;
}

int tr_bench_write_json(const struct tr_bench_report *rep, const char *path, struct tr_error *err) {
    cJSON *root = tr_bench_json(rep);
    if (!root) return tr_error_set(err, TR_ERR_NOMEM, "%s: out of memory", path);
    int rc = tr_json_write(root, path, err);
    cJSON_Delete(root);
    return rc;
}

int tr_json_write(const cJSON *root, const char *path, struct tr_error *err) {
    char *text = cJSON_Print(root);
    if (!text) return tr_error_set(err, TR_ERR_NOMEM, "%s: out of memory", path);
    /* Every way out names the file and why: the caller prints nothing else. */
    FILE *f = fopen(path, "w");
    int rc = TR_OK;
    if (!f) rc = tr_error_set(err, TR_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    else {
        if (fputs(text, f) == EOF || fputc('\n', f) == EOF)
            rc = tr_error_set(err, TR_ERR_IO, "%s: write failed: %s", path, strerror(errno));
        if (fclose(f) != 0 && rc == TR_OK) rc = tr_error_set(err, TR_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    }
    cJSON_free(text);
    return rc;
}
