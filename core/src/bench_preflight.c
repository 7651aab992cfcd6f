/* The checks before the first step (bench_preflight.h). A mistake in the fourth backend's
 * options, a missing plugin or an unwritable --json path used to show only after every
 * other backend had run (minutes); here each backend is loaded, initialised and freed
 * once before any runs. Initialising twice costs milliseconds; it is what makes a bad
 * option cost nothing. */
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "trident/isolate.h"
#include "bench_preflight.h"
#include "trident/loader.h"

struct problems {
    struct tr_error *err;
    int n;
    size_t off;
    char stage[48];             /* what the probe is doing: said when its process dies */
};

static void add(struct problems *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(struct problems *p, const char *fmt, ...) {
    char *buf = p->err->msg;
    const size_t cap = sizeof p->err->msg;
    if (p->n && p->off < cap) p->off += (size_t)snprintf(buf + p->off, cap - p->off, "\n  ");
    if (p->off < cap) {
        va_list ap;
        va_start(ap, fmt);
        p->off += (size_t)vsnprintf(buf + p->off, cap - p->off, fmt, ap);
        va_end(ap);
    }
    p->n++;
}

struct names {
    char list[512];
};

static void collect(const struct tr_plugin_candidate *c, void *user) {
    struct names *n = user;
    if (!c->accepted || c->shadowed || !c->name) return;
    size_t off = strlen(n->list);
    snprintf(n->list + off, sizeof n->list - off, "%s%s", off ? ", " : "", c->name);
}

void tr_bench_backend_params(const struct tr_config *cfg, const struct tr_config_backend *cb, struct tr_option *opts,
                             struct tr_backend_params *params) {
    int n_opts = tr_config_backend_options(cfg, cb, opts, TR_CONFIG_MAX_KV + 1);
    *params = (struct tr_backend_params){
        .struct_size = sizeof *params, .abi_version = TR_ABI_VERSION, .device_type = cfg->device_type,
        .device_index = cfg->device_index, .options = opts, .n_options = n_opts, .math = cfg->math,
    };
}

static void check_backend(const struct tr_config *cfg, const struct tr_config_backend *cb,
                          const struct tr_graph *const *graphs, int n_graphs, struct problems *p) {
    char wb[TR_CONFIG_PATH + 96];
    struct tr_plugin_search search = {.ini_dir = cfg->plugin_path[0] ? cfg->plugin_path : NULL, .env_path = NULL};
    struct tr_plugin *plugin = NULL;
    struct tr_backend *be = NULL;
    struct tr_error e = {0};
    snprintf(p->stage, sizeof p->stage, "its load (the entry point)");
    int rc = tr_plugin_open(cb->path[0] ? cb->path : cb->name, &search, &plugin, &e);
    if (rc == TR_ERR_NOT_FOUND && !cb->path[0]) {
        struct names found = {{0}};
        struct tr_error se = {0};
        tr_plugin_scan(&search, collect, &found, &se);
        add(p, "%s: '%s': no such backend (backends found: %s; %s)",
            tr_config_where(cfg, "backends", cfg->backends_line, wb, sizeof wb), cb->spec,
            found.list[0] ? found.list : "none", e.msg);
        return;
    }
    if (rc) {
        add(p, "%s: '%s': %s", tr_config_where(cfg, "backends", cfg->backends_line, wb, sizeof wb), cb->spec, e.msg);
        return;
    }
    struct tr_option opts[TR_CONFIG_MAX_KV + 1];
    struct tr_backend_params params;
    tr_bench_backend_params(cfg, cb, opts, &params);
    snprintf(p->stage, sizeof p->stage, "its init");
    rc = tr_backend_init(plugin, &params, &be, &e);
    if (rc) {
        add(p, "%s", e.msg); /* it names the backend and its file */
    }
    for (int i = 0; !rc && i < n_graphs; i++) {
        rc = tr_backend_check_graph(be, graphs[i], &e);
        if (rc) {
            add(p, "%s: '%s' cannot run %s/%s %s in %s: %s",
                tr_config_where(cfg, "backends", cfg->backends_line, wb, sizeof wb), cb->spec, cfg->model,
                cfg->preset, cfg->task, tr_dtype_name(cfg->dtype), e.msg);
        }
    }
    snprintf(p->stage, sizeof p->stage, "its free");
    tr_backend_free(be);
    snprintf(p->stage, sizeof p->stage, "its unload");
    tr_plugin_close(plugin);
}

/* A path the run will write: its directory exists and it may be written, found out by
 * making it (and removing what was made) rather than guessed from permission bits. */
static void check_writable(const char *path, struct problems *p) {
    struct stat sb;
    if (stat(path, &sb) == 0) {
        if (S_ISDIR(sb.st_mode) || access(path, W_OK) != 0) {
            add(p, "%s: cannot be written (%s)", path,
                     S_ISDIR(sb.st_mode) ? "it is a directory" : strerror(errno));
        }
        return;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        add(p, "%s: cannot be written (%s)", path, strerror(errno));
        return;
    }
    close(fd);
    unlink(path);
}

struct probe {
    const struct tr_config *cfg;
    const struct tr_config_backend *cb;
    const struct tr_graph *const *graphs;
    int n_graphs;
    struct problems *p;         /* in memory shared with the child */
};

static int probe_run(void *arg, int cmd) {
    (void)cmd;
    struct probe *q = arg;
    check_backend(q->cfg, q->cb, q->graphs, q->n_graphs, q->p);
    return TR_OK;
}

/* One backend checked in a child: what it finds lands in the shared problems. Its death
 * or silence goes to *dead where the caller takes it (a crash costs that backend its
 * row, not the run), else is a problem of its own. */
static void check_backend_isolated(const struct tr_config *cfg, const struct tr_config_backend *cb,
                                   const struct tr_graph *const *graphs, int n_graphs, struct problems *p,
                                   struct tr_error *dead) {
    char wb[TR_CONFIG_PATH + 96];
    struct probe q = {.cfg = cfg, .cb = cb, .graphs = graphs, .n_graphs = n_graphs, .p = p};
    struct tr_error e = {0};
    int status;
    p->stage[0] = '\0';
    if (tr_child_once(probe_run, &q, 'P', cfg->backend_timeout, "the check before the run", &status, &e) == TR_OK)
        return;
    const size_t len = strlen(e.msg);
    if (p->stage[0] && len < sizeof e.msg) snprintf(e.msg + len, sizeof e.msg - len, " (in %s)", p->stage);
    if (dead) *dead = e;
    else add(p, "%s: '%s': %s", tr_config_where(cfg, "backends", cfg->backends_line, wb, sizeof wb), cb->spec, e.msg);
}

int tr_bench_preflight(const struct tr_config *cfg, const struct tr_graph *const *graphs, int n_graphs,
                       const struct tr_bench_opts *o, int isolate, struct tr_error *dead, struct tr_error *err) {
    /* shared, so a probe's child writes its problems where this process reads them */
    struct shared_problems {
        struct tr_error all;
        struct problems p;
    } *sp = isolate ? tr_shared_alloc(sizeof *sp, err) : NULL;
    if (isolate && !sp) return err->status;
    struct shared_problems local = {0};
    if (!sp) sp = &local;
    sp->p = (struct problems){.err = &sp->all};
    struct problems *pp = &sp->p;
    int rc = TR_OK;
    const int fit = graphs[0] && tr_graph_n_updates(graphs[0]) > 0;
    if (cfg->schedule == TR_SCHEDULE_INTERLEAVED && ((fit && !isolate) || n_graphs > 1))
        add(pp, "%s:%d: [run] schedule = interleaved: %s runs its backends one after another (%s); "
            "expected sequential or no schedule line", cfg->file, cfg->schedule_line, cfg->task,
            n_graphs > 1 ? "each holds its own KV cache" : "in one process the backends train the same host copy "
            "of the parameters; with [run] isolate = on each has its own");
    for (int b = 0; b < cfg->n_backends; b++) {
        if (isolate) check_backend_isolated(cfg, &cfg->backends[b], graphs, n_graphs, pp, dead ? &dead[b] : NULL);
        else check_backend(cfg, &cfg->backends[b], graphs, n_graphs, pp);
    }
    for (int i = 0; o && o->outputs && i < 1; i++) check_writable(o->outputs, pp);
    for (int i = 0; o && i < o->n_out_paths; i++) check_writable(o->out_paths[i], pp);
    if (pp->n == 1) rc = tr_error_set(err, TR_ERR_INVALID, "%s", sp->all.msg);
    else if (pp->n) rc = tr_error_set(err, TR_ERR_INVALID, "%d problems, found before any backend ran:\n  %s", pp->n,
                                      sp->all.msg);
    if (sp != &local) tr_shared_free(sp, sizeof *sp);
    return rc;
}
