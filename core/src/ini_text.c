/* inih over text in memory, with line numbers (ini_text.h). */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "trident/file.h"
#include "ini_text.h"

int tr_ini_text_load(const char *path, const char *what, char **out, struct tr_error *err) {
    *out = NULL;
    FILE *f;
    if (tr_fopen_regular(path, &f, err)) return tr_error_prefix(err, "%s", what);
    char *text = malloc(TR_INI_FILE_MAX + 1);
    if (!text) {
        fclose(f);
        return tr_error_set(err, TR_ERR_NOMEM, "%s: out of memory reading the %s", path, what);
    }
    size_t n = fread(text, 1, TR_INI_FILE_MAX + 1, f);
    int rc = TR_OK;
    if (ferror(f)) rc = tr_error_set(err, TR_ERR_IO, "cannot read %s %s: %s", what, path, strerror(errno));
    else if (n > TR_INI_FILE_MAX)
        rc = tr_error_set(err, TR_ERR_FORMAT, "%s: larger than %d bytes; expected a small INI file", path,
                          TR_INI_FILE_MAX);
    else if (memchr(text, '\0', n))
        rc = tr_error_set(err, TR_ERR_FORMAT, "%s: contains a NUL byte; expected a text INI file", path);
    fclose(f);
    if (rc) {
        free(text);
        return rc;
    }
    text[n] = '\0';
    *out = text;
    return TR_OK;
}

char *tr_ini_text_read(char *str, int num, void *stream) {
    struct tr_ini_text *t = stream;
    if (t->stop || !*t->pos) return NULL;
    const char *s = t->pos, *nl = strchr(s, '\n');
    size_t len = nl ? (size_t)(nl - s) + 1 : strlen(s);
    t->pos = s + len;
    t->line++;
    if (t->line == 1 && (unsigned char)s[0] == 0xEF && (unsigned char)s[1] == 0xBB &&
        (unsigned char)s[2] == 0xBF) {
        s += 3;  /* a UTF-8 byte order mark; inih would skip it too */
        len -= 3;
    }
    while (len && *s != '\n' && isspace((unsigned char)*s)) s++, len--;
    /* a CRLF line is its text and '\n' (inih would strip the '\r'), so that it may be as
     * long as an LF one */
    const int crlf = len >= 2 && s[len - 1] == '\n' && s[len - 2] == '\r';
    const size_t out = crlf ? len - 1 : len;
    /* a comment line longer than inih's buffer: its text does not matter (an empty line
     * keeps the line count) */
    if ((*s == ';' || *s == '#') && num >= 2 && out > (size_t)num - 2) {
        str[0] = '\n', str[1] = '\0';
        return str;
    }
    /* inih needs room for the line, a '\r' it keeps, and the NUL. */
    if (num < 2 || out > (size_t)num - 2) {
        if (t->too_long) t->too_long(t->user, num - 3);
        t->stop = 1;
        return NULL;
    }
    memcpy(str, s, out);
    if (crlf) str[out - 1] = '\n';
    str[out] = '\0';
    if (*s == '[' && t->section && t->section(t->user, s, len)) {
        t->stop = 1;
        return NULL;
    }
    return str;
}

void tr_ini_text_line(const char *text, int line, char *out, size_t n) {
    for (int i = 1; i < line && text; i++) {
        text = strchr(text, '\n');
        if (text) text++;
    }
    if (!text) text = "";
    while (*text == ' ' || *text == '\t') text++;
    size_t len = strcspn(text, "\r\n");
    if (len > 60) len = 60;
    snprintf(out, n, "%.*s", (int)len, text);
}
