/* The checks test_gemma.c and test_mistral.c share: the decoder LLMs (models/decoder)
 * against their Hugging Face fixtures (tests/fixtures/make_{gemma,mistral}_fixture.py),
 * their 7B presets' sizes, their config.json reader and their KV-cache pass. Each
 * function fails the running cmocka test with a message naming the model. */
#ifndef TRIDENT_TESTS_DECODERUTIL_H
#define TRIDENT_TESTS_DECODERUTIL_H

#include <stdint.h>
#include "modelutil.h"
#include "decoder/decoder.h"

struct tr_test_llm {
    const struct tr_model_desc *model;
    const char *weights;   /* NAME.safetensors */
    const char *io;        /* NAME_io.safetensors */
    const char *hint;      /* how to regenerate them */
};

/* The fixture of tr_model_NAME: tests/fixtures/NAME_tiny.safetensors and
 * NAME_tiny_io.safetensors, written by make_NAME_fixture.py. */
#define TR_TEST_LLM_FIXTURE(name)                                                         \
    {.model = &tr_model_##name,                                                           \
     .weights = TR_SOURCE_DIR "/tests/fixtures/" #name "_tiny.safetensors",               \
     .io = TR_SOURCE_DIR "/tests/fixtures/" #name "_tiny_io.safetensors",                 \
     .hint = " (regenerate with: python3 tests/fixtures/make_" #name "_fixture.py)"}

const struct tr_decoder_config *tr_test_llm_preset(const struct tr_model_desc *m, const char *name);
struct tr_graph *tr_test_llm_build(const struct tr_model_desc *m, const struct tr_decoder_config *c,
                                   enum tr_dtype dt, int64_t B, int64_t T);

/* `trident dump`'s path (tr_task_graph_build from an INI) on preset at bf16, batch 8,
 * seq_len 128: the graph builds without weights, has `expected` parameters (also what
 * tr_decoder_param_count says) and 2 bytes each. */
void tr_test_llm_check_size(const struct tr_model_desc *m, const char *preset, int64_t expected);

/* The tiny graph's PARAMs are the fixture's tensors (names and shapes), and back. */
void tr_test_llm_names_match(const struct tr_test_llm *t);

/* Run the fixture's batch through config c (weights from the fixture) on every backend
 * configuration; the logits at the kept positions must be within dt's tolerance of the
 * fixture's tensor `ref`, every logit finite. Returns the worst error seen. */
/* The same with the weights from `weights` (a file or a directory) and the reference
 * logits `ref_name` from ref_path (NULL: the fixture's io file). */
double tr_test_llm_predict_vs(const struct tr_test_llm *t, const struct tr_decoder_config *c, enum tr_dtype dt,
                              const char *weights, const char *ref_path, const char *ref_name);
double tr_test_llm_predict_vs_hf(const struct tr_test_llm *t, const struct tr_decoder_config *c, enum tr_dtype dt,
                                 const char *ref);

/* Relative difference of two logits tensors [B,T,V] at the positions where keep is 1. */
double tr_test_llm_kept_rel_diff(const struct tr_tensor *a, const struct tr_tensor *b, const struct tr_tensor *keep);

/* m's build of c for task in dt (batch 1, seq_len T) fails with status, with a message
 * that holds a and, unless it is NULL, b. */
void tr_test_llm_build_fails(const struct tr_model_desc *m, const struct tr_decoder_config *c, enum tr_task task,
                             enum tr_dtype dt, int64_t T, int status, const char *a, const char *b);

/* g's PARAM `name` is drawn from normal(mean, 0.02), as its attrs say. */
void tr_test_llm_expect_init(const struct tr_graph *g, const char *name, float mean);

/* An unknown preset is refused with the list of the ones there are. */
void tr_test_llm_unknown_preset(const struct tr_model_desc *m);

/* preset with hf_config = json resolves to preset's own values. */
void tr_test_llm_hf_config_matches(const struct tr_model_desc *m, const char *json, const char *preset);

/* A prefill of the first P tokens (present outputs) then a pass of the rest against that
 * cache gives the logits of one pass over all T; and a one-token step against a cache with
 * a free slot at its end (full_mask) gives the last position's. Torch backend, f32. */
void tr_test_llm_kv_cache(const struct tr_test_llm *t, const struct tr_decoder_config *c);

/* Greedy decoding of the fixture's batch on backend `be`, the way the generate task will
 * run it: one prefill pass (present, last_logits), then one token at a time through one
 * decode graph against a static cache of T + NEW - 2 slots (full_mask: the mask hides pads,
 * free slots and what the window leaves out), each step's keys and values written into
 * the cache by the host. Every step's logits within dt's tolerance of transformers'
 * generate(do_sample=False) raw logits, and exactly its tokens. */
void tr_test_llm_greedy_vs_hf(const struct tr_test_llm *t, const struct tr_decoder_config *c, enum tr_dtype dt,
                              const struct tr_test_backend *be);
/* tr_test_llm_greedy_vs_hf on every backend configuration in turn. */
void tr_test_llm_greedy_vs_hf_all(const struct tr_test_llm *t, const struct tr_decoder_config *c, enum tr_dtype dt);

/* make_inputs: the same seed gives the same batch, another seed another; left padding
 * with pad id 0, mask 0 and position 1; kept tokens mask 1, numbered from 0. */
void tr_test_llm_make_inputs(const struct tr_model_desc *m);

#endif
