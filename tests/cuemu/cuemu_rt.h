/* cuemu's runtime as the scheduler sees it (cuemu_rt.cpp): a launch is run at once, or
 * recorded while a stream captures; the opt-in shared memory of a kernel. */
#ifndef TRIDENT_CUEMU_RT_H
#define TRIDENT_CUEMU_RT_H

#include "cuemu.h"

namespace tr_cuemu {

enum { RT_SMEM_OPTIN = 232448 }; /* sm_90: 227 KiB a block may opt in to */

int rt_max_dynamic_smem(const void *kernel);
void rt_launch(const cfg_t &c, const void *kernel, body_fn body, void *arg, void *(*arg_copy)(const void *),
               void (*arg_free)(void *));
/* Runs the launch now; a cudaError_t (the launch's own, as cudaGetLastError reports it). */
int launch_now(const cfg_t &c, const void *kernel, body_fn body, void *arg);

} // namespace tr_cuemu

#endif
