/* The text side of an LLM's generate: the tokenizer.json that Gemma's, Mistral's and
 * Llama 2's Hub repos ship (SentencePiece's BPE as Hugging Face's tokenizers converts and
 * runs it), so that a run can take its prompt as text and print what it generated.
 *
 * What is read, as tokenizers runs it (tests/test_llm_tokenizer.c holds it to tokenizers'
 * own output):
 *   added_tokens     split out of the text first (leftmost, the longest there), lstrip and
 *                    rstrip taking the white space beside them; special ones are left out
 *                    of a decode (skip_special_tokens)
 *   normalizer       null, Replace (a string pattern), Prepend, Sequence of them
 *   pre_tokenizer    null; Metaspace (replacement, prepend_scheme always | first | never or
 *                    the older add_prefix_space, split); Split on a string (Removed,
 *                    Isolated, MergedWithPrevious, MergedWithNext)
 *   model            BPE: vocab, merges ("a b" or ["a", "b"]), unk_token, fuse_unk,
 *                    byte_fallback (<0xHH> pieces for a character outside the vocab),
 *                    ignore_merges
 *   post_processor   null, TemplateProcessing's single template (<bos> $A)
 *   decoder          null, Replace, ByteFallback, Fuse, Strip, Sequence of them
 * Anything else (a byte-level BPE as GPT-2's and Llama 3's, Unigram or WordPiece, a regex
 * pattern, Unicode normalisation) is refused when loading, naming the file and the part. */
#ifndef TRIDENT_MODELS_DECODER_TOKENIZER_H
#define TRIDENT_MODELS_DECODER_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>
#include "trident/status.h"

struct tr_hf_tokenizer;

/* path: a tokenizer.json, or a directory that holds one. */
int tr_hf_tokenizer_load(const char *path, struct tr_hf_tokenizer **out, struct tr_error *err);
void tr_hf_tokenizer_free(struct tr_hf_tokenizer *t);
/* 1 + the largest id of the vocabulary and the added tokens. */
int32_t tr_hf_tokenizer_n_ids(const struct tr_hf_tokenizer *t);
/* tokenizer(text).input_ids: the template's special tokens included. *ids is malloc'd. */
int tr_hf_encode(const struct tr_hf_tokenizer *t, const char *text, int32_t **ids, int *n, struct tr_error *err);
/* s[0..n) is UTF-8 as Rust's str::from_utf8 takes it (no overlong forms, no surrogates,
 * nothing past U+10FFFF): what ByteFallback's decoder asks of a run of bytes. */
int tr_hf_utf8_valid(const unsigned char *s, size_t n);
/* decode(ids, skip_special_tokens=True), NUL-terminated; *text is malloc'd. An id outside
 * the vocabulary is skipped, as tokenizers' decode skips it. */
int tr_hf_decode(const struct tr_hf_tokenizer *t, const int32_t *ids, int n, char **text, struct tr_error *err);

#endif
