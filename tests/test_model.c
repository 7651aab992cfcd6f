/* Model registry lookup and config resolution, on a small fake model defined here:
 * presets are copied, [model] overrides of every key type are applied, and unknown
 * keys, unknown presets and out-of-range values are errors that name file, line, key
 * and value. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include "testutil.h"
#include "trident/config.h"
#include "trident/model.h"

struct fake_config {
    int64_t layers;
    double dropout;
    int causal;
    char act[64];
    int64_t offset;     /* no bounds */
    double scale;       /* no bounds */
};

static const struct tr_model_key fake_keys[] = {
    {"layers", TR_KEY_INT, offsetof(struct fake_config, layers), 1, 48, "transformer layers"},
    {"dropout", TR_KEY_FLOAT, offsetof(struct fake_config, dropout), 0, 1, "dropout probability"},
    {"causal", TR_KEY_BOOL, offsetof(struct fake_config, causal), 0, 0, "causal attention mask"},
    {"act", TR_KEY_STRING, offsetof(struct fake_config, act), 0, 0, "activation"},
    {"offset", TR_KEY_INT, offsetof(struct fake_config, offset), 0, 0, "unbounded int"},
    {"scale", TR_KEY_FLOAT, offsetof(struct fake_config, scale), 0, 0, "unbounded float"},
};

static const struct fake_config fake_tiny = {2, 0.1, 0, "gelu", -5, 0.5};
static const struct fake_config fake_base = {12, 0.25, 1, "relu", 7, 3.0};

static const struct tr_model_preset fake_presets[] = {
    {"tiny", &fake_tiny, "two layers"},
    {"base", &fake_base, "twelve layers"},
};

static const struct tr_model_desc fake_model = {
    .name = "fake",
    .description = "a model that exists only in this test",
    .config_size = sizeof(struct fake_config),
    .keys = fake_keys,
    .n_keys = 6,
    .presets = fake_presets,
    .n_presets = 2,
    .tasks = 1u << TR_TASK_PREDICT,
};

static const struct tr_model_desc other_model = {.name = "other", .config_size = 8};

static const struct tr_model_desc *const fake_models[] = {&fake_model, &other_model, NULL};

static void load(const char *text, struct tr_config *cfg) {
    struct tr_error err = {0};
    int rc = tr_config_load_string(text, "conf/m.ini", cfg, &err);
    if (rc != TR_OK) fail_msg("config: %s", err.msg);
}

/* Resolve base + text's [model] overrides; expect status and a message with each needle. */
static void check_resolve_error(const char *text, const char *preset, int status, const char *const *needles, int n) {
    struct tr_config cfg;
    load(text, &cfg);
    struct fake_config c;
    struct tr_error err = {0};
    tr_test_expect_failure(text, tr_model_resolve(&fake_model, preset, &cfg, &c, &err), &err, status, needles, n);
}

#define expect_resolve_error(text, preset, status, ...)                                         \
    do {                                                                                         \
        const char *const needles_[] = {__VA_ARGS__};                                            \
        check_resolve_error(text, preset, status, needles_, (int)(sizeof needles_ / sizeof needles_[0])); \
    } while (0)

static void test_tasks(void **state) {
    (void)state;
    for (int t = 0; t < TR_TASK_COUNT; t++) {
        enum tr_task back = TR_TASK_COUNT;
        assert_int_equal(tr_task_from_name(tr_task_name((enum tr_task)t), &back), TR_OK);
        assert_int_equal(back, t);
    }
    assert_string_equal(tr_task_name(TR_TASK_FIT), "fit");
    assert_string_equal(tr_task_name(TR_TASK_COUNT), "?");
    enum tr_task t;
    assert_int_equal(tr_task_from_name("train", &t), TR_ERR_NOT_FOUND);
    assert_int_equal(tr_task_from_name("", &t), TR_ERR_NOT_FOUND);
}

static void test_find(void **state) {
    (void)state;
    const struct tr_model_desc *m = NULL;
    struct tr_error err = {0};
    assert_int_equal(tr_model_find(fake_models, "other", &m, &err), TR_OK);
    assert_ptr_equal(m, &other_model);
    assert_int_equal(tr_model_find(fake_models, "fake", &m, &err), TR_OK);
    assert_ptr_equal(m, &fake_model);
    assert_int_equal(tr_model_find(fake_models, "bart", &m, &err), TR_ERR_NOT_FOUND);
    assert_non_null(strstr(err.msg, "'bart'"));
    assert_non_null(strstr(err.msg, "fake, other"));
    const struct tr_model_desc *const none[] = {NULL};
    assert_int_equal(tr_model_find(none, "fake", &m, &err), TR_ERR_NOT_FOUND);
    assert_int_equal(tr_model_find(NULL, "fake", &m, &err), TR_ERR_INVALID);
}

static void test_preset_copy(void **state) {
    (void)state;
    struct fake_config c;
    struct tr_error err = {0};
    memset(&c, 0x77, sizeof c);
    assert_int_equal(tr_model_resolve(&fake_model, "base", NULL, &c, &err), TR_OK);
    assert_memory_equal(&c, &fake_base, sizeof c);
    /* Options of a backend are not the model's business. */
    struct tr_config cfg;
    load("[backend.torch]\nlayers = 99\n", &cfg);
    memset(&c, 0x77, sizeof c);
    assert_int_equal(tr_model_resolve(&fake_model, "tiny", &cfg, &c, &err), TR_OK);
    assert_memory_equal(&c, &fake_tiny, sizeof c);
}

static void test_overrides(void **state) {
    (void)state;
    struct tr_config cfg;
    load("[model]\nlayers = 48\ndropout = 0\ncausal = yes\nact = silu\noffset = -9223372036854775808\nscale = -1e300\n",
         &cfg);
    struct fake_config c;
    struct tr_error err = {0};
    assert_int_equal(tr_model_resolve(&fake_model, "tiny", &cfg, &c, &err), TR_OK);
    assert_int_equal(c.layers, 48);
    assert_true(c.dropout == 0.0);
    assert_int_equal(c.causal, 1);
    assert_string_equal(c.act, "silu");
    assert_true(c.offset == INT64_MIN);
    assert_true(c.scale == -1e300);
    /* The preset itself is untouched. */
    assert_int_equal(fake_tiny.layers, 2);

    /* Every spelling of a boolean. */
    const char *yes[] = {"true", "TRUE", "1", "yes", "Yes"}, *no[] = {"false", "False", "0", "no", "NO"};
    for (int i = 0; i < 5; i++) {
        char text[64];
        snprintf(text, sizeof text, "[model]\ncausal = %s\n", no[i]);
        load(text, &cfg);
        assert_int_equal(tr_model_resolve(&fake_model, "base", &cfg, &c, &err), TR_OK);
        assert_int_equal(c.causal, 0);
        snprintf(text, sizeof text, "[model]\ncausal = %s\n", yes[i]);
        load(text, &cfg);
        assert_int_equal(tr_model_resolve(&fake_model, "tiny", &cfg, &c, &err), TR_OK);
        assert_int_equal(c.causal, 1);
    }
    load("[model]\ndropout = 0.75\nlayers = +1\n", &cfg);
    assert_int_equal(tr_model_resolve(&fake_model, "base", &cfg, &c, &err), TR_OK);
    assert_true(c.dropout == 0.75);
    assert_int_equal(c.layers, 1);
    assert_int_equal(c.causal, 1); /* base's, untouched */
}

static void test_unknown_key(void **state) {
    (void)state;
    expect_resolve_error("[run]\nbatch = 2\n[model]\nlayers = 3\nhiden = 64\n", "tiny", TR_ERR_NOT_FOUND,
                         "conf/m.ini:5: [model] hiden = 64:", "unknown key for model 'fake'",
                         "keys: layers, dropout, causal, act, offset, scale");
}

static void test_unknown_preset(void **state) {
    (void)state;
    struct fake_config c;
    struct tr_error err = {0};
    assert_int_equal(tr_model_resolve(&fake_model, "huge", NULL, &c, &err), TR_ERR_NOT_FOUND);
    assert_non_null(strstr(err.msg, "'huge'"));
    assert_non_null(strstr(err.msg, "'fake'"));
    assert_non_null(strstr(err.msg, "presets: tiny, base"));
    /* When the preset is the config's, the file and line are named too. */
    expect_resolve_error("[run]\npreset = huge\n", "huge", TR_ERR_NOT_FOUND, "conf/m.ini:2: [run] preset = huge",
                         "presets: tiny, base");
    assert_int_equal(tr_model_resolve(&fake_model, NULL, NULL, &c, &err), TR_ERR_INVALID);
}

static void test_bad_values(void **state) {
    (void)state;
    expect_resolve_error("[model]\nlayers = 0\n", "tiny", TR_ERR_INVALID, "conf/m.ini:2: [model] layers = 0:",
                         "expected an integer from 1 to 48");
    expect_resolve_error("[model]\n\nlayers = 49\n", "tiny", TR_ERR_INVALID, "conf/m.ini:3: [model] layers = 49:",
                         "from 1 to 48");
    expect_resolve_error("[model]\nlayers = 3x\n", "tiny", TR_ERR_INVALID, "conf/m.ini:2: [model] layers = 3x:");
    expect_resolve_error("[model]\nlayers = 2.0\n", "tiny", TR_ERR_INVALID, "conf/m.ini:2: [model] layers = 2.0:");
    expect_resolve_error("[model]\nlayers =\n", "tiny", TR_ERR_INVALID, "conf/m.ini:2: [model] layers = :");
    expect_resolve_error("[model]\noffset = 9223372036854775808\n", "tiny", TR_ERR_INVALID,
                         "[model] offset = 9223372036854775808:", "expected an integer");
    expect_resolve_error("[model]\ndropout = 1.5\n", "tiny", TR_ERR_INVALID, "conf/m.ini:2: [model] dropout = 1.5:",
                         "expected a number from 0 to 1");
    expect_resolve_error("[model]\ndropout = -0.1\n", "tiny", TR_ERR_INVALID, "[model] dropout = -0.1:");
    expect_resolve_error("[model]\ndropout = 0.5x\n", "tiny", TR_ERR_INVALID, "[model] dropout = 0.5x:");
    expect_resolve_error("[model]\nscale = nan\n", "tiny", TR_ERR_INVALID, "[model] scale = nan:", "finite");
    expect_resolve_error("[model]\nscale = inf\n", "tiny", TR_ERR_INVALID, "[model] scale = inf:");
    expect_resolve_error("[model]\nscale = 1e999\n", "tiny", TR_ERR_INVALID, "[model] scale = 1e999:");
    expect_resolve_error("[model]\nscale =\n", "tiny", TR_ERR_INVALID, "[model] scale = :");
    expect_resolve_error("[model]\ncausal = maybe\n", "tiny", TR_ERR_INVALID, "conf/m.ini:2: [model] causal = maybe:",
                         "true, false");
    expect_resolve_error("[model]\nact = "
                         "abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcd\n",
                         "tiny", TR_ERR_INVALID, "conf/m.ini:2: [model] act = abcdefghij", "63 characters");
}

static void test_key_str(void **state) {
    (void)state;
    struct fake_config c = {48, 0.1, 1, "silu", -3, 1e-12};
    const char *want[] = {"48", "0.1", "true", "silu", "-3", "1e-12"};
    char buf[64];
    for (int i = 0; i < 6; i++) {
        assert_int_equal(tr_model_key_str(&fake_model, &c, &fake_keys[i], buf, sizeof buf), TR_OK);
        assert_string_equal(buf, want[i]);
    }
    c.causal = 0;
    c.dropout = 1.0 / 3.0;
    assert_int_equal(tr_model_key_str(&fake_model, &c, &fake_keys[2], buf, sizeof buf), TR_OK);
    assert_string_equal(buf, "false");
    /* Doubles print in the fewest digits that read back exactly. */
    assert_int_equal(tr_model_key_str(&fake_model, &c, &fake_keys[1], buf, sizeof buf), TR_OK);
    double back = 0;
    assert_int_equal(sscanf(buf, "%lf", &back), 1);
    assert_true(back == c.dropout);
    /* Too small a buffer is an error, not a silent cut. */
    assert_int_equal(tr_model_key_str(&fake_model, &c, &fake_keys[0], buf, 2), TR_ERR_INVALID);
    /* What resolve writes, key_str reads. */
    struct tr_config cfg;
    load("[model]\nlayers = 17\nscale = 2.5\n", &cfg);
    struct tr_error err = {0};
    assert_int_equal(tr_model_resolve(&fake_model, "tiny", &cfg, &c, &err), TR_OK);
    assert_int_equal(tr_model_key_str(&fake_model, &c, &fake_keys[0], buf, sizeof buf), TR_OK);
    assert_string_equal(buf, "17");
    assert_int_equal(tr_model_key_str(&fake_model, &c, &fake_keys[5], buf, sizeof buf), TR_OK);
    assert_string_equal(buf, "2.5");
}

TR_TEST_MAIN(NULL, NULL, test_tasks, test_find, test_preset_copy, test_overrides, test_unknown_key,
             test_unknown_preset, test_bad_values, test_key_str)
