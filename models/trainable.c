/* The trainable hook of the models whose fit graph holds only what fit trains. */
#include "models.h"

int tr_model_trainable_all(const void *config, const struct tr_graph *g, int *ids, int max, int *n,
                           struct tr_error *err) {
    (void)config;
    if (!g || !n || max < 0 || (max > 0 && !ids))
        return tr_error_set(err, TR_ERR_INVALID, "trainable: NULL argument or max < 0");
    int k = tr_graph_n_params(g);
    for (int i = 0; i < k && i < max; i++) ids[i] = tr_graph_param(g, i);
    *n = k;
    if (k > max) return tr_error_set(err, TR_ERR_INVALID, "trainable: %d parameters, room for %d", k, max);
    return TR_OK;
}
