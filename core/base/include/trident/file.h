/* Opening a file to read: regular files only. A FIFO, a device or a directory named where
 * a weights file, a config or a cache entry is expected would block the reader or feed it
 * what it cannot parse, so it is refused by what it is, before a byte is read. */
#ifndef TRIDENT_FILE_H
#define TRIDENT_FILE_H

#include <stdio.h>
#include "trident/status.h"

/* *f = path opened "rb" when it is a regular file (opened non-blocking, checked with fstat,
 * then switched back to blocking); else NULL and an error naming the path and what it is
 * (TR_ERR_IO: cannot open, TR_ERR_INVALID: not a regular file). err may be NULL. */
int tr_fopen_regular(const char *path, FILE **f, struct tr_error *err);
/* The same with more open(2) flags (O_NOFOLLOW: a symbolic link is refused too). */
int tr_fopen_regular_flags(const char *path, int flags, FILE **f, struct tr_error *err);

#endif
