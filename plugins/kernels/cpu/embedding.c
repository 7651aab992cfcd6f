/* Embedding gather: out[..., :] = table[ids[...], :]. Every id is checked before any row
 * is copied, so a bad id leaves out untouched and names the first offender. The ids are
 * data, not shape: a bound call checks them at every call too. */
#include "cpu_internal.h"

struct embedding_plan {
    struct tr_cpu_prepared hdr;
    struct tr_tensor table; /* for the message about a bad id */
    const void *ids;
    int is64;
    int64_t n, V;
    size_t row;
    char *out;
};

int tr_cpu_embedding_args(int device, const struct tr_tensor *table, const struct tr_tensor *ids,
                          const struct tr_tensor *out, struct tr_error *err) {
    /* the cuda kernel gathers float rows only; the cpu one copies rows of any dtype */
    int (*check_rows)(const struct tr_tensor *, int, const char *, const char *, struct tr_error *) =
        device == TR_DEVICE_CPU ? tr_cpu_check_tensor_on : tr_cpu_check_float_on;
    int rc = check_rows(table, device, "embedding", "table", err);
    if (!rc) rc = tr_cpu_check_tensor_on(ids, device, "embedding", "ids", err);
    if (!rc) rc = check_rows(out, device, "embedding", "out", err);
    if (rc) return rc;
    char d1[200], d2[200], d3[200];
    if (table->ndim != 2)
        return tr_error_set(err, TR_ERR_SHAPE, "embedding: table %s should be 2-D (V,D)", tr_cpu_desc(table, d1, sizeof d1));
    if (ids->dtype != TR_DTYPE_I32 && ids->dtype != TR_DTYPE_I64)
        return tr_error_set(err, TR_ERR_SHAPE, "embedding: ids %s should be i32 or i64", tr_cpu_desc(ids, d1, sizeof d1));
    int64_t D = table->shape[1];
    int ok = out->dtype == table->dtype && out->ndim == ids->ndim + 1 && out->shape[ids->ndim] == D;
    for (int i = 0; ok && i < ids->ndim; i++)
        if (out->shape[i] != ids->shape[i]) ok = 0;
    if (!ok)
        return tr_error_set(err, TR_ERR_SHAPE, "embedding: out %s should be ids' shape %s plus (%lld) of table %s",
                            tr_cpu_desc(out, d1, sizeof d1), tr_cpu_desc(ids, d2, sizeof d2), (long long)D,
                            tr_cpu_desc(table, d3, sizeof d3));
    return TR_OK;
}

static int embedding_check(const struct tr_tensor *table, const struct tr_tensor *ids, const struct tr_tensor *out,
                           struct embedding_plan *pl, struct tr_error *err) {
    int rc = tr_cpu_embedding_args(TR_DEVICE_CPU, table, ids, out, err);
    if (rc) return rc;
    int64_t D = table->shape[1];
    memset(pl, 0, sizeof *pl);
    pl->table = *table;
    pl->ids = ids->data;
    pl->is64 = ids->dtype == TR_DTYPE_I64;
    pl->n = tr_tensor_numel(ids);
    pl->V = table->shape[0];
    pl->row = (size_t)D * tr_dtype_size((enum tr_dtype)table->dtype);
    pl->out = out->data;
    return TR_OK;
}

static int embedding_compute(const struct embedding_plan *pl, struct tr_error *err) {
    const int64_t n = pl->n, V = pl->V;
    const int32_t *i32 = pl->ids;
    const int64_t *i64 = pl->ids;
    const int is64 = pl->is64;
    for (int64_t i = 0; i < n; i++) {
        int64_t id = is64 ? i64[i] : i32[i];
        if (id < 0 || id >= V) {
            char d1[200];
            return tr_error_set(err, TR_ERR_INVALID, "embedding: ids[%lld] = %lld is outside [0, %lld) (table %s)",
                                (long long)i, (long long)id, (long long)V, tr_cpu_desc(&pl->table, d1, sizeof d1));
        }
    }
    const size_t row = pl->row;
    const char *pt = pl->table.data;
    char *po = pl->out;
    if (row == 0) return TR_OK;
#pragma omp parallel for schedule(static) if ((int64_t)row * n > 4 * TR_CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        int64_t id = is64 ? i64[i] : i32[i];
        memcpy(po + i * (int64_t)row, pt + id * (int64_t)row, row);
    }
    return TR_OK;
}

static int embedding_call(struct tr_kernels *k, const struct tr_kernel_call *c, struct tr_error *err) {
    k->stats.calls++;
    return embedding_compute(c->prepared, err);
}

int tr_k_embedding(struct tr_kernels *k, const struct tr_tensor *table, const struct tr_tensor *ids,
                   struct tr_tensor *out, struct tr_error *err) {
    TR_CUDA_ROUTE(k, tr_cuda_k_embedding(k, table, ids, out, err));
    struct embedding_plan pl;
    int rc = tr_cpu_check_ctx(k, "embedding", err);
    if (!rc) rc = embedding_check(table, ids, out, &pl, err);
    return rc ? rc : embedding_compute(&pl, err);
}

int tr_cpu_embedding_bind(struct tr_kernels *k, struct tr_kernel_call *c, struct tr_error *err) {
    struct embedding_plan pl;
    int rc = tr_cpu_check_ctx_bind(k, "embedding", err);
    if (!rc) rc = embedding_check(&c->in[0], &c->in[1], &c->out, &pl, err);
    return rc ? rc : tr_cpu_keep_plan(c, &pl, sizeof pl, embedding_call, "embedding", err);
}
