/* libFuzzer: a safetensors file through the reader (tr_safetensors_open, every tensor
 * read back with tr_safetensors_get and its bytes touched) and the weight loader
 * (tr_weights_load, tr_weights_load_seeded) against two graphs of a BERT small enough
 * that its whole weights file is a seed (about 3 KiB): one f32 predict graph, and one bf16
 * fit graph with LoRA adapters, whose f32 tensors are converted and whose adapters and
 * optimizer state are fresh (made from the seed when the file lacks them).
 *
 * FUZZ_WRITE_SEED=FILE (environment): write the f32 graph's weights, made from a seed, to
 * FILE and exit; that is how corpus/safetensors/bert_mini.safetensors was made. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fuzz_common.h"
#include "trident/bench.h"
#include "trident/models.h"
#include "trident/safetensors.h"
#include "trident/weights.h"

/* [run] model = bert and the [model] keys; the caller's dtype, task and extra keys follow. */
#define MINI_BERT(run, model)                                                                               \
    "[run]\nmodel = bert\npreset = tiny\nbatch = 1\nseq_len = 4\n" run                                       \
    "[model]\nvocab_size = 8\nhidden_size = 4\nnum_hidden_layers = 1\nnum_attention_heads = 1\n"            \
    "intermediate_size = 4\nmax_position_embeddings = 4\ntype_vocab_size = 1\nnum_labels = 2\n" model

static struct tr_task_graph graphs[2];

static void build(int i, const char *ini) {
    static struct tr_config cfg;
    struct tr_error err = {0};
    if (tr_config_load_string(ini, "mini_bert.ini", &cfg, &err) != TR_OK ||
        tr_task_graph_build(&cfg, tr_builtin_models, &graphs[i], &err) != TR_OK) {
        fprintf(stderr, "fuzz_safetensors: the mini BERT: %s\n", err.msg);
        abort();
    }
}

static int write_seed(const char *path) {
    struct tr_graph *g = graphs[0].graph;
    struct tr_weights *w = NULL;
    struct tr_error err = {0};
    int n = tr_graph_n_params(g);
    const char **names = calloc((size_t)n, sizeof *names);
    struct tr_tensor *ts = calloc((size_t)n, sizeof *ts);
    int rc = names && ts ? tr_weights_from_seed(g, 1234, &w, &err) : TR_ERR_NOMEM;
    for (int i = 0; rc == TR_OK && i < n; i++) {
        names[i] = tr_node_name(g, tr_graph_param(g, i));
        ts[i] = tr_node_tensor(g, tr_graph_param(g, i));
        ts[i].data = (void *)tr_node_data(g, tr_graph_param(g, i)); /* bound by the weights */
    }
    if (rc == TR_OK) rc = tr_safetensors_write(path, n, names, ts, &err);
    if (rc) fprintf(stderr, "fuzz_safetensors: %s: %s\n", path, err.msg);
    tr_weights_free(w);
    free(names);
    free(ts);
    return rc ? 1 : 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    build(0, MINI_BERT("dtype = f32\ntask = predict\n", ""));
    build(1, MINI_BERT("dtype = bf16\ntask = fit\n", "lora_rank = 1\n"));
    const char *seed = getenv("FUZZ_WRITE_SEED");
    if (seed) exit(write_seed(seed));
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file(0, data, size);
    struct tr_error err = {0};
    struct tr_safetensors *st;
    int rc = tr_safetensors_open(path, &st, &err);
    fuzz_note("tr_safetensors_open", rc, err.msg);
    if (rc == TR_OK) {
        volatile unsigned char sum = 0;
        for (int i = 0; i < tr_safetensors_count(st); i++) {
            struct tr_tensor t;
            if (tr_safetensors_get(st, tr_safetensors_name(st, i), &t, &err) != TR_OK) continue;
            /* every byte of the view: ASan tells one outside the file's buffer */
            const unsigned char *b = t.data;
            size_t nb = tr_tensor_nbytes(&t);
            for (size_t k = 0; k < nb; k++) sum ^= b[k];
        }
        (void)sum;
        tr_safetensors_close(st);
    }
    struct tr_weights *w = NULL;
    rc = tr_weights_load(graphs[0].graph, path, &w, &err);
    fuzz_note("tr_weights_load (f32 predict)", rc, err.msg);
    if (rc == TR_OK) tr_weights_free(w);
    w = NULL;
    rc = tr_weights_load_seeded(graphs[1].graph, path, 7, &w, &err);
    fuzz_note("tr_weights_load_seeded (bf16 fit, LoRA)", rc, err.msg);
    if (rc == TR_OK) tr_weights_free(w);
    return 0;
}
