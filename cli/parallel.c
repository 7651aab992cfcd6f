/* The processes of a run (cli.h, tr_cli_parallel_open): one, or the ranks an MPI launcher
 * started, joined through libtrident_mpi where it was built. */
#include <stdio.h>
#include <stdlib.h>
#include "cli.h"
#include "trident/backend.h"
#include "trident/config.h"
#ifdef TRIDENT_HAVE_MPI
#include "trident/comm_mpi.h"
#endif

/* What the launchers of Open MPI and MPICH leave in a rank's environment. */
int tr_cli_mpi_launched(int *size) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) {
            *size = atoi(v);
            return 1;
        }
    }
    *size = 1;
    return 0;
}

int tr_cli_parallel_open(struct tr_config *cfg, struct tr_comm **comm, struct tr_error *err) {
    *comm = NULL;
    int size = 1;
    const int launched = tr_cli_mpi_launched(&size);
    if (!launched && cfg->parallel != TR_PARALLEL_DATA) return TR_OK;
#ifdef TRIDENT_HAVE_MPI
    int rc = tr_comm_mpi_open(NULL, NULL, comm, err);
    if (rc) return tr_error_prefix(err, "%s: data parallel (MPI)", cfg->file);
    tr_comm_mpi_set_timeout(*comm, cfg->collective_timeout);
    cfg->ranks = (*comm)->size;
    cfg->rank = (*comm)->rank;
    cfg->joined = 1;
    /* whole lines: the launcher forwards every rank's output as it comes, and a table row
     * cut at a full buffer could have another rank's line spliced into it */
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* a GPU per rank: the ranks of a host take its devices in turn */
    if (cfg->device_type == TR_DEVICE_CUDA) cfg->device_index = tr_comm_mpi_local_rank(*comm);
    return TR_OK;
#else
    return tr_error_set(err, TR_ERR_UNSUPPORTED, "%s: %s, but this trident was built without MPI (install Debian's "
                        "libopenmpi-dev and build again: scripts/setup.sh does)", cfg->file,
                        launched ? "started by an MPI launcher" : "[run] parallel = data");
#endif
}

void tr_cli_parallel_close(struct tr_comm *comm) {
#ifdef TRIDENT_HAVE_MPI
    tr_comm_mpi_close(comm);
#else
    (void)comm;
#endif
}

int tr_cli_parallel_wait_root(struct tr_comm *comm, const struct tr_config *cfg, int *status, struct tr_error *err) {
#ifdef TRIDENT_HAVE_MPI
    int32_t st = *status;
    /* rank 0 runs every backend's steps meanwhile: as long as its backends may take */
    tr_comm_mpi_set_timeout(comm, cfg->collective_timeout + cfg->backend_timeout * cfg->n_backends);
    if (comm->set_phase) comm->set_phase(comm->user, "waiting for rank 0's one-process run (--scaling)");
    int rc = comm->bcast(comm->user, &st, sizeof st, 0, err);
    tr_comm_mpi_set_timeout(comm, cfg->collective_timeout);
    *status = st;
    return rc;
#else
    (void)comm, (void)cfg, (void)status;
    return tr_error_set(err, TR_ERR_UNSUPPORTED, "built without MPI");
#endif
}
