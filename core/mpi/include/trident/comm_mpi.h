/* trident — the data-parallel communicator over MPI (libtrident_mpi, built where MPI is
 * found: Debian's libopenmpi-dev).
 *
 * tr_comm_mpi_open initialises MPI (MPI_Init_thread, serialized: the thread that opened
 * it and the communicator's progress thread call MPI, one at a time) and returns a
 * struct tr_comm (trident/kernels.h) over MPI_COMM_WORLD, which the host hands to the
 * kernels (tr_kernels_set_comm) so that ALLREDUCE nodes run through it. ALLREDUCE_START
 * leaves its sum to the progress thread, which carries it while the backward pass goes
 * on; ALLREDUCE_WAIT waits for it (where MPI gives no serialized threads, the sum runs
 * at START).
 *
 * No collective waits forever. Each is started non-blocking and polled until it completes
 * or the timeout passes (tr_comm_mpi_set_timeout, [run] collective_timeout). Every rank
 * tells every other one, by a small message before each collective, which collective it
 * is about to join (its number and the host's phase: "torch, step 5, gradient bucket 2"),
 * so a rank that times out knows where each other rank last was and names the ones that
 * never came (dead, hung, or stuck in another collective). That message goes to stderr
 * and the job is stopped with MPI_Abort: a collective that never completed cannot be
 * cancelled, and every other rank would wait for it too.
 */
#ifndef TRIDENT_COMM_MPI_H
#define TRIDENT_COMM_MPI_H

#include "trident/kernels.h"
#include "trident/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when this process was started by an MPI launcher (mpirun / mpiexec of Open MPI or
 * MPICH: their environment variables), with *size the number of processes it started. */
int tr_comm_mpi_launched(int *size);

/* MPI initialised and the world communicator wrapped; argc/argv may be NULL. */
int tr_comm_mpi_open(int *argc, char ***argv, struct tr_comm **out, struct tr_error *err);
/* This rank's number among the ranks on its host (MPI_COMM_TYPE_SHARED): the GPU it takes
 * when each rank has one. */
int tr_comm_mpi_local_rank(const struct tr_comm *c);
/* Seconds a collective may take before the job is stopped (default 60). */
void tr_comm_mpi_set_timeout(struct tr_comm *c, double seconds);
/* Stops every rank of the job with code (after this rank said why). */
void tr_comm_mpi_abort(struct tr_comm *c, int code);
/* MPI finalised; NULL is a no-op. */
void tr_comm_mpi_close(struct tr_comm *c);

#ifdef __cplusplus
}
#endif
#endif
