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

#endif
