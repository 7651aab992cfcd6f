/* trident — the generate task: text generation with a KV cache, on one backend.
 *
 * A model's generate passes (model.h, struct tr_generate_i) are built once for a batch,
 * a prompt length T and max_length; a tr_generator compiles both on one backend (each
 * once). One call, tr_generator_run, is one whole generate of the batch (the Keras
 * benchmark's step): the prefill pass over the prompts gives the first new token, then
 * the decode pass runs once per further token (max_length - T new tokens in all,
 * max_length - T - 1 decode passes), fed its position through its inputs so its shapes
 * never change; between passes the host chooses the tokens:
 *   greedy   argmax of the logits (the lowest id on a tie), as HF's do_sample=False;
 *   top_k    softmax(logits / temperature) over the top_k largest, drawn with a
 *            counter-based generator keyed by (seed, sample, position): the same seed
 *            gives the same tokens on every backend and every call.
 *   top_p    softmax(logits / temperature) over the most likely tokens until their
 *            probability reaches top_p (keras_hub's TopPSampler; transformers' top_p
 *            with top_k = 0), drawn as top_k's but walking the nucleus in vocabulary
 *            order (as transformers' multinomial over the masked probabilities), so
 *            logits that differ a little move each token's share a little. With top_k
 *            given as well (either sampling): transformers' chain, the nucleus among
 *            the top_k largest.
 *
 * The KV cache ([generate] kv_cache):
 *   state    (the default) PARAMs of both passes that each pass updates in place
 *            (tr_graph_add_update, donated under ABI 1.1): a backend keeps the cache in
 *            its own memory and a decode pass moves only the token's small inputs (ids,
 *            position, mask, the slot). Core owns the cache's host memory (one buffer per
 *            cache tensor, zeroed once; stale slots are masked, so nothing is reset
 *            between calls) and binds it to both passes, so a backend that uses PARAM
 *            memory in place (every cpu backend) sees one cache in both programs. On a
 *            device this relies on the backend sharing PARAM device memory across the
 *            programs of one backend instance (the prefill program's cache writes must
 *            be what the decode program reads); a backend that uploads a copy per
 *            program would decode against an empty cache.
 *   inputs   host memory, the decode pass's inputs: the whole cache crosses into the
 *            backend every token and the host writes each pass's new entries into it
 *            (the ABI 1.0 layout; kept to measure what the copy costs).
 * One generator runs at a time on one tr_generate_graphs (they share its cache).
 *
 * [generate] keys (tr_generate_config_resolve; errors name FILE:LINE, key and value):
 *   max_length   50      prompt + new tokens (the Keras benchmark's max_length)
 *   prompt_len   5       T (the benchmark's 5-word prompts); less than max_length
 *   sampling     greedy  greedy | top_k | top_p (top_k and top_p both given: the chain)
 *   top_k        50      1 .. TR_GENERATE_TOP_K_MAX (vocab_size when larger)
 *   top_p        0.9     (0, 1]
 *   temperature  1.0
 *   seed         [run] seed
 *   kv_cache     state   state | inputs (above)
 *   prompt       (none)  the prompt as text, every sample's (tr_generate_text_prompt);
 *                        without it (or prompts) the prompts are synthetic, from the seed
 *   prompts      (none)  a file of prompts, one a line (blank lines skipped), relative to
 *                        the INI's directory: sample b takes prompt b mod their count
 *   tokenizer    (the [run] weights' directory)  the model's tokenizer file, or its
 *                        directory, relative to the INI's
 */
#ifndef TRIDENT_GENERATE_H
#define TRIDENT_GENERATE_H

#include <stdint.h>
#include "trident/backend.h"
#include "trident/config.h"
#include "trident/graph.h"
#include "trident/loader.h"
#include "trident/model.h"
#include "trident/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TR_GENERATE_TOP_K_MAX 1024

struct tr_generate_config {
    int64_t max_length;
    int64_t prompt_len;
    char sampling[64];          /* "greedy", "top_k" or "top_p"; "top_k+top_p" once resolved with both */
    int64_t top_k;
    double top_p;
    double temperature;
    int64_t seed;
    int top_k_sampling;         /* sampling == "top_k" */
    int top_p_sampling;         /* sampling == "top_p", or top_k and top_p both given */
    int64_t top_p_top_k;        /* top_p among the top_k largest (both given); 0: all */
    char kv_cache[64];          /* "state" or "inputs" (string keys are 64 bytes) */
    int cache_inputs;           /* kv_cache == "inputs" */
};

/* The [generate] keys of a token generate besides prompt, prompts and tokenizer, each with
 * its range and meaning (for `trident list MODEL`); *n of them. */
const struct tr_model_key *tr_generate_keys(int *n);

/* Defaults (seed: run_seed), then the [generate] section of cfg (may be NULL). Checks
 * sampling's value and prompt_len < max_length. */
int tr_generate_config_resolve(const struct tr_config *cfg, uint64_t run_seed, struct tr_generate_config *gc,
                               struct tr_error *err);

/* Prompts given as text ([generate] prompt, or a file of them): the model's tokenizer (its
 * text_open), each prompt and its ids, which the run prints its text with. */
struct tr_generate_text {
    char tokenizer[TR_CONFIG_PATH];
    void *tok;                  /* the model's, NULL without prompts */
    int n;                      /* prompts (1 for [generate] prompt) */
    char **prompt;              /* each one's text */
    int32_t **ids;              /* each one's n_ids[k] ids */
    int *n_ids;
};

/* [generate] prompt or prompts, and tokenizer, of cfg into text for a batch of `batch`
 * samples; without them text->tok is NULL and nothing else changes. With them,
 * gc->prompt_len becomes the longest prompt's token count unless [generate] prompt_len
 * gives more (every prompt is left-padded to it); fewer, more prompts than samples, or a
 * max_length with no room for a new token, is an error naming the key. A model whose
 * generate reads no text refuses the keys. */
int tr_generate_text_prompt(const struct tr_config *cfg, const struct tr_model_desc *m, const void *config,
                            int64_t batch, struct tr_generate_config *gc, struct tr_generate_text *text,
                            struct tr_error *err);
void tr_generate_text_free(const struct tr_model_desc *m, struct tr_generate_text *text);
/* A [generate] prompts file: one prompt a line ("\r\n" too), blank lines skipped, into
 * *lines (*n of them; one block: free(*lines) frees them all). No prompt is an error. */
int tr_generate_read_prompts(const char *path, char ***lines, int *n, struct tr_error *err);

/* The two passes of a model, built from a resolved model config, and `weights`: a graph
 * of the model's PARAMs alone (the passes' PARAMs less the cache; the same names, shapes
 * and inits), which the weights are made or loaded on (tr_weights_from_seed / _load), so
 * the cache is never looked for in a weights file nor counted as parameters. Then
 * tr_generate_share_params binds both passes' PARAMs to the weights' memory by name and,
 * with the cache as state, allocates the cache and binds it to both passes. */
struct tr_generate_graphs {
    struct tr_generate_opts opts;
    struct tr_generate_plan plan;
    struct tr_graph *prefill, *decode, *weights;
    void **cache;               /* plan.n_cache host buffers (cache as state), owned here */
    uint64_t cache_bytes;
};

int tr_generate_build(const struct tr_model_desc *m, const void *config, const struct tr_generate_opts *o,
                      struct tr_generate_graphs *gg, struct tr_error *err);
void tr_generate_graphs_free(struct tr_generate_graphs *gg);
int tr_generate_share_params(struct tr_generate_graphs *gg, struct tr_error *err);

/* Bytes a run needs, estimated before anything is allocated: the weights, the cache (its
 * tensors and the decode pass's inputs), and the activations of the larger pass (every
 * node's output counted, no reuse: an upper bound). */
struct tr_generate_memory {
    uint64_t weights, kv_cache, activations, total;
};
void tr_generate_memory_estimate(const struct tr_generate_graphs *gg, struct tr_generate_memory *mem);
/* MemAvailable of /proc/meminfo in bytes (sysinfo's free + buffers where it is missing). */
int tr_host_mem_available(uint64_t *bytes, struct tr_error *err);

/* One backend's compiled passes, cache and buffers. The model config and gg stay the
 * caller's and must outlive the generator. */
struct tr_generator;

int tr_generator_init(struct tr_backend *be, const struct tr_model_desc *m, const void *config,
                      const struct tr_generate_graphs *gg, const struct tr_generate_config *gc,
                      struct tr_generator **out, struct tr_error *err);
void tr_generator_free(struct tr_generator *gen);

struct tr_generate_times {
    double prefill_ms;          /* the prefill pass, its cache write and the first tokens */
    double decode_ms;           /* every decode pass, cache write and token choice */
    double cache_write_ms;      /* of which: the host writing new entries into the cache
                                   (kv_cache = inputs; 0 with the cache as state) */
    int64_t decode_passes;
};

/* Called after each pass with its logits [B,V] (host; valid during the call); step 0 is
 * the prefill's. */
typedef void (*tr_generate_logits_fn)(void *user, int64_t step, const struct tr_tensor *logits);

/* One generate call for the batch of prompts `prompt` (the prefill inputs, host).
 * tokens: [B, max_length - T] new tokens, written here. times and on_logits may be NULL. */
int tr_generator_run(struct tr_generator *gen, const struct tr_tensor *prompt, int32_t *tokens,
                     struct tr_generate_times *times, tr_generate_logits_fn on_logits, void *user,
                     struct tr_error *err);

/* Stats of the decode program after its last execute, and of the prefill program. */
int tr_generator_stats(struct tr_generator *gen, struct tr_backend_stats *decode, struct tr_backend_stats *prefill,
                       struct tr_error *err);
/* Programs compiled and passes executed so far: (2, calls, calls · decode_passes). */
void tr_generator_counts(const struct tr_generator *gen, int *compiles, int64_t *prefills, int64_t *decodes);

/* The token the config chooses from row b of logits (contiguous host [B,V]) for sequence
 * position pos (the position the token will take; top_k and top_p draw number (seed, b,
 * pos)); -1 when top_p finds no memory for its candidates. */
int32_t tr_generate_pick(const struct tr_generate_config *gc, const struct tr_tensor *logits, int64_t b,
                         int64_t pos);
/* For top_k and top_p: the tokens another backend may draw here when its logits differ
 * from these by at most e each. ids[0] is this pick, then the others. Such logits move
 * every edge between the shares by less than delta = tanh(e/2·temperature); top_k's
 * order (largest first) may swap tokens whose logits are within 2e; top_p's nucleus may
 * gain or lose the tokens near its threshold (the mass before them within delta of
 * top_p, or their logits within 2e of a neighbour's; with top_k, those within 2e of the
 * k-th largest), which moves every share by up to twice their mass more. Returns how
 * many (ids holds the first max); more than max where it cannot say (the neighbourhood
 * is wider than the 256 tokens nearest the logit it is centred on): any token may be
 * drawn there. -1 out of memory. Greedy: the pick alone (near ties there are told from
 * the logits' gap). */
int tr_generate_pick_reach(const struct tr_generate_config *gc, const struct tr_tensor *logits, int64_t b,
                           int64_t pos, double e, int32_t *ids, int max);

/* The runner's generate task (generate_bench.c), called by tr_bench_run with the task
 * graph built: the memory check (the estimate against MemAvailable, both said) before
 * the weights are made, then each backend's generator: compile, `warmup` calls (the first
 * timed on its own), `steps` timed calls, the tokens and the first logits compared with
 * the first backend's. Fills rep as tr_bench_run does. */
struct tr_bench_report;
struct tr_bench_opts;
struct tr_task_graph;
int tr_generate_bench(const struct tr_config *cfg, struct tr_task_graph *tg, const struct tr_bench_opts *o,
                      struct tr_bench_report *rep, struct tr_error *err);

#ifdef __cplusplus
}
#endif
#endif
