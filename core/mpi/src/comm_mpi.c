/* The data-parallel communicator over MPI (trident/comm_mpi.h).
 *
 * Open MPI's non-blocking collectives move only while some thread is inside an MPI call,
 * so an all-reduce started amid the backward pass (start_allreduce_f32) is carried by a
 * progress thread that tests the sums in flight every few tens of microseconds, reads
 * the heartbeats and keeps their timeout. MPI then runs serialized: every call, from
 * either thread, under one mutex. */
#include <mpi.h>
#include <pthread.h>
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
    int32_t kind;               /* KIND_SUM (a gradient's or the loss's) or KIND_CTL (state, a broadcast) */
    char what[PHASE_MAX];       /* "torch, step 5: gradient bucket 2" */
};

/* Sums go over MPI_COMM_WORLD, the ranks' exchanges of state and broadcasts over a
 * communicator of their own (ctl): a rank whose step failed before a sum goes on to the
 * exchange of the step's status, and on one communicator MPI would pair that with the
 * others' sum (a buffer of 8 bytes written with a bucket's). Its heartbeat then says a
 * control collective where the others' says a sum of the same number: seen, every rank
 * stops at once, naming both. */
enum { KIND_SUM = 0, KIND_CTL = 1 };

/* A sum started and not yet waited for. */
struct inflight {
    float *buf;
    int n_req;
    MPI_Request *req;           /* one per CHUNK */
    char what[2 * PHASE_MAX];
    int64_t seq;                /* its collective number (its first chunk's) */
    double t0;
    int state, code;            /* 0 in flight, 1 done, -1 failed with MPI error code */
    struct inflight *next;
};

struct mpi_comm {
    struct tr_comm pub;
    pthread_mutex_t mu;         /* held around every MPI call once the progress thread runs */
    pthread_cond_t work;        /* a sum started (the progress thread sleeps on it when none is open) */
    pthread_t thread;
    int thread_on, stop;
    struct inflight *flying;    /* in the order started */
    double timeout_s;
    double busy_s;              /* time spent in collectives */
    int64_t seq;                /* collectives this rank has started */
    int local_rank;             /* among the ranks on this host */
    char phase[PHASE_MAX];      /* the host's: "torch, step 5" */
    struct heartbeat *in, *out, *last; /* per peer: receive buffer, send buffer, last received */
    MPI_Request *recv, *send;   /* per peer */
    MPI_Comm ctl;               /* the exchanges' and broadcasts' communicator (KIND_CTL) */
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

/* Every other rank told that this one joins collective seq (of kind), for `what`. */
static void send_heartbeats(struct mpi_comm *m, const char *what, int kind) {
    for (int p = 0; p < m->pub.size; p++) {
        if (p == m->pub.rank) continue;
        /* the previous one went out long ago (a small message is sent eagerly) */
        MPI_Wait(&m->send[p], MPI_STATUS_IGNORE);
        m->out[p].seq = m->seq;
        m->out[p].kind = kind;
        snprintf(m->out[p].what, sizeof m->out[p].what, "%.*s", (int)sizeof m->out[p].what - 1, what);
        MPI_Isend(&m->out[p], (int)sizeof m->out[p], MPI_BYTE, p, TAG_HEARTBEAT, MPI_COMM_WORLD, &m->send[p]);
    }
}

/* Says where every other rank last was and stops the job: a collective that never
 * completed cannot be cancelled, and every other rank would wait for it too. Under mu. */
static void timeout_abort(struct mpi_comm *m, const char *what, int64_t seq) {
    poll_heartbeats(m);
    char msg[TR_ERROR_MSG_MAX];
    size_t off = (size_t)snprintf(msg, sizeof msg,
                                  "trident: error: rank %d: %s (collective #%lld) did not complete within "
                                  "[run] collective_timeout = %g s:", m->pub.rank, what, (long long)seq, m->timeout_s);
    for (int p = 0; p < m->pub.size && off < sizeof msg; p++) {
        if (p == m->pub.rank || m->last[p].seq == seq) continue;
        if (m->last[p].seq == 0)
            off += (size_t)snprintf(msg + off, sizeof msg - off, " rank %d never reached any collective;", p);
        else
            off += (size_t)snprintf(msg + off, sizeof msg - off, " rank %d %s #%lld (%s);", p,
                                    m->last[p].seq < seq ? "is behind, last at" : "went on to",
                                    (long long)m->last[p].seq, m->last[p].what);
    }
    if (off < sizeof msg)
        snprintf(msg + off, sizeof msg - off, " stopping every rank (a rank that died or hangs, or ranks "
                 "that ran different steps)\n");
    fputs(msg, stderr);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* A peer at the same collective number in a collective of another kind: the ranks left a
 * step in different places, and would wait for each other forever. Under mu. */
static void mismatch_check(struct mpi_comm *m, const char *what, int64_t seq, int kind) {
    for (int p = 0; p < m->pub.size; p++) {
        if (p == m->pub.rank || m->last[p].seq != seq || m->last[p].kind == kind) continue;
        fprintf(stderr, "trident: error: rank %d: collective #%lld is %s here and %s on rank %d: the ranks left the "
                "step in different places (a step that failed on some ranks and not others); stopping every rank\n",
                m->pub.rank, (long long)seq, what, m->last[p].what, p);
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

static void nap(long ns) {
    struct timespec ts = {0, ns};
    nanosleep(&ts, NULL);
}

/* The collective's request polled to completion, or the job stopped with a message that
 * says which ranks never came. */
static int wait_collective(struct mpi_comm *m, MPI_Request *req, const char *what, int64_t seq, int kind,
                           struct tr_error *err) {
    const double t0 = now_s(), deadline = t0 + m->timeout_s;
    long spins = 0;
    for (;;) {
        int done = 0;
        pthread_mutex_lock(&m->mu);
        const int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc == MPI_SUCCESS && !done) poll_heartbeats(m), mismatch_check(m, what, seq, kind);
        if (rc == MPI_SUCCESS && !done && now_s() > deadline) timeout_abort(m, what, seq);
        pthread_mutex_unlock(&m->mu);
        if (rc != MPI_SUCCESS) return mpi_fail(err, rc, what);
        if (done) break;
        if (++spins > 1000) nap(50 * 1000); /* spin briefly, then sleep a little: the ranks may share the cores */
    }
    m->busy_s += now_s() - t0;
    return TR_OK;
}

/* The next collective announced to the other ranks: what (the phase and op) names it.
 * Under mu. */
static void announce(struct mpi_comm *m, const char *op, char *what, size_t n, int kind) {
    snprintf(what, n, "%s%s%s", m->phase, m->phase[0] ? ": " : "", op);
    m->seq++;
    send_heartbeats(m, what, kind);
}

static void allreduce_name(int tag, char *op, size_t n) {
    /* ALLREDUCE's tag: its gradient bucket, or -1 for the loss (train.c) */
    if (tag >= 0) snprintf(op, n, "the all-reduce of gradient bucket %d", tag);
    else snprintf(op, n, "the all-reduce of the loss");
}

/* A blocking collective's start: announced and its MPI_I* call made under mu (begin
 * locks, end unlocks), then polled to its end. */
static int64_t begin(struct mpi_comm *m, const char *op, char *what, size_t n, int kind) {
    pthread_mutex_lock(&m->mu);
    announce(m, op, what, n, kind);
    return m->seq;
}

static int end(struct mpi_comm *m, int rc, MPI_Request *req, const char *what, int64_t seq, int kind,
               struct tr_error *err) {
    pthread_mutex_unlock(&m->mu);
    return rc != MPI_SUCCESS ? mpi_fail(err, rc, what) : wait_collective(m, req, what, seq, kind, err);
}

static int do_allreduce(void *user, float *buf, int64_t n, int tag, struct tr_error *err) {
    struct mpi_comm *m = user;
    char what[2 * PHASE_MAX], op[48];
    allreduce_name(tag, op, sizeof op);
    for (int64_t off = 0; off < n; off += CHUNK) {
        const int cnt = (int)(n - off < CHUNK ? n - off : CHUNK);
        MPI_Request req;
        const int64_t seq = begin(m, op, what, sizeof what, KIND_SUM);
        const int rc = end(m, MPI_Iallreduce(MPI_IN_PLACE, buf + off, cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req),
                           &req, what, seq, KIND_SUM, err);
        if (rc) return rc;
    }
    return TR_OK;
}

/* ---- sums in flight: started by the kernels, carried by the progress thread ---- */

/* Every sum in flight tested once (under mu): the finished marked, the number still open
 * returned and *oldest the first of them. */
static int test_flying(struct mpi_comm *m, struct inflight **oldest) {
    int open = 0;
    *oldest = NULL;
    for (struct inflight *f = m->flying; f; f = f->next) {
        if (f->state) continue;
        int done = 0;
        const int rc = MPI_Testall(f->n_req, f->req, &done, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS || done) {
            f->state = rc == MPI_SUCCESS ? 1 : -1;
            f->code = rc;
        } else if (!open++) {
            *oldest = f;
        }
    }
    return open;
}

/* While the backward pass computes: the sums in flight tested every few tens of
 * microseconds (a nap between, so that it takes little from the cores the ranks share),
 * the heartbeats read, and the job stopped when the oldest outlives the timeout. */
static void *progress_main(void *arg) {
    struct mpi_comm *m = arg;
    pthread_mutex_lock(&m->mu);
    while (!m->stop) {
        struct inflight *oldest;
        if (!test_flying(m, &oldest)) {
            pthread_cond_wait(&m->work, &m->mu);
            continue;
        }
        poll_heartbeats(m);
        mismatch_check(m, oldest->what, oldest->seq, KIND_SUM);
        if (now_s() > oldest->t0 + m->timeout_s) timeout_abort(m, oldest->what, oldest->seq);
        pthread_mutex_unlock(&m->mu);
        nap(20 * 1000);
        pthread_mutex_lock(&m->mu);
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

static int start_allreduce(void *user, float *buf, int64_t n, int tag, struct tr_error *err) {
    struct mpi_comm *m = user;
    struct inflight *f = calloc(1, sizeof *f);
    const int n_req = (int)((n + CHUNK - 1) / CHUNK);
    if (f) f->req = calloc((size_t)(n_req > 0 ? n_req : 1), sizeof *f->req);
    if (!f || !f->req) {
        if (f) free(f);
        return tr_error_set(err, TR_ERR_NOMEM, "all-reduce: out of memory");
    }
    char op[48];
    allreduce_name(tag, op, sizeof op);
    f->buf = buf;
    f->t0 = now_s();
    pthread_mutex_lock(&m->mu);
    if (!m->thread_on && pthread_create(&m->thread, NULL, progress_main, m) == 0) m->thread_on = 1;
    if (!m->thread_on) {
        pthread_mutex_unlock(&m->mu);
        free(f->req);
        free(f);
        return tr_error_set(err, TR_ERR_COMM, "all-reduce: no progress thread could be started");
    }
    int rc = MPI_SUCCESS;
    for (int64_t off = 0; off < n && rc == MPI_SUCCESS; off += CHUNK) {
        const int cnt = (int)(n - off < CHUNK ? n - off : CHUNK);
        announce(m, op, f->what, sizeof f->what, KIND_SUM);
        if (off == 0) f->seq = m->seq;
        rc = MPI_Iallreduce(MPI_IN_PLACE, buf + off, cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &f->req[f->n_req++]);
    }
    if (rc != MPI_SUCCESS) { /* the chunks started are never waited for: the job stops on this error */
        pthread_mutex_unlock(&m->mu);
        int r = mpi_fail(err, rc, f->what);
        free(f->req);
        free(f);
        return r;
    }
    struct inflight **tail = &m->flying;
    while (*tail) tail = &(*tail)->next;
    *tail = f;
    pthread_cond_signal(&m->work);
    pthread_mutex_unlock(&m->mu);
    return TR_OK;
}

/* The waiting thread drives the sums itself, as a blocking collective does: a libnbc sum
 * moves a round per test, and the progress thread's naps would add up over its rounds. */
static int wait_allreduce(void *user, float *buf, struct tr_error *err) {
    struct mpi_comm *m = user;
    const double t0 = now_s();
    long spins = 0;
    pthread_mutex_lock(&m->mu);
    struct inflight **at = &m->flying;
    while (*at && (*at)->buf != buf) at = &(*at)->next;
    struct inflight *f = *at;
    if (!f) {
        pthread_mutex_unlock(&m->mu);
        return tr_error_set(err, TR_ERR_INVALID, "all-reduce: a wait for a sum that was never started");
    }
    for (;;) {
        struct inflight *oldest;
        test_flying(m, &oldest);
        if (f->state) break;
        poll_heartbeats(m);
        mismatch_check(m, oldest->what, oldest->seq, KIND_SUM);
        if (now_s() > oldest->t0 + m->timeout_s) timeout_abort(m, oldest->what, oldest->seq);
        pthread_mutex_unlock(&m->mu);
        if (++spins > 1000) nap(50 * 1000);
        pthread_mutex_lock(&m->mu);
    }
    *at = f->next; /* the list may have grown behind f, never before it: at still points to f */
    pthread_mutex_unlock(&m->mu);
    m->busy_s += now_s() - t0;
    const int rc = f->state < 0 ? mpi_fail(err, f->code, f->what) : TR_OK;
    free(f->req);
    free(f);
    return rc;
}

static int do_bcast(void *user, void *buf, size_t nbytes, int root, struct tr_error *err) {
    struct mpi_comm *m = user;
    if (nbytes > (size_t)CHUNK) return tr_error_set(err, TR_ERR_INVALID, "broadcast: %zu bytes, at most %d", nbytes, CHUNK);
    char what[2 * PHASE_MAX];
    MPI_Request req;
    const int64_t seq = begin(m, "a broadcast", what, sizeof what, KIND_CTL);
    return end(m, MPI_Ibcast(buf, (int)nbytes, MPI_BYTE, root, m->ctl, &req), &req, what, seq, KIND_CTL, err);
}

static int do_allgather(void *user, const void *mine, void *all, size_t nbytes, struct tr_error *err) {
    struct mpi_comm *m = user;
    if (nbytes > (size_t)CHUNK) return tr_error_set(err, TR_ERR_INVALID, "allgather: %zu bytes, at most %d", nbytes, CHUNK);
    char what[2 * PHASE_MAX];
    MPI_Request req;
    const int64_t seq = begin(m, "an exchange of the ranks' state", what, sizeof what, KIND_CTL);
    return end(m, MPI_Iallgather(mine, (int)nbytes, MPI_BYTE, all, (int)nbytes, MPI_BYTE, m->ctl, &req), &req,
               what, seq, KIND_CTL, err);
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
        int rc = MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
        if (rc != MPI_SUCCESS) return mpi_fail(err, rc, "MPI_Init_thread");
    } else {
        MPI_Query_thread(&provided);
    }
    /* errors come back as codes, said by trident, rather than aborting inside MPI */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    struct mpi_comm *m = calloc(1, sizeof *m);
    if (!m) return tr_error_set(err, TR_ERR_NOMEM, "MPI communicator: out of memory");
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->work, NULL);
    MPI_Comm_rank(MPI_COMM_WORLD, &m->pub.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &m->pub.size);
    m->ctl = MPI_COMM_NULL;
    if (MPI_Comm_dup(MPI_COMM_WORLD, &m->ctl) != MPI_SUCCESS) {
        free(m);
        return tr_error_set(err, TR_ERR_COMM, "MPI_Comm_dup: no communicator for the ranks' exchanges");
    }
    MPI_Comm_set_errhandler(m->ctl, MPI_ERRORS_RETURN);
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
    if (provided >= MPI_THREAD_SERIALIZED) { /* else ALLREDUCE_START sums at once */
        m->pub.start_allreduce_f32 = start_allreduce;
        m->pub.wait_f32 = wait_allreduce;
    }
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
    if (m->thread_on) {
        pthread_mutex_lock(&m->mu);
        m->stop = 1;
        pthread_cond_signal(&m->work);
        pthread_mutex_unlock(&m->mu);
        pthread_join(m->thread, NULL);
    }
    while (m->flying) { /* started, never waited for: a run that failed mid-step */
        struct inflight *f = m->flying;
        m->flying = f->next;
        free(f->req);
        free(f);
    }
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
    if (m->ctl != MPI_COMM_NULL) MPI_Comm_free(&m->ctl);
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->work);
    free(m);
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Finalize();
}
