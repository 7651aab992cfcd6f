/* The trident program's subcommands that live in files of their own. Each returns the
 * process exit status (0 ok, 1 failure, 2 usage). */
#ifndef TRIDENT_CLI_H
#define TRIDENT_CLI_H

/* trident bench-kernels [--op matmul] [--size N] [--dtype f32|bf16] [--reps R]:
 * GFLOP/s of the shared kernels on this machine (cli/bench_kernels.c). */
int tr_cli_bench_kernels(int argc, char **argv);

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

#endif
