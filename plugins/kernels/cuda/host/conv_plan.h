/* The host-side choices of the CUDA convolution (cuda/conv.c), in plain C so that they are
 * unit-tested without a GPU (tests/test_cuda_plan_conv.c):
 *
 * - which path runs a CONV2D or one of its gradients: cuDNN where the library was built
 *   with it (TR_HAVE_CUDNN), else im2col into cuBLASLt GEMMs. TRIDENT_CUDA_CONV=auto (the
 *   default) | cudnn (cuDNN required: a library built without it refuses to start a cuda
 *   context) | im2col (never cuDNN; what a GPU run compares cuDNN against). Even under
 *   cudnn, a convolution cuDNN cannot take goes through im2col: padding wider at the end
 *   (the VAE's down-sampling conv pads only right and bottom; cuDNN pads both sides
 *   alike) and a tensor of 2^31 elements or more (cuDNN's 4-D descriptors take ints).
 * - which of cuDNN's algorithms, from its heuristic's list (best first): the first that
 *   runs, is deterministic (a fit reruns to the same losses, as every other kernel here),
 *   uses no TF32 where the math is strict f32, and needs at most max_workspace bytes; if
 *   none is deterministic, the first that satisfies the rest. None, or cuDNN refusing the
 *   problem outright (BAD_PARAM, NOT_SUPPORTED): im2col for that shape, said once.
 *
 * Counted per process (tr_cuda_conv_route_counts) so that a test or the GPU script sees
 * which path ran. */
#ifndef TRIDENT_CUDA_CONV_PLAN_H
#define TRIDENT_CUDA_CONV_PLAN_H

#include <stddef.h>
#include <stdint.h>
#include "trident/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

enum tr_cuda_conv_mode { TR_CUDA_CONV_AUTO = 0, TR_CUDA_CONV_CUDNN, TR_CUDA_CONV_IM2COL };

/* value: TRIDENT_CUDA_CONV's (NULL or "" is auto). built_with_cudnn: TR_HAVE_CUDNN. A
 * value that is no mode, or cudnn in a library built without it, is the error. */
int tr_cuda_conv_mode_parse(const char *value, int built_with_cudnn, enum tr_cuda_conv_mode *mode,
                            struct tr_error *err);
/* 1 where the library was built with cuDNN (TR_HAVE_CUDNN). */
int tr_cuda_conv_cudnn_built(void);
/* The mode the process runs (TRIDENT_CUDA_CONV, read once); tr_cuda_conv_force sets it for
 * tests and returns the previous one. */
enum tr_cuda_conv_mode tr_cuda_conv_mode_get(void);
enum tr_cuda_conv_mode tr_cuda_conv_force(enum tr_cuda_conv_mode mode);

/* A convolution's geometry as cuda/conv.c checked it: x (N,H,W,Ci) NHWC, w (Co,Ci,KH,KW),
 * y (N,OH,OW,Co); padding p on both sides plus pe more at the end, stride s, dilation dil. */
struct tr_cuda_conv_shape {
    int64_t N, H, W, Ci, Co, KH, KW, OH, OW, s, p, pe, dil;
};

/* 1: cuDNN takes it (mode not im2col, cuDNN built, the shape within its descriptors); 0:
 * im2col, with *why saying why (a static string). */
int tr_cuda_conv_use_cudnn(enum tr_cuda_conv_mode mode, int built_with_cudnn, const struct tr_cuda_conv_shape *s,
                           const char **why);

/* One entry of cuDNN's heuristic answer, as conv.c reads cudnnConvolution*AlgoPerf_t. */
struct tr_cuda_conv_algo {
    int runs;          /* status CUDNN_STATUS_SUCCESS */
    int deterministic; /* CUDNN_DETERMINISTIC */
    int tensor_math;   /* its math type may use tensor cores (TF32 on f32 data) */
    size_t workspace;
};
/* The index of the algorithm to run, or -1 for none. strict_f32: f32 data under strict
 * f32 math (no TF32). */
int tr_cuda_conv_pick(const struct tr_cuda_conv_algo *a, int n, int strict_f32, size_t max_workspace);

/* Calls run (not bound) since the process started, by path. */
struct tr_cuda_conv_route_counts {
    uint64_t cudnn, im2col;
};
void tr_cuda_conv_route_counts(struct tr_cuda_conv_route_counts *out);
void tr_cuda_conv_route_note(int cudnn);

#ifdef __cplusplus
}
#endif
#endif
