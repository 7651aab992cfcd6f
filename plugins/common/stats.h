/* What every get_stats writes the same way: the record's header, and byte counts in its
 * notes as people read them. */
#ifndef TRIDENT_PLUGIN_STATS_H
#define TRIDENT_PLUGIN_STATS_H

#include <stddef.h>
#include <stdint.h>
#include "trident/backend.h"

/* A record to fill (else an error naming the backend), zeroed and stamped with its size
 * and our ABI version. */
int tr_backend_stats_start(const char *backend, struct tr_backend_stats *st, struct tr_error *err);

/* "812 B", "12.3 KiB", "4.0 MiB" into buf; returns buf. */
const char *tr_human_bytes(uint64_t n, char *buf, size_t size);

#endif
