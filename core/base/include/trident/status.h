/* trident — status codes and the error record.
 *
 * Every public function returns an int status (TR_OK == 0) and, on failure, fills a
 * struct tr_error with a message a person can act on: which file, line, key, node or
 * tensor, what was found and what was expected. `err` may be NULL where the caller does
 * not want the message. Library code never exits and never prints an error itself.
 */
#ifndef TRIDENT_STATUS_H
#define TRIDENT_STATUS_H

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

enum tr_status {
    TR_OK = 0,
    TR_ERR_INVALID = 1,      /* a bad argument or value (config key, shape attribute, ...) */
    TR_ERR_NOMEM = 2,        /* an allocation failed */
    TR_ERR_IO = 3,           /* a file could not be opened, read or written */
    TR_ERR_FORMAT = 4,       /* a file is malformed or truncated */
    TR_ERR_SHAPE = 5,        /* shapes or dtypes do not fit */
    TR_ERR_UNSUPPORTED = 6,  /* an op, dtype, device or task is not provided */
    TR_ERR_NOT_FOUND = 7,    /* an unknown model, preset, backend, tensor, key */
    TR_ERR_PLUGIN = 8,       /* a plugin was refused (missing symbol, ABI, init failed) */
    TR_ERR_DEVICE = 9,       /* a device call failed or no device is present */
    TR_ERR_NUMERIC = 10,     /* NaN/Inf, or outputs that disagree beyond tolerance */
    TR_ERR_INTERNAL = 11,    /* a broken invariant: a bug in trident */
    TR_ERR_INTERRUPTED = 12, /* stopped on request (Ctrl-C) before the work was done */
    TR_ERR_COMM = 13,        /* a collective across the ranks of a data-parallel run failed */
};

#define TR_ERROR_MSG_MAX 1024

struct tr_error {
    int status;
    char msg[TR_ERROR_MSG_MAX];
};

/* Fill err (if not NULL) and return status, so that `return tr_error_set(err, ...)`
 * reads as one statement. A second call overwrites the first. */
int tr_error_set(struct tr_error *err, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int tr_error_setv(struct tr_error *err, int status, const char *fmt, va_list ap);
/* "FILE:LINE: message", the form of every error about a line of a text file (a
 * config, a suite); the message is cut to fit behind a long path. */
int tr_error_set_atv(struct tr_error *err, int status, const char *file, int line, const char *fmt, va_list ap);

/* Put "prefix: " in front of an error already set, to add context on the way up
 * ("conf/x.ini:12: [run] batch: ..."). Returns err->status. */
int tr_error_prefix(struct tr_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

void tr_error_clear(struct tr_error *err);
const char *tr_status_name(int status);

#ifdef __cplusplus
}
#endif
#endif
