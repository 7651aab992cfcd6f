/* execute's argument checks, written once (io.h). */
#include "io.h"

int tr_io_check_tensor(const char *backend, const char *what, int i, const char *name, int dtype, int ndim,
                       const int64_t *shape, size_t nbytes, const struct tr_tensor *t, struct tr_error *err) {
    char want[128], got[128];
    if (!name) name = "";
    if (t->dtype != dtype || !tr_shape_equal(t->ndim, t->shape, ndim, shape))
        return tr_error_set(err, TR_ERR_SHAPE, "%s: %s %d ('%s'): got %s%s, expected %s%s", backend, what, i, name,
                            tr_dtype_name((enum tr_dtype)t->dtype), tr_shape_str(t->ndim, t->shape, got, sizeof got),
                            tr_dtype_name((enum tr_dtype)dtype), tr_shape_str(ndim, shape, want, sizeof want));
    if (!t->data && nbytes > 0)
        return tr_error_set(err, TR_ERR_INVALID, "%s: %s %d ('%s') has no data", backend, what, i, name);
    if (!tr_tensor_is_contiguous(t))
        return tr_error_set(err, TR_ERR_INVALID, "%s: %s %d ('%s') is not contiguous", backend, what, i, name);
    if (t->device != TR_DEVICE_CPU)
        return tr_error_set(err, TR_ERR_INVALID, "%s: %s %d ('%s') is not in host memory", backend, what, i, name);
    return TR_OK;
}

int tr_io_check_counts(const char *backend, int n_inputs, const struct tr_tensor *inputs, int n_outputs,
                       const struct tr_tensor *outputs, int graph_in, int graph_out, struct tr_error *err) {
    if ((n_inputs > 0 && !inputs) || (n_outputs > 0 && !outputs))
        return tr_error_set(err, TR_ERR_INVALID, "%s: execute with %d inputs and %d outputs but no arrays", backend,
                            n_inputs, n_outputs);
    if (n_inputs != graph_in || n_outputs != graph_out)
        return tr_error_set(err, TR_ERR_INVALID, "%s: execute with %d inputs and %d outputs, the graph has %d and %d",
                            backend, n_inputs, n_outputs, graph_in, graph_out);
    return TR_OK;
}

static int check_node(const char *backend, const struct tr_pir *ir, const char *what, int i, int id,
                      const struct tr_tensor *t, struct tr_error *err) {
    const struct tr_pir_node *n = &ir->nodes[id];
    return tr_io_check_tensor(backend, what, i, n->name, n->dtype, n->ndim, n->shape, tr_pir_nbytes(n), t, err);
}

int tr_io_check_pir(const char *backend, const struct tr_pir *ir, int n_inputs, const struct tr_tensor *inputs,
                    int n_outputs, const struct tr_tensor *outputs, struct tr_error *err) {
    int rc = tr_io_check_counts(backend, n_inputs, inputs, n_outputs, outputs, ir->n_inputs, ir->n_results, err);
    for (int i = 0; rc == TR_OK && i < n_inputs; i++) rc = check_node(backend, ir, "input", i, ir->inputs[i], &inputs[i], err);
    for (int i = 0; rc == TR_OK && i < n_outputs; i++)
        rc = check_node(backend, ir, "output", i, ir->outputs[i], &outputs[i], err);
    return rc;
}
