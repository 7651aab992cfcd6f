/* libFuzzer: a Hugging Face config.json through every built-in model that reads one
 * ([model] hf_config, the descriptors' read_hf_config hooks: Gemma's and Mistral's
 * tr_decoder_read_hf_config, CLIP's, the UNet's, the VAE's, SAM's), by the path a user
 * takes: an INI naming the file, resolved over the tiny preset, and the predict graph
 * built from what it read (shapes checked, sizes multiplied). */
#include <stdio.h>
#include <stdlib.h>
#include "fuzz_common.h"
#include "trident/bench.h"
#include "trident/models.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static struct tr_config cfg;
    const char *path = fuzz_file(0, data, size);
    for (int i = 0; tr_builtin_models[i]; i++) {
        const struct tr_model_desc *m = tr_builtin_models[i];
        if (!m->read_hf_config) continue;
        char ini[512];
        snprintf(ini, sizeof ini, "[run]\nmodel = %s\npreset = tiny\nbatch = 1\nseq_len = 8\n[model]\nhf_config = %s\n",
                 m->name, path);
        struct tr_error err = {0};
        if (tr_config_load_string(ini, "hf_config.ini", &cfg, &err) != TR_OK) {
            fprintf(stderr, "fuzz_hf_config: %s\n", err.msg);
            abort();
        }
        struct tr_task_graph tg;
        int rc = tr_task_graph_build(&cfg, tr_builtin_models, &tg, &err);
        fuzz_note(m->name, rc, err.msg);
        if (rc == TR_OK) tr_task_graph_free(&tg);
    }
    return 0;
}
