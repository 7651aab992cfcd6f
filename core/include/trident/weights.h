/* trident — weights: made from a seed, or read from safetensors.
 *
 * A struct tr_weights owns one host buffer per PARAM of a graph and binds them to it
 * (tr_graph_bind_param), so every backend compiled from that graph sees the same bytes.
 * From a seed, each tensor is drawn from normal(mean, std) as its PARAM says, by a
 * counter-based generator keyed by (seed, the parameter's name): the values do not
 * depend on the order of parameters or on the backend.
 */
#ifndef TRIDENT_WEIGHTS_H
#define TRIDENT_WEIGHTS_H

#include <stdint.h>
#include <stdio.h>
#include "trident/graph.h"
#include "trident/status.h"
#include "trident/tensor.h"
#include "trident/rng.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tr_weights;

int tr_weights_from_seed(struct tr_graph *g, uint64_t seed, struct tr_weights **out, struct tr_error *err);

/* Every PARAM but the fresh ones must be in the file under its name, with its shape. A
 * tensor of another float dtype (f64, f32, bf16, f16) is converted to the PARAM's, as
 * torch's .to(dtype): a bf16 release into an f32 graph exactly, a narrower dtype rounded
 * to nearest even; an integer tensor for a float PARAM is an error. A missing tensor, a wrong shape, a truncated file or a bad
 * header: an error naming the tensor and the file. Tensors in the file that the graph
 * does not use are ignored. A file saved without the model's base prefix (Hugging Face's
 * base_model_prefix: "embeddings.x" for the graph's "text_model.embeddings.x") loads too:
 * a name is looked up without its first component when the file has no name under it.
 * path may be a directory, as a diffusers pipeline is saved (unet/, vae/, text_encoder/):
 * every .safetensors in it and its immediate subdirectories, each tensor in exactly one. */
#define TR_WEIGHTS_PATH_MAX 1024
int tr_weights_load(struct tr_graph *g, const char *path, struct tr_weights **out, struct tr_error *err);

/* As tr_weights_load, except that a fresh PARAM (tr_param_set_fresh: LoRA adapters,
 * optimizer state, masters) missing from the file is made from seed as
 * tr_weights_from_seed makes it; one the file has is read from it. tr_weights_load is
 * this with seed 0; it is tr_weights_load_opts with {seed, missing_seed = 0}. */
int tr_weights_load_seeded(struct tr_graph *g, const char *path, uint64_t seed, struct tr_weights **out,
                           struct tr_error *err);

/* How tr_weights_load_opts treats what the file lacks ([run] seed and [run] missing). */
struct tr_weights_load_opts {
    uint64_t seed;      /* what a PARAM the file lacks is made from (fresh ones always) */
    int missing_seed;   /* 1: any PARAM the file lacks is made from seed, as tr_weights_from_seed
                           makes it, and recorded (tr_weights_n_seeded); 0: only fresh ones,
                           another missing one is an error naming it and the file */
    const char *variant; /* a directory's variant files (below); NULL or "": none */
    const char *skip[4]; /* files a directory's .safetensors leave out: the run's own batch,
                            reference and outputs where they lie in it (NULL or "": none) */
};

/* Variants. In a directory, NAME.V.safetensors beside NAME.safetensors in the same folder
 * (and NAME.V-00001-of-00002.safetensors beside NAME-00001-of-00002.safetensors) is NAME's
 * variant V, as diffusers and transformers save them (unet/diffusion_pytorch_model.fp16.
 * safetensors, .non_ema.safetensors). As their from_pretrained does by default, a load
 * reads NAME and none of its variants; with variant V it reads NAME.V in place of NAME
 * where there is one (NAME elsewhere), and refuses a directory without any file of V,
 * naming the variants it has. A file without its plain sibling is no variant: read. */

/* tr_weights_load_seeded with o's choices (o NULL: seed 0, missing ones an error). Only
 * absence is forgiven: a tensor the file has with a wrong shape or dtype is an error
 * with missing_seed too, since it means the file is another model's. */
int tr_weights_load_opts(struct tr_graph *g, const char *path, const struct tr_weights_load_opts *o,
                         struct tr_weights **out, struct tr_error *err);

/* The non-fresh PARAMs that tr_weights_load_opts made from the seed because the file
 * lacked them, in param order: how many, and the name of the i-th (0 .. n-1; NULL out of
 * range). Fresh PARAMs are expected to be absent and are not counted. The names are w's
 * own copies; 0 for weights made by tr_weights_from_seed. */
int tr_weights_n_seeded(const struct tr_weights *w);
const char *tr_weights_seeded_name(const struct tr_weights *w, int i);

/* Writes to f, when w has seeded tensors, the one warning [run] missing = seed promises:
 *   trident: warning: W.safetensors lacks 2 tensors the model has, made from [run] seed 1234:
 *   classifier.weight, classifier.bias
 * (one line; after TR_WEIGHTS_WARN_NAMES names, "and K more"). path is the weights path
 * as the caller names it. Returns how many tensors it named (tr_weights_n_seeded), 0 when
 * it wrote nothing. */
#define TR_WEIGHTS_WARN_NAMES 8
int tr_weights_warn_seeded(const struct tr_weights *w, const char *path, uint64_t seed, FILE *f);

/* The tensors of the file (or of the directory's files) that tr_weights_load_opts read
 * into no PARAM, outside the parts the graph leaves out by design (tr_graph_omit): how
 * many, and the name of the i-th (file by file, in each file's order; NULL out of range).
 * 0 for weights made by tr_weights_from_seed. */
int tr_weights_n_unused(const struct tr_weights *w);
const char *tr_weights_unused_name(const struct tr_weights *w, int i);

/* Writes to f one warning line per file with unused tensors, every all-digit component of
 * their names as "*", each such pattern once with its count:
 *   trident: warning: gemma.safetensors: 8 of its 26 tensors are not the model's (not read;
 *   a checkpoint of another task, or a config that leaves them out?): model.layers.*.self_attn.q_proj.bias (2), ...
 * More than TR_WEIGHTS_WARN_NAMES patterns are cut to fewer components until they fit
 * ("model.layers.1.*" for a whole layer over), then "and K more"; control bytes show as
 * '?'; LoRA adapter tensors get a hint of lora_predict. A file of which nothing was read
 * says so ("none of its N tensors is the model's"). Returns tr_weights_n_unused. */
int tr_weights_warn_unused(const struct tr_weights *w, FILE *f);

uint64_t tr_weights_bytes(const struct tr_weights *w);
void tr_weights_free(struct tr_weights *w);

#ifdef __cplusplus
}
#endif
#endif
