/* One boolean vocabulary (trident/parse.h): true/false, on/off, yes/no, 1/0, any case,
 * blanks around the word ignored, the same for an INI key section ([model], read through
 * tr_keys_apply) and for a backend option ([backend.tf] fuse, read by plugins/common's
 * option table). A refused word is named with file, line, key and what was expected. */
#include <stddef.h>
#include <string.h>
#include "backendutil.h"
#include "trident/backend.h"
#include "trident/config.h"
#include "trident/loader.h"
#include "trident/model.h"
#include "trident/parse.h"

static const char *const yes[] = {"true", "TRUE", "True", "on", "On", "ON", "yes", "Yes", "1", " true", "on ", "\tYES \t"};
static const char *const no[] = {"false", "FALSE", "False", "off", "Off", "no", "NO", "0", " 0 ", "\tfalse"};
static const char *const bad[] = {"", " ", "maybe", "tru", "truee", "2", "01", "o", "y", "n", "of", "yes no", "-1"};

static void test_words(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) {
        int b = -7;
        if (tr_parse_bool(yes[i], &b) != 0 || b != 1) fail_msg("'%s' is not read as true", yes[i]);
    }
    for (size_t i = 0; i < sizeof no / sizeof *no; i++) {
        int b = -7;
        if (tr_parse_bool(no[i], &b) != 0 || b != 0) fail_msg("'%s' is not read as false", no[i]);
    }
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int b = -7;
        if (tr_parse_bool(bad[i], &b) != -1 || b != -7) fail_msg("'%s' is accepted", bad[i]);
    }
    int b = -7;
    assert_int_equal(tr_parse_bool(NULL, &b), -1);
}

struct flags {
    int flag;
};
static const struct tr_model_key keys[] = {
    {"flag", TR_KEY_BOOL, offsetof(struct flags, flag), 0, 0, "a flag"},
};

static int apply(const char *value, struct flags *f, struct tr_error *e) {
    char text[128];
    snprintf(text, sizeof text, "[model]\nflag = %s\n", value);
    static struct tr_config cfg; /* large: not on the stack */
    tr_config_defaults(&cfg);
    if (tr_config_load_string(text, "x.ini", &cfg, e)) fail_msg("%s: %s", value, e->msg);
    return tr_keys_apply(&cfg, "model", keys, 1, "model 'fake'", f, e);
}

static void test_ini_section(void **state) {
    (void)state;
    struct tr_error e = {0};
    static const char *const t[] = {"True", "on", "YES", "1"}, *const f[] = {"False", "off", "No", "0"};
    for (int i = 0; i < 4; i++) {
        struct flags x = {0};
        if (apply(t[i], &x, &e) || x.flag != 1) fail_msg("[model] flag = %s: %s", t[i], e.msg);
        x.flag = 1;
        if (apply(f[i], &x, &e) || x.flag != 0) fail_msg("[model] flag = %s: %s", f[i], e.msg);
    }
    struct flags x = {0};
    assert_int_equal(apply("maybe", &x, &e), TR_ERR_INVALID);
    if (!strstr(e.msg, "x.ini:2") || !strstr(e.msg, "flag") || !strstr(e.msg, "maybe") ||
        !strstr(e.msg, TR_BOOL_WORDS))
        fail_msg("message '%s' lacks file:line, key, value or the words expected", e.msg);
}

static void test_backend_option(void **state) {
    (void)state;
    struct tr_plugin *p = tr_test_plugin_open("tf");
    struct tr_error e = {0};
    static const char *const ok[] = {"True", "on", "YES", "1", "False", "off", "No", "0"};
    for (int i = 0; i < 9; i++) {
        struct tr_option o = {.key = "fuse", .value = i < 8 ? ok[i] : "maybe", .file = "conf/x.ini", .line = 3};
        struct tr_backend_params prm = {.struct_size = sizeof prm, .abi_version = TR_ABI_VERSION,
                                        .device_type = TR_DEVICE_CPU, .options = &o, .n_options = 1};
        struct tr_backend *be = NULL;
        int st = tr_backend_init(p, &prm, &be, &e);
        if (i < 8 && st) fail_msg("[backend.tf] fuse = %s refused: %s", ok[i], e.msg);
        if (i == 8) {
            assert_int_not_equal(st, TR_OK);
            if (!strstr(e.msg, "conf/x.ini:3: [backend.tf] fuse = 'maybe'") || !strstr(e.msg, "true or false"))
                fail_msg("message '%s' lacks file:line, key, value or the words expected", e.msg);
        }
        tr_backend_free(be);
    }
    tr_plugin_close(p);
}

TR_TEST_MAIN(NULL, NULL, test_words, test_ini_section, test_backend_option)
