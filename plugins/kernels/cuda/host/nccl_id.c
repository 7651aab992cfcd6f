/* NCCL's unique id over the host's communicator (nccl_id.h). */
#include <stdint.h>
#include "nccl_id.h"

int tr_cuda_nccl_share_id(const struct tr_comm *comm, int (*make_id)(void *id, void *user), void *user, void *id,
                          size_t id_bytes, struct tr_error *err) {
    if (!comm || !make_id || !id)
        return tr_error_set(err, TR_ERR_INVALID, "nccl: sharing the id needs a communicator, a maker and a buffer");
    /* rank 0's status first, so that a failure there is every rank's error, not a hang */
    int32_t status = comm->rank == 0 ? make_id(id, user) : 0;
    int rc = comm->bcast(comm->user, &status, sizeof status, 0, err);
    if (rc) return tr_error_prefix(err, "nccl: sharing rank 0's id");
    if (status)
        return tr_error_set(err, TR_ERR_DEVICE, "nccl: rank 0 could not make the unique id (ncclGetUniqueId: %d)",
                            (int)status);
    rc = comm->bcast(comm->user, id, id_bytes, 0, err);
    return rc ? tr_error_prefix(err, "nccl: sharing rank 0's id") : 0;
}
