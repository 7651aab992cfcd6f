/* Between cuemu's runtime (cuemu_rt.cpp: tr_cuemu::run queues a launch, or records it
 * while a stream captures) and its scheduler (cuemu_sched.cpp: launch_now runs it): the
 * shared memory a kernel opted in to, and the device's limit. And what the stand-ins for
 * the CUDA libraries outside cuemu_rt.cpp (cuemu_cudnn.cpp: cuDNN) share with it: the
 * queue, the capture's refusals, and elements of f32, bf16 and f16 arrays. */
#ifndef TRIDENT_CUEMU_RT_H
#define TRIDENT_CUEMU_RT_H

#include "cuemu.h"

#include <library_types.h>
#include <functional>

namespace tr_cuemu {

enum { RT_SMEM_OPTIN = 232448 }; /* sm_90: 227 KiB a block may opt in to */

int rt_max_dynamic_smem(const void *kernel);
/* Runs the launch now; a cudaError_t (the launch's own, as cudaGetLastError reports it). */
int launch_now(const cfg_t &c, const void *kernel, body_fn body, void *arg);

/* Queues f on the one in-order queue: run now, or recorded while a stream captures (its
 * graph runs it at each launch). A library call's device work goes through here, with
 * everything it reads from descriptors and host pointers captured by value. */
void submit(std::function<void()> f);
/* A synchronous call (what: its name) while a capture is on: reported, the capture
 * spoiled (CUDA's cudaErrorStreamCaptureUnsupported); true then, else false. */
bool refuse_in_capture(const char *what);
/* Element i of an array of CUDA_R_32F, CUDA_R_16BF or CUDA_R_16F; a store rounds to
 * nearest even through float, as a kernel's f32 result would be. */
double ld_elem(const void *p, cudaDataType t, size_t i);
void st_elem(void *p, cudaDataType t, size_t i, double v);

} // namespace tr_cuemu

#endif
