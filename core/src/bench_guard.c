/* The weights' guard (bench_guard.h): a 64-bit checksum per tensor, one pass over its
 * bytes, taken after each command of a backend that runs in this process. */
#include <stdlib.h>
#include <string.h>
#include "bench_guard.h"
#include "trident/ops.h"

/* Four independent multiply-xor lanes over 8-byte words (a memory-speed pass), folded. */
uint64_t tr_bench_checksum(const void *data, size_t n) {
    const unsigned char *p = data;
    const uint64_t k = 0x9e3779b97f4a7c15ull;
    uint64_t h[4] = {1, 2, 3, 4};
    size_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int l = 0; l < 4; l++) {
            uint64_t w;
            memcpy(&w, p + i + 8 * (size_t)l, 8);
            h[l] = (h[l] ^ w) * k;
            h[l] ^= h[l] >> 29;
        }
    uint64_t t = (uint64_t)n;
    for (; i < n; i++) t = (t ^ p[i]) * k;
    return (h[0] ^ (h[1] * 3) ^ (h[2] * 5) ^ (h[3] * 7) ^ t) * k;
}

static uint64_t node_sum(const struct tr_graph *g, int id) {
    struct tr_tensor t = tr_node_tensor(g, id);
    return tr_bench_checksum(tr_node_data(g, id), tr_tensor_nbytes(&t));
}

int tr_bench_guard_init(struct tr_bench_guard *gd, const struct tr_graph *g, struct tr_error *err) {
    memset(gd, 0, sizeof *gd);
    const int n = tr_graph_n_nodes(g), nu = tr_graph_n_updates(g);
    gd->ids = malloc(sizeof *gd->ids * (size_t)(n ? n : 1));
    gd->sums = malloc(sizeof *gd->sums * (size_t)(n ? n : 1));
    if (!gd->ids || !gd->sums) {
        tr_bench_guard_free(gd);
        return tr_error_set(err, TR_ERR_NOMEM, "bench: out of memory for the weights' checksums");
    }
    for (int id = 0; id < n; id++) {
        const int op = tr_node_op(g, id);
        if ((op != TR_OP_PARAM && op != TR_OP_CONST) || !tr_node_data(g, id)) continue;
        int updated = 0;
        for (int u = 0; u < nu && !updated; u++) updated = tr_graph_update_param(g, u) == id;
        if (updated) continue; /* trained state: every step writes it */
        struct tr_tensor t = tr_node_tensor(g, id);
        gd->ids[gd->n] = id;
        gd->sums[gd->n++] = node_sum(g, id);
        gd->bytes += tr_tensor_nbytes(&t);
    }
    return TR_OK;
}

int tr_bench_guard_check(struct tr_bench_guard *gd, const struct tr_graph *g) {
    int changed = -1;
    for (int i = 0; i < gd->n; i++) {
        const uint64_t s = node_sum(g, gd->ids[i]);
        if (s != gd->sums[i] && changed < 0) changed = gd->ids[i];
        gd->sums[i] = s;
    }
    return changed;
}

void tr_bench_guard_free(struct tr_bench_guard *gd) {
    free(gd->ids);
    free(gd->sums);
    memset(gd, 0, sizeof *gd);
}
