/* CLIP's tokenizer (openai/clip-vit-large-patch14's, in every Stable Diffusion v1
 * checkpoint's tokenizer/ directory): byte-level BPE with "</w>" ending each word, read
 * from that directory's vocab.json and merges.txt, so a run can take its prompt as text.
 *
 * As transformers' CLIPTokenizer: whitespace runs become one space, letters are lowered,
 * the text splits into contractions ('s 't 're 've 'm 'll 'd), runs of letters, single
 * digits and runs of other non-space characters; each piece is byte-encoded and merged by
 * the ranks of merges.txt; the ids are <|startoftext|>, the pieces' (truncated to leave
 * room), <|endoftext|>, then <|endoftext|> padding to the length asked for. Letters are
 * ASCII's and every non-ASCII character (what CLIP's \p{L} holds of them is not looked
 * up), lowering is ASCII's, and NFC normalisation is left out: prompts in English
 * tokenize as transformers does them. */
#ifndef TRIDENT_MODELS_CLIP_TOKENIZER_H
#define TRIDENT_MODELS_CLIP_TOKENIZER_H

#include <stdint.h>
#include "trident/status.h"

struct tr_clip_tokenizer;

/* dir holds vocab.json and merges.txt; errors name the file and what is wrong. */
int tr_clip_tokenizer_load(const char *dir, struct tr_clip_tokenizer **out, struct tr_error *err);
void tr_clip_tokenizer_free(struct tr_clip_tokenizer *t);
/* ids[0..n) for text, n >= 2 (77 for Stable Diffusion). */
int tr_clip_tokenize(const struct tr_clip_tokenizer *t, const char *text, int32_t *ids, int n, struct tr_error *err);

#endif
