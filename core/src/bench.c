/* The task runner and the side-by-side benchmark harness (bench.h).
 *
 * One graph, one set of weights, one synthetic batch; each backend in turn loads, compiles
 * and runs it. The first step (init + compile + first run) is timed on its own and left
 * out, as the Keras 3 benchmark does; the remaining warm-up steps are untimed; then
 * `steps` steps are timed one by one so that the median and p90 are real. */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include "trident/parse.h"
#include "trident/bench.h"
#include "trident/generate.h"
#include "trident/image.h"
#include "bench_dp.h"
#include "bench_io.h"
#include "trident/isolate.h"
#include "bench_guard.h"
#include "bench_preflight.h"
#include "bench_progress.h"
#include "bench_util.h"
#include "trident/graph.h"
#include "trident/kernels.h"
#include "trident/loader.h"
#include "trident/weights.h"

static int first_nonfinite(const struct tr_tensor *t, int64_t *where) {
    int64_t n = tr_tensor_numel(t);
    if (!tr_dtype_is_float((enum tr_dtype)t->dtype)) return 0;
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(tr_tensor_get_f64(t, i))) {
            *where = i;
            return 1;
        }
    return 0;
}

/* fit: the state every backend starts from (the updated params' initial bytes), and the
 * per-step inputs (lr, step). */
struct fit_state {
    int on;
    const struct tr_task_graph *tg;
    void **snap;                /* per graph update: the param's bytes before any step */
    size_t *nbytes;
    int n;
    float *lr, *step;           /* the host tensors fed as "lr" and "step" */
    float *dp_share;            /* data parallel: fed as "dp_share" (train.h) */
};

static void fit_restore(struct fit_state *fs) {
    const struct tr_graph *g = fs->tg->graph;
    for (int u = 0; u < fs->n; u++)
        memcpy((void *)tr_node_data(g, tr_graph_update_param(g, u)), fs->snap[u], fs->nbytes[u]);
}

#define TR_MAX_OUTPUTS_SLOT 256

/* What a backend's process reports back: in memory shared with the parent, so it
 * survives the process. In-process runs use the same layout. */
struct slot_shared {
    struct tr_bench_row row;
    struct tr_error err;
    int64_t n_steps;            /* steps run (all kinds): fit's step counter */
    double ms_sum;              /* the timed steps' time so far */
    int live;                   /* started and not failed */
};

/* One backend of a run: its instance (in its own process when isolated), its outputs and
 * step times (in the shared region: sh, then the outputs' data, the times, the losses). */
struct slot {
    const struct tr_config_backend *cb;
    struct slot_shared *sh;
    size_t sh_bytes;
    struct tr_bench_row *row;   /* &sh->row */
    struct tr_plugin *plugin;   /* in the process that runs the backend */
    struct tr_backend *be;
    struct tr_program *prog;
    struct tr_tensor *out;      /* this backend's outputs (of its last step); data shared */
    double *times;              /* timed steps, in order */
    double *losses;             /* fit: every step's loss, first and warm-up steps too */
    struct tr_child child;      /* isolated: the backend's process */
    struct run *r;              /* for the child's command handler */
    int dead;                   /* its process died in the check before the run: not started */
    double comm_s;              /* the last step's time in collectives, within its execute */
};

/* What the slots share. */
struct run {
    const struct tr_config *cfg;
    const struct tr_graph *g;
    struct fit_state *fs;
    int n_in, n_out;
    const struct tr_tensor *in;
    struct tr_progress *pr;
    int isolate;                /* each backend in a child process */
    struct tr_dp *dp;           /* data parallel (bench_dp.h) */
    struct tr_bench_guard *guard; /* not isolated: the shared weights' checksums */
};

static void slot_fail(struct slot *s, int rc) {
    (void)rc;
    s->sh->live = 0;
    s->row->ok = 0;
    snprintf(s->row->error, sizeof s->row->error, "%s", s->sh->err.msg);
}

static void slot_close(struct slot *s) {
    tr_program_free(s->prog);
    tr_backend_free(s->be);
    tr_plugin_close(s->plugin);
    s->prog = NULL, s->be = NULL, s->plugin = NULL;
}

/* Data parallel: every rank's trained state the same? A device's states are read back
 * into host memory first (sync), so cuda's ranks are compared too. */
static int check_ranks(struct run *r, struct slot *s) {
    if (!r->dp->check_weights) return TR_OK;
    int rc = tr_backend_sync(s->be, s->prog, &s->sh->err);
    if (!rc) rc = tr_dp_check_weights(r->dp, s->sh->n_steps, &s->sh->err);
    if (!rc) s->row->weight_checks++;
    return rc;
}

/* Ctrl-C: data parallel, what every rank agreed at the last step's status exchange (one
 * rank's signal stops them all after the same step); else this process's. */
static int stop_now(const struct run *r) { return r->dp->on ? r->dp->stop : tr_bench_stop_requested(); }

/* One step; fit: the step counter fed, the loss checked finite and kept. */
static int slot_step(struct run *r, struct slot *s, double *ms) {
    struct fit_state *fs = r->fs;
    if (fs->on) *fs->step = (float)(s->sh->n_steps + 1);
    tr_dp_phase(r->dp, s->row->label, "step", s->sh->n_steps + 1);
    const double c0 = tr_dp_seconds(r->dp), t0 = tr_bench_now_ms();
    int rc = tr_backend_execute(s->be, s->prog, r->n_in, r->in, r->n_out, s->out, &s->sh->err);
    *ms = tr_bench_now_ms() - t0;
    s->comm_s = tr_dp_seconds(r->dp) - c0; /* the step's own collectives, not the exchanges after it */
    rc = tr_dp_step_status(r->dp, rc, s->row->label, s->sh->n_steps + 1, &s->sh->err);
    if (rc) return rc;
    s->sh->n_steps++;
    if (fs->on && r->dp->check_every > 0 && s->sh->n_steps % r->dp->check_every == 0 && (rc = check_ranks(r, s)))
        return rc;
    if (!fs->on) return TR_OK;
    double loss = tr_tensor_get_f64(&s->out[0], 0);
    s->losses[s->sh->n_steps - 1] = loss;
    if (!isfinite(loss) && s->sh->n_steps == 1) /* no update has run: not the learning rate's doing */
        return tr_error_set(&s->sh->err, TR_ERR_NUMERIC, "fit: the loss is %g at step 1, before any update: the "
                            "weights or the inputs hold a value that is not finite, or the model overflows in this "
                            "dtype", loss);
    if (!isfinite(loss))
        return tr_error_set(&s->sh->err, TR_ERR_NUMERIC, "fit: the loss is %g at step %lld (lr %g): training diverged",
                            loss, (long long)s->sh->n_steps, (double)*fs->lr);
    struct tr_bench_row *row = s->row;
    if (s->sh->n_steps == 1) row->loss_first = loss;
    row->loss_last = loss;
    if (row->n_fit_losses < TR_BENCH_FIT_LOSSES) row->fit_losses[row->n_fit_losses++] = loss;
    return TR_OK;
}

/* Load, init, compile, the first step (timed on its own), the untimed warm-up. */
static int slot_start(struct run *r, struct slot *s) {
    const struct tr_config *cfg = r->cfg;
    struct tr_plugin_search search = {.ini_dir = cfg->plugin_path[0] ? cfg->plugin_path : NULL, .env_path = NULL};
    tr_dp_phase(r->dp, s->row->label, "load and compile", 0);
    int rc = tr_plugin_open(s->cb->path[0] ? s->cb->path : s->cb->name, &search, &s->plugin, &s->sh->err);
    struct tr_option opts[TR_CONFIG_MAX_KV + 1];
    struct tr_backend_params params;
    double t0 = tr_bench_now_ms(), tc = t0;
    if (!rc) {
        snprintf(s->row->plugin_path, sizeof s->row->plugin_path, "%s", tr_plugin_path(s->plugin));
        tr_bench_backend_params(cfg, s->cb, opts, &params);
        if (r->fs->on) fit_restore(r->fs);
        t0 = tr_bench_now_ms();
        rc = tr_backend_init(s->plugin, &params, &s->be, &s->sh->err);
    }
    if (!rc) {
        tc = tr_bench_now_ms();
        rc = tr_backend_compile(s->be, r->g, &s->prog, &s->sh->err);
    }
    /* data parallel: a backend that failed to come up on one rank is every rank's failure */
    if ((rc = tr_dp_step_status(r->dp, rc, s->row->label, 0, &s->sh->err)) != TR_OK) return rc;
    s->row->compile_ms = tr_bench_now_ms() - tc;
    double ms;
    if ((rc = slot_step(r, s, &ms)) != TR_OK) return rc;
    s->row->first_ms = tr_bench_now_ms() - t0;
    if (cfg->warmup > 1) tr_progress_phase(r->pr, s->row->label, "warm-up");
    for (int64_t i = 1; i < cfg->warmup && rc == TR_OK && !stop_now(r); i++) rc = slot_step(r, s, &ms);
    if (rc) return rc;
    s->sh->live = 1;
    return TR_OK;
}

static int slot_timed_step(struct run *r, struct slot *s) {
    double *t = &s->times[s->row->steps_run];
    const int64_t step = s->sh->n_steps + 1; /* the one that fails, whether before or after its count */
    int rc = slot_step(r, s, t);
    if (rc) return tr_error_prefix(&s->sh->err, "step %lld", (long long)step);
    s->row->comm_ms += 1e3 * s->comm_s; /* a sum until slot_finish */
    s->sh->ms_sum += *t;
    s->row->steps_run++;
    return TR_OK;
}

/* After the timed steps (all or, interrupted, some): the row's figures, the stats, the
 * outputs checked finite. */
static int slot_finish(struct run *r, struct slot *s) {
    struct tr_bench_row *row = s->row;
    const struct tr_config *cfg = r->cfg;
    if (row->steps_run < 1) return tr_error_set(&s->sh->err, TR_ERR_INTERRUPTED, "interrupted before its timed steps");
    tr_bench_row_times(row, s->times, row->steps_run);
    row->comm_ms /= (double)row->steps_run;
    /* the state every rank ends with, whatever check_every's last check saw */
    if (r->fs->on && r->dp->check_every > 0 && s->sh->n_steps % r->dp->check_every != 0) {
        tr_dp_phase(r->dp, row->label, "the final check of the trained state", 0);
        int crc = check_ranks(r, s);
        if (crc) return crc;
    }
    row->items_per_s = row->mean_ms > 0 ? (double)cfg->batch * 1e3 / row->mean_ms : 0;
    row->gflops = row->mean_ms > 0 ? tr_graph_flops(r->g) / (row->mean_ms * 1e6) : 0;
    int rc = tr_backend_get_stats(s->be, s->prog, &row->stats, &s->sh->err);
    if (rc == TR_OK && r->fs->on) rc = tr_backend_sync(s->be, s->prog, &s->sh->err);
    if (rc) return rc;
    for (int i = 0; i < r->n_out; i++) {
        int64_t where;
        if (first_nonfinite(&s->out[i], &where))
            return tr_error_set(&s->sh->err, TR_ERR_NUMERIC, "output '%s' has a non-finite value at element %lld",
                                tr_graph_output_name(r->g, i), (long long)where);
    }
    row->ok = 1;
    return TR_OK;
}

/* The commands a backend's process takes: start (load, compile, first step, warm-up), one
 * timed step, finish (figures, stats, checks; then its instance is freed). */
enum { CMD_START = 'B', CMD_STEP = 'S', CMD_FINISH = 'F' };

/* Run cmd where the backend lives (the child, or this process). */
static int slot_run_cmd(void *arg, int cmd) {
    struct slot *s = arg;
    int rc;
    if (cmd == CMD_START) rc = slot_start(s->r, s);
    else if (cmd == CMD_STEP) rc = slot_timed_step(s->r, s);
    else rc = slot_finish(s->r, s);
    if (rc && !s->sh->err.status) s->sh->err.status = rc;
    if (cmd == CMD_FINISH || rc) slot_close(s);
    /* in this process, after every command (at start and finish alone over 1 GiB of
     * weights: a pass over them costs as much as a memory-bound step) */
    struct tr_bench_guard *gd = s->r->guard;
    int changed = gd && (cmd != CMD_STEP || gd->bytes <= (1ull << 30)) ? tr_bench_guard_check(gd, s->r->g) : -1;
    if (changed >= 0 && !rc) {
        rc = tr_error_set(&s->sh->err, TR_ERR_PLUGIN,
                          "wrote into the memory of %s '%s', which the graph does not update: a backend reads "
                          "weights and never writes them (docs/writing-a-backend.md, 5); the backends after it ran "
                          "on the changed values ([run] isolate = on gives each its own copy)",
                          tr_node_op(s->r->g, changed) == TR_OP_CONST ? "CONST" : "PARAM",
                          tr_node_name(s->r->g, changed));
        if (cmd != CMD_FINISH) slot_close(s);
    }
    if (rc) s->sh->live = 0;
    return rc;
}

/* Drive one command; isolated, through the backend's process, whose death or silence
 * becomes this backend's error. */
static int slot_do(struct run *r, struct slot *s, int cmd) {
    if (!r->isolate) return slot_run_cmd(s, cmd);
    struct tr_error e = {0};
    if (cmd == CMD_START) tr_bench_interrupt_share();
    if (cmd == CMD_START && tr_child_spawn(&s->child, slot_run_cmd, s, &e) != TR_OK) {
        s->sh->err = e;
        return e.status;
    }
    char what[64];
    if (cmd == CMD_START) snprintf(what, sizeof what, "its load, compile and warm-up");
    else if (cmd == CMD_STEP) snprintf(what, sizeof what, "timed step %lld", (long long)s->row->steps_run + 1);
    else snprintf(what, sizeof what, "its finish (stats, checks)");
    int status = TR_OK;
    int rc = tr_child_call(&s->child, cmd, r->cfg->backend_timeout, what, &status, &e);
    if (rc) {
        s->sh->err = e;
        s->sh->live = 0;
        return rc;
    }
    if (cmd == CMD_FINISH || status) tr_child_end(&s->child);
    return status;
}

static void slot_release(struct slot *s) {
    tr_child_end(&s->child);
    slot_close(s);
}

/* The shared region of a slot: its report, then the outputs' data, the step times, the
 * losses (made before any fork, so the backend's process writes where this one reads). */
static int slot_alloc(struct slot *s, const struct tr_graph *g, int n_out, int64_t steps, int64_t n_losses,
                      struct tr_error *err) {
    const size_t align = 64;
    size_t off = (sizeof(struct slot_shared) + align - 1) / align * align;
    size_t at[TR_MAX_OUTPUTS_SLOT];
    if (n_out > TR_MAX_OUTPUTS_SLOT)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "bench: %d outputs, at most %d", n_out, TR_MAX_OUTPUTS_SLOT);
    s->out = calloc((size_t)(n_out ? n_out : 1), sizeof *s->out);
    if (!s->out) return tr_error_set(err, TR_ERR_NOMEM, "bench: out of memory");
    for (int i = 0; i < n_out; i++) {
        s->out[i] = tr_node_tensor(g, tr_graph_output(g, i));
        at[i] = off;
        off += (tr_tensor_nbytes(&s->out[i]) + align - 1) / align * align;
    }
    const size_t t_at = off;
    off += sizeof(double) * (size_t)steps;
    const size_t l_at = off;
    off += sizeof(double) * (size_t)n_losses;
    char *base = tr_shared_alloc(off, err);
    if (!base) return err->status;
    s->sh = (struct slot_shared *)base;
    s->sh_bytes = off;
    s->row = &s->sh->row;
    for (int i = 0; i < n_out; i++) s->out[i].data = base + at[i];
    s->times = (double *)(base + t_at);
    s->losses = n_losses ? (double *)(base + l_at) : NULL;
    return TR_OK;
}

static void slot_free(struct slot *s) {
    slot_release(s);
    free(s->out);
    tr_shared_free(s->sh, s->sh_bytes);
    memset(s, 0, sizeof *s);
}


/* Each backend's steps one after another (fit in one process: the backends train one host
 * copy of the parameters, restored before each). */
static void run_sequential(struct run *r, struct slot *slots, int n) {
    for (int b = 0; b < n && !stop_now(r); b++) {
        struct slot *s = &slots[b];
        if (s->dead) continue;
        tr_progress_phase(r->pr, s->row->label, "loading and compiling");
        int rc = slot_do(r, s, CMD_START);
        for (int64_t i = 0; rc == TR_OK && i < r->cfg->steps && !stop_now(r); i++) {
            rc = slot_do(r, s, CMD_STEP);
            tr_progress_step(r->pr, s->row->label, s->row->steps_run, r->cfg->steps, s->sh->ms_sum);
        }
        if (rc == TR_OK) rc = slot_do(r, s, CMD_FINISH);
        if (rc) slot_fail(s, rc);
        tr_progress_done(r->pr, s->row, r->cfg->steps);
        slot_release(s);
    }
}

/* Every backend started, then the timed steps taken in turns: a change of the machine's
 * load (another process, a frequency step) falls on every backend alike instead of on
 * whichever ran then. */
static void run_interleaved(struct run *r, struct slot *slots, int n, struct tr_bench_report *rep) {
    for (int b = 0; b < n && !stop_now(r); b++) {
        if (slots[b].dead) continue;
        tr_progress_phase(r->pr, slots[b].row->label, "loading and compiling");
        if (slot_do(r, &slots[b], CMD_START) != TR_OK) slot_fail(&slots[b], slots[b].sh->err.status);
    }
    double sums[TR_BENCH_MAX_ROWS] = {0};
    for (int64_t i = 0; i < r->cfg->steps && !stop_now(r); i++) {
        for (int b = 0; b < n; b++) {
            struct slot *s = &slots[b];
            if (!s->sh->live) continue;
            s->row->ok = 1; /* shown in the live line while it runs */
            if (slot_do(r, s, CMD_STEP) != TR_OK) slot_fail(s, s->sh->err.status);
            sums[b] = s->sh->ms_sum;
            rep->rows[b] = *s->row;
        }
        tr_progress_round(r->pr, rep, sums, i + 1, r->cfg->steps);
    }
    tr_progress_end(r->pr);
    for (int b = 0; b < n; b++) {
        struct slot *s = &slots[b];
        if (s->sh->live && slot_do(r, s, CMD_FINISH) != TR_OK) slot_fail(s, s->sh->err.status);
        else if (!s->sh->live && !s->sh->err.msg[0]) { /* never started: interrupted first */
            tr_error_set(&s->sh->err, TR_ERR_INTERRUPTED, "interrupted before it started");
            slot_fail(s, TR_ERR_INTERRUPTED);
        }
        tr_progress_done(r->pr, s->row, r->cfg->steps);
        slot_release(s);
    }
}

/* libgomp reads OMP_WAIT_POLICY and GOMP_SPINCOUNT once, when it is loaded, so what the
 * environment holds now is what the run's threads wait with. GOMP_SPINCOUNT wins over
 * the policy's spin count; without either libgomp spins 300000 times (about 3 ms) before
 * sleeping (libgomp/env.c). */
/* What libgomp's env.c takes: OMP_WAIT_POLICY active or passive (any case, blanks
 * around); GOMP_SPINCOUNT infinite, infinity or a count with a k, M, G or T suffix. Another
 * value it says is invalid and ignores. */
static int omp_policy_ok(const char *v) {
    while (isspace((unsigned char)*v)) v++;
    const size_t n = !strncasecmp(v, "active", 6) ? 6 : !strncasecmp(v, "passive", 7) ? 7 : 0;
    for (v += n; n && isspace((unsigned char)*v);) v++;
    return n && !*v;
}
static int omp_spin_ok(const char *v) {
    while (isspace((unsigned char)*v)) v++;
    if (!strncasecmp(v, "infinite", 8) || !strncasecmp(v, "infinity", 8)) v += 8;
    else {
        if (!isdigit((unsigned char)*v)) return 0;
        while (isdigit((unsigned char)*v)) v++;
        while (isspace((unsigned char)*v)) v++;
        if (*v && strchr("kKmMgGtT", *v)) v++;
    }
    while (isspace((unsigned char)*v)) v++;
    return !*v;
}

static void describe_omp_wait(struct tr_bench_report *rep) {
    const char *pol = getenv("OMP_WAIT_POLICY"), *spin = getenv("GOMP_SPINCOUNT");
    if (pol && !*pol) pol = NULL;
    if (spin && !*spin) spin = NULL;
    const char *bad_pol = pol && !omp_policy_ok(pol) ? pol : NULL, *bad_spin = spin && !omp_spin_ok(spin) ? spin : NULL;
    if (bad_pol) pol = NULL; /* libgomp's default then, and the report says the value was not taken */
    if (bad_spin) spin = NULL;
    if ((bad_pol || bad_spin) && !spin && !pol)
        snprintf(rep->omp_wait, sizeof rep->omp_wait, "libgomp default (%s=%.8s is invalid)",
                 bad_spin ? "GOMP_SPINCOUNT" : "OMP_WAIT_POLICY", bad_spin ? bad_spin : bad_pol);
    else if (spin)
        snprintf(rep->omp_wait, sizeof rep->omp_wait, "spin %.16s (GOMP_SPINCOUNT)%s%.16s", spin,
                 pol ? ", OMP_WAIT_POLICY=" : "", pol ? pol : "");
    else if (pol) snprintf(rep->omp_wait, sizeof rep->omp_wait, "%.32s", pol);
    else snprintf(rep->omp_wait, sizeof rep->omp_wait, "libgomp default (spin 300000)");
    /* The program's mark is "NAME=VALUE" of the one variable it set; it counts only while
     * that variable still holds that value. */
    const char *mark = getenv(TR_BENCH_OMP_WAIT_MARK), *eq = mark ? strchr(mark, '=') : NULL;
    int by_trident = 0;
    if (eq && eq > mark && eq - mark < 32) {
        char name[32];
        memcpy(name, mark, (size_t)(eq - mark));
        name[eq - mark] = '\0';
        const char *now = getenv(name);
        by_trident = now && strcmp(now, eq + 1) == 0 && (strcmp(name, "OMP_WAIT_POLICY") ? !pol : !spin);
    }
    snprintf(rep->omp_wait_by, sizeof rep->omp_wait_by, "%s",
             by_trident ? "trident" : (pol || spin || bad_pol || bad_spin) ? "environment" : "none");
}

int tr_bench_host_info(struct tr_bench_report *rep, struct tr_error *err) {
    int rc = tr_kernels_cpu_info(&rep->cpu, err);
    if (rc) return tr_error_prefix(err, "the host's cpu");
    rep->threads = rep->cpu.threads;
    describe_omp_wait(rep);
    return TR_OK;
}

/* How far two backends' outputs may be apart. Each backend is held to the dtype's
 * tolerance against the exact answer by the kernel and model tests (f32 1e-4, bf16 1e-2
 * against float64 and Hugging Face); at bf16, f16 and tf32 two backends that are each
 * that close can differ by twice as much, and do: bf16 BERT small's logits differ by
 * 1.04e-2 between torch eager (every op's result rounded to bf16, as PyTorch eager does)
 * and jax (one rounding per fused kernel). f32 keeps 1e-4 between backends: their
 * differences are ~1e-7, and a looser bound would only hide a wrong kernel. */
double tr_bench_tolerance(const struct tr_config *cfg) {
    if (cfg->tolerance > 0) return cfg->tolerance;
    if (cfg->math == TR_MATH_TF32) return 2e-2; /* tf32 GEMMs keep 10 mantissa bits, as bf16 */
    return cfg->dtype == TR_DTYPE_F32 ? 1e-4 : cfg->dtype == TR_DTYPE_F64 ? 1e-10 : 2e-2;
}

void tr_bench_reference_set(const struct tr_config *cfg, struct tr_bench_report *rep) {
    const int own = cfg->reference_tolerance > 0;
    snprintf(rep->reference, sizeof rep->reference, "%s", cfg->reference);
    rep->reference_tolerance = own ? cfg->reference_tolerance : rep->tolerance;
    snprintf(rep->reference_why, sizeof rep->reference_why, "%s", own ? "[run] reference_tolerance" : rep->tolerance_why);
}

/* A sampler's trajectory (a graph generate: stable_diffusion's N UNet runs, each one's
 * output the next one's input, then the decoder) carries every step's rounding into the
 * next, and DDIM's x0 = (x - sqrt(1-a) eps) / sqrt(a) multiplies it where a is small: in
 * bf16, diffusers' own pipeline ends 1.6e-2 to 1.1e-1 from float64 on the pipelines
 * tests/fixtures/make_sd_reference.py --dtype bf16 draws (4 steps), and trident's backends
 * 2.4e-2 to 5.1e-2 from each other on the tiny and small presets at 2 to 25 steps. The
 * bf16 and f16 bound of such a run is 1e-1: a wrong kernel still lands at O(1), and the
 * f32 run (1e-4 between backends) is the precise check. A deep network's predict may
 * state its own bf16 bound (tr_model_desc.bf16_tolerance), measured the same way: its
 * reference library's bf16 output against float64, and trident's backends' against
 * each other; a one-graph generate takes it where it is the larger (SAM's on a photo is
 * one predict pass, its masks brought to the photo's size). */
static double run_tolerance(const struct tr_config *cfg, const struct tr_task_graph *tg, char *why, size_t n) {
    const double tol = tr_bench_tolerance(cfg);
    const struct tr_model_desc *m = tg->model;
    const int graph_generate = tg->opts.task == TR_TASK_GENERATE && !m->generate;
    const int sampler = graph_generate && !m->generate_one_pass;
    const int own = cfg->dtype == TR_DTYPE_BF16 && m->bf16_tolerance > tol && m->bf16_why;
    if (cfg->tolerance > 0) snprintf(why, n, "[run] tolerance");
    else if (sampler && tol > 1e-4 && tol < 1e-1 && !(own && m->bf16_tolerance > 1e-1)) {
        snprintf(why, n, "%s over a sampler's denoising steps", tr_config_math_name(cfg));
        return 1e-1;
    } else if ((tg->opts.task == TR_TASK_PREDICT || graph_generate) && own) { /* a one-graph generate: the larger */
        snprintf(why, n, "bf16 through %s", m->bf16_why);
        return m->bf16_tolerance;
    } else snprintf(why, n, "the %s tolerance", tr_config_math_name(cfg));
    return tol;
}

/* Before any weight is made: the params (and optimizer state), the inputs, the reference
 * and result copies of the outputs, and the activations at their peak (tr_graph_peak_bytes:
 * what a planned executor holds; one backend runs at a time), against MemAvailable on the
 * cpu; on cuda said only (no device to ask yet; the backend allocates and refuses). */
static int check_memory(const struct tr_config *cfg, const struct tr_task_graph *tg, uint64_t params,
                        int n_backends, struct tr_error *err) {
    const struct tr_graph *g = tg->graph;
    uint64_t io = 0;
    for (int i = 0; i < tr_graph_n_inputs(g); i++) {
        struct tr_tensor t = tr_node_tensor(g, tr_graph_input(g, i));
        io += tr_tensor_nbytes(&t);
    }
    for (int i = 0; i < tr_graph_n_outputs(g); i++) {
        struct tr_tensor t = tr_node_tensor(g, tr_graph_output(g, i));
        io += (uint64_t)n_backends * tr_tensor_nbytes(&t); /* each backend's outputs are kept */
    }
    const uint64_t act = tr_graph_peak_bytes(g);
    if (act == UINT64_MAX) /* it could not allocate its own bookkeeping: the sum would wrap */
        return tr_error_set(err, TR_ERR_NOMEM, "%s: out of host memory estimating the activations' peak", cfg->file);
    /* data parallel: the graph is one rank's share, and the ranks on this host (Open MPI's
     * OMPI_COMM_WORLD_LOCAL_SIZE, MPICH's MPI_LOCALNRANKS) each hold one */
    const char *ls = cfg->ranks > 1 ? getenv("OMPI_COMM_WORLD_LOCAL_SIZE") : NULL;
    if (cfg->ranks > 1 && !ls) ls = getenv("MPI_LOCALNRANKS");
    const long local = ls && atol(ls) > 0 ? atol(ls) : 1;
    const uint64_t one = params + io + act, need = one * (uint64_t)local;
    uint64_t avail = 0;
    int rc = tr_host_mem_available(&avail, err);
    if (rc) return rc;
    char h[5][32], share[96] = "";
    const int on_cpu = cfg->device_type == TR_DEVICE_CPU;
    if (cfg->ranks > 1)
        snprintf(share, sizeof share, " (%lld a rank: %s each, %ld rank%s on this host)",
                 (long long)(cfg->batch / cfg->ranks), tr_bench_bytes_str(one, h[4], 32), local, local == 1 ? "" : "s");
    if (cfg->rank == 0)
        fprintf(stderr, "trident: batch %lld%s needs about %s of %s memory (parameters %s, activations at their peak %s); %s%s\n",
            (long long)cfg->batch, share, tr_bench_bytes_str(need, h[0], 32), on_cpu ? "host" : "device",
            tr_bench_bytes_str(params, h[1], 32), tr_bench_bytes_str(act, h[2], 32),
            on_cpu ? tr_bench_bytes_str(avail, h[3], 32) : "the device's own is checked by the backend",
            on_cpu ? " available" : "");
    if (on_cpu && need > avail)
        return tr_error_set(err, TR_ERR_NOMEM,
                            "%s: %s/%s %s at batch %lld does not fit: it needs about %llu bytes (%.2f GiB: parameters "
                            "%.2f, inputs and outputs %.2f, activations at their peak %.2f) and %llu bytes (%.2f GiB) "
                            "are available (MemAvailable); lower [run] batch or take a smaller preset",
                            cfg->file, cfg->model, cfg->preset, cfg->task, (long long)cfg->batch,
                            (unsigned long long)need, (double)need / 1073741824.0, (double)params / 1073741824.0,
                            (double)io / 1073741824.0, (double)act / 1073741824.0, (unsigned long long)avail,
                            (double)avail / 1073741824.0);
    return TR_OK;
}

/* The device check's answer, in memory shared with the child that asks. */
struct device_probe {
    int device_type, device_index;
    struct tr_error err;
    char name[128];
};

static int device_probe_run(void *arg, int cmd) {
    (void)cmd;
    struct device_probe *p = arg;
    return tr_kernels_device_describe(p->device_type, p->device_index, p->name, sizeof p->name, &p->err);
}

/* Whether the run's device is there, and (not the cpu) its name into gpu[n], so that
 * every report says which card its figures come from. */
static int device_check(const struct tr_config *cfg, int isolate, char *gpu, size_t n, struct tr_error *err) {
    if (cfg->device_type == TR_DEVICE_CPU) return tr_kernels_device_available(cfg->device_type, err);
    struct device_probe local, *p = isolate ? tr_shared_alloc(sizeof *p, err) : &local;
    if (!p) return err->status;
    memset(p, 0, sizeof *p);
    p->device_type = cfg->device_type;
    p->device_index = cfg->device_index;
    int status = TR_OK, rc;
    if (isolate) {
        rc = tr_child_once(device_probe_run, p, 'D', cfg->backend_timeout, "the device check", &status, err);
        if (!rc && status) *err = p->err, rc = status;
    } else if ((rc = device_probe_run(p, 'D')) != TR_OK) {
        *err = p->err;
    }
    if (!rc) snprintf(gpu, n, "%s", p->name);
    if (isolate) tr_shared_free(p, sizeof *p);
    return rc;
}

/* generate in a child (tr_child_once): the report and the error in shared memory, so the
 * rows a crashed child finished survive it, and the row it was running says why. */
struct gen_child {
    const struct tr_config *cfg;
    struct tr_task_graph *tg;
    const struct tr_bench_opts *o;
    struct gen_shared {
        struct tr_bench_report rep;
        struct tr_error err;
    } *sh;
};

static int gen_child_run(void *arg, int cmd) {
    (void)cmd;
    struct gen_child *g = arg;
    const int rc = tr_generate_bench(g->cfg, g->tg, g->o, &g->sh->rep, &g->sh->err);
    fflush(NULL);
    return rc;
}

static int generate_in_child(const struct tr_config *cfg, struct tr_task_graph *tg, const struct tr_bench_opts *o,
                             struct tr_bench_report *rep, struct tr_error *err) {
    struct gen_shared *sh = tr_shared_alloc(sizeof *sh, err);
    if (!sh) return err ? err->status : TR_ERR_NOMEM;
    sh->rep = *rep;
    struct gen_child g = {.cfg = cfg, .tg = tg, .o = o, .sh = sh};
    fflush(NULL); /* or the child would print the parent's buffered lines again */
    const double timeout = cfg->backend_timeout * (double)(cfg->n_backends * (cfg->warmup + cfg->steps + 2));
    int status = TR_OK;
    int rc = tr_child_once(gen_child_run, &g, 1, timeout, "generate", &status, err);
    *rep = sh->rep;
    if (rc == TR_OK) {
        rc = status;
        if (rc && err) *err = sh->err;
    } else if (rep->n_rows > 0 && !rep->rows[rep->n_rows - 1].ok && !rep->rows[rep->n_rows - 1].error[0]) {
        /* the row it was running: the backend's process died there */
        struct tr_bench_row *row = &rep->rows[rep->n_rows - 1];
        snprintf(row->error, sizeof row->error, "%.900s", err ? err->msg : "the backends' process died");
        tr_error_prefix(err, "'%s'", row->label);
    }
    tr_shared_free(sh, sizeof *sh);
    return rc;
}

int tr_bench_run(const struct tr_config *cfg, const struct tr_model_desc *const *models,
                 struct tr_bench_report *rep, struct tr_error *err) {
    return tr_bench_run_opts(cfg, models, NULL, rep, err);
}

static int bench_run(const struct tr_config *cfg, const struct tr_model_desc *const *models,
                     const struct tr_bench_opts *o, struct tr_bench_report *rep, int *gated, struct tr_error *err);

int tr_bench_run_opts(const struct tr_config *cfg, const struct tr_model_desc *const *models,
                      const struct tr_bench_opts *o, struct tr_bench_report *rep, struct tr_error *err) {
    int gated = 0;
    int rc = bench_run(cfg, models, o, rep, &gated, err);
    /* data parallel: a rank whose setup failed still meets the others at their first
     * collective, which then stops them all (tr_dp_gate) */
    if (rc && !gated && o && o->comm && o->comm->size > 1) tr_dp_gate(o->comm, cfg, NULL, rc, err);
    return rc;
}

static int bench_run(const struct tr_config *cfg, const struct tr_model_desc *const *models,
                     const struct tr_bench_opts *o, struct tr_bench_report *rep, int *gated, struct tr_error *err) {
    static const struct tr_bench_opts none;
    if (!o) o = &none;
    memset(rep, 0, sizeof *rep);
    snprintf(rep->weights, sizeof rep->weights, "%s", cfg->weights);
    snprintf(rep->model, sizeof rep->model, "%s", cfg->model);
    tr_config_preset_label(cfg, rep->preset, sizeof rep->preset);
    snprintf(rep->task, sizeof rep->task, "%s", cfg->task);
    snprintf(rep->device, sizeof rep->device, "%s", cfg->device);
    snprintf(rep->dtype, sizeof rep->dtype, "%s", tr_dtype_name(cfg->dtype));
    snprintf(rep->math, sizeof rep->math, "%s", tr_config_math_name(cfg));
    rep->batch = cfg->batch;
    rep->seq_len = cfg->seq_len;
    rep->steps = cfg->steps;
    rep->warmup = cfg->warmup;
    rep->seed = cfg->seed;
    rep->tolerance = tr_bench_tolerance(cfg);
    snprintf(rep->tolerance_why, sizeof rep->tolerance_why, "the %s tolerance", tr_config_math_name(cfg));
    int rc = tr_bench_host_info(rep, err);
    if (rc) return rc;
    /* The caller applies [run] threads (core does not link OpenMP); a report that said N
     * threads while the kernels ran with another count would mislead. */
    if (cfg->threads_line && rep->threads != cfg->threads)
        return tr_error_set(err, TR_ERR_INVALID,
                            "%s:%d: [run] threads = %d, but OpenMP gives the kernels %d: the program running the "
                            "task applies it with omp_set_num_threads before tr_bench_run (trident run does)",
                            cfg->file, cfg->threads_line, cfg->threads, rep->threads);

    if (cfg->n_backends < 1) return tr_error_set(err, TR_ERR_INVALID, "%s: [run] backends: none listed", cfg->file);
    struct tr_task_graph tg;
    rc = tr_task_graph_build(cfg, models, &tg, err);
    if (rc) return rc;
    rep->tolerance = run_tolerance(cfg, &tg, rep->tolerance_why, sizeof rep->tolerance_why);
    /* What the model is fed (the seq_len key means nothing to an image model). */
    if (tr_graph_n_inputs(tg.graph) > 0) {
        int id = tr_graph_input(tg.graph, 0);
        char sh[80];
        snprintf(rep->input, sizeof rep->input, "%s %s", tr_node_name(tg.graph, id),
                 tr_shape_str(tr_node_ndim(tg.graph, id), tr_node_shape(tg.graph, id), sh, sizeof sh));
    }
    /* generate: the model's params are its weights graph's (the passes' hold the KV cache too) */
    /* token generation (the model's tr_generate_i) runs two passes; any other task one graph */
    const int token_gen = tg.opts.task == TR_TASK_GENERATE && tg.model->generate;
    struct tr_graph *g = token_gen ? tg.gen.weights : tg.graph;
    /* The model's own params come first; fit appends its optimizer states and masters
     * (n_updated - n_trained of them), which are state, not parameters. */
    int n_model = tr_graph_n_params(g);
    if (tg.opts.task == TR_TASK_FIT) n_model -= tg.train.n_updated - tg.train.n_trained;
    uint64_t state_bytes = 0, trained = 0;
    for (int i = 0; i < tr_graph_n_params(g); i++) {
        struct tr_tensor t = tr_node_tensor(g, tr_graph_param(g, i));
        if (i < n_model) {
            rep->param_count += (uint64_t)tr_tensor_numel(&t);
            rep->param_bytes += tr_tensor_nbytes(&t);
        } else {
            state_bytes += tr_tensor_nbytes(&t);
        }
    }
    for (int i = 0; i < tg.train.n_trained && tg.opts.task == TR_TASK_FIT; i++) {
        struct tr_tensor t = tr_node_tensor(g, tg.train.trained[i]);
        trained += (uint64_t)tr_tensor_numel(&t);
    }
    /* Said before the weights are made, so a size that cannot fit is known at once. */
    char size[64], state[64];
    if (cfg->rank == 0) { /* data parallel: rank 0 speaks for the run */
        fprintf(stderr, "trident: %s/%s: %llu parameters, %s in %s", cfg->model, rep->preset,
                (unsigned long long)rep->param_count, tr_bench_bytes_str(rep->param_bytes, size, sizeof size),
                tr_dtype_name(cfg->dtype));
        if (tg.opts.task == TR_TASK_FIT)
            fprintf(stderr, "; fit trains %llu of them, with %s of optimizer state and master copies",
                    (unsigned long long)trained, tr_bench_bytes_str(state_bytes, state, sizeof state));
        fputc('\n', stderr);
    }
    if (!token_gen) {
        rc = check_memory(cfg, &tg, rep->param_bytes + state_bytes, cfg->n_backends, err);
        if (rc) {
            tr_task_graph_free(&tg);
            return rc;
        }
    }
    /* Each backend in a child process, when this one can fork: one thread so far (core
     * starts none; the kernels' OpenMP pool would not survive in a child). Generate's
     * backends run in this process. */
    int n_threads = 0;
    const int parallel = tr_config_data_parallel(cfg);
    rep->ranks = cfg->ranks > 1 ? cfg->ranks : 1;
    rep->parallel = parallel;
    rep->check_every = cfg->check_every;
    rep->bucket_mb = cfg->bucket_mb;
    const int isolate = cfg->isolate && !token_gen && !parallel && tr_fork_safe(&n_threads);
    /* generate: its backends one after another in one child (a token's host loop between
     * passes is the runner's own), so a backend that crashes costs the run, not trident,
     * and a suite's later rows can still fork */
    const int gen_child = token_gen && cfg->isolate && tr_fork_safe(&n_threads);
    if (isolate) snprintf(rep->isolation, sizeof rep->isolation, "each in its own process");
    else if (gen_child) snprintf(rep->isolation, sizeof rep->isolation, "in one child process, one after another (generate)");
    else if (parallel)
        snprintf(rep->isolation, sizeof rep->isolation, "in one process per rank (MPI does not survive a fork)");
    else if (!cfg->isolate) snprintf(rep->isolation, sizeof rep->isolation, "in one process ([run] isolate = off)");
    else if (token_gen) snprintf(rep->isolation, sizeof rep->isolation, "in one process (generate)");
    else snprintf(rep->isolation, sizeof rep->isolation, "in one process (it had %d threads: fork copies one)",
                  n_threads);
    /* After the size line: a user without the device still learns what the run needs.
     * Isolated, asked in a child: on cuda this process must not touch the device before
     * its children do (a CUDA context does not survive fork). */
    char where_dev[TR_CONFIG_PATH + 96];
    if ((rc = device_check(cfg, isolate || gen_child, rep->gpu, sizeof rep->gpu, err)) != TR_OK) {
        tr_task_graph_free(&tg);
        return tr_error_prefix(err, "%s = %s", tr_config_where(cfg, "device", tr_config_run_line(cfg, "device"), where_dev,
                                                  sizeof where_dev), cfg->device);
    }
    struct tr_error *dead = NULL; /* [b]: the backend's process died in the check before the run */
    struct tr_bench_guard guard = {0};
    {
        const struct tr_graph *graphs[2] = {token_gen ? tg.gen.prefill : tg.graph, tg.gen.decode};
        /* isolated predict and fit: a backend whose process dies in the check fails its
         * row and the others run (generate's backends share one child: it stops there) */
        if (isolate && !(dead = calloc((size_t)cfg->n_backends, sizeof *dead))) {
            tr_task_graph_free(&tg);
            return tr_error_set(err, TR_ERR_NOMEM, "bench: out of memory");
        }
        if ((rc = tr_bench_preflight(cfg, graphs, token_gen ? 2 : 1, o, isolate || gen_child, dead, err)) != TR_OK) {
            free(dead);
            tr_task_graph_free(&tg);
            return rc;
        }
    }
    if (token_gen) {
        rc = gen_child ? generate_in_child(cfg, &tg, o, rep, err) : tr_generate_bench(cfg, &tg, o, rep, err);
        tr_task_graph_free(&tg);
        return rc;
    }
    struct tr_weights *w = NULL;
    struct tr_dp dp;
    if ((rc = tr_dp_begin(&dp, cfg, o->comm, tg.graph, err)) != TR_OK) {
        free(dead);
        tr_task_graph_free(&tg);
        return rc;
    }
    struct fit_state fs = {.on = tg.opts.task == TR_TASK_FIT, .tg = &tg};
    struct tr_tensor *in = NULL;
    struct slot slots[TR_BENCH_MAX_ROWS];
    struct tr_bench_reference refile = {0};
    struct tr_bench_outputs outs = {0};
    struct tr_progress pr;
    memset(slots, 0, sizeof slots);
    int n_in = tr_graph_n_inputs(g), n_out = tr_graph_n_outputs(g);
    rep->n_nodes = tr_graph_n_nodes(g);
    rep->flops_per_step = tr_graph_flops(g);
    tr_progress_init(&pr, cfg);

    if ((rc = tr_bench_reference_open(cfg, g, &refile, err)) != TR_OK) goto done;
    const struct tr_weights_load_opts wo = {.seed = cfg->seed, .missing_seed = cfg->missing_seed,
                                            .variant = cfg->weights_variant,
                                            .skip = {cfg->inputs, cfg->reference, o ? o->outputs : NULL}};
    rc = tr_bench_weights(cfg, g, &wo, &w, err);
    if (!rc && cfg->weights[0] && cfg->rank == 0) { /* every rank read the same file */
        tr_weights_warn_seeded(w, cfg->weights, cfg->seed, stderr);
        tr_weights_warn_unused(w, stderr);
    }
    if (rc) goto done;
    rc = tr_bench_io_alloc(g, n_in, tr_graph_input, &in, err);
    if (rc) goto done;
    if (dp.on) rc = tr_dp_shard_inputs(cfg, models, &tg, in, err);
    else rc = cfg->inputs[0] ? tr_bench_inputs_load(cfg, g, tg.n_model_inputs, in, err)
                             : tg.model->make_inputs(tg.config, &tg.opts, cfg->seed, tg.n_model_inputs, in, err);
    if (rc) goto done;
    const int64_t total_steps = cfg->warmup + cfg->steps;
    if (fs.on) {
        /* the state every backend starts from: masters from their params, then a copy */
        rc = tr_train_init_masters(g, &tg.train, err);
        if (rc) goto done;
        fs.n = tr_graph_n_updates(g);
        fs.snap = calloc((size_t)fs.n + 1, sizeof *fs.snap);
        fs.nbytes = calloc((size_t)fs.n + 1, sizeof *fs.nbytes);
        if (!fs.snap || !fs.nbytes) {
            rc = tr_error_set(err, TR_ERR_NOMEM, "fit: out of memory");
            goto done;
        }
        for (int u = 0; u < fs.n; u++) {
            struct tr_tensor t = tr_node_tensor(g, tr_graph_update_param(g, u));
            fs.nbytes[u] = tr_tensor_nbytes(&t);
            if ((rc = tr_host_alloc(&fs.snap[u], fs.nbytes[u], err)) != TR_OK) goto done;
            memcpy(fs.snap[u], tr_node_data(g, tr_graph_update_param(g, u)), fs.nbytes[u]);
        }
        for (int i = 0; i < n_in; i++) {
            int id = tr_graph_input(g, i);
            if (id == tg.train.lr) fs.lr = in[i].data;
            if (id == tg.train.step) fs.step = in[i].data;
            if (id == tg.train.dp_share) fs.dp_share = in[i].data;
        }
        *fs.lr = (float)tg.train_cfg.learning_rate;
        *fs.step = 1.0f;
    }
    if (dp.on) { /* every rank ready and alike: the first collective (a failure before it meets it in tr_bench_run_opts) */
        *gated = 1;
        if ((rc = tr_dp_gate(dp.comm, cfg, g, TR_OK, err)) != TR_OK) goto done;
    }
    if (fs.dp_share && (rc = tr_dp_loss_share(&dp, &tg, in, fs.dp_share, err)) != TR_OK) goto done;
    struct run r = {.cfg = cfg, .g = g, .fs = &fs, .n_in = n_in, .n_out = n_out, .in = in, .pr = &pr, .dp = &dp,
                    .isolate = isolate};
    if (!isolate) {
        if ((rc = tr_bench_guard_init(&guard, g, err)) != TR_OK) goto done;
        r.guard = &guard;
    }
    for (int b = 0; b < cfg->n_backends; b++) {
        struct slot *sl = &slots[b];
        sl->cb = &cfg->backends[b];
        sl->r = &r;
        rep->n_rows++;
        if ((rc = slot_alloc(sl, g, n_out, cfg->steps, fs.on ? total_steps : 0, err)) != TR_OK) goto done;
        tr_bench_label(cfg, b, sl->row->label, sizeof sl->row->label);
        { /* the file, also for a row that never starts (a run stopped before it) */
            const struct tr_plugin_search ps = {.ini_dir = cfg->plugin_path[0] ? cfg->plugin_path : NULL};
            struct tr_error le = {0};
            tr_plugin_locate(sl->cb->path[0] ? sl->cb->path : sl->cb->name, &ps, sl->row->plugin_path,
                             sizeof sl->row->plugin_path, &le);
        }
        if (dead && dead[b].msg[0]) {
            sl->sh->err = dead[b];
            sl->dead = 1;
            slot_fail(sl, dead[b].status);
        }
    }
    const int interleaved = cfg->schedule == TR_SCHEDULE_INTERLEAVED ||
                            (cfg->schedule == TR_SCHEDULE_DEFAULT && !fs.on && cfg->device_type == TR_DEVICE_CPU &&
                             cfg->n_backends > 1);
    snprintf(rep->schedule, sizeof rep->schedule, "%s", interleaved ? "interleaved" : "sequential");
    if (interleaved) run_interleaved(&r, slots, cfg->n_backends, rep);
    else run_sequential(&r, slots, cfg->n_backends);
    for (int b = 0; b < cfg->n_backends; b++) {
        rep->rows[b] = *slots[b].row;
        slots[b].row = &rep->rows[b]; /* the verdict below writes the report's rows */
    }
    rep->interrupted = tr_bench_stop_requested() || dp.stop;

    int have_ref = 0, failures = 0, disagreements = 0;
    tr_bench_reference_set(cfg, rep);
    const char *ref_why = rep->reference_why;
    const double ref_tol = rep->reference_tolerance;
    const struct slot *rs = NULL;
    for (int b = 0; b < cfg->n_backends; b++) {
        struct slot *sl = &slots[b];
        struct tr_bench_row *row = sl->row;
        if (!row->ok) {
            if (!sl->sh->err.msg[0]) {
                tr_error_set(&sl->sh->err, TR_ERR_INTERRUPTED, "interrupted before it started");
                slot_fail(sl, TR_ERR_INTERRUPTED);
            }
            failures += sl->sh->err.status != TR_ERR_INTERRUPTED;
            continue;
        }
        if (refile.st)
            tr_bench_reference_compare(&refile, g, n_out, sl->out, sl->losses, sl->sh->n_steps, ref_tol, row);
        if (!have_ref) {
            have_ref = 1;
            row->agrees = 1;
            row->is_reference = 1;
            rs = sl;
            continue;
        }
        row->max_rel_diff = 0;
        /* fit: every step's loss (the row keeps the first few for the reports) */
        for (int64_t i = 0; fs.on && i < sl->sh->n_steps && i < rs->sh->n_steps; i++) {
            double a = sl->losses[i], b2 = rs->losses[i];
            double d = fabs(a - b2) / (fabs(b2) > 0 ? fabs(b2) : 1.0);
            if (!(d <= row->max_rel_diff)) {
                row->max_rel_diff = d;
                snprintf(row->worst_output, sizeof row->worst_output, "loss of step %lld", (long long)i + 1);
            }
        }
        for (int i = 0; !fs.on && i < n_out; i++) {
            double d = tr_bench_rel_diff(&sl->out[i], &rs->out[i]);
            if (!(d <= row->max_rel_diff)) {
                row->max_rel_diff = d;
                snprintf(row->worst_output, sizeof row->worst_output, "%s", tr_graph_output_name(g, i));
            }
        }
        row->agrees = row->max_rel_diff <= rep->tolerance;
        if (!row->agrees) disagreements++;
    }
    const struct tr_bench_row *bad;
    rc = tr_bench_verdict(rep, failures, disagreements, &bad, err);
    tr_bench_note_same_rows(rep, stderr);
    if (bad)
        rc = tr_error_set(err, TR_ERR_NUMERIC,
                          "%d of %d backends disagree with '%s'; '%s' differs by %.2e in output '%s' "
                          "(%s is %s)",
                          disagreements, rep->n_rows, tr_bench_reference_label(rep), bad->label, bad->max_rel_diff,
                          bad->worst_output, rep->tolerance_why, tr_tol_str(rep->tolerance, (char[32]){0}, 32));
    for (int b = 0; !rc && refile.st && b < rep->n_rows; b++)
        if (rep->rows[b].ok && !rep->rows[b].ref_agrees) {
            rep->all_ok = 0;
            rc = tr_error_set(err, TR_ERR_NUMERIC, "%s:%d: [run] reference = %s: '%s' differs from it: %s (%s is "
                              "%s)", cfg->file, cfg->reference_line, cfg->reference, rep->rows[b].label,
                              rep->rows[b].ref_worst, ref_why, tr_tol_str(ref_tol, (char[32]){0}, 32));
        }
    if (rs && tg.image[0]) { /* the reference backend's pictures */
        int k = -1;
        for (int i = 0; i < n_out; i++)
            if (strcmp(tr_graph_output_name(g, i), "image") == 0) k = i;
        const int own = tg.model->write_image != NULL;
        int irc = own ? tg.model->write_image(tg.config, tg.image, g, rs->out, err)
                  : k < 0 ? tr_error_set(err, TR_ERR_INVALID, "%s: [generate] image: model '%s' has no output 'image'",
                                         cfg->file, cfg->model)
                          : tr_image_write_png(tg.image, &rs->out[k], err);
        if (irc) rc = irc;
        else fprintf(stderr, "trident: wrote %s (%s's %s)\n", tg.image, tr_bench_reference_label(rep),
                     own ? "outputs" : "output 'image'");
    }
    if (o->outputs) {
        int orc = TR_OK;
        for (int b = 0; b < cfg->n_backends && !orc; b++) {
            const struct slot *sl = &slots[b];
            if (!sl->sh->n_steps) continue;
            for (int i = 0; i < n_out && !orc; i++) {
                const char *name = tr_graph_output_name(g, i);
                if (fs.on && strcmp(name, "loss") == 0) continue; /* the series below */
                orc = tr_bench_outputs_add(&outs, sl->row->label, name, &sl->out[i], err);
            }
            if (fs.on && !orc) {
                struct tr_tensor t = {.dtype = TR_DTYPE_F64, .ndim = 1, .shape = {sl->sh->n_steps}, .strides = {1},
                                      .data = sl->losses};
                orc = tr_bench_outputs_add(&outs, sl->row->label, "loss", &t, err);
            }
        }
        if (!orc) orc = tr_bench_outputs_write(&outs, o->outputs, err);
        if (orc) rc = orc;
        else fprintf(stderr, "trident: wrote %s (%d tensors: every backend's outputs%s)\n", o->outputs, outs.n,
                     fs.on ? ", each step's loss" : "");
    }
    if (rep->interrupted && (rc == TR_OK || rc == TR_ERR_PLUGIN)) {
        int ran = 0;
        for (int b = 0; b < rep->n_rows; b++) ran += rep->rows[b].ok && rep->rows[b].steps_run > 0;
        rc = ran ? tr_error_set(err, TR_ERR_INTERRUPTED, "interrupted (Ctrl-C): %d of %d backends took timed steps, "
                                "and each one's figures are over the steps it took", ran, rep->n_rows)
                 : tr_error_set(err, TR_ERR_INTERRUPTED, "interrupted (Ctrl-C) before any backend's timed steps");
    }
done:
    free(dead);
    tr_bench_guard_free(&guard);
    tr_progress_end(&pr);
    for (int b = 0; b < TR_BENCH_MAX_ROWS; b++) slot_free(&slots[b]);
    for (int u = 0; fs.snap && u < fs.n; u++) tr_host_free(fs.snap[u]);
    free(fs.snap);
    free(fs.nbytes);
    tr_bench_io_free(in, n_in);
    tr_bench_outputs_free(&outs);
    tr_bench_reference_close(&refile);
    tr_weights_free(w);
    tr_dp_end(&dp);
    tr_task_graph_free(&tg);
    return rc;
}
