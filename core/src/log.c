#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "trident/backend.h"
#include "trident/log.h"

static int log_level = -1;

static int level_from_env(void) {
    const char *s = getenv("TRIDENT_LOG");
    if (!s) return TR_LOG_WARN;
    static const char *const names[] = {"error", "warn", "info", "debug"};
    for (int i = 0; i < 4; i++)
        if (strcmp(s, names[i]) == 0) return i;
    return TR_LOG_WARN;
}

void tr_log_set_level(int level) { log_level = level; }

void tr_log(int level, const char *fmt, ...) {
    if (log_level < 0) log_level = level_from_env();
    if (level > log_level) return;
    va_list ap;
    va_start(ap, fmt);
    fputs("trident: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}
