/* What every execute checks on the caller's tensors before it touches one: the counts
 * against the graph's, then each tensor against its graph value (dtype and shape, data
 * where the value has bytes, contiguous, in host memory). Messages name the backend,
 * "input"/"output", the index and the value's name. */
#ifndef TRIDENT_PLUGIN_IO_H
#define TRIDENT_PLUGIN_IO_H

#include <stddef.h>
#include "pir.h"

/* One tensor t against the value it stands for (dtype, ndim, shape, nbytes, name). */
int tr_io_check_tensor(const char *backend, const char *what, int i, const char *name, int dtype, int ndim,
                       const int64_t *shape, size_t nbytes, const struct tr_tensor *t, struct tr_error *err);

/* The counts: n_inputs and n_outputs against the graph's, and arrays where there are any. */
int tr_io_check_counts(const char *backend, int n_inputs, const struct tr_tensor *inputs, int n_outputs,
                       const struct tr_tensor *outputs, int graph_in, int graph_out, struct tr_error *err);

/* Both, for a program that runs the plugin IR ir (its inputs and results). */
int tr_io_check_pir(const char *backend, const struct tr_pir *ir, int n_inputs, const struct tr_tensor *inputs,
                    int n_outputs, const struct tr_tensor *outputs, struct tr_error *err);

#endif
