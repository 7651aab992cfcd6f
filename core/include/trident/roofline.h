/* trident — the roofline sheet of a step: what each kernel must cost at best.
 *
 * Each node of a graph that runs a kernel (not a leaf, not a view, not a collective) is
 * one kernel call; calls of one op, dtype, shapes and attributes are grouped (BERT base's
 * 12 layers make 12 calls of each of its kernels). For each group the sheet gives the
 * floating-point operations one call must do (tr_node_flops; attention only over the
 * scores a causal or windowed mask lets it see) and the bytes it must move (its inputs
 * read once and its output written once: the unfused ideal), its floor on a device (the
 * larger of FLOPs at the device's peak for that op's math and bytes at its bandwidth),
 * and the time it is designed to take (the same at the fractions of peak the kernel is
 * built to reach: struct tr_roof_design). Summed over the groups, the step's floor and
 * design. AdamW's update of a parameter (core's eight ops: SCALEs, MUL, ADDs, ADAMW_STEP,
 * a CAST of the gradient) is one call, as every backend makes it (tr_k_adamw_update:
 * param, m, v and the gradient read once, param', m', v' written once). `trident roofline
 * FILE.ini --run` measures each group's kernel beside them.
 *
 * The device's peaks are a preset ("h200", "h100", the published dense figures) or
 * measured on this machine by the caller (tr_roof_device filled by hand: the cpu has no
 * preset).
 */
#ifndef TRIDENT_ROOFLINE_H
#define TRIDENT_ROOFLINE_H

#include "trident/dtype.h"
#include "trident/graph.h"
#include "trident/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tr_roof_device {
    char name[32];
    double tc_tflops;       /* bf16/f16 matrix units (tensor cores; the cpu's bf16 GEMM rate) */
    double tf32_tflops;     /* f32 data in TF32 math (0: as f32) */
    double f32_tflops;      /* f32 math (CUDA cores; the cpu's f32 GEMM rate) */
    double bw_gbs;          /* memory bandwidth, GB/s (10^9 bytes) */
};

/* "h200" (what the benchmark's GPU rows run on), "h100": dense peaks and HBM bandwidth. */
int tr_roof_device_preset(const char *name, struct tr_roof_device *d, struct tr_error *err);
/* The preset for a GPU by its name as CUDA gives it ("NVIDIA H100 80GB HBM3" -> "h100",
 * "NVIDIA H200" -> "h200"): the presets are the SXM parts', so NULL for a PCIe or NVL
 * card (lower clocks; an H100 PCIe's HBM2e, an H100 NVL's 3.9 TB/s) and any other. */
const char *tr_roof_device_for_gpu(const char *gpu_name);

/* The fractions of the device's peaks a kernel is designed to reach (design time =
 * FLOPs / (compute · peak), or bytes / (memory · bandwidth), the larger). */
struct tr_roof_design {
    double compute, memory;
    const char *why;        /* the kernel the fractions are for */
};
struct tr_roof_design tr_roof_design_of(int op, int dtype, enum tr_math math);

struct tr_roof_kernel {
    int op, dtype;
    int node;               /* the group's first node (a call to run with --run) */
    int count;              /* calls a step */
    char what[200];         /* "matmul bf16 [16384,768]·[768,768]" */
    double flops, bytes;    /* one call's */
    double peak_tflops;     /* the compute peak its math runs at */
    double floor_s, design_s;   /* one call's */
    int memory_bound;       /* its floor is the bytes' */
    double measured_s;      /* one call's, < 0: not measured */
    int adamw_grad;         /* a fused AdamW update's gradient node (op ADAMW_STEP), else -1 */
};

struct tr_roof_sheet {
    struct tr_roof_device dev;
    enum tr_math math;
    struct tr_roof_kernel *k;
    int n;
    double flops, bytes, floor_s, design_s; /* the step's: Σ count · each */
};

/* The sheet of g's kernels under math (TR_MATH_DEFAULT: the dtype's own; TF32 puts f32
 * matrix ops on the tf32 peak), groups in the order their first call runs. */
int tr_roof_sheet_build(const struct tr_graph *g, enum tr_math math, const struct tr_roof_device *d,
                        struct tr_roof_sheet *s, struct tr_error *err);
/* The step's measured time (Σ count · measured) over the groups measured; -1 if none. */
double tr_roof_sheet_measured(const struct tr_roof_sheet *s);
void tr_roof_sheet_free(struct tr_roof_sheet *s);

/* The fraction of the (Tq, Tk) scores that query rows see under causal / window
 * (ops.h ATTENTION: positions aligned at the end of the keys), 1 without either. */
double tr_roof_visible_fraction(int64_t Tq, int64_t Tk, int causal, int64_t window);

#ifdef __cplusplus
}
#endif
#endif
