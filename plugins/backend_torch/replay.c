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

static int record(struct tr_torch_program *p, int n_inputs, const struct tr_tensor *inputs, int n_outputs,
                  struct tr_tensor *outputs, struct tr_error *err) {
    struct torch_replay *r = &p->rp;
    int rc = tr_torch_check_args(p, n_inputs, inputs, n_outputs, outputs, err);
    if (rc != TR_OK) return rc;
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
    for (int i = 0; i < n_inputs; i++) r->static_bytes += r->inputs[i]->size;
    r->recorded = 1;
    r->record_step = r->steps + 1;
    r->record_ms = now_ms() - t0;
    p->ctx->host->log(TR_LOG_DEBUG, "torch: recorded %d kernel calls at step %d, %llu bytes of static buffers",
                      r->n_calls, r->record_step, (unsigned long long)r->static_bytes);
    return TR_OK;
fail:
    /* Blocks served by the walk are back in the pools already; only held ones are not. */
    for (int i = 0; r->held && i < r->n_held; i++)
        if (r->held[i] && !r->held[i]->in_use) r->held[i] = NULL;
    tr_torch_replay_free(p);
    return rc;
}

static int replay(struct tr_torch_program *p, int n_inputs, const struct tr_tensor *inputs, int n_outputs,
                  struct tr_tensor *outputs, struct tr_error *err) {
    struct torch_replay *r = &p->rp;
    int rc = tr_torch_check_args(p, n_inputs, inputs, n_outputs, outputs, err);
    if (rc != TR_OK) return rc;
    for (int i = 0; i < n_inputs; i++) {
        size_t nb = p->nodes[p->graph_in[i]].nbytes;
        if (nb && (rc = tr_kernels_to_device(p->k, r->inputs[i]->ptr, inputs[i].data, nb, err)) != TR_OK)
            return tr_error_prefix(err, "torch: input %d ('%s')", i, tr_torch_node_name(p, p->graph_in[i]));
    }
    for (int i = 0; i < r->n_calls; i++) {
        p->kernel_calls++;
        if ((rc = tr_kernels_call(p->k, &r->calls[i], err)) != TR_OK) {
            int id = r->call_node[i];
            return tr_error_prefix(err, "torch: replay of node %d %s '%s'", id, tr_op_name(p->nodes[id].op),
                                   tr_torch_node_name(p, id));
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
    if (r->recorded) rc = replay(p, n_inputs, inputs, n_outputs, outputs, err);
    else if (r->steps < p->ctx->warmup_steps) rc = tr_torch_execute_eager(p, n_inputs, inputs, n_outputs, outputs, err);
    else rc = record(p, n_inputs, inputs, n_outputs, outputs, err);
    if (rc == TR_OK) r->steps++;
    return rc;
}

void tr_torch_replay_notes(const struct tr_torch_program *p, char *notes, size_t size) {
    const struct torch_replay *r = &p->rp;
    char sb[32];
    if (r->recorded)
        snprintf(notes, size, "recorded %d calls at step %d (%.1f ms); replays %llu; static buffers %s; ", r->n_calls,
                 r->record_step, r->record_ms, (unsigned long long)r->replays,
                 tr_torch_human_bytes(r->static_bytes, sb, sizeof sb));
    else
        snprintf(notes, size, "warm-up: %d eager step%s done, recording at step %d; ", r->steps,
                 r->steps == 1 ? "" : "s", p->ctx->warmup_steps + 1);
}
