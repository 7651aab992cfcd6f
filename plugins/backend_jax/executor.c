/* jax backend — compile() end to end, and the flat executor (jax.h).
 *
 * compile: the graph read into the plugin IR; simplification to a fixed point (CSE, dead
 * code, constant folding, transposes into GEMM flags); GEMM epilogues and fusion; one C
 * source for all fused kernels, built (or found in the cache) and loaded; then buffer
 * assignment: every value that is stored (a staged input, a kernel's output) is a
 * buffer live from the step that writes it to the last step that reads it (through
 * views), and all of them are placed in ONE arena by the shared planner and checked by
 * its verifier. Weights and constants are used in place; RESHAPE is a view. Finally
 * every step is bound to its pointers: a generated kernel gets its argument array, a
 * library call its tensors. The 2 or 3 ATTENTION_GRAD nodes of one attention (fuse.c) are
 * one step at the first of them: a bound call of the fused attention backward writing
 * every gradient into its own buffer, each buffer live from that step to its last reader.
 *
 * execute: inputs copied into their arena slots, the steps run in order (one indirect
 * call each, nothing allocated, nothing looked up), outputs copied out.
 *
 * On cuda the same plan runs on the device: the generated kernels are CUDA C built by
 * NVRTC for the device's architecture (cubin.c) and loaded as one module; constants are
 * copied to the device once, at compile, into one block, and PARAMs are the backend's
 * shared device blocks (resident.h: one upload for every program that binds the same
 * host memory, an update by one seen by the others: a step with updates ends
 * synchronised); the arena is
 * device memory; a step is a launch on the kernels context's stream (generated kernels
 * through the module, the rest through the shared kernels), so the schedule runs in
 * order with no host synchronisation until the outputs are copied back. Updated params
 * live on the device; sync copies them back into the host's memory. Passes still fold
 * constants on a cpu context (folded data is host memory, uploaded with the weights).
 *
 * Updates (training state): a value that overwrites a PARAM is computed straight into
 * the param's memory when every other reader of the param runs at an earlier step and
 * the value's own step reads it index for index (a library ADAMW_STEP, or an elementwise
 * kernel whose iteration space is the param's shape); otherwise it has its own buffer and
 * is copied into the param after the last step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <dlfcn.h>
#include "attn_group.h"
#include "io.h"
#include "mem.h"
#include "options.h"
#include "stats.h"
#include "jax_internal.h"
#include "resident.h"
#include "trident/kernels_cuda.h"

static const char *nname(const struct tr_jax_program *p, int id) {
    const char *s = p->pir.nodes[id].name;
    return s ? s : "";
}

const char *tr_jax_op_str(int op) {
    return op == JAX_OP_MATMUL_EPI ? "matmul+epilogue"
           : op == JAX_OP_ADAMW    ? "adamw_update"
           : op == JAX_OP_ADAMW_OUT ? "adamw_update output"
                                   : tr_op_name(op);
}

/* ---- compile ---- */

static int check_leaves(struct tr_jax_program *p, struct tr_error *err) {
    for (int id = 0; id < p->pir.n; id++) {
        const struct tr_pir_node *n = &p->pir.nodes[id];
        char sh[128];
        if (tr_dtype_size((enum tr_dtype)n->dtype) == 0)
            return tr_error_set(err, TR_ERR_INVALID, "jax: node %d %s '%s': unknown dtype %d", id, tr_jax_op_str(n->op),
                                nname(p, id), n->dtype);
        if ((n->op == TR_OP_PARAM || n->op == TR_OP_CONST) && !n->data && tr_pir_nbytes(n) > 0)
            return tr_error_set(err, TR_ERR_INVALID,
                                "jax: node %d %s '%s' %s%s has no data (bind it with tr_graph_bind_param or "
                                "load weights before compile)",
                                id, tr_op_name(n->op), nname(p, id), tr_dtype_name((enum tr_dtype)n->dtype),
                                tr_shape_str(n->ndim, n->shape, sh, sizeof sh));
        if (n->op == TR_OP_PARAM) p->weight_bytes += tr_pir_nbytes(n);
    }
    return TR_OK;
}

/* One step per stored value that a kernel writes. */
static int make_schedule(struct tr_jax_program *p, int *step_of, struct tr_error *err) {
    const struct tr_pir *g = &p->pir;
    p->steps = calloc((size_t)g->n + 1, sizeof *p->steps);
    if (!p->steps) return tr_error_set(err, TR_ERR_NOMEM, "jax: out of memory for the schedule");
    int n_pairs = 0, n_adamw = 0;
    for (int id = 0; id < g->n; id++) {
        const struct tr_pir_node *n = &g->nodes[id];
        step_of[id] = -1;
        p->root_of[id] = id;
        int ci = p->fusion.cluster_of[id];
        if (n->op == TR_OP_INPUT || n->op == TR_OP_PARAM || n->op == TR_OP_CONST) continue;
        if (n->op == TR_OP_RESHAPE) {
            if (n->n_in != 1 || tr_pir_nbytes(&g->nodes[n->in[0]]) != tr_pir_nbytes(n))
                return tr_error_set(err, TR_ERR_SHAPE, "jax: node %d reshape '%s': %zu bytes from %zu bytes", id,
                                    nname(p, id), tr_pir_nbytes(n),
                                    n->n_in == 1 ? tr_pir_nbytes(&g->nodes[n->in[0]]) : (size_t)0);
            p->root_of[id] = p->root_of[n->in[0]];
            continue;
        }
        if (ci >= 0 && p->fusion.clusters[ci].root != id) continue; /* computed inside its kernel */
        int ai = p->fusion.attn_of ? p->fusion.attn_of[id] : -1, pair = p->fusion.lse_of ? p->fusion.lse_of[id] : -1;
        if (pair >= 0 && pair < id) { /* an ATTENTION_(REL_)LSE: written by its forward's call, at its step */
            step_of[id] = step_of[pair];
            continue;
        }
        if (n->op == JAX_OP_ADAMW_OUT) { /* written by its ADAMW's call, at its step */
            step_of[id] = step_of[n->in[0]];
            continue;
        }
        if (ai >= 0 && p->fusion.attn[ai].lead != id) {
            /* written by its group's call, at the lead's step: every operand is older than
             * the lead (the same operands), every reader younger than this node */
            step_of[id] = step_of[p->fusion.attn[ai].lead];
            continue;
        }
        struct jax_step *s = &p->steps[p->n_steps];
        s->node = id;
        s->cluster = ci;
        s->attn = ai;
        s->op = n->op;
        s->attrs = n->attrs;
        if (ci >= 0) s->kind = JAX_STEP_GEN;
        else if (ai >= 0) s->kind = JAX_STEP_ATTN_BWD;
        else if (pair >= 0) s->kind = JAX_STEP_ATTN_LSE, s->attn = p->fusion.n_attn + n_pairs++;
        else if (n->op == JAX_OP_ADAMW)
            s->kind = JAX_STEP_ADAMW, s->attn = p->fusion.n_attn + p->fusion.n_lse + n_adamw++;
        else s->kind = n->op == JAX_OP_MATMUL_EPI ? JAX_STEP_MATMUL : JAX_STEP_LIB;
        if (s->kind == JAX_STEP_GEN) p->n_gen++;
        else p->n_lib++;
        if (n->op >= TR_OP_COUNT && n->op != JAX_OP_MATMUL_EPI && n->op != JAX_OP_ADAMW)
            return tr_error_set(err, TR_ERR_INTERNAL, "jax: node %d '%s' has private op %d", id, nname(p, id), n->op);
        step_of[id] = ++p->n_steps; /* step 0 stages the inputs */
    }
    return TR_OK;
}

void tr_jax_read_nodes(const struct tr_jax_program *p, const struct jax_step *s, int *ids, int *n) {
    *n = 0;
    if (s->kind == JAX_STEP_GEN) {
        const struct jax_cluster *cl = &p->fusion.clusters[s->cluster];
        for (int i = 0; i < cl->n_args - 1; i++) ids[(*n)++] = cl->args[i];
    } else {
        const struct tr_pir_node *n0 = &p->pir.nodes[s->node];
        for (int i = 0; i < n0->n_in; i++) ids[(*n)++] = n0->in[i];
    }
}

/* The step that computes node id (a cluster member: its cluster's), or -1. */
static int step_of_node(const struct tr_jax_program *p, const int *step_of, int id) {
    int ci = p->fusion.cluster_of[id];
    return ci >= 0 ? step_of[p->fusion.clusters[ci].root] : step_of[id];
}

/* Donation of update u (see the top of the file). */
static int donatable(const struct tr_jax_program *p, const int *step_of, int u) {
    const struct tr_pir *g = &p->pir;
    int pa = g->update_param[u], v = tr_pir_update_value(g, u);
    int sv = step_of[v];
    if (sv < 0 || g->nodes[v].dtype != g->nodes[pa].dtype || !tr_pir_same_shape(&g->nodes[v], &g->nodes[pa])) return 0;
    for (int i = 0; i < g->n_outputs; i++)
        if ((g->outputs[i] == v && i != g->n_results + u) || p->root_of[g->outputs[i]] == pa) return 0;
    int ci = p->fusion.cluster_of[v];
    for (int r = pa + 1; r < g->n; r++) {
        const struct tr_pir_node *d = &g->nodes[r];
        if (d->dead || d->op == TR_OP_RESHAPE) continue; /* a view's readers are checked through root_of */
        for (int j = 0; j < d->n_in; j++) {
            if (p->root_of[d->in[j]] != pa) continue;
            int sr = step_of_node(p, step_of, r);
            if (sr < sv) continue;
            if (d->op == JAX_OP_ADAMW) { /* its own operand j, updated in place: v is its value j */
                const struct tr_pir_node *vn = &g->nodes[v];
                const int writer = vn->op == JAX_OP_ADAMW_OUT ? vn->in[0] : v;
                if (sr > sv || writer != r || d->in[j] != pa || j >= 3 || vn->attrs.ints[0] != j) return 0;
                continue;
            }
            if (sr > sv || d->in[j] != pa || !tr_pir_reads_in_place(d, j)) return 0;
            if (ci >= 0 ? p->fusion.clusters[ci].kind != JAX_K_EW : r != v) return 0;
        }
    }
    return 1;
}

/* Which updates are computed in their param's memory; their kernels are told (in_place),
 * so must be decided before codegen. */
static int plan_donation(struct tr_jax_program *p, const int *step_of, struct tr_error *err) {
    const struct tr_pir *g = &p->pir;
    p->donor = malloc(((size_t)g->n + 1) * sizeof *p->donor);
    p->donated = calloc((size_t)g->n_updates + 1, 1);
    if (!p->donor || !p->donated) return tr_error_set(err, TR_ERR_NOMEM, "jax: out of memory planning updates");
    for (int id = 0; id < g->n; id++) p->donor[id] = -1;
    for (int u = 0; u < g->n_updates; u++)
        if (donatable(p, step_of, u)) {
            int v = tr_pir_update_value(g, u), ci = p->fusion.cluster_of[v];
            p->donated[u] = 1;
            p->n_donated++;
            p->donor[v] = g->update_param[u];
            if (ci >= 0) p->fusion.clusters[ci].in_place = 1;
        }
    return TR_OK;
}

/* cuda: each PARAM bound to the backend's shared block of its host memory (uploaded by
 * the first program that needs it); every CONST (folded ones are this program's host
 * memory) copied into one block of its own. */
static int upload_leaves(struct tr_jax_program *p, struct tr_error *err) {
    int rc = tr_resident_upload_leaves(&p->ctx->params, p->ctx->device_type, p->ctx->device_index, "jax", p->k,
                                       &p->pir, JAX_ALIGN, p->ptr, &p->shared, &p->weights, err);
    if (rc != TR_OK) return rc;
    return tr_kernels_alloc(p->k, JAX_ALIGN, (void **)&p->bad, err) != TR_OK ||
                   tr_kernels_to_device(p->k, p->bad, &(int){0}, sizeof(int), err) != TR_OK
               ? tr_error_prefix(err, "jax: the gathers' flag")
               : TR_OK;
}

/* Buffers, live ranges, the arena. */
static int plan_memory(struct tr_jax_program *p, const int *step_of, struct tr_error *err) {
    const struct tr_pir *g = &p->pir;
    p->bufs = calloc((size_t)g->n + 1, sizeof *p->bufs);
    if (!p->bufs) return tr_error_set(err, TR_ERR_NOMEM, "jax: out of memory planning buffers");
    for (int id = 0; id < g->n; id++) {
        p->buf_of[id] = -1;
        int first = g->nodes[id].op == TR_OP_INPUT ? 0 : step_of[id];
        if (first < 0 || p->donor[id] >= 0) continue;
        p->buf_of[id] = p->n_bufs;
        p->bufs[p->n_bufs++] = (struct tr_plan_buf){.size = (int64_t)tr_pir_nbytes(&g->nodes[id]), .first = first,
                                                    .last = first};
    }
    int ids[TR_PIR_MAX_IN * 8 + 64];
    for (int si = 0; si < p->n_steps; si++) {
        const struct jax_step *s = &p->steps[si];
        int n = 0;
        if (s->kind == JAX_STEP_GEN && p->fusion.clusters[s->cluster].n_args > (int)(sizeof ids / sizeof ids[0]))
            return tr_error_set(err, TR_ERR_UNSUPPORTED, "jax: kernel %d has %d operands", s->cluster,
                                p->fusion.clusters[s->cluster].n_args);
        tr_jax_read_nodes(p, s, ids, &n);
        for (int i = 0; i < n; i++) {
            int b = p->buf_of[p->root_of[ids[i]]];
            if (b >= 0 && p->bufs[b].last < si + 1) p->bufs[b].last = si + 1;
        }
    }
    for (int i = 0; i < g->n_outputs; i++) {
        int b = p->buf_of[p->root_of[g->outputs[i]]];
        if (b >= 0) p->bufs[b].last = p->n_steps + 1; /* copied out after the last step */
    }
    int rc = tr_plan_assign(p->bufs, p->n_bufs, JAX_ALIGN, &p->arena_bytes, err);
    if (rc == TR_OK) rc = tr_plan_verify(p->bufs, p->n_bufs, p->arena_bytes, err);
    if (rc != TR_OK) return tr_error_prefix(err, "jax: buffer assignment");
    size_t bytes = p->arena_bytes > 0 ? (size_t)p->arena_bytes : JAX_ALIGN;
    if ((rc = tr_kernels_alloc(p->k, bytes, &p->arena, err)) != TR_OK)
        return tr_error_prefix(err, "jax: the arena of %zu bytes", bytes);
    if (p->cuda && (rc = upload_leaves(p, err)) != TR_OK) return rc;
    for (int id = 0; id < g->n; id++) {
        const struct tr_pir_node *n = &g->nodes[id];
        if (n->op == TR_OP_PARAM || n->op == TR_OP_CONST) {
            if (!p->cuda) p->ptr[id] = (void *)n->data;
        } else if (p->donor[id] >= 0) p->ptr[id] = p->ptr[p->donor[id]];
        else if (p->buf_of[id] >= 0) p->ptr[id] = (char *)p->arena + p->bufs[p->buf_of[id]].offset;
        else if (n->op == TR_OP_RESHAPE) p->ptr[id] = p->ptr[n->in[0]];
        else p->ptr[id] = NULL; /* lives in a kernel's registers */
    }
    return TR_OK;
}

static int tensor_of(const struct tr_jax_program *p, int id, struct tr_tensor *t, struct tr_error *err) {
    const struct tr_pir_node *n = &p->pir.nodes[id];
    int rc = tr_tensor_make(t, p->ptr[id], (enum tr_dtype)n->dtype, n->ndim, n->shape, err);
    if (rc != TR_OK) return tr_error_prefix(err, "jax: node %d %s '%s'", id, tr_jax_op_str(n->op), nname(p, id));
    t->device = p->cuda ? TR_DEVICE_CUDA : TR_DEVICE_CPU;
    t->device_index = p->cuda ? p->ctx->device_index : 0;
    return TR_OK;
}

/* The group's gradients in their planned buffers (a donated one: its param's memory), all
 * checked once by the library's binder. */
static int bind_attn_bwd(struct tr_jax_program *p, struct jax_step *s, struct tr_error *err) {
    const struct jax_attn_bwd *a = &p->fusion.attn[s->attn];
    struct tr_tensor g[5];
    const struct tr_tensor *gp[5] = {NULL, NULL, NULL, NULL, NULL};
    for (int w = 0; w < 5; w++) {
        if (a->grad[w] < 0) continue;
        int rc = tensor_of(p, a->grad[w], &g[w], err);
        if (rc != TR_OK) return rc;
        gp[w] = &g[w];
    }
    s->call = &p->calls[s->attn];
    int rc = tr_attn_backward(p->k, a->rel, s->n_in, s->in, s->attrs.floats[0], (int)s->attrs.ints[0],
                              (int)s->attrs.ints[1], gp, s->call, err);
    if (rc != TR_OK)
        return tr_error_prefix(err, "jax: node %d %s '%s' (the fused backward of %d gradients)", a->lead,
                               a->rel ? "attention_rel_grad" : "attention_grad", nname(p, a->lead), a->n_grads);
    return TR_OK;
}

/* An ADAMW and its two ADAMW_OUT nodes: param', m' and v' in their places (a donated one:
 * its param's memory), one bound tr_k_adamw_update. */
static int bind_adamw(struct tr_jax_program *p, struct jax_step *s, struct tr_error *err) {
    const struct tr_pir *g = &p->pir;
    struct tr_tensor t[3];
    int have = 0, rc;
    for (int id = s->node; id < g->n; id++) {
        const struct tr_pir_node *n = &g->nodes[id];
        if (id != s->node && (n->op != JAX_OP_ADAMW_OUT || n->in[0] != s->node)) continue;
        const int w = (int)n->attrs.ints[0];
        if ((rc = tensor_of(p, id, &t[w], err)) != TR_OK) return rc;
        have |= 1 << w;
    }
    if (have != 7) return tr_error_set(err, TR_ERR_INTERNAL, "jax: node %d adamw_update without its three outputs",
                                       s->node);
    s->call = &p->calls[s->attn];
    const float *f = s->attrs.floats;
    rc = tr_kernels_bind_adamw_update(p->k, &s->in[0], &s->in[1], &s->in[2], &s->in[3], &s->in[4], &s->in[5], f[0],
                                      f[1], f[2], f[3], &t[0], &t[1], &t[2], s->call, err);
    if (rc != TR_OK) return tr_error_prefix(err, "jax: node %d adamw_update '%s'", s->node, nname(p, s->node));
    return TR_OK;
}

/* An ATTENTION and its ATTENTION_LSE (fusion.lse_of), or an ATTENTION_REL and its
 * ATTENTION_REL_LSE, in one bound call. */
static int bind_attn_lse(struct tr_jax_program *p, struct jax_step *s, struct tr_error *err) {
    struct tr_tensor lse;
    int rc = tensor_of(p, p->fusion.lse_of[s->node], &lse, err);
    if (rc != TR_OK) return rc;
    s->call = &p->calls[s->attn];
    const int rel = p->pir.nodes[s->node].op == TR_OP_ATTENTION_REL;
    rc = tr_attn_forward_lse(p->k, rel, s->n_in, s->in, &s->attrs, &s->out, &lse, s->call, err);
    if (rc != TR_OK)
        return tr_error_prefix(err, "jax: node %d %s '%s' (with its lse)", s->node, rel ? "attention_rel" : "attention",
                               nname(p, s->node));
    return TR_OK;
}

static int bind_steps(struct tr_jax_program *p, struct tr_error *err) {
    size_t total = 0;
    for (int ci = 0; ci < p->fusion.n_clusters; ci++) total += (size_t)p->fusion.clusters[ci].n_args;
    if (p->cuda) total += (size_t)p->fusion.n_clusters; /* the flag after out */
    p->argv = calloc(total + 1, sizeof *p->argv);
    if (p->cuda) p->cu_params = calloc(total + 1, sizeof *p->cu_params);
    p->calls = calloc((size_t)(p->fusion.n_attn + p->fusion.n_lse + p->fusion.n_adamw) + 1, sizeof *p->calls);
    if (!p->argv || (p->cuda && !p->cu_params) || !p->calls)
        return tr_error_set(err, TR_ERR_NOMEM, "jax: out of memory binding the kernels");
    size_t at = 0;
    for (int si = 0; si < p->n_steps; si++) {
        struct jax_step *s = &p->steps[si];
        const struct tr_pir_node *n = &p->pir.nodes[s->node];
        int rc;
        if (s->kind == JAX_STEP_GEN) {
            const struct jax_cluster *cl = &p->fusion.clusters[s->cluster];
            char sym[32];
            snprintf(sym, sizeof sym, "trj_k%d", cl->fn);
            if (p->cuda) {
                if ((rc = tr_cuda_module_kernel(p->mod, sym, &s->cu_fn, err)) != TR_OK)
                    return tr_error_prefix(err, "jax: kernel %d (node %d '%s')", s->cluster, s->node, nname(p, s->node));
                s->args = &p->argv[at];
                s->cu_params = &p->cu_params[at];
                for (int i = 0; i < cl->n_args; i++) s->args[i] = p->ptr[cl->args[i]];
                s->args[cl->n_args] = p->bad;
                for (int i = 0; i <= cl->n_args; i++) s->cu_params[i] = &s->args[i];
                at += (size_t)cl->n_args + 1;
                continue;
            }
            void *fn = dlsym(p->build.so, sym);
            if (!fn)
                return tr_error_set(err, TR_ERR_INTERNAL, "jax: %s has no kernel %s", p->build.path, sym);
            memcpy(&s->fn, &fn, sizeof fn); /* an object pointer to a function pointer, as POSIX allows */
            s->args = &p->argv[at];
            for (int i = 0; i < cl->n_args; i++) s->args[i] = p->ptr[cl->args[i]];
            at += (size_t)cl->n_args;
            continue;
        }
        s->n_in = n->n_in;
        for (int i = 0; i < n->n_in; i++)
            if ((rc = tensor_of(p, n->in[i], &s->in[i], err)) != TR_OK) return rc;
        if ((rc = tensor_of(p, s->node, &s->out, err)) != TR_OK) return rc;
        if (s->kind == JAX_STEP_ATTN_BWD && (rc = bind_attn_bwd(p, s, err)) != TR_OK) return rc;
        if (s->kind == JAX_STEP_ATTN_LSE && (rc = bind_attn_lse(p, s, err)) != TR_OK) return rc;
        if (s->kind == JAX_STEP_ADAMW && (rc = bind_adamw(p, s, err)) != TR_OK) return rc;
    }
    return TR_OK;
}

static int build_kernels(struct tr_jax_program *p, struct tr_error *err) {
    if (p->fusion.n_clusters == 0) return TR_OK;
    if (!p->cuda) {
        int rc = jax_codegen(&p->pir, &p->fusion, &p->source, &p->source_len, err);
        if (rc == TR_OK) rc = jax_build(p->ctx, p->source, p->source_len, &p->build, err);
        return rc;
    }
    int rc = jax_codegen_cuda(&p->pir, &p->fusion, &p->source, &p->source_len, err);
    if (rc == TR_OK && (rc = tr_kernels_cuda_sm(p->k, &p->sm, err)) != TR_OK) tr_error_prefix(err, "jax");
    if (rc == TR_OK) rc = jax_cu_build(p->ctx, p->source, p->source_len, p->sm, &p->cubin, err);
    if (rc == TR_OK && (rc = tr_cuda_module_load(p->k, p->cubin.data, p->cubin.size, p->cubin.path, &p->mod, err)))
        tr_error_prefix(err, "jax");
    return rc;
}

/* What codegen needs (jax_internal.h). */
int tr_jax_front(struct tr_jax_program *p, tr_graph_t g, struct tr_kernels *kpasses, int **step_of,
                 struct tr_error *err) {
    struct tr_jax_context *ctx = p->ctx;
    int rc;
    if (ctx->mode == 0 && !ctx->fuse) /* one [backend.jax] section for every jax entry */
        return tr_error_set(err, TR_ERR_INVALID, "jax: the entry asks for mode fused, and [backend.jax] fuse = false "
                            "turns fusion off; write jax:unfused, or leave fuse out");
    if ((rc = tr_pir_read("jax", ctx->host, g, &p->pir, err)) != TR_OK) return rc;
    if ((rc = check_leaves(p, err)) != TR_OK) return rc;
    if ((rc = tr_pass_all(&p->pir, kpasses, &p->passes, err)) != TR_OK)
        return tr_error_prefix(err, "jax: simplification");
    if ((rc = jax_fuse_for(&p->pir, jax_ctx_fuses(ctx), p->cuda ? JAX_CU_MAX_ROW : 0, &p->fusion, err)) != TR_OK)
        return rc;
    if (jax_ctx_fuses(ctx) && ctx->attn_bwd && (rc = jax_group_attention_backward(&p->pir, &p->fusion, err)) != TR_OK)
        return rc;
    size_t n = (size_t)p->pir.n + 1;
    *step_of = malloc(n * sizeof **step_of);
    p->buf_of = malloc(n * sizeof *p->buf_of);
    p->root_of = malloc(n * sizeof *p->root_of);
    p->ptr = calloc(n, sizeof *p->ptr);
    if (!*step_of || !p->buf_of || !p->root_of || !p->ptr)
        return tr_error_set(err, TR_ERR_NOMEM, "jax: out of memory for %d nodes", p->pir.n);
    if ((rc = make_schedule(p, *step_of, err)) != TR_OK) return rc;
    return plan_donation(p, *step_of, err);
}

int tr_jax_compile(struct tr_jax_context *ctx, tr_graph_t g, struct tr_jax_program **out, struct tr_error *err) {
    *out = NULL;
    if (!g) return tr_error_set(err, TR_ERR_INVALID, "jax: compile without a graph");
    double t0 = jax_now_ms();
    struct tr_jax_program *p = calloc(1, sizeof *p);
    if (!p) return tr_error_set(err, TR_ERR_NOMEM, "jax: out of memory for a program");
    p->ctx = ctx;
    p->cuda = ctx->device_type == TR_DEVICE_CUDA;
    int *step_of = NULL, rc;
    struct tr_kernels *kcpu = NULL;
    if ((rc = tr_backend_kernels_open("jax", ctx->device_type, ctx->device_index, ctx->math, &p->k, err)) != TR_OK)
        goto fail;
    if (p->cuda && (rc = tr_kernels_init(&kcpu, TR_DEVICE_CPU, 0, err)) != TR_OK) {
        tr_error_prefix(err, "jax: the cpu context for constant folding");
        goto fail;
    }
    rc = tr_jax_front(p, g, p->cuda ? kcpu : p->k, &step_of, err);
    tr_kernels_free(kcpu);
    if (rc != TR_OK || (rc = build_kernels(p, err)) != TR_OK || (rc = plan_memory(p, step_of, err)) != TR_OK ||
        (rc = bind_steps(p, err)) != TR_OK)
        goto fail;
    free(step_of);
    p->compile_ms = jax_now_ms() - t0;
    ctx->host->log(TR_LOG_DEBUG, "jax: %d nodes -> %d generated kernels (%s) + %d library calls, arena %lld bytes, %.0f ms",
                   p->pir.n, p->n_gen, (p->cuda ? p->cubin.cache_hit : p->build.cache_hit) ? "cache hit" : "compiled",
                   p->n_lib, (long long)p->arena_bytes, p->compile_ms);
    *out = p;
    return TR_OK;
fail:
    free(step_of);
    tr_jax_program_free(p);
    return rc;
}

int tr_jax_cuda_source(struct tr_jax_context *ctx, tr_graph_t g, char **src, size_t *len, int *n_kernels,
                       struct tr_error *err) {
    *src = NULL;
    *len = 0;
    if (n_kernels) *n_kernels = 0;
    if (!g) return tr_error_set(err, TR_ERR_INVALID, "jax: cuda source without a graph");
    struct tr_jax_program *p = calloc(1, sizeof *p);
    if (!p) return tr_error_set(err, TR_ERR_NOMEM, "jax: out of memory for a program");
    p->ctx = ctx;
    p->cuda = 1;
    int *step_of = NULL, rc;
    struct tr_kernels *kcpu = NULL;
    if ((rc = tr_kernels_init(&kcpu, TR_DEVICE_CPU, 0, err)) != TR_OK) {
        tr_error_prefix(err, "jax: the cpu context for constant folding");
    } else {
        rc = tr_jax_front(p, g, kcpu, &step_of, err);
        if (rc == TR_OK && p->fusion.n_clusters > 0) rc = jax_codegen_cuda(&p->pir, &p->fusion, src, len, err);
        if (rc == TR_OK && n_kernels) *n_kernels = p->fusion.n_clusters;
    }
    tr_kernels_free(kcpu);
    free(step_of);
    tr_jax_program_free(p);
    return rc;
}

void tr_jax_program_free(struct tr_jax_program *p) {
    if (!p) return;
    if (p->cuda && p->k) {
        struct tr_error ignored;
        (void)tr_kernels_sync(p->k, &ignored); /* nothing queued may still use the module or the memory */
    }
    for (int id = 0; p->shared && id < p->pir.n; id++)
        if (p->shared[id]) tr_resident_store_release(&p->ctx->params, p->pir.nodes[id].data, p->shared[id] == 2);
    free(p->shared);
    tr_cuda_module_free(p->mod);
    jax_cubin_free(&p->cubin);
    if (p->bad) tr_kernels_dealloc(p->k, p->bad);
    if (p->weights) tr_kernels_dealloc(p->k, p->weights);
    if (p->arena) tr_kernels_dealloc(p->k, p->arena);
    for (int i = 0; p->calls && i < p->fusion.n_attn + p->fusion.n_lse + p->fusion.n_adamw; i++)
        if (p->calls[i].fn) tr_kernels_unbind(p->k, &p->calls[i]);
    free(p->calls);
    if (p->k) tr_kernels_free(p->k);
    free(p->cu_params);
    jax_build_close(&p->build);
    jax_fusion_free(&p->fusion);
    tr_pir_free(&p->pir);
    TR_FREE_EACH(p->source, p->steps, p->argv, p->bufs, p->donor, p->donated, p->buf_of, p->root_of, p->ptr, p);
}

/* ---- execute ---- */

/* A gather found an id outside its table: name the first one (the slow path). */
static int bad_id(const struct tr_jax_program *p, const struct jax_step *s, struct tr_error *err) {
    const struct jax_cluster *cl = &p->fusion.clusters[s->cluster];
    for (int k = 0; k < cl->n_members; k++) {
        const struct tr_pir_node *n = &p->pir.nodes[cl->members[k]];
        if (n->op != TR_OP_EMBEDDING) continue;
        const struct tr_pir_node *ids = &p->pir.nodes[n->in[1]];
        int64_t V = p->pir.nodes[n->in[0]].shape[0], cnt = tr_pir_numel(ids);
        const void *d = p->ptr[n->in[1]];
        void *host = NULL;
        if (p->cuda) { /* the slow path: the ids brought back to look at them */
            size_t nb = tr_pir_nbytes(ids);
            if (!(host = malloc(nb ? nb : 1)) || tr_kernels_to_host(p->k, host, d, nb, err) != TR_OK) {
                free(host);
                return tr_error_set(err, TR_ERR_INVALID, "jax: kernel %d (node %d '%s'): an embedding id is outside its "
                                    "table (and the ids could not be read back)", s->cluster, s->node, nname(p, s->node));
            }
            d = host;
        }
        for (int64_t i = 0; i < cnt; i++) {
            int64_t id = ids->dtype == TR_DTYPE_I64 ? ((const int64_t *)d)[i] : ((const int32_t *)d)[i];
            if (id < 0 || id >= V) {
                free(host);
                return tr_error_set(err, TR_ERR_INVALID,
                                    "jax: kernel %d, node %d embedding '%s': ids[%lld] = %lld is outside [0, %lld)",
                                    s->cluster, cl->members[k], nname(p, cl->members[k]), (long long)i, (long long)id,
                                    (long long)V);
            }
        }
        free(host);
    }
    return tr_error_set(err, TR_ERR_INVALID, "jax: kernel %d (node %d '%s'): an embedding id is outside its table",
                        s->cluster, s->node, nname(p, s->node));
}

static int run_step(struct tr_jax_program *p, const struct jax_step *s, struct tr_error *err) {
    int rc;
    switch (s->kind) {
    case JAX_STEP_GEN:
        if (p->cuda) {
            const struct jax_cluster *cl = &p->fusion.clusters[s->cluster];
            char name[32];
            snprintf(name, sizeof name, "trj_k%d", cl->fn);
            const unsigned grid[3] = {cl->cu_grid, 1, 1}, block[3] = {cl->cu_block, 1, 1};
            rc = tr_cuda_module_launch(p->k, p->mod, s->cu_fn, name, grid, block, cl->cu_shmem, s->cu_params, err);
            if (rc != TR_OK)
                return tr_error_prefix(err, "jax: kernel %d (node %d '%s')", s->cluster, s->node, nname(p, s->node));
            return TR_OK;
        }
        rc = s->fn(s->args);
        if (rc == 0) return TR_OK;
        if (rc & 2)
            return tr_error_set(err, TR_ERR_NOMEM, "jax: kernel %d (node %d '%s'): no memory for a row buffer",
                                s->cluster, s->node, nname(p, s->node));
        return bad_id(p, s, err);
    case JAX_STEP_ATTN_BWD: case JAX_STEP_ATTN_LSE: case JAX_STEP_ADAMW:
        rc = tr_kernels_call(p->k, s->call, err);
        break;
    case JAX_STEP_MATMUL:
        rc = tr_k_matmul(p->k, &s->in[0], &s->in[1], (struct tr_tensor *)&s->out, (int)s->attrs.ints[0],
                         (int)s->attrs.ints[1], s->attrs.floats[0], s->n_in > 2 ? &s->in[2] : NULL,
                         (enum tr_act)s->attrs.ints[2], err);
        break;
    default:
        rc = tr_kernels_run(p->k, s->op, &s->attrs, s->n_in, s->in, (struct tr_tensor *)&s->out, err);
        break;
    }
    if (rc != TR_OK)
        return tr_error_prefix(err, "jax: node %d %s%s '%s'", s->node, tr_jax_op_str(s->op),
                               s->kind == JAX_STEP_ATTN_BWD ? " (with the rest of its attention backward)" : "",
                               nname(p, s->node));
    return TR_OK;
}

/* The gathers' flag read back (the first host synchronisation of the step): an id out of
 * range is named by looking at every gather's ids. */
static int check_bad(struct tr_jax_program *p, struct tr_error *err) {
    int bad = 0, rc = tr_kernels_to_host(p->k, &bad, p->bad, sizeof bad, err);
    if (rc != TR_OK) return tr_error_prefix(err, "jax: after the step");
    if (!bad) return TR_OK;
    (void)tr_kernels_to_device(p->k, p->bad, &(int){0}, sizeof(int), NULL); /* reported once */
    for (int si = 0; si < p->n_steps; si++) {
        const struct jax_step *s = &p->steps[si];
        if (s->kind != JAX_STEP_GEN) continue;
        const struct jax_cluster *cl = &p->fusion.clusters[s->cluster];
        for (int k = 0; k < cl->n_members; k++)
            if (p->pir.nodes[cl->members[k]].op == TR_OP_EMBEDDING) {
                struct tr_error e = {0};
                if (bad_id(p, s, &e) != TR_OK && strstr(e.msg, " is outside [0, ")) {
                    if (err) *err = e;
                    return e.status;
                }
                break;
            }
    }
    return tr_error_set(err, TR_ERR_INVALID, "jax: an embedding id is outside its table (kernel unknown)");
}

/* execute on cuda: the inputs' copies, the launches and the library calls are queued on
 * the context's stream in order; the host first waits when it reads the flag. */
static int execute_cuda(struct tr_jax_program *p, const struct tr_tensor *inputs, struct tr_tensor *outputs,
                        struct tr_error *err) {
    const struct tr_pir *g = &p->pir;
    int rc;
    for (int i = 0; i < g->n_inputs; i++) {
        size_t nb = tr_pir_nbytes(&g->nodes[g->inputs[i]]);
        if (nb && (rc = tr_kernels_to_device(p->k, p->ptr[g->inputs[i]], inputs[i].data, nb, err)) != TR_OK)
            return tr_error_prefix(err, "jax: input %d ('%s')", i, nname(p, g->inputs[i]));
    }
    for (int si = 0; si < p->n_steps; si++) {
        p->kernel_calls++;
        if ((rc = run_step(p, &p->steps[si], err)) != TR_OK) return rc;
    }
    if ((rc = check_bad(p, err)) != TR_OK) return rc;
    /* outputs before updates, as on the cpu: an output that is a param has its old value */
    for (int i = 0; i < g->n_results; i++) {
        int id = g->outputs[i];
        size_t nb = tr_pir_nbytes(&g->nodes[id]);
        if (nb && (rc = tr_kernels_to_host(p->k, outputs[i].data, p->ptr[id], nb, err)) != TR_OK)
            return tr_error_prefix(err, "jax: output %d ('%s')", i, nname(p, id));
    }
    for (int u = 0; u < g->n_updates; u++) { /* queued: the next step's kernels come after them */
        if (p->donated[u]) continue;
        int pa = g->update_param[u];
        size_t nb = tr_pir_nbytes(&g->nodes[pa]);
        if (nb && (rc = tr_kernels_copy(p->k, p->ptr[pa], p->ptr[tr_pir_update_value(g, u)], nb, err)) != TR_OK)
            return tr_error_prefix(err, "jax: update %d ('%s')", u, nname(p, pa));
    }
    /* the params are shared: another program of the backend, on its own stream, reads
     * them next, so the copies are done when the step returns */
    if (g->n_updates > p->n_donated && (rc = tr_kernels_sync(p->k, err)) != TR_OK)
        return tr_error_prefix(err, "jax: the updates' copies");
    return TR_OK;
}

int tr_jax_sync(struct tr_jax_program *p, struct tr_error *err) {
    if (!p || !p->cuda) return TR_OK; /* on the cpu the params are computed in place */
    const struct tr_pir *g = &p->pir;
    /* Every param of this program that some program of the backend updates: the shared
     * device memory is the truth, whichever program wrote it last. */
    for (int pa = 0; p->shared && pa < g->n; pa++) {
        const struct tr_pir_node *n = &g->nodes[pa];
        int rc;
        if (!p->shared[pa] || !tr_resident_store_written(p->ctx->params, n->data)) continue;
        if ((rc = tr_kernels_to_host(p->k, (void *)n->data, p->ptr[pa], tr_pir_nbytes(n), err)) != TR_OK)
            return tr_error_prefix(err, "jax: sync of param %d ('%s')", pa, nname(p, pa));
    }
    return TR_OK;
}

int tr_jax_execute(struct tr_jax_program *p, int n_inputs, const struct tr_tensor *inputs, int n_outputs,
                   struct tr_tensor *outputs, struct tr_error *err) {
    const struct tr_pir *g = &p->pir;
    int rc = tr_io_check_pir("jax", g, n_inputs, inputs, n_outputs, outputs, err);
    if (rc != TR_OK) return rc;
    p->kernel_calls = 0;
    if (p->cuda) return execute_cuda(p, inputs, outputs, err);
    for (int i = 0; i < n_inputs; i++) {
        size_t nb = tr_pir_nbytes(&g->nodes[g->inputs[i]]);
        if (nb) memcpy(p->ptr[g->inputs[i]], inputs[i].data, nb);
    }
    for (int si = 0; si < p->n_steps; si++) {
        p->kernel_calls++;
        if ((rc = run_step(p, &p->steps[si], err)) != TR_OK) return rc;
    }
    for (int i = 0; i < n_outputs; i++) {
        int id = g->outputs[i];
        size_t nb = tr_pir_nbytes(&g->nodes[id]);
        if (nb) memcpy(outputs[i].data, p->ptr[id], nb);
    }
    for (int u = 0; u < g->n_updates; u++) {
        if (p->donated[u]) continue;
        int pa = g->update_param[u];
        size_t nb = tr_pir_nbytes(&g->nodes[pa]);
        if (nb) memcpy(p->ptr[pa], p->ptr[tr_pir_update_value(g, u)], nb);
    }
    return TR_OK;
}

void tr_jax_program_stats(const struct tr_jax_program *p, struct tr_backend_stats *st) {
    char arena[32], weights[32], kernels[128];
    st->kernel_calls = p->kernel_calls;
    st->arena_bytes = (uint64_t)p->arena_bytes;
    st->peak_bytes = p->weight_bytes + (uint64_t)p->arena_bytes;
    /* unfused (jax:unfused, fuse = false), each generated kernel is one op */
    const char *what = jax_ctx_fuses(p->ctx) ? "fused kernels" : "kernels of one op each (unfused)";
    if (p->fusion.n_clusters == 0) snprintf(kernels, sizeof kernels, "no generated kernels");
    else if (p->cuda)
        snprintf(kernels, sizeof kernels, "%d %s generated as %d CUDA functions (sm_%d, %s), nvrtc %.0f ms",
                 p->fusion.n_clusters, what, p->fusion.n_functions, p->sm, p->cubin.cache_hit ? "cache hit" : "compiled",
                 p->cubin.nvrtc_ms);
    else
        snprintf(kernels, sizeof kernels, "%d %s generated as %d functions (%s), cc %.0f ms", p->fusion.n_clusters,
                 what, p->fusion.n_functions, p->build.cache_hit ? "cache hit" : "compiled", p->build.cc_ms);
    snprintf(st->notes, sizeof st->notes,
             "passes: cse %d, dce %d, folded %d, simplified %d; %d gemm epilogues; %s; compile %.0f ms; "
             "%d library calls; arena %s, verified; weights %s %s",
             p->passes.cse_merged, p->passes.dce_removed, p->passes.folded, p->passes.simplified,
             p->fusion.n_epilogues, kernels, p->compile_ms, p->n_lib, tr_human_bytes((uint64_t)p->arena_bytes, arena, sizeof arena),
             tr_human_bytes(p->weight_bytes, weights, sizeof weights),
             p->cuda ? "on the device, shared by the backend's programs" : "in place");
    size_t k = strlen(st->notes);
    if (p->fusion.n_norm_silu && k < sizeof st->notes)
        snprintf(st->notes + k, sizeof st->notes - k, "; group_norm+silu x%d", p->fusion.n_norm_silu);
    k = strlen(st->notes);
    if (p->fusion.n_attn && k < sizeof st->notes) {
        int partial = 0, rel = 0;
        for (int i = 0; i < p->fusion.n_attn; i++) {
            const struct jax_attn_bwd *a = &p->fusion.attn[i];
            rel += a->rel;
            partial += !a->rel && a->n_grads < 3;
        }
        snprintf(st->notes + k, sizeof st->notes - k, "; fused attention_backward x%d", p->fusion.n_attn);
        k = strlen(st->notes);
        if (rel && k < sizeof st->notes)
            snprintf(st->notes + k, sizeof st->notes - k, " (%d of attention_rel)", rel);
        k = strlen(st->notes);
        if (partial && k < sizeof st->notes)
            snprintf(st->notes + k, sizeof st->notes - k, " (%d with 2 of 3 gradients)", partial);
    }
    k = strlen(st->notes);
    if (p->fusion.n_adamw && k < sizeof st->notes)
        snprintf(st->notes + k, sizeof st->notes - k, "; adamw x%d (one call per parameter)", p->fusion.n_adamw);
    k = strlen(st->notes);
    if (p->fusion.n_lse && k < sizeof st->notes)
        snprintf(st->notes + k, sizeof st->notes - k, "; attention with its lse x%d", p->fusion.n_lse);
    k = strlen(st->notes);
    if (p->pir.n_updates && k < sizeof st->notes)
        snprintf(st->notes + k, sizeof st->notes - k, "; %d of %d updates in place", p->n_donated, p->pir.n_updates);
    k = strlen(st->notes);
    if (p->ctx->math != TR_MATH_DEFAULT && k < sizeof st->notes)
        snprintf(st->notes + k, sizeof st->notes - k, "; math %s", tr_math_name((enum tr_math)p->ctx->math));
}
