/* The task's graph from a config (bench.h's tr_task_graph_build): the model's graph for its
 * task, fit's training step on it, generate's graphs and its [generate] keys. */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <cjson/cJSON.h>
#include "trident/bench.h"
#include "trident/generate.h"
#include "trident/graph.h"

/* fit: the model's loss, its trainable params, then backward + optimizer (train.h). */
static int add_training(const struct tr_config *cfg, struct tr_task_graph *tg, struct tr_error *err) {
    const struct tr_model_desc *m = tg->model;
    struct tr_graph *g = tg->graph;
    if (!m->trainable)
        return tr_error_set(err, TR_ERR_INTERNAL, "model '%s' offers fit but lists no trainable params", m->name);
    int loss = tr_graph_find(g, "loss");
    if (loss < 0) return tr_error_set(err, TR_ERR_INTERNAL, "model '%s' built no node named 'loss' for fit", m->name);
    int rc = tr_train_config_resolve(cfg, &tg->train_cfg, err);
    if (rc) return rc;
    int max = tr_graph_n_params(g), n = 0;
    int *ids = calloc((size_t)(max ? max : 1), sizeof *ids);
    if (!ids) return tr_error_set(err, TR_ERR_NOMEM, "fit: out of memory");
    rc = m->trainable(tg->config, g, ids, max, &n, err);
    tg->train_cfg.dp_ranks = tr_config_data_parallel(cfg) ? cfg->ranks : 0;
    tg->train_cfg.bucket_bytes = cfg->bucket_mb * 1048576.0;
    if (!rc) rc = tr_train_build(g, loss, n, ids, &tg->train_cfg, &tg->train, err);
    free(ids);
    return rc;
}

/* Where a model's refusal (msg) comes from: the [model] line of the key it names, else
 * hf_config's line (a value no line gave is the preset's or that file's; from says
 * " + hf_config = FILE"), else 0. */
static int model_source(const struct tr_config *cfg, const char *msg, char *from, size_t n) {
    const struct tr_config_kv *hf = NULL;
    for (int i = 0; i < cfg->n_kv; i++)
        if (!strcmp(cfg->kv[i].section, "model") && !strcmp(cfg->kv[i].key, "hf_config")) hf = &cfg->kv[i];
    if (n) from[0] = '\0';
    if (hf) snprintf(from, n, " + hf_config = %s", hf->value);
    const int line = tr_config_model_line(cfg, msg);
    return line ? line : hf ? hf->line : 0;
}

/* generate: [generate] resolved, then the model's two passes; graph is the prefill. */
static int build_generate(const struct tr_config *cfg, struct tr_task_graph *tg, struct tr_error *err) {
    int rc = tr_generate_config_resolve(cfg, cfg->seed, &tg->gen_cfg, err);
    if (!rc) rc = tr_generate_text_prompt(cfg, tg->model, tg->config, cfg->batch, &tg->gen_cfg, &tg->text, err);
    if (rc) return rc;
    const struct tr_generate_opts o = {.dtype = cfg->dtype, .batch = cfg->batch,
                                       .prompt_len = tg->gen_cfg.prompt_len, .max_length = tg->gen_cfg.max_length,
                                       .cache_inputs = tg->gen_cfg.cache_inputs, .prompt_ids = (const int32_t *const *)tg->text.ids,
                                       .n_prompt_ids = tg->text.n_ids, .n_prompts = tg->text.n};
    rc = tr_generate_build(tg->model, tg->config, &o, &tg->gen, err);
    if (rc) { /* a model's key (its line or hf_config's), else the sizes generate asked for */
        char from[TR_CONFIG_STR + 32];
        int line = model_source(cfg, err->msg, from, sizeof from), len_line = 0;
        for (int i = 0; i < cfg->n_kv; i++)
            if (!strcmp(cfg->kv[i].section, "generate") && !strcmp(cfg->kv[i].key, "max_length")) len_line = cfg->kv[i].line;
        if (len_line && (!line || (!tr_config_model_line(cfg, err->msg) && strstr(err->msg, "max_length"))))
            line = len_line;
        return tr_error_prefix(err, "%s:%d: building model '%s' (preset %s%s) for generate ([generate] max_length = "
                               "%lld, prompt_len = %lld; [run] batch = %lld)",
                               cfg->file, line, tg->model->name, cfg->preset, from, (long long)o.max_length,
                               (long long)o.prompt_len, (long long)o.batch);
    }
    tg->graph = tg->gen.prefill;
    tg->n_model_inputs = tr_graph_n_inputs(tg->graph);
    tg->opts.seq_len = o.prompt_len;
    if (cfg->seq_len_line && cfg->seq_len != o.prompt_len) { /* said, not silently replaced */
        char where[TR_CONFIG_PATH + 96];
        fprintf(stderr, "trident: warning: %s = %lld is not read by generate: the prompts are [generate] prompt_len "
                "= %lld tokens\n", tr_config_where(cfg, "seq_len", cfg->seq_len_line, where, sizeof where),
                (long long)cfg->seq_len, (long long)o.prompt_len);
    }
    return TR_OK;
}

/* [generate] of a model whose generate is one graph (a text-to-image run): image = PATH,
 * the PNG of its output "image" (an output: relative to the current directory, as --json
 * OUT is, not to the INI's); prompt and negative_prompt, tokenized by the model with
 * tokenizer = DIR (relative to the INI's directory; by default the tokenizer/ beside a
 * [run] weights directory, as a diffusers pipeline is saved), or prompts = FILE (one a
 * line, relative to the INI's directory); init_image = PNG and
 * mask_image = PNG (relative to the INI's directory): the picture to start from (image to
 * image, inpainting) and the part of it to repaint (inpainting). */
/* [generate] image: a PNG (by its name) in a directory that is there, so a run of minutes
 * does not end in "cannot write". */
static int check_out_png(const struct tr_config *cfg, const struct tr_config_kv *kv, struct tr_error *err) {
    const char *v = kv->value, *slash = strrchr(v, '/');
    const size_t n = strlen(v);
    if (n < 5 || strcasecmp(v + n - 4, ".png") != 0)
        return tr_error_set(err, TR_ERR_INVALID, "%s:%d: [generate] image = %s: expected a .png file (the picture is "
                            "written as PNG)", cfg->file, kv->line, v);
    char dir[TR_CONFIG_PATH];
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash == v ? 1 : slash - v) : 1, slash ? v : ".");
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return tr_error_set(err, TR_ERR_NOT_FOUND, "%s:%d: [generate] image = %s: the directory '%s' is not there "
                            "(the path is relative to the current directory, as --json's)", cfg->file, kv->line, v,
                            dir);
    return TR_OK;
}

/* model_max_length of the tokenizer_config.json in dir (StableDiffusionPipeline pads and
 * cuts every prompt to it), 0 where the file or the key is absent or is transformers'
 * "no limit" (1e30). */
static int tokenizer_max_length(const char *dir, int64_t *out, struct tr_error *err) {
    char path[TR_CONFIG_PATH + 32];
    *out = 0;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f) return TR_OK;
    char *text = malloc(1 << 20);
    const size_t n = text ? fread(text, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
    if (!text) return tr_error_set(err, TR_ERR_NOMEM, "out of memory reading %s", path);
    text[n] = '\0';
    cJSON *root = cJSON_Parse(text);
    free(text);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "model_max_length");
    if (cJSON_IsNumber(m) && m->valuedouble >= 1 && m->valuedouble <= 1e6) *out = (int64_t)m->valuedouble;
    cJSON_Delete(root);
    return TR_OK;
}

static int generate_keys(const struct tr_config *cfg, struct tr_task_graph *tg, struct tr_error *err) {
    int prompt_line = 0;
    for (int i = 0; i < cfg->n_kv; i++) {
        const struct tr_config_kv *kv = &cfg->kv[i];
        if (strcmp(kv->section, "generate") != 0) continue;
        int rc = TR_OK;
        if (strcmp(kv->key, "image") == 0) {
            if (snprintf(tg->image, sizeof tg->image, "%s", kv->value) >= (int)sizeof tg->image || !kv->value[0])
                rc = tr_error_set(err, TR_ERR_INVALID, "%s:%d: [generate] image = %s: expected a path of 1 to %zu "
                                  "bytes", cfg->file, kv->line, kv->value, sizeof tg->image - 1);
            else rc = check_out_png(cfg, kv, err); /* now, not after the whole run */
        } else if (strcmp(kv->key, "prompt") == 0 || strcmp(kv->key, "prompts") == 0) {
            if (prompt_line)
                return tr_error_set(err, TR_ERR_INVALID, "%s:%d: [generate] %s: a prompt is given on line %d; give one "
                                    "of prompt and prompts", cfg->file, kv->line, kv->key, prompt_line);
            if (strcmp(kv->key, "prompts") == 0) {
                rc = tr_config_path(cfg, kv->value, tg->prompts, sizeof tg->prompts, err);
                if (rc) tr_error_prefix(err, "%s:%d: [generate] prompts", cfg->file, kv->line);
                else tg->opts.prompts = tg->prompts;
            } else {
                snprintf(tg->prompt, sizeof tg->prompt, "%s", kv->value);
                tg->opts.prompt = tg->prompt;
            }
            prompt_line = kv->line;
        } else if (strcmp(kv->key, "negative_prompt") == 0) {
            snprintf(tg->negative_prompt, sizeof tg->negative_prompt, "%s", kv->value);
            tg->opts.negative_prompt = tg->negative_prompt;
        } else if (strcmp(kv->key, "tokenizer") == 0) {
            rc = tr_config_path(cfg, kv->value, tg->tokenizer, sizeof tg->tokenizer, err);
            if (rc) tr_error_prefix(err, "%s:%d: [generate] tokenizer", cfg->file, kv->line);
        } else if (strcmp(kv->key, "init_image") == 0 || strcmp(kv->key, "mask_image") == 0) {
            const int init = strcmp(kv->key, "init_image") == 0;
            char *path = init ? tg->init_image : tg->mask_image;
            rc = tr_config_path(cfg, kv->value, path, sizeof tg->init_image, err);
            if (rc) tr_error_prefix(err, "%s:%d: [generate] %s", cfg->file, kv->line, kv->key);
            else if (init) tg->opts.init_image = path;
            else tg->opts.mask_image = path;
        } else {
            rc = tr_error_set(err, TR_ERR_NOT_FOUND, "%s:%d: [generate] %s = %s: unknown key for model '%s' (keys: "
                              "image, prompt, prompts, negative_prompt, tokenizer, init_image, mask_image)", cfg->file,
                              kv->line, kv->key, kv->value, tg->model->name);
        }
        if (rc) return rc;
    }
    if (tg->opts.negative_prompt && !prompt_line)
        return tr_error_set(err, TR_ERR_INVALID, "%s: [generate] negative_prompt without a prompt", cfg->file);
    if (prompt_line && !tg->tokenizer[0]) {
        struct stat sb;
        const size_t n = strlen(cfg->weights);
        if (n && n + 11 <= sizeof tg->tokenizer && stat(cfg->weights, &sb) == 0 && S_ISDIR(sb.st_mode)) {
            memcpy(tg->tokenizer, cfg->weights, n);
            memcpy(tg->tokenizer + n, "/tokenizer", 11);
        } else
            return tr_error_set(err, TR_ERR_INVALID, "%s:%d: [generate] prompt needs a tokenizer: [generate] "
                                "tokenizer = DIR (its vocab.json and merges.txt), or [run] weights = a pipeline's "
                                "directory with a tokenizer/", cfg->file, prompt_line);
    }
    if (prompt_line) tg->opts.tokenizer = tg->tokenizer;
    if (prompt_line && !cfg->seq_len_line) { /* the tokenizer's length, as the pipeline pads prompts to it */
        int64_t max_len = 0;
        int rc = tokenizer_max_length(tg->tokenizer, &max_len, err);
        if (rc) return rc;
        if (max_len > tg->opts.seq_len)
            return tr_error_set(err, TR_ERR_INVALID, "%s:%d: [generate] prompt: the tokenizer's model_max_length %lld "
                                "(%s/tokenizer_config.json) is past the text encoder's %lld positions; the pipeline "
                                "refuses such a prompt too (give [run] seq_len to pad to fewer)", cfg->file,
                                prompt_line, (long long)max_len, tg->tokenizer, (long long)tg->opts.seq_len);
        if (max_len > 0) tg->opts.seq_len = max_len;
    }
    if (!prompt_line && tg->tokenizer[0]) /* a tokenizer with nothing to tokenize: said, as the token generate says it */
        fprintf(stderr, "trident: warning: %s: [generate] tokenizer is read for prompt or prompts; without either it "
                "goes unread\n", cfg->file);
    return TR_OK;
}

/* [train] and [generate] keys are checked whatever the task: a typo in a section this
 * task leaves unread is still a typo (the section itself gets a warning, warn_unread). */
static int check_section_keys(const struct tr_config *cfg, struct tr_error *err) {
    static const char *const more_generate[] = {"prompt", "prompts", "tokenizer", "image", "negative_prompt",
                                                "init_image", "mask_image", NULL};
    int n_train, n_gen;
    const struct tr_model_key *train = tr_train_keys(&n_train), *gen = tr_generate_keys(&n_gen);
    int rc = tr_keys_check_names(cfg, "train", train, n_train, "training", NULL, err);
    return rc ? rc : tr_keys_check_names(cfg, "generate", gen, n_gen, "generate", more_generate, err);
}

/* A section only another task reads ([generate], [train]) is said, not silently skipped: a
 * config whose task was switched keeps it, so it is a warning, not an error. */
static void warn_unread(const struct tr_config *cfg, const char *section, const char *by) {
    for (int i = 0; i < cfg->n_kv; i++)
        if (strcmp(cfg->kv[i].section, section) == 0) {
            fprintf(stderr, "trident: warning: %s:%d: [%s] is read by %s only; task = %s leaves it unread\n",
                    cfg->file, cfg->kv[i].line, section, by, cfg->task);
            return;
        }
}

int tr_task_graph_build(const struct tr_config *cfg, const struct tr_model_desc *const *models,
                        struct tr_task_graph *tg, struct tr_error *err) {
    memset(tg, 0, sizeof *tg);
    char at_model[24] = "", at_task[24] = ""; /* ":LINE" where the INI gave the key */
    if (cfg->model_line) snprintf(at_model, sizeof at_model, ":%d", cfg->model_line);
    if (cfg->task_line) snprintf(at_task, sizeof at_task, ":%d", cfg->task_line);
    int rc = tr_model_find(models, cfg->model, &tg->model, err);
    if (rc) return tr_error_prefix(err, "%s%s: [run] model = %s", cfg->file, at_model, cfg->model);
    const struct tr_model_desc *m = tg->model;
    enum tr_task task;
    if (tr_task_from_name(cfg->task, &task) != TR_OK)
        return tr_error_set(err, TR_ERR_INVALID, "%s%s: [run] task = %s: expected predict, fit or generate",
                            cfg->file, at_task, cfg->task);
    if (!(m->tasks & (1u << task))) {
        char have[128] = "";
        for (int t = 0; t < TR_TASK_COUNT; t++)
            if (m->tasks & (1u << t)) {
                if (have[0]) strcat(have, ", ");
                strcat(have, tr_task_name((enum tr_task)t));
            }
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "%s%s: [run] task = %s: model '%s' offers %s", cfg->file,
                            at_task, cfg->task, m->name, have);
    }
    tg->config = calloc(1, m->config_size);
    if (!tg->config) return tr_error_set(err, TR_ERR_NOMEM, "model config: out of memory");
    rc = tr_model_resolve(m, cfg->preset, cfg, tg->config, err);
    if (rc) goto fail;
    tg->opts = (struct tr_build_opts){.task = task, .dtype = cfg->dtype, .batch = cfg->batch, .seq_len = cfg->seq_len};
    const int64_t own_seq_len = !cfg->seq_len_line && m->default_seq_len ? m->default_seq_len(tg->config) : 0;
    if (own_seq_len > 0) tg->opts.seq_len = own_seq_len; /* no [run] seq_len: the model's own */
    if (cfg->seq_len_line && m->default_seq_len && m->default_seq_len(tg->config) < 0) {
        char where[TR_CONFIG_PATH + 96];
        fprintf(stderr, "trident: warning: %s = %lld is not read: model '%s' takes images, no sequence\n",
                tr_config_where(cfg, "seq_len", cfg->seq_len_line, where, sizeof where), (long long)cfg->seq_len,
                m->name);
    }
    if (tr_config_data_parallel(cfg)) { /* each rank's graph takes its share of the batch */
        if (task != TR_TASK_FIT) {
            const int pl = tr_config_run_line(cfg, "parallel"), tl = tr_config_run_line(cfg, "task");
            char at[32] = "";
            if (pl || tl) snprintf(at, sizeof at, ":%d", pl ? pl : tl);
            rc = tr_error_set(err, TR_ERR_UNSUPPORTED, "%s%s: [run] task = %s in a data-parallel run (%d rank%s): "
                              "data parallelism trains (task = fit); run %s in one process", cfg->file, at, cfg->task,
                              cfg->ranks, cfg->ranks == 1 ? "" : "s", cfg->task);
            goto fail;
        }
        if (cfg->batch % cfg->ranks != 0) {
            char where[TR_CONFIG_PATH + 96];
            rc = tr_error_set(err, TR_ERR_INVALID, "%s = %lld on %d ranks: expected a multiple of the ranks (batch is "
                              "the global batch; each rank takes batch / ranks samples)",
                              tr_config_where(cfg, "batch", tr_config_run_line(cfg, "batch"), where, sizeof where),
                              (long long)cfg->batch, cfg->ranks);
            goto fail;
        }
        tg->opts.batch = cfg->batch / cfg->ranks;
    }
    if ((rc = check_section_keys(cfg, err)) != TR_OK) goto fail;
    if (task != TR_TASK_GENERATE) warn_unread(cfg, "generate", "task = generate");
    if (task != TR_TASK_FIT) warn_unread(cfg, "train", "task = fit");
    if (task == TR_TASK_GENERATE && m->generate) {
        rc = build_generate(cfg, tg, err);
        if (rc) goto fail;
        return TR_OK;
    }
    if (task == TR_TASK_GENERATE && (rc = generate_keys(cfg, tg, err)) != TR_OK) goto fail;
    rc = tr_graph_init(&tg->graph, err);
    if (rc) goto fail;
    rc = m->build(tg->config, &tg->opts, tg->graph, err);
    if (rc == TR_OK) rc = tr_graph_status(tg->graph, err);
    tg->n_model_inputs = tr_graph_n_inputs(tg->graph);
    if (rc == TR_OK && task == TR_TASK_FIT) rc = add_training(cfg, tg, err);
    if (rc && strncmp(err->msg, cfg->file, strlen(cfg->file)) == 0 && err->msg[strlen(cfg->file)] == ':')
        goto fail; /* it names the INI's line already ([train] keys): said once */
    if (rc) {
        char where[32] = "", over[512], from[TR_CONFIG_STR + 32] = "";
        int line = model_source(cfg, err->msg, from, sizeof from);
        if (!line && strstr(err->msg, "seq_len")) line = cfg->seq_len_line; /* the run's size, not a model key */
        if (line) snprintf(where, sizeof where, ":%d", line);
        tr_error_prefix(err, "%s%s: building model '%s' (preset %s%s, task %s%s)", cfg->file, where, m->name,
                        cfg->preset, from, cfg->task, tr_config_overrides_str(cfg, over, sizeof over));
        goto fail;
    }
    return TR_OK;
fail:
    tr_task_graph_free(tg);
    return rc;
}

void tr_task_graph_free(struct tr_task_graph *tg) {
    tr_train_step_free(&tg->train);
    tr_generate_text_free(tg->model, &tg->text);
    if (tg->gen.prefill) tg->graph = NULL; /* the prefill pass, freed with the decode pass */
    tr_generate_graphs_free(&tg->gen);
    tr_graph_free(tg->graph);
    free(tg->config);
    memset(tg, 0, sizeof *tg);
}
