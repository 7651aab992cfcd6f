/* tf backend — compile and the static executor.
 *
 * Compile does all the work a step would otherwise repeat: the graph is read into the
 * plugin IR, simplified (common subexpressions merged, dead code dropped: the cheap
 * passes of passes.h) and remapped (fused patterns), the schedule fixed
 * (the IR's topological order), and every value given its place once:
 *   - PARAM and CONST: the host's memory, in place;
 *   - RESHAPE: a view of its input's place (no kernel call); the viewed buffer's live
 *     range is extended to the view's last reader;
 *   - INPUT and every computed value: a slot in one arena, from live ranges in
 *     schedule steps (tr_plan_assign), checked with tr_plan_verify, allocated once.
 * Inputs are copied into their slots at the start of a step (so every pointer a step
 * uses is fixed at compile) and outputs copied out at its end. Each scheduled node is
 * then one kernel call bound once: graph ops through tr_kernels_bind, fused ops
 * (a GEMM with its bias/activation epilogue, the fused kernels) through the binders of
 * kernels.h. A step runs the list; it allocates nothing and checks nothing.
 *
 * Updates (training state, ABI 1.1): a value that overwrites a PARAM is computed
 * straight into the param's host memory when tr_pir_donatable allows (an optimizer step
 * reads the weight it replaces index for index), else it gets an arena slot and is
 * copied into the param at the end of the step, as outputs are.
 *
 * On device = cuda the same plan runs on the GPU: the arena is one device allocation
 * (tr_kernels_alloc: the CUDA caching allocator), the constants are uploaded once at
 * compile into one device block of their own (64-byte aligned places) and the PARAMs
 * are the backend's shared device blocks (resident.h: one upload for every program that
 * binds the same host memory, an update by one seen by the others), the bound calls
 * are the CUDA kernels of the same library, queued on the context's stream. Inputs are
 * copied into their slots and outputs back as on the cpu (the copy out waits for the
 * kernels); updates are computed in (or copied into) the params' device copies and
 * reach their host memory only through sync (ABI 1.1).
 *
 * Planner steps: 0 is "inputs copied in", 1..S the kernel calls, S+1 "outputs copied
 * out". A kernel's output and its inputs are live at the same step, so they never
 * share bytes (no kernel here works in place).
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "attn_group.h"
#include "io.h"
#include "mem.h"
#include "options.h"
#include "stats.h"
#include "passes.h"
#include "plan.h"
#include "resident.h"
#include "tf_internal.h"
#include "trident/kernels.h"
#include "trident/kernels_cuda.h"

static const char *nname(const struct tr_pir_node *n) { return n->name ? n->name : ""; }

static const char *dims(const struct tr_pir_node *n, char *buf, size_t size) {
    return tr_shape_str(n->ndim, n->shape, buf, size);
}

int tf_runs_op(int op, int dtype) {
    int fl = dtype == TR_DTYPE_F32 || dtype == TR_DTYPE_BF16 || dtype == TR_DTYPE_F16;
    if (op >= TF_OP_GEMM && op < TF_OP_END) return fl;
    return tr_kernels_supports(op, dtype);
}

/* ---- compile ---- */

static int check_nodes(struct tf_program *p, struct tr_error *err) {
    char sh[128];
    for (int i = 0; i < p->pir.n; i++) {
        const struct tr_pir_node *n = &p->pir.nodes[i];
        if (n->dead) continue;
        if (!tf_runs_op(n->op, n->dtype)) {
            if (n->op >= 0 && n->op < TR_OP_COUNT && tr_dtype_size((enum tr_dtype)n->dtype) != 0)
                return tr_error_set(err, TR_ERR_UNSUPPORTED,
                                    "tf: node %d %s '%s' is %s%s: the tf backend has no %s kernel for %s "
                                    "(its float ops run on f32, bf16 and f16)",
                                    n->graph_id, tf_op_name(n->op), nname(n), tr_dtype_name((enum tr_dtype)n->dtype),
                                    dims(n, sh, sizeof sh), tr_dtype_name((enum tr_dtype)n->dtype), tf_op_name(n->op));
            return tr_error_set(err, TR_ERR_UNSUPPORTED,
                                "tf: node %d '%s': op %d (%s) with dtype %d is not provided by the tf backend",
                                n->graph_id, nname(n), n->op, tf_op_name(n->op), n->dtype);
        }
        if ((n->op == TR_OP_PARAM || n->op == TR_OP_CONST) && !n->data && tr_pir_nbytes(n) > 0)
            return tr_error_set(err, TR_ERR_INVALID,
                                "tf: node %d %s '%s' %s%s has no data (bind it with tr_graph_bind_param or load "
                                "weights before compile)",
                                n->graph_id, tr_op_name(n->op), nname(n), tr_dtype_name((enum tr_dtype)n->dtype),
                                dims(n, sh, sizeof sh));
        if (n->op == TR_OP_RESHAPE && (n->n_in != 1 || tr_pir_nbytes(&p->pir.nodes[n->in[0]]) != tr_pir_nbytes(n)))
            return tr_error_set(err, TR_ERR_SHAPE, "tf: node %d reshape '%s': %zu bytes from a %d-input view",
                                n->graph_id, nname(n), tr_pir_nbytes(n), n->n_in);
    }
    return TR_OK;
}

static int tf_reads_in_place(const struct tr_pir_node *n, int input) {
    if (n->op == TF_OP_ADAMW) return input < 3; /* param, m, v: element i read, then written */
    return n->op < TR_OP_COUNT && tr_pir_reads_in_place(n, input);
}

static int is_step(int op) {
    return op != TR_OP_INPUT && op != TR_OP_PARAM && op != TR_OP_CONST && op != TR_OP_RESHAPE &&
           op != TF_OP_EXTRA_OUT;
}

/* The view chain's end: the node whose buffer (or host memory) holds n's data. */
static int root_of(const struct tr_pir *ir, int n) {
    while (ir->nodes[n].op == TR_OP_RESHAPE) n = ir->nodes[n].in[0];
    return n;
}

/* Buffers and live ranges; views extend the range of what they view. */
static int plan(struct tf_program *p, struct tr_error *err) {
    const struct tr_pir *ir = &p->pir;
    int n = ir->n, s = 0;
    p->buf_of = malloc((size_t)n * sizeof *p->buf_of);
    p->bufs = calloc((size_t)n, sizeof *p->bufs);
    p->data = calloc((size_t)n, sizeof *p->data);
    p->donated = calloc((size_t)ir->n_updates + 1, 1);
    p->donor = malloc((size_t)n * sizeof *p->donor);
    if (!p->buf_of || !p->bufs || !p->data || !p->donated || !p->donor)
        return tr_error_set(err, TR_ERR_NOMEM, "tf: out of memory planning %d nodes", n);
    for (int i = 0; i < n; i++) p->donor[i] = -1;
    for (int u = 0; u < ir->n_updates; u++)
        if (tr_pir_donatable(ir, u, tf_reads_in_place)) {
            p->donated[u] = 1;
            p->n_donated++;
            p->donor[tr_pir_update_value(ir, u)] = ir->update_param[u];
        }
    int *step_of = malloc((size_t)n * sizeof *step_of);
    if (!step_of) return tr_error_set(err, TR_ERR_NOMEM, "tf: out of memory planning %d nodes", n);
    for (int i = 0; i < n; i++) {
        const struct tr_pir_node *d = &ir->nodes[i];
        p->buf_of[i] = -1;
        step_of[i] = is_step(d->op) || p->donor[i] >= 0 ? s + 1 : -1;
        if (d->op == TF_OP_EXTRA_OUT) { /* written by its producer, at the producer's step */
            if (p->donor[i] >= 0) continue; /* into its param's memory (an ADAMW's) */
            int at = step_of[d->in[0]];
            p->bufs[p->n_bufs] = (struct tr_plan_buf){.size = (int64_t)tr_pir_nbytes(d), .first = at, .last = at};
            p->buf_of[i] = p->n_bufs++;
            continue;
        }
        if (p->donor[i] >= 0) { /* a step, whose output is the param's memory */
            s++;
            for (int j = 0; j < d->n_in; j++) {
                int b = p->buf_of[root_of(ir, d->in[j])];
                if (b >= 0 && p->bufs[b].last < s) p->bufs[b].last = s;
            }
            continue;
        }
        if (d->op == TR_OP_INPUT || is_step(d->op)) {
            int first = d->op == TR_OP_INPUT ? 0 : ++s;
            p->bufs[p->n_bufs] = (struct tr_plan_buf){.size = (int64_t)tr_pir_nbytes(d), .first = first, .last = first};
            p->buf_of[i] = p->n_bufs++;
        }
        if (is_step(d->op))
            for (int j = 0; j < d->n_in; j++) {
                int b = p->buf_of[root_of(ir, d->in[j])];
                if (b >= 0 && p->bufs[b].last < s) p->bufs[b].last = s;
            }
    }
    free(step_of);
    p->n_steps = s;
    for (int i = 0; i < ir->n_outputs; i++) {
        int b = p->buf_of[root_of(ir, ir->outputs[i])];
        if (b >= 0) p->bufs[b].last = s + 1;
    }
    int rc = tr_plan_assign(p->bufs, p->n_bufs, TF_ALIGN, &p->arena_bytes, err);
    if (rc == TR_OK) rc = tr_plan_verify(p->bufs, p->n_bufs, p->arena_bytes, err);
    if (rc != TR_OK) return tr_error_prefix(err, "tf: arena plan of %d buffers", p->n_bufs);
    return TR_OK;
}

static int make_tensor(struct tf_program *p, int id, struct tr_tensor *t, struct tr_error *err) {
    const struct tr_pir_node *d = &p->pir.nodes[id];
    int rc = tr_tensor_make(t, p->data[id], (enum tr_dtype)d->dtype, d->ndim, d->shape, err);
    if (rc != TR_OK) return tr_error_prefix(err, "tf: node %d '%s'", d->graph_id, nname(d));
    t->device = p->ctx->device_type;
    t->device_index = p->ctx->device_index;
    return TR_OK;
}

/* ---- the fused ops bound ----
 * A GEMM with its epilogue through tr_kernels_bind_matmul (its own oneDNN primitive
 * with the post-ops, made once), the fused kernels through their binders: each checked
 * once here, and a step's call is the compute alone. */
static int make_tensor(struct tf_program *p, int id, struct tr_tensor *t, struct tr_error *err);

/* ATTN_LSE: the attention's output and, into its EXTRA_OUT node's buffer, the lse. */
static int bind_attn_lse(struct tf_program *p, int id, const struct tr_tensor *in, const struct tr_tensor *out,
                         struct tr_kernel_call *c, struct tr_error *err) {
    const struct tr_pir *ir = &p->pir;
    const struct tr_pir_node *d = &ir->nodes[id];
    for (int j = id + 1; j < ir->n; j++) {
        const struct tr_pir_node *e = &ir->nodes[j];
        if (e->op != TF_OP_EXTRA_OUT || e->in[0] != id) continue;
        struct tr_tensor lse;
        int rc = make_tensor(p, j, &lse, err);
        if (rc != TR_OK) return rc;
        return tr_attn_forward_lse(p->k, (int)d->attrs.ints[4], d->n_in, in, &d->attrs, out, &lse, c, err);
    }
    return tr_error_set(err, TR_ERR_INTERNAL, "tf: attention_with_lse without its lse node");
}

/* ATTN_BWD: its own gradient, and those of its EXTRA_OUT nodes (ints[4]: of ATTENTION_REL). */
static int bind_attn_bwd(struct tf_program *p, int id, const struct tr_tensor *in, const struct tr_tensor *out,
                         struct tr_kernel_call *c, struct tr_error *err) {
    const struct tr_pir *ir = &p->pir;
    const struct tr_pir_node *d = &ir->nodes[id];
    struct tr_tensor g[5];
    const struct tr_tensor *gp[5] = {NULL, NULL, NULL, NULL, NULL};
    gp[d->attrs.ints[2]] = out;
    for (int j = id + 1; j < ir->n; j++) {
        const struct tr_pir_node *e = &ir->nodes[j];
        if (e->op != TF_OP_EXTRA_OUT || e->in[0] != id) continue;
        int w = (int)e->attrs.ints[0], rc = make_tensor(p, j, &g[w], err);
        if (rc != TR_OK) return rc;
        gp[w] = &g[w];
    }
    const struct tr_attrs *a = &d->attrs;
    return tr_attn_backward(p->k, (int)a->ints[4], d->n_in, in, a->floats[0], (int)a->ints[0], (int)a->ints[1], gp, c,
                            err);
}

/* ADAMW: param', m' and v', its own value (ints[0]) and its EXTRA_OUT nodes'. */
static int bind_adamw(struct tf_program *p, int id, const struct tr_tensor *in, const struct tr_tensor *out,
                      struct tr_kernel_call *c, struct tr_error *err) {
    const struct tr_pir *ir = &p->pir;
    const struct tr_pir_node *d = &ir->nodes[id];
    struct tr_tensor t[3];
    int have = 1 << d->attrs.ints[0];
    t[d->attrs.ints[0]] = *out;
    for (int j = id + 1; j < ir->n; j++) {
        const struct tr_pir_node *e = &ir->nodes[j];
        if (e->op != TF_OP_EXTRA_OUT || e->in[0] != id) continue;
        int w = (int)e->attrs.ints[0], rc = make_tensor(p, j, &t[w], err);
        if (rc != TR_OK) return rc;
        have |= 1 << w;
    }
    if (have != 7) return tr_error_set(err, TR_ERR_INTERNAL, "tf: fused_adamw without its three outputs");
    const float *f = d->attrs.floats;
    return tr_kernels_bind_adamw_update(p->k, &in[0], &in[1], &in[2], &in[3], &in[4], &in[5], f[0], f[1], f[2], f[3],
                                        &t[0], &t[1], &t[2], c, err);
}

static int bind_fused(struct tr_kernels *k, const struct tr_pir_node *d, const struct tr_tensor *in,
                      const struct tr_tensor *out, struct tr_kernel_call *c, struct tr_error *err) {
    const struct tr_attrs *a = &d->attrs;
    switch (d->op) {
    case TF_OP_GEMM:
        return tr_kernels_bind_matmul(k, &in[0], &in[1], out, a->ints[0] != 0, a->ints[1] != 0, a->floats[0],
                                      a->ints[3] ? &in[2] : NULL, (enum tr_act)a->ints[2], c, err);
    case TF_OP_BIAS_RESIDUAL_LN: {
        int j = 3;
        const struct tr_tensor *bias = a->ints[0] ? &in[j++] : NULL;
        const struct tr_tensor *res = a->ints[1] ? &in[j++] : NULL;
        return tr_kernels_bind_bias_residual_layer_norm(k, &in[0], bias, res, &in[1], &in[2], a->floats[0], out, c,
                                                        err);
    }
    case TF_OP_SCALE_MASK_SOFTMAX:
        return tr_kernels_bind_scale_mask_softmax(k, &in[0], a->floats[0], a->ints[0] ? &in[1] : NULL, out, c, err);
    case TF_OP_EMBED_LN: {
        int n = (int)a->ints[0];
        return tr_kernels_bind_embedding_sum_layer_norm(k, n, &in[0], &in[n], &in[2 * n], &in[2 * n + 1],
                                                        a->floats[0], out, c, err);
    }
    default:
        return tr_error_set(err, TR_ERR_INTERNAL, "tf: fused op %d has no kernel", d->op);
    }
}

/* cuda: each PARAM bound to the backend's shared block of its host memory (uploaded by
 * the first program that needs it); the constants' places in one device block of this
 * program, filled from their host memory. */
static int upload_weights(struct tf_program *p, struct tr_error *err) {
    int rc = tr_resident_upload_leaves(&p->ctx->params, p->ctx->device_type, p->ctx->device_index, "tf", p->k,
                                       &p->pir, TF_ALIGN, p->data, &p->shared, &p->weights_dev, err);
    return rc != TR_OK ? rc : tr_kernels_sync(p->k, err);
}

int tf_sync(struct tf_program *p, struct tr_error *err) {
    const struct tr_pir *ir = &p->pir;
    if (!p->on_cuda) return TR_OK; /* the updates were made in the host memory */
    /* Every param of this program that some program of the backend updates: the shared
     * device memory is the truth, whichever program wrote it last. */
    for (int i = 0; p->shared && i < ir->n; i++) {
        const struct tr_pir_node *pa = &ir->nodes[i];
        if (!p->shared[i] || !tr_resident_store_written(p->ctx->params, pa->data)) continue;
        /* the host's PARAM memory, writable for an updated param (backend.h, ABI 1.1) */
        int rc = tr_kernels_to_host(p->k, (void *)pa->data, p->data[i], tr_pir_nbytes(pa), err);
        if (rc != TR_OK) return tr_error_prefix(err, "tf: sync of '%s'", nname(pa));
    }
    return TR_OK;
}

/* Every pointer is known now: each call is made once. */
static int bind_steps(struct tf_program *p, struct tr_error *err) {
    const struct tr_pir *ir = &p->pir;
    char *arena = p->arena;
    for (int i = 0; i < ir->n; i++) {
        const struct tr_pir_node *d = &ir->nodes[i];
        if (p->buf_of[i] >= 0) p->data[i] = arena ? arena + p->bufs[p->buf_of[i]].offset : NULL;
        else if (p->donor[i] >= 0) p->data[i] = p->data[p->donor[i]];
        else if (d->op == TR_OP_PARAM || d->op == TR_OP_CONST) {
            if (!p->on_cuda) p->data[i] = (void *)d->data; /* cuda: upload_weights placed it */
            p->weight_bytes += tr_pir_nbytes(d);
        } else p->data[i] = p->data[d->in[0]]; /* RESHAPE */
    }
    p->steps = calloc((size_t)p->n_steps + 1, sizeof *p->steps);
    if (!p->steps) return tr_error_set(err, TR_ERR_NOMEM, "tf: out of memory for %d steps", p->n_steps);
    int s = 0, rc;
    struct tr_tensor in[TR_PIR_MAX_IN], out;
    for (int i = 0; i < ir->n; i++) {
        const struct tr_pir_node *d = &ir->nodes[i];
        if (!is_step(d->op)) continue;
        struct tf_step *st = &p->steps[s++];
        st->node = i;
        for (int j = 0; j < d->n_in; j++)
            if ((rc = make_tensor(p, d->in[j], &in[j], err)) != TR_OK) return rc;
        if ((rc = make_tensor(p, i, &out, err)) != TR_OK) return rc;
        struct tr_kernel_call *c = &st->call;
        rc = d->op == TF_OP_ATTN_BWD ? bind_attn_bwd(p, i, in, &out, c, err)
             : d->op == TF_OP_ATTN_LSE ? bind_attn_lse(p, i, in, &out, c, err)
             : d->op == TF_OP_ADAMW    ? bind_adamw(p, i, in, &out, c, err)
             : d->op >= TF_OP_GEMM   ? bind_fused(p->k, d, in, &out, c, err)
                                     : tr_kernels_bind(p->k, d->op, &d->attrs, d->n_in, in, &out, c, err);
        if (rc != TR_OK)
            return tr_error_prefix(err, "tf: node %d %s '%s'", d->graph_id, tf_op_name(d->op), nname(d));
        st->bound = 1;
    }
    return TR_OK;
}

int tf_compile(struct tf_context *ctx, tr_graph_t g, struct tf_program **out, struct tr_error *err) {
    *out = NULL;
    if (!g) return tr_error_set(err, TR_ERR_INVALID, "tf: compile without a graph");
    struct tf_program *p = calloc(1, sizeof *p);
    if (!p) return tr_error_set(err, TR_ERR_NOMEM, "tf: out of memory for a program");
    p->ctx = ctx;
    p->g = g;
    int rc = tr_pir_read("tf", ctx->host, g, &p->pir, err);
    if (rc != TR_OK) goto fail;
    p->graph_nodes = p->pir.n;
    /* Unknown ops and missing weights are named before any pass rewrites the nodes. */
    if ((rc = check_nodes(p, err)) != TR_OK) goto fail;
    if (ctx->simplify && ((rc = tr_pass_dce(&p->pir, &p->dce_removed, err)) != TR_OK ||
                          (rc = tr_pass_cse(&p->pir, &p->cse_merged, err)) != TR_OK)) {
        tr_error_prefix(err, "tf");
        goto fail;
    }
    if (ctx->fuse && (rc = tf_remap(&p->pir, &p->fus, err)) != TR_OK) goto fail;
    if ((rc = tr_pir_compact(&p->pir, NULL, err)) != TR_OK) {
        tr_error_prefix(err, "tf");
        goto fail;
    }
    if ((rc = check_nodes(p, err)) != TR_OK || (rc = plan(p, err)) != TR_OK) goto fail;
    if ((rc = tr_backend_kernels_open("tf", ctx->device_type, ctx->device_index, ctx->math, &p->k, err)) != TR_OK)
        goto fail;
    p->on_cuda = ctx->device_type == TR_DEVICE_CUDA;
    if (p->arena_bytes > 0 && (rc = tr_kernels_alloc(p->k, (size_t)p->arena_bytes, &p->arena, err)) != TR_OK) {
        tr_error_prefix(err, "tf: arena of %lld bytes", (long long)p->arena_bytes);
        goto fail;
    }
    if (p->on_cuda && (rc = upload_weights(p, err)) != TR_OK) goto fail;
    if ((rc = bind_steps(p, err)) != TR_OK) goto fail;
    char f[256];
    ctx->host->log(TR_LOG_DEBUG, "tf: %d nodes -> %d (%d kernel calls), fused: %s; arena %lld bytes in %d buffers",
                   p->graph_nodes, p->pir.n, p->n_steps, tf_fusions_str(&p->fus, f, sizeof f),
                   (long long)p->arena_bytes, p->n_bufs);
    *out = p;
    return TR_OK;
fail:
    tf_program_free(p);
    return rc;
}

void tf_program_free(struct tf_program *p) {
    if (!p) return;
    if (p->shared) {
        struct tr_error ignored = {0};
        if (p->k) (void)tr_kernels_sync(p->k, &ignored); /* nothing queued may still read a param that goes */
        for (int i = 0; i < p->pir.n; i++)
            if (p->shared[i]) tr_resident_store_release(&p->ctx->params, p->pir.nodes[i].data, p->shared[i] == 2);
        free(p->shared);
    }
    tr_pir_free(&p->pir);
    for (int s = 0; p->steps && s < p->n_steps; s++)
        if (p->steps[s].bound) tr_kernels_unbind(p->k, &p->steps[s].call);
    TR_FREE_EACH(p->steps, p->data, p->donated, p->donor, p->buf_of, p->bufs);
    if (p->arena) tr_kernels_dealloc(p->k, p->arena);
    if (p->weights_dev) tr_kernels_dealloc(p->k, p->weights_dev);
    if (p->k) tr_kernels_free(p->k);
    free(p);
}

/* ---- execute ---- */

static int execute_steps(struct tf_program *p, int n_inputs, const struct tr_tensor *inputs, int n_outputs,
                         struct tr_tensor *outputs, struct tr_error *err) {
    const struct tr_pir *ir = &p->pir;
    int rc = tr_io_check_pir("tf", ir, n_inputs, inputs, n_outputs, outputs, err);
    if (rc != TR_OK) return rc;
    for (int i = 0; i < n_inputs; i++) {
        int id = ir->inputs[i];
        size_t nb = tr_pir_nbytes(&ir->nodes[id]);
        if (nb && (rc = tr_kernels_to_device(p->k, p->data[id], inputs[i].data, nb, err)) != TR_OK)
            return tr_error_prefix(err, "tf: input %d ('%s')", i, nname(&ir->nodes[id]));
    }
    for (int s = 0; s < p->n_steps; s++) {
        const struct tf_step *st = &p->steps[s];
        p->kernel_calls++;
        if ((rc = tr_kernels_call(p->k, &st->call, err)) != TR_OK) {
            const struct tr_pir_node *d = &ir->nodes[st->node];
            return tr_error_prefix(err, "tf: step %d, node %d %s '%s'", s, d->graph_id, tf_op_name(d->op), nname(d));
        }
    }
    for (int i = 0; i < n_outputs; i++) {
        int id = ir->outputs[i];
        size_t nb = tr_pir_nbytes(&ir->nodes[id]);
        if (nb && (rc = tr_kernels_to_host(p->k, outputs[i].data, p->data[id], nb, err)) != TR_OK)
            return tr_error_prefix(err, "tf: output %d ('%s')", i, nname(&ir->nodes[id]));
    }
    for (int u = 0; u < ir->n_updates; u++) {
        if (p->donated[u]) continue;
        int pa = ir->update_param[u];
        size_t nb = tr_pir_nbytes(&ir->nodes[pa]);
        const void *from = p->data[tr_pir_update_value(ir, u)];
        /* on cuda the param's memory is its device copy; host memory is sync's */
        if (nb && (rc = p->on_cuda ? tr_kernels_copy(p->k, p->data[pa], from, nb, err)
                                   : tr_kernels_to_host(p->k, p->data[pa], from, nb, err)) != TR_OK)
            return tr_error_prefix(err, "tf: update of '%s'", nname(&ir->nodes[pa]));
    }
    /* cuda: the updates' copies are still queued; a kernel's late failure is this step's */
    if (p->on_cuda && (rc = tr_kernels_sync(p->k, err)) != TR_OK) return tr_error_prefix(err, "tf: step");
    return TR_OK;
}

int tf_execute(struct tf_program *p, int n_inputs, const struct tr_tensor *inputs, int n_outputs,
               struct tr_tensor *outputs, struct tr_error *err) {
    if ((n_inputs > 0 && !inputs) || (n_outputs > 0 && !outputs))
        return tr_error_set(err, TR_ERR_INVALID, "tf: execute with %d inputs and %d outputs but no arrays", n_inputs,
                            n_outputs);
    p->kernel_calls = 0;
    /* The thread count is the caller's again afterwards: other backends in this process
     * run with theirs. */
    int saved = omp_get_max_threads();
    if (p->ctx->threads > 0) omp_set_num_threads(p->ctx->threads);
    int rc = execute_steps(p, n_inputs, inputs, n_outputs, outputs, err);
    if (p->ctx->threads > 0) omp_set_num_threads(saved);
    return rc;
}

/* ---- report ---- */

void tf_program_stats(const struct tf_program *p, struct tr_backend_stats *st) {
    char f[300], arena[32], weights[32];
    st->kernel_calls = p->kernel_calls;
    st->alloc_hits = 0;
    st->alloc_misses = 0; /* a step allocates nothing: the arena is made at compile */
    st->arena_bytes = (uint64_t)p->arena_bytes;
    st->peak_bytes = (uint64_t)p->arena_bytes + p->weight_bytes;
    if (p->on_cuda) {
        /* the device's own figures: this program's (arena, constants, workspace,
         * scratch) and the backend's shared params, which every program counts whole,
         * so the largest program's figure counts them once */
        struct tr_cuda_pool_stats cs;
        struct tr_error e = {0};
        if (tr_kernels_cuda_memory(p->k, &cs, &e) == TR_OK)
            st->peak_bytes = cs.peak_reserved + tr_resident_store_peak_bytes(p->ctx->params);
    }
    int k = snprintf(st->notes, sizeof st->notes,
                     "fused: %s; %d nodes -> %d (cse %d, dce %d), %d kernel calls; arena %s in %d buffers; weights %s "
                     "%s",
                     tf_fusions_str(&p->fus, f, sizeof f), p->graph_nodes, p->pir.n, p->cse_merged, p->dce_removed,
                     p->n_steps, tr_human_bytes((uint64_t)p->arena_bytes, arena, sizeof arena), p->n_bufs,
                     tr_human_bytes(p->weight_bytes, weights, sizeof weights),
                     p->on_cuda ? "on the device (params shared by the backend's programs)" : "in place");
    if (p->pir.n_updates && k > 0 && (size_t)k < sizeof st->notes)
        k += snprintf(st->notes + k, sizeof st->notes - (size_t)k, "; %d of %d updates in place", p->n_donated,
                      p->pir.n_updates);
    if (p->ctx->math != TR_MATH_DEFAULT && k > 0 && (size_t)k < sizeof st->notes)
        snprintf(st->notes + k, sizeof st->notes - (size_t)k, "; math %s", tr_math_name((enum tr_math)p->ctx->math));
}
