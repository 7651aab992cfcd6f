/* CLIP's tokenizer (openai/clip-vit-large-patch14's, in every Stable Diffusion
 * checkpoint's tokenizer/ directory): byte-level BPE with "</w>" ending each word, read
 * from that directory's vocab.json and merges.txt (the Hub's files), or its tokenizer.json
 * (all transformers 5's save_pretrained writes), so a run can take its prompt as text.
 *
 * As the tokenizer.json of transformers' CLIPTokenizer: NFC, every run of Unicode spaces
 * one space, lowered (Unicode's mapping); the text splits into contractions ('s 't 're 've
 * 'm 'll 'd), runs of letters (\p{L}), single numbers (\p{N}) and runs of other
 * non-spaces; each piece is byte-encoded and merged by the merges' ranks; the ids are
 * <|startoftext|>, the pieces' (truncated to leave room), <|endoftext|>, then the pad
 * token to the length asked for: tokenizer_config.json's (or special_tokens_map.json's)
 * pad_token, Stable Diffusion 2's "!", else <|endoftext|> as v1's. Special tokens (those
 * two, the pad token, tokenizer.json's added tokens) are found in the raw text first and
 * are their ids: Stable Diffusion 2's "!" in a prompt is a pad id, as in diffusers. */
#ifndef TRIDENT_MODELS_CLIP_TOKENIZER_H
#define TRIDENT_MODELS_CLIP_TOKENIZER_H

#include <stdint.h>
#include "trident/status.h"

struct tr_clip_tokenizer;

/* dir holds vocab.json and merges.txt, or tokenizer.json; errors name the file and what is
 * wrong. */
int tr_clip_tokenizer_load(const char *dir, struct tr_clip_tokenizer **out, struct tr_error *err);
void tr_clip_tokenizer_free(struct tr_clip_tokenizer *t);
/* ids[0..n) for text, n >= 2 (77 for Stable Diffusion). */
int tr_clip_tokenize(const struct tr_clip_tokenizer *t, const char *text, int32_t *ids, int n, struct tr_error *err);

#endif
