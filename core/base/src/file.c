/* Regular files only (file.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "trident/file.h"

static const char *kind(mode_t m) {
    return S_ISFIFO(m) ? "a FIFO" : S_ISDIR(m) ? "a directory" : S_ISCHR(m) ? "a character device"
         : S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket" : "not a regular file";
}

int tr_fopen_regular(const char *path, FILE **f, struct tr_error *err) { return tr_fopen_regular_flags(path, 0, f, err); }

int tr_fopen_regular_flags(const char *path, int flags, FILE **f, struct tr_error *err) {
    *f = NULL;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY | flags);
    if (fd < 0) return tr_error_set(err, TR_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return tr_error_set(err, TR_ERR_IO, "cannot stat '%s': %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return tr_error_set(err, TR_ERR_INVALID, "'%s' is %s, not a regular file", path, kind(st.st_mode));
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0 || !(*f = fdopen(fd, "rb"))) {
        int e = errno;
        close(fd);
        return tr_error_set(err, TR_ERR_IO, "cannot read '%s': %s", path, strerror(e));
    }
    return TR_OK;
}
