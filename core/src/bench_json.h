/* A run's report as a cJSON document (internal to libtrident): what tr_bench_write_json
 * writes, for writers that put reports inside documents of their own (suite.c). */
#ifndef TRIDENT_BENCH_JSON_H
#define TRIDENT_BENCH_JSON_H

#include <cjson/cJSON.h>
#include "trident/bench.h"

/* The report's document (docs/report.md); NULL when out of memory. The caller deletes it. */
cJSON *tr_bench_json(const struct tr_bench_report *rep);
/* o[key] = s as valid UTF-8 (an invalid byte becomes U+FFFD: tr_utf8_sanitize). */
cJSON *tr_json_add_str(cJSON *o, const char *key, const char *s);
/* root printed into path, the file named in err when that fails. */
int tr_json_write(const cJSON *root, const char *path, struct tr_error *err);

#endif
