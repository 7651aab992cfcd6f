#include <stdio.h>
#include <string.h>
#include "trident/status.h"

int tr_error_setv(struct tr_error *err, int status, const char *fmt, va_list ap) {
    if (err) {
        err->status = status;
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    }
    return status;
}

int tr_error_set(struct tr_error *err, int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    tr_error_setv(err, status, fmt, ap);
    va_end(ap);
    return status;
}

int tr_error_set_atv(struct tr_error *err, int status, const char *file, int line, const char *fmt, va_list ap) {
    char what[TR_ERROR_MSG_MAX];
    vsnprintf(what, sizeof what, fmt, ap);
    return tr_error_set(err, status, "%s:%d: %.900s", file, line, what);
}

int tr_error_prefix(struct tr_error *err, const char *fmt, ...) {
    if (!err) return TR_ERR_INTERNAL;
    char prefix[TR_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    /* Shift the old message right and put "prefix: " in front; the tail is cut if the
     * two do not fit. */
    size_t p = strlen(prefix) + 2, old = strlen(err->msg), cap = sizeof err->msg - 1;
    if (p > cap) p = cap;
    if (old > cap - p) old = cap - p;
    memmove(err->msg + p, err->msg, old);
    err->msg[p + old] = '\0';
    memcpy(err->msg, prefix, p - 2 < cap ? p - 2 : cap);
    if (p >= 2) {
        err->msg[p - 2] = ':';
        err->msg[p - 1] = ' ';
    }
    return err->status;
}

void tr_error_clear(struct tr_error *err) {
    if (err) {
        err->status = TR_OK;
        err->msg[0] = '\0';
    }
}

const char *tr_status_name(int status) {
    static const char *const names[] = {
        "ok", "invalid argument", "out of memory", "i/o error", "bad format", "shape error",
        "unsupported", "not found", "plugin refused", "device error", "numeric error", "internal error",
        "interrupted",
    };
    if (status < 0 || status >= (int)(sizeof names / sizeof names[0])) return "unknown status";
    return names[status];
}
