/* trident — model descriptors and their registry.
 *
 * A model is described once: a name, config keys (typed, with offsets into the model's
 * own config struct), presets (a full config struct each), the tasks it offers, and
 * functions that build the graph of a task and fill a synthetic batch for it. Core
 * resolves a preset plus the INI's [model] overrides into the model's config struct;
 * the model never parses text itself.
 */
#ifndef TRIDENT_MODEL_H
#define TRIDENT_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include "trident/config.h"
#include "trident/dtype.h"
#include "trident/graph.h"
#include "trident/status.h"
#include "trident/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

enum tr_task { TR_TASK_PREDICT = 0, TR_TASK_FIT = 1, TR_TASK_GENERATE = 2, TR_TASK_COUNT };
const char *tr_task_name(enum tr_task t);
int tr_task_from_name(const char *s, enum tr_task *out);

enum tr_key_type { TR_KEY_INT = 0, TR_KEY_FLOAT = 1, TR_KEY_BOOL = 2, TR_KEY_STRING = 3 };

/* One config key of a model; `offset` is into the model's config struct; an INT is an
 * int64_t, FLOAT a double, BOOL an int, STRING a char[64] (at most 63 characters: for
 * names and lists, not paths; a path is resolved by core and handed to a hook, as
 * read_hf_config is). min/max bound INT and FLOAT. */
struct tr_model_key {
    const char *name;
    enum tr_key_type type;
    size_t offset;
    double min, max;
    const char *doc;
};

struct tr_model_preset {
    const char *name;
    const void *config;         /* points to the model's config struct */
    const char *doc;            /* "bert-base-cased: 12 layers, hidden 768, ..." */
};

/* What a task's graph is built for. */
struct tr_build_opts {
    enum tr_task task;
    enum tr_dtype dtype;
    int64_t batch;
    int64_t seq_len;
    /* A one-graph generate's [generate] prompt (or prompts: a file of them, one a line,
     * blank lines skipped, sample b taking prompt b mod their count), negative_prompt and
     * tokenizer (a directory), init_image and mask_image (PNGs: the picture to start from,
     * the part to repaint), for make_inputs; NULL when not given (synthetic prompts,
     * picture and mask). */
    const char *prompt, *prompts, *negative_prompt, *tokenizer, *init_image, *mask_image;
};

struct tr_generate_i; /* below */

/* A descriptor's key and preset tables, from two static arrays:
 *   const struct tr_model_desc tr_model_x = {.name = "x", TR_MODEL_TABLES(x_keys, x_presets), ...}; */
#define TR_MODEL_TABLES(keys_, presets_)                                                            \
    .keys = (keys_), .n_keys = (int)(sizeof(keys_) / sizeof((keys_)[0])), .presets = (presets_),   \
    .n_presets = (int)(sizeof(presets_) / sizeof((presets_)[0]))

struct tr_model_desc {
    const char *name;
    const char *description;
    size_t config_size;
    const struct tr_model_key *keys;
    int n_keys;
    const struct tr_model_preset *presets;
    int n_presets;
    uint32_t tasks;             /* bit (1u << enum tr_task) per task offered */
    /* Build the task's graph into g (empty) from the resolved config. */
    int (*build)(const void *config, const struct tr_build_opts *o, struct tr_graph *g, struct tr_error *err);
    /* FIT (bit TR_TASK_FIT in tasks): build makes the forward graph and a 0-d f32 node
     * named "loss" (not an output); trainable lists the PARAMs training updates (ids,
     * room for max; *n their count), frozen ones left out. Core appends the backward
     * pass and the optimizer (train.h). NULL when the model offers no fit. */
    int (*trainable)(const void *config, const struct tr_graph *g, int *ids, int max, int *n, struct tr_error *err);
    /* Fill the graph's INPUT tensors (host, allocated by the caller with the graph's
     * shapes, in input order) with a synthetic batch from seed: the model's own inputs
     * (for FIT its labels too); inputs added by core after them (lr, step) are core's. */
    int (*make_inputs)(const void *config, const struct tr_build_opts *o, uint64_t seed, int n,
                       struct tr_tensor *inputs, struct tr_error *err);
    /* GENERATE (bit TR_TASK_GENERATE in tasks): the two passes and the prompts (below);
     * NULL when the model offers no generate. */
    const struct tr_generate_i *generate;
    /* Optional: read a Hugging Face config.json (diffusers' or transformers') into config.
     * With it, [model] hf_config = PATH (relative to the INI's directory) applies the
     * file over the preset, before the other [model] keys; a key the file leaves out is its
     * class's default (as from_pretrained reads it: tr_hf_json_defaults), so the preset
     * gives only trident's own keys (LoRA, the synthetic batch's). Errors name the file
     * and the JSON key. NULL: the model has no such key. */
    int (*read_hf_config)(void *config, const char *path, struct tr_error *err);
    /* Optional: a one-graph generate's [generate] image = PATH written from the reference
     * backend's outputs (outs[i] the graph's output i, on the host), where the picture is
     * not the output "image" as image.h writes it (SAM's masks, thresholded). NULL: that. */
    int (*write_image)(const void *config, const char *path, const struct tr_graph *g, const struct tr_tensor *outs,
                       struct tr_error *err);
    /* Optional: the sequence length when the INI gives no [run] seq_len (core's 128
     * otherwise): Stable Diffusion's prompts are always the text encoder's
     * max_position_embeddings tokens (77), as its pipeline pads them. 0: core's. -1: the
     * model reads no sequence (its inputs are images): a [run] seq_len is warned unread. */
    int64_t (*default_seq_len)(const void *config);
    /* Optional: how far two backends' predict outputs may be apart in bf16, where the
     * dtype's 2e-2 is tighter than the model's depth allows (its reference library's own
     * bf16 output is that far from float64: two backends each as close differ by up to
     * twice as much), and why, measured, as the verdict says it after "bf16 through " (50
     * characters at most: the report's tolerance_why). 0: the dtype's. Fit (losses) keeps
     * the dtype's; a sampler's generate its own (1e-1). */
    double bf16_tolerance;
    const char *bf16_why;
    /* Optional: 1 when the one-graph generate is one forward pass (SAM's masks brought to
     * the photo), not a sampler's trajectory of N passes: it is held to predict's
     * tolerance, not a sampler's 1e-1. */
    int generate_one_pass;
    /* Optional: each lora_targets name as "NAME=PATH", PATH the Linear's module path in a
     * layer as the checkpoint names it ("intermediate=intermediate.dense"), NULL-ended:
     * peft's adapter_config.json target_modules are matched against PATH as peft matches
     * them (the path, or a suffix of it after a dot). NULL: a name is its own path. */
    const char *const *lora_modules;
};

/* ---- generate ----
 * A model that offers generate builds two graphs that share their PARAMs (same names and
 * shapes), once for a batch B, a prompt length T and max_length (prompt + new tokens, as
 * the Keras benchmark counts): a prefill pass over the prompt, and a one-token decode pass
 * against a static cache of cache_slots entries. Core runs them (generate.h): prefill,
 * then max_length - T - 1 decode passes, choosing the tokens between passes (and, with
 * cache_inputs, writing each pass's new cache entries into the cache).
 *
 *   prefill  inputs   the prompt: n_prompt_inputs tensors, which make_prompt fills
 *            outputs  logits [B,V] of the last prompt position, then n_cache tensors:
 *                     the prompt's cache entries, T slots along cache_axis
 *   decode   inputs   n_step_inputs tensors (step_inputs fills them), then the n_cache
 *                     cache tensors, cache_slots slots along cache_axis
 *            outputs  logits [B,V] of the fed token, then n_cache tensors: its entries
 *                     (1 slot along cache_axis)
 * That is the layout with cache_inputs (the host holds the cache). Without it (plan's
 * cache_state), the cache is state of both passes instead: n_cache PARAMs, the same names
 * and shapes in both, each updated by the pass (tr_graph_add_update; a pass updates
 * nothing else), which prefill writes slots 0 .. T-1 of and decode one slot of; neither
 * pass outputs cache entries (one output, the logits) and decode has no cache inputs (its
 * n_step_inputs say which slot it writes). Core binds both passes' cache PARAMs to one
 * memory, never loaded from a weights file.
 * The entries of sequence position i (0 .. T-1 the prompt, padding included; then the new
 * tokens) live in slot i of the cache. Slots not written yet hold zeros or an earlier
 * call's values: the step inputs must hide them (and whatever else the model does not
 * attend to). cache_slots >= max_length - 1. */
struct tr_generate_opts {
    enum tr_dtype dtype;
    int64_t batch;              /* B */
    int64_t prompt_len;         /* T: every prompt left-padded to T */
    int64_t max_length;         /* T + new tokens */
    int cache_inputs;           /* 1: the cache as decode inputs (host); 0: as state */
    /* Prompts given as text (text_encode's ids): sample b takes prompt b mod n_prompts,
     * prompt_ids[k] of n_prompt_ids[k] <= prompt_len ids, left-padded to prompt_len; NULL:
     * synthetic prompts from the seed. */
    const int32_t *const *prompt_ids;
    const int *n_prompt_ids;
    int n_prompts;
};

struct tr_generate_plan {
    int n_prompt_inputs, n_step_inputs, n_cache;
    int cache_axis;
    int64_t cache_slots;
    int cache_state;            /* the cache is the passes' updated PARAMs (above) */
};

struct tr_generate_i {
    /* Build both passes into prefill and decode (empty graphs) and describe them in plan.
     * Refuses max_length beyond what the model can attend to, naming both numbers. */
    int (*build)(const void *config, const struct tr_generate_opts *o, struct tr_graph *prefill,
                 struct tr_graph *decode, struct tr_generate_plan *plan, struct tr_error *err);
    /* A synthetic batch of prompts from seed into the prefill inputs (host, allocated by
     * the caller with the graph's shapes): prompts of different lengths, left-padded. */
    int (*make_prompt)(const void *config, const struct tr_generate_opts *o, uint64_t seed, int n,
                       struct tr_tensor *inputs, struct tr_error *err);
    /* The decode pass's n step inputs (host, allocated by the caller) for feeding
     * tokens[b] (b < B) at sequence position pos (T <= pos <= max_length - 2) after the
     * prompt `prompt` (the prefill inputs): slots 0 .. pos-1 of the cache hold entries
     * (and with cache_state the pass writes slot pos). */
    int (*step_inputs)(const void *config, const struct tr_generate_opts *o, const struct tr_tensor *prompt,
                       int64_t pos, const int32_t *tokens, int n, struct tr_tensor *inputs, struct tr_error *err);
    /* Text (optional; NULL: the model takes no [generate] prompt). text_open reads the
     * tokenizer at path (a file, or a directory that holds the model's tokenizer file) and
     * refuses one whose ids the model cannot embed; text_encode gives a prompt's ids (the
     * model's special tokens included) and text_decode new ids' text, each malloc'd: the
     * ids up to the model's first end-of-sequence id (*used of them: n where none is),
     * where transformers' generate stops. */
    int (*text_open)(const void *config, const char *path, void **tok, struct tr_error *err);
    int (*text_encode)(void *tok, const char *text, int32_t **ids, int *n, struct tr_error *err);
    int (*text_decode)(void *tok, const int32_t *ids, int n, char **text, int *used, struct tr_error *err);
    void (*text_close)(void *tok);
};

/* Look a model up in a NULL-terminated list; the error lists the names there are. */
int tr_model_find(const struct tr_model_desc *const *models, const char *name,
                  const struct tr_model_desc **out, struct tr_error *err);

/* Resolve preset + the [model] overrides of cfg into config (config_size bytes). Unknown
 * presets list the ones there are; unknown keys and bad values are errors naming
 * FILE:LINE, the key, the value and the expected type and range. */
int tr_model_resolve(const struct tr_model_desc *m, const char *preset, const struct tr_config *cfg,
                     void *config, struct tr_error *err);

/* Apply the keys of INI section `section` of cfg to out through the key table (as
 * [model] is applied to a model's config); owner names the table's user in messages
 * ("model 'bert'", "training"). */
int tr_keys_apply(const struct tr_config *cfg, const char *section, const struct tr_model_key *keys, int n_keys,
                  const char *owner, void *out, struct tr_error *err);
/* The same, leaving the keys named in skip (NULL-terminated) to the caller. */
int tr_keys_apply_except(const struct tr_config *cfg, const char *section, const struct tr_model_key *keys,
                         int n_keys, const char *owner, void *out, const char *const *skip, struct tr_error *err);
/* Only that every key of cfg's [section] is one of keys or of also (NULL-terminated, may
 * be NULL), with tr_keys_apply's message: a section the task does not read is checked too. */
int tr_keys_check_names(const struct tr_config *cfg, const char *section, const struct tr_model_key *keys,
                        int n_keys, const char *owner, const char *const *also, struct tr_error *err);
/* A comma-separated list of names (spaces around them ignored), such as a STRING key's
 * "query, value", as a bit mask over names[0..n): bit i for names[i]. An unknown name
 * gives TR_ERR_NOT_FOUND with *bad / *bad_len pointing at it in list (for the caller's
 * message, which knows the key and the valid names). */
int tr_name_list_mask(const char *list, const char *const *names, int n, uint32_t *mask, const char **bad,
                      int *bad_len);

/* Read a key of a resolved config as text ("768"), for reports and `trident list`. */
int tr_model_key_str(const struct tr_model_desc *m, const void *config, const struct tr_model_key *k,
                     char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif
