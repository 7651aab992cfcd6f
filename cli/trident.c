/* trident — the program.
 *
 *   trident run FILE.ini [--json OUT] [--outputs F] [--steps N]
 *                                                    run the task on every backend listed
 *   mpirun -np N trident run FIT.ini [--baseline J | --scaling]
 *                                                    data-parallel fit: each rank on its share of the
 *                                                    batch, gradients averaged (docs/parallel.md)
 *   trident run FILE.ini --check nodes              every node of one step of each backend against
 *                                                    the first's (check_nodes.h)
 *   trident bench FILE.ini ...                       the same (benchmarks are runs)
 *   trident bench SUITE.ini [--rows P,...]           every row of a suite, then the summary (suite.h)
 *   trident bench-kernels [--op OP] [--size N] ...   GFLOP/s of the shared kernels
 *   trident roofline FILE.ini [--run]                the step's kernels against the device's floor
 *   trident list [FILE.ini | MODEL]                 models, presets, tasks; backend plugins (MODEL:
 *                                                    its INI keys, section by section)
 *   trident dump FILE.ini                            the task's graph as text (a suite: every row's)
 *   trident check-backend NAME|PATH [FILE.ini]       a plugin's conformance check
 *   trident report A.json B.json                     two runs' (or two suites') reports compared
 *
 * Exit status: 0 success, 1 failure (the message on stderr), 2 usage, 130 interrupted
 * (Ctrl-C: the table so far, the JSON and the outputs written, marked interrupted). */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "cli.h"
#include "models.h"
#include "trident/check_nodes.h"
#include "trident/suite.h"
#include "trident/trident.h"

static const char usage[] =
    "usage: trident run FILE.ini [--json OUT] [--report DIR [--log-scale]] [--outputs OUT.safetensors] [--steps N]\n"
    "       mpirun -np N trident run FIT.ini [--baseline ONE_PROCESS.json | --scaling] [...]   (data-parallel fit)\n"
    "       trident run FILE.ini --check nodes\n"
    "       trident bench FILE.ini [--json OUT] [--report DIR [--log-scale]] [--outputs OUT.safetensors] [--steps N]\n"
    "       trident bench SUITE.ini [--rows NAME,PATTERN...] [--json OUT] [--report DIR [--log-scale]] [--steps N]\n"
    "       trident bench-kernels [--op matmul|attention|conv2d|adamw|all] [--size N] [--head-dim D] "
    "[--dtype f32|bf16|all] [--reps R]\n"
    "       trident roofline FILE.ini [--device-peaks h200|h100|measure] [--run] [--reps R] [--top N] [--json OUT]\n"
    "       trident list [FILE.ini | MODEL]\n"
    "       trident dump FILE.ini\n"
    "       trident check-backend NAME[:MODE]|PATH.so [FILE.ini]\n"
    "       trident report A.json B.json\n";

static int fail(const struct tr_error *err) {
    fflush(stdout); /* the table first, then the verdict */
    fprintf(stderr, "trident: error: %s\n", err->msg);
    return 1;
}

static int parse_count(const char *s, int64_t *out) {
    char *end;
    long long v = strtoll(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < 1 || v > 1000000) return -1;
    *out = v;
    return 0;
}

/* A run names its model: an INI without [run] model (an empty file, a typo in the
 * section) would otherwise run every default. */
static int need_model(const struct tr_config *cfg, struct tr_error *err) {
    if (cfg->model_line) return TR_OK;
    char list[512] = "";
    for (const struct tr_model_desc *const *m = tr_builtin_models; *m; m++) {
        size_t n = strlen(list);
        snprintf(list + n, sizeof list - n, "%s%s", m == tr_builtin_models ? "" : ", ", (*m)->name);
    }
    return tr_error_set(err, TR_ERR_INVALID, "%s: no [run] model; expected a line such as 'model = bert' in [run] "
                        "(models: %s)", cfg->file, list);
}

/* Ctrl-C: the first asks the run to stop after its current step (the table so far, the
 * JSON and the outputs are still written); a second one kills the program as usual. */
static void on_sigint(int sig) {
    (void)sig;
    tr_bench_interrupt();
    signal(SIGINT, SIG_DFL);
}

static int run_one(struct tr_config *cfg, struct tr_comm *comm, const char *json, const char *outputs,
                   const char *report, int log_scale, const char *baseline, int scaling, int check_nodes);

/* a and b name one file: one inode where both exist, else the same directory (resolved)
 * and name, whether it exists yet or not. */
int tr_cli_same_file(const char *a, const char *b) {
    struct stat st_a, st_b;
    if (stat(a, &st_a) == 0 && stat(b, &st_b) == 0) return st_a.st_dev == st_b.st_dev && st_a.st_ino == st_b.st_ino;
    char da[PATH_MAX], db[PATH_MAX], ra[PATH_MAX], rb[PATH_MAX];
    const char *sa = strrchr(a, '/'), *sb = strrchr(b, '/');
    snprintf(da, sizeof da, "%.*s", sa ? (int)(sa - a + 1) : 2, sa ? a : "./");
    snprintf(db, sizeof db, "%.*s", sb ? (int)(sb - b + 1) : 2, sb ? b : "./");
    if (!realpath(da, ra) || !realpath(db, rb)) return strcmp(a, b) == 0;
    return strcmp(ra, rb) == 0 && strcmp(sa ? sa + 1 : a, sb ? sb + 1 : b) == 0;
}

static int cmd_run(int argc, char **argv) {
    const char *ini = NULL, *json = NULL, *outputs = NULL, *report = NULL, *rows = NULL, *baseline = NULL;
    int64_t steps = 0;
    int log_scale = 0, check_nodes = 0, scaling = 0;
    static const char *const valued[] = {"--check", "--json", "--outputs", "--report", "--rows", "--baseline",
                                         "--steps"};
    for (int i = 0; i < argc; i++)
        for (size_t k = 0; k < sizeof valued / sizeof valued[0]; k++) {
            if (strcmp(argv[i], valued[k]) != 0) continue;
            if (i + 1 == argc || !argv[i + 1][0]) { /* "" too: no file is called that */
                fprintf(stderr, "trident: %s needs a value\n%s", argv[i], usage);
                return 2;
            }
            for (int j = 0; j < i; j++)
                if (strcmp(argv[j], argv[i]) == 0) {
                    fprintf(stderr, "trident: %s is given twice; expected it once\n%s", argv[i], usage);
                    return 2;
                }
        }
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--check") == 0 && i + 1 < argc) {
            if (strcmp(argv[++i], "nodes") != 0) {
                fprintf(stderr, "trident: --check %s: expected --check nodes\n%s", argv[i], usage);
                return 2;
            }
            check_nodes = 1;
        } else if (strcmp(argv[i], "--json") == 0 && i + 1 < argc) json = argv[++i];
        else if (strcmp(argv[i], "--outputs") == 0 && i + 1 < argc) outputs = argv[++i];
        else if (strcmp(argv[i], "--report") == 0 && i + 1 < argc) report = argv[++i];
        else if (strcmp(argv[i], "--rows") == 0 && i + 1 < argc) rows = argv[++i];
        else if (strcmp(argv[i], "--baseline") == 0 && i + 1 < argc) baseline = argv[++i];
        else if (strcmp(argv[i], "--scaling") == 0) scaling = 1;
        else if (strcmp(argv[i], "--log-scale") == 0) log_scale = 1;
        else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc) {
            if (parse_count(argv[++i], &steps)) {
                fprintf(stderr, "trident: --steps %s: expected an integer from 1 to 1000000\n", argv[i]);
                return 2;
            }
        } else if (argv[i][0] == '-' || ini) {
            fprintf(stderr, "trident: unexpected argument '%s'\n%s", argv[i], usage);
            return 2;
        } else ini = argv[i];
    }
    if (!ini) {
        fputs(usage, stderr);
        return 2;
    }
    /* the files the run reads are never its outputs: writing one would leave the config (or
     * the baseline) replaced by a report */
    const char *const outs[2][2] = {{"--json", json}, {"--outputs", outputs}};
    const char *const ins[2][2] = {{"the config", ini}, {"--baseline", baseline}};
    for (int o = 0; o < 2; o++)
        for (int r = 0; r < 2; r++)
            if (outs[o][1] && ins[r][1] && tr_cli_same_file(outs[o][1], ins[r][1])) {
                fprintf(stderr, "trident: %s %s is %s %s, which the run reads; write to another file\n%s", outs[o][0],
                        outs[o][1], ins[r][0], ins[r][1], usage);
                return 2;
            }
    if (json && outputs && tr_cli_same_file(json, outputs)) {
        fprintf(stderr, "trident: --json %s and --outputs %s are one file; give each its own\n%s", json, outputs, usage);
        return 2;
    }
    if (log_scale && !report) {
        fprintf(stderr, "trident: --log-scale is the chart's, with --report DIR\n%s", usage);
        return 2;
    }
    if (check_nodes && (json || outputs || report || steps)) {
        fprintf(stderr, "trident: --check nodes runs one step and writes no report: it takes no --json, --report, "
                "--outputs or --steps\n%s", usage);
        return 2;
    }
    struct tr_error err = {0};
    int is_suite = 0;
    if (tr_suite_detect(ini, &is_suite, &err)) return fail(&err);
    if (is_suite) {
        if (outputs || check_nodes || baseline) {
            fprintf(stderr, "trident: %s is a suite: --outputs, --baseline and --check nodes are for one run (give "
                    "one row's INI)\n%s", ini, usage);
            return 2;
        }
        int np = 1;
        if (tr_cli_mpi_launched(&np)) {
            fprintf(stderr, "trident: %s is a suite, and suites run in one process: give mpirun one row's INI "
                    "(a data-parallel fit)\n", ini);
            return 2;
        }
        const struct tr_cli_suite_args sa = {.rows = rows, .json = json, .report = report, .log_scale = log_scale,
                                             .steps = steps};
        struct sigaction sa_int = {.sa_handler = on_sigint}, old_int;
        sigemptyset(&sa_int.sa_mask);
        sa_int.sa_flags = SA_RESTART;
        sigaction(SIGINT, &sa_int, &old_int);
        int st = tr_cli_suite(ini, &sa);
        sigaction(SIGINT, &old_int, NULL);
        return st;
    }
    if (rows) {
        fprintf(stderr, "trident: --rows picks rows of a suite; %s has no [suite] section\n%s", ini, usage);
        return 2;
    }
    static struct tr_config cfg;
    if (tr_config_load(ini, &cfg, &err) || need_model(&cfg, &err)) return fail(&err);
    const struct tr_cli_outs co = {.json = json, .outputs = outputs, .report = report, .ini = ini,
                                   .baseline = baseline};
    if (tr_cli_check_clobber(&cfg, &co, &err)) {
        fprintf(stderr, "trident: %s\n%s", err.msg, usage);
        return 2;
    }
    if (steps) cfg.steps = steps;
    tr_cli_apply_threads(&cfg);
    /* data parallel: every rank runs what follows; rank 0 prints and writes for the run */
    struct tr_comm *comm = NULL;
    if (tr_cli_parallel_open(&cfg, &comm, &err)) return fail(&err);
    if (cfg.ranks > 1 && check_nodes) {
        tr_cli_parallel_close(comm);
        fprintf(stderr, "trident: --check nodes runs in one process, not under mpirun\n%s", usage);
        return 2;
    }
    if ((baseline || scaling) && cfg.ranks < 2) {
        tr_cli_parallel_close(comm);
        fprintf(stderr, "trident: --baseline and --scaling compare a data-parallel run (mpirun -np N) with one "
                "process; this run has one process\n%s", usage);
        return 2;
    }
    if (baseline && scaling) {
        tr_cli_parallel_close(comm);
        fprintf(stderr, "trident: --baseline names a one-process run, --scaling measures one: give one of them\n%s",
                usage);
        return 2;
    }
    const int rc = run_one(&cfg, comm, json, outputs, report, log_scale, baseline, scaling, check_nodes);
    tr_cli_parallel_close(comm);
    return rc;
}

/* One run (every rank of a data-parallel one): the table, the JSON, the report and the
 * outputs from rank 0. */
/* --scaling: the same step in one process (rank 0, on the whole batch) before the ranks
 * run it; the other ranks wait. 1 when *one holds its rows. */
static int measure_one_process(struct tr_config *cfg, struct tr_comm *comm, struct tr_bench_report *one) {
    struct tr_error err = {0};
    int status = TR_OK, have = 0;
    if (cfg->rank == 0) {
        struct tr_config *c1 = malloc(sizeof *c1);
        if (!c1) {
            status = tr_error_set(&err, TR_ERR_NOMEM, "--scaling: out of memory");
        } else {
            *c1 = *cfg;
            c1->ranks = 1, c1->rank = 0, c1->joined = 0, c1->isolate = 0; /* no fork in an MPI process */
            fprintf(stderr, "trident: --scaling: the step in one process first, on the whole batch of %lld (the "
                    "other %d rank%s wait)\n", (long long)cfg->batch, cfg->ranks - 1, cfg->ranks > 2 ? "s" : "");
            const struct tr_bench_opts o = {0};
            status = tr_bench_run_opts(c1, tr_builtin_models, &o, one, &err);
            have = one->n_rows > 0;
            if (status) fprintf(stderr, "trident: --scaling: the one-process run: %s\n", err.msg);
            free(c1);
        }
    }
    if (tr_cli_parallel_wait_root(comm, cfg, &status, &err)) fail(&err);
    return have;
}

static int run_one(struct tr_config *cfg, struct tr_comm *comm, const char *json, const char *outputs,
                   const char *report, int log_scale, const char *baseline, int scaling, int check_nodes) {
    struct tr_error err = {0};
    const int root = cfg->rank == 0;
    static struct tr_bench_report one;
    const int have_one = scaling && measure_one_process(cfg, comm, &one);
    if (!root) json = outputs = report = baseline = NULL;
    if (check_nodes) { /* every node of one step against the reference backend (check_nodes.h) */
        static struct tr_check_nodes_report crep;
        int crc = tr_check_nodes_run(cfg, tr_builtin_models, &crep, &err);
        if (crep.n_rows > 0) tr_check_nodes_print(&crep, stdout);
        return crc ? fail(&err) : 0;
    }

    static struct tr_bench_report rep;
    const char *out_paths[1 + TR_REPORT_N_FILES];
    static char report_paths[TR_REPORT_N_FILES][TR_CONFIG_PATH + 32];
    int n_out = 0;
    if (json) out_paths[n_out++] = json;
    if (report) { /* made now, so the check before the run finds out whether its files can be written */
        if (tr_report_make_dir(report, &err)) return fail(&err);
        for (int k = 0; k < TR_REPORT_N_FILES; k++) {
            snprintf(report_paths[k], sizeof report_paths[k], "%s/%s", report, tr_report_file_name(k));
            out_paths[n_out++] = report_paths[k];
        }
    }
    const struct tr_bench_opts opts = {.outputs = outputs, .out_paths = out_paths, .n_out_paths = n_out, .comm = comm};
    struct sigaction sa = {.sa_handler = on_sigint}, old_sa;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, &old_sa);
    int rc = tr_bench_run_opts(cfg, tr_builtin_models, &opts, &rep, &err);
    sigaction(SIGINT, &old_sa, NULL);
    if (!root) return rc ? (rc == TR_ERR_INTERRUPTED ? 130 : 1) : 0; /* rank 0 says what went wrong */
    int write_failed = 0;
    if (rep.n_rows > 0) {
        tr_bench_print(&rep, stdout);
        tr_bench_print_reference(&rep, cfg, stdout);
        if (baseline) write_failed |= tr_cli_print_scaling(&rep, baseline, stdout);
        if (have_one) tr_cli_print_scaling_run(&rep, &one, stdout);
    }
    /* A file that cannot be written is its own message; the run's error, if any, follows
     * (err is empty when the run itself went well: printing it gave an empty "error:" line). */
    if (rep.n_rows > 0 && json) {
        struct tr_error jerr = {0};
        if (tr_bench_write_json(&rep, json, &jerr)) {
            fail(&jerr);
            write_failed = 1;
        }
    }
    if (rep.n_rows > 0 && report) write_failed |= tr_cli_write_report_dir(&rep, report, log_scale);
    if (!rc && write_failed) return 1;
    if (rc) {
        fail(&err);
        return rc == TR_ERR_INTERRUPTED ? 130 : 1;
    }
    return 0;
}

static void print_candidate(const struct tr_plugin_candidate *c, void *user) {
    (void)user;
    /* the name to write in backends = is the file's (libtrident_backend_NAME.so); where
     * the vtable calls itself otherwise, both are said */
    char stem[128] = "";
    const char *base = strrchr(c->path, '/') ? strrchr(c->path, '/') + 1 : c->path;
    if (!strncmp(base, "libtrident_backend_", 19)) base += 19;
    snprintf(stem, sizeof stem, "%.*s", (int)(strlen(base) > 3 ? strlen(base) - 3 : strlen(base)), base);
    if (c->accepted)
        printf("  %-8s %-44s %s%s%s%s%s\n", stem, c->path, c->shadowed ? "(shadowed by an earlier one) " : "",
               c->name && strcmp(c->name, stem) ? "(its vtable's name: " : "",
               c->name && strcmp(c->name, stem) ? c->name : "", c->name && strcmp(c->name, stem) ? ") " : "",
               c->description ? c->description : "");
    else printf("  refused  %-44s %s\n", c->path, c->reason);
    printf("           from %s\n", c->origin);
}

/* "  name   value   what it is", a key of a section, its value in config (NULL: none) */
static void print_key(const struct tr_model_desc *m, const void *config, const struct tr_model_key *k) {
    char v[80] = "";
    if (config) tr_model_key_str(m, config, k, v, sizeof v);
    printf("  %-28s %-12s %s\n", k->name, v[0] ? v : "\"\"", k->doc ? k->doc : "");
}

/* `trident list MODEL`: what an INI may say to it, section by section, with the first
 * preset's values (and the defaults of [train] and [generate]). */
static int list_model(const struct tr_model_desc *m) {
    struct tr_error err = {0};
    printf("%s: %s\ntasks:", m->name, m->description);
    for (int t = 0; t < TR_TASK_COUNT; t++)
        if (m->tasks & (1u << t)) printf(" %s", tr_task_name((enum tr_task)t));
    printf("\npresets:");
    for (int p = 0; p < m->n_presets; p++) printf(" %s", m->presets[p].name);
    printf("\n\n[model] keys, each over the preset (values: preset %s's)%s:\n", m->presets[0].name,
           m->read_hf_config ? "; hf_config = PATH reads a Hugging Face config.json under them" : "");
    for (int k = 0; k < m->n_keys; k++) print_key(m, m->presets[0].config, &m->keys[k]);
    if (m->tasks & (1u << TR_TASK_FIT)) {
        struct tr_train_config tc;
        tr_train_config_defaults(&tc);
        int n;
        const struct tr_model_key *keys = tr_train_keys(&n);
        printf("\n[train] keys (task = fit; values: the defaults):\n");
        for (int k = 0; k < n; k++) print_key(m, &tc, &keys[k]);
    }
    if ((m->tasks & (1u << TR_TASK_GENERATE)) && m->generate) {
        struct tr_generate_config gc;
        if (tr_generate_config_resolve(NULL, 1234, &gc, &err)) return fail(&err);
        int n;
        const struct tr_model_key *keys = tr_generate_keys(&n);
        printf("\n[generate] keys (task = generate; values: the defaults, seed [run] seed's):\n");
        for (int k = 0; k < n; k++) print_key(m, &gc, &keys[k]);
        printf("  %-28s %-12s %s\n", "prompt", "", "every sample's prompt as text (else synthetic ids)");
        printf("  %-28s %-12s %s\n", "prompts", "", "a file of prompts, one a line (sample b: prompt b mod their count)");
        printf("  %-28s %-12s %s\n", "tokenizer", "", "its tokenizer.json (or directory); default: beside [run] weights");
    } else if (m->tasks & (1u << TR_TASK_GENERATE))
        printf("\n[generate] keys (task = generate): image, prompt, prompts, negative_prompt, tokenizer, init_image, "
               "mask_image (README.md)\n");
    printf("\n[run] keys: README.md (\"Writing an INI file\"); [backend.NAME] keys: each backend's, in its "
           "refusal of an unknown one\n");
    return 0;
}

static int cmd_list(int argc, char **argv) {
    struct tr_config cfg;
    struct tr_error err = {0};
    tr_config_defaults(&cfg);
    if (argc > 1) {
        fputs(usage, stderr);
        return 2;
    }
    struct stat sb;
    for (const struct tr_model_desc *const *m = tr_builtin_models; argc == 1 && *m; m++)
        if (strcmp((*m)->name, argv[0]) == 0 && stat(argv[0], &sb) != 0) return list_model(*m);
    /* a word that is no file and no model's name: a model misspelt ("BERT"), not a config */
    if (argc == 1 && stat(argv[0], &sb) != 0 && !strchr(argv[0], '/') && !strchr(argv[0], '.')) {
        char names[512] = "";
        for (const struct tr_model_desc *const *m = tr_builtin_models; *m; m++) {
            const size_t n = strlen(names);
            snprintf(names + n, sizeof names - n, "%s%s", n ? ", " : "", (*m)->name);
        }
        fprintf(stderr, "trident: list %s: no such model (models: %s) and no such file\n", argv[0], names);
        return 1;
    }
    int is_suite = 0; /* a suite names no [plugins] path of its own: the default search */
    if (argc == 1 && tr_suite_detect(argv[0], &is_suite, &err)) return fail(&err);
    if (argc == 1 && !is_suite && tr_config_load(argv[0], &cfg, &err)) return fail(&err);

    printf("models:\n");
    for (const struct tr_model_desc *const *m = tr_builtin_models; *m; m++) {
        printf("  %-10s %s\n", (*m)->name, (*m)->description);
        printf("             tasks:");
        for (int t = 0; t < TR_TASK_COUNT; t++)
            if ((*m)->tasks & (1u << t)) printf(" %s", tr_task_name((enum tr_task)t));
        printf("\n");
        for (int p = 0; p < (*m)->n_presets; p++)
            printf("             preset %-8s %s\n", (*m)->presets[p].name, (*m)->presets[p].doc);
        if ((*m)->read_hf_config)
            printf("             [model] hf_config = PATH: a Hugging Face config.json, read as from_pretrained "
                   "reads it (a key it leaves out is its class's default; a relative path is taken from the "
                   "INI's directory)\n");
    }
    printf("\nbackends (search order: [plugins] path, TRIDENT_PLUGIN_PATH, build tree, install dir):\n");
    struct tr_plugin_search s = {.ini_dir = cfg.plugin_path[0] ? cfg.plugin_path : NULL, .env_path = NULL};
    if (tr_plugin_scan(&s, print_candidate, NULL, &err)) return fail(&err);
    return 0;
}

static int dump_graph(const struct tr_config *cfg) {
    struct tr_error err = {0};
    struct tr_task_graph tg;
    if (tr_task_graph_build(cfg, tr_builtin_models, &tg, &err)) return fail(&err);
    /* a token generate is two passes: the prefill once, the decode once a new token after
     * the first (their params include the KV cache, which the passes update) */
    const int passes = tg.gen.decode != NULL;
    if (passes)
        printf("# prefill (once a call)\n");
    int rc = tr_graph_dump(tg.graph, stdout, &err);
    if (!rc && passes) {
        printf("\n# decode (once a new token after the first: %lld a call)\n",
               (long long)(tg.gen_cfg.max_length - tg.gen_cfg.prompt_len - 1));
        rc = tr_graph_dump(tg.gen.decode, stdout, &err);
    }
    tr_task_graph_free(&tg);
    return rc ? fail(&err) : 0;
}

/* Every row's graph, each under a line naming the row. */
static int dump_suite(const char *path, struct tr_config *cfg) {
    struct tr_error err = {0};
    struct tr_suite *s = malloc(sizeof *s);
    if (!s) {
        fprintf(stderr, "trident: error: out of memory\n");
        return 1;
    }
    int rc = tr_suite_load(path, s, &err) ? fail(&err) : 0;
    for (int i = 0; !rc && i < s->n_rows; i++) {
        printf("%s## [row.%s] %s: %s\n", i ? "\n" : "", s->rows[i].name, s->rows[i].label, s->rows[i].config);
        rc = tr_suite_row_config(s, i, cfg, &err) || need_model(cfg, &err) ? fail(&err) : dump_graph(cfg);
    }
    free(s);
    return rc;
}

static int cmd_dump(int argc, char **argv) {
    if (argc != 1) {
        fputs(usage, stderr);
        return 2;
    }
    struct tr_error err = {0};
    static struct tr_config cfg;
    int is_suite = 0;
    if (tr_suite_detect(argv[0], &is_suite, &err)) return fail(&err);
    if (is_suite) return dump_suite(argv[0], &cfg);
    if (tr_config_load(argv[0], &cfg, &err) || need_model(&cfg, &err)) return fail(&err);
    return dump_graph(&cfg);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fputs(usage, stderr);
        return 2;
    }
    const char *cmd = argv[1];
    /* `trident COMMAND --help`: the usage, which covers every command, rather than
     * "--help" read as a file */
    for (int i = 2; strcmp(cmd, "bench-kernels") != 0 && strcmp(cmd, "roofline") != 0 && i < argc; i++) /* (own help) */
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(usage, stdout);
            return 0;
        }
    /* The commands that run kernels: OpenMP's wait policy has to be in place before
     * libgomp starts, so this may execute the program again (cli/omp_env.c). */
    if (!strcmp(cmd, "run") || !strcmp(cmd, "bench") || !strcmp(cmd, "bench-kernels") || !strcmp(cmd, "check-backend") ||
        !strcmp(cmd, "roofline"))
        tr_cli_omp_wait_default(argv);
    if (strcmp(cmd, "run") == 0 || strcmp(cmd, "bench") == 0) return cmd_run(argc - 2, argv + 2);
    if (strcmp(cmd, "bench-kernels") == 0) return tr_cli_bench_kernels(argc - 2, argv + 2);
    if (strcmp(cmd, "roofline") == 0) return tr_cli_roofline(argc - 2, argv + 2);
    if (strcmp(cmd, "list") == 0) return cmd_list(argc - 2, argv + 2);
    if (strcmp(cmd, "dump") == 0) return cmd_dump(argc - 2, argv + 2);
    if (strcmp(cmd, "check-backend") == 0) return tr_cli_check_backend(argc - 2, argv + 2);
    if (strcmp(cmd, "report") == 0) return tr_cli_report(argc - 2, argv + 2);
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
        printf("trident %d.%d (backend ABI %d.%d)\n", 0, 1, TR_ABI_MAJOR, TR_ABI_MINOR);
        return 0;
    }
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        fputs(usage, stdout);
        return 0;
    }
    fprintf(stderr, "trident: unknown command '%s'\n%s", cmd, usage);
    return 2;
}
