/* trident — the task runner and the side-by-side benchmark harness.
 *
 * tr_bench_run builds the model's graph once from the config, makes (or loads) the
 * weights once and one synthetic batch, then for each backend listed: loads the plugin,
 * compiles, runs `warmup` steps (the first timed on its own: build + compile + first
 * run, as the Keras benchmark leaves it out), then `steps` timed steps. Every backend
 * sees the same weights and the same batch; their outputs are compared with the first
 * backend's, and a relative difference beyond the dtype's tolerance fails the run.
 *
 * generate (generate.h): the task graph is the prefill pass (graph) and the decode pass;
 * a step is one whole generate call. Backends agree when their first logits are within
 * the tolerance and every generated token is the reference's.
 */
#ifndef TRIDENT_BENCH_H
#define TRIDENT_BENCH_H

#include <stdint.h>
#include <stdio.h>
#include "trident/backend.h"
#include "trident/config.h"
#include "trident/generate.h"
#include "trident/kernels.h"
#include "trident/model.h"
#include "trident/status.h"
#include "trident/train.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TR_BENCH_MAX_ROWS TR_CONFIG_MAX_BACKENDS
/* fit: backends agree when the losses of their first steps do (state drifts after). */
#define TR_BENCH_FIT_LOSSES 5
/* The step times a row keeps for the reports (JSON "step_ms"): the first this many. */
#define TR_BENCH_MAX_STEP_TIMES 1024

struct tr_bench_row {
    char label[96];             /* "torch", "torch:reduce-overhead" */
    char plugin_path[TR_CONFIG_PATH];
    int ok;                     /* 0: the backend failed; error says why */
    char error[TR_ERROR_MSG_MAX];
    double compile_ms;          /* compile() alone */
    double first_ms;            /* compile + first step */
    double mean_ms, median_ms, p90_ms, min_ms;
    double step_ms[TR_BENCH_MAX_STEP_TIMES]; /* the first n_step_ms timed steps, in step order
                                                (a drift or a slow first step stays visible) */
    int n_step_ms;              /* min(steps, TR_BENCH_MAX_STEP_TIMES) */
    double items_per_s;         /* samples/s for predict and fit */
    double gflops;              /* graph FLOPs / mean step time */
    struct tr_backend_stats stats;
    double loss_first, loss_last;   /* fit: the loss of the first step and of the last */
    double fit_losses[TR_BENCH_FIT_LOSSES];
    int n_fit_losses;
    double max_rel_diff;        /* against the first backend, over all outputs (fit: over the
                                   losses of the first TR_BENCH_FIT_LOSSES steps) */
    char worst_output[64];      /* the output with the largest difference */
    int agrees;                 /* within the dtype's tolerance of the first backend */
    int is_reference;           /* the first backend that ran: the others are compared to it */
    /* generate: a step is one generate call; mean_ms etc. are per call */
    double prefill_ms;          /* the prefill pass alone, mean over the timed calls */
    double ms_per_token;        /* (call - prefill) / decode passes */
    double tokens_per_s;        /* new tokens of the whole batch per second */
    double cache_write_ms;      /* per call: the host writing new entries into the KV cache */
    int compiles;               /* programs compiled (prefill + decode: 2) */
    int64_t decode_execs;       /* decode passes executed, all calls */
    int tokens_agree;           /* every generated token equals the reference's */
    int64_t mismatch_sample, mismatch_step;   /* the first token that differs (-1: none) */
    int32_t mismatch_token, reference_token;   /* there: this backend's and the reference's */
    int tokens_tie;             /* it differs at a near tie: the reference's logits of the two
                                   tokens there are within the tolerance (of its top logit);
                                   sampled, logits that close could have drawn it there */
    double tie_gap;             /* the reference's logit of its token minus that of this one
                                   (+inf: sampled, or not among its top logits) */
    int64_t steps_run;          /* timed steps run: steps, or fewer when interrupted */
    /* [run] reference: this backend's outputs against the file's */
    int ref_compared;           /* outputs compared (0: no reference) */
    double ref_rel_diff;        /* the largest ‖out − ref‖/‖ref‖ of them */
    int ref_agrees;             /* within the tolerance */
    char ref_worst[192];        /* "logits[3,17]: 0.51234 vs 0.51301 (of 'logits', 2.1e-07)" */
    /* data parallel: this rank's time in collectives per timed step, and how many times every
     * rank's trained state was found the same */
    double comm_ms;
    int64_t weight_checks;
};

/* A row is noisy when its p90 is more than this many times its median: some steps were
 * slowed by something else (other processes on the cores), and its mean is not to be
 * trusted against the other rows'. */
#define TR_BENCH_NOISY_P90 1.5

/* The environment variable the trident program sets, with the wait policy it chose, when it
 * re-executes itself to give libgomp that policy (cli/omp_env.c); reports tell a policy the
 * program chose from one the user set. */
#define TR_BENCH_OMP_WAIT_MARK "TRIDENT_OMP_WAIT_DEFAULT"

struct tr_bench_report {
    char model[64], preset[64], task[32], device[16], dtype[16];
    char math[8];               /* how GEMMs computed: f32, tf32, bf16 (or f16) */
    /* the host: the cpu and the kernels' ISA (on device = cuda too: it runs the host side),
     * the OpenMP threads and wait policy the kernels ran with */
    struct tr_cpu_info cpu;
    int threads;                /* OpenMP threads a parallel region got (cpu.threads) */
    char omp_wait[64];          /* "passive", "spin 10000 (GOMP_SPINCOUNT)", "libgomp default
                                   (spin 300000)" */
    char omp_wait_by[16];       /* "trident" (the program's default), "environment", "none" */
    int64_t batch, seq_len, steps, warmup;
    char input[96];             /* the graph's first input: "input_ids [8,128]", "sample [2,64,64,3]" */
    uint64_t seed;
    char weights[TR_CONFIG_PATH];   /* the weights' file; "" when made from [run] seed */
    char reference[TR_CONFIG_PATH]; /* [run] reference (rows' ref_*); "" when none */
    double reference_tolerance;
    char reference_why[64];

    char gpu[128];              /* the GPU's name on a device other than cpu; "" on cpu */
    int interrupted;            /* the run was stopped before every backend ran (Ctrl-C) */
    char schedule[16];          /* how the timed steps ran: "interleaved" or "sequential" */
    char isolation[80];         /* "each in its own process", or why in one */
    int ranks;                  /* data parallel: processes (1: one); batch is the global batch */
    int parallel;               /* 1: a data-parallel run (of `ranks`, which may be 1) */
    int64_t check_every;        /* data parallel: steps between the checks of the trained state */
    double bucket_mb;
    uint64_t param_count, param_bytes;
    double flops_per_step;
    int n_nodes;
    struct tr_bench_row rows[TR_BENCH_MAX_ROWS];
    int n_rows;
    double tolerance;
    char tolerance_why[64];     /* "the bf16 tolerance", "[run] tolerance", "bf16 over a sampler's
                                   denoising steps" */
    int all_ok;                 /* every backend ran and all agree */
    /* generate */
    struct tr_generate_config gen;
    int64_t new_tokens;         /* max_length - prompt_len */
    uint64_t kv_cache_bytes, mem_needed_bytes, mem_available_bytes;
    int32_t sample_tokens[8];   /* the reference's first new tokens of sample 0 */
    int n_sample_tokens;
    /* prompts given as text: the first samples' (those with their own prompt, or all of
     * the first 8 when sampling draws), the reference's new tokens as text up to the end of
     * sequence (text_tokens of them), truncated to the room here */
    struct tr_bench_text {
        int64_t sample;
        char prompt[TR_CONFIG_STR];
        char text[1024];
        int64_t text_tokens;
    } texts[8];
    int n_texts;
};

/* A task's graph, built once from a config: the model found in the registry, its config
 * resolved (preset + [model] overrides), the graph built for the task. Shared by
 * `trident run`, `trident dump` and the tests. */
struct tr_task_graph {
    const struct tr_model_desc *model;
    void *config;               /* model->config_size bytes, resolved */
    struct tr_build_opts opts;
    struct tr_graph *graph;
    int n_model_inputs;         /* the model's inputs; fit's lr and step come after */
    struct tr_train_config train_cfg;   /* fit only */
    struct tr_train_step train;         /* fit only: the step's nodes */
    struct tr_generate_config gen_cfg;  /* generate only: [generate] */
    struct tr_generate_graphs gen;      /* token generate only: gen.prefill is graph */
    struct tr_generate_text text;       /* token generate with a [generate] prompt */
    char image[TR_CONFIG_PATH];         /* one-graph generate: [generate] image, "" none */
    char prompt[TR_CONFIG_STR], negative_prompt[TR_CONFIG_STR]; /* [generate]; opts points here */
    char tokenizer[TR_CONFIG_PATH];
    char init_image[TR_CONFIG_PATH];    /* [generate] init_image, "" none */
    char mask_image[TR_CONFIG_PATH];    /* [generate] mask_image, "" none */
    char prompts[TR_CONFIG_PATH];       /* [generate] prompts, "" none */
};

int tr_task_graph_build(const struct tr_config *cfg, const struct tr_model_desc *const *models,
                        struct tr_task_graph *tg, struct tr_error *err);
void tr_task_graph_free(struct tr_task_graph *tg);

/* Run the config's task on every backend it lists. Returns TR_OK when the report is
 * complete and all_ok; a backend's failure or a disagreement is in the report and also
 * makes the status non-zero (TR_ERR_NUMERIC for disagreement). Errors before any backend
 * runs (bad model, preset, weights) return at once with err filled. */
int tr_bench_run(const struct tr_config *cfg, const struct tr_model_desc *const *models,
                 struct tr_bench_report *rep, struct tr_error *err);

/* The host's fields of a report (cpu, threads, omp_wait, omp_wait_by) from the kernels
 * library and the environment. tr_bench_run calls it first; fails when the kernels do
 * (TRIDENT_CPU_ISA unknown or above the cpu). */
int tr_bench_host_info(struct tr_bench_report *rep, struct tr_error *err);

/* The host line of the header: "cpu MODEL, isa avx512 (native), oneDNN avx512_core_bf16,
 * bf16 GEMM native, 2 threads, OpenMP wait spin 1000 (GOMP_SPINCOUNT) (trident's default)";
 * nothing when rep->cpu is empty. */
void tr_bench_print_host(const struct tr_bench_report *rep, FILE *f);

/* An aligned table, one row per backend, speed relative to the fastest; under it a
 * "noisy: ..." line for every row whose p90 is over TR_BENCH_NOISY_P90 times its median. */
void tr_bench_print(const struct tr_bench_report *rep, FILE *f);
/* 1 when the row ran and its p90 is over TR_BENCH_NOISY_P90 times its median. */
int tr_bench_row_noisy(const struct tr_bench_row *row);
int tr_bench_write_json(const struct tr_bench_report *rep, const char *path, struct tr_error *err);

/* What a run does besides the table (all optional: zeroed means none). */
struct tr_bench_opts {
    const char *outputs;        /* a safetensors file of every backend's outputs, "BACKEND/OUTPUT"
                                   (fit: "BACKEND/loss", every step's loss; generate:
                                   "BACKEND/tokens"), written after the run (interrupted too) */
    const char *const *out_paths;   /* paths the caller writes after the run (--json, --report
                                       files): checked writable before any backend runs */
    int n_out_paths;
    /* A data-parallel run's communicator (kernels.h; trident/comm_mpi.h makes one from MPI),
     * of cfg->ranks processes: each runs this on its share of the batch, the gradients
     * averaged by the graph's ALLREDUCE nodes. NULL: one process. */
    const struct tr_comm *comm;
};

/* tr_bench_run with opts (NULL: none). Before any backend runs, every listed backend is
 * loaded, initialised with its options and held to the graph's dtype, task and device
 * (its caps), the inputs and reference files are read and checked against the graph, and
 * the output paths are checked: every problem found is reported at once. */
int tr_bench_run_opts(const struct tr_config *cfg, const struct tr_model_desc *const *models,
                      const struct tr_bench_opts *opts, struct tr_bench_report *rep, struct tr_error *err);

/* Ask a running tr_bench_run to stop after the current step: the report holds what ran,
 * rep->interrupted is 1 and the status TR_ERR_INTERRUPTED. Async-signal-safe (a SIGINT
 * handler calls it); the flag stays set until tr_bench_interrupt_clear. */
void tr_bench_interrupt(void);
void tr_bench_interrupt_clear(void);

/* The lines under the table for [run] reference: each backend against the file. */
void tr_bench_print_reference(const struct tr_bench_report *rep, const struct tr_config *cfg, FILE *f);

#ifdef __cplusplus
}
#endif
#endif
