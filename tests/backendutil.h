/* Running a graph on a backend configuration the way the tests need it: loaded from the
 * build tree, outputs allocated here and poisoned before every step, any failure a
 * cmocka failure naming the configuration. */
#ifndef TRIDENT_BACKENDUTIL_H
#define TRIDENT_BACKENDUTIL_H

#include "testutil.h"
#include "trident/backend.h"
#include "trident/graph.h"

struct tr_test_backend {
    const char *label, *plugin, *mode;
};

/* torch, torch:reduce-overhead, tf, jax. */
#define TR_TEST_N_BACKENDS 4
extern const struct tr_test_backend tr_test_backends[TR_TEST_N_BACKENDS];

/* Run g `steps` times; out[] (one per graph output) is allocated here (free with
 * tr_test_tensor_free). jax_cache_dir is the jax backend's cache_dir (NULL: its default).
 * st, if not NULL, receives the stats after the last step. */
void tr_test_run_backend(const struct tr_test_backend *b, const char *jax_cache_dir, struct tr_graph *g,
                         const struct tr_tensor *in, int steps, struct tr_tensor *out, struct tr_backend_stats *st);

#endif
