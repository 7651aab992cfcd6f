/* Everything a run can check before its first step (internal to libtrident): every
 * listed backend loaded, initialised with its [backend.NAME] options and held to the
 * graphs' device, dtypes and training (its caps); the output paths writable; the
 * schedule possible for the task. Every problem is reported at once, one per line,
 * each naming the INI file and line and the valid values. */
#ifndef TRIDENT_BENCH_PREFLIGHT_H
#define TRIDENT_BENCH_PREFLIGHT_H

#include "trident/bench.h"

/* isolate: each backend probed in a child process. A plugin whose process dies in its
 * load, init or free (a signal, an exit, no answer within backend_timeout) is, with dead
 * given (an array of cfg->n_backends, zeroed), written to dead[b] and not counted as a
 * problem: the caller fails that backend's row and runs the others; with dead NULL it is
 * a problem named, as a bad option is. */
int tr_bench_preflight(const struct tr_config *cfg, const struct tr_graph *const *graphs, int n_graphs,
                       const struct tr_bench_opts *o, int isolate, struct tr_error *dead, struct tr_error *err);

/* init params for a backend of cfg: opts has room for TR_CONFIG_MAX_KV + 1 options. */
void tr_bench_backend_params(const struct tr_config *cfg, const struct tr_config_backend *cb, struct tr_option *opts,
                             struct tr_backend_params *params);

#endif
