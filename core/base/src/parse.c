/* Value words (trident/parse.h). */
#include <ctype.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include "trident/parse.h"

int tr_parse_bool(const char *s, int *out) {
    static const char *const yes[] = {"true", "on", "yes", "1"}, *const no[] = {"false", "off", "no", "0"};
    if (!s) return -1;
    while (isspace((unsigned char)*s)) s++;
    size_t n = 0;
    while (s[n]) n++;
    while (n > 0 && isspace((unsigned char)s[n - 1])) n--;
    for (int i = 0; i < 4; i++) {
        /* a word of exactly n characters, compared without case */
        int y = strncasecmp(s, yes[i], n) == 0 && yes[i][n] == '\0';
        int f = strncasecmp(s, no[i], n) == 0 && no[i][n] == '\0';
        if (n > 0 && y) return *out = 1, 0;
        if (n > 0 && f) return *out = 0, 0;
    }
    return -1;
}

void tr_text_printable(char *s) {
    for (; s && *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f) *s = '?';
}

const char *tr_tol_str(double v, char *buf, size_t cap) {
    if (!buf || cap == 0) return "";
    for (int digits = 0; digits <= 16; digits++) {
        snprintf(buf, cap, "%.*e", digits, v);
        if (strtod(buf, NULL) == v) break;
    }
    return buf;
}
