/* get_stats' common parts (stats.h). */
#include <stdio.h>
#include <string.h>
#include "stats.h"

int tr_backend_stats_start(const char *backend, struct tr_backend_stats *st, struct tr_error *err) {
    if (!st) return tr_error_set(err, TR_ERR_INVALID, "%s: get_stats without a stats record", backend);
    memset(st, 0, sizeof *st);
    st->struct_size = sizeof *st;
    st->abi_version = TR_ABI_VERSION;
    return TR_OK;
}

const char *tr_human_bytes(uint64_t n, char *buf, size_t size) {
    if (n < 1024) snprintf(buf, size, "%llu B", (unsigned long long)n);
    else if (n < (1u << 20)) snprintf(buf, size, "%.1f KiB", (double)n / 1024);
    else snprintf(buf, size, "%.1f MiB", (double)n / (1 << 20));
    return buf;
}
