/* inih over text in memory, with line numbers (internal to libtrident: config.c, suite.c).
 *
 * Debian's inih hands its handler no line numbers (INI_HANDLER_LINENO is 0), so the text
 * goes through ini_parse_stream with this reader, which counts lines (inih never reads
 * ahead: the handler runs for the line the reader returned last), strips leading blanks
 * (inih would read an indented line as the continuation of the one above, gluing two
 * settings into one value), skips a UTF-8 byte order mark, refuses a line longer than
 * inih's buffer instead of letting it be split in two, and shows its owner every
 * "[section]" line, sections without keys included. */
#ifndef TRIDENT_INI_TEXT_H
#define TRIDENT_INI_TEXT_H

#include <stddef.h>
#include "trident/status.h"

struct tr_ini_text {
    const char *pos;            /* the next line */
    int line;                   /* the number of the line handed to inih last */
    int stop;                   /* set by the owner (an error): the reader returns no more lines */
    void *user;
    /* a "[...]" line (s, len: as read, leading blanks stripped); nonzero stops the reader */
    int (*section)(void *user, const char *s, size_t len);
    /* the current line is longer than max characters; the reader stops */
    void (*too_long)(void *user, int max);
};

/* ini_parse_stream's reader; stream is a struct tr_ini_text. */
char *tr_ini_text_read(char *str, int num, void *stream);

/* The whole INI file at path as NUL-terminated text (*out, freed by the caller): a regular
 * file of at most TR_INI_FILE_MAX bytes holding no NUL; errors name the file as `what`
 * ("config file", "suite file") would. */
#define TR_INI_FILE_MAX (1 << 20) /* an INI is small; anything bigger is the wrong file */
int tr_ini_text_load(const char *path, const char *what, char **out, struct tr_error *err);

/* The line'th line of text (1-based), blanks stripped, at most 60 characters, for a syntax
 * error's "found '...'". */
void tr_ini_text_line(const char *text, int line, char *out, size_t n);

#endif
