/* libFuzzer: an INI file through the suite reader (tr_suite_load), the config reader
 * (tr_config_load_string), the model's
 * resolution of preset + [model] keys (tr_model_resolve) and, when the sizes it asks for
 * are small, the task graph's build (tr_task_graph_build) of the built-in models.
 *
 * The gate: a valid config may ask for a model of any size, and building its graph holds
 * buffers that grow with batch, seq_len and the [model] widths (constants such as position
 * ids and autodiff's seeds). Only configs within the bounds below are built, so an input
 * costs milliseconds and megabytes; the reader and the key validation see every input. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include "fuzz_common.h"
#include "trident/bench.h"
#include "trident/models.h"
#include "trident/suite.h"

#define GATE_BATCH 8
#define GATE_SEQ_LEN 128
#define GATE_NUMBER 4096    /* any integer written in [model], [generate] or [train] */

/* The name the text is read under: relative paths ([model] hf_config) resolve against
 * conf/cpu/, as those of the seed corpus (from conf/cpu) do. */
#ifndef FUZZ_CONFIG_NAME
#define FUZZ_CONFIG_NAME "fuzz.ini"
#endif

static int small_numbers(const char *s) {
    for (const char *p = s; *p;) {
        if (!isdigit((unsigned char)*p)) {
            p++;
            continue;
        }
        long long v = 0;
        while (isdigit((unsigned char)*p)) {
            if (v <= GATE_NUMBER) v = v * 10 + (*p - '0');
            p++;
        }
        if (v > GATE_NUMBER) return 0;
    }
    return 1;
}

static int small_enough(const struct tr_config *cfg) {
    if (cfg->batch > GATE_BATCH || cfg->seq_len > GATE_SEQ_LEN) return 0;
    for (int i = 0; i < cfg->n_kv; i++) {
        const struct tr_config_kv *kv = &cfg->kv[i];
        if (strncmp(kv->section, "backend.", 8) != 0 && !small_numbers(kv->value)) return 0;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static struct tr_config cfg;  /* some 100 KiB: not on the stack */
    struct tr_error err = {0};
    /* The same text as a suite (suite.h): its reader, and --rows over what it read. Its rows'
     * configs resolve against the input's /proc/self/fd name, so only the suite is read. */
    static struct tr_suite suite;
    int rc = tr_suite_load(fuzz_file(0, data, size), &suite, &err);
    fuzz_note("tr_suite_load", rc, err.msg);
    if (rc == TR_OK) tr_suite_select(&suite, "*_fit, bert*", &err);

    char *text = fuzz_string(data, size);
    rc = tr_config_load_string(text, FUZZ_CONFIG_NAME, &cfg, &err);
    free(text);
    fuzz_note("tr_config_load_string", rc, err.msg);
    if (rc) return 0;
    struct tr_option opts[TR_CONFIG_MAX_KV + 1];
    for (int i = 0; i < cfg.n_backends; i++) tr_config_backend_options(&cfg, &cfg.backends[i], opts, TR_CONFIG_MAX_KV + 1);
    (void)tr_config_math_name(&cfg);

    const struct tr_model_desc *m;
    if (tr_model_find(tr_builtin_models, cfg.model, &m, &err) == TR_OK) {
        void *config = calloc(1, m->config_size);
        if (!config) abort();
        rc = tr_model_resolve(m, cfg.preset, &cfg, config, &err);
        fuzz_note("tr_model_resolve", rc, err.msg);
        if (rc == TR_OK) {
            char buf[256];
            for (int k = 0; k < m->n_keys; k++) tr_model_key_str(m, config, &m->keys[k], buf, sizeof buf);
        }
        free(config);
    }
    if (!small_enough(&cfg)) {
        fuzz_note("tr_task_graph_build", 1, "not built: over the gate's sizes");
        return 0;
    }
    struct tr_task_graph tg;
    rc = tr_task_graph_build(&cfg, tr_builtin_models, &tg, &err);
    fuzz_note("tr_task_graph_build", rc, err.msg);
    if (rc == TR_OK) tr_task_graph_free(&tg);
    return 0;
}
