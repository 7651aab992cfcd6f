/* A sharded checkpoint's index, as from_pretrained reads a directory with one (internal to
 * libtrident: weights.c, which leaves such files out of a load, and model.c, which looks
 * at a checkpoint's tensors before it). NAME.safetensors.index.json's weight_map names the
 * shards; where NAME.safetensors is there too, transformers takes that single file first.
 * Any other .safetensors of the directory (a shard left from an earlier save, Mistral's
 * consolidated.safetensors) is not the checkpoint's. peft's adapter_model.safetensors
 * never is one of its shards and is always read, as is a variant's NAME.V.safetensors
 * (weights.h: the variants are picked apart). */
#ifndef TRIDENT_SHARD_INDEX_H
#define TRIDENT_SHARD_INDEX_H

#include <stddef.h>
#include "trident/status.h"

/* dir's indexes against the files there: a shard an index names that is not there is said
 * by name (a download that stopped short), before a tensor of it is missed (whose message
 * would invite making it from the seed). */
int tr_shard_index_check(const char *dir, struct tr_error *err);

/* 1 when a load leaves the .safetensors file out (why: a note, why[0] = 0 when cap is 0),
 * 0 when it reads it: its directory has no index, or an index reads it. */
int tr_shard_index_skips(const char *file, char *why, size_t cap);

#endif
