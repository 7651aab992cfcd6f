/* Grouping the gradients of one attention (attn_group.h). */
#include "attn_group.h"

int tr_attn_grad_which(const struct tr_pir_node *n) {
    int dt = n->dtype;
    if (n->dead || !(dt == TR_DTYPE_F32 || dt == TR_DTYPE_BF16 || dt == TR_DTYPE_F16)) return -1;
    int64_t w = -1;
    if (n->op == TR_OP_ATTENTION_GRAD && n->n_in >= 4 && n->n_in <= 7 && n->attrs.ints[2] <= 2)
        w = n->attrs.ints[2];
    else if (n->op == TR_OP_ATTENTION_REL_GRAD && (n->n_in == 6 || n->n_in == 8) && n->attrs.ints[0] <= 4)
        w = n->attrs.ints[0];
    return w >= 0 ? (int)w : -1;
}

/* The same attention: op, operands, dtype, scale, and ATTENTION_GRAD's causal and window. */
static int same_attention(const struct tr_pir_node *a, const struct tr_pir_node *b) {
    if (a->op != b->op || a->n_in != b->n_in || a->dtype != b->dtype || a->attrs.floats[0] != b->attrs.floats[0])
        return 0;
    if (a->op == TR_OP_ATTENTION_GRAD && (a->attrs.ints[0] != b->attrs.ints[0] || a->attrs.ints[1] != b->attrs.ints[1]))
        return 0;
    for (int i = 0; i < a->n_in; i++)
        if (a->in[i] != b->in[i]) return 0;
    return 1;
}

int tr_attn_grad_group(const struct tr_pir *p, int lead, const int *taken, int grad[TR_ATTN_GRADS]) {
    for (int w = 0; w < TR_ATTN_GRADS; w++) grad[w] = -1;
    const struct tr_pir_node *x = &p->nodes[lead];
    int wx = tr_attn_grad_which(x);
    if ((taken && taken[lead] >= 0) || wx < 0) return 0;
    const int most = x->op == TR_OP_ATTENTION_REL_GRAD ? 5 : 3;
    int n = 1;
    grad[wx] = lead;
    for (int j = lead + 1; j < p->n && n < most; j++) {
        const struct tr_pir_node *y = &p->nodes[j];
        int wy = tr_attn_grad_which(y);
        if ((taken && taken[j] >= 0) || wy < 0 || !same_attention(x, y) || grad[wy] >= 0) continue;
        grad[wy] = j;
        n++;
    }
    return n;
}

int tr_attn_lse_partner(const struct tr_pir *p, int attn) {
    const struct tr_pir_node *x = &p->nodes[attn];
    const int dt = x->dtype, rel = x->op == TR_OP_ATTENTION_REL;
    if ((x->op != TR_OP_ATTENTION && !rel) || x->dead ||
        !(dt == TR_DTYPE_F32 || dt == TR_DTYPE_BF16 || dt == TR_DTYPE_F16))
        return -1;
    const int want = rel ? TR_OP_ATTENTION_REL_LSE : TR_OP_ATTENTION_LSE;
    for (int j = attn + 1; j < p->n; j++) {
        const struct tr_pir_node *y = &p->nodes[j];
        if (y->op != want || y->dead || y->n_in != x->n_in || y->attrs.floats[0] != x->attrs.floats[0] ||
            (!rel && (y->attrs.ints[0] != x->attrs.ints[0] || y->attrs.ints[1] != x->attrs.ints[1])))
            continue;
        int same = 1;
        for (int i = 0; same && i < x->n_in; i++) same = y->in[i] == x->in[i];
        if (same) return j;
    }
    return -1;
}

int tr_attn_forward_lse(struct tr_kernels *k, int rel, int n_in, const struct tr_tensor *in,
                        const struct tr_attrs *attrs, const struct tr_tensor *out, const struct tr_tensor *lse,
                        struct tr_kernel_call *call, struct tr_error *err) {
    const float scale = attrs->floats[0];
    if (rel) {
        if (n_in != 5) return tr_error_set(err, TR_ERR_INVALID, "attention_rel: %d inputs, 5 expected", n_in);
        if (call) return tr_kernels_bind_attention_rel_lse(k, in, scale, out, lse, call, err);
        struct tr_tensor o = *out, l = *lse;
        return tr_k_attention_rel_lse(k, in, scale, &o, &l, err);
    }
    const struct tr_tensor *mask = n_in == 4 ? &in[3] : NULL;
    const int causal = (int)attrs->ints[0], window = (int)attrs->ints[1];
    if (call)
        return tr_kernels_bind_attention_lse(k, &in[0], &in[1], &in[2], mask, scale, causal, window, out, lse, call,
                                             err);
    struct tr_tensor o = *out, l = *lse;
    return tr_k_attention_lse(k, &in[0], &in[1], &in[2], mask, scale, causal, window, &o, &l, err);
}

int tr_attn_backward_of(struct tr_kernels *k, const struct tr_pir_node *d, const struct tr_tensor *in,
                        const struct tr_tensor *const grads[TR_ATTN_GRADS], struct tr_kernel_call *call,
                        struct tr_error *err) {
    const int rel = d->op == TR_OP_ATTENTION_REL_GRAD; /* whose ints[0] is `which`, not causal */
    return tr_attn_backward(k, rel, d->n_in, in, d->attrs.floats[0], rel ? 0 : (int)d->attrs.ints[0],
                            rel ? 0 : (int)d->attrs.ints[1], grads, call, err);
}

int tr_attn_backward(struct tr_kernels *k, int rel, int n_in, const struct tr_tensor *in, float scale, int causal,
                     int window, const struct tr_tensor *const grads[TR_ATTN_GRADS], struct tr_kernel_call *call,
                     struct tr_error *err) {
    if (rel) {
        const struct tr_tensor *y = n_in == 8 ? &in[6] : NULL, *lse = n_in == 8 ? &in[7] : NULL;
        if (call) return tr_kernels_bind_attention_rel_backward(k, in, y, lse, scale, grads, call, err);
        struct tr_tensor g[TR_ATTN_GRADS], *gp[TR_ATTN_GRADS];
        for (int w = 0; w < TR_ATTN_GRADS; w++) gp[w] = grads[w] ? (g[w] = *grads[w], &g[w]) : NULL;
        return tr_k_attention_rel_backward(k, in, y, lse, scale, gp, err);
    }
    const struct tr_tensor *mask = n_in == 5 || n_in == 7 ? &in[4] : NULL;
    const struct tr_tensor *y = n_in >= 6 ? &in[n_in - 2] : NULL, *lse = n_in >= 6 ? &in[n_in - 1] : NULL;
    if (call)
        return tr_kernels_bind_attention_backward(k, &in[0], &in[1], &in[2], &in[3], mask, y, lse, scale, causal,
                                                  window, grads[0], grads[1], grads[2], call, err);
    struct tr_tensor g[3], *gp[3];
    for (int w = 0; w < 3; w++) gp[w] = grads[w] ? (g[w] = *grads[w], &g[w]) : NULL;
    return tr_k_attention_backward(k, &in[0], &in[1], &in[2], &in[3], mask, y, lse, scale, causal, window, gp[0],
                                   gp[1], gp[2], err);
}
