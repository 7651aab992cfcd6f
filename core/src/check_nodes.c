/* `--check nodes` (check_nodes.h): one step of each backend with every computed node an
 * output, each value compared with the reference backend's.
 *
 * The backends run one after another in this process, unlike a benchmark run's children:
 * one step is all there is to time out, and a crash in a debugging run is itself the
 * answer. The reference's values stay on the host; each other backend's are compared as
 * soon as its step ends and then dropped, so the host holds two copies, not one per
 * backend. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "trident/bench.h"
#include "trident/check_nodes.h"
#include "trident/generate.h"
#include "trident/kernels.h"
#include "trident/loader.h"
#include "trident/weights.h"
#include "bench_io.h"
#include "bench_preflight.h"
#include "bench_util.h"

static int is_leaf(int op) { return op == TR_OP_INPUT || op == TR_OP_PARAM || op == TR_OP_CONST; }

int tr_check_nodes_mark(struct tr_graph *g, int *n_added, struct tr_error *err) {
    if (n_added) *n_added = 0;
    int rc = tr_graph_status(g, err);
    if (rc) return rc;
    const int n = tr_graph_n_nodes(g), n_out = tr_graph_n_outputs(g);
    char *is_out = calloc((size_t)(n ? n : 1), 1);
    if (!is_out) return tr_error_set(err, TR_ERR_NOMEM, "check nodes: out of memory for %d nodes", n);
    /* Refused up front: tr_graph_set_output would refuse a taken name too, but by then
     * the graph is dead (its errors are sticky). */
    for (int i = 0; i < n_out; i++) {
        is_out[tr_graph_output(g, i)] = 1;
        const char *name = tr_graph_output_name(g, i);
        /* "#ID" of node ID is this function's own (a second call adds nothing) */
        if (name[0] == '#' && name[1] && strspn(name + 1, "0123456789") == strlen(name + 1) &&
            atol(name + 1) != tr_graph_output(g, i)) {
            free(is_out);
            return tr_error_set(err, TR_ERR_INVALID, "check nodes: the graph has an output named '%s' (node %d), a "
                                "name this check gives its own outputs (#ID)", name, tr_graph_output(g, i));
        }
    }
    int added = 0;
    for (int id = 0; id < n && !rc; id++) {
        if (is_out[id] || is_leaf(tr_node_op(g, id))) continue;
        char name[32];
        snprintf(name, sizeof name, "#%d", id);
        rc = tr_graph_set_output(g, id, name);
        added += rc == TR_OK;
    }
    free(is_out);
    if (rc) return tr_graph_status(g, err);
    if (n_added) *n_added = added;
    return TR_OK;
}

/* The root mean square of t's finite values (0 for none). */
static double rms(const struct tr_tensor *t) {
    const int64_t n = tr_tensor_numel(t);
    double sum = 0;
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = tr_tensor_get_f64(t, i);
        if (isfinite(x)) sum += x * x, k++;
    }
    return k ? sqrt(sum / (double)k) : 0.0;
}

/* How large node id's value could be without cancellation, as an RMS, from its inputs'
 * magnitudes mag[] (0: no floor, the op's own value is its scale). An exact zero that
 * the maths gives, such as the gradient of an attention key bias (softmax does not
 * change when every key moves by the same vector), comes out of each backend as roundoff
 * noise: ‖out − ref‖/‖ref‖ of two noises is about 1 whatever the kernels. Measured
 * against what the sum or product would be without the cancellation, that noise is the
 * dtype's epsilon, and a wrong kernel still shows. The sizes are those of sums of random
 * terms (√K of them), as the noise is: a floor no larger than the value an op without
 * cancellation gives, so the check keeps its strength there. Linear and shape ops only:
 * of the others nothing is known, and they are held to their own value. */
static double magnitude_floor(const struct tr_graph *g, int id, const double *mag) {
    const struct tr_attrs *at = tr_node_attrs(g, id);
    const int n_in = tr_node_n_inputs(g, id);
    const double a = n_in > 0 ? mag[tr_node_input(g, id, 0)] : 0, b = n_in > 1 ? mag[tr_node_input(g, id, 1)] : 0;
    switch (tr_node_op(g, id)) {
    case TR_OP_RESHAPE: case TR_OP_TRANSPOSE: case TR_OP_SLICE: case TR_OP_BROADCAST: case TR_OP_CAST:
    case TR_OP_NEG: case TR_OP_SLICE_GRAD: case TR_OP_MAX:
        return a; /* rms is unchanged by a broadcast, a copy or a sign */
    case TR_OP_CONCAT: {
        double m = 0;
        for (int j = 0; j < n_in; j++) m = fmax(m, mag[tr_node_input(g, id, j)]);
        return m;
    }
    case TR_OP_SCALE: return fabs(at->floats[0]) * a + fabs(at->floats[1]);
    case TR_OP_ADD: case TR_OP_SUB: return sqrt(a * a + b * b);
    case TR_OP_MUL: return a * b;
    case TR_OP_SUM: case TR_OP_MEAN: {
        const int src = tr_node_input(g, id, 0);
        const double len = (double)tr_node_shape(g, src)[at->ints[0]];
        return tr_node_op(g, id) == TR_OP_SUM ? sqrt(len) * a : a / sqrt(len);
    }
    case TR_OP_MATMUL: {
        const int src = tr_node_input(g, id, 0), nd = tr_node_ndim(g, src);
        const double k = (double)tr_node_shape(g, src)[at->ints[0] ? nd - 2 : nd - 1];
        return fabs(at->floats[0]) * sqrt(k) * a * b;
    }
    default: return 0;
    }
}

/* ‖a − ref‖ / max(‖ref‖, floor) (as RMS: the same ratio, and a floor needs no element
 * count). A place that is not finite in either counts as agreement only when both hold
 * the same thing there (a -inf mask value in both; a NaN in both is row->nonfinite's);
 * otherwise the difference is +inf. */
static double node_rel(const struct tr_tensor *a, const struct tr_tensor *ref, double floor) {
    const int64_t n = tr_tensor_numel(a);
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = tr_tensor_get_f64(a, i), y = tr_tensor_get_f64(ref, i);
        if (!isfinite(x) || !isfinite(y)) {
            if (x == y || (isnan(x) && isnan(y))) continue;
            return INFINITY;
        }
        num += (x - y) * (x - y);
        den += y * y;
    }
    if (n > 0) num /= (double)n, den /= (double)n;
    den = fmax(den, floor * floor);
    return den > 0 ? sqrt(num / den) : (num > 0 ? INFINITY : 0.0);
}

/* mag[id] for every node: a leaf's RMS (the same bytes for every backend), a computed
 * node's the larger of its reference value's RMS and its floor (magnitude_floor). */
static void magnitudes(const struct tr_graph *g, const int *node_out, const struct tr_tensor *ref,
                       const struct tr_tensor *in, double *mag) {
    const int n = tr_graph_n_nodes(g);
    for (int id = 0; id < n; id++) mag[id] = 0;
    for (int i = 0; i < tr_graph_n_inputs(g); i++) mag[tr_graph_input(g, i)] = rms(&in[i]);
    for (int id = 0; id < n; id++) {
        const int op = tr_node_op(g, id);
        if (op == TR_OP_PARAM || op == TR_OP_CONST) {
            struct tr_tensor t = tr_node_tensor(g, id);
            t.data = (void *)tr_node_data(g, id);
            if (t.data) mag[id] = rms(&t);
        } else if (op != TR_OP_INPUT && node_out[id] >= 0) {
            mag[id] = fmax(rms(&ref[node_out[id]]), magnitude_floor(g, id, mag));
        }
    }
}

static int has_nonfinite(const struct tr_tensor *t) {
    if (!tr_dtype_is_float((enum tr_dtype)t->dtype)) return 0;
    const int64_t n = tr_tensor_numel(t);
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(tr_tensor_get_f64(t, i))) return 1;
    return 0;
}

static void name_node(const struct tr_graph *g, int id, int compared, double rel, struct tr_check_node *out);

/* row->nonfinite: the first computed node whose value holds a NaN or an Inf. */
static void find_nonfinite(const struct tr_graph *g, const int *node_out, const struct tr_tensor *vals,
                           struct tr_check_nodes_row *row) {
    row->nonfinite.id = -1;
    for (int id = 0; id < tr_graph_n_nodes(g); id++)
        if (node_out[id] >= 0 && !is_leaf(tr_node_op(g, id)) && has_nonfinite(&vals[node_out[id]])) {
            name_node(g, id, 1, INFINITY, &row->nonfinite);
            return;
        }
}

static void name_node(const struct tr_graph *g, int id, int compared, double rel, struct tr_check_node *out) {
    out->id = id;
    out->op = tr_node_op(g, id);
    snprintf(out->name, sizeof out->name, "%s", tr_node_name(g, id));
    out->compared = compared;
    out->rel = rel;
}

/* fit: the updated params' bytes before any step, put back before each backend (a cpu
 * backend updates the host copies in place). */
struct fit_state {
    int n;
    void **snap;
    size_t *nbytes;
};

static int fit_save(const struct tr_graph *g, struct fit_state *fs, struct tr_error *err) {
    fs->n = tr_graph_n_updates(g);
    fs->snap = calloc((size_t)fs->n + 1, sizeof *fs->snap);
    fs->nbytes = calloc((size_t)fs->n + 1, sizeof *fs->nbytes);
    if (!fs->snap || !fs->nbytes) return tr_error_set(err, TR_ERR_NOMEM, "check nodes: fit: out of memory");
    for (int u = 0; u < fs->n; u++) {
        int p = tr_graph_update_param(g, u);
        struct tr_tensor t = tr_node_tensor(g, p);
        fs->nbytes[u] = tr_tensor_nbytes(&t);
        int rc = tr_host_alloc(&fs->snap[u], fs->nbytes[u], err);
        if (rc) return rc;
        memcpy(fs->snap[u], tr_node_data(g, p), fs->nbytes[u]);
    }
    return TR_OK;
}

static void fit_restore(const struct tr_graph *g, const struct fit_state *fs) {
    for (int u = 0; u < fs->n; u++)
        memcpy((void *)tr_node_data(g, tr_graph_update_param(g, u)), fs->snap[u], fs->nbytes[u]);
}

static void fit_free(struct fit_state *fs) {
    for (int u = 0; fs->snap && u < fs->n; u++) tr_host_free(fs->snap[u]);
    free(fs->snap);
    free(fs->nbytes);
}

/* Load, init (with the options a run gives), compile, one step into out (poisoned first:
 * an output the backend leaves unwritten reads NaN, or -1 for an integer). */
static int run_backend(const struct tr_config *cfg, const struct tr_config_backend *cb, const struct tr_graph *g,
                       int n_in, const struct tr_tensor *in, int n_out, struct tr_tensor *out,
                       struct tr_check_nodes_row *row, struct tr_error *err) {
    struct tr_plugin_search search = {.ini_dir = cfg->plugin_path[0] ? cfg->plugin_path : NULL, .env_path = NULL};
    struct tr_plugin *plugin = NULL;
    struct tr_backend *be = NULL;
    struct tr_program *prog = NULL;
    int rc = tr_plugin_open(cb->path[0] ? cb->path : cb->name, &search, &plugin, err);
    if (rc) return rc;
    snprintf(row->plugin_path, sizeof row->plugin_path, "%s", tr_plugin_path(plugin));
    struct tr_option opts[TR_CONFIG_MAX_KV + 1];
    struct tr_backend_params params;
    tr_bench_backend_params(cfg, cb, opts, &params);
    if ((rc = tr_backend_init(plugin, &params, &be, err)) == TR_OK &&
        (rc = tr_backend_compile(be, g, &prog, err)) == TR_OK) {
        for (int i = 0; i < n_out; i++) memset(out[i].data, 0xff, tr_tensor_nbytes(&out[i]));
        rc = tr_backend_execute(be, prog, n_in, in, n_out, out, err);
    }
    tr_program_free(prog);
    tr_backend_free(be);
    tr_plugin_close(plugin);
    return rc;
}

/* row from out against ref: node_out[id] is the first output of node id (-1: none). */
static void compare(const struct tr_graph *g, const int *node_out, const struct tr_tensor *out,
                    const struct tr_tensor *ref, const double *mag, double tol, double *rel,
                    struct tr_check_nodes_row *row) {
    const int n = tr_graph_n_nodes(g);
    row->first.id = -1;
    for (int id = 0; id < n; id++) {
        rel[id] = NAN;
        const int k = node_out[id];
        if (k < 0 || is_leaf(tr_node_op(g, id))) continue;
        const double d = node_rel(&out[k], &ref[k], magnitude_floor(g, id, mag));
        rel[id] = d;
        row->n_compared++;
        const int beyond = !(d <= tol);
        row->n_beyond += beyond;
        if (beyond && row->first.id < 0) name_node(g, id, 1, d, &row->first);
        /* the worst, largest first (+inf counts as largest) */
        int at = row->n_worst;
        while (at > 0 && !(row->worst[at - 1].rel >= d)) at--;
        if (at >= TR_CHECK_NODES_WORST) continue;
        int last = row->n_worst < TR_CHECK_NODES_WORST ? row->n_worst : TR_CHECK_NODES_WORST - 1;
        memmove(&row->worst[at + 1], &row->worst[at], sizeof row->worst[0] * (size_t)(last - at));
        name_node(g, id, 1, d, &row->worst[at]);
        if (row->n_worst < TR_CHECK_NODES_WORST) row->n_worst++;
    }
    if (row->first.id < 0) return;
    const int f = row->first.id;
    row->n_first_inputs = tr_node_n_inputs(g, f);
    for (int j = 0; j < row->n_first_inputs; j++) {
        int src = tr_node_input(g, f, j);
        name_node(g, src, !isnan(rel[src]), rel[src], &row->first_inputs[j]);
    }
}

/* Before any weight is made: the host's two copies of every value, the backend's own
 * copy of them (all alive at once now), the params and the inputs, against MemAvailable
 * on the cpu; said only on a device (the backend allocates and refuses). */
static int check_memory(const struct tr_config *cfg, const struct tr_graph *g, uint64_t values,
                        struct tr_error *err) {
    uint64_t io = tr_graph_param_bytes(g);
    for (int i = 0; i < tr_graph_n_inputs(g); i++) {
        struct tr_tensor t = tr_node_tensor(g, tr_graph_input(g, i));
        io += tr_tensor_nbytes(&t);
    }
    const int on_cpu = cfg->device_type == TR_DEVICE_CPU;
    const uint64_t host = 2 * values + io + (on_cpu ? values : 0);
    char h[3][32];
    fprintf(stderr, "trident: check nodes: every value of the step is %s; the host holds two copies and the "
            "parameters (%s), the backend one more: about %s%s\n", tr_bench_bytes_str(values, h[0], 32),
            tr_bench_bytes_str(io, h[1], 32), tr_bench_bytes_str(host, h[2], 32),
            on_cpu ? " of host memory" : " of host memory and the values' size on the device");
    if (!on_cpu) return TR_OK;
    uint64_t avail = 0;
    int rc = tr_host_mem_available(&avail, err);
    if (rc) return rc;
    if (host > avail)
        return tr_error_set(err, TR_ERR_NOMEM, "%s: --check nodes keeps every intermediate value of %s/%s %s at "
                            "batch %lld: it needs about %.2f GiB and %.2f GiB are available (MemAvailable); lower "
                            "[run] batch or seq_len, or take a smaller preset", cfg->file, cfg->model, cfg->preset,
                            cfg->task, (long long)cfg->batch, (double)host / 1073741824.0,
                            (double)avail / 1073741824.0);
    return TR_OK;
}

static void report_header(const struct tr_config *cfg, struct tr_check_nodes_report *rep) {
    memset(rep, 0, sizeof *rep);
    snprintf(rep->model, sizeof rep->model, "%s", cfg->model);
    tr_config_preset_label(cfg, rep->preset, sizeof rep->preset);
    snprintf(rep->task, sizeof rep->task, "%s", cfg->task);
    snprintf(rep->device, sizeof rep->device, "%s", cfg->device);
    snprintf(rep->dtype, sizeof rep->dtype, "%s", tr_dtype_name(cfg->dtype));
    rep->tolerance = tr_bench_tolerance(cfg);
}

/* The verdict in err: the first backend that failed, else the first that diverges. */
static int verdict(struct tr_check_nodes_report *rep, int failures, int divergent, struct tr_error *err) {
    rep->all_agree = !failures && !divergent;
    const char *ref = "";
    for (int b = 0; b < rep->n_rows; b++)
        if (rep->rows[b].is_reference) ref = rep->rows[b].label;
    for (int b = 0; failures && b < rep->n_rows; b++)
        if (!rep->rows[b].ok)
            return tr_error_set(err, TR_ERR_PLUGIN, "check nodes: %d of %d backends failed; %s: %s", failures,
                                rep->n_rows, rep->rows[b].label, rep->rows[b].error);
    for (int b = 0; divergent && b < rep->n_rows; b++) {
        const struct tr_check_nodes_row *r = &rep->rows[b];
        if (r->first.id < 0) continue;
        return tr_error_set(err, TR_ERR_NUMERIC, "check nodes: %d of %d backends differ from '%s'; '%s' first at "
                            "node %d '%s' (%s): %.2e > %.0e (the %s tolerance)", divergent, rep->n_rows, ref,
                            r->label, r->first.id, r->first.name, tr_op_name(r->first.op), r->first.rel,
                            rep->tolerance, rep->dtype);
    }
    return TR_OK;
}

int tr_check_nodes_run(const struct tr_config *cfg, const struct tr_model_desc *const *models,
                       struct tr_check_nodes_report *rep, struct tr_error *err) {
    report_header(cfg, rep);
    if (cfg->n_backends < 1) return tr_error_set(err, TR_ERR_INVALID, "%s: [run] backends: none listed", cfg->file);
    struct tr_task_graph tg;
    int rc = tr_task_graph_build(cfg, models, &tg, err);
    if (rc) return rc;
    if (tg.opts.task == TR_TASK_GENERATE && tg.model->generate) {
        tr_task_graph_free(&tg);
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "%s: --check nodes: model '%s' generates with two passes "
                            "(prefill and decode, a KV cache between): check its predict task instead ([run] task = "
                            "predict), which is the same layers", cfg->file, cfg->model);
    }
    /* every backend found before any runs, as `trident run` refuses a missing one */
    for (int b = 0; b < cfg->n_backends; b++) {
        const struct tr_plugin_search ps = {.ini_dir = cfg->plugin_path[0] ? cfg->plugin_path : NULL};
        char where[TR_CONFIG_PATH + 96], found[TR_CONFIG_PATH];
        const struct tr_config_backend *cb = &cfg->backends[b];
        if ((rc = tr_plugin_locate(cb->path[0] ? cb->path : cb->name, &ps, found, sizeof found, err)) != TR_OK) {
            tr_task_graph_free(&tg);
            return tr_error_prefix(err, "%s: '%s'",
                                   tr_config_where(cfg, "backends", cfg->backends_line, where, sizeof where), cb->spec);
        }
    }
    struct tr_graph *g = tg.graph;
    const int fit = tg.opts.task == TR_TASK_FIT;
    snprintf(rep->what, sizeof rep->what, "%s", fit ? "the forward pass, the loss, the gradients and the "
             "optimizer's updates" : "the forward pass");
    struct tr_weights *w = NULL;
    struct tr_tensor *in = NULL, *ref = NULL, *out = NULL;
    struct fit_state fs = {0};
    int *node_out = NULL;
    double *rel = NULL, *mag = NULL;
    const int n_in = tr_graph_n_inputs(g);
    int n_out = 0;
    if ((rc = tr_check_nodes_mark(g, NULL, err)) != TR_OK) goto done;
    n_out = tr_graph_n_outputs(g);
    rep->n_nodes = tr_graph_n_nodes(g);
    node_out = malloc(sizeof *node_out * (size_t)(rep->n_nodes ? rep->n_nodes : 1));
    rel = malloc(sizeof *rel * (size_t)(rep->n_nodes ? rep->n_nodes : 1));
    mag = malloc(sizeof *mag * (size_t)(rep->n_nodes ? rep->n_nodes : 1));
    if (!node_out || !rel || !mag) {
        rc = tr_error_set(err, TR_ERR_NOMEM, "check nodes: out of memory for %d nodes", rep->n_nodes);
        goto done;
    }
    for (int id = 0; id < rep->n_nodes; id++) node_out[id] = -1;
    for (int i = n_out - 1; i >= 0; i--) node_out[tr_graph_output(g, i)] = i; /* a node's first output */
    for (int id = 0; id < rep->n_nodes; id++)
        if (node_out[id] >= 0 && !is_leaf(tr_node_op(g, id))) {
            struct tr_tensor t = tr_node_tensor(g, id);
            rep->value_bytes += tr_tensor_nbytes(&t);
            rep->n_checked++;
        }
    char where_dev[TR_CONFIG_PATH + 96];
    if ((rc = tr_kernels_device_available(cfg->device_type, err)) != TR_OK) {
        tr_error_prefix(err, "%s = %s", tr_config_where(cfg, "device", tr_config_run_line(cfg, "device"), where_dev,
                                                  sizeof where_dev), cfg->device);
        goto done;
    }
    if ((rc = check_memory(cfg, g, rep->value_bytes, err)) != TR_OK) goto done;
    const struct tr_weights_load_opts wo = {.seed = cfg->seed, .variant = cfg->weights_variant,
                                            .skip = {cfg->inputs, cfg->reference}};
    rc = tr_bench_weights(cfg, g, &wo, &w, err);
    if (rc) goto done;
    tr_weights_warn_unused(w, stderr);
    if ((rc = tr_bench_io_alloc(g, n_in, tr_graph_input, &in, err)) != TR_OK) goto done;
    rc = cfg->inputs[0] ? tr_bench_inputs_load(cfg, g, tg.n_model_inputs, in, err)
                        : tg.model->make_inputs(tg.config, &tg.opts, cfg->seed, tg.n_model_inputs, in, err);
    if (rc) goto done;
    if (fit) {
        if ((rc = tr_train_init_masters(g, &tg.train, err)) != TR_OK || (rc = fit_save(g, &fs, err)) != TR_OK)
            goto done;
        for (int i = 0; i < n_in; i++) {
            const int id = tr_graph_input(g, i);
            if (id == tg.train.lr) *(float *)in[i].data = (float)tg.train_cfg.learning_rate;
            if (id == tg.train.step) *(float *)in[i].data = 1.0f; /* the optimizer's first step */
        }
    }
    if ((rc = tr_bench_io_alloc(g, n_out, tr_graph_output, &ref, err)) != TR_OK ||
        (rc = tr_bench_io_alloc(g, n_out, tr_graph_output, &out, err)) != TR_OK)
        goto done;

    int failures = 0, divergent = 0, have_ref = 0;
    for (int b = 0; b < cfg->n_backends; b++) {
        const struct tr_config_backend *cb = &cfg->backends[b];
        struct tr_check_nodes_row *row = &rep->rows[rep->n_rows++];
        tr_bench_label(cfg, b, row->label, sizeof row->label);
        row->first.id = row->nonfinite.id = -1;
        fprintf(stderr, "trident: check nodes: %s: running one step (%d outputs to compare)\n", row->label, n_out);
        if (fit) fit_restore(g, &fs);
        struct tr_error e = {0};
        struct tr_tensor *dst = have_ref ? out : ref;
        int brc = run_backend(cfg, cb, g, n_in, in, n_out, dst, row, &e);
        if (brc) {
            snprintf(row->error, sizeof row->error, "%s", e.msg);
            failures++;
            continue;
        }
        row->ok = 1;
        find_nonfinite(g, node_out, dst, row);
        if (!have_ref) { /* the first that ran: the others are held to it */
            have_ref = 1;
            row->is_reference = 1;
            if (fit) fit_restore(g, &fs); /* the params' magnitudes before the step */
            magnitudes(g, node_out, ref, in, mag);
            continue;
        }
        compare(g, node_out, out, ref, mag, rep->tolerance, rel, row);
        divergent += row->first.id >= 0;
    }
    rc = verdict(rep, failures, divergent, err);
done:
    if (fit) fit_restore(g, &fs); /* the params as they were made */
    fit_free(&fs);
    tr_bench_io_free(out, n_out);
    tr_bench_io_free(ref, n_out);
    tr_bench_io_free(in, n_in);
    free(node_out);
    free(rel);
    free(mag);
    tr_weights_free(w);
    tr_task_graph_free(&tg);
    return rc;
}

static void print_node(const struct tr_check_node *n, FILE *f) {
    fprintf(f, "node %d '%s' (%s)", n->id, n->name, tr_op_name(n->op));
}

void tr_check_nodes_print(const struct tr_check_nodes_report *rep, FILE *f) {
    char size[32];
    fprintf(f, "check nodes: %s/%s %s %s on %s, one step (%s); %d of %d nodes compared, values %s; tolerance %.0e\n",
            rep->model, rep->preset, rep->task, rep->dtype, rep->device, rep->what, rep->n_checked, rep->n_nodes,
            tr_bench_bytes_str(rep->value_bytes, size, sizeof size), rep->tolerance);
    for (int b = 0; b < rep->n_rows; b++) {
        const struct tr_check_nodes_row *r = &rep->rows[b];
        fprintf(f, "  %s: ", r->label);
        if (!r->ok) {
            fprintf(f, "failed: %s\n", r->error);
            continue;
        }
        if (r->is_reference) fprintf(f, "the reference\n");
        if (r->nonfinite.id >= 0) {
            fprintf(f, "%s", r->is_reference ? "    " : "");
            print_node(&r->nonfinite, f);
            fprintf(f, " is the first with a NaN or an Inf%s", r->is_reference ? "\n" : "; ");
        }
        if (r->is_reference) continue;
        if (r->first.id < 0) {
            fprintf(f, "every node within tolerance (%d nodes compared", r->n_compared);
            if (r->n_worst && r->worst[0].rel == 0) fprintf(f, ", every value identical");
            else if (r->n_worst) {
                fprintf(f, ", worst ");
                print_node(&r->worst[0], f);
                fprintf(f, " at %.1e", r->worst[0].rel);
            }
            fprintf(f, ")\n");
            continue;
        }
        fprintf(f, "first divergence: ");
        print_node(&r->first, f);
        fprintf(f, " rel %.1e > %.0e; its inputs ", r->first.rel, rep->tolerance);
        int computed = 0;
        for (int j = 0; j < r->n_first_inputs; j++) computed += r->first_inputs[j].compared;
        fprintf(f, "%s (", computed ? "agreed" : "are all leaves");
        for (int j = 0; j < r->n_first_inputs; j++) {
            const struct tr_check_node *in = &r->first_inputs[j];
            fprintf(f, "%snode %d %s", j ? ", " : "", in->id, tr_op_name(in->op));
            if (in->compared) fprintf(f, " %.1e", in->rel);
        }
        fprintf(f, ")\n    %d of %d nodes beyond tolerance; the worst:", r->n_beyond, r->n_compared);
        for (int k = 0; k < r->n_worst && r->worst[k].rel > 0; k++) {
            fprintf(f, "\n      ");
            print_node(&r->worst[k], f);
            fprintf(f, " %.1e", r->worst[k].rel);
        }
        fputc('\n', f);
    }
}
