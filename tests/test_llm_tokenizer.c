/* The LLMs' tokenizer.json (models/decoder/tokenizer.h) against Hugging Face's tokenizers
 * on toy vocabularies in each layout trident reads (tests/fixtures/llm_tokenizer, made by
 * make_llm_tokenizer_fixture.py): every text's ids, every id list's text (byte fallback,
 * bytes that are not UTF-8, special tokens), and the refusals of what it does not read;
 * then a whole text generate ([generate] prompt) against transformers' generate and
 * decode on the tiny fixtures' weights, on every backend, and its refusals. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "decoder/tokenizer.h"
#include "hf_json.h"
#include "models.h"
#include "testutil.h"
#include "trident/bench.h"
#include "trident/config.h"

#define FIXTURES TR_SOURCE_DIR "/tests/fixtures/llm_tokenizer"

static const char *const styles[] = {"gemma",          "mistral",       "metaspace", "metaspace_split",
                                     "split_isolated", "split_removed", "split_next"};

static void check_style(const char *style) {
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/%s", FIXTURES, style);
    struct tr_hf_tokenizer *t = NULL;
    struct tr_error e = {0};
    if (tr_hf_tokenizer_load(dir, &t, &e)) fail_msg("%s: %s", style, e.msg);
    snprintf(path, sizeof path, "%s/expected.json", dir);
    cJSON *root = NULL;
    if (tr_hf_json_load_max(path, 1 << 20, "a fixture", &root, &e)) fail_msg("%s", e.msg);
    assert_int_equal(tr_hf_tokenizer_n_ids(t), cJSON_GetObjectItem(root, "vocab_size")->valueint);
    const cJSON *c;
    int n_enc = 0, n_dec = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(root, "encode")) {
        const char *text = cJSON_GetArrayItem(c, 0)->valuestring;
        const cJSON *want = cJSON_GetArrayItem(c, 1);
        int32_t *ids;
        int n;
        if (tr_hf_encode(t, text, &ids, &n, &e)) fail_msg("%s: '%s': %s", style, text, e.msg);
        int same = n == cJSON_GetArraySize(want);
        for (int i = 0; same && i < n; i++) same = ids[i] == cJSON_GetArrayItem(want, i)->valueint;
        if (!same) {
            char have[2048] = "";
            for (int i = 0; i < n && strlen(have) < sizeof have - 16; i++)
                snprintf(have + strlen(have), sizeof have - strlen(have), " %d", (int)ids[i]);
            char *w = cJSON_PrintUnformatted(want);
            fail_msg("%s: '%s' is [%s ], tokenizers says %s", style, text, have, w);
        }
        free(ids);
        n_enc++;
    }
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(root, "decode")) {
        const cJSON *list = cJSON_GetArrayItem(c, 0);
        const char *want = cJSON_GetArrayItem(c, 1)->valuestring;
        int32_t ids[128];
        int n = 0;
        const cJSON *id;
        cJSON_ArrayForEach(id, list) if (n < 128) ids[n++] = id->valueint;
        char *text;
        if (tr_hf_decode(t, ids, n, &text, &e)) fail_msg("%s: %s", style, e.msg);
        if (strcmp(text, want) != 0) fail_msg("%s: decode #%d is '%s', tokenizers says '%s'", style, n_dec, text, want);
        free(text);
        n_dec++;
    }
    assert_true(n_enc >= 10 && n_dec >= 10);
    print_message("%s: %d texts' ids and %d id lists' texts as tokenizers makes them\n", style, n_enc, n_dec);
    /* an id past the vocabulary (a model's vocab_size larger than the tokenizer's) is
     * skipped, as tokenizers' decode skips it: the text of the others */
    const int32_t bad = tr_hf_tokenizer_n_ids(t);
    char *text = NULL, *plain = NULL;
    const cJSON *one = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "decode"), 0);
    int32_t with[66], without[64];
    int m = 0;
    const cJSON *id;
    cJSON_ArrayForEach(id, cJSON_GetArrayItem(one, 0)) if (m < 64) without[m++] = id->valueint;
    assert_true(m > 0);
    with[0] = bad;
    memcpy(with + 1, without, sizeof *without * (size_t)m);
    with[m + 1] = bad + 7;
    assert_int_equal(tr_hf_decode(t, with, m + 2, &text, &e), TR_OK);
    assert_int_equal(tr_hf_decode(t, without, m, &plain, &e), TR_OK);
    assert_string_equal(text, plain);
    free(text);
    free(plain);
    cJSON_Delete(root);
    tr_hf_tokenizer_free(t);
}

static void test_against_tokenizers(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof styles / sizeof styles[0]; i++) check_style(styles[i]);
}

/* gemma's tokenizer.json with `edit` applied (a cJSON path set to a JSON value), loaded:
 * its error must hold `want`. */
static void refused(const char *part, const char *key, const char *json, const char *want) {
    struct tr_error e = {0};
    cJSON *root = NULL;
    if (tr_hf_json_load_max(FIXTURES "/gemma/tokenizer.json", 1 << 20, "a fixture", &root, &e)) fail_msg("%s", e.msg);
    cJSON *obj = part ? cJSON_GetObjectItem(root, part) : root;
    cJSON *v = cJSON_Parse(json);
    assert_non_null(v);
    cJSON_ReplaceItemInObject(obj, key, v);
    char *text = cJSON_Print(root), path[512];
    tr_test_dir_file("tokenizer.json", text, path, sizeof path);
    free(text);
    cJSON_Delete(root);
    struct tr_hf_tokenizer *t = NULL;
    if (tr_hf_tokenizer_load(path, &t, &e) == TR_OK) fail_msg("%s.%s = %s was read", part ? part : "", key, json);
    assert_null(t);
    tr_assert_msg_has(&e, want);
    tr_assert_msg_has(&e, "tokenizer.json");
}

static void test_refusals(void **state) {
    (void)state;
    refused(NULL, "pre_tokenizer", "{\"type\": \"ByteLevel\", \"add_prefix_space\": false}",
            "pre_tokenizer ByteLevel is not supported");
    refused(NULL, "normalizer", "{\"type\": \"NFKC\"}", "normalizer NFKC is not supported");
    refused(NULL, "normalizer", "{\"type\": \"Replace\", \"pattern\": {\"Regex\": \" +\"}, \"content\": \"x\"}",
            "a regex is not supported");
    refused(NULL, "decoder", "{\"type\": \"Metaspace\", \"replacement\": \"x\"}", "decoder Metaspace is not supported");
    refused(NULL, "post_processor", "{\"type\": \"ByteLevel\"}", "post_processor ByteLevel is not supported");
    refused(NULL, "model", "{\"type\": \"Unigram\", \"vocab\": []}", "model Unigram is not supported");
    refused("model", "merges", "[\"x y\"]", "merge 1 is not two pieces of the vocabulary");
    refused("model", "unk_token", "\"<nothing>\"", "unk_token \"<nothing>\" is not in the vocabulary");
    refused("model", "vocab", "{\"a\": -1}", "model.vocab \"a\" is not an id");
    refused("model", "dropout", "0.1", "dropout is not supported");
    struct tr_hf_tokenizer *t = NULL;
    struct tr_error e = {0};
    assert_int_equal(tr_hf_tokenizer_load("/nonexistent", &t, &e), TR_ERR_IO);
    tr_assert_msg_has(&e, "/nonexistent");
    assert_null(t);
    /* a directory of a slow tokenizer's tokenizer.model alone: which file is read, and how to make it */
    char spm[512], sdir[512];
    tr_test_dir_file("spm", NULL, sdir, sizeof sdir);
    assert_int_equal(mkdir(sdir, 0700), 0);
    tr_test_dir_file("spm/tokenizer.model", "not read", spm, sizeof spm);
    assert_int_equal(tr_hf_tokenizer_load(sdir, &t, &e), TR_ERR_IO);
    tr_assert_msg_has(&e, "holds a SentencePiece tokenizer.model and no tokenizer.json, which is the one trident reads");
    remove(spm);
    rmdir(sdir);
}

/* `trident run` of ini (a [run] + [generate] text): its error, or "" and the report. */
static struct tr_bench_report rep;
static const char *run(const char *ini) {
    static struct tr_config cfg;
    static struct tr_error e;
    memset(&e, 0, sizeof e);
    memset(&rep, 0, sizeof rep);
    if (tr_config_load_string(ini, "text.ini", &cfg, &e) || tr_bench_run(&cfg, tr_builtin_models, &rep, &e))
        return e.msg;
    return "";
}

static void must_fail(const char *msg, const char *want) {
    if (!*msg) fail_msg("ran, where it should have failed with \"%s\"", want);
    if (!strstr(msg, want)) fail_msg("message \"%s\"\n  lacks \"%s\"", msg, want);
}

/* The expected.json's generate of a style: a greedy run of transformers on the tiny
 * fixture's weights, its new tokens decoded. */
static void generate_as_transformers(const char *model) {
    char path[600], ini[2048];
    snprintf(path, sizeof path, "%s/%s/expected.json", FIXTURES, model);
    cJSON *root = NULL;
    struct tr_error e = {0};
    if (tr_hf_json_load_max(path, 1 << 20, "a fixture", &root, &e)) fail_msg("%s", e.msg);
    const cJSON *g = cJSON_GetObjectItem(root, "generate");
    const char *prompt = cJSON_GetObjectItem(g, "prompt")->valuestring, *want = cJSON_GetObjectItem(g, "text")->valuestring;
    const int max_length = cJSON_GetObjectItem(g, "max_length")->valueint;
    const int n_prompt = cJSON_GetArraySize(cJSON_GetObjectItem(g, "prompt_ids"));
    const char *const head = "[run]\nmodel = %s\npreset = tiny\ntask = generate\nbackends = torch, "
                             "torch:reduce-overhead, tf, jax\nbatch = 2\nsteps = 1\nwarmup = 1\nisolate = off\n"
                             "weights = %s/tests/fixtures/%s_tiny.safetensors\n[generate]\nmax_length = %d\nprompt = %s\n"
                             "tokenizer = %s/%s\n";
    snprintf(ini, sizeof ini, head, model, TR_SOURCE_DIR, model, max_length, prompt, FIXTURES, model);
    const char *msg = run(ini);
    if (*msg) fail_msg("%s: %s", model, msg);
    assert_true(rep.all_ok);
    assert_int_equal(rep.gen.prompt_len, n_prompt); /* the prompt's tokens, no padding */
    if (strcmp(rep.texts[0].text, want) != 0) fail_msg("%s: generated '%s', transformers '%s'", model, rep.texts[0].text, want);
    print_message("%s: '%s' -> '%s' on %d backends, as transformers generates and decodes it\n", model, prompt,
                  rep.texts[0].text, rep.n_rows);
    /* left-padded to more than the prompt: the same new tokens (fewer of them) */
    snprintf(ini, sizeof ini, head, model, TR_SOURCE_DIR, model, max_length, prompt, FIXTURES, model);
    strcat(ini, "prompt_len = 12\n");
    if (*(msg = run(ini))) fail_msg("%s, padded: %s", model, msg);
    assert_int_equal(rep.gen.prompt_len, 12);
    if (strncmp(rep.texts[0].text, want, 8) != 0) fail_msg("%s, padded: generated '%s', unpadded '%s'", model, rep.texts[0].text, want);
    /* the text ends at the model's first end-of-sequence id, where transformers' generate
     * stops (the run still makes all of them) */
    snprintf(ini, sizeof ini, head, model, TR_SOURCE_DIR, model, max_length, prompt, FIXTURES, model);
    const cJSON *new_ids = cJSON_GetObjectItem(g, "new_ids");
    const int n_new = cJSON_GetArraySize(new_ids);
    int at = 1; /* the first new id unlike the first one (none: the first) */
    while (at < n_new && cJSON_GetArrayItem(new_ids, at)->valueint == cJSON_GetArrayItem(new_ids, 0)->valueint) at++;
    if (at == n_new) at = 0;
    snprintf(ini + strlen(ini), sizeof ini - strlen(ini), "[model]\neos_token_id = 0, %d\n",
             cJSON_GetArrayItem(new_ids, at)->valueint);
    if (*(msg = run(ini))) fail_msg("%s, eos: %s", model, msg);
    assert_int_equal(rep.texts[0].text_tokens, at);
    assert_int_equal(rep.new_tokens, max_length - n_prompt);
    if (strlen(rep.texts[0].text) >= strlen(want) || strncmp(rep.texts[0].text, want, strlen(rep.texts[0].text)) != 0)
        fail_msg("%s: up to the end of sequence '%s', all of it '%s'", model, rep.texts[0].text, want);
    /* a file of prompts of other lengths, one a sample, left-padded to the longest: each
     * sample's text as transformers' batch generate makes it */
    const cJSON *bt = cJSON_GetObjectItem(g, "batch"), *p;
    char file[600], list[1024] = "\xEF\xBB\xBF", many[2048]; /* an editor's byte order mark: not prompt 0's text */
    cJSON_ArrayForEach(p, cJSON_GetObjectItem(bt, "prompts")) {
        strcat(list, p->valuestring);
        strcat(list, strlen(list) % 2 ? "\r\n\n" : "\n"); /* CRLF and blank lines too */
    }
    tr_test_dir_file("prompts.txt", list, file, sizeof file);
    const int n_batch = cJSON_GetArraySize(cJSON_GetObjectItem(bt, "prompts"));
    const char *const many_head = "[run]\nmodel = %s\npreset = tiny\ntask = generate\nbackends = torch, tf, jax\n"
                                  "batch = %d\nsteps = 1\nwarmup = 1\nisolate = off\nweights = %s/tests/fixtures/"
                                  "%s_tiny.safetensors\n[generate]\nmax_length = %d\nprompts = %s\ntokenizer = %s/%s\n";
    int longest = 0;
    struct tr_hf_tokenizer *t;
    char dir[600];
    snprintf(dir, sizeof dir, "%s/%s", FIXTURES, model);
    assert_int_equal(tr_hf_tokenizer_load(dir, &t, &e), TR_OK);
    for (int k = 0; k < n_batch; k++) {
        int32_t *ids;
        int n;
        assert_int_equal(tr_hf_encode(t, cJSON_GetArrayItem(cJSON_GetObjectItem(bt, "prompts"), k)->valuestring, &ids,
                                      &n, &e), TR_OK);
        if (n > longest) longest = n;
        free(ids);
    }
    tr_hf_tokenizer_free(t);
    const int new_tokens = cJSON_GetObjectItem(bt, "new_tokens")->valueint;
    snprintf(many, sizeof many, many_head, model, n_batch, TR_SOURCE_DIR, model, longest + new_tokens, file, FIXTURES,
             model);
    if (*(msg = run(many))) fail_msg("%s, prompts: %s", model, msg);
    assert_true(rep.all_ok);
    assert_int_equal(rep.n_texts, n_batch);
    for (int k = 0; k < n_batch; k++) {
        const char *w = cJSON_GetArrayItem(cJSON_GetObjectItem(bt, "texts"), k)->valuestring;
        if (strcmp(rep.texts[k].text, w) != 0)
            fail_msg("%s, sample %d of a batch of prompts: '%s', transformers '%s'", model, k, rep.texts[k].text, w);
    }
    print_message("%s: a batch of %d prompts, left-padded to %d tokens, as transformers generates it\n", model,
                  n_batch, longest);
    /* more samples than prompts: they cycle (greedy: the first ones shown) */
    snprintf(many, sizeof many, many_head, model, n_batch + 2, TR_SOURCE_DIR, model, longest + new_tokens, file,
             FIXTURES, model);
    if (*(msg = run(many))) fail_msg("%s, cycled prompts: %s", model, msg);
    assert_int_equal(rep.n_texts, n_batch);
    snprintf(many, sizeof many, many_head, model, n_batch - 1, TR_SOURCE_DIR, model, longest + new_tokens, file,
             FIXTURES, model);
    must_fail(run(many), "prompts: 3 prompts for [run] batch = 2: expected at most one a sample");
    cJSON_Delete(root);
}

static void test_generate_text(void **state) {
    (void)state;
    generate_as_transformers("gemma");
    generate_as_transformers("mistral");
}

static void test_generate_text_refusals(void **state) {
    (void)state;
    char ini[2048], base[1024];
    snprintf(base, sizeof base, "[run]\nmodel = gemma\npreset = tiny\ntask = generate\nbackends = torch\nbatch = 1\n"
             "steps = 1\nwarmup = 1\nisolate = off\n%%s[generate]\nprompt = A photo of an "
             "astronaut\n%%s");
    snprintf(ini, sizeof ini, base, "", "");
    must_fail(run(ini), "text.ini:11: [generate] prompt needs a tokenizer");
    snprintf(ini, sizeof ini, base, "", "tokenizer = " FIXTURES "/gemma\nprompt_len = 4\n");
    must_fail(run(ini), "text.ini:13: [generate] prompt_len = 4 is shorter than the prompt's 9 tokens");
    snprintf(ini, sizeof ini, base, "", "tokenizer = " FIXTURES "/gemma\nmax_length = 9\n");
    must_fail(run(ini), "max_length = 9 leaves no new token after the prompt's 9 tokens");
    snprintf(ini, sizeof ini, base, "[model]\nvocab_size = 256\n", "tokenizer = " FIXTURES "/gemma\n");
    must_fail(run(ini), "has 512 ids, the model's vocab_size is 256: not this model's tokenizer");
    snprintf(ini, sizeof ini, base, "", "tokenizer = " FIXTURES "\n");
    must_fail(run(ini), FIXTURES "/tokenizer.json");
    char empty[600], both[900];
    tr_test_dir_file("empty.txt", "\n  \n\r\n", empty, sizeof empty);
    snprintf(both, sizeof both, "tokenizer = " FIXTURES "/gemma\nprompts = %s\n", empty);
    snprintf(ini, sizeof ini, base, "", both);
    must_fail(run(ini), "text.ini:13: [generate] prompts: prompt is given on line 11; give one of prompt and prompts");
    snprintf(ini, sizeof ini, "[run]\nmodel = gemma\npreset = tiny\ntask = generate\nbackends = torch\n"
             "isolate = off\n[generate]\n%s", both);
    must_fail(run(ini), "holds no prompt (one a line)");
    snprintf(ini, sizeof ini, base, "[model]\neos_token_id = 512\n", "tokenizer = " FIXTURES "/gemma\n");
    must_fail(run(ini), "eos_token_id = '512': expected integers from 0 to 511");
    /* config.json's list of end-of-sequence ids (Gemma 2's [1, 107]) */
    char cj[600], with[700];
    tr_test_dir_file("config.json", "{\"model_type\": \"gemma\", \"vocab_size\": 512, \"hidden_size\": 64, "
                     "\"intermediate_size\": 128, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
                     "\"num_key_value_heads\": 1, \"head_dim\": 32, \"max_position_embeddings\": 128, "
                     "\"eos_token_id\": [1, 396]}", cj, sizeof cj);
    snprintf(with, sizeof with, "weights = " TR_SOURCE_DIR "/tests/fixtures/gemma_tiny.safetensors\n[model]\n"
             "hf_config = %s\n", cj);
    snprintf(ini, sizeof ini, base, with, "tokenizer = " FIXTURES "/gemma\nmax_length = 12\n");
    const char *m2 = run(ini);
    if (*m2) fail_msg("eos_token_id from config.json: %s", m2);
    assert_int_equal(rep.texts[0].text_tokens, 0); /* gemma tiny's first new token is 396 */
    /* 396 is an ordinary token of the toy vocabulary: decode(skip_special_tokens=True) of
     * generate's output keeps it, as only special tokens are skipped */
    assert_string_equal(rep.texts[0].text, "aut");
    /* generation_config.json beside it: its eos_token_id is where generate stops */
    char gc[600];
    tr_test_dir_file("generation_config.json", "{\"bos_token_id\": 2, \"eos_token_id\": 1, \"pad_token_id\": 0}",
                     gc, sizeof gc);
    m2 = run(ini);
    if (*m2) fail_msg("eos_token_id from generation_config.json: %s", m2);
    assert_string_equal(rep.texts[0].text, "autautaut");
    tr_test_dir_file("generation_config.json", "{\"eos_token_id\": \"1\"}", gc, sizeof gc);
    must_fail(run(ini), "generation_config.json': \"eos_token_id\" is not a token id");
    assert_int_equal(unlink(gc), 0);
    /* by default the tokenizer beside the weights: a model's directory as the Hub keeps it */
    char repo[512], ln[600], defaults[1024];
    snprintf(repo, sizeof repo, "%s/repo", tr_test_dir);
    assert_int_equal(mkdir(repo, 0755), 0);
    snprintf(ln, sizeof ln, "%s/model.safetensors", repo);
    assert_int_equal(symlink(TR_SOURCE_DIR "/tests/fixtures/gemma_tiny.safetensors", ln), 0);
    snprintf(ln, sizeof ln, "%s/tokenizer.json", repo);
    assert_int_equal(symlink(FIXTURES "/gemma/tokenizer.json", ln), 0);
    snprintf(defaults, sizeof defaults, "weights = %s\n", repo);
    snprintf(ini, sizeof ini, base, defaults, "max_length = 12\n");
    const char *msg = run(ini);
    if (*msg) fail_msg("the tokenizer in the weights' directory: %s", msg);
    assert_string_equal(rep.texts[0].text, "autautaut");
    /* by default the tokenizer beside the weights: its directory */
    snprintf(ini, sizeof ini, base, "weights = " TR_SOURCE_DIR "/tests/fixtures/gemma_tiny.safetensors\n", "");
    must_fail(run(ini), "cannot open '" TR_SOURCE_DIR "/tests/fixtures/tokenizer.json'");
}

TR_TEST_MAIN(tr_test_dir_setup, tr_test_dir_teardown, test_against_tokenizers, test_refusals, test_generate_text,
             test_generate_text_refusals)
