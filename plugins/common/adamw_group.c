/* Matching AdamW's update of one parameter (adamw_group.h). */
#include <string.h>
#include "adamw_group.h"

static const struct tr_pir_node *live(const struct tr_pir *p, int id, int op) {
    if (id < 0 || id >= p->n) return NULL;
    const struct tr_pir_node *n = &p->nodes[id];
    return !n->dead && n->op == op ? n : NULL;
}

/* id is SCALE(x, alpha, 0) read by one node and not an output: its x, else -1. */
static int scale_of(const struct tr_pir *p, int id, float alpha, const int *uses) {
    const struct tr_pir_node *n = live(p, id, TR_OP_SCALE);
    if (!n || n->n_in != 1 || uses[id] != 1 || n->attrs.floats[0] != alpha || n->attrs.floats[1] != 0.0f) return -1;
    return n->in[0];
}

/* How many times id is among the outputs (an update's value, a result). */
static int as_output(const struct tr_pir *p, int id) {
    int k = 0;
    for (int i = 0; i < p->n_outputs; i++) k += p->outputs[i] == id;
    return k;
}

static int f32_like(const struct tr_pir *p, int id, const struct tr_pir_node *like) {
    const struct tr_pir_node *n = &p->nodes[id];
    return n->dtype == TR_DTYPE_F32 && tr_pir_same_shape(n, like);
}

/* sum = ADD(SCALE(x, beta), SCALE(y, 1 − beta)) in either order, where want_y is y (or,
 * when want_y < 0, y is a MUL(g, g) read by this group alone, and *g is set): x, else -1.
 * scales[0..1] get the SCALE of x and of y; *mul the MUL. */
static int moment_of(const struct tr_pir *p, int sum, float beta, int want_y, const int *uses, int scales[2],
                     int *mul, int *g) {
    const struct tr_pir_node *a = live(p, sum, TR_OP_ADD);
    if (!a || a->n_in != 2) return -1;
    for (int s = 0; s < 2; s++) {
        int sx = a->in[s], sy = a->in[1 - s];
        int x = scale_of(p, sx, beta, uses), y = scale_of(p, sy, 1.0f - beta, uses);
        if (x < 0 || y < 0) continue;
        if (want_y >= 0) {
            if (y != want_y || x == want_y) continue;
        } else {
            const struct tr_pir_node *mm = live(p, y, TR_OP_MUL);
            if (!mm || mm->n_in != 2 || mm->in[0] != mm->in[1] || uses[y] != 1 || x == mm->in[0]) continue;
            *mul = y;
            *g = mm->in[0];
        }
        scales[0] = sx, scales[1] = sy;
        return x;
    }
    return -1;
}

int tr_adamw_group_at(const struct tr_pir *p, int id, const int *uses, struct tr_adamw_group *g) {
    const struct tr_pir_node *st = live(p, id, TR_OP_ADAMW_STEP);
    if (!st || st->n_in != 5) return 0;
    const struct tr_pir_node *pa = &p->nodes[st->in[0]];
    const float b1 = st->attrs.floats[0], b2 = st->attrs.floats[1];
    struct tr_adamw_group r = {.step = id, .param = st->in[0], .m2 = st->in[1], .v2 = st->in[2], .lr = st->in[3],
                               .t = st->in[4]};
    int g32 = -1, mul = -1, sv[2], sm[2];
    r.v = moment_of(p, r.v2, b2, -1, uses, sv, &mul, &g32);
    if (r.v < 0) return 0;
    r.m = moment_of(p, r.m2, b1, g32, uses, sm, &mul, &g32);
    if (r.m < 0) return 0;
    /* m2 and v2: read by the step alone (once), or also outputs */
    if (r.m2 == r.v2 || uses[r.m2] != 1 + as_output(p, r.m2) || uses[r.v2] != 1 + as_output(p, r.v2)) return 0;
    if (!tr_dtype_is_float((enum tr_dtype)pa->dtype) || st->dtype != pa->dtype || !tr_pir_same_shape(st, pa))
        return 0;
    if (!f32_like(p, r.m, pa) || !f32_like(p, r.v, pa) || !f32_like(p, r.m2, pa) || !f32_like(p, r.v2, pa) ||
        !f32_like(p, g32, pa))
        return 0;
    r.grad = g32;
    int cast = -1;
    const struct tr_pir_node *c = live(p, g32, TR_OP_CAST);
    /* the CAST of the gradient to f32, read by the group alone (its SCALE and the MUL's two edges) */
    if (c && c->n_in == 1 && uses[g32] == 3 && p->nodes[c->in[0]].dtype == pa->dtype && pa->dtype != TR_DTYPE_F32)
        cast = g32, r.grad = c->in[0];
    const int ops[6] = {r.param, r.m, r.v, r.grad, r.lr, r.t};
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < i; j++)
            if (ops[i] == ops[j]) return 0;
    r.inner[0] = sm[0], r.inner[1] = sm[1], r.inner[2] = mul, r.inner[3] = sv[0], r.inner[4] = sv[1];
    r.inner[5] = cast;
    *g = r;
    return 1;
}

int tr_adamw_group_first(const struct tr_adamw_group *g) {
    int at = g->step;
    if (g->m2 < at) at = g->m2;
    if (g->v2 < at) at = g->v2;
    const int ops[6] = {g->param, g->m, g->v, g->grad, g->lr, g->t};
    for (int i = 0; i < 6; i++)
        if (ops[i] >= at) return -1;
    return at;
}

void tr_adamw_group_rewrite(struct tr_pir *p, const struct tr_adamw_group *g, int op_call, int op_out) {
    const int at = tr_adamw_group_first(g), made[3] = {g->step, g->m2, g->v2};
    const int ops[6] = {g->param, g->m, g->v, g->grad, g->lr, g->t};
    struct tr_attrs a;
    memset(&a, 0, sizeof a);
    for (int k = 0; k < 4; k++) a.floats[k] = p->nodes[g->step].attrs.floats[k];
    for (int i = 0; i < TR_ADAMW_INNER; i++)
        if (g->inner[i] >= 0) p->nodes[g->inner[i]].dead = 1;
    for (int w = 0; w < 3; w++) {
        struct tr_pir_node *x = &p->nodes[made[w]];
        x->attrs = a;
        x->attrs.ints[0] = w;
        memset(x->in, 0, sizeof x->in);
        x->op = made[w] == at ? op_call : op_out;
        x->n_in = made[w] == at ? 6 : 1;
        if (made[w] == at) memcpy(x->in, ops, sizeof ops);
        else x->in[0] = at;
    }
}

int tr_adamw_group_nodes(const struct tr_adamw_group *g, int *ids) {
    int n = 0;
    for (int i = 0; i < TR_ADAMW_INNER; i++)
        if (g->inner[i] >= 0) ids[n++] = g->inner[i];
    ids[n++] = g->m2;
    ids[n++] = g->v2;
    ids[n++] = g->step;
    return n;
}
