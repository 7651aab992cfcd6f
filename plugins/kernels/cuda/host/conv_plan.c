/* The CUDA convolution's path and cuDNN algorithm choice (conv_plan.h). */
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "conv_plan.h"

int tr_cuda_conv_mode_parse(const char *value, int built_with_cudnn, enum tr_cuda_conv_mode *mode,
                            struct tr_error *err) {
    if (!value || !*value || strcmp(value, "auto") == 0) *mode = TR_CUDA_CONV_AUTO;
    else if (strcmp(value, "im2col") == 0) *mode = TR_CUDA_CONV_IM2COL;
    else if (strcmp(value, "cudnn") == 0) *mode = TR_CUDA_CONV_CUDNN;
    else
        return tr_error_set(err, TR_ERR_INVALID,
                            "kernels: TRIDENT_CUDA_CONV=%s is not a choice: expected auto (cuDNN where built with it), "
                            "cudnn (required) or im2col (im2col into cuBLASLt GEMMs)",
                            value);
    if (*mode == TR_CUDA_CONV_CUDNN && !built_with_cudnn)
        return tr_error_set(err, TR_ERR_UNSUPPORTED,
                            "kernels: TRIDENT_CUDA_CONV=cudnn, but this library was built without cuDNN (CMake found no "
                            "cudnn.h and libcudnn beside the CUDA toolkit): rebuild where they are, or use auto or im2col");
    return TR_OK;
}

int tr_cuda_conv_cudnn_built(void) {
#ifdef TR_HAVE_CUDNN
    return 1;
#else
    return 0;
#endif
}

/* -1: not read yet; else the mode. Read on the first ask, so a test's force wins. */
static atomic_int mode_now = -1;

enum tr_cuda_conv_mode tr_cuda_conv_mode_get(void) {
    int m = atomic_load(&mode_now);
    if (m >= 0) return (enum tr_cuda_conv_mode)m;
    enum tr_cuda_conv_mode parsed = TR_CUDA_CONV_AUTO;
    struct tr_error e = {0};
    /* a bad value was refused when a cuda context started (conv.c); here it is auto */
    if (tr_cuda_conv_mode_parse(getenv("TRIDENT_CUDA_CONV"), tr_cuda_conv_cudnn_built(), &parsed, &e))
        parsed = TR_CUDA_CONV_AUTO;
    int expect = -1;
    atomic_compare_exchange_strong(&mode_now, &expect, (int)parsed);
    return (enum tr_cuda_conv_mode)atomic_load(&mode_now);
}

enum tr_cuda_conv_mode tr_cuda_conv_force(enum tr_cuda_conv_mode mode) {
    enum tr_cuda_conv_mode old = tr_cuda_conv_mode_get();
    atomic_store(&mode_now, (int)mode);
    return old;
}

int tr_cuda_conv_use_cudnn(enum tr_cuda_conv_mode mode, int built_with_cudnn, const struct tr_cuda_conv_shape *s,
                           const char **why) {
    *why = NULL;
    if (mode == TR_CUDA_CONV_IM2COL) *why = "TRIDENT_CUDA_CONV=im2col";
    else if (!built_with_cudnn) *why = "built without cuDNN";
    else if (s->pe != 0) *why = "padding wider at the end (cuDNN pads both sides alike)";
    else if (s->N * s->H * s->W * s->Ci > INT_MAX || s->N * s->OH * s->OW * s->Co > INT_MAX ||
             s->Co * s->Ci * s->KH * s->KW > INT_MAX)
        *why = "a tensor of 2^31 elements or more";
    return *why == NULL;
}

int tr_cuda_conv_pick(const struct tr_cuda_conv_algo *a, int n, int strict_f32, size_t max_workspace) {
    int any = -1;
    for (int i = 0; i < n; i++) {
        if (!a[i].runs || (strict_f32 && a[i].tensor_math) || a[i].workspace > max_workspace) continue;
        if (a[i].deterministic) return i;
        if (any < 0) any = i;
    }
    return any;
}

static atomic_ullong n_cudnn, n_im2col;

void tr_cuda_conv_route_counts(struct tr_cuda_conv_route_counts *out) {
    out->cudnn = atomic_load(&n_cudnn);
    out->im2col = atomic_load(&n_im2col);
}

void tr_cuda_conv_route_note(int cudnn) { atomic_fetch_add(cudnn ? &n_cudnn : &n_im2col, 1); }
