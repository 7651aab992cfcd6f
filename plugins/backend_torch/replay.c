/* torch backend — mode = reduce-overhead, torch.compile(mode="reduce-overhead") on the cpu.
 *
 * PyTorch captures a CUDA graph: after warm-up runs, one step is recorded with every
 * tensor it makes taken from a private memory pool and kept, inputs copied into static
 * buffers (a graph replays fixed addresses), and from then on a step is: copy the inputs
 * in, replay the graph, read the outputs. The cpu analogue here:
 *
 *   warm-up   the first warmup_steps executes are eager (eager.c), as torch.compile runs
 *             the function eagerly before it captures;
 *   record    the next execute takes a static buffer per graph input from the caching
 *             allocator, copies the inputs in, and walks the graph as eager does (blocks
 *             served and given back by the same lifetimes, so memory is reused inside the
 *             step exactly as eager reuses it) but binds each kernel node
 *             (tr_kernels_bind: checked, kernel resolved, matmul primitive made) before
 *             calling it. Afterwards every block the step was served is held for good:
 *             the bound calls point into them;
 *   replay    every later execute copies the inputs into the static buffers, runs the
 *             list with tr_kernels_call, and copies the outputs out: no dispatch, no
 *             shape logic, no allocator traffic (hits and misses both 0). RESHAPE views
 *             are not in the list: their tensors alias the buffers of their roots.
 *
 * Fixed shapes: a compiled graph has one shape per node, and execute refuses inputs of
 * any other (tr_torch_check_args), so the recorded list is valid for every step of the
 * program. The caller's input pointers may change from step to step, as may the data:
 * inputs are copied, never bound. New shapes mean a new graph, compiled into a new
 * program, which warms up and records again (PyTorch re-captures on recompilation).
 * Weights are bound in place, so updates made to their data between steps are seen.
 *
 * On device = cuda this is PyTorch's mechanism itself: warm-up and the recording step run
 * as on the cpu (the recording step binds every call: cuBLASLt plans, scratch and
 * workspace made, so nothing is allocated later), then the first replay captures the
 * list of bound calls as a CUDA graph on the context's stream and launches it; every
 * later replay copies the inputs into the static buffers, launches the graph
 * (cudaGraphLaunch, one call) and copies the outputs out. The graphs live in the backend
 * context's book (kernels_cuda.h), keyed by this program's serial and input shapes: a
 * program of new shapes captures its own, updating a graph of the same call sequence in
 * place (cudaGraphExecUpdate) where the book offers one (a freed program's, or the least
 * recently used when the book is full).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "program.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int ptr_cmp(const void *a, const void *b) {
    uintptr_t x = (uintptr_t) * (void *const *)a, y = (uintptr_t) * (void *const *)b;
    return x < y ? -1 : x > y;
}

int tr_torch_record_call(struct tr_torch_program *p, int id, const struct tr_tensor *out, struct tr_error *err) {
    struct torch_replay *r = &p->rp;
    const struct torch_node *n = &p->nodes[id];
    if (p->blocks[id]) r->held[r->n_held++] = p->blocks[id]; /* none: computed in a param's memory */
    struct tr_kernel_call *c = &r->calls[r->n_calls];
    int rc = tr_kernels_bind(p->k, n->op, &n->attrs, n->n_in, p->args, out, c, err);
    if (rc != TR_OK) return rc;
    r->call_node[r->n_calls++] = id;
    return tr_kernels_call(p->k, c, err);
}

int tr_torch_record_pair(struct tr_torch_program *p, int id, const struct tr_tensor *out, const struct tr_tensor *lse,
                         struct tr_error *err) {
    struct torch_replay *r = &p->rp;
    const struct torch_node *n = &p->nodes[id];
    if (p->blocks[id]) r->held[r->n_held++] = p->blocks[id];
    if (p->blocks[n->lse]) r->held[r->n_held++] = p->blocks[n->lse];
    struct tr_kernel_call *c = &r->calls[r->n_calls];
    int rc = tr_attn_forward_lse(p->k, n->op == TR_OP_ATTENTION_REL, n->n_in, p->args, &n->attrs, out, lse, c, err);
    if (rc != TR_OK) return rc;
    r->call_node[r->n_calls++] = id;
    return tr_kernels_call(p->k, c, err);
}

int tr_torch_record_linear(struct tr_torch_program *p, int id, const struct tr_tensor *out, struct tr_error *err) {
    struct torch_replay *r = &p->rp;
    const struct torch_node *mm = &p->nodes[p->nodes[id].linear];
    if (p->blocks[id]) r->held[r->n_held++] = p->blocks[id];
    struct tr_kernel_call *c = &r->calls[r->n_calls];
    int rc = tr_kernels_bind_matmul(p->k, &p->args[0], &p->args[1], out, mm->attrs.ints[0], mm->attrs.ints[1], 1.0f,
                                    &p->args[2], TR_ACT_NONE, c, err);
    if (rc != TR_OK) return rc;
    r->call_node[r->n_calls++] = id;
    return tr_kernels_call(p->k, c, err);
}

int tr_torch_record_group(struct tr_torch_program *p, int g, const struct tr_tensor *const grads[TR_ATTN_GRADS],
                          struct tr_error *err) {
    struct torch_replay *r = &p->rp;
    const struct torch_attn_group *a = &p->attn_groups[g];
    for (int w = 0; w < TR_ATTN_GRADS; w++)
        if (a->grad[w] >= 0 && p->blocks[a->grad[w]]) r->held[r->n_held++] = p->blocks[a->grad[w]];
    struct tr_kernel_call *c = &r->calls[r->n_calls];
    int rc = tr_attn_backward_of(p->k, &p->pir.nodes[a->lead], p->args, grads, c, err);
    if (rc != TR_OK) return rc;
    r->call_node[r->n_calls++] = a->lead;
    return tr_kernels_call(p->k, c, err);
}

int tr_torch_record_adamw(struct tr_torch_program *p, int g, const struct tr_tensor *out, const struct tr_tensor *m2,
                          const struct tr_tensor *v2, struct tr_error *err) {
    struct torch_replay *r = &p->rp;
    const struct tr_adamw_group *a = &p->adamw_groups[g];
    const int made[3] = {a->step, a->m2, a->v2};
    for (int i = 0; i < 3; i++)
        if (p->blocks[made[i]]) r->held[r->n_held++] = p->blocks[made[i]];
    const float *f = p->pir.nodes[a->step].attrs.floats;
    struct tr_kernel_call *c = &r->calls[r->n_calls];
    const struct tr_tensor *x = p->args;
    int rc = tr_kernels_bind_adamw_update(p->k, &x[0], &x[1], &x[2], &x[3], &x[4], &x[5], f[0], f[1], f[2], f[3], out,
                                          m2, v2, c, err);
    if (rc != TR_OK) return rc;
    r->call_node[r->n_calls++] = a->step;
    return tr_kernels_call(p->k, c, err);
}

void tr_torch_replay_free(struct tr_torch_program *p) {
    struct torch_replay *r = &p->rp;
    for (int i = 0; i < r->n_calls; i++) tr_kernels_unbind(p->k, &r->calls[i]);
    /* held and input blocks go back with the allocator, or to its pools here */
    if (p->pool) {
        for (int i = 0; r->held && i < r->n_held; i++)
            if (r->held[i] && r->held[i]->in_use) tr_torch_allocator_release(p->pool, r->held[i]);
        for (int i = 0; r->inputs && i < p->n_graph_in; i++) tr_torch_allocator_release(p->pool, r->inputs[i]);
    }
    free(r->calls);
    free(r->call_node);
    free(r->inputs);
    free(r->out_src);
    free(r->held);
    int steps = r->steps;
    memset(r, 0, sizeof *r);
    r->steps = steps;
}

/* The recorded call sequence's identity: which kernel, which op, in order. Graphs of two
 * programs with the same one have the same topology (unless a GEMM picked another
 * algorithm: then the update is refused and a new graph instantiated). */
static uint64_t calls_topo(const struct torch_replay *r) {
    uint64_t h = tr_cuda_graph_hash(TR_CUDA_GRAPH_HASH_SEED, &r->n_calls, sizeof r->n_calls);
    for (int i = 0; i < r->n_calls; i++) {
        h = tr_cuda_graph_hash(h, &r->calls[i].fn, sizeof r->calls[i].fn);
        h = tr_cuda_graph_hash(h, &r->calls[i].op, sizeof r->calls[i].op);
    }
    return h;
}

static int record(struct tr_torch_program *p, int n_inputs, const struct tr_tensor *inputs, int n_outputs,
                  struct tr_tensor *outputs, struct tr_error *err) {
    struct torch_replay *r = &p->rp;
    int rc;
    double t0 = now_ms();
    size_t nk = (size_t)p->n_kernel_nodes + 1;
    r->calls = calloc(nk, sizeof *r->calls);
    r->call_node = calloc(nk, sizeof *r->call_node);
    r->held = calloc(nk, sizeof *r->held);
    r->inputs = calloc((size_t)p->n_graph_in + 1, sizeof *r->inputs);
    r->out_src = calloc((size_t)(p->n_graph_out + p->n_updates) + 1, sizeof *r->out_src);
    if (!r->calls || !r->call_node || !r->held || !r->inputs || !r->out_src) {
        rc = tr_error_set(err, TR_ERR_NOMEM, "torch: out of memory recording %d kernel calls", p->n_kernel_nodes);
        goto fail;
    }
    for (int i = 0; i < n_inputs; i++) {
        int id = p->graph_in[i];
        size_t nb = p->nodes[id].nbytes;
        if ((rc = tr_torch_allocator_alloc(p->pool, nb, &r->inputs[i], err)) != TR_OK) {
            tr_error_prefix(err, "torch: static buffer for input %d ('%s')", i, tr_torch_node_name(p, id));
            goto fail;
        }
        p->data[id] = r->inputs[i]->ptr;
        if (nb && (rc = tr_kernels_to_device(p->k, p->data[id], inputs[i].data, nb, err)) != TR_OK) goto fail;
    }
    r->recording = 1;
    tr_torch_allocator_keep_cache(p->pool, 1); /* r->held points into the cache until held */
    rc = tr_torch_walk(p, err);
    r->recording = 0;
    if (rc == TR_OK) {
        for (int i = 0; i < n_outputs + p->n_updates; i++) r->out_src[i] = p->data[p->graph_out[i]];
        rc = tr_torch_copy_outputs(p, n_outputs, outputs, err);
    }
    tr_torch_release_all(p);
    if (rc != TR_OK) goto fail;

    /* The blocks the step was served, each once, taken out of the pools for good. */
    qsort(r->held, (size_t)r->n_held, sizeof *r->held, ptr_cmp);
    int n = 0;
    for (int i = 0; i < r->n_held; i++)
        if (n == 0 || r->held[i] != r->held[n - 1]) r->held[n++] = r->held[i];
    r->n_held = n;
    r->static_bytes = 0;
    for (int i = 0; i < n; i++) {
        if ((rc = tr_torch_allocator_hold(p->pool, r->held[i], err)) != TR_OK) {
            /* the ones not held yet are in the pools: nothing to give back twice */
            for (int j = i; j < n; j++) r->held[j] = NULL;
            tr_error_prefix(err, "torch: holding the recorded step's buffers");
            goto fail;
        }
        r->static_bytes += r->held[i]->size;
    }
    tr_torch_allocator_keep_cache(p->pool, 0);
    for (int i = 0; i < n_inputs; i++) r->static_bytes += r->inputs[i]->size;
    r->recorded = 1;
    r->topo = calls_topo(r);
    r->record_step = r->steps + 1;
    r->record_ms = now_ms() - t0;
    p->ctx->host->log(TR_LOG_DEBUG, "torch: recorded %d kernel calls at step %d, %llu bytes of static buffers",
                      r->n_calls, r->record_step, (unsigned long long)r->static_bytes);
    return TR_OK;
fail:
    /* Blocks served by the walk are back in the pools already; only held ones are not. */
    for (int i = 0; r->held && i < r->n_held; i++)
        if (r->held[i] && !r->held[i]->in_use) r->held[i] = NULL;
    tr_torch_allocator_keep_cache(p->pool, 0);
    tr_torch_replay_free(p);
    return rc;
}

static int run_calls(struct tr_kernels *k, void *user, struct tr_error *err) {
    struct tr_torch_program *p = user;
    const struct torch_replay *r = &p->rp;
    for (int i = 0; i < r->n_calls; i++) {
        int rc = tr_kernels_call(k, &r->calls[i], err);
        if (rc != TR_OK) {
            int id = r->call_node[i];
            return tr_error_prefix(err, "torch: replay of node %d %s '%s'", id, tr_op_name(p->nodes[id].op),
                                   tr_torch_node_name(p, id));
        }
    }
    return TR_OK;
}

/* cuda: the calls as one CUDA graph, captured at the first replay. The signature is the
 * input shapes, exactly when they fit the book's 64 words, else hashed. */
static int graph_replay(struct tr_torch_program *p, struct tr_error *err) {
    struct torch_replay *r = &p->rp;
    struct tr_torch_context *c = p->ctx;
    int rc;
    if (!c->graphs && (rc = tr_kernels_cuda_graphs_init(&c->graphs, 0, err)) != TR_OK)
        return tr_error_prefix(err, "torch: CUDA graphs");
    int64_t sig[64];
    int n = 0, fits = 1;
    for (int i = 0; i < p->n_graph_in && fits; i++) {
        const struct tr_tensor *t = &p->nodes[p->graph_in[i]].t;
        if (n + 2 + t->ndim > 64) fits = 0;
        else {
            sig[n++] = t->dtype;
            sig[n++] = t->ndim;
            for (int d = 0; d < t->ndim; d++) sig[n++] = t->shape[d];
        }
    }
    if (!fits) {
        uint64_t h = TR_CUDA_GRAPH_HASH_SEED;
        for (int i = 0; i < p->n_graph_in; i++) {
            const struct tr_tensor *t = &p->nodes[p->graph_in[i]].t;
            h = tr_cuda_graph_hash(h, &t->dtype, sizeof t->dtype);
            h = tr_cuda_graph_hash(h, &t->ndim, sizeof t->ndim);
            h = tr_cuda_graph_hash(h, t->shape, (size_t)t->ndim * sizeof t->shape[0]);
        }
        sig[0] = -1;
        sig[1] = (int64_t)h;
        n = 2;
    }
    double t0 = now_ms();
    int captured = 0;
    rc = tr_kernels_cuda_graph_step(p->k, c->graphs, p->serial, sig, n, r->topo, run_calls, p, &captured, err);
    if (rc != TR_OK) return tr_error_prefix(err, "torch: CUDA graph of %d calls", r->n_calls);
    if (captured) {
        r->graph_capture_step = r->steps + 1;
        r->graph_capture_ms = now_ms() - t0;
    }
    p->kernel_calls += (uint64_t)r->n_calls;
    return TR_OK;
}

static int replay(struct tr_torch_program *p, int n_inputs, const struct tr_tensor *inputs, int n_outputs,
                  struct tr_tensor *outputs, struct tr_error *err) {
    struct torch_replay *r = &p->rp;
    int rc;
    for (int i = 0; i < n_inputs; i++) {
        size_t nb = p->nodes[p->graph_in[i]].nbytes;
        if (nb && (rc = tr_kernels_to_device(p->k, r->inputs[i]->ptr, inputs[i].data, nb, err)) != TR_OK)
            return tr_error_prefix(err, "torch: input %d ('%s')", i, tr_torch_node_name(p, p->graph_in[i]));
    }
    if (p->on_cuda) {
        if ((rc = graph_replay(p, err)) != TR_OK) return rc;
    } else {
        for (int i = 0; i < r->n_calls; i++) {
            p->kernel_calls++;
            if ((rc = tr_kernels_call(p->k, &r->calls[i], err)) != TR_OK) {
                int id = r->call_node[i];
                return tr_error_prefix(err, "torch: replay of node %d %s '%s'", id, tr_op_name(p->nodes[id].op),
                                       tr_torch_node_name(p, id));
            }
        }
    }
    for (int i = 0; i < n_outputs; i++) {
        size_t nb = p->nodes[p->graph_out[i]].nbytes;
        if (nb && (rc = tr_kernels_to_host(p->k, outputs[i].data, r->out_src[i], nb, err)) != TR_OK)
            return tr_error_prefix(err, "torch: output %d ('%s')", i, tr_torch_node_name(p, p->graph_out[i]));
    }
    if ((rc = tr_torch_copy_updates(p, r->out_src + n_outputs, err)) != TR_OK) return rc;
    r->replays++;
    return TR_OK;
}

int tr_torch_ro_execute(struct tr_torch_program *p, int n_inputs, const struct tr_tensor *inputs, int n_outputs,
                        struct tr_tensor *outputs, struct tr_error *err) {
    struct torch_replay *r = &p->rp;
    int rc;
    if (!r->recorded && r->steps < p->ctx->warmup_steps) {
        rc = tr_torch_execute_eager(p, n_inputs, inputs, n_outputs, outputs, err);
    } else { /* record and replay take checked arguments (eager checks its own) */
        rc = tr_torch_check_args(p, n_inputs, inputs, n_outputs, outputs, err);
        if (rc == TR_OK)
            rc = r->recorded ? replay(p, n_inputs, inputs, n_outputs, outputs, err)
                             : record(p, n_inputs, inputs, n_outputs, outputs, err);
    }
    if (rc == TR_OK) r->steps++;
    return rc;
}

void tr_torch_replay_notes(const struct tr_torch_program *p, char *notes, size_t size) {
    const struct torch_replay *r = &p->rp;
    char sb[32];
    if (r->recorded)
        snprintf(notes, size, "recorded %d calls at step %d (%.1f ms); replays %llu; static buffers %s; ", r->n_calls,
                 r->record_step, r->record_ms, (unsigned long long)r->replays,
                 tr_human_bytes(r->static_bytes, sb, sizeof sb));
    else
        snprintf(notes, size, "warm-up: %d eager step%s done, recording at step %d; ", r->steps,
                 r->steps == 1 ? "" : "s", p->ctx->warmup_steps + 1);
    size_t len = strlen(notes);
    if (p->on_cuda && r->graph_capture_step && len < size) {
        struct tr_cuda_graph_stats g;
        tr_kernels_cuda_graphs_stats(p->ctx->graphs, &g);
        snprintf(notes + len, size - len,
                 "CUDA graph captured at step %d (%.1f ms); graphs: %d held, %llu captures, %llu updates in place, "
                 "%llu launches; ",
                 r->graph_capture_step, r->graph_capture_ms, g.n_entries, (unsigned long long)g.captures,
                 (unsigned long long)g.updates, (unsigned long long)(g.replays + g.captures));
    }
}
