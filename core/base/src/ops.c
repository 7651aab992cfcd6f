#include <string.h>
#include "trident/ops.h"

static const struct {
    const char *name;
    int arity;
} ops[TR_OP_COUNT] = {
#define TR_OP_ROW_(name, str, n) [TR_OP_##name] = {str, n},
    TR_OP_LIST(TR_OP_ROW_)
#undef TR_OP_ROW_
};

const char *tr_op_name(int op) { return op >= 0 && op < TR_OP_COUNT ? ops[op].name : "?"; }
int tr_op_arity(int op) { return op >= 0 && op < TR_OP_COUNT ? ops[op].arity : 0; }

int tr_op_from_name(const char *s) {
    for (int i = 0; i < TR_OP_COUNT; i++)
        if (strcmp(s, ops[i].name) == 0) return i;
    return -1;
}

int tr_op_is_training(int op) {
    switch (op) {
    case TR_OP_UNARY_GRAD: case TR_OP_SOFTMAX_GRAD: case TR_OP_LAYER_NORM_GRAD: case TR_OP_LAYER_NORM_GRAD_GAMMA:
    case TR_OP_EMBEDDING_GRAD: case TR_OP_ATTENTION_GRAD: case TR_OP_MAX_GRAD: case TR_OP_SLICE_GRAD:
    case TR_OP_CROSS_ENTROPY_GRAD: case TR_OP_ADAMW_STEP: case TR_OP_RMS_NORM_GRAD: case TR_OP_RMS_NORM_GRAD_W:
    case TR_OP_CONV2D_GRAD_INPUT: case TR_OP_CONV2D_GRAD_WEIGHT: case TR_OP_GROUP_NORM_GRAD:
    case TR_OP_GROUP_NORM_GRAD_GAMMA: case TR_OP_ALLREDUCE: case TR_OP_ALLREDUCE_START:
    case TR_OP_ALLREDUCE_WAIT: case TR_OP_ATTENTION_LSE: case TR_OP_ATTENTION_REL_LSE:
        return 1;
    default:
        return 0;
    }
}

int tr_op_is_elementwise_unary(int op) {
    switch (op) {
    case TR_OP_GELU: case TR_OP_TANH: case TR_OP_RELU: case TR_OP_SILU: case TR_OP_SIGMOID:
    case TR_OP_EXP: case TR_OP_NEG: case TR_OP_SQRT: case TR_OP_RSQRT: case TR_OP_SCALE:
        return 1;
    default:
        return 0;
    }
}

int tr_op_is_elementwise_binary(int op) {
    return op == TR_OP_ADD || op == TR_OP_SUB || op == TR_OP_MUL || op == TR_OP_DIV;
}
