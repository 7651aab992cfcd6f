/* Data parallelism without MPI (docs/parallel.md): the gradient buckets' plan, the fit
 * graph of 2 and 4 ranks run through every backend against a stand-in communicator whose
 * other ranks hold this one's numbers (so the global step is this rank's own, and a
 * correct transform gives the one-process step bit for bit: x·½ summed twice is x), the
 * ALLREDUCE kernel's refusals, and NCCL's id exchange (cuda/host/nccl_id.c) between two
 * stand-in ranks. The real ranks are tests/dp.sh's (mpirun). */
#include <stdlib.h>
#include <string.h>
#include "backendutil.h"
#include "models.h"
#include "testutil.h"
#include "../plugins/kernels/cuda/host/nccl_id.h"
#include "trident/bench.h"
#include "trident/kernels.h"
#include "trident/train.h"
#include "trident/weights.h"

/* ---- a communicator whose every rank holds the same numbers ---- */
struct mirror {
    int size;
    long allreduces;
};

static int mirror_allreduce(void *user, float *buf, int64_t n, int tag, struct tr_error *err) {
    (void)tag, (void)err;
    struct mirror *m = user;
    for (int64_t i = 0; i < n; i++) buf[i] *= (float)m->size;
    m->allreduces++;
    return TR_OK;
}

static int mirror_bcast(void *user, void *buf, size_t nbytes, int root, struct tr_error *err) {
    (void)user, (void)buf, (void)nbytes, (void)root, (void)err;
    return TR_OK;
}

static int mirror_allgather(void *user, const void *mine, void *all, size_t nbytes, struct tr_error *err) {
    (void)err;
    struct mirror *m = user;
    for (int r = 0; r < m->size; r++) memcpy((char *)all + (size_t)r * nbytes, mine, nbytes);
    return TR_OK;
}

/* The buckets: by readiness (node id), cut at the byte bound, a large gradient alone. */
static void test_plan(void **state) {
    (void)state;
    struct tr_graph *g;
    struct tr_error e = {0};
    assert_int_equal(tr_graph_init(&g, &e), TR_OK);
    /* gradients made in the order 3, 0, 2, 1 (node ids), of 100, 10, 1000, 10 floats */
    const int64_t sizes[4] = {10, 10, 1000, 100};
    int ids[4];
    const char *const names[4] = {"p0", "p1", "p2", "p3"};
    for (int i = 0; i < 4; i++) ids[i] = tr_param(g, names[i], TR_DTYPE_F32, 1, &sizes[i], 0, 1);
    const int grads[4] = {ids[1], ids[3], ids[2], ids[0]};
    int order[4], bucket_of[4];
    /* 60 floats a bucket: 10 + 10 together, then 1000 alone, then 100 */
    assert_int_equal(tr_train_dp_plan(g, 4, grads, 240.0, order, bucket_of), 3);
    const int want_order[4] = {3, 0, 2, 1}, want_bucket[4] = {0, 2, 1, 0};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(order[i], want_order[i]);
        assert_int_equal(bucket_of[i], want_bucket[i]);
    }
    assert_int_equal(tr_train_dp_plan(g, 4, grads, 1e9, order, bucket_of), 1);
    assert_int_equal(tr_train_dp_plan(g, 0, grads, 1e9, order, bucket_of), 0);
    tr_graph_free(g);
}

static void build(const char *ini, int ranks, struct tr_task_graph *tg) {
    static struct tr_config cfg;
    struct tr_error e = {0};
    if (tr_config_load_string(ini, "dp.ini", &cfg, &e)) fail_msg("%s", e.msg);
    cfg.ranks = ranks;
    if (tr_task_graph_build(&cfg, tr_builtin_models, tg, &e)) fail_msg("%s", e.msg);
}

/* [run] lines model_ini (then perhaps other sections), in one process at batch 2 and on
 * `ranks` mirrored ranks at batch 2·ranks (2 each): the same
 * losses and the same trained state, bit for bit, on every backend; every bucket ran. */
static void check_mirrored(const char *model_ini, int ranks) {
    char one_ini[512], dp_ini[512];
    snprintf(one_ini, sizeof one_ini, "[run]\nbatch = 2\n%s", model_ini);
    snprintf(dp_ini, sizeof dp_ini, "[run]\nbatch = %d\nbucket_mb = 0.002\n%s", 2 * ranks, model_ini);
    for (int b = 0; b < TR_TEST_N_BACKENDS; b++) {
        const struct tr_test_backend *be = &tr_test_backends[b];
        struct tr_task_graph one, dp;
        build(one_ini, 1, &one);
        build(dp_ini, ranks, &dp);
        struct tr_weights *w1, *w2;
        struct tr_error e = {0};
        assert_int_equal(tr_weights_from_seed(one.graph, 7, &w1, &e), TR_OK);
        assert_int_equal(tr_weights_from_seed(dp.graph, 7, &w2, &e), TR_OK);
        assert_int_equal(tr_train_init_masters(one.graph, &one.train, &e), TR_OK);
        assert_int_equal(tr_train_init_masters(dp.graph, &dp.train, &e), TR_OK);
        const int n1 = tr_graph_n_inputs(one.graph), n2 = tr_graph_n_inputs(dp.graph);
        assert_int_equal(n2, n1 + 1); /* dp_share */
        struct tr_tensor in1[16], in2[16], out1[4], out2[4];
        tr_test_fit_inputs(&one, 11, 1e-2f, 1.0f, in1);
        for (int i = 0; i < n2; i++) {
            const int id = tr_graph_input(dp.graph, i);
            in2[i] = tr_test_tensor((enum tr_dtype)tr_node_dtype(dp.graph, id), tr_node_ndim(dp.graph, id),
                                    tr_node_shape(dp.graph, id));
            if (id == dp.train.dp_share) *(float *)in2[i].data = 1.0f / (float)ranks;
            else memcpy(in2[i].data, in1[i].data, tr_tensor_nbytes(&in1[i]));
        }
        struct mirror m = {.size = ranks};
        const struct tr_comm comm = {.rank = 0, .size = ranks, .user = &m, .allreduce_f32 = mirror_allreduce,
                                     .bcast = mirror_bcast, .allgather = mirror_allgather};
        tr_test_run_backend(be, tr_test_dir, one.graph, in1, 3, out1, NULL);
        tr_kernels_set_comm(&comm);
        tr_test_run_backend(be, tr_test_dir, dp.graph, in2, 3, out2, NULL);
        tr_kernels_set_comm(NULL);
        const float l1 = *(float *)out1[0].data, l2 = *(float *)out2[0].data;
        if (l1 != l2) fail_msg("%s, %d ranks: loss %.9g, one process %.9g", be->label, ranks, (double)l2, (double)l1);
        int buckets = 0;
        for (int id = 0; id < tr_graph_n_nodes(dp.graph); id++)
            buckets += tr_node_op(dp.graph, id) == TR_OP_ALLREDUCE;
        assert_true(buckets > 2);                          /* 2 KiB buckets: several, and the loss's */
        assert_int_equal(m.allreduces, 3L * buckets);      /* every one ran at every step */
        for (int u = 0; u < tr_graph_n_updates(one.graph); u++) {
            const int p1 = tr_graph_update_param(one.graph, u);
            const int p2 = tr_graph_find(dp.graph, tr_node_name(one.graph, p1));
            assert_true(p2 >= 0);
            struct tr_tensor t = tr_node_tensor(one.graph, p1);
            if (memcmp(tr_node_data(one.graph, p1), tr_node_data(dp.graph, p2), tr_tensor_nbytes(&t)) != 0)
                fail_msg("%s, %d ranks: '%s' differs from one process's after 3 steps", be->label, ranks,
                         tr_node_name(one.graph, p1));
        }
        printf("%s, %d mirrored ranks: %d all-reduces a step, loss %.7f and %d trained states as one process's\n",
               be->label, ranks, buckets, (double)l2, tr_graph_n_updates(one.graph));
        for (int i = 0; i < n1; i++) tr_test_tensor_free(&in1[i]);
        for (int i = 0; i < n2; i++) tr_test_tensor_free(&in2[i]);
        for (int i = 0; i < tr_graph_n_outputs(one.graph); i++) tr_test_tensor_free(&out1[i]);
        for (int i = 0; i < tr_graph_n_outputs(dp.graph); i++) tr_test_tensor_free(&out2[i]);
        tr_weights_free(w1);
        tr_weights_free(w2);
        tr_task_graph_free(&one);
        tr_task_graph_free(&dp);
    }
}

static void test_bert_mirrored(void **state) {
    (void)state;
    check_mirrored("model = bert\npreset = tiny\ntask = fit\nseq_len = 8\n", 2);
    check_mirrored("model = bert\npreset = tiny\ntask = fit\nseq_len = 8\n", 4);
}

static void test_gemma_lora_mirrored(void **state) {
    (void)state;
    check_mirrored("model = gemma\npreset = tiny\ntask = fit\nseq_len = 8\n[model]\nlora_rank = 4\n", 2);
}

/* What a run refuses: a graph for other ranks than the communicator's, a task that does
 * not train, a batch the ranks do not divide. */
static void test_refusals(void **state) {
    (void)state;
    struct tr_kernels *k;
    struct tr_error e = {0};
    assert_int_equal(tr_kernels_init(&k, TR_DEVICE_CPU, 0, &e), TR_OK);
    const int64_t sh[1] = {5};
    struct tr_tensor x = tr_test_tensor(TR_DTYPE_F32, 1, sh), y = tr_test_tensor(TR_DTYPE_F32, 1, sh);
    tr_test_randn(&x, 1, 1.0);
    assert_int_equal(tr_k_allreduce(k, &x, 2, 3, 0.5f, &y, &e), TR_ERR_INVALID);
    tr_assert_msg_has(&e, "bucket 3");
    tr_assert_msg_has(&e, "built for 2 ranks and this run has 1");
    assert_int_equal(tr_k_allreduce(k, &x, 1, 0, 0.5f, &y, &e), TR_OK);
    for (int i = 0; i < 5; i++) assert_true(((float *)y.data)[i] == 0.5f * ((float *)x.data)[i]);
    tr_test_tensor_free(&x);
    tr_test_tensor_free(&y);
    tr_kernels_free(k);

    static struct tr_config cfg;
    struct tr_task_graph tg;
    assert_int_equal(tr_config_load_string("[run]\nmodel = bert\ntask = predict\n", "p.ini", &cfg, &e), TR_OK);
    cfg.ranks = 2;
    assert_int_equal(tr_task_graph_build(&cfg, tr_builtin_models, &tg, &e), TR_ERR_UNSUPPORTED);
    tr_assert_msg_has(&e, "data parallelism trains");
    assert_int_equal(tr_config_load_string("[run]\nmodel = bert\ntask = fit\nbatch = 6\n", "f.ini", &cfg, &e), TR_OK);
    cfg.ranks = 4;
    assert_int_equal(tr_task_graph_build(&cfg, tr_builtin_models, &tg, &e), TR_ERR_INVALID);
    tr_assert_msg_has(&e, "batch = 6 on 4 ranks: expected a multiple of the ranks");
}

/* ---- NCCL's id: rank 0 makes it, every rank gets it (two stand-in ranks, one mailbox) ---- */
struct mailbox {
    unsigned char bytes[256];
    size_t n;
    int reads;
};

struct box_rank {
    struct mailbox *box;
    int rank;
};

static int box_bcast(void *user, void *buf, size_t nbytes, int root, struct tr_error *err) {
    struct box_rank *r = user;
    if (root != 0 || nbytes > sizeof r->box->bytes) return tr_error_set(err, TR_ERR_INVALID, "box: root %d", root);
    if (r->rank == 0) memcpy(r->box->bytes + r->box->n, buf, nbytes);
    else memcpy(buf, r->box->bytes + r->box->reads, nbytes);
    if (r->rank == 0) r->box->n += nbytes;
    else r->box->reads += (int)nbytes;
    return TR_OK;
}

static int made;
static int make_id(void *id, void *user) {
    made++;
    memset(id, 0x5a, 128);
    return user ? 3 : 0; /* user set: ncclGetUniqueId failed with 3 */
}

static void test_nccl_id(void **state) {
    (void)state;
    for (int failing = 0; failing < 2; failing++) {
        struct mailbox box = {0};
        struct box_rank r0 = {&box, 0}, r1 = {&box, 1};
        const struct tr_comm c0 = {.rank = 0, .size = 2, .user = &r0, .bcast = box_bcast};
        const struct tr_comm c1 = {.rank = 1, .size = 2, .user = &r1, .bcast = box_bcast};
        unsigned char id0[128] = {0}, id1[128] = {0};
        struct tr_error e0 = {0}, e1 = {0};
        made = 0;
        void *user = failing ? &box : NULL;
        int rc0 = tr_cuda_nccl_share_id(&c0, make_id, user, id0, sizeof id0, &e0);
        int rc1 = tr_cuda_nccl_share_id(&c1, make_id, user, id1, sizeof id1, &e1);
        assert_int_equal(made, 1); /* rank 0 alone makes it */
        if (!failing) {
            assert_int_equal(rc0, TR_OK);
            assert_int_equal(rc1, TR_OK);
            assert_memory_equal(id0, id1, sizeof id0);
            assert_int_equal(id1[127], 0x5a);
        } else { /* every rank learns that rank 0 failed, and nobody waits for an id */
            assert_int_equal(rc0, TR_ERR_DEVICE);
            assert_int_equal(rc1, TR_ERR_DEVICE);
            tr_assert_msg_has(&e1, "rank 0 could not make the unique id");
            assert_int_equal(box.n, sizeof(int32_t));
        }
    }
}

TR_TEST_MAIN(tr_test_dir_setup, tr_test_dir_teardown, test_plan, test_bert_mirrored, test_gemma_lora_mirrored,
             test_refusals, test_nccl_id)
