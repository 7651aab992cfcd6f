/* The host table every plugin receives from tr_backend_entry. Generated from
 * TR_HOST_API_LIST, the same list that declares struct tr_host_api, so a slot cannot
 * be left out or bound to a function of another signature (that is an incompatible
 * pointer assignment, an error under -Werror). */
#include <stdlib.h>
#include "trident/backend.h"
#include "trident/graph.h"
#include "trident/kernels.h"
#include "trident/loader.h"
#include "trident/log.h"

void *tr_host_api_alloc(size_t nbytes) { return malloc(nbytes); }
void tr_host_api_free(void *p) { free(p); }

// clang-format off
static const struct tr_host_api host_api = {
    .struct_size = sizeof(struct tr_host_api),
    .abi_version = TR_ABI_VERSION,
#define TR_HOST_API_INIT_(ret, slot, impl, params) .slot = impl,
    TR_HOST_API_LIST(TR_HOST_API_INIT_)
#undef TR_HOST_API_INIT_
};
// clang-format on

const struct tr_host_api *tr_host_api_get(void) { return &host_api; }
