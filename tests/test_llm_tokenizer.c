/* The LLMs' tokenizer.json (models/decoder/tokenizer.h) against Hugging Face's tokenizers
 * on toy vocabularies in each layout trident reads (tests/fixtures/llm_tokenizer, made by
 * make_llm_tokenizer_fixture.py): every text's ids, every id list's text (byte fallback,
 * bytes that are not UTF-8, special tokens), and the refusals of what it does not read. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "decoder/tokenizer.h"
#include "hf_json.h"
#include "testutil.h"

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
    const int32_t bad = tr_hf_tokenizer_n_ids(t);
    char *text = NULL;
    assert_int_equal(tr_hf_decode(t, &bad, 1, &text, &e), TR_ERR_INVALID);
    tr_assert_msg_has(&e, "is not in its vocabulary");
    assert_null(text);
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
}

TR_TEST_MAIN(tr_test_dir_setup, tr_test_dir_teardown, test_against_tokenizers, test_refusals)
