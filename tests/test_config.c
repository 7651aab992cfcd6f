/* INI configuration: every error path names the file, the line, the key and the value;
 * a good file sets every field. Files are written into a fresh temporary directory. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "testutil.h"
#include "trident/parse.h"
#include "trident/config.h"

static void check_error(const char *name, const char *text, int status, const char *const *needles, int n) {
    char path[PATH_MAX];
    tr_test_dir_file(name, text, path, sizeof path);
    struct tr_config cfg;
    struct tr_error err = {0};
    tr_test_expect_failure(name, tr_config_load(path, &cfg, &err), &err, status, needles, n);
}

/* Load text as tr_test_dir/NAME, expect status and a message holding every string given. */
#define expect_error(name, text, status, ...)                                       \
    do {                                                                             \
        const char *const needles_[] = {__VA_ARGS__};                                \
        check_error(name, text, status, needles_, (int)(sizeof needles_ / sizeof needles_[0])); \
    } while (0)

/* A file that must not load: its name, text, the status and what the message holds. */
struct refusal {
    const char *name, *text;
    int status;
    const char *needles[4]; /* NULL past the last */
};

static void expect_errors(const struct refusal *r, size_t n) {
    for (size_t i = 0; i < n; i++) {
        int k = 0;
        while (k < 4 && r[i].needles[k]) k++;
        check_error(r[i].name, r[i].text, r[i].status, r[i].needles, k);
    }
}
#define EXPECT_ERRORS(table) expect_errors((table), sizeof(table) / sizeof((table)[0]))

static void load_ok(const char *name, const char *text, struct tr_config *cfg) {
    char path[PATH_MAX];
    tr_test_dir_file(name, text, path, sizeof path);
    struct tr_error err = {0};
    int rc = tr_config_load(path, cfg, &err);
    if (rc != TR_OK) fail_msg("%s: status %d: %s", name, rc, err.msg);
}

/* [run] math: parsed, defaulted from dtype for reports, checked against dtype and device. */
static void test_math(void **state) {
    (void)state;
    struct tr_config cfg;
    load_ok("math1.ini", "[run]\ndtype = bf16\n", &cfg);
    assert_int_equal(cfg.math, TR_MATH_DEFAULT);
    assert_string_equal(tr_config_math_name(&cfg), "bf16");
    load_ok("math2.ini", "[run]\nmath = f32\n", &cfg);
    assert_int_equal(cfg.math, TR_MATH_F32);
    assert_string_equal(tr_config_math_name(&cfg), "f32");
    load_ok("math3.ini", "[run]\ndevice = cuda\nmath = tf32\n", &cfg);
    assert_int_equal(cfg.math, TR_MATH_TF32);
    assert_string_equal(tr_config_math_name(&cfg), "tf32");
    load_ok("math4.ini", "[run]\nmath = bf16\ndtype = bf16\n", &cfg);
    assert_int_equal(cfg.math, TR_MATH_BF16);
    static const struct refusal bad[] = {
        {"math5.ini", "[run]\nmath = fp8\n", TR_ERR_INVALID,
         {"math5.ini:2: [run] math = fp8:", "expected f32, tf32 or bf16"}},
        {"math6.ini", "[run]\nmath = default\n", TR_ERR_INVALID, {"math6.ini:2: [run] math = default:"}},
        {"math7.ini", "[run]\n\nmath = tf32\n", TR_ERR_INVALID,
         {"math7.ini:3: [run] math = tf32", "device = cpu", "expected device = cuda"}},
        {"math8.ini", "[run]\nmath = bf16\n", TR_ERR_INVALID,
         {"math8.ini:2: [run] math = bf16", "dtype = f32", "expected dtype = bf16"}},
        {"math9.ini", "[run]\ndtype = bf16\ndevice = cuda\nmath = tf32\n", TR_ERR_INVALID,
         {"math9.ini:4: [run] math = tf32 with dtype = bf16", "expected dtype = f32"}},
    };
    EXPECT_ERRORS(bad);
}

static void test_defaults(void **state) {
    (void)state;
    struct tr_config cfg;
    memset(&cfg, 0x5a, sizeof cfg);
    tr_config_defaults(&cfg);
    assert_string_equal(cfg.model, "bert");
    assert_string_equal(cfg.preset, "tiny");
    assert_string_equal(cfg.task, "predict");
    assert_int_equal(cfg.n_backends, 1);
    assert_string_equal(cfg.backends[0].name, "torch");
    assert_string_equal(cfg.backends[0].mode, "");
    assert_string_equal(cfg.backends[0].path, "");
    assert_string_equal(cfg.device, "cpu");
    assert_int_equal(cfg.device_type, TR_DEVICE_CPU);
    assert_int_equal(cfg.dtype, TR_DTYPE_F32);
    assert_int_equal(cfg.batch, 8);
    assert_int_equal(cfg.seq_len, 128);
    assert_int_equal(cfg.steps, 10);
    assert_int_equal(cfg.warmup, 2);
    assert_int_equal(cfg.seed, 1234);
    assert_string_equal(cfg.weights, "");
    assert_string_equal(cfg.plugin_path, "");
    assert_int_equal(cfg.n_kv, 0);
    assert_int_equal(cfg.threads, tr_config_default_threads());
    assert_int_equal(cfg.threads_line, 0);
}

/* [run] threads: 1 to 1024, its line kept (the program applies a given count over
 * OMP_NUM_THREADS); absent, the cores this process may run on. */
static void test_threads(void **state) {
    (void)state;
    cpu_set_t set;
    assert_int_equal(sched_getaffinity(0, sizeof set, &set), 0);
    assert_int_equal(tr_config_default_threads(), CPU_COUNT(&set));
    struct tr_config cfg;
    load_ok("thr1.ini", "[run]\nmodel = bert\nthreads = 3\n", &cfg);
    assert_int_equal(cfg.threads, 3);
    assert_int_equal(cfg.threads_line, 3);
    load_ok("thr2.ini", "[run]\nthreads = 1024 ; the most\n", &cfg);
    assert_int_equal(cfg.threads, 1024);
    load_ok("thr3.ini", "[run]\nbatch = 2\n", &cfg);
    assert_int_equal(cfg.threads, CPU_COUNT(&set));
    assert_int_equal(cfg.threads_line, 0);
    static const struct refusal bad[] = {
        {"thr4.ini", "[run]\n\nthreads = 0\n", TR_ERR_INVALID,
         {"thr4.ini:3: [run] threads = 0:", "expected an integer from 1 to 1024 (out of range)", "every core"}},
        {"thr5.ini", "[run]\nthreads = 1025\n", TR_ERR_INVALID,
         {"thr5.ini:2: [run] threads = 1025:", "from 1 to 1024"}},
        {"thr6.ini", "[run]\nthreads = two\n", TR_ERR_INVALID, {"thr6.ini:2: [run] threads = two:", "not a number"}},
        {"thr7.ini", "[run]\nthreads = 2.5\n", TR_ERR_INVALID,
         {"thr7.ini:2: [run] threads = 2.5:", "trailing characters"}},
        {"thr8.ini", "[run]\nthreads = -2\n", TR_ERR_INVALID, {"thr8.ini:2: [run] threads = -2:"}},
        {"thr9.ini", "[run]\nthreads = 2\nthreads = 4\n", TR_ERR_INVALID,
         {"thr9.ini:3: [run] threads = 4:", "lines 2 and 3"}},
    };
    EXPECT_ERRORS(bad);
    /* the unknown-key message lists it */
    expect_error("thr10.ini", "[run]\nthread = 2\n", TR_ERR_NOT_FOUND, "thr10.ini:2: [run] thread = 2:",
                 "math, threads, tolerance, inputs, reference, reference_tolerance, weights_variant, missing, "
                 "schedule, isolate, "
                 "backend_timeout, parallel, bucket_mb, collective_timeout, check_every)");
}

/* The data-parallel keys: parallel, bucket_mb, collective_timeout, check_every. */
static void test_parallel_keys(void **state) {
    (void)state;
    struct tr_config cfg;
    load_ok("par0.ini", "[run]\nbatch = 2\n", &cfg);
    assert_int_equal(cfg.parallel, TR_PARALLEL_NONE);
    assert_true(cfg.bucket_mb == 25 && cfg.collective_timeout == 60);
    assert_int_equal(cfg.check_every, 10);
    assert_int_equal(cfg.ranks, 1);
    load_ok("par1.ini", "[run]\nparallel = data\nbucket_mb = 0.5\ncollective_timeout = 5\ncheck_every = 0\n", &cfg);
    assert_int_equal(cfg.parallel, TR_PARALLEL_DATA);
    assert_true(cfg.bucket_mb == 0.5 && cfg.collective_timeout == 5);
    assert_int_equal(cfg.check_every, 0);
    static const struct refusal bad[] = {
        {"par2.ini", "[run]\nparallel = model\n", TR_ERR_INVALID,
         {"par2.ini:2: [run] parallel = model:", "expected none", "or data"}},
        {"par3.ini", "[run]\nbucket_mb = 0\n", TR_ERR_INVALID,
         {"par3.ini:2: [run] bucket_mb = 0:", "MiB from 1/1024 to 65536"}},
        {"par4.ini", "[run]\ncollective_timeout = 0.5\n", TR_ERR_INVALID,
         {"par4.ini:2: [run] collective_timeout = 0.5:", "seconds from 1 to 604800"}},
        {"par5.ini", "[run]\ncheck_every = -1\n", TR_ERR_INVALID,
         {"par5.ini:2: [run] check_every = -1:", "steps from 0 to 1000000"}},
    };
    EXPECT_ERRORS(bad);
}

/* [run] tolerance: the backends' agreement, above 0 and at most 1; absent, 0 (the dtype's). */
static void test_tolerance(void **state) {
    (void)state;
    struct tr_config cfg;
    load_ok("tol1.ini", "[run]\ntolerance = 5e-2\n", &cfg);
    assert_true(cfg.tolerance == 5e-2);
    load_ok("tol2.ini", "[run]\n", &cfg);
    assert_true(cfg.tolerance == 0.0);
    const char *bad[] = {"0", "-1e-3", "1.5", "x", "1e-2x", "nan"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[64], want[64];
        snprintf(text, sizeof text, "[run]\ntolerance = %s\n", bad[i]);
        snprintf(want, sizeof want, "tol.ini:2: [run] tolerance = %s:", bad[i]);
        expect_error("tol.ini", text, TR_ERR_INVALID, want, "above 0 and at most 1");
        snprintf(text, sizeof text, "[run]\nreference_tolerance = %s\n", bad[i]);
        snprintf(want, sizeof want, "tol.ini:2: [run] reference_tolerance = %s:", bad[i]);
        expect_error("tol.ini", text, TR_ERR_INVALID, want, "each backend against [run] reference");
    }
    /* the reference's own bound, only with a reference to hold to it */
    char ref[256], text[512];
    tr_test_dir_file("tol_ref.safetensors", "x", ref, sizeof ref);
    snprintf(text, sizeof text, "[run]\nreference = %s\nreference_tolerance = 0.067\n", ref);
    load_ok("tol3.ini", text, &cfg);
    assert_true(cfg.reference_tolerance == 0.067 && cfg.tolerance == 0.0);
    expect_error("tol.ini", "[run]\ntolerance = 1e-3\nreference_tolerance = 1e-2\n", TR_ERR_INVALID,
                 "tol.ini:3: [run] reference_tolerance without a [run] reference", "reference = FILE.safetensors");
}

/* [run] inputs and reference: files resolved against the INI's directory, that must exist
 * and be regular files; missing and schedule: their words only. */
static void test_run_files_and_words(void **state) {
    (void)state;
    struct tr_config cfg;
    char batch[256];
    tr_test_dir_file("rf_batch.safetensors", "x", batch, sizeof batch);
    load_ok("rf1.ini", "[run]\ninputs = rf_batch.safetensors\nreference = rf_batch.safetensors\nmissing = seed\n"
            "schedule = sequential\n", &cfg);
    assert_string_equal(cfg.inputs, batch);
    assert_string_equal(cfg.reference, batch);
    assert_int_equal(cfg.inputs_line, 2);
    assert_int_equal(cfg.reference_line, 3);
    assert_int_equal(cfg.missing_seed, 1);
    assert_int_equal(cfg.schedule, TR_SCHEDULE_SEQUENTIAL);
    load_ok("rf2.ini", "[run]\n", &cfg);
    assert_int_equal(cfg.inputs[0] | cfg.reference[0], 0);
    assert_int_equal(cfg.missing_seed, 0);
    assert_int_equal(cfg.schedule, TR_SCHEDULE_DEFAULT);
    static const struct refusal bad[] = {
        {"rf3.ini", "[run]\ninputs = nope.safetensors\n", TR_ERR_IO,
         {"rf3.ini:2: [run] inputs = nope.safetensors:", "No such file or directory", "synthetic batch"}},
        {"rf4.ini", "[run]\nreference = .\n", TR_ERR_IO, {"rf4.ini:2: [run] reference = .:", "not a regular file"}},
        {"rf5.ini", "[run]\nmissing = zero\n", TR_ERR_INVALID,
         {"rf5.ini:2: [run] missing = zero:", "expected error", "or seed"}},
        {"rf6.ini", "[run]\nschedule = parallel\n", TR_ERR_INVALID,
         {"rf6.ini:2: [run] schedule = parallel:", "expected interleaved", "or sequential"}},
    };
    EXPECT_ERRORS(bad);
    load_ok("rf7.ini", "[run]\nisolate = off\nbackend_timeout = 2.5\n", &cfg);
    assert_int_equal(cfg.isolate, 0);
    assert_true(cfg.backend_timeout == 2.5);
    load_ok("rf8.ini", "[run]\n", &cfg);
    assert_int_equal(cfg.isolate, 1);
    assert_true(cfg.backend_timeout == 1800);
    expect_error("rf9.ini", "[run]\nisolate = maybe\n", TR_ERR_INVALID, "rf9.ini:2: [run] isolate = maybe:",
                 "expected on (each backend in a child process");
    expect_error("rf10.ini", "[run]\nbackend_timeout = 0\n", TR_ERR_INVALID, "rf10.ini:2: [run] backend_timeout = 0:",
                 "expected seconds from 1 to 604800");
    /* weights_variant: a variant's name, with weights to pick from */
    char text[512];
    snprintf(text, sizeof text, "[run]\nweights = %s\nweights_variant = fp16\n", batch);
    load_ok("rf11.ini", text, &cfg);
    assert_string_equal(cfg.weights_variant, "fp16");
    load_ok("rf12.ini", "[run]\n", &cfg);
    assert_string_equal(cfg.weights_variant, "");
    static const struct refusal badv[] = {
        {"rf13.ini", "[run]\nweights_variant = fp16\n", TR_ERR_INVALID,
         {"rf13.ini:2: [run] weights_variant = fp16 without [run] weights", "weights = DIR"}},
        {"rf14.ini", "[run]\nweights_variant = FP16\n", TR_ERR_INVALID,
         {"rf14.ini:2: [run] weights_variant = FP16:", "expected a variant's name", "fp16, non_ema"}},
        {"rf15.ini", "[run]\nweights_variant = fp16.safetensors\n", TR_ERR_INVALID,
         {"rf15.ini:2: [run] weights_variant = fp16.safetensors:"}},
    };
    EXPECT_ERRORS(badv);
}

/* Every key set, with the comment and spacing forms the header comment of config.c allows. */
static void test_good_file(void **state) {
    (void)state;
    char weights[256], plugs[256], abs_so[256], text[4096];
    tr_test_dir_file("good_weights.safetensors", "not really safetensors", weights, sizeof weights);
    tr_test_dir_file("good_plugins", NULL, plugs, sizeof plugs);
    assert_int_equal(mkdir(plugs, 0755) == 0 || errno == EEXIST, 1);
    tr_test_dir_file("x/libtrident_backend_ext.so", NULL, abs_so, sizeof abs_so);
    snprintf(text, sizeof text,
             "; a comment\n"
             "# another comment\n"
             "[run]   ; inline comment after a section\n"
             "model = gemma_2b.v1-x\n"
             "  preset = base      \n"            /* indented, trailing spaces */
             "task = fit ; inline comment\n"
             "backends = torch:reduce-overhead , jax,plugs/libtrident_backend_tf.so, %s:fast\n"
             "device = cuda\t\n"
             "dtype = bf16\n"
             "batch = 32\r\n"                    /* a CRLF line */
             "seq_len = 1048576\n"
             "steps = 100\n"
             "warmup = 1\n"
             "seed = 18446744073709551615\n"
             "weights = good_weights.safetensors\n"
             "threads = 6\n"
             "\n"
             "[plugins]\n"
             "path = good_plugins\n"
             "[backend.torch]\n"
             "threads = 4\n"
             "[model]\n"
             "hidden: 128\n"
             "name = a value with spaces\n",
             abs_so);
    struct tr_config cfg;
    load_ok("good.ini", text, &cfg);
    char expect[PATH_MAX + 64];
    tr_test_dir_file("good.ini", NULL, expect, sizeof expect);
    assert_string_equal(cfg.file, expect);
    assert_string_equal(cfg.dir, tr_test_dir);
    assert_string_equal(cfg.model, "gemma_2b.v1-x");
    assert_string_equal(cfg.preset, "base");
    assert_string_equal(cfg.task, "fit");
    assert_string_equal(cfg.device, "cuda");
    assert_int_equal(cfg.device_type, TR_DEVICE_CUDA);
    assert_int_equal(cfg.dtype, TR_DTYPE_BF16);
    assert_int_equal(cfg.batch, 32);
    assert_int_equal(cfg.seq_len, 1 << 20);
    assert_int_equal(cfg.steps, 100);
    assert_int_equal(cfg.warmup, 1);
    assert_true(cfg.seed == UINT64_MAX);
    assert_int_equal(cfg.threads, 6);
    assert_int_equal(cfg.threads_line, 16);
    assert_string_equal(cfg.weights, weights);
    assert_string_equal(cfg.plugin_path, plugs);

    assert_int_equal(cfg.n_backends, 4);
    assert_int_equal(cfg.backends_line, 7);
    assert_string_equal(cfg.backends[0].spec, "torch:reduce-overhead");
    assert_string_equal(cfg.backends[0].name, "torch");
    assert_string_equal(cfg.backends[0].mode, "reduce-overhead");
    assert_string_equal(cfg.backends[0].path, "");
    assert_string_equal(cfg.backends[1].spec, "jax");
    assert_string_equal(cfg.backends[1].name, "jax");
    assert_string_equal(cfg.backends[1].mode, "");
    assert_string_equal(cfg.backends[2].name, "tf");
    assert_string_equal(cfg.backends[2].mode, "");
    snprintf(expect, sizeof expect, "%s/plugs/libtrident_backend_tf.so", tr_test_dir);
    assert_string_equal(cfg.backends[2].path, expect);
    assert_string_equal(cfg.backends[3].name, "ext");
    assert_string_equal(cfg.backends[3].mode, "fast");
    assert_string_equal(cfg.backends[3].path, abs_so);

    assert_int_equal(cfg.n_kv, 3);
    const char *want[3][4] = {{"backend.torch", "threads", "4", "21"},
                              {"model", "hidden", "128", "23"},
                              {"model", "name", "a value with spaces", "24"}};
    for (int i = 0; i < 3; i++) {
        assert_string_equal(cfg.kv[i].section, want[i][0]);
        assert_string_equal(cfg.kv[i].key, want[i][1]);
        assert_string_equal(cfg.kv[i].value, want[i][2]);
        assert_int_equal(cfg.kv[i].line, atoi(want[i][3]));
    }
}

/* A file that sets nothing keeps the defaults; loading resets an old config. */
static void test_empty_file_keeps_defaults(void **state) {
    (void)state;
    struct tr_config cfg, def;
    memset(&cfg, 0x33, sizeof cfg);
    load_ok("empty.ini", "; nothing\n\n[run]\n[model]\n", &cfg);
    tr_config_defaults(&def);
    assert_int_equal(cfg.batch, def.batch);
    assert_int_equal(cfg.n_backends, 1);
    assert_string_equal(cfg.backends[0].name, "torch");
    assert_int_equal(cfg.n_kv, 0);
    assert_string_equal(cfg.weights, "");
}

static void test_load_string(void **state) {
    (void)state;
    struct tr_config cfg;
    struct tr_error err = {0};
    assert_int_equal(tr_config_load_string("[run]\nbatch = 3\n", "inline.ini", &cfg, &err), TR_OK);
    assert_int_equal(cfg.batch, 3);
    assert_string_equal(cfg.file, "inline.ini");
    assert_string_equal(cfg.dir, ".");
    assert_int_equal(tr_config_load_string("[run]\nbackends = a/b.so\n", "conf/sub/x.ini", &cfg, &err), TR_OK);
    assert_string_equal(cfg.dir, "conf/sub");
    assert_string_equal(cfg.backends[0].path, "conf/sub/a/b.so");
    assert_string_equal(cfg.backends[0].name, "b");
    assert_int_equal(tr_config_load_string("[run]\nbatch = 0\n", "mem.ini", &cfg, &err), TR_ERR_INVALID);
    assert_non_null(strstr(err.msg, "mem.ini:2: [run] batch = 0"));
    /* A NULL err is allowed: the status alone still says what happened. */
    assert_int_equal(tr_config_load_string("[rnu]\n", "mem.ini", &cfg, NULL), TR_ERR_NOT_FOUND);
    assert_int_equal(tr_config_load_string("[run]\nx\n", "mem.ini", &cfg, NULL), TR_ERR_FORMAT);
}

static void test_unknown_section(void **state) {
    (void)state;
    expect_error("sec1.ini", "[run]\nmodel = bert\n\n[rnu]\nbatch = 3\n", TR_ERR_NOT_FOUND, "sec1.ini:4: [rnu]:",
                 "unknown section", "[backend.NAME]");
    /* A section with no keys is still checked (inih alone would never tell us). */
    static const struct refusal bad[] = {
        {"sec2.ini", "[run]\nbatch = 3\n[Model]\n", TR_ERR_NOT_FOUND, {"sec2.ini:3: [Model]:", "unknown section"}},
        {"sec3.ini", "[backend.to rch]\nthreads = 2\n", TR_ERR_INVALID,
         {"sec3.ini:1: [backend.to rch]", "'to rch'", "letters, digits, '_' and '-'"}},
        {"sec4.ini", "[backend.]\n", TR_ERR_INVALID, {"sec4.ini:1: [backend.]"}},
        {"sec5.ini", "[run] model = bert\n", TR_ERR_FORMAT, {"sec5.ini:1: [run]:", "unexpected text"}},
    };
    EXPECT_ERRORS(bad);
}

/* "did you mean": an edit per three letters (at least one), a swap of neighbours one edit */
static void test_nearest(void **state) {
    (void)state;
    static const char *const words[] = {"steps", "warmup", "seq_len", "learning_rate", "lora_rank", "lora_alpha"};
    assert_string_equal(tr_text_nearest("stpes", words, 6), "steps");
    assert_string_equal(tr_text_nearest("Warmup", words, 6), "warmup");
    assert_string_equal(tr_text_nearest("seqlen", words, 6), "seq_len");
    assert_string_equal(tr_text_nearest("learning_rat", words, 6), "learning_rate");
    assert_string_equal(tr_text_nearest("lora_rnak", words, 6), "lora_rank");
    assert_null(tr_text_nearest("batch", words, 6));
    assert_null(tr_text_nearest("x", words, 6));
    assert_null(tr_text_nearest("stpse", words, 6)); /* two edits in five letters */
}

static void test_unknown_keys(void **state) {
    (void)state;
    static const struct refusal bad[] = {
        {"key1.ini", "[run]\nmodel = bert\nbacth = 8\n", TR_ERR_NOT_FOUND,
         {"key1.ini:3: [run] bacth = 8:", "unknown key; did you mean 'batch'?", "batch, seq_len", "weights"}},
        /* a key of another section: where it goes */
        {"key4.ini", "[run]\nmodel = bert\nlearning_rate = 0.1\n", TR_ERR_NOT_FOUND,
         {"key4.ini:3: [run] learning_rate = 0.1:", "learning_rate is a [train] key: move it there"}},
        {"key2.ini", "[plugins]\npth = /tmp\n", TR_ERR_NOT_FOUND,
         {"key2.ini:2: [plugins] pth = /tmp:", "unknown key (expected path)"}},
        {"key3.ini", "model = bert\n[run]\n", TR_ERR_FORMAT, {"key3.ini:1: model = bert", "before any section"}},
    };
    EXPECT_ERRORS(bad);
    /* A [model] key longer than struct tr_config_kv holds is refused, not cut. */
    expect_error("key4.ini",
                 "[model]\nabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghij = 1\n",
                 TR_ERR_FORMAT, "key4.ini:2:", "63 characters");
}

static void test_bad_integers(void **state) {
    (void)state;
    static const struct refusal bad[] = {
        {"int1.ini", "[run]\nbatch = abc\n", TR_ERR_INVALID,
         {"int1.ini:2: [run] batch = abc:", "expected an integer from 1 to 1048576", "not a number"}},
        {"int2.ini", "[run]\n\n\n\n\n\nbatch = -3\n", TR_ERR_INVALID,
         {"int2.ini:7: [run] batch = -3:", "expected an integer from 1 to 1048576", "out of range"}},
        {"int3.ini", "[run]\nseq_len = 1048577\n", TR_ERR_INVALID,
         {"int3.ini:2: [run] seq_len = 1048577:", "out of range"}},
        {"int4.ini", "[run]\nsteps = 10x\n", TR_ERR_INVALID, {"int4.ini:2: [run] steps = 10x:", "trailing characters"}},
        {"int5.ini", "[run]\nsteps = 0\n", TR_ERR_INVALID, {"int5.ini:2: [run] steps = 0:", "from 1 to"}},
        {"int6.ini", "[run]\nwarmup = 0\n", TR_ERR_INVALID, {"int6.ini:2: [run] warmup = 0:", "from 1 to"}},
        {"int7.ini", "[run]\nbatch = 99999999999999999999999\n", TR_ERR_INVALID,
         {"int7.ini:2: [run] batch = 99999999999999999999999:", "out of range"}},
        {"int8.ini", "[run]\nbatch = 0x10\n", TR_ERR_INVALID,
         {"int8.ini:2: [run] batch = 0x10:", "trailing characters"}},
        {"int9.ini", "[run]\nbatch =\n", TR_ERR_INVALID, {"int9.ini:2: [run] batch = :", "not a number"}},
        {"int10.ini", "[run]\nbatch = 8 # eight\n", TR_ERR_INVALID,
         {"int10.ini:2: [run] batch = 8 # eight:", "trailing characters"}},
        {"seed1.ini", "[run]\nseed = -1\n", TR_ERR_INVALID,
         {"seed1.ini:2: [run] seed = -1:", "expected an integer from 0 to 18446744073709551615"}},
        {"seed2.ini", "[run]\nseed = 18446744073709551616\n", TR_ERR_INVALID,
         {"seed2.ini:2: [run] seed = 18446744073709551616:"}},
        {"seed3.ini", "[run]\nseed = 12 34\n", TR_ERR_INVALID, {"seed3.ini:2: [run] seed = 12 34:"}},
    };
    EXPECT_ERRORS(bad);
}

static void test_bad_names(void **state) {
    (void)state;
    static const struct refusal bad[] = {
        {"dev.ini", "[run]\ndevice = gpu\n", TR_ERR_INVALID,
         {"dev.ini:2: [run] device = gpu:", "expected cpu or cuda"}},
        {"dt1.ini", "[run]\ndtype = i32\n", TR_ERR_INVALID,
         {"dt1.ini:2: [run] dtype = i32:", "expected f32, bf16 or f16"}},
        {"dt2.ini", "[run]\ndtype = f64\n", TR_ERR_INVALID, {"dt2.ini:2: [run] dtype = f64:"}},
        {"dt3.ini", "[run]\ndtype = fp8\n", TR_ERR_INVALID, {"dt3.ini:2: [run] dtype = fp8:"}},
        {"task.ini", "[run]\ntask = train\n", TR_ERR_INVALID,
         {"task.ini:2: [run] task = train:", "expected predict, fit or generate"}},
        {"model1.ini", "[run]\nmodel = bert base\n", TR_ERR_INVALID,
         {"model1.ini:2: [run] model = bert base:", "model name"}},
        {"model2.ini", "[run]\npreset =\n", TR_ERR_INVALID, {"model2.ini:2: [run] preset = :", "preset name"}},
    };
    EXPECT_ERRORS(bad);
    struct tr_config cfg;
    load_ok("dt4.ini", "[run]\ndtype = float16\n", &cfg);
    assert_int_equal(cfg.dtype, TR_DTYPE_F16);
}

static void test_backends_errors(void **state) {
    (void)state;
    static const struct refusal bad[] = {
        {"be1.ini", "[run]\nbackends = torch,,jax\n", TR_ERR_INVALID,
         {"be1.ini:2: [run] backends = torch,,jax:", "entry 2 is empty"}},
        {"be2.ini", "[run]\nbackends = torch, \n", TR_ERR_INVALID,
         {"be2.ini:2: [run] backends = torch,:", "entry 2 is empty"}},
        {"be3.ini", "[run]\nbackends =\n", TR_ERR_INVALID, {"be3.ini:2: [run] backends = :", "entry 1 is empty"}},
        {"be4.ini", "[run]\nbackends = torch, jax, torch\n", TR_ERR_INVALID,
         {"be4.ini:2: [run] backends = torch, jax, torch:", "entry 3", "repeats 'torch'"}},
        {"be5.ini", "[run]\nbackends = torch:fast, torch:fast\n", TR_ERR_INVALID,
         {"be5.ini:2: [run] backends = torch:fast, torch:fast:", "entry 2", "repeats"}},
        {"be6.ini", "[run]\nbackends = a,b,c,d,e,f,g,h,i\n", TR_ERR_INVALID,
         {"be6.ini:2: [run] backends =", "at most 8"}},
        {"be7.ini", "[run]\nbackends = to.rch\n", TR_ERR_INVALID,
         {"be7.ini:2: [run] backends = to.rch:", "entry 1 ('to.rch')", "letters, digits, '_' and '-'"}},
        {"be8.ini", "[run]\nbackends = torch:Fast\n", TR_ERR_INVALID,
         {"be8.ini:2: [run] backends = torch:Fast:", "MODE"}},
        {"be9.ini", "[run]\nbackends = :fast\n", TR_ERR_INVALID, {"be9.ini:2: [run] backends = :fast:", "entry 1"}},
        {"be10.ini", "[run]\nbackends = ./We.ird.so\n", TR_ERR_INVALID,
         {"be10.ini:2: [run] backends = ./We.ird.so:", "libtrident_backend_NAME.so"}},
    };
    EXPECT_ERRORS(bad);
    struct tr_config cfg;
    /* A name as trident_add_backend and the loader take it: capitals and '-' too */
    load_ok("names.ini", "[run]\nbackends = MyBackend, my-be:fast, ./libtrident_backend_Be-2.so\n[backend.MyBackend]\n"
            "x = 1\n", &cfg);
    assert_string_equal(cfg.backends[0].name, "MyBackend");
    assert_string_equal(cfg.backends[1].name, "my-be");
    assert_string_equal(cfg.backends[2].name, "Be-2");
    /* One backend in two modes may run side by side. */
    load_ok("be11.ini", "[run]\nbackends = torch, torch:reduce-overhead\n", &cfg);
    assert_int_equal(cfg.n_backends, 2);
}

static void test_duplicate_keys(void **state) {
    (void)state;
    expect_error("dup1.ini", "[run]\nbatch = 4\nmodel = bert\nbatch = 8\n", TR_ERR_INVALID,
                 "dup1.ini:4: [run] batch = 8:", "lines 2 and 4");
    /* A section given twice is refused at its second header (it would merge its keys). */
    static const struct refusal bad[] = {
        {"dup2.ini", "[run]\nseed = 1\n[model]\n[run]\nseed = 2\n", TR_ERR_INVALID,
         {"dup2.ini:4: [run] appears again (first on line 1); expected each section once"}},
        {"dup3.ini", "[model]\nhidden = 4\n\nhidden = 8\n", TR_ERR_INVALID,
         {"dup3.ini:4: [model] hidden = 8:", "lines 2 and 4"}},
        {"dup4.ini", "[backend.torch]\nmode = a\n[backend.jax]\nmode = b\n[backend.torch]\nmode = c\n", TR_ERR_INVALID,
         {"dup4.ini:5: [backend.torch] appears again (first on line 1)"}},
    };
    EXPECT_ERRORS(bad);
    char text[600];
    snprintf(text, sizeof text, "[plugins]\npath = %s\npath = %s\n", tr_test_dir, tr_test_dir);
    expect_error("dup5.ini", text, TR_ERR_INVALID, "dup5.ini:3: [plugins] path", "lines 2 and 3");
    /* An indented line is not glued to the key above (inih's multi-line values). */
    expect_error("dup6.ini", "[run]\nmodel = bert\n   model = gemma\n", TR_ERR_INVALID, "dup6.ini:3: [run] model = gemma",
                 "lines 2 and 3");
}

static void test_syntax_errors(void **state) {
    (void)state;
    expect_error("syn1.ini", "[run]\nmodel = bert\nthis is not ini\nbatch = 2\n", TR_ERR_FORMAT,
                 "syn1.ini:3: syntax error: expected '[section]' or 'key = value'", "this is not ini");
    expect_error("syn2.ini", "; c\n[run\nbatch = 2\n", TR_ERR_FORMAT, "syn2.ini:2: syntax error");
    /* The first error wins, whoever finds it. */
    static const struct refusal bad[] = {
        {"syn3.ini", "[run]\noops\nbatch = -1\n", TR_ERR_FORMAT, {"syn3.ini:2: syntax error"}},
        {"syn4.ini", "[run]\nbatch = -1\noops\n", TR_ERR_INVALID, {"syn4.ini:2: [run] batch = -1"}},
        {"syn5.ini", "[run]\n= 3\n", TR_ERR_FORMAT, {"syn5.ini:2: syntax error"}},
    };
    EXPECT_ERRORS(bad);
    char text[512];
    memset(text, 0, sizeof text);
    strcpy(text, "[model]\nname = ");
    memset(text + strlen(text), 'x', 300);
    strcat(text, "\n");
    expect_error("syn6.ini", text, TR_ERR_FORMAT, "syn6.ini:2: line too long");
    /* a comment that long is read past (its text matters to no one); the lines keep count */
    char big[700];
    snprintf(big, sizeof big, "[run]\n; %0300d\n# %0300d\nbatch = x\n", 0, 0);
    expect_error("syn7.ini", big, TR_ERR_INVALID, "syn7.ini:4: [run] batch = x");
}

static void test_inline_comments(void **state) {
    (void)state;
    struct tr_config cfg;
    load_ok("cm.ini", "[run]\nbatch = 8   ; eight\n# seed = 5\n ; steps = 3\n", &cfg);
    assert_int_equal(cfg.batch, 8);
    assert_int_equal(cfg.seed, 1234);
    assert_int_equal(cfg.steps, 10);
    /* ';' without a space before it is part of the value (and not a valid name). */
    expect_error("cm2.ini", "[run]\nmodel = bert;x\n", TR_ERR_INVALID, "cm2.ini:2: [run] model = bert;x");
}

static void test_bom(void **state) {
    (void)state;
    struct tr_config cfg;
    load_ok("bom.ini", "\xEF\xBB\xBF[run]\nbatch = 5\n", &cfg);
    assert_int_equal(cfg.batch, 5);
}

static void test_missing_files(void **state) {
    (void)state;
    char path[PATH_MAX];
    tr_test_dir_file("does_not_exist.ini", NULL, path, sizeof path);
    struct tr_config cfg;
    struct tr_error err = {0};
    assert_int_equal(tr_config_load(path, &cfg, &err), TR_ERR_IO);
    assert_non_null(strstr(err.msg, path));
    assert_non_null(strstr(err.msg, strerror(ENOENT)));
    /* A directory is not a config file, nor is a FIFO (refused without blocking on it). */
    assert_int_equal(tr_config_load(tr_test_dir, &cfg, &err), TR_ERR_INVALID);
    assert_non_null(strstr(err.msg, tr_test_dir));
    tr_assert_msg_has(&err, "is a directory, not a regular file");
    char fifo[PATH_MAX];
    tr_test_dir_file("fifo.ini", NULL, fifo, sizeof fifo);
    unlink(fifo);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(tr_config_load(fifo, &cfg, &err), TR_ERR_INVALID);
    tr_assert_msg_has(&err, "is a FIFO, not a regular file");
    unlink(fifo);

    char wpath[PATH_MAX + 64];
    snprintf(wpath, sizeof wpath, "%s/sub/missing.safetensors", tr_test_dir);
    expect_error("w1.ini", "[run]\nmodel = bert\nweights = sub/missing.safetensors\n", TR_ERR_IO,
                 "w1.ini:3: [run] weights = sub/missing.safetensors:", wpath, strerror(ENOENT));
    struct tr_config ok;
    load_ok("w2.ini", "[run]\nweights = .\n", &ok); /* a directory: a diffusers pipeline's (weights.h) */
    assert_string_equal(ok.weights, tr_test_dir);
    load_ok("w3.ini", "[run]\nweights =\n", &ok);
    assert_string_equal(ok.weights, "");

    snprintf(wpath, sizeof wpath, "%s/no_plugins_here", tr_test_dir);
    expect_error("p1.ini", "[plugins]\npath = no_plugins_here\n", TR_ERR_IO, "p1.ini:2: [plugins] path = no_plugins_here:",
                 wpath, strerror(ENOENT));
    expect_error("p2.ini", "[plugins]\npath = p2.ini\n", TR_ERR_IO, "p2.ini:2: [plugins] path = p2.ini:",
                 "not a directory");
    load_ok("p3.ini", "[plugins]\npath = .\n", &ok);
    assert_string_equal(ok.plugin_path, tr_test_dir);
    assert_int_equal(tr_config_load_string("[plugins]\npath = /\n", "/x.ini", &ok, &err), TR_OK);
    assert_string_equal(ok.plugin_path, "/");
}

static void test_nul_byte(void **state) {
    (void)state;
    char path[PATH_MAX];
    tr_test_dir_file("nul.ini", NULL, path, sizeof path);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite("[run]\n\0x = 1\n", 1, 13, f), 13);
    assert_int_equal(fclose(f), 0);
    struct tr_config cfg;
    struct tr_error err = {0};
    assert_int_equal(tr_config_load(path, &cfg, &err), TR_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "nul.ini"));
}

static void test_backend_options(void **state) {
    (void)state;
    struct tr_config cfg;
    load_ok("opt.ini",
            "[run]\n"
            "backends = torch:reduce-overhead, torch, jax, tf\n"
            "[backend.torch]\n"
            "threads = 4\n"
            "mode = eager\n"
            "[backend.jax]\n"
            "cache = off\n"
            "[model]\n"
            "threads = 9\n",
            &cfg);
    struct tr_option opt[TR_CONFIG_MAX_KV + 1];
    memset(opt, 0, sizeof opt);
    /* The entry's mode wins over the section's. */
    int n = tr_config_backend_options(&cfg, &cfg.backends[0], opt, TR_CONFIG_MAX_KV + 1);
    assert_int_equal(n, 2);
    assert_string_equal(opt[0].key, "threads");
    assert_string_equal(opt[0].value, "4");
    assert_int_equal(opt[0].line, 4);
    assert_ptr_equal(opt[0].file, cfg.file);
    assert_ptr_equal(opt[0].value, cfg.kv[0].value);
    assert_string_equal(opt[1].key, "mode");
    assert_string_equal(opt[1].value, "reduce-overhead");
    assert_int_equal(opt[1].line, 2);
    assert_ptr_equal(opt[1].value, cfg.backends[0].mode);

    /* An entry without a mode takes the section's, and says so in its name (the row's label). */
    n = tr_config_backend_options(&cfg, &cfg.backends[1], opt, TR_CONFIG_MAX_KV + 1);
    assert_int_equal(n, 2);
    assert_string_equal(opt[0].key, "threads");
    assert_string_equal(opt[1].key, "mode");
    assert_string_equal(opt[1].value, "eager");
    assert_int_equal(opt[1].line, 5);
    assert_string_equal(cfg.backends[1].spec, "torch:eager");
    assert_string_equal(cfg.backends[1].mode, "eager");

    n = tr_config_backend_options(&cfg, &cfg.backends[2], opt, TR_CONFIG_MAX_KV + 1);
    assert_int_equal(n, 1);
    assert_string_equal(opt[0].key, "cache");
    assert_string_equal(opt[0].value, "off");
    assert_int_equal(opt[0].line, 7);

    assert_int_equal(tr_config_backend_options(&cfg, &cfg.backends[3], opt, TR_CONFIG_MAX_KV + 1), 0);
    /* max is respected. */
    assert_int_equal(tr_config_backend_options(&cfg, &cfg.backends[0], opt, 1), 1);
    assert_int_equal(tr_config_backend_options(&cfg, &cfg.backends[0], opt, 0), 0);

    /* A section mode no entry takes (each gives its own) is refused, as is one that makes
     * two entries the same. */
    expect_error("t.ini", "[run]\nbackends = torch:eager\n[backend.torch]\nmode = reduce-overhead\n", TR_ERR_INVALID,
                 "t.ini:4: [backend.torch] mode = reduce-overhead: the backends entry 'torch:eager' (", "t.ini:2) gives "
                 "mode eager, and no 'torch' entry goes without one");
    expect_error("t.ini", "[run]\nbackends = torch, torch:eager\n[backend.torch]\nmode = eager\n", TR_ERR_INVALID,
                 "t.ini:4: [backend.torch] mode = eager makes the backends entry 'torch' the same as 'torch:eager'");
}

/* A model's refusal names its key ("KEY = VALUE"): the line of the [model] key it names
 * first, whole words only, never a [backend.NAME] key of the same name. */
static void test_model_line(void **state) {
    (void)state;
    struct tr_config cfg;
    load_ok("ml.ini",
            "[run]\n"
            "model = unet_2d_condition\n"
            "backends = jax\n"
            "[backend.jax]\n"
            "cache = off\n"
            "[model]\n"
            "block_out_channels = 16,32\n"
            "\n"
            "attention_head_dim = 3\n"
            "head_dim = 2\n",
            &cfg);
    assert_int_equal(tr_config_model_line(&cfg, "entry 16 (attention_head_dim = '3'; the heads)"), 9);
    assert_int_equal(tr_config_model_line(&cfg, "head_dim = 2, attention_head_dim = '3'"), 10);
    assert_int_equal(tr_config_model_line(&cfg, "attention_head_dim = 3 with block_out_channels = 16,32"), 9);
    assert_int_equal(tr_config_model_line(&cfg, "block_out_channels entry 16"), 0); /* not "KEY = " */
    assert_int_equal(tr_config_model_line(&cfg, "cache = off"), 0);
    assert_int_equal(tr_config_model_line(&cfg, ""), 0);
}

static void test_path_backends(void **state) {
    (void)state;
    struct tr_config cfg;
    load_ok("paths.ini",
            "[run]\n"
            "backends = libtrident_backend_a.so, ./mine.so, /opt/t/libtrident_backend_b.so:reduce-overhead, "
            "build/plugins/libtrident_backend_c, rel/x.so:fast\n"
            "[backend.mine]\n"
            "k = v\n",
            &cfg);
    assert_int_equal(cfg.n_backends, 5);
    const char *names[] = {"a", "mine", "b", "c", "x"};
    const char *modes[] = {"", "", "reduce-overhead", "", "fast"};
    const char *rel[] = {"libtrident_backend_a.so", "./mine.so", NULL, "build/plugins/libtrident_backend_c",
                         "rel/x.so"};
    for (int i = 0; i < 5; i++) {
        assert_string_equal(cfg.backends[i].name, names[i]);
        assert_string_equal(cfg.backends[i].mode, modes[i]);
        char want[PATH_MAX + 64];
        if (rel[i]) snprintf(want, sizeof want, "%s/%s", tr_test_dir, rel[i]);
        else snprintf(want, sizeof want, "/opt/t/libtrident_backend_b.so");
        assert_string_equal(cfg.backends[i].path, want);
    }
    assert_string_equal(cfg.backends[2].spec, "/opt/t/libtrident_backend_b.so:reduce-overhead");
    struct tr_option opt[4];
    assert_int_equal(tr_config_backend_options(&cfg, &cfg.backends[1], opt, 4), 1);
    assert_string_equal(opt[0].key, "k");
    /* Two builds of one backend may run side by side; the same file twice may not. */
    load_ok("paths2.ini", "[run]\nbackends = old/libtrident_backend_t.so, new/libtrident_backend_t.so\n", &cfg);
    assert_int_equal(cfg.n_backends, 2);
    expect_error("paths3.ini", "[run]\nbackends = a/t.so, a/t.so\n", TR_ERR_INVALID, "paths3.ini:2:", "repeats");
}

TR_TEST_MAIN(tr_test_dir_setup, tr_test_dir_teardown, test_parallel_keys, test_defaults, test_good_file, test_empty_file_keeps_defaults,
             test_load_string, test_unknown_section, test_nearest, test_unknown_keys, test_bad_integers, test_math, test_threads,
             test_bad_names, test_backends_errors, test_duplicate_keys, test_syntax_errors, test_inline_comments,
             test_bom, test_missing_files, test_nul_byte, test_backend_options, test_model_line, test_path_backends, test_tolerance,
             test_run_files_and_words)
