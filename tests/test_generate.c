/* The generate task (core/include/trident/generate.h, models/decoder/generate.c):
 * - through the runner (tr_bench_run) on gemma and mistral tiny, greedy and top-k, on
 *   torch, torch:reduce-overhead, tf and jax: every backend generates the reference's
 *   tokens, each program is compiled once and the decode pass runs once per token; with
 *   the cache as state every cache update is computed in place, the host writes nothing
 *   and the cache is not counted as parameters; kv_cache = inputs gives the same tokens;
 * - the decoder's passes with the cache as state (inputs, outputs, updates, refusals);
 * - the generator on the Hugging Face fixtures: exactly transformers' greedy tokens,
 *   every step's logits within 1e-4 of its, and every step's logits equal to one pass
 *   over the whole sequence (no cache) on the same backend, for every backend;
 * - top-k sampling: the same seed gives the same tokens on every backend, another seed
 *   other tokens;
 * - bad input, refused before anything runs: prompt_len >= max_length, max_length beyond
 *   max_position_embeddings, a bad sampling, a batch that does not fit in memory. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "decoderutil.h"
#include "models.h"
#include "trident/bench.h"
#include "trident/generate.h"
#include "trident/loader.h"
#include "trident/safetensors.h"
#include "trident/weights.h"

#define FIX TR_SOURCE_DIR "/tests/fixtures/"

static const struct tr_test_llm gemma = {.model = &tr_model_gemma, .weights = FIX "gemma_tiny.safetensors",
                                         .io = FIX "gemma_tiny_io.safetensors",
                                         .hint = " (regenerate with: python3 tests/fixtures/make_gemma_fixture.py)"};
static const struct tr_test_llm mistral = {.model = &tr_model_mistral, .weights = FIX "mistral_tiny.safetensors",
                                           .io = FIX "mistral_tiny_io.safetensors",
                                           .hint = " (regenerate with: python3 tests/fixtures/make_mistral_fixture.py)"};

static const struct tr_model_desc *const models[] = {&tr_model_gemma, &tr_model_mistral, NULL};

/* ---- through the runner ---- */

static struct tr_config cfg;
static struct tr_bench_report rep;

static int run_ini(const char *ini, struct tr_error *e) {
    memset(e, 0, sizeof *e);
    memset(&rep, 0, sizeof rep);
    if (tr_config_load_string(ini, "gen.ini", &cfg, e)) return e->status;
    return tr_bench_run(&cfg, models, &rep, e);
}

static void expect_error(const char *ini, int status, const char *const *parts) {
    struct tr_error e;
    int rc = run_ini(ini, &e);
    if (rc != status) fail_msg("expected status %d, got %d: %s", status, rc, e.msg);
    assert_int_equal(rep.n_rows, 0); /* refused before any backend ran */
    for (const char *const *p = parts; *p; p++)
        if (!strstr(e.msg, *p)) fail_msg("the error lacks '%s': %s", *p, e.msg);
    print_message("refused as expected: %s\n", e.msg);
}

/* bf16: the tokens may part at a near tie (two logits closer than bf16 resolves), which
 * the runner tells from a real difference and reports. */
static void check_runner_dtype(const char *model, const char *dtype, const char *run_lines, const char *extra) {
    char ini[1024];
    const int bf16 = strcmp(dtype, "bf16") == 0;
    snprintf(ini, sizeof ini,
             "[run]\nmodel = %s\npreset = tiny\ntask = generate\nbackends = torch, torch:reduce-overhead, tf, jax\n"
             "dtype = %s\nbatch = 4\nsteps = 2\nwarmup = 2\n%s[generate]\nmax_length = 20\nprompt_len = 6\n%s",
             model, dtype, run_lines, extra);
    struct tr_error e;
    int rc = run_ini(ini, &e);
    tr_bench_print(&rep, stdout);
    if (rc) fail_msg("%s generate: %s", model, e.msg);
    assert_int_equal(rep.n_rows, 4);
    assert_int_equal(rep.new_tokens, 14);
    for (int i = 0; i < rep.n_rows; i++) {
        const struct tr_bench_row *r = &rep.rows[i];
        assert_true(r->ok && r->agrees && (r->tokens_agree || (bf16 && r->tokens_tie)));
        assert_true(r->max_rel_diff <= (bf16 ? 1e-2 : 1e-4));
        /* Each pass compiled once; the decode pass run once per token after the first,
         * for each of the warmup + steps calls. */
        assert_int_equal(r->compiles, 2);
        assert_int_equal(r->decode_execs, (2 + 2) * 13);
        assert_true(r->prefill_ms > 0 && r->ms_per_token > 0 && r->tokens_per_s > 0);
        assert_true(r->prefill_ms < r->mean_ms);
    }
    /* reduce-overhead records the decode pass once and replays it for the other tokens. */
    const char *notes = rep.rows[1].stats.notes;
    if (!strstr(notes, "recorded") || !strstr(notes, "replays"))
        fail_msg("torch:reduce-overhead does not replay the decode pass: %s", notes);
    unsigned long long replays = 0;
    const char *r = strstr(notes, "replays ");
    assert_non_null(r);
    replays = strtoull(r + 8, NULL, 10);
    if (replays < 40) fail_msg("torch:reduce-overhead replayed the decode pass %llu times, expected >= 40", replays);
}

static void check_runner(const char *model, const char *extra) { check_runner_dtype(model, "f32", "", extra); }

static const struct tr_decoder_config *tiny_of(const char *model) {
    return tr_test_llm_preset(strcmp(model, "gemma") == 0 ? &tr_model_gemma : &tr_model_mistral, "tiny");
}

/* The cache as state (the default): every backend computes each cache update in the
 * cache's own memory (the decode program's notes: "N of N updates in place", N = 2 per
 * layer), the host writes nothing, and the cache is not counted as parameters. */
static void check_state_report(const char *model) {
    const struct tr_decoder_config *c = tiny_of(model);
    assert_string_equal(rep.gen.kv_cache, "state");
    assert_int_equal(rep.param_count, tr_decoder_param_count(c));
    char want[64];
    snprintf(want, sizeof want, "%d of %d updates in place", (int)(2 * c->num_hidden_layers),
             (int)(2 * c->num_hidden_layers));
    for (int i = 0; i < rep.n_rows; i++) {
        const struct tr_bench_row *r = &rep.rows[i];
        assert_true(r->cache_write_ms == 0.0);
        if (!strstr(r->stats.notes, want))
            fail_msg("%s %s: the decode pass's cache updates are not all in place (want '%s'): %s", model, r->label,
                     want, r->stats.notes);
    }
}

static void test_runner_gemma_greedy(void **state) {
    check_runner("gemma", "");
    check_state_report("gemma");
}
static void test_runner_mistral_bf16(void **state) {
    check_runner_dtype("mistral", "bf16", "", "");
    check_state_report("mistral");
}
static void test_runner_mistral_greedy(void **state) {
    check_runner("mistral", "");
    check_state_report("mistral");
}
static void test_runner_gemma_top_k(void **state) {
    check_runner("gemma", "sampling = top_k\ntop_k = 8\ntemperature = 0.7\nseed = 11\n");
    assert_string_equal(rep.gen.sampling, "top_k");
    check_state_report("gemma");
}

/* kv_cache = inputs (the host's cache fed to the decode pass) generates the tokens the
 * cache as state does, from a weights file that has no cache tensors (the cache is never
 * loaded), and writes the entries on the host. */
static void test_runner_cache_inputs(void **state) {
    static const char *const modes[2] = {"inputs", "state"};
    int32_t tokens[2][8];
    for (int m = 0; m < 2; m++) {
        char extra[64], run_lines[600];
        snprintf(extra, sizeof extra, "kv_cache = %s\n", modes[m]);
        snprintf(run_lines, sizeof run_lines, "weights = %s\n", gemma.weights);
        check_runner_dtype("gemma", "f32", run_lines, extra);
        assert_string_equal(rep.gen.kv_cache, modes[m]);
        assert_true(rep.n_sample_tokens == 8);
        memcpy(tokens[m], rep.sample_tokens, sizeof(int32_t) * 8);
        for (int i = 0; i < rep.n_rows; i++) assert_true(m == 1 ? rep.rows[i].cache_write_ms == 0.0
                                                                 : rep.rows[i].cache_write_ms > 0.0);
    }
    assert_memory_equal(tokens[0], tokens[1], sizeof(int32_t) * 8);
    check_state_report("gemma");
    const char *bad[] = {"gen.ini:7", "kv_cache = host", "state or inputs", NULL};
    expect_error("[run]\nmodel = gemma\npreset = tiny\ntask = generate\nbatch = 2\n[generate]\nkv_cache = host\n",
                 TR_ERR_INVALID, bad);
}

static void test_bad_prompt_len(void **state) {
    const char *parts[] = {"gen.ini:8", "prompt_len = 20", "max_length = 20", NULL};
    expect_error("[run]\nmodel = gemma\npreset = tiny\ntask = generate\nbatch = 2\n[generate]\nmax_length = 20\n"
                 "prompt_len = 20\n",
                 TR_ERR_INVALID, parts);
    const char *dflt[] = {"gen.ini:7", "prompt_len = 5", "max_length = 4", NULL};
    expect_error("[run]\nmodel = gemma\npreset = tiny\ntask = generate\nbatch = 2\n[generate]\nmax_length = 4\n",
                 TR_ERR_INVALID, dflt);
}

/* A generation past max_position_embeddings runs, as transformers' does (RoPE has no
 * table to run off): every backend, the tokens agreeing. */
/* A prompts file whose line holds a NUL byte is refused, naming the line: read as a C
 * string the prompt would end there and the rest of the line vanish. */
static void test_prompts_nul(void **state) {
    (void)state;
    char path[] = "/tmp/trident_prompts_XXXXXX";
    const int fd = mkstemp(path);
    assert_true(fd >= 0);
    static const char text[] = "first\nhe\0llo\nx\n";
    assert_int_equal(write(fd, text, sizeof text - 1), (ssize_t)(sizeof text - 1));
    close(fd);
    char **lines = NULL;
    int n = 0;
    struct tr_error e = {0};
    assert_int_equal(tr_generate_read_prompts(path, &lines, &n, &e), TR_ERR_FORMAT);
    tr_assert_msg_has(&e, ":2: a NUL byte in the line");
    assert_null(lines);
    unlink(path);
}

static void test_max_length_past_positions(void **state) {
    struct tr_error e;
    int rc = run_ini("[run]\nmodel = mistral\npreset = tiny\ntask = generate\nbatch = 1\nsteps = 1\nwarmup = 1\n"
                     "backends = torch, tf\n[generate]\nmax_length = 136\nprompt_len = 126\n", &e);
    if (rc) fail_msg("%s", e.msg);
    assert_int_equal(rep.n_rows, 2);
    assert_true(rep.rows[0].agrees && rep.rows[1].agrees && rep.rows[1].tokens_agree);
    print_message("mistral tiny (max_position_embeddings 128): 126 + 10 tokens generated on torch and tf\n");
}

static void test_bad_keys(void **state) {
    const char *sampling[] = {"gen.ini:7", "sampling = beam", "greedy, top_k or top_p", NULL};
    expect_error("[run]\nmodel = gemma\npreset = tiny\ntask = generate\nbatch = 2\n[generate]\nsampling = beam\n",
                 TR_ERR_INVALID, sampling);
    const char *unknown[] = {"gen.ini:7", "max_len", "max_length", NULL};
    expect_error("[run]\nmodel = gemma\npreset = tiny\ntask = generate\nbatch = 2\n[generate]\nmax_len = 9\n",
                 TR_ERR_NOT_FOUND, unknown);
    const char *temp[] = {"gen.ini:7", "temperature = 0", NULL};
    expect_error("[run]\nmodel = gemma\npreset = tiny\ntask = generate\nbatch = 2\n[generate]\ntemperature = 0\n",
                 TR_ERR_INVALID, temp);
}

/* A 7B batch far beyond any host: refused with both numbers before a weight is made (were
 * the weights made first, this test would take minutes and fail on the allocation). */
static void test_does_not_fit(void **state) {
    const char *parts[] = {"gen.ini", "does not fit", "bytes", "available", "KV cache", NULL};
    expect_error("[run]\nmodel = gemma\npreset = 7b\ntask = generate\ndtype = bf16\nbatch = 4096\n[generate]\n"
                 "max_length = 8192\n",
                 TR_ERR_NOMEM, parts);
    /* and the estimate holds the KV cache it names: 28 layers x (k, v) x B x 16 heads x
     * (max_length - 1) slots x 256 x 2 bytes, at least */
    assert_true(rep.kv_cache_bytes >= 28ull * 2 * 4096 * 16 * 8191 * 256 * 2);
    assert_true(rep.mem_needed_bytes > rep.mem_available_bytes && rep.mem_available_bytes > 0);
}

/* ---- the generator on the fixtures ---- */

struct gen_fix {
    struct tr_generate_graphs gg;
    struct tr_weights *w;
    struct tr_safetensors *io;
    struct tr_tensor prompt[3], want, want_logits;
    int64_t B, T, NEW;
};

static void fix_open(const struct tr_test_llm *t, struct gen_fix *f) {
    memset(f, 0, sizeof *f);
    struct tr_error e = {0};
    if (tr_safetensors_open(t->io, &f->io, &e)) fail_msg("%s%s", e.msg, t->hint);
    const char *names[3] = {"input_ids", "position_ids", "attention_mask"};
    for (int i = 0; i < 3; i++)
        if (tr_safetensors_get(f->io, names[i], &f->prompt[i], &e)) fail_msg("%s%s", e.msg, t->hint);
    if (tr_safetensors_get(f->io, "generated", &f->want, &e) ||
        tr_safetensors_get(f->io, "generated_logits", &f->want_logits, &e))
        fail_msg("%s%s", e.msg, t->hint);
    f->B = f->prompt[0].shape[0], f->T = f->prompt[0].shape[1], f->NEW = f->want.shape[1];
    const struct tr_generate_opts o = {.dtype = TR_DTYPE_F32, .batch = f->B, .prompt_len = f->T,
                                       .max_length = f->T + f->NEW};
    if (tr_generate_build(t->model, tr_test_llm_preset(t->model, "tiny"), &o, &f->gg, &e)) fail_msg("%s", e.msg);
    if (tr_weights_load(f->gg.weights, t->weights, &f->w, &e)) fail_msg("%s%s", e.msg, t->hint);
    if (tr_generate_share_params(&f->gg, &e)) fail_msg("%s", e.msg);
}

static void fix_close(struct gen_fix *f) {
    tr_weights_free(f->w);
    tr_generate_graphs_free(&f->gg);
    tr_safetensors_close(f->io);
}

struct be_handle {
    struct tr_plugin *p;
    struct tr_backend *be;
};

static void be_open(const struct tr_test_backend *b, struct be_handle *h) {
    struct tr_plugin_search s = {.ini_dir = TR_BINARY_DIR "/plugins", .env_path = ""};
    struct tr_option opt = {.key = "mode", .value = b->mode, .file = "test", .line = 1};
    struct tr_backend_params prm = {.struct_size = sizeof prm, .abi_version = TR_ABI_VERSION,
                                    .device_type = TR_DEVICE_CPU, .options = &opt, .n_options = b->mode ? 1 : 0};
    struct tr_error e = {0};
    if (tr_plugin_open(b->plugin, &s, &h->p, &e)) fail_msg("%s: %s", b->label, e.msg);
    if (tr_backend_init(h->p, &prm, &h->be, &e)) fail_msg("%s: %s", b->label, e.msg);
}

static void be_close(struct be_handle *h) {
    tr_backend_free(h->be);
    tr_plugin_close(h->p);
}

/* Every step's logits, kept: steps[s] is [B,V]. */
struct kept {
    int64_t n, numel;
    float *logits; /* [NEW, B, V] */
};

static void keep_logits(void *user, int64_t step, const struct tr_tensor *l) {
    struct kept *k = user;
    assert_true(step < k->n);
    assert_int_equal(tr_tensor_numel(l), k->numel);
    for (int64_t i = 0; i < k->numel; i++) k->logits[step * k->numel + i] = (float)tr_tensor_get_f64(l, i);
}

static double rel(const float *a, const float *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), den += (double)b[i] * b[i];
    }
    return sqrt(num / den);
}

/* One pass over prompt + the first NEW - 1 new tokens, no cache: the logits at position
 * T - 1 + s are what step s must give. Returns [B, T + NEW - 1, V]. */
static struct tr_tensor recompute(const struct tr_test_llm *t, struct gen_fix *f, const struct tr_test_backend *b,
                                  const int32_t *tokens) {
    const int64_t B = f->B, T = f->T, L = T + f->NEW - 1;
    struct tr_graph *g = tr_test_llm_build(t->model, tr_test_llm_preset(t->model, "tiny"), TR_DTYPE_F32, B, L);
    struct tr_weights *w = NULL;
    struct tr_error e = {0};
    if (tr_weights_load(g, t->weights, &w, &e)) fail_msg("%s", e.msg);
    const int64_t bl[2] = {B, L};
    struct tr_tensor in[3] = {tr_test_tensor(TR_DTYPE_I32, 2, bl), tr_test_tensor(TR_DTYPE_I32, 2, bl),
                              tr_test_tensor(TR_DTYPE_F32, 2, bl)};
    const int32_t *ids0 = f->prompt[0].data, *pos0 = f->prompt[1].data;
    const float *m0 = f->prompt[2].data;
    for (int64_t i = 0; i < B; i++)
        for (int64_t j = 0; j < L; j++) {
            int32_t *ids = in[0].data, *pos = in[1].data;
            float *m = in[2].data;
            const int64_t k = i * L + j;
            ids[k] = j < T ? ids0[i * T + j] : tokens[i * f->NEW + (j - T)];
            pos[k] = j < T ? pos0[i * T + j] : pos0[i * T + T - 1] + (int32_t)(j - T + 1);
            m[k] = j < T ? m0[i * T + j] : 1.0f;
        }
    struct tr_tensor out;
    tr_test_run_backend(b, NULL, g, in, 1, &out, NULL);
    tr_test_tensors_free(3, in);
    tr_weights_free(w);
    tr_graph_free(g);
    return out;
}

static void check_fixture(const struct tr_test_llm *t) {
    struct gen_fix f;
    fix_open(t, &f);
    const int64_t B = f.B, NEW = f.NEW, V = f.want_logits.shape[2], T = f.T;
    struct tr_generate_config gc;
    struct tr_error e = {0};
    assert_int_equal(tr_generate_config_resolve(NULL, 1, &gc, &e), TR_OK);
    gc.max_length = T + NEW, gc.prompt_len = T;
    int32_t *tokens = calloc((size_t)(B * NEW), sizeof *tokens);
    struct kept k = {.n = NEW, .numel = B * V, .logits = calloc((size_t)(NEW * B * V), sizeof(float))};
    float *hf = calloc((size_t)(B * V), sizeof(float));
    for (int bi = 0; bi < TR_TEST_N_BACKENDS; bi++) {
        const struct tr_test_backend *b = &tr_test_backends[bi];
        struct be_handle h;
        be_open(b, &h);
        struct tr_generator *gen = NULL;
        if (tr_generator_init(h.be, t->model, tr_test_llm_preset(t->model, "tiny"), &f.gg, &gc, &gen, &e))
            fail_msg("%s: %s", b->label, e.msg);
        /* twice: the second call must not see the first one's cache */
        for (int call = 0; call < 2; call++) {
            for (int64_t i = 0; i < B * NEW; i++) tokens[i] = -7;
            if (tr_generator_run(gen, f.prompt, tokens, NULL, keep_logits, &k, &e))
                fail_msg("%s: %s", b->label, e.msg);
            for (int64_t i = 0; i < B * NEW; i++)
                if (tokens[i] != ((const int32_t *)f.want.data)[i])
                    fail_msg("%s %s call %d: sample %lld new token %lld is %d, transformers' greedy generate gave %d",
                             t->model->name, b->label, call + 1, (long long)(i / NEW), (long long)(i % NEW) + 1,
                             tokens[i], ((const int32_t *)f.want.data)[i]);
        }
        int compiles;
        int64_t prefills, decodes;
        tr_generator_counts(gen, &compiles, &prefills, &decodes);
        assert_int_equal(compiles, 2);
        assert_int_equal(prefills, 2);
        assert_int_equal(decodes, 2 * (NEW - 1));
        /* every step's logits: transformers' (its generate_logits) and one pass without a cache */
        struct tr_tensor full = recompute(t, &f, b, tokens);
        double worst_hf = 0, worst_full = 0;
        const float *ref = f.want_logits.data, *fl = full.data;
        const int64_t L = full.shape[1];
        for (int64_t s = 0; s < NEW; s++) {
            for (int64_t i = 0; i < B; i++) memcpy(hf + i * V, ref + (i * NEW + s) * V, sizeof(float) * (size_t)V);
            double d = rel(k.logits + s * B * V, hf, B * V);
            for (int64_t i = 0; i < B; i++) memcpy(hf + i * V, fl + (i * L + T - 1 + s) * V, sizeof(float) * (size_t)V);
            double c = rel(k.logits + s * B * V, hf, B * V);
            if (!(d < 1e-4)) fail_msg("%s %s step %lld: logits %.3g from transformers'", t->model->name, b->label, (long long)s, d);
            if (!(c < 1e-5))
                fail_msg("%s %s step %lld: KV-cache logits %.3g from one pass without a cache", t->model->name, b->label,
                         (long long)s, c);
            worst_hf = fmax(worst_hf, d), worst_full = fmax(worst_full, c);
        }
        print_message("%s tiny %-22s generate: %lld x %lld tokens as transformers'; logits within %.2g of its, "
                      "within %.2g of the full recompute\n",
                      t->model->name, b->label, (long long)B, (long long)NEW, worst_hf, worst_full);
        tr_test_tensor_free(&full);
        tr_generator_free(gen);
        be_close(&h);
    }
    free(hf), free(k.logits), free(tokens);
    fix_close(&f);
}

static void test_gemma_matches_hf(void **state) { check_fixture(&gemma); }
static void test_mistral_matches_hf(void **state) { check_fixture(&mistral); }

/* top-k: same seed -> the same tokens on every backend; another seed -> other tokens. */
static void test_top_k_seeds(void **state) {
    struct gen_fix f;
    fix_open(&mistral, &f);
    const int64_t n = f.B * f.NEW;
    struct tr_generate_config gc;
    struct tr_error e = {0};
    assert_int_equal(tr_generate_config_resolve(NULL, 1, &gc, &e), TR_OK);
    gc.max_length = f.T + f.NEW, gc.prompt_len = f.T;
    strcpy(gc.sampling, "top_k");
    gc.top_k_sampling = 1, gc.top_k = 20, gc.temperature = 1.5;
    int32_t *first = calloc((size_t)n, sizeof *first), *tok = calloc((size_t)n, sizeof *tok);
    for (int bi = 0; bi < TR_TEST_N_BACKENDS; bi++) {
        struct be_handle h;
        be_open(&tr_test_backends[bi], &h);
        struct tr_generator *gen = NULL;
        gc.seed = 5;
        if (tr_generator_init(h.be, mistral.model, tr_test_llm_preset(mistral.model, "tiny"), &f.gg, &gc, &gen, &e))
            fail_msg("%s", e.msg);
        if (tr_generator_run(gen, f.prompt, bi == 0 ? first : tok, NULL, NULL, NULL, &e)) fail_msg("%s", e.msg);
        if (bi > 0) assert_memory_equal(first, tok, sizeof *tok * (size_t)n);
        tr_generator_free(gen);
        if (bi == 0) { /* another seed, the same backend */
            gc.seed = 6;
            if (tr_generator_init(h.be, mistral.model, tr_test_llm_preset(mistral.model, "tiny"), &f.gg, &gc, &gen, &e))
                fail_msg("%s", e.msg);
            if (tr_generator_run(gen, f.prompt, tok, NULL, NULL, NULL, &e)) fail_msg("%s", e.msg);
            int64_t differ = 0;
            for (int64_t i = 0; i < n; i++) differ += tok[i] != first[i];
            print_message("top_k 20, temperature 1.5: seed 5 vs seed 6 differ in %lld of %lld tokens\n",
                          (long long)differ, (long long)n);
            assert_true(differ > 0);
            /* sampled, not greedy */
            int64_t not_greedy = 0;
            for (int64_t i = 0; i < n; i++) not_greedy += first[i] != ((const int32_t *)f.want.data)[i];
            assert_true(not_greedy > 0);
            tr_generator_free(gen);
        }
        be_close(&h);
    }
    free(first), free(tok);
    fix_close(&f);
}

/* The decoder's passes with the cache as state: decode's inputs end with cache_pos, its
 * one output is the logits, and it updates the 2 per layer cache PARAMs; a pass with the
 * cache as state and past inputs, present outputs or more tokens than slots is refused. */
static void test_cache_state_pass(void **state) {
    const struct tr_decoder_config *c = tiny_of("mistral");
    struct tr_error e = {0};
    struct tr_graph *g = NULL;
    assert_int_equal(tr_graph_init(&g, &e), TR_OK);
    struct tr_decoder_pass p = {.dtype = TR_DTYPE_F32, .batch = 2, .seq_len = 1, .full_mask = 1, .last_logits = 1,
                                .cache_slots = 9};
    if (tr_decoder_build_pass(c, &p, g, NULL, &e)) fail_msg("%s", e.msg);
    assert_int_equal(tr_graph_n_inputs(g), 4);
    assert_string_equal(tr_node_name(g, tr_graph_input(g, 3)), "cache_pos");
    assert_int_equal(tr_node_shape(g, tr_graph_input(g, 2))[2], 9);
    assert_int_equal(tr_graph_n_outputs(g), 1);
    assert_int_equal(tr_graph_n_updates(g), 2 * c->num_hidden_layers);
    const int k0 = tr_graph_find(g, "cache.0.key");
    assert_true(k0 >= 0 && tr_node_op(g, k0) == TR_OP_PARAM && tr_node_shape(g, k0)[2] == 9);
    assert_int_equal(tr_graph_update_param(g, 0), k0);
    tr_graph_free(g);
    const struct tr_decoder_pass bad[3] = {
        {.dtype = TR_DTYPE_F32, .batch = 2, .seq_len = 1, .full_mask = 1, .present = 1, .cache_slots = 9},
        {.dtype = TR_DTYPE_F32, .batch = 2, .seq_len = 1, .full_mask = 1, .past_len = 4, .cache_slots = 9},
        {.dtype = TR_DTYPE_F32, .batch = 2, .seq_len = 10, .cache_slots = 9},
    };
    for (int i = 0; i < 3; i++) {
        assert_int_equal(tr_graph_init(&g, &e), TR_OK);
        assert_int_equal(tr_decoder_build_pass(c, &bad[i], g, NULL, &e), TR_ERR_INVALID);
        if (!strstr(e.msg, "cache_slots = 9")) fail_msg("the error does not name cache_slots: %s", e.msg);
        tr_graph_free(g);
    }
}

/* The six logits the pick tests draw from, (1,6) f32, p: .027 .327 .006 .327 .296 .016
 * (temperature 1), and gc at its defaults. */
static struct tr_tensor six_logits(struct tr_generate_config *gc) {
    const int64_t shape[2] = {1, 6};
    struct tr_tensor l = tr_test_tensor(TR_DTYPE_F32, 2, shape);
    const float v[6] = {0.5f, 3.0f, -1.0f, 3.0f, 2.9f, 0.0f};
    memcpy(l.data, v, sizeof v);
    struct tr_error e = {0};
    assert_int_equal(tr_generate_config_resolve(NULL, 3, gc, &e), TR_OK);
    return l;
}

/* 3000 draws from the six logits: exactly the tokens in allowed are drawn. */
static void expect_drawn(const struct tr_generate_config *gc, const struct tr_tensor *l, const int *allowed,
                         const char *what) {
    int seen[6] = {0};
    for (int64_t pos = 0; pos < 3000; pos++) {
        int32_t id = tr_generate_pick(gc, l, 0, pos);
        assert_true(id >= 0 && id < 6);
        seen[id]++;
    }
    for (int i = 0; i < 6; i++)
        if ((seen[i] > 0) != allowed[i]) fail_msg("%s: token %d drawn %d times", what, i, seen[i]);
}

/* Draws from row b of r: every one inside the reference nucleus (in), and the frequencies
 * over 20000 draws within 0.012 of its probabilities p. */
static void expect_frequencies(const struct tr_generate_config *gc, const struct tr_tensor *r, int64_t b,
                               const int *in, const double *p, const char *what) {
    const int64_t V = r->shape[1];
    double *freq = calloc((size_t)V, sizeof *freq);
    const int draws = 20000;
    for (int64_t pos = 0; pos < draws; pos++) {
        int32_t id = tr_generate_pick(gc, r, b, pos);
        assert_true(id >= 0 && id < V);
        if (!in[id]) fail_msg("%s: token %d is outside the nucleus", what, id);
        freq[id] += 1.0 / draws;
    }
    double worst = 0;
    for (int64_t i = 0; i < V; i++) worst = fmax(worst, fabs(freq[i] - p[i]));
    free(freq);
    if (worst > 0.012) fail_msg("%s: a frequency is %.4f from its probability", what, worst);
}

/* Top-k picks only among the k largest, and greedy takes the largest (lowest id on a tie). */
static void test_pick(void **state) {
    struct tr_generate_config gc;
    struct tr_tensor l = six_logits(&gc);
    assert_int_equal(tr_generate_pick(&gc, &l, 0, 0), 1);
    gc.top_k_sampling = 1, gc.top_k = 3, gc.temperature = 1.0;
    int seen[6] = {0};
    for (int64_t pos = 0; pos < 400; pos++) seen[tr_generate_pick(&gc, &l, 0, pos)]++;
    assert_int_equal(seen[0] + seen[2] + seen[5], 0);
    assert_true(seen[1] > 0 && seen[3] > 0 && seen[4] > 0);
    gc.temperature = 1e-4; /* a cold top-k is greedy */
    for (int64_t pos = 0; pos < 50; pos++) {
        int32_t p = tr_generate_pick(&gc, &l, 0, pos);
        assert_true(p == 1 || p == 3);
    }
    tr_test_tensor_free(&l);
}

static int desc_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

/* The nucleus of row b by brute force: every token's probability in double, sorted (largest
 * first, lower id on a tie), the prefix until top_p is reached; in[v] = 1 inside it, and
 * p[v] the token's probability renormalised over it. */
static void nucleus_ref(const float *x, int64_t V, double top_p, double t, int *in, double *p) {
    double mx = -INFINITY, z = 0, kept = 0;
    int64_t *ord = malloc(sizeof *ord * (size_t)V);
    for (int64_t v = 0; v < V; v++) mx = fmax(mx, x[v]), ord[v] = v;
    for (int64_t v = 0; v < V; v++) z += exp((x[v] - mx) / t);
    for (int64_t i = 1; i < V; i++) /* insertion sort: a few thousand entries */
        for (int64_t j = i; j > 0 && (x[ord[j]] > x[ord[j - 1]] || (x[ord[j]] == x[ord[j - 1]] && ord[j] < ord[j - 1])); j--) {
            int64_t tmp = ord[j];
            ord[j] = ord[j - 1], ord[j - 1] = tmp;
        }
    memset(in, 0, sizeof *in * (size_t)V);
    for (int64_t i = 0; i < V && (i == 0 || kept < top_p); i++) in[ord[i]] = 1, kept += exp((x[ord[i]] - mx) / t) / z;
    for (int64_t v = 0; v < V; v++) p[v] = in[v] ? exp((x[v] - mx) / t) / z / kept : 0;
    free(ord);
}

/* top_p draws only inside the nucleus, in proportion to the probabilities there: on six
 * logits with hand-worked nuclei, and on 3000 random ones against a brute-force nucleus
 * (frequencies over 20000 draws within 0.012 of the probabilities). */
static void test_pick_top_p(void **state) {
    struct tr_generate_config gc;
    struct tr_tensor l = six_logits(&gc);
    gc.top_p_sampling = 1, gc.temperature = 1.0;
    const struct {
        double top_p;
        int allowed[6];
    } cases[] = {{0.2, {0, 1, 0, 0, 0, 0}},  /* the first token alone crosses it */
                 {0.5, {0, 1, 0, 1, 0, 0}},  /* the tie: lower id first */
                 {0.95, {0, 1, 0, 1, 1, 0}}, /* .327 + .327 + .296 = .951 */
                 {0.96, {1, 1, 0, 1, 1, 0}},
                 {1.0, {1, 1, 1, 1, 1, 1}}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        gc.top_p = cases[c].top_p;
        char what[32];
        snprintf(what, sizeof what, "top_p %g", cases[c].top_p);
        expect_drawn(&gc, &l, cases[c].allowed, what);
    }
    tr_test_tensor_free(&l);

    const int64_t V = 3000, big[2] = {2, V};
    struct tr_tensor r = tr_test_tensor(TR_DTYPE_F32, 2, big);
    tr_test_randn(&r, 41, 2.0);
    int *in = malloc(sizeof *in * (size_t)V);
    double *p = malloc(sizeof *p * (size_t)V);
    const double tops[2] = {0.9, 0.3}, temps[2] = {0.8, 1.3};
    for (int k = 0; k < 2; k++) {
        gc.top_p = tops[k], gc.temperature = temps[k];
        nucleus_ref((const float *)r.data + k * V, V, gc.top_p, gc.temperature, in, p);
        char what[32];
        snprintf(what, sizeof what, "top_p %g", gc.top_p);
        expect_frequencies(&gc, &r, k, in, p, what);
    }
    free(in), free(p);
    tr_test_tensor_free(&r);
}

/* top_k and top_p both given (either sampling): transformers' chain, the nucleus among the
 * top_k largest, ties with the k-th kept (TopKLogitsWarper); one given alone, the other
 * plays no part. Then on 3000 random logits against a brute-force nucleus of the top 40. */
static void test_pick_top_k_top_p(void **state) {
    static const struct {
        const char *lines;
        int64_t top_k;
    } resolve[] = {{"sampling = top_p\ntop_k = 3\n", 3},
                   {"sampling = top_k\ntop_k = 7\ntop_p = 0.5\n", 7},
                   {"sampling = top_p\ntop_p = 0.5\n", 0},
                   {"sampling = greedy\ntop_k = 3\ntop_p = 0.5\n", 0}};
    for (size_t i = 0; i < sizeof resolve / sizeof resolve[0]; i++) {
        char ini[256];
        struct tr_error e = {0};
        static struct tr_config c; /* large */
        struct tr_generate_config gc;
        snprintf(ini, sizeof ini, "[run]\nmodel = gemma\n[generate]\n%s", resolve[i].lines);
        if (tr_config_load_string(ini, "gen.ini", &c, &e) || tr_generate_config_resolve(&c, 1, &gc, &e))
            fail_msg("%s: %s", resolve[i].lines, e.msg);
        assert_int_equal(gc.top_p_top_k, resolve[i].top_k);
        assert_int_equal(gc.top_p_sampling, resolve[i].top_k > 0 || strstr(resolve[i].lines, "= top_p\n") != NULL);
        if (resolve[i].top_k) assert_string_equal(gc.sampling, "top_k+top_p");
    }
    /* top_k = 0 is no top_k, as transformers reads it: top_k sampling over the whole
     * softmax, or top_p alone */
    static const char *const zero[] = {"sampling = top_k\ntop_k = 0\n", "sampling = top_p\ntop_k = 0\ntop_p = 0.5\n"};
    for (int i = 0; i < 2; i++) {
        char ini[256];
        struct tr_error e = {0};
        static struct tr_config c;
        struct tr_generate_config gc;
        snprintf(ini, sizeof ini, "[run]\nmodel = gemma\n[generate]\n%s", zero[i]);
        if (tr_config_load_string(ini, "gen.ini", &c, &e) || tr_generate_config_resolve(&c, 1, &gc, &e))
            fail_msg("%s: %s", zero[i], e.msg);
        assert_true(gc.top_p_sampling && !gc.top_k_sampling && gc.top_p_top_k == 0);
        assert_true(gc.top_p == (i ? 0.5 : 1.0));
        assert_string_equal(gc.sampling, "top_p"); /* reports name what draws: the nucleus (of 1: every token) */
    }

    struct tr_generate_config gc;
    struct tr_tensor l = six_logits(&gc);
    gc.top_p_sampling = 1, gc.temperature = 1.0;
    const struct {
        int64_t k;
        double top_p;
        int allowed[6];
    } cases[] = {{1, 1.0, {0, 1, 0, 1, 0, 0}},  /* the tie with the largest kept */
                 {3, 1.0, {0, 1, 0, 1, 1, 0}},  /* p among the three: .345 .345 .310 */
                 {3, 0.5, {0, 1, 0, 1, 0, 0}},
                 {3, 0.7, {0, 1, 0, 1, 1, 0}},  /* .690 < .7 */
                 {4, 0.96, {0, 1, 0, 1, 1, 0}}, /* .973 among four (.951 of all: alone, top_p .96 takes token 0) */
                 {4, 0.98, {1, 1, 0, 1, 1, 0}},
                 {5, 1.0, {1, 1, 0, 1, 1, 1}}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        gc.top_p_top_k = cases[c].k, gc.top_p = cases[c].top_p;
        char what[48];
        snprintf(what, sizeof what, "top_k %lld, top_p %g", (long long)cases[c].k, cases[c].top_p);
        expect_drawn(&gc, &l, cases[c].allowed, what);
    }
    tr_test_tensor_free(&l);

    const int64_t V = 3000, big[2] = {1, V}, K = 40;
    struct tr_tensor r = tr_test_tensor(TR_DTYPE_F32, 2, big);
    tr_test_randn(&r, 43, 2.0);
    float *masked = malloc(sizeof *masked * (size_t)V), *sorted = malloc(sizeof *sorted * (size_t)V);
    int *in = malloc(sizeof *in * (size_t)V);
    double *p = malloc(sizeof *p * (size_t)V);
    memcpy(sorted, r.data, sizeof *sorted * (size_t)V);
    qsort(sorted, (size_t)V, sizeof *sorted, desc_float);
    for (int64_t i = 0; i < V; i++) masked[i] = ((float *)r.data)[i] >= sorted[K - 1] ? ((float *)r.data)[i] : -INFINITY;
    gc.top_p_top_k = K, gc.top_p = 0.8, gc.temperature = 1.1;
    nucleus_ref(masked, V, gc.top_p, gc.temperature, in, p);
    expect_frequencies(&gc, &r, 0, in, p, "top_k 40, top_p 0.8");
    free(masked), free(sorted), free(in), free(p);
    tr_test_tensor_free(&r);
}

/* The tokens within reach of a draw (tr_generate_pick_reach), which the runner accepts
 * from another backend in place of the reference's: on random logits rounded to bf16
 * (ties and near ties, as a bf16 model's logits have them), each draw is made again from
 * the logits with every one moved by up to e; whatever it draws must be in the reach.
 * The reach must be tight too at a small e (some the pick alone, few unbounded, a few
 * tokens on average). */
static void test_pick_reach(void **state) {
    (void)state;
    const int64_t V = 300, shape[2] = {1, V};
    struct tr_tensor r = tr_test_tensor(TR_DTYPE_F32, 2, shape), q = tr_test_tensor(TR_DTYPE_F32, 2, shape);
    tr_test_randn(&r, 47, 1.5);
    float *x = r.data, *y = q.data;
    for (int64_t v = 0; v < V; v++) x[v] = tr_bf16_to_f32(tr_f32_to_bf16(x[v]));
    const struct {
        int top_k, top_p;
        int64_t k, chain_k;
        double p, t;
    } cases[] = {{1, 0, 40, 0, 0, 1.0}, {1, 0, 12, 0, 0, 0.6}, {0, 1, 0, 0, 0.9, 0.8}, {0, 1, 0, 30, 0.7, 1.2}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        struct tr_generate_config gc;
        struct tr_error e = {0};
        assert_int_equal(tr_generate_config_resolve(NULL, 3, &gc, &e), TR_OK);
        gc.top_k_sampling = cases[c].top_k, gc.top_p_sampling = cases[c].top_p, gc.top_k = cases[c].k;
        gc.top_p_top_k = cases[c].chain_k, gc.top_p = cases[c].p, gc.temperature = cases[c].t;
        for (int tight = 0; tight < 2; tight++) {
            const double eps = tight ? 0.01 : 0.02 * 1.5 * 3; /* tol · |a top logit|, and a tighter one */
            int alone = 0, changed = 0, many = 0, draws = 3000;
            double sizes = 0;
            uint64_t rng = 99;
            for (int64_t pos = 0; pos < draws; pos++) {
                int32_t ids[32];
                const int n = tr_generate_pick_reach(&gc, &r, 0, pos, eps, ids, 32);
                assert_true(n >= 1);
                alone += n == 1, many += n > 32, sizes += n > 32 ? 0 : n;
                for (int64_t v = 0; v < V; v++) { /* a perturbation within eps, half of them at its ends */
                    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                    const double u = (double)(rng >> 11) / 9007199254740992.0;
                    y[v] = x[v] + (float)(eps * 0.999 * (u < 0.25 ? -1 : u > 0.75 ? 1 : 4 * u - 2));
                }
                const int32_t other = tr_generate_pick(&gc, &q, 0, pos);
                if (other == ids[0]) continue;
                changed++;
                int in = n > 32;
                for (int i = 1; i < n && i < 32; i++) in |= ids[i] == other;
                if (!in) fail_msg("case %zu, e %g, draw %lld: logits within it drew %d, outside the reach of %d (%d "
                                  "tokens)", c, eps, (long long)pos, other, ids[0], n);
            }
            print_message("case %zu, e %g: %d of %d draws changed under the perturbation, all within reach; reaches: "
                          "%d the pick alone, %d any token, %.2f tokens on average otherwise\n", c, eps, changed,
                          draws, alone, many, many < draws ? sizes / (draws - many) : 0.0);
            assert_true(changed > 10);
            if (tight) assert_true(many < draws / 10 && sizes / (draws - many) < 16); /* it bites */
        }
    }
    tr_test_tensor_free(&r);
    tr_test_tensor_free(&q);
}

/* [model] lora_predict = true: predict applies the adapters as the PeftModel does
 * (tests/fixtures/make_llm_lora_predict_fixture.py: NAME_lora.safetensors' adapters, r 4,
 * alpha 8 on q_proj and v_proj, beside the base model in one weights directory), on every
 * backend in f32 and bf16; and generate with them runs and agrees across the backends,
 * its tokens not the plain model's. */
static void lora_predict_matches_peft(const struct tr_test_llm *t, const char *name) {
    char dir[] = "/tmp/trident-lora-XXXXXX", a[600], b[600], ref[600];
    assert_non_null(mkdtemp(dir));
    snprintf(a, sizeof a, "%s/model.safetensors", dir);
    snprintf(b, sizeof b, "%s/adapter_model.safetensors", dir);
    snprintf(ref, sizeof ref, FIX "%s_lora_predict.safetensors", name);
    char src[600];
    snprintf(src, sizeof src, FIX "%s.safetensors", name);
    assert_int_equal(symlink(src, a), 0);
    snprintf(src, sizeof src, FIX "%s_lora.safetensors", name);
    assert_int_equal(symlink(src, b), 0);
    struct tr_decoder_config c = *tiny_of(t->model->name);
    c.lora_rank = 4, c.lora_alpha = 8, c.lora_predict = 1;
    snprintf(c.lora_targets, sizeof c.lora_targets, "q_proj,v_proj");
    tr_test_llm_predict_vs(t, &c, TR_DTYPE_F32, dir, ref, "logits");
    tr_test_llm_predict_vs(t, &c, TR_DTYPE_BF16, dir, ref, "logits");
    int32_t tokens[2][8];
    for (int on = 0; on < 2; on++) {
        char ini[1024];
        snprintf(ini, sizeof ini,
                 "[run]\nmodel = %s\npreset = tiny\ntask = generate\nbackends = torch, torch:reduce-overhead, tf, jax\n"
                 "batch = 2\nsteps = 1\nwarmup = 1\nweights = %s\n[model]\nlora_rank = 4\nlora_alpha = 8\n"
                 "lora_predict = %s\n[generate]\nmax_length = 14\nprompt_len = 6\n",
                 t->model->name, dir, on ? "true" : "false");
        struct tr_error e;
        if (run_ini(ini, &e)) fail_msg("%s lora_predict = %d: %s", name, on, e.msg);
        for (int i = 0; i < rep.n_rows; i++) assert_true(rep.rows[i].ok && rep.rows[i].agrees);
        memcpy(tokens[on], rep.sample_tokens, sizeof tokens[on]);
    }
    if (t == &mistral) /* its adapters move the logits by 25% (Gemma's by 4%, too little to part sample 0's) */
        assert_true(memcmp(tokens[0], tokens[1], sizeof tokens[0]) != 0);
    unlink(a), unlink(b), rmdir(dir);
}
static void test_lora_predict_matches_peft(void **state) {
    (void)state;
    struct tr_decoder_config none = *tiny_of("gemma");
    none.lora_rank = 0, none.lora_predict = 1;
    tr_test_llm_build_fails(&tr_model_gemma, &none, TR_TASK_PREDICT, TR_DTYPE_F32, 8, TR_ERR_INVALID,
                            "lora_predict = true with lora_rank = 0", "expected lora_rank >= 1");
    lora_predict_matches_peft(&gemma, "gemma_tiny");
    lora_predict_matches_peft(&mistral, "mistral_tiny");
}

/* kern/st of a generate step is the whole call's: the prefill's kernels, plus a decode
 * pass's for every token after the first (one new token: the prefill's alone, not 0). */
static void test_kernel_calls_per_call(void **state) {
    (void)state;
    uint64_t calls[2];
    for (int i = 0; i < 2; i++) {
        char ini[512];
        snprintf(ini, sizeof ini, "[run]\nmodel = gemma\npreset = tiny\ntask = generate\nbackends = tf\nbatch = 2\n"
                 "steps = 1\nwarmup = 1\n[generate]\nprompt_len = 4\nmax_length = %d\n", i ? 7 : 5);
        struct tr_error e;
        if (run_ini(ini, &e)) fail_msg("%s", e.msg);
        calls[i] = rep.rows[0].stats.kernel_calls;
    }
    assert_true(calls[0] > 0);
    assert_true((calls[1] - calls[0]) % 2 == 0 && calls[1] > calls[0]); /* two more decode passes */
}

/* bf16 with top_k or top_p: the backends' logits differ by bf16's rounding, so draws part
 * where that can move them (the runner accepts those, and only those). */
static void test_runner_sampled_bf16(void **state) {
    (void)state;
    check_runner_dtype("gemma", "bf16", "", "sampling = top_k\ntop_k = 50\n");
    check_runner_dtype("mistral", "bf16", "", "sampling = top_p\ntop_p = 0.9\n");
}

static void test_runner_gemma_top_p(void **state) {
    check_runner("gemma", "sampling = top_p\ntop_p = 0.8\ntemperature = 0.7\nseed = 11\n");
    assert_string_equal(rep.gen.sampling, "top_p");
    assert_true(rep.gen.top_p == 0.8);
    check_state_report("gemma");
}

TR_TEST_MAIN(NULL, NULL, test_prompts_nul, test_bad_prompt_len, test_max_length_past_positions, test_bad_keys, test_does_not_fit, test_pick,
             test_cache_state_pass, test_runner_gemma_greedy, test_runner_mistral_greedy, test_runner_gemma_top_k,
             test_pick_top_p, test_pick_top_k_top_p, test_runner_gemma_top_p, test_runner_mistral_bf16, test_runner_cache_inputs, test_gemma_matches_hf, test_mistral_matches_hf,
             test_top_k_seeds, test_pick_reach, test_runner_sampled_bf16, test_kernel_calls_per_call,
             test_lora_predict_matches_peft)
