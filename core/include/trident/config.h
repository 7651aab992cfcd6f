/* trident — INI configuration (parsed by inih).
 *
 *   [run]              model, preset, task, backends, device, dtype, batch, seq_len,
 *                      steps, warmup, seed, weights (a safetensors file; empty: made
 *                      from seed), math (f32, tf32 or bf16: how GEMMs compute; it must
 *                      fit dtype, and tf32 needs cuda; absent: what dtype implies),
 *                      threads (OpenMP threads, 1 to 1024; absent: the cores this
 *                      process may run on, sched_getaffinity's count), tolerance,
 *                      inputs (the batch from a safetensors file, by the graph's input
 *                      names), reference (a safetensors file of outputs every backend is
 *                      compared with), missing (error or seed: what to do with tensors
 *                      a weights file lacks), schedule (interleaved or sequential),
 *                      isolate (on: each backend in a child process; off), backend_timeout,
 *                      parallel (none | data), bucket_mb, collective_timeout, check_every
 *   [plugins]          path (a directory searched first for backends; relative to the
 *                      INI file's directory)
 *   [backend.NAME]     options handed to that backend as key/value pairs; the plugin
 *                      validates its own keys
 *   [model]            overrides of the preset's keys; the model validates them
 *   [train]            the fit task's optimizer settings (train.h validates them)
 *   [generate]         the generate task's settings (generate.h validates them)
 *
 * `backends` is a comma-separated list of entries "NAME", "NAME:MODE" (MODE is given to
 * the backend as the option `mode`) or a path to a .so file. Unknown sections and keys
 * are errors. Every error reads "FILE:LINE: [SECTION] KEY = VALUE: what was expected".
 * A tr_config is a plain value: no allocation, nothing to free.
 */
#ifndef TRIDENT_CONFIG_H
#define TRIDENT_CONFIG_H

#include <stdint.h>
#include "trident/backend.h"
#include "trident/dtype.h"
#include "trident/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TR_CONFIG_MAX_BACKENDS 8
#define TR_CONFIG_MAX_KV 64
#define TR_CONFIG_STR 256
#define TR_CONFIG_PATH 1024
#define TR_CONFIG_RUN_KEYS 32 /* room for every [run] key's line */

enum tr_parallel { TR_PARALLEL_NONE = 0, TR_PARALLEL_DATA = 1 };
struct tr_config;
/* 1 when the run trains data-parallel: several ranks, or a communicator of one (which
 * then runs every collective over its one rank: the path, checked without peers). */
int tr_config_data_parallel(const struct tr_config *cfg);

/* How the backends take their timed steps (bench.h). */
enum tr_schedule { TR_SCHEDULE_DEFAULT = 0, TR_SCHEDULE_INTERLEAVED = 1, TR_SCHEDULE_SEQUENTIAL = 2 };

struct tr_config_kv {
    char section[64];   /* "model", "backend.torch" */
    char key[64];
    char value[TR_CONFIG_STR];
    int line;
};

struct tr_config_backend {
    char spec[TR_CONFIG_STR];   /* as written: "torch:reduce-overhead" */
    char name[64];              /* "torch", or the file's stem for a path */
    char mode[64];              /* "reduce-overhead", or "" */
    int mode_line;              /* the [backend.NAME] mode line it came from; 0: the entry's own */
    char path[TR_CONFIG_PATH];  /* set when the entry is a path to a .so */
};

struct tr_config {
    char file[TR_CONFIG_PATH];  /* the INI's path, as given */
    char dir[TR_CONFIG_PATH];   /* its directory, for relative paths */

    /* [run] */
    char model[64];
    int model_line;             /* the line of [run] model; 0: not given ("bert", the default) */
    char preset[64];
    int preset_line;            /* the line of [run] preset; 0: not given */
    char task[32];              /* "predict", ... */
    int task_line;              /* the line of [run] task; 0: not given */
    struct tr_config_backend backends[TR_CONFIG_MAX_BACKENDS];
    int n_backends;
    int backends_line;
    char backends_from[TR_CONFIG_PATH]; /* the file backends_line is in when it is not `file`
                                           (a suite that set the list); "" otherwise */
    /* the [run] keys a suite's overrides set (tr_config_where): the suite file (one for all),
     * and each key's line and section */
    char over_file[TR_CONFIG_PATH];
    struct tr_config_origin {
        char key[24];
        char section[56];       /* "suite", "row.bert_fit" */
        int line;
        char value[48];
    } over[16];
    int n_over;
    char device[16];            /* "cpu" or "cuda" */
    int device_type;            /* enum tr_device_type */
    enum tr_dtype dtype;
    enum tr_math math;          /* TR_MATH_DEFAULT when not given */
    int64_t batch, seq_len, steps, warmup;
    uint64_t seed;
    char weights[TR_CONFIG_PATH]; /* resolved against dir; "" when weights come from seed */
    int weights_line;           /* the line of [run] weights; 0 when it was not given */
    char weights_variant[32];   /* [run] weights_variant: a directory's NAME.VARIANT.safetensors
                                   files read in place of NAME.safetensors; "": none (weights.h) */
    int threads;                /* OpenMP threads for the run; the caller applies them
                                   (omp_set_num_threads) before tr_bench_run, as the trident
                                   program does (core does not link OpenMP), which keeps an
                                   OMP_NUM_THREADS of the environment when no line gives it */
    int threads_line;           /* the line of [run] threads; 0 when it was not given */
    int run_key_lines[TR_CONFIG_RUN_KEYS]; /* every [run] key's line (tr_config_run_line) */
    int seq_len_line;           /* the line of [run] seq_len; 0 when it was not given (then
                                   a model may choose its own: tr_model_desc.default_seq_len) */
    double tolerance;           /* [run] tolerance: the backends' agreement; 0: the dtype's */
    char inputs[TR_CONFIG_PATH];    /* [run] inputs: the batch from a safetensors file (resolved
                                       against dir); "": made from seed */
    int inputs_line;
    char reference[TR_CONFIG_PATH]; /* [run] reference: outputs every backend is compared with */
    int reference_line;
    double reference_tolerance; /* [run] reference_tolerance: each backend against the reference
                                   (two backends each so close may differ by twice it, which
                                   tolerance bounds); 0: the agreement's */
    int missing_seed;           /* [run] missing = seed: tensors the weights file lacks are made
                                   from seed (listed in a warning); 0 (error): refused */
    int schedule;               /* enum tr_schedule; TR_SCHEDULE_DEFAULT: interleaved on cpu
                                   predict, sequential otherwise */
    int schedule_line;
    int isolate;                /* [run] isolate: 1 (default) each backend runs in a child
                                   process; 0 in this one */
    double backend_timeout;     /* [run] backend_timeout, seconds a backend may take to answer
                                   one command (load+compile+warm-up, a step, the finish) */
    /* Data parallelism (docs/parallel.md) */
    int parallel;               /* [run] parallel: TR_PARALLEL_NONE, or TR_PARALLEL_DATA */
    double bucket_mb;           /* [run] bucket_mb: gradients per all-reduce, MiB (25) */
    double collective_timeout;  /* [run] collective_timeout: seconds a collective may wait (60) */
    int64_t check_every;        /* [run] check_every: steps between checks that every rank holds
                                   the same trained weights (10; 0 never) */
    int ranks, rank;            /* not keys: the processes of the run and this one's, set by the
                                   program that started them (MPI's world); 1 and 0 otherwise */
    int joined;                 /* not a key: 1 when a communicator joined this run's processes
                                   (mpirun, or parallel = data), even of one rank */
    int device_index;           /* not a key: this process's device (data parallel on cuda: its
                                   rank among the ranks on its host); 0 otherwise */

    /* [plugins] */
    char plugin_path[TR_CONFIG_PATH]; /* resolved against dir; "" when not set */

    /* [model] and [backend.NAME], in file order */
    struct tr_config_kv kv[TR_CONFIG_MAX_KV];
    int n_kv;
};

/* Defaults: model bert, preset tiny, task predict, backends torch, device cpu, dtype f32,
 * batch 8, seq_len 128 (or the model's default_seq_len where the INI gives none), steps
 * 10, warmup 2, seed 1234, threads = the cores this process may run on
 * (tr_config_default_threads), isolate on, backend_timeout 1800 s. */
void tr_config_defaults(struct tr_config *cfg);

/* The CPUs in this process's affinity mask (sched_getaffinity), at most 1024; 1 when it
 * cannot be read. libgomp's own default is the same count. */
int tr_config_default_threads(void);

/* The math mode a run computes in, for reports: [run] math, or the dtype's name. */
const char *tr_config_math_name(const struct tr_config *cfg);

/* Read an INI file over the defaults. */
int tr_config_load(const char *path, struct tr_config *cfg, struct tr_error *err);
/* The same from a string (name is used in messages as the file). */
int tr_config_load_string(const char *text, const char *name, struct tr_config *cfg, struct tr_error *err);
/* rel resolved against the INI's directory (as [run] weights is): out gets dir/rel, or rel
 * itself when absolute; TR_ERR_INVALID when it does not fit in n. */
int tr_config_path(const struct tr_config *cfg, const char *rel, char *out, size_t n, struct tr_error *err);
/* The run's label for the preset: "PRESET", or "PRESET + hf_config" where [model]
 * hf_config sets the shapes (so a report never calls a vit-h config "tiny"). */
void tr_config_preset_label(const struct tr_config *cfg, char *out, size_t n);
/* The line of the [model] key that text (a model's message) names first, as "KEY = ":
 * where a model's own check refuses a value, the message can point at the INI's line.
 * 0 when text names none of the INI's [model] keys. */
int tr_config_model_line(const struct tr_config *cfg, const char *text);

/* A [run] key given from outside the INI (a suite's [suite] or [row.NAME] line: suite.h),
 * with where it was written, for messages ("suite.ini:7: [row.bert] batch = x: ..."). */
struct tr_config_override {
    const char *file;
    int line;
    const char *section;        /* "suite", "row.bert_fit" */
    const char *key, *value;
};
/* The [run] keys an override may set: how a row runs, not what it is (model, task, the
 * weights and other files stay the row's INI's). */
#define TR_CONFIG_OVERRIDE_KEYS \
    "backends, preset, device, dtype, batch, seq_len, steps, warmup, seed, tolerance, isolate, backend_timeout"
/* 1 when key is one of TR_CONFIG_OVERRIDE_KEYS. */
int tr_config_override_key(const char *key);
/* For an unknown key's message: a "did you mean" hint when key is near one of words
 * (tr_text_nearest), else one that names the section key belongs in when it is a [run] or
 * [train] key ("; learning_rate is a [train] key"); "" when neither. Returns buf. */
const char *tr_config_key_hint(const char *key, const char *section, const char *const *words, int n, char *buf,
                               size_t cap);
/* tr_config_load, then each override over the file's [run] (in order; the last of a key
 * wins). An override of backends also sets backends_from, and the file's [backend.NAME]
 * sections for backends the new list lacks are left unused rather than refused. */
int tr_config_load_over(const char *path, const struct tr_config_override *over, int n_over, struct tr_config *cfg,
                        struct tr_error *err);
/* The file cfg->backends_line is a line of: backends_from, or file. */
const char *tr_config_backends_file(const struct tr_config *cfg);
/* The line of [run] key in the INI (0: not given there). */
int tr_config_run_line(const struct tr_config *cfg, const char *key);
/* Where [run] key was set, for a message: "SUITE:LINE: [row.NAME] key" when a suite's
 * override set it, else "FILE:LINE: [run] key" (line: the file's line of it; 0 leaves
 * ":LINE" out). Returns buf. */
const char *tr_config_where(const struct tr_config *cfg, const char *key, int line, char *buf, size_t n);
/* The overrides that set this run's keys, for a message about the run as a whole:
 * "; the suite set seq_len = 5000 (suite.ini:2 [suite])", or "" when none did. Returns buf. */
const char *tr_config_overrides_str(const struct tr_config *cfg, char *buf, size_t n);

/* One [run] backends entry read as the INI reads it (NAME, NAME:MODE, PATH.so[:MODE]; a
 * path's NAME is the file's stem less libtrident_backend_, the [backend.NAME] section it
 * reads), a relative path kept relative to the working directory: for an entry given on
 * the command line. */
int tr_config_backend_parse(const char *entry, struct tr_config_backend *out, struct tr_error *err);

/* The options of [backend.NAME] as tr_option records pointing into cfg, plus
 * mode = MODE when the backends entry had one. Returns how many were written (at most max). */
int tr_config_backend_options(const struct tr_config *cfg, const struct tr_config_backend *be,
                              struct tr_option *out, int max);

#ifdef __cplusplus
}
#endif
#endif
