/* trident — a backend in a child process.
 *
 * A plugin that crashes, aborts, calls exit or hangs must cost only its own row: each
 * backend of a run lives in a child made by fork, driven by one-byte commands over a pipe
 * and answering with a status; its results go to memory shared with the parent
 * (tr_shared_alloc, made before the fork). A child that dies or does not answer within the
 * timeout becomes an error naming the signal, the exit status or the time waited.
 *
 * fork copies only the calling thread: a process that has started other threads (an
 * OpenMP pool, whose child would wait forever at its first parallel region) cannot fork
 * safely, so tr_fork_safe says whether this one is still single-threaded. Used by the
 * runner (bench.c), the plugin scan of `trident list` and `trident check-backend`. */
#ifndef TRIDENT_ISOLATE_H
#define TRIDENT_ISOLATE_H

#include <stddef.h>
#include <sys/types.h>
#include "trident/status.h"

struct tr_child {
    pid_t pid;                  /* 0: none */
    int cmd_fd, reply_fd;       /* the parent's ends */
};

/* What the child runs for each command; its return is sent back as the status. */
typedef int (*tr_child_fn)(void *arg, int cmd);

/* 1 when this process has a single thread (so fork is safe); *n_threads: how many. */
int tr_fork_safe(int *n_threads);

/* Memory the parent and its children share (MAP_SHARED | MAP_ANONYMOUS, zeroed). */
void *tr_shared_alloc(size_t n, struct tr_error *err);
void tr_shared_free(void *p, size_t n);

/* Fork a child that waits for commands and runs fn(arg, cmd) for each. */
int tr_child_spawn(struct tr_child *c, tr_child_fn fn, void *arg, struct tr_error *err);
/* Send cmd and wait at most timeout_s seconds for fn's status (in *status). TR_OK when it
 * answered; otherwise TR_ERR_PLUGIN with why ("killed by signal 11 (Segmentation fault)",
 * "exited with status 3", "no answer within 60 s; killed"), the child reaped. what names
 * the phase for the message ("step 5"). */
int tr_child_call(struct tr_child *c, int cmd, double timeout_s, const char *what, int *status,
                  struct tr_error *err);
/* Close the pipes (the child exits when it reads the end) and reap it; a child that does
 * not exit within a second is killed. */
void tr_child_end(struct tr_child *c);
/* spawn, one call, end: fn(arg, cmd) once in a child. */
int tr_child_once(tr_child_fn fn, void *arg, int cmd, double timeout_s, const char *what, int *status,
                  struct tr_error *err);

#endif
