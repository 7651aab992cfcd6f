/* The trident program's subcommands that live in files of their own. Each returns the
 * process exit status (0 ok, 1 failure, 2 usage). */
#ifndef TRIDENT_CLI_H
#define TRIDENT_CLI_H

/* trident bench-kernels [--op matmul] [--size N] [--dtype f32|bf16] [--reps R]:
 * GFLOP/s of the shared kernels on this machine (cli/bench_kernels.c). */
int tr_cli_bench_kernels(int argc, char **argv);

#endif
