/* The trident program's subcommands that live in files of their own. Each returns the
 * process exit status (0 ok, 1 failure, 2 usage). */
#ifndef TRIDENT_CLI_H
#define TRIDENT_CLI_H

#include <stdio.h>
struct tr_error;

/* trident bench-kernels [--op matmul] [--size N] [--dtype f32|bf16] [--reps R]:
 * GFLOP/s of the shared kernels on this machine (cli/bench_kernels.c). */
int tr_cli_bench_kernels(int argc, char **argv);

/* cli/kernel_timing.c. A tensor of dtype and shape in k's memory: N(0,1) floats from seed
 * (fill_one: ones), integers 0 (an id, label or start every op takes). Free its data with
 * tr_kernels_dealloc. */
struct tr_kernels;
struct tr_tensor;
struct tr_attrs;
#include <stdint.h>
#include "trident/dtype.h"
int tr_cli_device_tensor(struct tr_kernels *k, struct tr_tensor *t, enum tr_dtype dt, int nd, const int64_t *shape,
                         uint64_t seed, int fill_one, struct tr_error *err);
/* op on in[0..n_in) into out once (a warm-up), then reps times, each to the device's end
 * (tr_kernels_sync): the median and best seconds (best may be NULL). */
int tr_cli_time_op(struct tr_kernels *k, int op, const struct tr_attrs *at, int n_in, const struct tr_tensor *in,
                   struct tr_tensor *out, int reps, double *med, double *best, struct tr_error *err);
/* The same for a sequence of n bound calls (tr_kernels_bind*), run in order each time. */
struct tr_kernel_call;
int tr_cli_time_calls(struct tr_kernels *k, int n, const struct tr_kernel_call *calls, int reps, double *med,
                      double *best, struct tr_error *err);
/* AdamW's fused update bound in place (each output in its input's memory, as the backends
 * donate it), on new device tensors t[0..6): param (pdt), m, v (f32), the gradient (gdt),
 * all of shape[nd], and 0-d f32 lr and step; v, lr and step ones (a valid second moment,
 * step >= 1), the rest normal(0, 1). hp: beta1, beta2, eps, weight decay. On an error
 * what was made is freed; else the caller unbinds the call and frees t. */
int tr_cli_adamw_update_call(struct tr_kernels *k, enum tr_dtype pdt, enum tr_dtype gdt, int nd, const int64_t *shape,
                             const float hp[4], struct tr_tensor *t, struct tr_kernel_call *call,
                             struct tr_error *err);

/* a and b name one file (cli/trident.c): one inode where both exist, else the same
 * resolved directory and name. The commands refuse an output that is an input. */
int tr_cli_same_file(const char *a, const char *b);

struct tr_config;
struct tr_error;

/* What a run writes, and the command-line files it reads (NULL: not given). */
struct tr_cli_outs {
    const char *json, *outputs, *report; /* --report's DIR: its four files */
    const char *ini, *baseline;
};
/* Refuses, naming both, an output that is a file the run reads (the config, --baseline,
 * [run] weights, inputs, reference, any key's value that names a file: hf_config,
 * init_image, prompts) or another output ([generate] image, the report's files): checked
 * before the run, since an output replaces its file (cli/clobber.c). */
int tr_cli_check_clobber(const struct tr_config *cfg, const struct tr_cli_outs *o, struct tr_error *err);

/* trident roofline FILE.ini [--device-peaks h200|h100|measure] [--run] [--reps R]
 * [--top N] [--json OUT]: the step's kernels against the device's floor
 * (trident/roofline.h; cli/roofline_cmd.c). */
int tr_cli_roofline(int argc, char **argv);

/* trident check-backend NAME[:MODE]|PATH.so [FILE.ini]: the ABI checks and an op-by-op
 * comparison with the reference kernels, as a pass/fail table (cli/check_backend.c). */
int tr_cli_check_backend(int argc, char **argv);

/* cli/omp_env.c. Called first in main for the commands that run kernels: when the user
 * set neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT, sets the program's default wait policy
 * and re-executes the program with argv (NULL-terminated, as main's), since libgomp reads
 * them before main; returns only when nothing was to be done or the re-exec failed. */
void tr_cli_omp_wait_default(char **argv);

/* [run] threads given to OpenMP (omp_set_num_threads) before any backend compiles; without
 * a threads line an OMP_NUM_THREADS of the environment is kept. */
struct tr_config;
void tr_cli_apply_threads(const struct tr_config *cfg);

/* trident report A.json B.json (cli/report_cmd.c): for each backend in both reports (schema
 * TR_REPORT_SCHEMA), the mean ms/step of A and of B, B/A, and CHANGED where the means
 * differ by more than the larger of either row's spread (p90 - median of its step times)
 * and TR_REPORT_CHANGE_REL of A's mean. The spread is the noise within a run; the floor
 * is for what varies between runs of the same build on the same machine (frequency, other
 * load, memory placement), which no single run's spread shows. docs/report.md. */
#define TR_REPORT_CHANGE_REL 0.05
int tr_cli_report(int argc, char **argv);

/* `trident run --report DIR [--log-scale]`: tr_report_write_dir, the files named on stdout,
 * an error on stderr. Returns the exit status (0, 1). */
struct tr_bench_report;
int tr_cli_write_report_dir(const struct tr_bench_report *rep, const char *dir, int log_scale);

/* `trident bench SUITE.ini` (cli/suite_cmd.c): every row of the suite (suite.h), a table
 * each, then the summary; --json OUT the suite's JSON, --report DIR suite.md, suite.csv,
 * suite.json and a report folder per row. Returns the exit status (0, 1, 130 interrupted). */
struct tr_cli_suite_args {
    const char *rows;           /* --rows PATTERNS, or NULL for every row */
    const char *json, *report;
    int log_scale;
    long long steps;            /* --steps N over every row's; 0: theirs */
};
int tr_cli_suite(const char *ini, const struct tr_cli_suite_args *a);

/* A run's processes (cli/parallel.c): under an MPI launcher (mpirun -np N) or with [run]
 * parallel = data, MPI opened (libtrident_mpi), cfg->ranks and cfg->rank set from it and
 * *comm its communicator; otherwise *comm NULL (one process). A build without MPI refuses
 * either. tr_cli_parallel_close finalises MPI (NULL: nothing). */
struct tr_comm;
int tr_cli_parallel_open(struct tr_config *cfg, struct tr_comm **comm, struct tr_error *err);
/* 1 when an MPI launcher started this process (its environment), *size its processes. */
int tr_cli_mpi_launched(int *size);
void tr_cli_parallel_close(struct tr_comm *comm);

/* --baseline FILE: for each backend of rep (a data-parallel run) also in FILE (a one-process
 * run's JSON of the same model, task and global batch), the speed-up and the scaling
 * efficiency (speed-up / ranks). Returns 0, or 1 with the reason on stderr. */
int tr_cli_print_scaling(const struct tr_bench_report *rep, const char *baseline, FILE *f);
/* The same against a one-process run measured in this run (--scaling). */
void tr_cli_print_scaling_run(const struct tr_bench_report *rep, const struct tr_bench_report *one_process, FILE *f);
/* --scaling: every rank waits for rank 0's one-process run of the step (as long as cfg's
 * backends may take), *status rank 0's status; rank 0 calls it when its run is done. */
int tr_cli_parallel_wait_root(struct tr_comm *comm, const struct tr_config *cfg, int *status, struct tr_error *err);

#endif
