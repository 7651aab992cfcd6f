/* The cpu's instruction-set level, fixed once per process.
 *
 * What the cpu runs comes from cpuid (GCC's __builtin_cpu_supports, the same test its
 * target_clones resolvers make); TRIDENT_CPU_ISA may lower it. The level picks which
 * compiled copy of every hot loop runs (TR_CPU_MULTI in cpu_internal.h) and caps
 * oneDNN's ISA to match, so that a forced level is what a cpu of that level runs. Whether
 * oneDNN then multiplies bf16 itself is asked of oneDNN (a probe primitive): Debian's
 * oneDNN 2.6 has bf16 GEMMs from AVX-512 up, none on AVX2. Below AVX512_BF16 its bf16
 * GEMM is emulated and slow (1024^3 on an AVX-512 Xeon without it: 36.6 ms, against 7.9
 * ms for the same product converted to f32 and back), so there a bf16 GEMM counts as not
 * native and converts (matmul.c, conv.c), except a product that uses each weight a few
 * times only (a decode step's), which oneDNN's emulation still runs faster than a
 * conversion of the whole weight (matmul.c). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <oneapi/dnnl/dnnl.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif
#include "cpu_internal.h"

int tr_cpu_isa_level = TR_CPU_ISA_BASELINE;
int tr_cpu_bf16_gemm_native = 0;
int tr_cpu_f32_gemm = TR_CPU_F32_GEMM_AUTO;
int tr_cpu_bf16_gemm_emulated = 0;

static pthread_once_t isa_once = PTHREAD_ONCE_INIT;
static struct tr_cpu_info isa_info;
static struct tr_error isa_err; /* the reason the level could not be fixed, if any */

const char *tr_cpu_isa_name(enum tr_cpu_isa isa) {
    switch (isa) {
    case TR_CPU_ISA_BASELINE: return "baseline";
    case TR_CPU_ISA_AVX2: return "avx2";
    case TR_CPU_ISA_AVX512: return "avx512";
    default: return "?";
    }
}

/* x86-64-v4's AVX-512 subset and x86-64-v3's AVX2 set: the -march levels the copies of
 * the hot loops are compiled for, so a level is only chosen where its copy can run. */
static enum tr_cpu_isa native_level(struct tr_cpu_info *info) {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    info->avx512_bf16 = __builtin_cpu_supports("avx512bf16") != 0;
    unsigned a, b, c, d;
    info->amx = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d & (1u << 22)) != 0; /* AMX-BF16 */
    int v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi") &&
             __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("movbe");
    int v4 = v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512cd");
    return v4 ? TR_CPU_ISA_AVX512 : v3 ? TR_CPU_ISA_AVX2 : TR_CPU_ISA_BASELINE;
#else
    (void)info;
    return TR_CPU_ISA_BASELINE;
#endif
}

static void cpu_model(char *buf, size_t n) {
    snprintf(buf, n, "unknown");
#if defined(__x86_64__) && defined(__GNUC__)
    unsigned r[12];
    if (__get_cpuid_max(0x80000000u, NULL) < 0x80000004u) return;
    for (unsigned i = 0; i < 3; i++) __get_cpuid(0x80000002u + i, &r[4 * i], &r[4 * i + 1], &r[4 * i + 2], &r[4 * i + 3]);
    char s[49];
    memcpy(s, r, 48);
    s[48] = 0;
    const char *p = s;
    while (*p == ' ') p++;
    size_t len = strlen(p);
    while (len > 0 && p[len - 1] == ' ') len--;
    if (len) snprintf(buf, n, "%.*s", (int)len, p);
#endif
}

static const char *onednn_isa_name(dnnl_cpu_isa_t isa) {
    switch ((int)isa) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    case dnnl_cpu_isa_all: return "all";
    default: return "other";
    }
}

/* Whether oneDNN has a bf16 matmul at its current ISA that is not a reference loop. */
static int probe_bf16_gemm(void) {
    dnnl_engine_t eng = NULL;
    if (dnnl_engine_create(&eng, dnnl_cpu, 0) != dnnl_success) return 0;
    dnnl_memory_desc_t a, b, c;
    dnnl_dims_t d = {64, 64};
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd = NULL;
    int native = 0;
    if (dnnl_memory_desc_init_by_tag(&a, 2, d, dnnl_bf16, dnnl_ab) == dnnl_success &&
        dnnl_memory_desc_init_by_tag(&b, 2, d, dnnl_bf16, dnnl_ab) == dnnl_success &&
        dnnl_memory_desc_init_by_tag(&c, 2, d, dnnl_bf16, dnnl_ab) == dnnl_success &&
        dnnl_matmul_desc_init(&md, &a, &b, NULL, &c) == dnnl_success &&
        dnnl_primitive_desc_create(&pd, &md, NULL, eng, NULL) == dnnl_success) {
        const char *impl = "";
        dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
        native = strncmp(impl, "ref", 3) != 0;
        dnnl_primitive_desc_destroy(pd);
    }
    dnnl_engine_destroy(eng);
    return native;
}

static void isa_init(void) {
    struct tr_cpu_info *info = &isa_info;
    memset(info, 0, sizeof *info);
    cpu_model(info->model, sizeof info->model);
    info->native = native_level(info);
    info->isa = info->native;
    const char *gemm = getenv("TRIDENT_F32_GEMM");
    if (gemm && strcmp(gemm, "jit") == 0) tr_cpu_f32_gemm = TR_CPU_F32_GEMM_JIT;
    else if (gemm && strcmp(gemm, "first") == 0) tr_cpu_f32_gemm = TR_CPU_F32_GEMM_FIRST;
    else if (gemm && *gemm && strcmp(gemm, "auto") != 0) {
        tr_error_set(&isa_err, TR_ERR_INVALID,
                     "kernels: TRIDENT_F32_GEMM=%s is not a choice: expected auto (matmul.c's rules), jit (oneDNN's "
                     "jit sgemm for every f32 product) or first (oneDNN's first choice)",
                     gemm);
        return;
    }
    const char *env = getenv("TRIDENT_CPU_ISA");
    if (env && *env && strcasecmp(env, "native") != 0) {
        enum tr_cpu_isa want = TR_CPU_ISA_COUNT;
        for (int i = 0; i < TR_CPU_ISA_COUNT; i++)
            if (strcasecmp(env, tr_cpu_isa_name((enum tr_cpu_isa)i)) == 0) want = (enum tr_cpu_isa)i;
        if (want == TR_CPU_ISA_COUNT) {
            tr_error_set(&isa_err, TR_ERR_INVALID,
                         "kernels: TRIDENT_CPU_ISA=%s is not a level: expected native, avx512, avx2 or baseline", env);
            return;
        }
        if (want > info->native) {
            tr_error_set(&isa_err, TR_ERR_UNSUPPORTED,
                         "kernels: TRIDENT_CPU_ISA=%s is above what this cpu (%s) runs: its highest level is %s", env,
                         info->model, tr_cpu_isa_name(info->native));
            return;
        }
        info->isa = want;
        info->forced = 1;
    }
    if (info->forced) {
        /* AVX-512 forced on an AMX machine keeps AVX512_BF16 and drops AMX tiles. */
        static const dnnl_cpu_isa_t cap[TR_CPU_ISA_COUNT] = {dnnl_cpu_isa_sse41, dnnl_cpu_isa_avx2,
                                                            dnnl_cpu_isa_avx512_core_bf16};
        dnnl_status_t s = dnnl_set_max_cpu_isa(cap[info->isa]);
        if (s != dnnl_success) {
            tr_error_set(&isa_err, TR_ERR_INTERNAL,
                         "kernels: oneDNN refused the ISA cap %s for TRIDENT_CPU_ISA=%s (status %d): oneDNN was used "
                         "before the kernels library fixed its level",
                         onednn_isa_name(cap[info->isa]), env, (int)s);
            return;
        }
    }
    snprintf(info->onednn_isa, sizeof info->onednn_isa, "%s", onednn_isa_name(dnnl_get_effective_cpu_isa()));
    const int has_bf16_gemm = probe_bf16_gemm();
#if defined(__x86_64__)
    /* AMX's tiles make oneDNN's bf16 GEMM the fastest; AVX512_BF16's dot products alone do
     * not: on a Xeon with AVX512_BF16 and no AMX a 1024^3 bf16 product took 16 ms against 8
     * in f32 (PyTorch's alike), and BERT small's bf16 predict ran 1.1-1.3x faster converted
     * (docs/perf.md). Converted, the products are the same bf16 values' in f32. */
    info->bf16_native = info->amx && !info->forced && has_bf16_gemm; /* a forced level caps oneDNN below AMX */
#else
    info->bf16_native = has_bf16_gemm;
#endif
    const char *bf16 = getenv("TRIDENT_BF16_GEMM");
    int all_f32 = 0; /* f32 asked for: even a decode step's few rows (matmul.c's reuse rule) */
    if (bf16 && strcmp(bf16, "f32") == 0) info->bf16_native = 0, all_f32 = 1;
    else if (bf16 && strcmp(bf16, "native") == 0) info->bf16_native = has_bf16_gemm;
    else if (bf16 && *bf16 && strcmp(bf16, "auto") != 0) {
        tr_error_set(&isa_err, TR_ERR_INVALID,
                     "kernels: TRIDENT_BF16_GEMM=%s is not a choice: expected auto (oneDNN's bf16 GEMM where the cpu "
                     "has AMX), native (oneDNN's bf16 GEMM wherever it has one) or f32 (every bf16 product converted "
                     "to f32)", bf16);
        return;
    }
    tr_cpu_bf16_gemm_native = info->bf16_native;
    tr_cpu_bf16_gemm_emulated = has_bf16_gemm && !info->bf16_native && !all_f32;
    tr_cpu_isa_level = info->isa;
}

int tr_cpu_isa_fix(struct tr_error *err) {
    pthread_once(&isa_once, isa_init);
    if (isa_err.status) {
        if (err) *err = isa_err;
        return isa_err.status;
    }
    return TR_OK;
}

int tr_kernels_cpu_info(struct tr_cpu_info *out, struct tr_error *err) {
    if (!out) return tr_error_set(err, TR_ERR_INVALID, "tr_kernels_cpu_info: out is NULL");
    int rc = tr_cpu_isa_fix(err);
    if (rc) return rc;
    *out = isa_info;
#ifdef _OPENMP
    out->threads = omp_get_max_threads();
#else
    out->threads = 1;
#endif
    return TR_OK;
}
