/* The data-parallel communicator over MPI (trident/comm_mpi.h). */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "trident/comm_mpi.h"

#define PHASE_MAX 96
#define TAG_HEARTBEAT 7301
#define CHUNK (1 << 28) /* MPI counts are ints: a larger buffer goes in chunks */

/* What a rank tells the others before each collective. */
struct heartbeat {
    int64_t seq;                /* the collective's number on the sender, from 1 */
    char what[PHASE_MAX];       /* "torch, step 5: gradient bucket 2" */
};

struct mpi_comm {
    struct tr_comm pub;
    double timeout_s;
    double busy_s;              /* time spent in collectives */
    int64_t seq;                /* collectives this rank has started */
    int local_rank;             /* among the ranks on this host */
    char phase[PHASE_MAX];      /* the host's: "torch, step 5" */
    struct heartbeat *in, *out, *last; /* per peer: receive buffer, send buffer, last received */
    MPI_Request *recv, *send;   /* per peer */
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int tr_comm_mpi_launched(int *size) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) {
            if (size) *size = atoi(v);
            return 1;
        }
    }
    if (size) *size = 1;
    return 0;
}

static int mpi_fail(struct tr_error *err, int code, const char *what) {
    char s[MPI_MAX_ERROR_STRING] = "";
    int n = 0;
    MPI_Error_string(code, s, &n);
    return tr_error_set(err, TR_ERR_COMM, "%s: %s", what, s);
}

/* Whatever heartbeats have come in, recorded, and their receives posted again. */
static void poll_heartbeats(struct mpi_comm *m) {
    for (int p = 0; p < m->pub.size; p++) {
        if (p == m->pub.rank) continue;
        for (;;) {
            int done = 0;
            MPI_Test(&m->recv[p], &done, MPI_STATUS_IGNORE);
            if (!done) break;
            m->last[p] = m->in[p];
            MPI_Irecv(&m->in[p], (int)sizeof m->in[p], MPI_BYTE, p, TAG_HEARTBEAT, MPI_COMM_WORLD, &m->recv[p]);
        }
    }
}

/* Every other rank told that this one joins collective seq, for `what`. */
static void send_heartbeats(struct mpi_comm *m, const char *what) {
    for (int p = 0; p < m->pub.size; p++) {
        if (p == m->pub.rank) continue;
        /* the previous one went out long ago (a small message is sent eagerly) */
        MPI_Wait(&m->send[p], MPI_STATUS_IGNORE);
        m->out[p].seq = m->seq;
        snprintf(m->out[p].what, sizeof m->out[p].what, "%s", what);
        MPI_Isend(&m->out[p], (int)sizeof m->out[p], MPI_BYTE, p, TAG_HEARTBEAT, MPI_COMM_WORLD, &m->send[p]);
    }
}

/* The collective's request polled to completion, or the job stopped with a message that
 * says which ranks never came. */
static int wait_collective(struct mpi_comm *m, MPI_Request *req, const char *what, struct tr_error *err) {
    const double t0 = now_s(), deadline = t0 + m->timeout_s;
    long spins = 0;
    for (;;) {
        int done = 0, rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return mpi_fail(err, rc, what);
        if (done) break;
        poll_heartbeats(m);
        if (now_s() > deadline) {
            poll_heartbeats(m);
            char msg[TR_ERROR_MSG_MAX];
            size_t off = (size_t)snprintf(msg, sizeof msg,
                                          "trident: error: rank %d: %s (collective #%lld) did not complete within "
                                          "[run] collective_timeout = %g s:", m->pub.rank, what, (long long)m->seq,
                                          m->timeout_s);
            for (int p = 0; p < m->pub.size && off < sizeof msg; p++) {
                if (p == m->pub.rank || m->last[p].seq == m->seq) continue;
                if (m->last[p].seq == 0)
                    off += (size_t)snprintf(msg + off, sizeof msg - off, " rank %d never reached any collective;", p);
                else
                    off += (size_t)snprintf(msg + off, sizeof msg - off, " rank %d %s #%lld (%s);", p,
                                            m->last[p].seq < m->seq ? "is behind, last at" : "went on to",
                                            (long long)m->last[p].seq, m->last[p].what);
            }
            if (off < sizeof msg)
                snprintf(msg + off, sizeof msg - off, " stopping every rank (a rank that died or hangs, or ranks "
                         "that ran different steps)\n");
            fputs(msg, stderr);
            fflush(stderr);
            MPI_Abort(MPI_COMM_WORLD, 1);
            return tr_error_set(err, TR_ERR_COMM, "%s: timed out", what); /* not reached */
        }
        /* spin briefly, then sleep a little: the ranks may share the cores */
        if (++spins > 1000) {
            struct timespec ts = {0, 50 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    m->busy_s += now_s() - t0;
    return TR_OK;
}

/* The next collective announced to the other ranks: what (the phase and op) names it. */
static void announce(struct mpi_comm *m, const char *op, char *what, size_t n) {
    snprintf(what, n, "%s%s%s", m->phase, m->phase[0] ? ": " : "", op);
    m->seq++;
    send_heartbeats(m, what);
}

/* After the MPI_I* call that started it (rc its status): the collective to its end. */
static int finish(struct mpi_comm *m, int rc, MPI_Request *req, const char *what, struct tr_error *err) {
    return rc != MPI_SUCCESS ? mpi_fail(err, rc, what) : wait_collective(m, req, what, err);
}

static int do_allreduce(void *user, float *buf, int64_t n, int tag, struct tr_error *err) {
    struct mpi_comm *m = user;
    char what[2 * PHASE_MAX], op[48];
    /* ALLREDUCE's tag: its gradient bucket, or -1 for the loss (train.c) */
    if (tag >= 0) snprintf(op, sizeof op, "the all-reduce of gradient bucket %d", tag);
    else snprintf(op, sizeof op, "the all-reduce of the loss");
    for (int64_t off = 0; off < n; off += CHUNK) {
        const int cnt = (int)(n - off < CHUNK ? n - off : CHUNK);
        announce(m, op, what, sizeof what);
        MPI_Request req;
        int rc = MPI_Iallreduce(MPI_IN_PLACE, buf + off, cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req);
        if ((rc = finish(m, rc, &req, what, err)) != TR_OK) return rc;
    }
    return TR_OK;
}

static int do_bcast(void *user, void *buf, size_t nbytes, int root, struct tr_error *err) {
    struct mpi_comm *m = user;
    if (nbytes > (size_t)CHUNK) return tr_error_set(err, TR_ERR_INVALID, "broadcast: %zu bytes, at most %d", nbytes, CHUNK);
    char what[2 * PHASE_MAX];
    announce(m, "a broadcast", what, sizeof what);
    MPI_Request req;
    return finish(m, MPI_Ibcast(buf, (int)nbytes, MPI_BYTE, root, MPI_COMM_WORLD, &req), &req, what, err);
}

static int do_allgather(void *user, const void *mine, void *all, size_t nbytes, struct tr_error *err) {
    struct mpi_comm *m = user;
    if (nbytes > (size_t)CHUNK) return tr_error_set(err, TR_ERR_INVALID, "allgather: %zu bytes, at most %d", nbytes, CHUNK);
    char what[2 * PHASE_MAX];
    announce(m, "an exchange of the ranks' state", what, sizeof what);
    MPI_Request req;
    return finish(m, MPI_Iallgather(mine, (int)nbytes, MPI_BYTE, all, (int)nbytes, MPI_BYTE, MPI_COMM_WORLD, &req), &req,
                  what, err);
}

static void set_phase(void *user, const char *what) {
    struct mpi_comm *m = user;
    snprintf(m->phase, sizeof m->phase, "%s", what ? what : "");
}

static double seconds(void *user) { return ((struct mpi_comm *)user)->busy_s; }

int tr_comm_mpi_open(int *argc, char ***argv, struct tr_comm **out, struct tr_error *err) {
    *out = NULL;
    int inited = 0, provided = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
        if (rc != MPI_SUCCESS) return mpi_fail(err, rc, "MPI_Init_thread");
    }
    /* errors come back as codes, said by trident, rather than aborting inside MPI */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    struct mpi_comm *m = calloc(1, sizeof *m);
    if (!m) return tr_error_set(err, TR_ERR_NOMEM, "MPI communicator: out of memory");
    MPI_Comm_rank(MPI_COMM_WORLD, &m->pub.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &m->pub.size);
    MPI_Comm host;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, m->pub.rank, MPI_INFO_NULL, &host) == MPI_SUCCESS) {
        MPI_Comm_rank(host, &m->local_rank);
        MPI_Comm_free(&host);
    }
    const int n = m->pub.size;
    m->in = calloc((size_t)n, sizeof *m->in);
    m->out = calloc((size_t)n, sizeof *m->out);
    m->last = calloc((size_t)n, sizeof *m->last);
    m->recv = calloc((size_t)n, sizeof *m->recv);
    m->send = calloc((size_t)n, sizeof *m->send);
    if (!m->in || !m->out || !m->last || !m->recv || !m->send) {
        tr_comm_mpi_close(&m->pub);
        return tr_error_set(err, TR_ERR_NOMEM, "MPI communicator: out of memory for %d ranks", n);
    }
    for (int p = 0; p < n; p++) {
        m->recv[p] = m->send[p] = MPI_REQUEST_NULL;
        if (p != m->pub.rank)
            MPI_Irecv(&m->in[p], (int)sizeof m->in[p], MPI_BYTE, p, TAG_HEARTBEAT, MPI_COMM_WORLD, &m->recv[p]);
    }
    m->timeout_s = 60;
    m->pub.user = m;
    m->pub.allreduce_f32 = do_allreduce;
    m->pub.bcast = do_bcast;
    m->pub.allgather = do_allgather;
    m->pub.set_phase = set_phase;
    m->pub.seconds = seconds;
    *out = &m->pub;
    return TR_OK;
}

int tr_comm_mpi_local_rank(const struct tr_comm *c) { return c ? ((const struct mpi_comm *)c->user)->local_rank : 0; }

void tr_comm_mpi_set_timeout(struct tr_comm *c, double s) {
    if (c && s > 0) ((struct mpi_comm *)c->user)->timeout_s = s;
}

void tr_comm_mpi_abort(struct tr_comm *c, int code) {
    (void)c;
    fflush(stdout);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
}

void tr_comm_mpi_close(struct tr_comm *c) {
    if (!c) return;
    struct mpi_comm *m = c->user;
    for (int p = 0; m->recv && p < c->size; p++) {
        if (m->recv[p] != MPI_REQUEST_NULL) {
            MPI_Cancel(&m->recv[p]);
            MPI_Request_free(&m->recv[p]);
        }
        if (m->send && m->send[p] != MPI_REQUEST_NULL) MPI_Wait(&m->send[p], MPI_STATUS_IGNORE);
    }
    free(m->in);
    free(m->out);
    free(m->last);
    free(m->recv);
    free(m->send);
    free(m);
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Finalize();
}
