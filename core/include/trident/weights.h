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
#include "trident/graph.h"
#include "trident/status.h"
#include "trident/tensor.h"
#include "trident/rng.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tr_weights;

int tr_weights_from_seed(struct tr_graph *g, uint64_t seed, struct tr_weights **out, struct tr_error *err);

/* Every PARAM but the fresh ones must be in the file under its name, with its shape. An f32 tensor is
 * converted when the PARAM is bf16 or f16 (round to nearest even); other dtype
 * mismatches are errors. A missing tensor, a wrong shape, a truncated file or a bad
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
 * this with seed 0. */
int tr_weights_load_seeded(struct tr_graph *g, const char *path, uint64_t seed, struct tr_weights **out,
                           struct tr_error *err);

uint64_t tr_weights_bytes(const struct tr_weights *w);
void tr_weights_free(struct tr_weights *w);

#ifdef __cplusplus
}
#endif
#endif
