/* An output of a run is never one of the files it reads (cli.h: tr_cli_check_clobber):
 * --outputs over [run] reference, --json over [run] inputs, the report over --json, a
 * generated picture over its init_image each lost the user's file, found out only after
 * the run (or never). */
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include "cli.h"
#include "trident/config.h"

#define CLOBBER_MAX 512

struct named {
    char what[TR_CONFIG_PATH + 96]; /* "--json", "[run] reference (x.ini:5)" */
    char path[TR_CONFIG_PATH + 16];
    int in_weights_dir;             /* a file of a [run] weights directory */
    int is_outputs;                 /* --outputs */
};

struct names {
    struct named v[CLOBBER_MAX];
    int n;
};

static void add(struct names *l, const char *path, const char *what) {
    if (!path || !path[0] || l->n >= CLOBBER_MAX) return;
    snprintf(l->v[l->n].path, sizeof l->v[l->n].path, "%s", path);
    snprintf(l->v[l->n].what, sizeof l->v[l->n].what, "%s", what);
    l->v[l->n].in_weights_dir = 0;
    l->v[l->n].is_outputs = !strcmp(what, "--outputs");
    l->n++;
}

/* "[run] inputs (x.ini:5)", or the key alone where the line is not known */
static const char *where(char *buf, size_t n, const char *sec, const char *key, const char *file, int line) {
    if (line > 0) snprintf(buf, n, "[%s] %s (%s:%d)", sec, key, file, line);
    else snprintf(buf, n, "[%s] %s (%s)", sec, key, file);
    return buf;
}

static int is_file(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static int is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* The files of a directory a key names (hf_config = a model's directory, weights = a Hub
 * download, a pipeline: its parts one level down), as the run may read any of them. */
static void add_dir(struct names *l, const char *dir, const char *what, int depth) {
    DIR *d = opendir(dir);
    for (struct dirent *de; d && (de = readdir(d));) {
        if (de->d_name[0] == '.') continue;
        char p[TR_CONFIG_PATH + 16];
        if (snprintf(p, sizeof p, "%s/%s", dir, de->d_name) >= (int)sizeof p) continue;
        if (is_file(p)) add(l, p, what);
        else if (depth > 0 && is_dir(p)) add_dir(l, p, what, depth - 1);
    }
    if (d) closedir(d);
}

int tr_cli_check_clobber(const struct tr_config *cfg, const struct tr_cli_outs *o, struct tr_error *err) {
    static struct names ins, outs;
    ins.n = outs.n = 0;
    char w[TR_CONFIG_PATH + 96];
    add(&outs, o->json, "--json");
    add(&outs, o->outputs, "--outputs");
    static const char *const report_files[] = {"report.md", "report.csv", "chart.svg", "report.json"};
    for (int i = 0; o->report && i < 4; i++) {
        char p[TR_CONFIG_PATH + 16];
        snprintf(p, sizeof p, "%s/%s", o->report, report_files[i]);
        snprintf(w, sizeof w, "--report %s (its %s)", o->report, report_files[i]);
        add(&outs, p, w);
    }
    add(&ins, o->ini, "the config");
    add(&ins, o->baseline, "--baseline");
    where(w, sizeof w, "run", "weights", cfg->file, cfg->weights_line);
    if (is_file(cfg->weights)) add(&ins, cfg->weights, w);
    else if (cfg->weights[0] && is_dir(cfg->weights)) {
        const int first = ins.n;
        add_dir(&ins, cfg->weights, w, 1);
        for (int i = first; i < ins.n; i++) ins.v[i].in_weights_dir = 1;
    }
    add(&ins, cfg->inputs, where(w, sizeof w, "run", "inputs", cfg->file, cfg->inputs_line));
    add(&ins, cfg->reference, where(w, sizeof w, "run", "reference", cfg->file, cfg->reference_line));
    /* every other key whose value names a file the run may read (hf_config, init_image,
     * prompts, a tokenizer.json); [generate] image is the picture the run writes */
    for (int i = 0; i < cfg->n_kv; i++) {
        const struct tr_config_kv *kv = &cfg->kv[i];
        char p[TR_CONFIG_PATH];
        where(w, sizeof w, kv->section, kv->key, cfg->file, kv->line);
        if (!strcmp(kv->section, "generate") && !strcmp(kv->key, "image")) {
            add(&outs, kv->value, w);
            continue;
        }
        struct tr_error e = {0};
        if (tr_config_path(cfg, kv->value, p, sizeof p, &e) != TR_OK) continue;
        if (is_file(p)) add(&ins, p, w);
        else if (is_dir(p) && strncmp(kv->section, "backend.", 8) != 0) /* a backend's dir is its own (a cache) */
            add_dir(&ins, p, w, 1);
    }
    for (int a = 0; a < outs.n; a++) {
        for (int b = 0; b < ins.n; b++)
            /* --outputs into a weights directory is left out of the weights (by inode), so a
             * run may write there again; --json or a report there would replace a checkpoint */
            if (!(ins.v[b].in_weights_dir && outs.v[a].is_outputs) && tr_cli_same_file(outs.v[a].path, ins.v[b].path))
                return tr_error_set(err, TR_ERR_INVALID, "%s %s is %s, which the run reads; write to another file",
                                    outs.v[a].what, outs.v[a].path, ins.v[b].what);
        for (int b = 0; b < a; b++)
            if (tr_cli_same_file(outs.v[a].path, outs.v[b].path))
                return tr_error_set(err, TR_ERR_INVALID, "%s %s and %s %s are one file; give each its own",
                                    outs.v[b].what, outs.v[b].path, outs.v[a].what, outs.v[a].path);
    }
    return TR_OK;
}
