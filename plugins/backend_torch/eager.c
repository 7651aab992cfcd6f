/* torch backend — compile and the eager executor.
 *
 * Eager as PyTorch is: nodes run one at a time in program order, each one kernel call
 * through the shared kernels' dispatcher; every output is a block from the caching
 * allocator, taken when the node runs and given back to its pool as soon as the last
 * node that reads it (directly or through a view) has run. Nothing is planned ahead
 * beyond counting each node's consumers, which is what a tensor's refcount tells
 * PyTorch at run time.
 *
 * Storage: a node's value lives in the buffer of its root. A node that computes has its
 * own buffer (root = itself); RESHAPE is a view (root = its input's root, no kernel
 * call); INPUT, PARAM and CONST are bound to host memory in place (the caller's inputs,
 * the graph's weights: zero copy on the cpu). A buffer's refcount is the number of live
 * nodes rooted in it; a node dies when its last consumer has run (graph outputs after
 * they were copied out), and the buffer goes back to its pool when its count reaches 0.
 *
 * mode = reduce-overhead (replay.c) uses this walk for its warm-up steps and, once, to
 * record the step it then replays.
 *
 * On device = cuda, as PyTorch's model.to("cuda"): the weights are uploaded once at
 * compile (one device block each) and bound there. A PARAM's block belongs to the
 * backend, not the program (resident.h): programs whose graphs bind the same host memory
 * (generate's prefill and decode) share one upload, and an update made by one is what
 * the others read next (a step on cuda ends synchronised). Each step copies the inputs into
 * blocks from the caching allocator (x.to("cuda")), which die with their last reader
 * like any other; outputs are copied back to host memory; updates are computed in (or
 * copied into) the params' device memory and reach their host memory only through sync.
 * Kernels queue on the context's stream; the copy of the outputs waits for them.
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "io.h"
#include "mem.h"
#include "options.h"
#include "pir.h"
#include "program.h"
#include "resident.h"
#include "attn_group.h"

const char *tr_torch_node_name(const struct tr_torch_program *p, int id) {
    return id >= 0 && id < p->pir.n ? p->pir.nodes[id].name : "";
}

static int raw_alloc(void *user, size_t nbytes, void **ptr, struct tr_error *err) {
    return tr_kernels_alloc(user, nbytes, ptr, err);
}

static void raw_free(void *user, void *ptr) { tr_kernels_dealloc(user, ptr); }

/* ---- compile ---- */

static int read_node(struct tr_torch_program *p, int id, int *n_edges, struct tr_error *err) {
    const struct tr_pir_node *d = &p->pir.nodes[id];
    struct torch_node *n = &p->nodes[id];
    char sh[128];
    n->op = d->op;
    if (n->op < 0 || n->op >= TR_OP_COUNT)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "torch: node %d '%s': unknown op %d", id, tr_torch_node_name(p, id), n->op);
    int dtype = d->dtype, ndim = d->ndim;
    const int64_t *shape = d->shape;
    if (tr_dtype_size((enum tr_dtype)dtype) == 0)
        return tr_error_set(err, TR_ERR_INVALID, "torch: node %d %s '%s': dtype %d with %d dimensions", id,
                            tr_op_name(n->op), tr_torch_node_name(p, id), dtype, ndim);
    int rc = tr_tensor_make(&n->t, NULL, (enum tr_dtype)dtype, ndim, shape, err);
    if (rc != TR_OK) return tr_error_prefix(err, "torch: node %d %s '%s'", id, tr_op_name(n->op), tr_torch_node_name(p, id));
    n->t.device = p->ctx->device_type;
    n->t.device_index = p->ctx->device_index;
    n->nbytes = tr_tensor_nbytes(&n->t);
    n->attrs = d->attrs;
    n->in_off = *n_edges;
    n->n_in = d->n_in;
    if (n->op == TR_OP_RESHAPE && n->n_in != 1)
        return tr_error_set(err, TR_ERR_INVALID, "torch: node %d %s '%s': %d inputs", id, tr_op_name(n->op),
                            tr_torch_node_name(p, id), n->n_in);
    n->root = id;
    n->lse = -1;
    n->attn = -1;
    n->linear = -1;
    n->adamw = -1;
    *n_edges += n->n_in;

    switch (n->op) {
    case TR_OP_INPUT: n->kind = TORCH_INPUT; break;
    case TR_OP_PARAM:
    case TR_OP_CONST:
        n->kind = TORCH_WEIGHT;
        if (!d->data)
            return tr_error_set(err, TR_ERR_INVALID,
                                "torch: node %d %s '%s' %s%s has no data (bind it with tr_graph_bind_param or "
                                "load weights before compile)",
                                id, tr_op_name(n->op), tr_torch_node_name(p, id), tr_dtype_name((enum tr_dtype)dtype),
                                tr_shape_str(ndim, shape, sh, sizeof sh));
        p->weight_bytes += n->nbytes;
        break;
    case TR_OP_RESHAPE: n->kind = TORCH_VIEW; break;
    default:
        n->kind = TORCH_KERNEL;
        p->n_kernel_nodes++;
        break;
    }
    return TR_OK;
}

/* Inputs of every node (flat), consumer counts (graph outputs count as one more, held
 * until the end of execute), view roots. */
static int read_edges(struct tr_torch_program *p, struct tr_error *err) {
    for (int id = 0; id < p->n_nodes; id++) {
        struct torch_node *n = &p->nodes[id];
        if (n->n_in > p->max_in) p->max_in = n->n_in;
        for (int i = 0; i < n->n_in; i++) {
            int src = p->pir.nodes[id].in[i]; /* an earlier node: tr_pir_from_graph checked */
            p->in_ids[n->in_off + i] = src;
            p->nodes[src].uses++;
        }
        if (n->kind == TORCH_VIEW) {
            const struct torch_node *src = &p->nodes[p->in_ids[n->in_off]];
            if (src->nbytes != n->nbytes)
                return tr_error_set(err, TR_ERR_SHAPE, "torch: node %d reshape '%s': %zu bytes from %zu bytes", id,
                                    tr_torch_node_name(p, id), n->nbytes, src->nbytes);
            n->root = src->root;
        }
    }
    for (int i = 0; i < p->n_graph_out + p->n_updates; i++) {
        p->nodes[p->graph_out[i]].uses++;
    }
    for (int id = 0; id < p->n_nodes; id++) {
        int j = tr_attn_lse_partner(&p->pir, id);
        if (j < 0) continue;
        p->nodes[id].lse = j;
        p->nodes[j].lse = id;
    }
    return TR_OK;
}

/* Which updates compute in their param's memory (pir.h's rule, on the graph as given). */
static int plan_updates(struct tr_torch_program *p, struct tr_error *err) {
    p->donor = malloc((size_t)p->n_nodes * sizeof *p->donor);
    p->donated = calloc((size_t)p->n_updates + 1, 1);
    if (!p->donor || !p->donated) return tr_error_set(err, TR_ERR_NOMEM, "torch: out of memory planning updates");
    for (int id = 0; id < p->n_nodes; id++) p->donor[id] = -1;
    for (int u = 0; u < p->n_updates; u++) {
        int v = p->graph_out[p->n_graph_out + u];
        if (p->nodes[v].kind == TORCH_KERNEL && tr_pir_donatable(&p->pir, u, tr_pir_reads_in_place)) {
            p->donated[u] = 1;
            p->n_donated++;
            p->donor[v] = p->update_param[u];
        }
    }
    return TR_OK;
}

/* The attention gradients of one attention as one call at the first of them, as PyTorch's
 * autograd runs SDPA's backward once for dq, dk and dv (and the bias's gradient), where
 * one call per gradient would recompute the scores for each. A gradient that computes in
 * its param's memory (an update) keeps its own call. */
static int group_attention_grads(struct tr_torch_program *p, struct tr_error *err) {
    int *taken = malloc(((size_t)p->n_nodes + 1) * sizeof *taken);
    p->attn_groups = calloc((size_t)p->n_nodes / 2 + 1, sizeof *p->attn_groups);
    if (!taken || !p->attn_groups) {
        free(taken);
        return tr_error_set(err, TR_ERR_NOMEM, "torch: out of memory grouping attention gradients");
    }
    for (int id = 0; id < p->n_nodes; id++) taken[id] = p->donor[id] >= 0 ? id : -1;
    for (int id = 0; id < p->n_nodes; id++) {
        struct torch_attn_group *a = &p->attn_groups[p->n_attn_groups];
        if ((a->n = tr_attn_grad_group(&p->pir, id, taken, a->grad)) < 2) continue;
        a->lead = id;
        for (int w = 0; w < TR_ATTN_GRADS; w++)
            if (a->grad[w] >= 0) taken[a->grad[w]] = p->nodes[a->grad[w]].attn = p->n_attn_groups;
        p->n_attn_groups++;
    }
    free(taken);
    return TR_OK;
}

/* AdamW's update of each parameter as one call at its ADAMW_STEP (adamw_group.h), as
 * PyTorch's AdamW(fused=True) runs one kernel over a parameter's weight, moments and
 * gradient where the graph's ops make eight passes. The call is made where the step was,
 * after every operand; the gradient is kept until then. */
static int group_adamw(struct tr_torch_program *p, struct tr_error *err) {
    int *uses = malloc(((size_t)p->n_nodes + 1) * sizeof *uses);
    p->adamw_groups = calloc((size_t)p->n_nodes / 8 + 1, sizeof *p->adamw_groups);
    if (!uses || !p->adamw_groups) {
        free(uses);
        return tr_error_set(err, TR_ERR_NOMEM, "torch: out of memory grouping AdamW updates");
    }
    tr_pir_count_uses(&p->pir, uses);
    for (int id = 0; id < p->n_nodes; id++) {
        struct tr_adamw_group *a = &p->adamw_groups[p->n_adamw];
        if (!tr_adamw_group_at(&p->pir, id, uses, a)) continue;
        int ids[TR_ADAMW_INNER + 3], n = tr_adamw_group_nodes(a, ids), ok = 1;
        for (int i = 0; i < n; i++) ok &= p->nodes[ids[i]].kind == TORCH_KERNEL && p->nodes[ids[i]].adamw == -1;
        if (!ok) continue;
        for (int i = 0; i < n; i++) p->nodes[ids[i]].adamw = -2;
        p->nodes[id].adamw = p->n_adamw++;
    }
    free(uses);
    return TR_OK;
}

/* MATMUL then ADD of a bias as one GEMM with its bias, where PyTorch's F.linear (nn.Linear)
 * is one addmm: a weight (b 2-D, as Linear's), a 1-D bias of N, the input not transposed,
 * alpha 1, the product read by the ADD alone. The sum is rounded once to the output's
 * dtype, as addmm does; a MATMUL and an ADD would round the product first. */
static int match_linear(const struct tr_torch_program *p, int id) {
    const struct torch_node *n = &p->nodes[id];
    if (n->op != TR_OP_ADD || n->kind != TORCH_KERNEL || p->donor[id] >= 0 || n->adamw != -1) return -1;
    const int *in = &p->in_ids[n->in_off];
    for (int s = 0; s < 2; s++) {
        int m = in[s], bias = in[1 - s];
        const struct torch_node *mm = &p->nodes[m], *b = &p->nodes[bias];
        if (mm->op != TR_OP_MATMUL || mm->kind != TORCH_KERNEL || mm->uses != 1 || p->donor[m] >= 0 || m == bias)
            continue;
        const int *mi = &p->in_ids[mm->in_off];
        const int64_t N = n->t.shape[n->t.ndim - 1];
        if (mm->attrs.ints[0] || tr_matmul_alpha(mm->attrs.floats[0]) != 1.0f || p->nodes[mi[1]].t.ndim != 2 ||
            !tr_pir_same_shape(&p->pir.nodes[m], &p->pir.nodes[id]) || mm->t.dtype != n->t.dtype)
            continue;
        if (b->t.ndim == 1 && b->t.shape[0] == N && (b->t.dtype == n->t.dtype || b->t.dtype == TR_DTYPE_F32)) return m;
    }
    return -1;
}

static void plan_linear(struct tr_torch_program *p) {
    for (int id = 0; id < p->n_nodes; id++) {
        int m = match_linear(p, id);
        if (m < 0) continue;
        p->nodes[id].linear = m;
        p->nodes[m].linear = -2;
        p->n_linear++;
    }
}

int tr_torch_copy_updates(struct tr_torch_program *p, void *const *src, struct tr_error *err) {
    for (int u = 0; u < p->n_updates; u++) {
        if (p->donated[u]) continue;
        int pa = p->update_param[u];
        size_t nb = p->nodes[pa].nbytes;
        const void *from = src ? src[u] : p->data[p->graph_out[p->n_graph_out + u]];
        /* on cuda the param's memory is its device copy; host memory is sync's */
        int rc = !nb        ? TR_OK
                 : p->on_cuda ? tr_kernels_copy(p->k, p->data[pa], from, nb, err)
                              : tr_kernels_to_host(p->k, p->data[pa], from, nb, err);
        if (rc != TR_OK) return tr_error_prefix(err, "torch: update of '%s'", tr_torch_node_name(p, pa));
    }
    return TR_OK;
}

static int read_io(struct tr_torch_program *p, struct tr_error *err) {
    const struct tr_pir *ir = &p->pir;
    p->n_graph_in = ir->n_inputs;
    p->n_graph_out = ir->n_results;
    p->n_updates = ir->n_updates;
    p->graph_in = calloc((size_t)p->n_graph_in + 1, sizeof *p->graph_in);
    p->graph_out = calloc((size_t)(p->n_graph_out + p->n_updates), sizeof *p->graph_out);
    p->update_param = calloc((size_t)p->n_updates + 1, sizeof *p->update_param);
    if (!p->graph_in || !p->graph_out || !p->update_param)
        return tr_error_set(err, TR_ERR_NOMEM, "torch: out of memory reading the graph");
    /* Every INPUT node is fed, exactly once (pending is still all zero here). */
    int n_input_nodes = 0;
    for (int id = 0; id < p->n_nodes; id++) n_input_nodes += p->nodes[id].kind == TORCH_INPUT;
    for (int i = 0; i < p->n_graph_in; i++) {
        int id = ir->inputs[i];
        if (p->nodes[id].kind != TORCH_INPUT || p->pending[id]++)
            return tr_error_set(err, TR_ERR_INVALID, "torch: graph input %d is node %d, not an input node fed once", i,
                                id);
        p->graph_in[i] = id;
    }
    if (n_input_nodes != p->n_graph_in)
        return tr_error_set(err, TR_ERR_INVALID, "torch: graph has %d input nodes but feeds %d", n_input_nodes,
                            p->n_graph_in);
    /* the outputs, then each update's value; tr_pir_from_graph checked their ids */
    for (int i = 0; i < p->n_graph_out + p->n_updates; i++) p->graph_out[i] = ir->outputs[i];
    for (int u = 0; u < p->n_updates; u++) p->update_param[u] = ir->update_param[u];
    return TR_OK;
}

/* cuda: every weight bound to device memory for the program's life (data[id] was the
 * host memory until now). A PARAM's is the backend's shared block for its host memory
 * (resident.h: uploaded by the first program, an update by any program seen by all);
 * a CONST, or an empty param, gets a block of its own. */
static int upload_weights(struct tr_torch_program *p, struct tr_error *err) {
    p->weights_uploaded = 1;
    char *writes = calloc((size_t)p->n_nodes + 1, 1);
    if (!writes) return tr_error_set(err, TR_ERR_NOMEM, "torch: out of memory uploading weights");
    for (int u = 0; u < p->n_updates; u++) writes[p->update_param[u]] = 1;
    for (int id = 0; id < p->n_nodes; id++) {
        if (p->nodes[id].kind != TORCH_WEIGHT) continue;
        const void *host = p->data[id];
        size_t nb = p->nodes[id].nbytes;
        p->data[id] = NULL;
        if (p->nodes[id].op == TR_OP_PARAM && nb && host) {
            struct tr_resident_param prm = {.host = host, .nbytes = nb, .dtype = p->nodes[id].t.dtype,
                                            .name = tr_torch_node_name(p, id), .writes = writes[id]};
            int rc = tr_resident_store_acquire(&p->ctx->params, p->ctx->device_type, p->ctx->device_index, "torch",
                                               &prm, &p->data[id], err);
            if (rc != TR_OK) {
                free(writes);
                return rc;
            }
            p->nodes[id].shared = 1 + writes[id];
            continue;
        }
        int rc = tr_kernels_alloc(p->k, nb ? nb : 1, &p->data[id], err);
        if (rc == TR_OK && nb) rc = tr_kernels_to_device(p->k, p->data[id], host, nb, err);
        if (rc != TR_OK) {
            free(writes);
            return tr_error_prefix(err, "torch: uploading %s '%s' (%zu bytes)", tr_op_name(p->nodes[id].op),
                                   tr_torch_node_name(p, id), nb);
        }
    }
    free(writes);
    return tr_kernels_sync(p->k, err);
}

int tr_torch_sync(struct tr_torch_program *p, struct tr_error *err) {
    if (!p->on_cuda) return TR_OK; /* the updates were made in the host memory */
    /* Every param of this program that some program of the backend updates: the shared
     * device memory is the truth, whichever program wrote it last. */
    for (int pa = 0; pa < p->n_nodes; pa++) {
        if (!p->nodes[pa].shared) continue;
        void *host = (void *)p->pir.nodes[pa].data; /* writable: backend.h, ABI 1.1 */
        if (!tr_resident_store_written(p->ctx->params, host)) continue;
        int rc = tr_kernels_to_host(p->k, host, p->data[pa], p->nodes[pa].nbytes, err);
        if (rc != TR_OK) return tr_error_prefix(err, "torch: sync of '%s'", tr_torch_node_name(p, pa));
    }
    return TR_OK;
}

int tr_torch_compile(struct tr_torch_context *ctx, tr_graph_t g, struct tr_torch_program **out,
                     struct tr_error *err) {
    *out = NULL;
    if (!g) return tr_error_set(err, TR_ERR_INVALID, "torch: compile without a graph");
    struct tr_torch_program *p = calloc(1, sizeof *p);
    if (!p) return tr_error_set(err, TR_ERR_NOMEM, "torch: out of memory for a program");
    p->ctx = ctx;
    p->g = g;
    int rc = tr_pir_read("torch", ctx->host, g, &p->pir, err);
    if (rc != TR_OK) goto fail;
    p->n_nodes = p->pir.n;
    if (p->n_nodes <= 0) {
        rc = tr_error_set(err, TR_ERR_INVALID, "torch: graph has %d nodes", p->n_nodes);
        goto fail;
    }
    size_t n = (size_t)p->n_nodes;
    p->nodes = calloc(n, sizeof *p->nodes);
    p->data = calloc(n, sizeof *p->data);
    p->pending = calloc(n, sizeof *p->pending);
    p->refs = calloc(n, sizeof *p->refs);
    p->blocks = calloc(n, sizeof *p->blocks);
    if (!p->nodes || !p->data || !p->pending || !p->refs || !p->blocks) {
        rc = tr_error_set(err, TR_ERR_NOMEM, "torch: out of memory for %d nodes", p->n_nodes);
        goto fail;
    }
    int n_edges = 0;
    for (int id = 0; id < p->n_nodes; id++)
        if ((rc = read_node(p, id, &n_edges, err)) != TR_OK) goto fail;
    p->in_ids = calloc((size_t)n_edges + 1, sizeof *p->in_ids);
    if (!p->in_ids) {
        rc = tr_error_set(err, TR_ERR_NOMEM, "torch: out of memory for %d edges", n_edges);
        goto fail;
    }
    if ((rc = read_io(p, err)) != TR_OK || (rc = read_edges(p, err)) != TR_OK || (rc = plan_updates(p, err)) != TR_OK ||
        (rc = group_attention_grads(p, err)) != TR_OK || (rc = group_adamw(p, err)) != TR_OK)
        goto fail;
    plan_linear(p);
    p->args = calloc((size_t)(p->max_in > 3 ? p->max_in : 3) + 1, sizeof *p->args); /* 3: a linear */
    if (!p->args) {
        rc = tr_error_set(err, TR_ERR_NOMEM, "torch: out of memory");
        goto fail;
    }
    /* Weights are used in place for the program's life; they never move. */
    for (int id = 0; id < p->n_nodes; id++)
        if (p->nodes[id].kind == TORCH_WEIGHT) p->data[id] = (void *)p->pir.nodes[id].data;

    if ((rc = tr_backend_kernels_open("torch", ctx->device_type, ctx->device_index, ctx->math, &p->k, err)) != TR_OK)
        goto fail;
    p->on_cuda = ctx->device_type == TR_DEVICE_CUDA;
    p->serial = ++ctx->next_serial;
    if (p->on_cuda && (rc = upload_weights(p, err)) != TR_OK) goto fail;
    if ((rc = tr_torch_allocator_init(&p->pool, raw_alloc, raw_free, p->k, err)) != TR_OK) goto fail;
    ctx->host->log(TR_LOG_DEBUG, "torch: compiled %d nodes, %d inputs, %d outputs, %.1f MiB of weights %s", p->n_nodes,
                   p->n_graph_in, p->n_graph_out, (double)p->weight_bytes / (1 << 20),
                   p->on_cuda ? "uploaded" : "in place");
    *out = p;
    return TR_OK;
fail:
    tr_torch_program_free(p);
    return rc;
}

void tr_torch_program_free(struct tr_torch_program *p) {
    if (!p) return;
    tr_torch_replay_free(p); /* its bound calls point into the pool's blocks */
    tr_torch_allocator_free(p->pool); /* before the kernels context that its blocks came from */
    if (p->ctx && p->serial) tr_kernels_cuda_graphs_drop_owner(p->ctx->graphs, p->serial);
    if (p->on_cuda && p->k) { /* nothing queued may still read a shared param that goes now */
        struct tr_error ignored = {0};
        (void)tr_kernels_sync(p->k, &ignored);
    }
    for (int id = 0; p->weights_uploaded && id < p->n_nodes; id++) {
        if (p->nodes[id].kind != TORCH_WEIGHT || !p->data[id]) continue;
        if (p->nodes[id].shared)
            tr_resident_store_release(&p->ctx->params, p->pir.nodes[id].data, p->nodes[id].shared == 2);
        else tr_kernels_dealloc(p->k, p->data[id]);
    }
    if (p->k) tr_kernels_free(p->k);
    free(p->nodes);
    tr_pir_free(&p->pir);
    TR_FREE_EACH(p->attn_groups, p->adamw_groups, p->in_ids, p->graph_in, p->graph_out, p->update_param, p->donated,
                 p->donor, p->data, p->pending, p->refs, p->blocks, p->args, p);
}

/* ---- execute ---- */

static int check_io(const struct tr_torch_program *p, const char *what, int i, int id, const struct tr_tensor *t,
                    struct tr_error *err) {
    const struct torch_node *n = &p->nodes[id];
    return tr_io_check_tensor("torch", what, i, tr_torch_node_name(p, id), n->t.dtype, n->t.ndim, n->t.shape,
                              n->nbytes, t, err);
}

int tr_torch_check_args(const struct tr_torch_program *p, int n_inputs, const struct tr_tensor *inputs,
                        int n_outputs, const struct tr_tensor *outputs, struct tr_error *err) {
    int rc = tr_io_check_counts("torch", n_inputs, inputs, n_outputs, outputs, p->n_graph_in, p->n_graph_out, err);
    if (rc != TR_OK) return rc;
    for (int i = 0; i < n_inputs; i++)
        if ((rc = check_io(p, "input", i, p->graph_in[i], &inputs[i], err)) != TR_OK) return rc;
    for (int i = 0; i < n_outputs; i++)
        if ((rc = check_io(p, "output", i, p->graph_out[i], &outputs[i], err)) != TR_OK) return rc;
    return TR_OK;
}

/* A block from the caching allocator for node id's output (refcount 1). */
static int take_block(struct tr_torch_program *p, int id, struct tr_error *err) {
    int rc = tr_torch_allocator_alloc(p->pool, p->nodes[id].nbytes, &p->blocks[id], err);
    if (rc != TR_OK)
        return tr_error_prefix(err, "torch: node %d %s '%s'", id, tr_op_name(p->nodes[id].op), tr_torch_node_name(p, id));
    p->refs[id] = 1;
    p->data[id] = p->blocks[id]->ptr;
    return TR_OK;
}

/* A node is dead once its last consumer ran: drop its reference to its root's buffer. */
static void node_drop(struct tr_torch_program *p, int id) {
    int r = p->nodes[id].root;
    if (p->blocks[r] && --p->refs[r] == 0) {
        tr_torch_allocator_release(p->pool, p->blocks[r]);
        p->blocks[r] = NULL;
    }
}

void tr_torch_release_all(struct tr_torch_program *p) {
    for (int id = 0; id < p->n_nodes; id++) {
        if (p->blocks[id]) tr_torch_allocator_release(p->pool, p->blocks[id]);
        p->blocks[id] = NULL;
        p->refs[id] = 0;
    }
}

/* p->args[0..n) = the tensors of nodes ids[0..n), bound to this step's data. */
static void bind_args(struct tr_torch_program *p, int n, const int *ids) {
    for (int i = 0; i < n; i++) {
        p->args[i] = p->nodes[ids[i]].t;
        p->args[i].data = p->data[ids[i]];
    }
}

/* Attention gradient group g at its lead: a block for each gradient, one call for all. */
static int run_attn_group(struct tr_torch_program *p, int g, const int *in, struct tr_error *err) {
    const struct torch_attn_group *a = &p->attn_groups[g];
    const struct torch_node *n = &p->nodes[a->lead];
    struct tr_tensor t[TR_ATTN_GRADS];
    const struct tr_tensor *grads[TR_ATTN_GRADS] = {NULL};
    int rc;
    for (int w = 0; w < TR_ATTN_GRADS; w++) {
        if (a->grad[w] < 0) continue;
        if ((rc = take_block(p, a->grad[w], err)) != TR_OK) return rc;
        t[w] = p->nodes[a->grad[w]].t;
        t[w].data = p->data[a->grad[w]];
        grads[w] = &t[w];
    }
    bind_args(p, n->n_in, in);
    p->kernel_calls++;
    if (p->rp.recording) return tr_torch_record_group(p, g, grads, err);
    return tr_attn_backward_of(p->k, &p->pir.nodes[a->lead], p->args, grads, NULL, err);
}

/* A linear at its ADD (nodes[id].linear): the MATMUL's a and b, and the bias, in one
 * GEMM call; then the MATMUL's inputs are released as its own run would have. */
static int run_linear(struct tr_torch_program *p, int id, struct tr_tensor *out, struct tr_error *err) {
    const struct torch_node *n = &p->nodes[id], *mm = &p->nodes[n->linear];
    const int *in = &p->in_ids[n->in_off], *mi = &p->in_ids[mm->in_off];
    const int ids[3] = {mi[0], mi[1], in[0] == n->linear ? in[1] : in[0]};
    bind_args(p, 3, ids);
    int rc = p->rp.recording ? tr_torch_record_linear(p, id, out, err)
                             : tr_k_matmul(p->k, &p->args[0], &p->args[1], out, mm->attrs.ints[0], mm->attrs.ints[1],
                                           1.0f, &p->args[2], TR_ACT_NONE, err);
    if (rc != TR_OK) return rc;
    for (int i = 0; i < mm->n_in; i++)
        if (--p->pending[mi[i]] == 0) node_drop(p, mi[i]);
    return TR_OK;
}

/* A node's output: its param's memory (a donated update) or a block from the pool. */
static int place_output(struct tr_torch_program *p, int id, struct tr_error *err) {
    if (p->donor[id] < 0) return take_block(p, id, err);
    p->data[id] = p->data[p->donor[id]];
    return TR_OK;
}

static struct tr_tensor bound_tensor(const struct tr_torch_program *p, int id) {
    struct tr_tensor t = p->nodes[id].t;
    t.data = p->data[id];
    return t;
}

/* AdamW group g at its step: places for p2, m2 and v2, one call, then every input of
 * every node of the group released as their own runs would have. */
static int run_adamw(struct tr_torch_program *p, int g, struct tr_error *err) {
    const struct tr_adamw_group *a = &p->adamw_groups[g];
    int rc;
    if ((rc = place_output(p, a->step, err)) != TR_OK || (rc = place_output(p, a->m2, err)) != TR_OK ||
        (rc = place_output(p, a->v2, err)) != TR_OK)
        return rc;
    const int ops[6] = {a->param, a->m, a->v, a->grad, a->lr, a->t};
    bind_args(p, 6, ops);
    struct tr_tensor out = bound_tensor(p, a->step), m2 = bound_tensor(p, a->m2), v2 = bound_tensor(p, a->v2);
    const float *f = p->pir.nodes[a->step].attrs.floats;
    const struct tr_tensor *x = p->args;
    p->kernel_calls++;
    rc = p->rp.recording ? tr_torch_record_adamw(p, g, &out, &m2, &v2, err)
                         : tr_k_adamw_update(p->k, &x[0], &x[1], &x[2], &x[3], &x[4], &x[5], f[0], f[1], f[2], f[3],
                                             &out, &m2, &v2, err);
    if (rc != TR_OK) return rc;
    int ids[TR_ADAMW_INNER + 3], n = tr_adamw_group_nodes(a, ids);
    for (int k = 0; k < n; k++) {
        const struct torch_node *x2 = &p->nodes[ids[k]];
        const int *in = &p->in_ids[x2->in_off];
        for (int i = 0; i < x2->n_in; i++)
            if (--p->pending[in[i]] == 0) node_drop(p, in[i]);
    }
    return TR_OK;
}

static int run_node(struct tr_torch_program *p, int id, struct tr_error *err) {
    struct torch_node *n = &p->nodes[id];
    const int *in = &p->in_ids[n->in_off];
    if (n->linear == -2) return TR_OK; /* its ADD runs it, and releases its inputs */
    if (n->adamw == -2) return TR_OK;  /* its group's step runs it, and releases its inputs */
    if (n->adamw >= 0) {
        int rc = run_adamw(p, n->adamw, err);
        if (rc != TR_OK)
            return tr_error_prefix(err, "torch: node %d %s '%s' (AdamW's update in one call)", id, tr_op_name(n->op),
                                   tr_torch_node_name(p, id));
        return TR_OK;
    }
    switch (n->kind) {
    case TORCH_INPUT:
    case TORCH_WEIGHT:
        break; /* bound before the loop */
    case TORCH_VIEW:
        p->data[id] = p->data[in[0]];
        if (p->blocks[n->root]) p->refs[n->root]++;
        break;
    case TORCH_KERNEL: {
        int rc = TR_OK;
        if (n->lse >= 0 && n->lse < id) break; /* an ATTENTION_(REL_)LSE: its forward's call wrote it */
        if (n->attn >= 0) {
            if (p->attn_groups[n->attn].lead != id) break; /* its group's call at the lead wrote it */
            if ((rc = run_attn_group(p, n->attn, in, err)) != TR_OK)
                return tr_error_prefix(err, "torch: node %d %s '%s' (the backward of %d gradients)", id,
                                       tr_op_name(n->op), tr_torch_node_name(p, id), p->attn_groups[n->attn].n);
            break;
        }
        if (p->donor[id] >= 0) { /* an update computed in its param's memory */
            p->data[id] = p->data[p->donor[id]];
        } else if ((rc = take_block(p, id, err)) != TR_OK) {
            return rc;
        }
        if (n->lse >= 0 && (rc = take_block(p, n->lse, err)) != TR_OK) return rc;
        bind_args(p, n->n_in, in);
        struct tr_tensor out = n->t;
        out.data = p->data[id];
        p->kernel_calls++;
        if (n->linear >= 0) {
            rc = run_linear(p, id, &out, err);
        } else if (n->lse >= 0) {
            struct tr_tensor lse = p->nodes[n->lse].t;
            lse.data = p->data[n->lse];
            rc = p->rp.recording ? tr_torch_record_pair(p, id, &out, &lse, err)
                                 : tr_attn_forward_lse(p->k, n->op == TR_OP_ATTENTION_REL, n->n_in, p->args, &n->attrs,
                                                       &out, &lse, NULL, err);
        } else if (p->rp.recording) {
            rc = tr_torch_record_call(p, id, &out, err);
        } else {
            rc = tr_kernels_run(p->k, n->op, &n->attrs, n->n_in, p->args, &out, err);
        }
        if (rc != TR_OK)
            return tr_error_prefix(err, "torch: node %d %s '%s'", id, tr_op_name(n->op), tr_torch_node_name(p, id));
        break;
    }
    }
    for (int i = 0; i < n->n_in; i++)
        if (--p->pending[in[i]] == 0) node_drop(p, in[i]);
    if (n->uses == 0) node_drop(p, id); /* dead code: computed, never read */
    return TR_OK;
}

int tr_torch_walk(struct tr_torch_program *p, struct tr_error *err) {
    int rc;
    for (int id = 0; id < p->n_nodes; id++) p->pending[id] = p->nodes[id].uses;
    for (int id = 0; id < p->n_nodes; id++)
        if ((rc = run_node(p, id, err)) != TR_OK) return rc;
    return TR_OK;
}

int tr_torch_copy_outputs(struct tr_torch_program *p, int n_outputs, struct tr_tensor *outputs, struct tr_error *err) {
    int rc;
    for (int i = 0; i < n_outputs; i++) {
        int id = p->graph_out[i];
        if (p->nodes[id].nbytes > 0 &&
            (rc = tr_kernels_to_host(p->k, outputs[i].data, p->data[id], p->nodes[id].nbytes, err)) != TR_OK)
            return tr_error_prefix(err, "torch: output %d ('%s')", i, tr_torch_node_name(p, id));
    }
    if ((rc = tr_torch_copy_updates(p, NULL, err)) != TR_OK) return rc;
    for (int i = 0; i < n_outputs + p->n_updates; i++)
        if (--p->pending[p->graph_out[i]] == 0) node_drop(p, p->graph_out[i]);
    return TR_OK;
}

int tr_torch_bind_inputs(struct tr_torch_program *p, const struct tr_tensor *inputs, struct tr_error *err) {
    for (int i = 0; i < p->n_graph_in; i++) {
        int id = p->graph_in[i];
        if (!p->on_cuda) {
            p->data[id] = inputs[i].data;
            continue;
        }
        size_t nb = p->nodes[id].nbytes;
        int rc = tr_torch_allocator_alloc(p->pool, nb, &p->blocks[id], err);
        if (rc == TR_OK) {
            p->refs[id] = 1;
            p->data[id] = p->blocks[id]->ptr;
            if (nb) rc = tr_kernels_to_device(p->k, p->data[id], inputs[i].data, nb, err);
        }
        if (rc != TR_OK) return tr_error_prefix(err, "torch: input %d ('%s') to the device", i, tr_torch_node_name(p, id));
    }
    return TR_OK;
}

int tr_torch_execute_eager(struct tr_torch_program *p, int n_inputs, const struct tr_tensor *inputs, int n_outputs,
                           struct tr_tensor *outputs, struct tr_error *err) {
    int rc = tr_torch_check_args(p, n_inputs, inputs, n_outputs, outputs, err);
    if (rc != TR_OK) return rc;
    if ((rc = tr_torch_bind_inputs(p, inputs, err)) == TR_OK && (rc = tr_torch_walk(p, err)) == TR_OK)
        rc = tr_torch_copy_outputs(p, n_outputs, outputs, err);
    /* Everything goes back to the pools, after a failure too, so the next step starts
     * from the same state. */
    tr_torch_release_all(p);
    return rc;
}

int tr_torch_execute(struct tr_torch_program *p, int n_inputs, const struct tr_tensor *inputs, int n_outputs,
                     struct tr_tensor *outputs, struct tr_error *err) {
    if ((n_inputs > 0 && !inputs) || (n_outputs > 0 && !outputs))
        return tr_error_set(err, TR_ERR_INVALID, "torch: execute with %d inputs and %d outputs but no arrays",
                            n_inputs, n_outputs);
    p->kernel_calls = 0;
    tr_torch_allocator_reset_counters(p->pool);
    /* The thread count is the caller's again afterwards: other backends in this process
     * run with theirs. */
    int saved_threads = omp_get_max_threads();
    if (p->ctx->threads > 0) omp_set_num_threads(p->ctx->threads);
    int rc = p->ctx->mode == TR_TORCH_MODE_REDUCE_OVERHEAD
                 ? tr_torch_ro_execute(p, n_inputs, inputs, n_outputs, outputs, err)
                 : tr_torch_execute_eager(p, n_inputs, inputs, n_outputs, outputs, err);
    /* cuda: the updates' device copies are still queued; a kernel's late failure is
     * this step's, not the next one's */
    if (rc == TR_OK && p->on_cuda) rc = tr_kernels_sync(p->k, err);
    if (p->ctx->threads > 0) omp_set_num_threads(saved_threads);
    struct tr_torch_allocator_stats st;
    tr_torch_allocator_get_stats(p->pool, &st);
    p->hits = st.hits;
    p->misses = st.misses;
    return rc;
}

void tr_torch_program_stats(const struct tr_torch_program *p, struct tr_backend_stats *st) {
    struct tr_torch_allocator_stats a;
    char pool[32], peak[32], weights[32];
    tr_torch_allocator_get_stats(p->pool, &a);
    st->kernel_calls = p->kernel_calls;
    st->alloc_hits = p->hits;
    st->alloc_misses = p->misses;
    st->peak_bytes = p->weight_bytes + a.peak_bytes;
    if (p->on_cuda) {
        /* the device's own figures: this program's (activations, constants, workspace,
         * scratch) and the backend's shared params, which every program counts whole,
         * so the largest program's figure counts them once */
        struct tr_cuda_pool_stats cs;
        struct tr_error e = {0};
        if (tr_kernels_cuda_memory(p->k, &cs, &e) == TR_OK)
            st->peak_bytes = cs.peak_reserved + tr_resident_store_peak_bytes(p->ctx->params);
    }
    st->arena_bytes = p->rp.recorded ? p->rp.static_bytes : 0;
    st->notes[0] = '\0';
    if (p->ctx->mode == TR_TORCH_MODE_REDUCE_OVERHEAD) tr_torch_replay_notes(p, st->notes, sizeof st->notes);
    size_t len = strlen(st->notes);
    snprintf(st->notes + len, sizeof st->notes - len,
             "pool %s in %llu blocks, %llu size classes (peak %s); weights %s %s",
             tr_human_bytes(a.reserved_bytes, pool, sizeof pool), (unsigned long long)a.n_blocks,
             (unsigned long long)a.n_classes, tr_human_bytes(a.peak_bytes, peak, sizeof peak),
             tr_human_bytes(p->weight_bytes, weights, sizeof weights),
             p->on_cuda ? "on the device (params shared by the backend's programs)" : "in place");
    int pairs = 0;
    for (int id = 0; id < p->n_nodes; id++) pairs += p->nodes[id].lse > id;
    len = strlen(st->notes);
    if (pairs && len < sizeof st->notes)
        snprintf(st->notes + len, sizeof st->notes - len, "; attention with its lse x%d", pairs);
    len = strlen(st->notes);
    if (p->n_linear && len < sizeof st->notes)
        snprintf(st->notes + len, sizeof st->notes - len, "; linear (matmul + bias as one addmm) x%d", p->n_linear);
    len = strlen(st->notes);
    if (p->n_attn_groups && len < sizeof st->notes)
        snprintf(st->notes + len, sizeof st->notes - len, "; attention backward x%d (its gradients in one call)",
                 p->n_attn_groups);
    len = strlen(st->notes);
    if (p->n_adamw && len < sizeof st->notes)
        snprintf(st->notes + len, sizeof st->notes - len, "; AdamW fused (one call per parameter) x%d", p->n_adamw);
    len = strlen(st->notes);
    if (p->n_updates && len < sizeof st->notes)
        snprintf(st->notes + len, sizeof st->notes - len, "; %d of %d updates in place", p->n_donated, p->n_updates);
    len = strlen(st->notes);
    if (p->ctx->math != TR_MATH_DEFAULT && len < sizeof st->notes)
        snprintf(st->notes + len, sizeof st->notes - len, "; math %s", tr_math_name((enum tr_math)p->ctx->math));
}
