/* Grouping the gradients of one attention (attn_group.h). */
#include "attn_group.h"

int tr_attn_grad_groupable(const struct tr_pir_node *n) {
    int dt = n->dtype;
    return !n->dead && n->op == TR_OP_ATTENTION_GRAD && (n->n_in == 4 || n->n_in == 5) && n->attrs.ints[2] >= 0 &&
           n->attrs.ints[2] <= 2 && (dt == TR_DTYPE_F32 || dt == TR_DTYPE_BF16 || dt == TR_DTYPE_F16);
}

static int same_attention(const struct tr_pir_node *a, const struct tr_pir_node *b) {
    if (a->n_in != b->n_in || a->dtype != b->dtype || a->attrs.floats[0] != b->attrs.floats[0] ||
        a->attrs.ints[0] != b->attrs.ints[0] || a->attrs.ints[1] != b->attrs.ints[1] ||
        a->attrs.ints[2] == b->attrs.ints[2])
        return 0;
    for (int i = 0; i < a->n_in; i++)
        if (a->in[i] != b->in[i]) return 0;
    return 1;
}

int tr_attn_grad_group(const struct tr_pir *p, int lead, const int *taken, int grad[3]) {
    grad[0] = grad[1] = grad[2] = -1;
    const struct tr_pir_node *x = &p->nodes[lead];
    if ((taken && taken[lead] >= 0) || !tr_attn_grad_groupable(x)) return 0;
    int n = 1;
    grad[x->attrs.ints[2]] = lead;
    for (int j = lead + 1; j < p->n && n < 3; j++) {
        const struct tr_pir_node *y = &p->nodes[j];
        if ((taken && taken[j] >= 0) || !tr_attn_grad_groupable(y) || !same_attention(x, y) ||
            grad[y->attrs.ints[2]] >= 0)
            continue;
        grad[y->attrs.ints[2]] = j;
        n++;
    }
    return n;
}
