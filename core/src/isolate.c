/* Children for backends (trident/isolate.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <time.h>
#include <unistd.h>
#include "trident/isolate.h"

int tr_fork_safe(int *n_threads) {
    int n = 0;
    DIR *d = opendir("/proc/self/task");
    if (d) {
        for (struct dirent *e; (e = readdir(d)) != NULL;)
            if (e->d_name[0] != '.') n++;
        closedir(d);
    }
    if (n_threads) *n_threads = n;
    return n == 1;
}

void *tr_shared_alloc(size_t n, struct tr_error *err) {
    void *p = mmap(NULL, n ? n : 1, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        tr_error_set(err, TR_ERR_NOMEM, "shared memory of %zu bytes for a backend's results: %s", n, strerror(errno));
        return NULL;
    }
    return p;
}

void tr_shared_free(void *p, size_t n) {
    if (p) munmap(p, n ? n : 1);
}

/* The parent's ends of every live child's pipes: a later child closes them, or an
 * earlier child would never read the end of its commands while a sibling held a copy. */
#define MAX_FDS 64
static int parent_fds[MAX_FDS];
static int n_parent_fds;

static void fd_track(int fd) {
    if (n_parent_fds < MAX_FDS) parent_fds[n_parent_fds++] = fd;
}

static void fd_untrack(int fd) {
    for (int i = 0; i < n_parent_fds; i++)
        if (parent_fds[i] == fd) {
            parent_fds[i] = parent_fds[--n_parent_fds];
            return;
        }
}

static int write_all(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        p += k, n -= (size_t)k;
    }
    return 0;
}

/* The child: commands in, statuses out, until the parent closes its end. */
static void child_loop(int cmd_fd, int reply_fd, tr_child_fn fn, void *arg) {
    /* A Ctrl-C at the terminal reaches the whole process group: the parent decides when
     * to stop (after the current step), so the child lets it. */
    signal(SIGINT, SIG_IGN);
    for (;;) {
        unsigned char cmd;
        ssize_t k = read(cmd_fd, &cmd, 1);
        if (k < 0 && errno == EINTR) continue;
        if (k != 1) break;
        int status = fn(arg, cmd);
        /* What the command printed goes out before its answer, so the parent's next line
         * follows it (the buffers were empty at the fork: tr_child_spawn flushed them). */
        fflush(stdout), fflush(stderr);
        if (write_all(reply_fd, &status, sizeof status)) break;
    }
    /* _exit: no atexit handlers of the parent's (the buffers are flushed above) */
    _exit(0);
}

int tr_child_spawn(struct tr_child *c, tr_child_fn fn, void *arg, struct tr_error *err) {
    int to_child[2], to_parent[2];
    memset(c, 0, sizeof *c);
    if (pipe2(to_child, O_CLOEXEC)) return tr_error_set(err, TR_ERR_INTERNAL, "pipe: %s", strerror(errno));
    if (pipe2(to_parent, O_CLOEXEC)) {
        close(to_child[0]), close(to_child[1]);
        return tr_error_set(err, TR_ERR_INTERNAL, "pipe: %s", strerror(errno));
    }
    fflush(NULL); /* nothing buffered is written twice */
    const pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        close(to_child[0]), close(to_child[1]), close(to_parent[0]), close(to_parent[1]);
        return tr_error_set(err, TR_ERR_INTERNAL, "fork: %s", strerror(errno));
    }
    if (pid == 0) {
#ifdef __linux__
        /* the child ends with its parent: a parent killed (SIGTERM, SIGKILL) amid a long
         * command (a whole generate) left it running, reparented, until it finished */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(0); /* the parent died before the prctl */
#endif
        close(to_child[1]), close(to_parent[0]);
        for (int i = 0; i < n_parent_fds; i++) close(parent_fds[i]);
        child_loop(to_child[0], to_parent[1], fn, arg);
    }
    close(to_child[0]), close(to_parent[1]);
    c->pid = pid;
    c->cmd_fd = to_child[1];
    c->reply_fd = to_parent[0];
    fd_track(c->cmd_fd);
    fd_track(c->reply_fd);
    return TR_OK;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Why a reaped child is gone. */
static int describe_exit(int wstatus, const char *what, struct tr_error *err) {
    if (WIFSIGNALED(wstatus))
        return tr_error_set(err, TR_ERR_PLUGIN, "the backend's process was killed by signal %d (%s) during %s",
                            WTERMSIG(wstatus), strsignal(WTERMSIG(wstatus)), what);
    if (WIFEXITED(wstatus))
        return tr_error_set(err, TR_ERR_PLUGIN, "the backend's process exited with status %d during %s (the plugin "
                            "called exit?)", WEXITSTATUS(wstatus), what);
    return tr_error_set(err, TR_ERR_PLUGIN, "the backend's process ended (wait status %#x) during %s", wstatus, what);
}

static void close_fds(struct tr_child *c) {
    if (c->cmd_fd > 0) fd_untrack(c->cmd_fd), close(c->cmd_fd);
    if (c->reply_fd > 0) fd_untrack(c->reply_fd), close(c->reply_fd);
    c->cmd_fd = c->reply_fd = -1;
}

int tr_child_call(struct tr_child *c, int cmd, double timeout_s, const char *what, int *status,
                  struct tr_error *err) {
    if (!c->pid) return tr_error_set(err, TR_ERR_INTERNAL, "no backend process for %s", what);
    const unsigned char b = (unsigned char)cmd;
    /* A child that died already makes write fail with EPIPE (SIGPIPE ignored meanwhile). */
    void (*old)(int) = signal(SIGPIPE, SIG_IGN);
    int wrote = write_all(c->cmd_fd, &b, 1);
    signal(SIGPIPE, old);
    size_t got = 0;
    int eof = wrote != 0;
    const double deadline = now_s() + timeout_s;
    while (!eof && got < sizeof *status) {
        const double left = deadline - now_s();
        if (left <= 0) break;
        struct pollfd p = {.fd = c->reply_fd, .events = POLLIN};
        int n = poll(&p, 1, left > 3600 ? 3600 * 1000 : (int)(left * 1000) + 1);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) continue;
        ssize_t k = read(c->reply_fd, (char *)status + got, sizeof *status - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) eof = 1; /* the child closed its end: it is gone, or going */
        got += (size_t)k;
    }
    if (got == sizeof *status) return TR_OK;
    int wstatus = 0;
    if (!eof) { /* alive: it did not answer in time */
        kill(c->pid, SIGKILL);
        waitpid(c->pid, &wstatus, 0);
        close_fds(c);
        c->pid = 0;
        return tr_error_set(err, TR_ERR_PLUGIN, "no answer within [run] backend_timeout = %g s during %s; the "
                            "backend's process was killed", timeout_s, what);
    }
    waitpid(c->pid, &wstatus, 0);
    close_fds(c);
    c->pid = 0;
    return describe_exit(wstatus, what, err);
}

void tr_child_end(struct tr_child *c) {
    if (!c->pid) return;
    close_fds(c);
    for (int i = 0; i < 100; i++) {
        int ws;
        pid_t r = waitpid(c->pid, &ws, WNOHANG);
        if (r != 0) {
            c->pid = 0;
            return;
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    kill(c->pid, SIGKILL);
    waitpid(c->pid, NULL, 0);
    c->pid = 0;
}

int tr_child_once(tr_child_fn fn, void *arg, int cmd, double timeout_s, const char *what, int *status,
                  struct tr_error *err) {
    struct tr_child c;
    int rc = tr_child_spawn(&c, fn, arg, err);
    if (rc) return rc;
    rc = tr_child_call(&c, cmd, timeout_s, what, status, err);
    tr_child_end(&c);
    return rc;
}
