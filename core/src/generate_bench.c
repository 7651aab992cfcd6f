/* The generate task side by side (generate.h, tr_generate_bench): the memory check, the
 * weights and prompts made once, then each backend's generator timed call by call. A
 * step is one whole generate call for the batch, as the Keras benchmark times it; the
 * prefill pass is timed on its own inside it, and the rest divided by the decode passes
 * gives ms per token. Backends agree when their prefill logits are within the dtype's
 * tolerance of the reference's and every new token is the reference's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "trident/parse.h"
#include "trident/bench.h"
#include "bench_io.h"
#include "bench_progress.h"
#include "bench_util.h"
#include "trident/generate.h"
#include "trident/loader.h"
#include "trident/weights.h"

static double gib(uint64_t b) { return (double)b / (1024.0 * 1024.0 * 1024.0); }


/* The estimate against what the host has, said either way; refused when it does not fit.
 * On cuda the host holds the weights and the cache (the passes' activations are the
 * device's, which the backend checks). */
static int check_memory(const struct tr_config *cfg, const struct tr_task_graph *tg, struct tr_bench_report *rep,
                        struct tr_error *err) {
    struct tr_generate_memory mem;
    tr_generate_memory_estimate(&tg->gen, &mem);
    uint64_t avail = 0;
    int rc = tr_host_mem_available(&avail, err);
    if (rc) return rc;
    const int on_cpu = cfg->device_type == TR_DEVICE_CPU;
    const uint64_t need = on_cpu ? mem.total : mem.weights + mem.kv_cache;
    rep->kv_cache_bytes = mem.kv_cache;
    rep->mem_needed_bytes = need;
    rep->mem_available_bytes = avail;
    char h[5][32];
    fprintf(stderr,
            "trident: %s/%s generate, batch %lld, max_length %lld: needs about %s of host memory (weights %s, KV "
            "cache %s, activations at most %s%s); %s available\n",
            cfg->model, cfg->preset, (long long)cfg->batch, (long long)tg->gen_cfg.max_length, tr_bench_bytes_str(need, h[0], 32),
            tr_bench_bytes_str(mem.weights, h[1], 32), tr_bench_bytes_str(mem.kv_cache, h[2], 32), tr_bench_bytes_str(mem.activations, h[3], 32),
            on_cpu ? "" : ", on the device", tr_bench_bytes_str(avail, h[4], 32));
    if (need > avail)
        return tr_error_set(err, TR_ERR_NOMEM,
                            "%s: %s/%s generate at batch %lld, max_length %lld does not fit: it needs about %llu bytes "
                            "(%.2f GiB: weights %.2f, KV cache %.2f, activations at most %.2f) and %llu bytes (%.2f "
                            "GiB) are available (MemAvailable); lower [run] batch or [generate] max_length, or take "
                            "a smaller preset",
                            cfg->file, cfg->model, cfg->preset, (long long)cfg->batch,
                            (long long)tg->gen_cfg.max_length, (unsigned long long)need, gib(need), gib(mem.weights),
                            gib(mem.kv_cache), on_cpu ? gib(mem.activations) : 0.0, (unsigned long long)avail,
                            gib(avail));
    return TR_OK;
}

/* The reference's TOP_M largest logits at every new token: enough to tell a near tie
 * (another backend choosing the second best where the two were closer than the dtype's
 * error) from a real difference, without keeping every step's logits. */
#define TOP_M 4

/* The prefill logits of a call, copied (the generator's buffer is reused), and the top
 * logits of every step when top_id is not NULL. */
struct first_logits {
    struct tr_tensor *dst;
    int32_t *top_id;   /* [B, NEW, TOP_M] */
    float *top_val;
    int64_t NEW;
    /* sampled (top_k, top_p): at every step the tokens within reach of logits within tol ·
     * |the top logit| of these (tr_generate_pick_reach), reach [B, NEW, REACH_M], n_reach
     * how many (more than REACH_M: any token) */
    const struct tr_generate_config *gc;
    int64_t T; /* the prompt's length: step s draws for position T + s */
    double tol;
    int32_t *reach;
    int *n_reach;
    double spent_ms; /* in keep_first: the checks' time, left out of the first call's */
};

#define REACH_M 32

static void keep_first(void *user, int64_t step, const struct tr_tensor *logits) {
    struct first_logits *f = user;
    const double t0 = tr_bench_now_ms();
    if (step == 0) memcpy(f->dst->data, logits->data, tr_tensor_nbytes(logits));
    if (!f->top_id) {
        f->spent_ms += tr_bench_now_ms() - t0;
        return;
    }
    const int64_t B = logits->shape[0], V = logits->shape[1];
    for (int64_t b = 0; b < B; b++) {
        int32_t *id = f->top_id + (b * f->NEW + step) * TOP_M;
        float *val = f->top_val + (b * f->NEW + step) * TOP_M;
        int n = 0;
        for (int64_t v = 0; v < V; v++) {
            float x = (float)tr_tensor_get_f64(logits, b * V + v);
            if (n == TOP_M && !(x > val[TOP_M - 1])) continue;
            int i = n < TOP_M ? n++ : TOP_M - 1;
            while (i > 0 && x > val[i - 1]) val[i] = val[i - 1], id[i] = id[i - 1], i--;
            val[i] = x, id[i] = (int32_t)v;
        }
        for (; n < TOP_M; n++) id[n] = -1, val[n] = -INFINITY;
        if (f->reach) {
            const int64_t at = b * f->NEW + step;
            f->n_reach[at] = tr_generate_pick_reach(f->gc, logits, b, f->T + step, f->tol * fmax(fabs(val[0]), 1e-6),
                                                    f->reach + at * REACH_M, REACH_M);
        }
    }
    f->spent_ms += tr_bench_now_ms() - t0;
}

/* A differing token at (b, s) is a near tie when the reference ranked it among its top
 * logits there, within tol · |its top logit| of its own choice; sampled, when logits within
 * that of the reference's could have drawn it there. */
static int near_tie(const struct first_logits *ref, int64_t b, int64_t s, int32_t other, double tol, double *gap) {
    if (ref->reach) { /* sampled: a token within reach of the reference's logits */
        *gap = INFINITY;
        const int64_t at = b * ref->NEW + s;
        const int n = ref->n_reach[at];
        if (n > REACH_M) return 1;
        for (int i = 1; i < n; i++)
            if (ref->reach[at * REACH_M + i] == other) return 1;
        return 0;
    }
    const int32_t *id = ref->top_id + (b * ref->NEW + s) * TOP_M;
    const float *val = ref->top_val + (b * ref->NEW + s) * TOP_M;
    for (int i = 1; i < TOP_M; i++)
        if (id[i] == other) {
            *gap = (double)val[0] - (double)val[i];
            return *gap <= tol * fmax(fabs((double)val[0]), 1e-6);
        }
    *gap = INFINITY;
    return 0;
}

struct run_buffers {
    const struct tr_tensor *prompt;
    int32_t *tokens, *first_tokens;   /* [B, NEW]: this call's, and the first call's */
    struct first_logits *first;       /* the first call's prefill logits (and top logits) */
};

static int open_backend(const struct tr_config *cfg, const struct tr_config_backend *cb, struct tr_plugin **plugin,
                        struct tr_backend **be, struct tr_bench_row *row, struct tr_error *err) {
    struct tr_plugin_search search = {.ini_dir = cfg->plugin_path[0] ? cfg->plugin_path : NULL, .env_path = NULL};
    int rc = tr_plugin_open(cb->path[0] ? cb->path : cb->name, &search, plugin, err);
    if (rc) return rc;
    snprintf(row->plugin_path, sizeof row->plugin_path, "%s", tr_plugin_path(*plugin));
    struct tr_option opts[TR_CONFIG_MAX_KV + 1];
    int n_opts = tr_config_backend_options(cfg, cb, opts, TR_CONFIG_MAX_KV + 1);
    struct tr_backend_params params = {
        .struct_size = sizeof params, .abi_version = TR_ABI_VERSION, .device_type = cfg->device_type,
        .device_index = 0, .options = opts, .n_options = n_opts, .math = (int32_t)cfg->math,
    };
    return tr_backend_init(*plugin, &params, be, err);
}

/* One backend: init, compile both passes, the first call, warm-up, timed calls. */
static int run_backend(const struct tr_config *cfg, const struct tr_config_backend *cb, struct tr_task_graph *tg,
                       struct run_buffers *rb, struct tr_progress *pr, struct tr_bench_row *row, struct tr_error *err) {
    const struct tr_generate_graphs *gg = &tg->gen;
    const int64_t B = gg->opts.batch, NEW = gg->opts.max_length - gg->opts.prompt_len;
    struct tr_plugin *plugin = NULL;
    struct tr_backend *be = NULL;
    struct tr_generator *gen = NULL;
    double *times = NULL;
    struct tr_generate_times tm;
    double t0 = tr_bench_now_ms();
    tr_progress_phase(pr, row->label, "loading and compiling");
    int rc = open_backend(cfg, cb, &plugin, &be, row, err);
    if (rc) goto done;
    double tc = tr_bench_now_ms();
    rc = tr_generator_init(be, tg->model, tg->config, gg, &tg->gen_cfg, &gen, err);
    if (rc) goto done;
    row->compile_ms = tr_bench_now_ms() - tc;
    rb->first->spent_ms = 0;
    rc = tr_generator_run(gen, rb->prompt, rb->first_tokens, &tm, keep_first, rb->first, err);
    if (rc) goto done;
    row->first_ms = tr_bench_now_ms() - t0 - rb->first->spent_ms; /* the runner's checks left out */
    for (int64_t i = 1; i < cfg->warmup && rc == TR_OK && !tr_bench_stop_requested(); i++)
        rc = tr_generator_run(gen, rb->prompt, rb->tokens, &tm, NULL, NULL, err);
    if (rc) goto done;
    if (!(times = malloc(sizeof(double) * (size_t)cfg->steps))) {
        rc = tr_error_set(err, TR_ERR_NOMEM, "generate: out of memory");
        goto done;
    }
    double sum = 0, prefill = 0, writes = 0;
    int64_t passes = 0;
    for (int64_t i = 0; i < cfg->steps && !tr_bench_stop_requested(); i++) {
        double ts = tr_bench_now_ms();
        rc = tr_generator_run(gen, rb->prompt, rb->tokens, &tm, NULL, NULL, err);
        times[i] = tr_bench_now_ms() - ts;
        if (rc) {
            tr_error_prefix(err, "generate call %lld", (long long)(cfg->warmup + i + 1));
            goto done;
        }
        /* Every call generates the same tokens: nothing may carry over between calls. */
        for (int64_t j = 0; j < B * NEW; j++)
            if (rb->tokens[j] != rb->first_tokens[j]) {
                rc = tr_error_set(err, TR_ERR_NUMERIC,
                                  "generate call %lld: sample %lld, new token %lld is %d, the first call gave %d (the "
                                  "same prompts must give the same tokens)",
                                  (long long)(cfg->warmup + i + 1), (long long)(j / NEW), (long long)(j % NEW) + 1,
                                  rb->tokens[j], rb->first_tokens[j]);
                goto done;
            }
        sum += times[i], prefill += tm.prefill_ms, writes += tm.cache_write_ms, passes += tm.decode_passes;
        row->steps_run = i + 1;
        tr_progress_step(pr, row->label, row->steps_run, cfg->steps, sum);
    }
    if (row->steps_run < 1) {
        rc = tr_error_set(err, TR_ERR_INTERRUPTED, "interrupted before its timed calls");
        goto done;
    }
    const double n = (double)row->steps_run;
    tr_bench_row_times(row, times, row->steps_run);
    row->prefill_ms = prefill / n;
    row->cache_write_ms = writes / n;
    row->ms_per_token = passes > 0 ? (sum - prefill) / (double)passes : 0;
    row->items_per_s = row->mean_ms > 0 ? (double)B * 1e3 / row->mean_ms : 0;
    row->tokens_per_s = row->mean_ms > 0 ? (double)(B * NEW) * 1e3 / row->mean_ms : 0;
    row->gflops = row->mean_ms > 0 ? (tr_graph_flops(gg->prefill) + (double)(NEW - 1) * tr_graph_flops(gg->decode)) /
                                         (row->mean_ms * 1e6)
                                   : 0;
    struct tr_backend_stats pre;
    rc = tr_generator_stats(gen, &row->stats, &pre, err);
    if (rc) goto done;
    if (pre.peak_bytes > row->stats.peak_bytes) row->stats.peak_bytes = pre.peak_bytes;
    /* a step is a whole call: the prefill's kernels and every decode pass's */
    row->stats.kernel_calls = pre.kernel_calls + (NEW > 1 ? (uint64_t)(NEW - 1) * row->stats.kernel_calls : 0);
    int64_t prefills;
    tr_generator_counts(gen, &row->compiles, &prefills, &row->decode_execs);
done:
    free(times);
    tr_generator_free(gen);
    tr_backend_free(be);
    tr_plugin_close(plugin);
    return rc;
}

/* Prompts given as text: the first samples' new tokens (tokens [B, n]) as text up to the
 * model's end of sequence, special tokens left out (as transformers' generate and
 * decode(..., skip_special_tokens=True)), truncated to the report's room. With greedy
 * choice a sample whose prompt an earlier one had would only repeat it. */
static void decode_text(const struct tr_task_graph *tg, const int32_t *tokens, int64_t B, int64_t n,
                        struct tr_bench_report *rep) {
    const struct tr_generate_text *tx = &tg->text;
    if (!tx->tok) return;
    const int greedy = !tg->gen_cfg.top_k_sampling && !tg->gen_cfg.top_p_sampling;
    int64_t show = greedy && tx->n < B ? tx->n : B;
    if (show > (int64_t)(sizeof rep->texts / sizeof rep->texts[0])) show = sizeof rep->texts / sizeof rep->texts[0];
    for (int64_t b = 0; b < show; b++) {
        struct tr_bench_text *t = &rep->texts[rep->n_texts++];
        char *text = NULL;
        struct tr_error e = {0};
        int used = 0;
        t->sample = b;
        snprintf(t->prompt, sizeof t->prompt, "%s", tx->prompt[b % tx->n]);
        if (tg->model->generate->text_decode(tx->tok, tokens + b * n, (int)n, &text, &used, &e) == TR_OK)
            snprintf(t->text, sizeof t->text, "%s", text), t->text_tokens = used;
        else
            snprintf(t->text, sizeof t->text, "(not decoded: %.900s)", e.msg), t->text_tokens = n;
        free(text);
    }
}

int tr_generate_bench(const struct tr_config *cfg, struct tr_task_graph *tg, const struct tr_bench_opts *o,
                      struct tr_bench_report *rep, struct tr_error *err) {
    struct tr_generate_graphs *gg = &tg->gen;
    const int64_t B = gg->opts.batch, T = gg->opts.prompt_len, NEW = gg->opts.max_length - T;
    const int n_prompt = gg->plan.n_prompt_inputs;
    tr_bench_reference_set(cfg, rep);
    const char *ref_why = rep->reference_why;
    const double ref_tol = rep->reference_tolerance;
    rep->gen = tg->gen_cfg;
    rep->new_tokens = NEW;
    rep->seq_len = T;
    rep->flops_per_step = tr_graph_flops(gg->prefill) + (double)(NEW - 1) * tr_graph_flops(gg->decode);
    rep->n_nodes = tr_graph_n_nodes(gg->prefill) + tr_graph_n_nodes(gg->decode);
    int rc = check_memory(cfg, tg, rep, err);
    if (rc) return rc;

    struct tr_weights *w = NULL;
    struct tr_bench_reference refile = {0};
    struct tr_bench_outputs outs = {0};
    struct tr_progress pr;
    tr_progress_init(&pr, cfg);
    snprintf(rep->schedule, sizeof rep->schedule, "sequential");
    struct tr_tensor *prompt = NULL, ref_logits = {0}, logits = {0};
    int32_t *ref_tokens = NULL, *tokens = NULL, *first = NULL, *top_id = NULL;
    float *top_val = NULL;
    int32_t *reach = NULL; /* sampled: the tokens within reach at each step (first_logits) */
    int *n_reach = NULL;
    const struct tr_tensor tokens_desc = {.dtype = TR_DTYPE_I32, .ndim = 2, .shape = {B, NEW}, .strides = {NEW, 1}};
    rc = tr_bench_reference_open_extra(cfg, gg->prefill, "tokens", &tokens_desc, &refile, err);
    const struct tr_weights_load_opts wo = {.seed = cfg->seed, .missing_seed = cfg->missing_seed,
                                            .variant = cfg->weights_variant,
                                            .skip = {cfg->inputs, cfg->reference, o ? o->outputs : NULL}};
    if (!rc) rc = tr_bench_weights(cfg, gg->weights, &wo, &w, err);
    if (!rc && cfg->weights[0]) {
        tr_weights_warn_seeded(w, cfg->weights, cfg->seed, stderr);
        tr_weights_warn_unused(w, stderr);
    }
    if (!rc) rc = tr_generate_share_params(gg, err);
    if (rc) goto done;
    if (!(prompt = calloc((size_t)n_prompt, sizeof *prompt))) {
        rc = tr_error_set(err, TR_ERR_NOMEM, "generate: out of memory");
        goto done;
    }
    for (int i = 0; i < n_prompt && !rc; i++) {
        prompt[i] = tr_node_tensor(gg->prefill, tr_graph_input(gg->prefill, i));
        rc = tr_host_alloc(&prompt[i].data, tr_tensor_nbytes(&prompt[i]), err);
    }
    if (!rc) rc = cfg->inputs[0] ? tr_bench_inputs_load(cfg, gg->prefill, n_prompt, prompt, err)
                                 : tg->model->generate->make_prompt(tg->config, &gg->opts, cfg->seed, n_prompt, prompt,
                                                                    err);
    for (int i = 0; !rc && cfg->inputs[0] && i < n_prompt; i++) { /* decoding goes on from the last position */
        const struct tr_tensor *m = &prompt[i];
        if (strcmp(tr_node_name(gg->prefill, tr_graph_input(gg->prefill, i)), "attention_mask") || m->ndim != 2) continue;
        for (int64_t b = 0; b < m->shape[0] && !rc; b++)
            if (tr_tensor_get_f64(m, b * m->shape[1] + m->shape[1] - 1) == 0.0)
                rc = tr_error_set(err, TR_ERR_INVALID, "%s:%d: [run] inputs = %s: sample %lld's prompt ends in padding "
                                  "(attention_mask[%lld][%lld] = 0): generate continues from the last position, so "
                                  "prompts are padded on the left (a tokenizer's padding_side = \"left\")",
                                  cfg->file, cfg->inputs_line, cfg->inputs, (long long)b, (long long)b,
                                  (long long)(m->shape[1] - 1));
    }
    ref_logits = logits = tr_node_tensor(gg->prefill, tr_graph_output(gg->prefill, 0));
    ref_logits.data = logits.data = NULL;
    if (!rc) rc = tr_host_alloc(&ref_logits.data, tr_tensor_nbytes(&ref_logits), err);
    if (!rc) rc = tr_host_alloc(&logits.data, tr_tensor_nbytes(&logits), err);
    const size_t tok_bytes = sizeof(int32_t) * (size_t)(B * NEW);
    if (!rc && (!(ref_tokens = malloc(tok_bytes)) || !(tokens = malloc(tok_bytes)) || !(first = malloc(tok_bytes)) ||
                !(top_id = malloc(tok_bytes * TOP_M)) || !(top_val = malloc(sizeof(float) * TOP_M * (size_t)(B * NEW)))))
        rc = tr_error_set(err, TR_ERR_NOMEM, "generate: out of memory for %lld tokens", (long long)(B * NEW));
    if (rc) goto done;
    const struct tr_generate_config *gc = &tg->gen_cfg;
    const int sampled = gc->top_k_sampling || gc->top_p_sampling;
    if (sampled && (!(reach = malloc(sizeof *reach * REACH_M * (size_t)(B * NEW))) ||
                    !(n_reach = malloc(sizeof *n_reach * (size_t)(B * NEW)))))
        rc = tr_error_set(err, TR_ERR_NOMEM, "generate: out of memory for %lld draws", (long long)(B * NEW));
    if (rc) goto done;
    struct first_logits ref_first = {.dst = &ref_logits, .top_id = top_id, .top_val = top_val, .NEW = NEW,
                                     .gc = gc, .T = gc->prompt_len, .tol = rep->tolerance, .reach = reach,
                                     .n_reach = n_reach};
    struct first_logits other_first = {.dst = &logits, .NEW = NEW};

    int have_ref = 0, failures = 0, disagreements = 0;
    for (int b = 0; b < cfg->n_backends; b++) {
        struct tr_bench_row *row = &rep->rows[rep->n_rows++];
        row->mismatch_sample = row->mismatch_step = -1;
        tr_bench_label(cfg, b, row->label, sizeof row->label);
        if (tr_bench_stop_requested()) {
            snprintf(row->error, sizeof row->error, "interrupted before it started");
            continue;
        }
        struct run_buffers rb = {.prompt = prompt, .tokens = tokens, .first_tokens = have_ref ? first : ref_tokens,
                                 .first = have_ref ? &other_first : &ref_first};
        struct tr_error berr = {0};
        const int brc = run_backend(cfg, &cfg->backends[b], tg, &rb, &pr, row, &berr);
        row->ok = brc == TR_OK;
        if (!row->ok) snprintf(row->error, sizeof row->error, "%s", berr.msg);
        tr_progress_done(&pr, row, cfg->steps);
        if (brc != TR_OK) {
            failures += brc != TR_ERR_INTERRUPTED;
            continue;
        }
        if (o->outputs) {
            struct tr_tensor tt = {.data = rb.first_tokens, .dtype = TR_DTYPE_I32, .ndim = 2, .shape = {B, NEW},
                                   .strides = {NEW, 1}};
            rc = tr_bench_outputs_add(&outs, row->label, "tokens", &tt, err);
            if (!rc) rc = tr_bench_outputs_add(&outs, row->label, tr_graph_output_name(gg->prefill, 0),
                                               rb.first->dst, err);
            if (rc) goto done;
        }
        if (refile.st) {
            struct tr_tensor tt = tokens_desc;
            tt.data = rb.first_tokens;
            tr_bench_reference_compare(&refile, gg->prefill, 1, rb.first->dst, NULL, 0, ref_tol, row);
            tr_bench_reference_compare_extra(&refile, &tt, ref_tol, row);
        }
        int64_t where;
        const struct tr_tensor *got = rb.first->dst;
        for (where = 0; where < tr_tensor_numel(got); where++)
            if (!isfinite(tr_tensor_get_f64(got, where))) break;
        if (where < tr_tensor_numel(got)) {
            row->ok = 0;
            snprintf(row->error, sizeof row->error, "the prefill logits have a non-finite value at element %lld",
                     (long long)where);
            failures++;
            continue;
        }
        if (!have_ref) {
            have_ref = 1;
            row->agrees = row->tokens_agree = row->is_reference = 1;
            rep->n_sample_tokens = (int)(NEW < 8 ? NEW : 8);
            memcpy(rep->sample_tokens, ref_tokens, sizeof(int32_t) * (size_t)rep->n_sample_tokens);
            decode_text(tg, ref_tokens, B, NEW, rep);
            continue;
        }
        row->max_rel_diff = tr_bench_rel_diff(&logits, &ref_logits);
        snprintf(row->worst_output, sizeof row->worst_output, "prefill logits");
        /* The first difference, in generation order: until then both saw the same tokens. */
        row->tokens_agree = 1;
        for (int64_t s = 0; s < NEW && row->tokens_agree; s++)
            for (int64_t i = 0; i < B && row->tokens_agree; i++)
                if (first[i * NEW + s] != ref_tokens[i * NEW + s]) {
                    row->tokens_agree = 0;
                    row->mismatch_sample = i, row->mismatch_step = s;
                    row->mismatch_token = first[i * NEW + s], row->reference_token = ref_tokens[i * NEW + s];
                    row->tokens_tie = near_tie(&ref_first, i, s, first[i * NEW + s], rep->tolerance, &row->tie_gap);
                }
        row->agrees = row->max_rel_diff <= rep->tolerance && (row->tokens_agree || row->tokens_tie);
        if (!row->agrees) disagreements++;
    }
    const struct tr_bench_row *bad;
    rc = tr_bench_verdict(rep, failures, disagreements, &bad, err);
    tr_bench_note_same_rows(rep, stderr);
    const char *ref_label = tr_bench_reference_label(rep);
    if (bad && !bad->tokens_agree && !bad->tokens_tie && sampled) {
        const int64_t at = bad->mismatch_sample * NEW + bad->mismatch_step;
        char within[96] = "";
        for (int i = 1, n = 0; i < n_reach[at] && i < REACH_M; i++)
            n += snprintf(within + n, sizeof within - (size_t)n, "%s%d", i > 1 ? ", " : " (or ", reach[at * REACH_M + i]);
        rc = tr_error_set(err, TR_ERR_NUMERIC,
                          "%d of %d backends disagree with '%s'; '%s' drew token %d for sample %lld at new token "
                          "%lld, where logits within %s (%s) of the reference's draw only %d%s%s (prefill "
                          "logits differ by %.2e)",
                          disagreements, rep->n_rows, ref_label, bad->label, (int)bad->mismatch_token,
                          (long long)bad->mismatch_sample, (long long)bad->mismatch_step + 1, rep->tolerance_why,
                          tr_tol_str(rep->tolerance, (char[32]){0}, 32), (int)bad->reference_token, within, within[0] ? ")" : "", bad->max_rel_diff);
    }
    else if (bad && !bad->tokens_agree && !bad->tokens_tie)
        rc = tr_error_set(err, TR_ERR_NUMERIC,
                          "%d of %d backends disagree with '%s'; '%s' generated another token for sample %lld at "
                          "new token %lld, not a near tie (the reference's logits of the two differ by %.3g; "
                          "prefill logits differ by %.2e; %s is %s)",
                          disagreements, rep->n_rows, ref_label, bad->label, (long long)bad->mismatch_sample,
                          (long long)bad->mismatch_step + 1, bad->tie_gap, bad->max_rel_diff, rep->tolerance_why,
                          tr_tol_str(rep->tolerance, (char[32]){0}, 32));
    else if (bad)
        rc = tr_error_set(err, TR_ERR_NUMERIC,
                          "%d of %d backends disagree with '%s'; '%s' differs by %.2e in the prefill logits (%s "
                          "is %s)",
                          disagreements, rep->n_rows, ref_label, bad->label, bad->max_rel_diff, rep->tolerance_why,
                          tr_tol_str(rep->tolerance, (char[32]){0}, 32));
    for (int b = 0; !rc && refile.st && b < rep->n_rows; b++)
        if (rep->rows[b].ok && !rep->rows[b].ref_agrees)
            rc = tr_error_set(err, TR_ERR_NUMERIC, "%s:%d: [run] reference = %s: '%s' differs from it: %s (%s is "
                              "%s)", cfg->file, cfg->reference_line, cfg->reference,
                              rep->rows[b].label, rep->rows[b].ref_worst, ref_why, tr_tol_str(ref_tol, (char[32]){0}, 32)),
            rep->all_ok = 0;
    if (o->outputs) {
        int orc = tr_bench_outputs_write(&outs, o->outputs, err);
        if (orc) rc = orc;
        else fprintf(stderr, "trident: wrote %s (%d tensors: every backend's tokens and prefill logits)\n",
                     o->outputs, outs.n);
    }
    rep->interrupted = tr_bench_stop_requested();
    if (rep->interrupted) rep->all_ok = 0; /* not every call ran: not "all ran and agree" */
    if (rep->interrupted && (rc == TR_OK || rc == TR_ERR_PLUGIN))
        rc = tr_error_set(err, TR_ERR_INTERRUPTED, "interrupted (Ctrl-C): %d of %d backends took timed calls, and "
                          "each one's figures are over the calls it took", rep->n_rows - failures, rep->n_rows);
done:
    for (int i = 0; prompt && i < n_prompt; i++) tr_host_free(prompt[i].data);
    free(prompt);
    tr_host_free(ref_logits.data);
    tr_host_free(logits.data);
    free(ref_tokens);
    free(tokens);
    free(first);
    free(top_id);
    free(reach);
    free(n_reach);
    free(top_val);
    tr_weights_free(w);
    tr_bench_outputs_free(&outs);
    tr_bench_reference_close(&refile);
    tr_progress_end(&pr);
    return rc;
}
