/* trident — parsing of the value words every layer reads (INI sections in core, backend
 * options in plugins/common), in one place so that a word means the same everywhere.
 */
#ifndef TRIDENT_PARSE_H
#define TRIDENT_PARSE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What tr_parse_bool accepts, for "expected ..." in messages. */
#define TR_BOOL_WORDS "true or false (true, false, on, off, yes, no, 1 or 0, in any case)"

/* A boolean: true/on/yes/1 -> 1, false/off/no/0 -> 0, case-insensitive, blanks around the
 * word ignored. Returns 0 and sets *out, or -1 (s NULL or not one of those; *out left
 * as it is). The caller's message names file, line, key and value. */
int tr_parse_bool(const char *s, int *out);

/* Text from outside (a plugin's message, a file's tensor name, a report's label) made safe
 * to print, in place: each control byte (an escape sequence, a line break that would forge
 * a log line) becomes '?'. */
void tr_text_printable(char *s);

/* A tolerance as the INI gave it, in the fewest digits that still say it ("1e-04",
 * "1.5e-07", not "2e-07"): up to 17 significant digits. Returns buf. */
const char *tr_tol_str(double v, char *buf, size_t cap);

/* The word of words[0..n) nearest to w, for a message's "did you mean": at most one edit
 * (an insertion, a deletion, a change, or two neighbours swapped) per three letters of w,
 * and at least one; NULL when none is that near. Case-insensitive. */
const char *tr_text_nearest(const char *w, const char *const *words, int n);

/* name with every all-digit dot-separated component as "*" (model.layers.*.self_attn.
 * q_proj.bias), into out (cap bytes, cut there): a message names a layer's tensor once
 * for all its layers. */
void tr_text_layer_pattern(const char *name, char *out, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
