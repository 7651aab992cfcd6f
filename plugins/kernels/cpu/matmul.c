/* GEMM through oneDNN's matmul primitive.
 *
 * c (...,M,N) = act(alpha · op(a) · op(b) + bias). Transposes are strides in the memory
 * descriptors, never copies. Batch axes are simplified before oneDNN sees them: axes of
 * extent 1 in c dropped, neighbours with the same broadcast pattern merged, and a batch
 * that b does not have folded into M when a is not transposed (the linear-layer case:
 * one 2-D GEMM). What remains broadcasts through oneDNN's size-1 batch dims.
 *
 * Primitives are created once per (shapes, strides, dtype, bias, act, alpha) and kept in
 * the context; past MM_CACHE_MAX the least recently used is dropped. A bound call
 * (tr_kernels_bind) gets a primitive of its own instead, made once at bind time with its
 * memory objects already pointing at the call's tensors: the call is then the execute.
 *
 * oneDNN 2.6 applies the output scale after the bias (dst = scale·(acc + bias)), so when
 * both are present the bias handed to it is bias/alpha in f32. oneDNN 2.6 has no f16
 * matmul on the cpu, and no bf16 one below AVX-512 (isa.c asks it): those operands are
 * converted to f32 whole (exactly: both are subsets of f32), multiplied by the f32
 * primitive and the product rounded once to the storage dtype. The rounding points are
 * the native path's (f32 accumulation, bias and activation in f32, one rounding of the
 * result), so the two agree to the f32 GEMM's summation order. Whole-operand conversion
 * was measured against converting b once at bind: see docs/perf.md ("bf16 without
 * native bf16"). */
#include <stdarg.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <oneapi/dnnl/dnnl.h>
#include "cpu_internal.h"

#define MM_CACHE_MAX 256
#define MM_EMULATED_REUSE 32
#define MM_MAX_DIMS TR_MAX_DIMS

struct tr_mm_key {
    int32_t dtype; /* of a, b and c as oneDNN sees them (f32 or bf16) */
    int32_t ndims;
    int64_t a_dims[MM_MAX_DIMS], a_strides[MM_MAX_DIMS];
    int64_t b_dims[MM_MAX_DIMS], b_strides[MM_MAX_DIMS];
    int64_t c_dims[MM_MAX_DIMS];
    int32_t bias_dtype; /* -1: no bias */
    int32_t act;
    float alpha;
    int32_t pad_;
};

struct tr_mm_entry {
    struct tr_mm_key key;
    dnnl_primitive_t prim;
    dnnl_memory_t a, b, c, bias;
    uint64_t used;
};

static void entry_release(struct tr_mm_entry *e) {
    if (e->prim) dnnl_primitive_destroy(e->prim);
    if (e->a) dnnl_memory_destroy(e->a);
    if (e->b) dnnl_memory_destroy(e->b);
    if (e->c) dnnl_memory_destroy(e->c);
    if (e->bias) dnnl_memory_destroy(e->bias);
    memset(e, 0, sizeof *e);
}

void tr_cpu_matmul_cache_free(struct tr_kernels *k) {
    for (int i = 0; i < k->n_mm; i++) entry_release(&k->mm[i]);
    free(k->mm);
    k->mm = NULL;
    k->n_mm = k->cap_mm = 0;
}

static dnnl_data_type_t dnnl_dt(int dt) {
    switch (dt) {
    case TR_DTYPE_F32: return dnnl_f32;
    case TR_DTYPE_BF16: return dnnl_bf16;
    case TR_DTYPE_F16: return dnnl_f16;
    default: return dnnl_data_type_undef;
    }
}

static dnnl_alg_kind_t dnnl_act(enum tr_act act) {
    switch (act) {
    case TR_ACT_GELU: return dnnl_eltwise_gelu_erf;
    case TR_ACT_GELU_TANH: return dnnl_eltwise_gelu_tanh;
    case TR_ACT_RELU: return dnnl_eltwise_relu;
    case TR_ACT_TANH: return dnnl_eltwise_tanh;
    case TR_ACT_SILU: return dnnl_eltwise_swish;
    default: return dnnl_alg_kind_undef;
    }
}

/* Whether an f32 product takes oneDNN's jit sgemm ("gemm:jit") rather than the brgemm it
 * lists first. Fixed rules, not a timing race, so that reruns pick the same kernel and
 * give the same bits (measured one implementation after the other in one process, caches
 * flushed; docs/perf.md, "oneDNN's f32 GEMM for few rows"):
 * - 1-3 rows (a decode step at batch 1), from 2^20 multiply-adds: the jit's matrix-vector
 *   path beat the brgemm 1.15-1.35x on an LM head (Ice Lake); on a layer's 2^16-2^18 the
 *   two were even over a whole step.
 * - Under 2^24 multiply-adds: the brgemm.
 * - 4-511 rows with b transposed (a Linear's weight) or a plain b of K <= 1024: the brgemm
 *   (Ice Lake: a decode step's 4x256 by 256x16384 1.25x, 32 rows 1.74x, 256 rows 1.1-1.7x;
 *   a plain b of K 16384-32000 0.8-1.0x, so there the jit).
 * - 512 rows and more: the jit on an AMX cpu (Sapphire Rapids: 1.1-2.5x at BERT base's
 *   1024x768x768 .. 1024x3072x768, plain and transposed b). Elsewhere the jit only with a
 *   plain b: with b transposed (a Linear's forward) the brgemm ran 1.05-1.3x faster alone
 *   on an Ice Lake, and 1.1-1.8x in BERT small's fit (oneDNN's own times), as fast or
 *   faster on a Zen 4; with a plain b it lost up to 2.4x, and with a transposed a (a
 *   weight's gradient) it was faster alone but 0.86x in the fit.
 * For bf16 the brgemm listed first is the fastest. */
static int want_jit(const struct tr_mm_key *key) {
    const int nd = key->ndims;
    double rows = (double)key->c_dims[nd - 2];
    for (int i = 0; i < nd - 2; i++) rows *= (double)key->c_dims[i];
    const double K = (double)key->a_dims[nd - 1], work = rows * (double)key->c_dims[nd - 1] * K;
    const int b_plain = key->b_strides[nd - 1] == 1 && key->b_dims[nd - 1] > 1;
    if (key->dtype != TR_DTYPE_F32) return 0;
    if (rows < 4.0) return work >= 1048576.0;
    if (work < 16777216.0) return 0;
    if (rows < 512.0) return b_plain && K > 1024.0;
    const dnnl_cpu_isa_t amx = dnnl_cpu_isa_avx512_core_amx;
    return (dnnl_get_effective_cpu_isa() & amx) == amx || b_plain;
}

static dnnl_status_t pick_impl(dnnl_primitive_desc_t *out, const dnnl_matmul_desc_t *md, dnnl_primitive_attr_t attr,
                               dnnl_engine_t eng, const struct tr_mm_key *key) {
    /* TRIDENT_F32_GEMM (isa.c): the rules, or every f32 product on one kernel, to measure
     * the rules again on another cpu (`=jit trident roofline INI --run` beside `=first`) */
    const int jit = key->dtype == TR_DTYPE_F32 && (tr_cpu_f32_gemm == TR_CPU_F32_GEMM_JIT ||
                                                   (tr_cpu_f32_gemm == TR_CPU_F32_GEMM_AUTO && want_jit(key)));
    if (!jit) return dnnl_primitive_desc_create(out, md, attr, eng, NULL);
    dnnl_primitive_desc_iterator_t it = NULL;
    dnnl_status_t st = dnnl_primitive_desc_iterator_create(&it, md, attr, eng, NULL);
    if (st) return st;
    dnnl_primitive_desc_t first = NULL, chosen = NULL;
    do {
        dnnl_primitive_desc_t pd = dnnl_primitive_desc_iterator_fetch(it);
        if (!pd) break;
        const char *impl = "";
        dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
        int is_gemm = strcmp(impl, "gemm:jit") == 0, is_ref = strncmp(impl, "ref", 3) == 0;
        if (!first) {
            first = pd;
            if (is_gemm) break;
            continue;
        }
        if (is_gemm) {
            chosen = pd;
            break;
        }
        dnnl_primitive_desc_destroy(pd);
        if (is_ref) break; /* only reference kernels follow */
    } while (dnnl_primitive_desc_iterator_next(it) == dnnl_success);
    dnnl_primitive_desc_iterator_destroy(it);
    if (!first) return dnnl_unimplemented;
    if (chosen) {
        dnnl_primitive_desc_destroy(first);
        *out = chosen;
    } else {
        *out = first;
    }
    return dnnl_success;
}

static int create_entry(struct tr_kernels *k, const struct tr_mm_key *key, struct tr_mm_entry *e,
                        struct tr_error *err) {
    dnnl_engine_t eng = (dnnl_engine_t)k->engine;
    dnnl_memory_desc_t amd, bmd, cmd, biasmd;
    dnnl_dims_t ad, as, bd, bs, cd, cs, biasd, biass;
    int nd = key->ndims;
    for (int i = 0; i < nd; i++) {
        ad[i] = key->a_dims[i];
        as[i] = key->a_strides[i];
        bd[i] = key->b_dims[i];
        bs[i] = key->b_strides[i];
        cd[i] = key->c_dims[i];
        biasd[i] = i == nd - 1 ? key->c_dims[i] : 1;
    }
    int64_t s = 1;
    for (int i = nd - 1; i >= 0; i--) {
        cs[i] = s;
        s *= cd[i];
        biass[i] = i == nd - 1 ? 1 : biasd[nd - 1];
    }
    dnnl_data_type_t dt = dnnl_dt(key->dtype);
    dnnl_status_t st = dnnl_memory_desc_init_by_strides(&amd, nd, ad, dt, as);
    if (!st) st = dnnl_memory_desc_init_by_strides(&bmd, nd, bd, dt, bs);
    if (!st) st = dnnl_memory_desc_init_by_strides(&cmd, nd, cd, dt, cs);
    if (!st && key->bias_dtype >= 0) st = dnnl_memory_desc_init_by_strides(&biasmd, nd, biasd, dnnl_dt(key->bias_dtype), biass);
    dnnl_matmul_desc_t md;
    if (!st) st = dnnl_matmul_desc_init(&md, &amd, &bmd, key->bias_dtype >= 0 ? &biasmd : NULL, &cmd);
    if (st) return tr_error_set(err, TR_ERR_INTERNAL, "matmul: oneDNN refused the memory descriptors (status %d)", (int)st);

    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t ops = NULL;
    st = dnnl_primitive_attr_create(&attr);
    if (!st && key->alpha != 1.0f) st = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &key->alpha);
    if (!st && key->act != TR_ACT_NONE) {
        st = dnnl_post_ops_create(&ops);
        /* swish's alpha is the sigmoid's argument scale: 1 gives silu. */
        if (!st) st = dnnl_post_ops_append_eltwise(ops, 1.0f, dnnl_act((enum tr_act)key->act),
                                                   key->act == TR_ACT_SILU ? 1.0f : 0.0f, 0.0f);
        if (!st) st = dnnl_primitive_attr_set_post_ops(attr, ops);
    }
    dnnl_primitive_desc_t pd = NULL;
    if (!st) st = pick_impl(&pd, &md, attr, eng, key);
    if (ops) dnnl_post_ops_destroy(ops);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (st) {
        char sa[160], sb[160];
        return tr_error_set(err, TR_ERR_UNSUPPORTED,
                            "matmul: oneDNN has no cpu implementation for %s x %s %s with act %d (status %d)",
                            tr_shape_str(nd, key->a_dims, sa, sizeof sa), tr_shape_str(nd, key->b_dims, sb, sizeof sb),
                            tr_dtype_name((enum tr_dtype)key->dtype), key->act, (int)st);
    }
    memset(e, 0, sizeof *e);
    e->key = *key;
    st = dnnl_primitive_create(&e->prim, pd);
    dnnl_primitive_desc_destroy(pd);
    if (!st) st = dnnl_memory_create(&e->a, &amd, eng, DNNL_MEMORY_NONE);
    if (!st) st = dnnl_memory_create(&e->b, &bmd, eng, DNNL_MEMORY_NONE);
    if (!st) st = dnnl_memory_create(&e->c, &cmd, eng, DNNL_MEMORY_NONE);
    if (!st && key->bias_dtype >= 0) st = dnnl_memory_create(&e->bias, &biasmd, eng, DNNL_MEMORY_NONE);
    if (st) {
        entry_release(e);
        return tr_error_set(err, TR_ERR_DEVICE, "matmul: oneDNN primitive creation failed (status %d)", (int)st);
    }
    return TR_OK;
}

/* The cached primitive for key, created on a miss; NULL with err set on failure. */
static struct tr_mm_entry *lookup(struct tr_kernels *k, const struct tr_mm_key *key, struct tr_error *err) {
    const size_t used_at = offsetof(struct tr_mm_entry, used);
    int hit = tr_cpu_cache_find(k, k->mm, k->n_mm, sizeof *k->mm, used_at, key, sizeof *key, ++k->mm_tick);
    if (hit >= 0) return &k->mm[hit];
    struct tr_mm_entry fresh;
    if (create_entry(k, key, &fresh, err)) return NULL;
    int slot;
    if (k->n_mm < k->cap_mm) {
        slot = k->n_mm++;
    } else if (k->cap_mm < MM_CACHE_MAX) {
        int cap = k->cap_mm ? k->cap_mm * 2 : 16;
        struct tr_mm_entry *p = realloc(k->mm, sizeof *p * (size_t)cap);
        if (!p) {
            entry_release(&fresh);
            tr_error_set(err, TR_ERR_NOMEM, "matmul: cannot grow the primitive cache to %d entries", cap);
            return NULL;
        }
        k->mm = p;
        k->cap_mm = cap;
        slot = k->n_mm++;
    } else { /* full: evict the least recently used */
        slot = tr_cpu_cache_lru(k->mm, k->n_mm, sizeof *k->mm, used_at);
        entry_release(&k->mm[slot]);
    }
    fresh.used = k->mm_tick;
    k->mm[slot] = fresh;
    return &k->mm[slot];
}

/* The GEMM problem after batch simplification: ndims oneDNN dims (batch..., M/K/N). */
struct mm_layout {
    int nb; /* batch axes left */
    int64_t bc[MM_MAX_DIMS], ba[MM_MAX_DIMS], bb[MM_MAX_DIMS]; /* extents in c, a, b */
    int64_t sa[MM_MAX_DIMS], sb[MM_MAX_DIMS];                   /* element strides of a, b */
    int64_t M, N, K;
};

__attribute__((format(printf, 7, 8)))
static int mm_fail(struct tr_error *err, const struct tr_tensor *a, const struct tr_tensor *b, const struct tr_tensor *c,
                   int ta, int tb, const char *fmt, ...) {
    char da[200], db[200], dc[200], why[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return tr_error_set(err, TR_ERR_SHAPE, "matmul: a %s%s, b %s%s, c %s: %s", tr_cpu_desc(a, da, sizeof da),
                        ta ? " (transposed)" : "", tr_cpu_desc(b, db, sizeof db), tb ? " (transposed)" : "",
                        tr_cpu_desc(c, dc, sizeof dc), why);
}

static int mm_shapes(const struct tr_tensor *a, const struct tr_tensor *b, const struct tr_tensor *c, int ta, int tb,
                     struct mm_layout *L, struct tr_error *err) {
#define MM_FAIL(...) mm_fail(err, a, b, c, ta, tb, __VA_ARGS__)
    if (a->ndim < 2 || b->ndim < 2) return MM_FAIL("a and b need at least 2 dimensions");
    int64_t M = ta ? a->shape[a->ndim - 1] : a->shape[a->ndim - 2];
    int64_t K = ta ? a->shape[a->ndim - 2] : a->shape[a->ndim - 1];
    int64_t Kb = tb ? b->shape[b->ndim - 1] : b->shape[b->ndim - 2];
    int64_t N = tb ? b->shape[b->ndim - 2] : b->shape[b->ndim - 1];
    if (K != Kb) return MM_FAIL("inner extents differ (%lld vs %lld)", (long long)K, (long long)Kb);
    int nba = a->ndim - 2, nbb = b->ndim - 2, nb = nba > nbb ? nba : nbb;
    if (c->ndim != nb + 2) return MM_FAIL("c should have %d dimensions", nb + 2);
    if (c->shape[nb] != M || c->shape[nb + 1] != N)
        return MM_FAIL("c's last two extents should be (%lld,%lld)", (long long)M, (long long)N);
    /* aligned batch axes with contiguous strides; size-1 extents broadcast */
    int64_t ea[MM_MAX_DIMS], eb[MM_MAX_DIMS], xa[MM_MAX_DIMS], xb[MM_MAX_DIMS];
    int64_t stra = M * K, strb = K * N;
    for (int i = nb - 1; i >= 0; i--) {
        int ia = i - (nb - nba), ib = i - (nb - nbb);
        ea[i] = ia >= 0 ? a->shape[ia] : 1;
        eb[i] = ib >= 0 ? b->shape[ib] : 1;
        xa[i] = stra;
        xb[i] = strb;
        stra *= ea[i];
        strb *= eb[i];
        int64_t ec = c->shape[i];
        if (!((ea[i] == ec || ea[i] == 1) && (eb[i] == ec || eb[i] == 1) && (ea[i] == ec || eb[i] == ec)))
            return MM_FAIL("batch axis %d does not broadcast (a %lld, b %lld, c %lld)", i, (long long)ea[i],
                           (long long)eb[i], (long long)ec);
    }
#undef MM_FAIL
    /* drop extent-1 axes of c and merge neighbours that broadcast alike */
    int n = 0;
    for (int i = 0; i < nb; i++) {
        int64_t ec = c->shape[i];
        if (ec == 1) continue;
        if (n > 0) {
            int j = n - 1;
            int same_a = (L->ba[j] == 1) == (ea[i] == 1), same_b = (L->bb[j] == 1) == (eb[i] == 1);
            if (same_a && same_b) {
                L->bc[j] *= ec;
                L->ba[j] *= ea[i];
                L->bb[j] *= eb[i];
                L->sa[j] = xa[i];
                L->sb[j] = xb[i];
                continue;
            }
        }
        L->bc[n] = ec;
        L->ba[n] = ea[i];
        L->bb[n] = eb[i];
        L->sa[n] = xa[i];
        L->sb[n] = xb[i];
        n++;
    }
    L->nb = n;
    L->M = M;
    L->N = N;
    L->K = K;
    /* b shared by every batch and a not transposed: the batch is more rows of one GEMM */
    if (n == 1 && L->bb[0] == 1 && !ta) {
        L->M *= L->bc[0];
        L->nb = 0;
    }
    return TR_OK;
}

/* The conversions around a converted product, one ISA copy each (at AVX2 width a bf16
 * block converts at memory speed; the baseline copy is half that). */
TR_CPU_MULTI(void, load_block, (float *dst, const void *src, int dtype, int64_t m), (dst, src, dtype, m)) {
    tr_cpu_load_f32(dst, src, dtype, m);
}

TR_CPU_MULTI(void, store_block, (void *dst, int dtype, const float *src, int64_t m), (dst, dtype, src, m)) {
    tr_cpu_store_f32(dst, dtype, src, m);
}

static void convert_to_f32(float *dst, const void *src, int dtype, int64_t n) {
#pragma omp parallel for if (n > TR_CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i += TR_CPU_CHUNK) {
        int64_t m = n - i < TR_CPU_CHUNK ? n - i : TR_CPU_CHUNK;
        load_block(dst + i, (const char *)src + i * 2, dtype, m);
    }
}

static void convert_from_f32(void *dst, int dtype, const float *src, int64_t n) {
#pragma omp parallel for if (n > TR_CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i += TR_CPU_CHUNK) {
        int64_t m = n - i < TR_CPU_CHUNK ? n - i : TR_CPU_CHUNK;
        store_block((char *)dst + i * 2, dtype, src + i, m);
    }
}

/* c = act(bias) when K == 0: the sum is empty. */
static void fill_empty_k(struct tr_tensor *c, const struct tr_tensor *bias, enum tr_act act, int64_t N) {
    int64_t n = tr_tensor_numel(c);
    for (int64_t i = 0; i < n; i++) {
        float v = bias ? tr_cpu_get_f32(bias->data, bias->dtype, i % N) : 0.0f;
        v = tr_fact(v, act);
        tr_cpu_store_f32((char *)c->data + i * tr_dtype_size((enum tr_dtype)c->dtype), c->dtype, &v, 1);
    }
}

/* What one product needs once its arguments were checked: the primitive's key, the
 * cases oneDNN is not called for, and the conversions around it. */
struct mm_plan {
    struct tr_mm_key key;
    int empty;        /* c has no elements: nothing to do */
    int empty_k;      /* K == 0: c = act(bias) */
    int convert;      /* f16, or bf16 without a native GEMM: operands converted to f32
                         around the f32 primitive */
    int scaled_bias;  /* the bias handed to oneDNN is bias/alpha in f32 */
    int64_t N, na, nb, nc;
};

/* Every check of tr_k_matmul after its context and operand checks, and the plan. */
static int mm_plan(const struct tr_tensor *a, const struct tr_tensor *b, const struct tr_tensor *c, int trans_a,
                   int trans_b, float alpha, const struct tr_tensor *bias, enum tr_act act, struct mm_plan *pl,
                   struct tr_error *err) {
    char d1[200], d2[200], d3[200];
    if (a->dtype != b->dtype || a->dtype != c->dtype)
        return tr_error_set(err, TR_ERR_SHAPE, "matmul: dtypes differ: a %s, b %s, c %s", tr_cpu_desc(a, d1, sizeof d1),
                            tr_cpu_desc(b, d2, sizeof d2), tr_cpu_desc(c, d3, sizeof d3));
    if ((unsigned)act > TR_ACT_SILU) return tr_error_set(err, TR_ERR_INVALID, "matmul: unknown activation %d", (int)act);
    if (!isfinite(alpha)) return tr_error_set(err, TR_ERR_INVALID, "matmul: alpha %g is not finite", (double)alpha);
    struct mm_layout L = {0};
    int rc = mm_shapes(a, b, c, trans_a, trans_b, &L, err);
    if (rc) return rc;
    if (bias) {
        rc = tr_cpu_check_float(bias, "matmul", "bias", err);
        if (rc) return rc;
        if (bias->ndim < 1 || tr_tensor_numel(bias) != L.N || bias->shape[bias->ndim - 1] != L.N)
            return tr_error_set(err, TR_ERR_SHAPE, "matmul: bias %s should have shape [%lld] (N of c %s)",
                                tr_cpu_desc(bias, d1, sizeof d1), (long long)L.N, tr_cpu_desc(c, d2, sizeof d2));
        if (bias->dtype != a->dtype && bias->dtype != TR_DTYPE_F32)
            return tr_error_set(err, TR_ERR_SHAPE, "matmul: bias %s should be %s (as a) or f32",
                                tr_cpu_desc(bias, d1, sizeof d1), tr_dtype_name((enum tr_dtype)a->dtype));
    }
    memset(pl, 0, sizeof *pl);
    pl->N = L.N;
    pl->na = tr_tensor_numel(a);
    pl->nb = tr_tensor_numel(b);
    pl->nc = tr_tensor_numel(c);
    pl->empty = pl->nc == 0;
    pl->empty_k = !pl->empty && L.K == 0;

    /* the key: batch axes then the matrix axes, with transposes as strides */
    struct tr_mm_key *key = &pl->key;
    int nd = L.nb + 2;
    key->ndims = nd;
    for (int i = 0; i < L.nb; i++) {
        key->a_dims[i] = L.ba[i];
        key->b_dims[i] = L.bb[i];
        key->c_dims[i] = L.bc[i];
        key->a_strides[i] = L.sa[i];
        key->b_strides[i] = L.sb[i];
    }
    key->a_dims[nd - 2] = L.M;
    key->a_dims[nd - 1] = L.K;
    key->a_strides[nd - 2] = trans_a ? 1 : L.K;
    key->a_strides[nd - 1] = trans_a ? L.M : 1;
    key->b_dims[nd - 2] = L.K;
    key->b_dims[nd - 1] = L.N;
    key->b_strides[nd - 2] = trans_b ? 1 : L.N;
    key->b_strides[nd - 1] = trans_b ? L.K : 1;
    key->c_dims[nd - 2] = L.M;
    key->c_dims[nd - 1] = L.N;
    /* bf16 without the cpu's bf16 units: converted, unless oneDNN emulates it and each
     * element of b takes part in fewer than MM_EMULATED_REUSE multiply-adds (a decode step's
     * few rows), where converting the whole of b costs more than the emulated product:
     * gemma small's bf16 generate on an AVX-512 Xeon without AVX512_BF16 took 3.7 ms a
     * token emulated and 4.8-6.4 converted; its prefill and BERT predict the other way */
    const double reuse = pl->nb > 0 ? (double)pl->nc * (double)L.K / (double)pl->nb : 0;
    pl->convert = a->dtype == TR_DTYPE_F16 ||
                  (a->dtype == TR_DTYPE_BF16 && !tr_cpu_bf16_gemm_native &&
                   !(tr_cpu_bf16_gemm_emulated && reuse < MM_EMULATED_REUSE));
    key->dtype = pl->convert ? TR_DTYPE_F32 : a->dtype;
    key->act = act;
    key->alpha = alpha;
    pl->scaled_bias = bias && (alpha != 1.0f || (pl->convert && bias->dtype != TR_DTYPE_F32));
    key->bias_dtype = !bias ? -1 : pl->scaled_bias ? TR_DTYPE_F32 : bias->dtype;
    return TR_OK;
}

/* Scratch for the f32 conversions (na, nb, nc floats) and the scaled bias (N floats). */
struct mm_scratch {
    float *ta, *tb, *tc, *tbias;
};

static void scratch_free(struct mm_scratch *s) {
    free(s->ta);
    free(s->tb);
    free(s->tc);
    free(s->tbias);
    memset(s, 0, sizeof *s);
}

static int scratch_alloc(const struct mm_plan *pl, struct mm_scratch *s, struct tr_error *err) {
    memset(s, 0, sizeof *s);
    if (pl->convert) {
        s->ta = malloc(sizeof(float) * (size_t)pl->na);
        s->tb = malloc(sizeof(float) * (size_t)pl->nb);
        s->tc = malloc(sizeof(float) * (size_t)pl->nc);
        if (!s->ta || !s->tb || !s->tc) {
            scratch_free(s);
            return tr_error_set(err, TR_ERR_NOMEM, "matmul: no memory for the f32 copies of a, b, c");
        }
    }
    if (pl->scaled_bias) {
        s->tbias = malloc(sizeof(float) * (size_t)pl->N);
        if (!s->tbias) {
            scratch_free(s);
            return tr_error_set(err, TR_ERR_NOMEM, "matmul: no memory for the scaled bias");
        }
    }
    return TR_OK;
}

/* Point the primitive's memory objects at the operands (or their f32 copies). */
static dnnl_status_t set_handles(const struct tr_mm_entry *e, const struct mm_scratch *s, const struct tr_tensor *a,
                                 const struct tr_tensor *b, const struct tr_tensor *c, const struct tr_tensor *bias) {
    dnnl_status_t st = dnnl_memory_set_data_handle(e->a, s->ta ? (void *)s->ta : a->data);
    if (!st) st = dnnl_memory_set_data_handle(e->b, s->tb ? (void *)s->tb : b->data);
    if (!st) st = dnnl_memory_set_data_handle(e->c, s->tc ? (void *)s->tc : c->data);
    if (!st && e->bias) st = dnnl_memory_set_data_handle(e->bias, s->tbias ? (void *)s->tbias : bias->data);
    return st;
}

/* The product with handles already set: conversions in, the primitive, conversions out.
 * The bias is read at every call (weights may be updated in place between steps). */
static int mm_execute(struct tr_kernels *k, const struct tr_mm_entry *e, const struct mm_plan *pl,
                      const struct mm_scratch *s, const struct tr_tensor *a, const struct tr_tensor *b,
                      const struct tr_tensor *c, const struct tr_tensor *bias, float alpha, struct tr_error *err) {
    if (pl->convert) {
        convert_to_f32(s->ta, a->data, a->dtype, pl->na);
        convert_to_f32(s->tb, b->data, b->dtype, pl->nb);
    }
    if (pl->scaled_bias)
        for (int64_t i = 0; i < pl->N; i++) s->tbias[i] = tr_cpu_get_f32(bias->data, bias->dtype, i) / alpha;
    dnnl_exec_arg_t args[4] = {
        {DNNL_ARG_SRC, e->a}, {DNNL_ARG_WEIGHTS, e->b}, {DNNL_ARG_DST, e->c}, {DNNL_ARG_BIAS, e->bias}};
    dnnl_status_t st = dnnl_primitive_execute(e->prim, (dnnl_stream_t)k->stream, e->bias ? 4 : 3, args);
    if (!st) st = dnnl_stream_wait((dnnl_stream_t)k->stream);
    if (st) {
        char d1[200], d2[200];
        return tr_error_set(err, TR_ERR_DEVICE, "matmul: oneDNN execution failed for a %s, b %s (status %d)",
                            tr_cpu_desc(a, d1, sizeof d1), tr_cpu_desc(b, d2, sizeof d2), (int)st);
    }
    if (pl->convert) convert_from_f32(c->data, c->dtype, s->tc, pl->nc);
    return TR_OK;
}

static int check_operands(const struct tr_tensor *a, const struct tr_tensor *b, const struct tr_tensor *c,
                          struct tr_error *err) {
    int rc = tr_cpu_check_float(a, "matmul", "a", err);
    if (!rc) rc = tr_cpu_check_float(b, "matmul", "b", err);
    if (!rc) rc = tr_cpu_check_float(c, "matmul", "c", err);
    return rc;
}

int tr_k_matmul(struct tr_kernels *k, const struct tr_tensor *a, const struct tr_tensor *b, struct tr_tensor *c,
                int trans_a, int trans_b, float alpha, const struct tr_tensor *bias, enum tr_act act,
                struct tr_error *err) {
    TR_CUDA_ROUTE(k, tr_cuda_matmul(k, a, b, c, trans_a, trans_b, alpha, bias, act, err));
    int st = tr_cpu_check_ctx(k, "matmul", err);
    if (!st) st = check_operands(a, b, c, err);
    if (st) return st;
    k->stats.gemm_calls++;
    struct mm_plan pl;
    if ((st = mm_plan(a, b, c, trans_a, trans_b, alpha, bias, act, &pl, err)) != TR_OK) return st;
    if (pl.empty) return TR_OK;
    if (pl.empty_k) {
        fill_empty_k(c, bias, act, pl.N);
        return TR_OK;
    }
    struct tr_mm_entry *e = lookup(k, &pl.key, err);
    if (!e) return err ? err->status : TR_ERR_UNSUPPORTED;
    /* the f32 copies and the scaled bias in the context's scratch, kept between calls */
    size_t na = pl.convert ? (size_t)pl.na : 0, nb = pl.convert ? (size_t)pl.nb : 0, nc = pl.convert ? (size_t)pl.nc : 0;
    size_t nbias = pl.scaled_bias ? (size_t)pl.N : 0;
    struct mm_scratch s = {0};
    if (na + nb + nc + nbias > 0) {
        size_t ra = (na + 15) & ~(size_t)15, rb = (nb + 15) & ~(size_t)15, rc = (nc + 15) & ~(size_t)15;
        if ((st = tr_cpu_scratch_reserve(k, sizeof(float) * (ra + rb + rc + nbias), 0, "matmul", err)) != TR_OK)
            return st;
        float *base = tr_cpu_scratch_shared(k);
        if (pl.convert) {
            s.ta = base;
            s.tb = base + ra;
            s.tc = base + ra + rb;
        }
        if (pl.scaled_bias) s.tbias = base + ra + rb + rc;
    }
    dnnl_status_t ds = set_handles(e, &s, a, b, c, bias);
    if (ds) {
        char d1[200], d2[200];
        return tr_error_set(err, TR_ERR_DEVICE, "matmul: oneDNN execution failed for a %s, b %s (status %d)",
                            tr_cpu_desc(a, d1, sizeof d1), tr_cpu_desc(b, d2, sizeof d2), (int)ds);
    }
    return mm_execute(k, e, &pl, &s, a, b, c, bias, alpha, err);
}

/* ---- bound ---- */

/* What bind made for one call: its own primitive (never evicted), the plan, the scratch,
 * and the bias (a bound MATMUL op has none; the fused users of tr_k_matmul may). */
struct mm_bound {
    struct tr_cpu_prepared hdr;
    struct tr_mm_entry e;
    struct mm_plan pl;
    struct mm_scratch s;
    struct tr_tensor bias;
    int has_bias;
    enum tr_act act;
};

static void mm_bound_release(void *self) {
    struct mm_bound *m = self;
    entry_release(&m->e);
    scratch_free(&m->s);
    free(m);
}

static int mm_call(struct tr_kernels *k, const struct tr_kernel_call *c, struct tr_error *err) {
    const struct mm_bound *m = c->prepared;
    k->stats.calls++;
    k->stats.gemm_calls++;
    return mm_execute(k, &m->e, &m->pl, &m->s, &c->in[0], &c->in[1], &c->out, m->has_bias ? &m->bias : NULL,
                      c->attrs.floats[0], err);
}

static int mm_call_empty(struct tr_kernels *k, const struct tr_kernel_call *c, struct tr_error *err) {
    (void)err;
    const struct mm_bound *m = c->prepared;
    k->stats.calls++;
    k->stats.gemm_calls++;
    if (m->pl.empty_k) fill_empty_k((struct tr_tensor *)&c->out, m->has_bias ? &m->bias : NULL, m->act, m->pl.N);
    return TR_OK;
}

int tr_cpu_matmul_bind(struct tr_kernels *k, struct tr_kernel_call *c, const struct tr_tensor *bias, enum tr_act act,
                       struct tr_error *err) {
    /* the context check of tr_k_matmul, without counting a call: binding is not one */
    int rc = tr_cpu_check_ctx_bind(k, "matmul", err);
    const struct tr_tensor *a = &c->in[0], *b = &c->in[1], *out = &c->out;
    if (!rc) rc = check_operands(a, b, out, err);
    if (rc) return rc;
    struct mm_bound *m = calloc(1, sizeof *m);
    if (!m) return tr_error_set(err, TR_ERR_NOMEM, "matmul: no memory for a bound call");
    m->hdr.release = mm_bound_release;
    rc = mm_plan(a, b, out, c->attrs.ints[0] != 0, c->attrs.ints[1] != 0, c->attrs.floats[0], bias, act, &m->pl, err);
    if (rc) goto fail;
    if (bias) m->bias = *bias;
    m->has_bias = bias != NULL;
    m->act = act;
    if (m->pl.empty || m->pl.empty_k) {
        c->fn = mm_call_empty;
        c->prepared = m;
        return TR_OK;
    }
    if ((rc = create_entry(k, &m->pl.key, &m->e, err)) != TR_OK) goto fail;
    if ((rc = scratch_alloc(&m->pl, &m->s, err)) != TR_OK) goto fail;
    dnnl_status_t ds = set_handles(&m->e, &m->s, a, b, out, bias);
    if (ds) {
        rc = tr_error_set(err, TR_ERR_DEVICE, "matmul: oneDNN refused the bound call's data pointers (status %d)",
                          (int)ds);
        goto fail;
    }
    c->fn = mm_call;
    c->prepared = m;
    return TR_OK;
fail:
    entry_release(&m->e);
    scratch_free(&m->s);
    free(m);
    return rc;
}

int tr_cpu_matmul_bind_op(struct tr_kernels *k, struct tr_kernel_call *c, struct tr_error *err) {
    return tr_cpu_matmul_bind(k, c, NULL, TR_ACT_NONE, err);
}
