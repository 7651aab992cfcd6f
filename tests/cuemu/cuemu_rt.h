/* Between cuemu's runtime (cuemu_rt.cpp: tr_cuemu::run queues a launch, or records it
 * while a stream captures) and its scheduler (cuemu_sched.cpp: launch_now runs it): the
 * shared memory a kernel opted in to, and the device's limit. */
#ifndef TRIDENT_CUEMU_RT_H
#define TRIDENT_CUEMU_RT_H

#include "cuemu.h"

namespace tr_cuemu {

enum { RT_SMEM_OPTIN = 232448 }; /* sm_90: 227 KiB a block may opt in to */

int rt_max_dynamic_smem(const void *kernel);
/* Runs the launch now; a cudaError_t (the launch's own, as cudaGetLastError reports it). */
int launch_now(const cfg_t &c, const void *kernel, body_fn body, void *arg);

} // namespace tr_cuemu

#endif
