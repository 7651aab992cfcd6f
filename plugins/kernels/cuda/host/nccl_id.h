/* NCCL's unique id shared by the ranks of a data-parallel run (cuda/collective.c): made
 * on rank 0, sent to every rank over the host's communicator (kernels.h, struct tr_comm).
 * Plain C, built without CUDA too, so that it is tested on machines without a GPU. */
#ifndef TRIDENT_CUDA_NCCL_ID_H
#define TRIDENT_CUDA_NCCL_ID_H

#include <stddef.h>
#include "trident/kernels.h"

/* On rank 0, make_id(id, user) fills id (nonzero: it failed); then every rank gets rank
 * 0's status and, when it is 0, its id_bytes at id. Every rank calls it at the same point
 * (the first ALLREDUCE of a context), as the broadcasts require. */
int tr_cuda_nccl_share_id(const struct tr_comm *comm, int (*make_id)(void *id, void *user), void *user, void *id,
                          size_t id_bytes, struct tr_error *err);

#endif
