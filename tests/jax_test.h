/* What the jax backend's tests (test_jax_backend.c, test_jax_attention.c) share: the
 * backend linked as objects (jax_internal.h: so a test can look inside a program), the BERT tiny
 * fixtures, a cache directory under the run's scratch directory, BERT's tiny preset. */
#ifndef TRIDENT_TESTS_JAX_TEST_H
#define TRIDENT_TESTS_JAX_TEST_H

#include <dirent.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "testutil.h"
#include "backendutil.h"
#include "bert/bert.h"
#include "models.h"
#include "trident/autodiff.h"
#include "trident/train.h"
#include "trident/trident.h"

#include "../plugins/backend_jax/jax_internal.h"

#define FIXTURE TR_SOURCE_DIR "/tests/fixtures/bert_tiny.safetensors"
#define FIXTURE_IO TR_SOURCE_DIR "/tests/fixtures/bert_tiny_io.safetensors"
#define FIXTURE_GRADS TR_SOURCE_DIR "/tests/fixtures/bert_tiny_grads.safetensors"

/* A fresh cache directory under the group's scratch directory (tr_test_dir_setup). */
static inline void fresh_dir(char *out, size_t n, const char *name) {
    snprintf(out, n, "%s/%s", tr_test_dir, name);
    assert_int_equal(mkdir(out, 0700), 0);
}


static inline const struct tr_bert_config *tiny(void) {
    for (int i = 0; i < tr_model_bert.n_presets; i++)
        if (strcmp(tr_model_bert.presets[i].name, "tiny") == 0) return tr_model_bert.presets[i].config;
    fail_msg("bert has no tiny preset");
    return NULL;
}

/* ---- running the backend from its sources ---- */

static inline struct tr_jax_context *ctx_make(const char *cache_dir, const char *cc, int fuse) {
    struct tr_option opts[3];
    int n = 0;
    opts[n++] = (struct tr_option){.key = "cache_dir", .value = cache_dir, .file = "test.ini", .line = 2};
    if (cc) opts[n++] = (struct tr_option){.key = "cc", .value = cc, .file = "test.ini", .line = 3};
    if (!fuse) opts[n++] = (struct tr_option){.key = "fuse", .value = "false", .file = "test.ini", .line = 4};
    struct tr_backend_params prm = {.struct_size = sizeof prm, .abi_version = TR_ABI_VERSION,
                                    .device_type = TR_DEVICE_CPU, .options = opts, .n_options = n};
    void *ctx = NULL;
    struct tr_error err = {0};
    if (tr_jax_iface.init(tr_host_api_get(), &prm, &ctx, &err) != TR_OK) fail_msg("init: %s", err.msg);
    return ctx;
}

/* The planner's verifier on the program's buffers, and proof that it could fail: two
 * buffers alive at once moved onto the same bytes must be refused. */
static inline void check_arena(const struct tr_jax_program *p) {
    struct tr_error err = {0};
    if (tr_plan_verify(p->bufs, p->n_bufs, p->arena_bytes, &err) != TR_OK) fail_msg("arena: %s", err.msg);
    int64_t sum = 0;
    for (int i = 0; i < p->n_bufs; i++) {
        assert_true(p->bufs[i].offset % JAX_ALIGN == 0);
        assert_true(p->bufs[i].first <= p->bufs[i].last);
        sum += p->bufs[i].size;
    }
    assert_true(p->arena_bytes <= sum + (int64_t)JAX_ALIGN * p->n_bufs);
    for (int i = 0; i < p->n_bufs; i++)
        for (int j = i + 1; j < p->n_bufs; j++) {
            const struct tr_plan_buf *a = &p->bufs[i], *b = &p->bufs[j];
            if (!a->size || !b->size || a->last < b->first || b->last < a->first) continue;
            struct tr_plan_buf *copy = malloc(sizeof *copy * (size_t)p->n_bufs);
            assert_non_null(copy);
            memcpy(copy, p->bufs, sizeof *copy * (size_t)p->n_bufs);
            copy[j].offset = copy[i].offset;
            assert_int_equal(tr_plan_verify(copy, p->n_bufs, p->arena_bytes + copy[j].size, &err), TR_ERR_INTERNAL);
            free(copy);
            return;
        }
}

static inline struct tr_jax_program *compile_ok(struct tr_jax_context *ctx, const struct tr_graph *g) {
    struct tr_jax_program *p = NULL;
    struct tr_error err = {0};
    if (tr_jax_compile(ctx, (tr_graph_t)g, &p, &err) != TR_OK) fail_msg("compile: %s", err.msg);
    check_arena(p);
    return p;
}

static inline struct tr_tensor *alloc_outputs(const struct tr_graph *g) {
    int n = tr_graph_n_outputs(g);
    struct tr_tensor *out = calloc((size_t)n, sizeof *out);
    assert_non_null(out);
    for (int i = 0; i < n; i++) {
        struct tr_tensor t = tr_node_tensor(g, tr_graph_output(g, i));
        out[i] = tr_test_tensor((enum tr_dtype)t.dtype, t.ndim, t.shape);
    }
    return out;
}

static inline void free_tensors(struct tr_tensor *t, int n) {
    for (int i = 0; i < n; i++) tr_test_tensor_free(&t[i]);
    free(t);
}

#endif
