/* A run's own inputs, its outputs file and the reference it is held to (internal to
 * libtrident; bench.h says what the user sees).
 *
 *   [run] inputs = F     the graph's inputs by name from a safetensors file, checked for
 *                        names, shapes and dtypes (i64 ids -> i32, f32 -> bf16/f16 and ints
 *                        -> a float input are converted, as PyTorch writes them; a value
 *                        that does not fit or is not exact is refused); a tensor the graph
 *                        has no input for is refused.
 *   --outputs F          every backend's outputs, "BACKEND/OUTPUT".
 *   [run] reference = F  every backend against the file's tensors of the same names; a name
 *                        "BACKEND/OUTPUT" (a file of --outputs) holds that backend alone. */
#ifndef TRIDENT_BENCH_IO_H
#define TRIDENT_BENCH_IO_H

#include "trident/bench.h"
#include "trident/safetensors.h"

/* Fill ts[0..n-1] (host tensors shaped as the graph's inputs 0..n-1 of g) from path. */
int tr_bench_inputs_load(const struct tr_config *cfg, const struct tr_graph *g, int n, struct tr_tensor *ts,
                         struct tr_error *err);

/* The node whose values are the labels of cross-entropy node `loss`, through reshapes,
 * casts, one slice (*slice, else -1) and a concatenation with ignored constants (a causal
 * LM's labels[:, 1:] and an ignored last column); -1 when another op makes them. */
int tr_bench_loss_labels(const struct tr_graph *g, int loss, int *slice);
/* Whether slice node `slice` (-1: none) keeps element e of t, the tensor it slices. */
int tr_bench_slice_keeps(const struct tr_graph *g, int slice, const struct tr_tensor *t, int64_t e);

/* Named host tensors collected during a run, written to one file at the end. */
struct tr_bench_outputs {
    int n, cap;
    char **names;
    struct tr_tensor *ts;       /* each owns its data (tr_host_alloc) */
};
/* A copy of t under "label/name". */
int tr_bench_outputs_add(struct tr_bench_outputs *o, const char *label, const char *name, const struct tr_tensor *t,
                         struct tr_error *err);
int tr_bench_outputs_write(const struct tr_bench_outputs *o, const char *path, struct tr_error *err);
void tr_bench_outputs_free(struct tr_bench_outputs *o);

/* The reference file, opened and checked against the graph's outputs before any backend
 * runs: each of its tensors must be an output of g (by name) with its shape, or, for
 * fit, "loss" (one value per step, any count). */
struct tr_bench_reference {
    struct tr_safetensors *st;  /* NULL: no [run] reference */
    const char *extra_name;     /* a tensor the task makes beside g's outputs (generate's */
    struct tr_tensor extra;     /* "tokens"): its name, dtype and shape; NULL name: none */
};
int tr_bench_reference_open(const struct tr_config *cfg, const struct tr_graph *g, struct tr_bench_reference *r,
                            struct tr_error *err);
/* The same, the file's extra_name (if it has one) checked against extra's dtype class and
 * shape (extra.data unused). */
int tr_bench_reference_open_extra(const struct tr_config *cfg, const struct tr_graph *g, const char *extra_name,
                                  const struct tr_tensor *extra, struct tr_bench_reference *r, struct tr_error *err);
/* The file's extra tensor (if any; ids, integers) against t, after
 * tr_bench_reference_compare: every element equal, else the first difference named. */
void tr_bench_reference_compare_extra(const struct tr_bench_reference *r, const struct tr_tensor *t, double tolerance,
                                      struct tr_bench_row *row);
/* row's ref_* from the outputs out[0..n_out-1] of g and, for fit, the losses of every step. */
void tr_bench_reference_compare(const struct tr_bench_reference *r, const struct tr_graph *g, int n_out,
                                const struct tr_tensor *out, const double *losses, int64_t n_losses,
                                double tolerance, struct tr_bench_row *row);
void tr_bench_reference_close(struct tr_bench_reference *r);

#endif
