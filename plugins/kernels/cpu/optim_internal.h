/* Private to the cpu kernels: the binder of ADAMW_STEP (optim.c), used by dispatch.c.
 * It checks the call's tensors once without running the kernel: a zeroed stand-in of the
 * step (bind.c's dry run) would be refused, as step is checked >= 1 on every call. */
#ifndef TRIDENT_OPTIM_INTERNAL_H
#define TRIDENT_OPTIM_INTERNAL_H

#include "cpu_internal.h"

int tr_cpu_adamw_step_bind(struct tr_kernels *k, struct tr_kernel_call *c, struct tr_error *err);

#endif
