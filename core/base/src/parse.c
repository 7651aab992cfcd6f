/* Value words (trident/parse.h). */
#include <ctype.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* Optimal string alignment distance (Damerau's transposition of neighbours), case-folded;
 * words longer than 63 bytes are never near. */
static int osa_distance(const char *a, const char *b) {
    enum { M = 64 };
    const size_t la = strlen(a), lb = strlen(b);
    if (la >= M || lb >= M) return M;
    int d[M][M];
    for (size_t i = 0; i <= la; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            const int ca = tolower((unsigned char)a[i - 1]), cb = tolower((unsigned char)b[j - 1]);
            int v = d[i - 1][j - 1] + (ca != cb);
            if (d[i - 1][j] + 1 < v) v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) && tolower((unsigned char)a[i - 2]) == cb &&
                d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    return d[la][lb];
}

const char *tr_text_nearest(const char *w, const char *const *words, int n) {
    if (!w || !words) return NULL;
    const int len = (int)strlen(w), most = len / 3 > 1 ? len / 3 : 1;
    const char *best = NULL;
    int best_d = most + 1;
    for (int i = 0; i < n; i++) {
        if (!words[i]) continue;
        const int d = osa_distance(w, words[i]);
        if (d < best_d) best_d = d, best = words[i];
    }
    return best;
}

void tr_text_layer_pattern(const char *name, char *out, size_t cap) {
    size_t o = 0;
    for (const char *c = name; *c && o + 2 < cap;) {
        size_t len = strcspn(c, ".");
        const int digits = len > 0 && strspn(c, "0123456789") == len;
        if (digits) out[o++] = '*';
        else {
            if (len > cap - o - 2) len = cap - o - 2;
            memcpy(out + o, c, len), o += len;
        }
        c += len;
        if (*c == '.') out[o++] = *c++;
    }
    out[o] = 0;
}
