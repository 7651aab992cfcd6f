/* libFuzzer: the LLMs' tokenizer.json reader (models/decoder/tokenizer.h). The first byte
 * picks what the rest is:
 *   even  a text, encoded and decoded by each toy tokenizer of tests/fixtures/llm_tokenizer;
 *         by Gemma's and Mistral's layouts (lossless: Replace " " <-> "▁", Prepend then
 *         Strip) decode(encode(text)) must be the text again, where it is UTF-8 without a
 *         NUL, a "▁" or an added token's text (those the decoder cannot give back as they
 *         were); anything else a mismatch aborts
 *   odd   a tokenizer.json: loaded; where it loads, a fixed text encoded and decoded, and
 *         every id below its size decoded */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "decoder/tokenizer.h"
#include "fuzz_common.h"

static const char *const styles[] = {"gemma", "mistral", "metaspace", "metaspace_split", "split_isolated",
                                     "split_removed", "split_next"};
#define N_STYLES (sizeof styles / sizeof styles[0])
#define N_LOSSLESS 2 /* gemma, mistral */

static void round_trip(const struct tr_hf_tokenizer *t, const char *text, int lossless) {
    int32_t *ids = NULL;
    int n = 0;
    char *back = NULL;
    struct tr_error e = {0};
    int rc = tr_hf_encode(t, text, &ids, &n, &e);
    fuzz_note("encode", rc, e.msg);
    if (!rc) {
        rc = tr_hf_decode(t, ids, n, &back, &e);
        fuzz_note("decode", rc, e.msg);
        if (rc) abort(); /* its own ids */
        if (lossless && strcmp(back, text) != 0) {
            fprintf(stderr, "fuzz_tokenizer: '%s' came back as '%s'\n", text, back);
            abort();
        }
    }
    free(ids);
    free(back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static struct tr_hf_tokenizer *tok[N_STYLES];
    static int loaded;
    struct tr_error e = {0};
    for (size_t i = 0; i < N_STYLES && !loaded; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", FUZZ_TOKENIZERS, styles[i]);
        if (tr_hf_tokenizer_load(path, &tok[i], &e)) {
            fprintf(stderr, "fuzz_tokenizer: %s\n", e.msg);
            abort();
        }
    }
    loaded = 1;
    if (size == 0) return 0;
    if (data[0] % 2 == 0) {
        /* a prompt's length (an INI value is at most 255 bytes): the JSON seeds' 16 KiB as
         * one word would spend the runs in coverage tracing */
        char *text = fuzz_string(data + 1, size - 1 < 1024 ? size - 1 : 1024);
        const int plain = tr_hf_utf8_valid((const unsigned char *)text, strlen(text)) && !strstr(text, "\xE2\x96\x81") &&
                          !strstr(text, "<pad>") && !strstr(text, "<eos>") && !strstr(text, "<bos>") &&
                          !strstr(text, "<unk>") && !strstr(text, "<s>") && !strstr(text, "</s>");
        for (size_t i = 0; i < N_STYLES; i++) round_trip(tok[i], text, plain && i < N_LOSSLESS);
        free(text);
        return 0;
    }
    struct tr_hf_tokenizer *t = NULL;
    int rc = tr_hf_tokenizer_load(fuzz_file(0, data + 1, size - 1), &t, &e);
    fuzz_note("load", rc, e.msg);
    if (rc) return 0;
    round_trip(t, "Hello  world, caf\xC3\xA9 \xF0\x9F\x9A\x80 <bos>!", 0);
    const int32_t n = tr_hf_tokenizer_n_ids(t);
    for (int32_t id = 0; id < n && id < 4096; id++) {
        char *s = NULL;
        rc = tr_hf_decode(t, &id, 1, &s, &e);
        fuzz_note("decode one", rc, e.msg);
        free(s);
    }
    tr_hf_tokenizer_free(t);
    return 0;
}
