/* The plugin IR (pir.h). */
#include "pir.h"

int64_t tr_pir_numel(const struct tr_pir_node *n) {
    int64_t c = 1;
    for (int i = 0; i < n->ndim; i++) c *= n->shape[i];
    return c;
}

size_t tr_pir_nbytes(const struct tr_pir_node *n) {
    return (size_t)tr_pir_numel(n) * tr_dtype_size((enum tr_dtype)n->dtype);
}
