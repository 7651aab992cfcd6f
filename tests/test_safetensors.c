/* safetensors: a round trip through the writer, the Hugging Face fixture, and every kind
 * of broken file the reader must refuse with a message naming the file and the tensor. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "testutil.h"
#include "trident/safetensors.h"

/* A file from a header string and data bytes; hlen overrides the length field when >= 0. */
static void write_raw(const char *json, const void *data, size_t n, long long hlen) {
    FILE *f = fopen(tr_test_file, "wb");
    assert_non_null(f);
    uint64_t len = hlen >= 0 ? (uint64_t)hlen : strlen(json);
    unsigned char b[8];
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(len >> (8 * i));
    assert_int_equal(fwrite(b, 1, 8, f), 8);
    assert_int_equal(fwrite(json, 1, strlen(json), f), strlen(json));
    if (n) assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

/* open must fail with status, naming the file and (when given) the tensor. */
static void expect_open_error(int status, const char *tensor) {
    struct tr_safetensors *st = (void *)1;
    struct tr_error e = {0};
    int rc = tr_safetensors_open(tr_test_file, &st, &e);
    assert_int_equal(rc, status);
    assert_null(st);
    tr_assert_msg_has(&e, tr_test_file);
    if (tensor) tr_assert_msg_has(&e, tensor);
}

static void test_round_trip(void **state) {
    int64_t s23[2] = {2, 3}, s4[1] = {4}, s31[2] = {3, 1}, s5[1] = {5}, s0[1] = {0}, s34[2] = {3, 4};
    struct tr_tensor ts[8];
    ts[0] = tr_test_tensor(TR_DTYPE_F32, 2, s23);
    ts[1] = tr_test_tensor(TR_DTYPE_BF16, 1, s4);
    ts[2] = tr_test_tensor(TR_DTYPE_I32, 2, s31);
    ts[3] = tr_test_tensor(TR_DTYPE_I64, 1, s5);
    ts[4] = tr_test_tensor(TR_DTYPE_F64, 0, NULL);
    ts[5] = tr_test_tensor(TR_DTYPE_F16, 1, s5);
    ts[6] = tr_test_tensor(TR_DTYPE_F32, 1, s0);
    ts[7] = tr_test_tensor(TR_DTYPE_F32, 2, s34);
    for (int i = 0; i < 8; i++) tr_test_randn(&ts[i], 10 + (uint64_t)i, 1.0);
    tr_test_randint(&ts[2], 3, 1000);
    ((int64_t *)ts[3].data)[4] = (int64_t)1 << 60; /* beyond a double's integers */
    /* A transposed view (4,3) of ts[7]: the writer packs it row-major. */
    struct tr_tensor tv = ts[7];
    tv.shape[0] = 4, tv.shape[1] = 3, tv.strides[0] = 1, tv.strides[1] = 4;
    struct tr_tensor in[8] = {ts[0], ts[1], ts[2], ts[3], ts[4], ts[5], ts[6], tv};
    const char *names[8] = {"a.weight", "b", "ids", "big", "scalar", "half", "empty", "transposed"};
    struct tr_error e = {0};
    assert_int_equal(tr_safetensors_write(tr_test_file, 8, names, in, &e), TR_OK);

    /* The header is padded so the data starts 8-byte aligned. */
    FILE *f = fopen(tr_test_file, "rb");
    unsigned char len8[8];
    assert_int_equal(fread(len8, 1, 8, f), 8);
    fclose(f);
    assert_int_equal(len8[0] % 8, 0);

    struct tr_safetensors *st = NULL;
    assert_int_equal(tr_safetensors_open(tr_test_file, &st, &e), TR_OK);
    assert_int_equal(tr_safetensors_count(st), 8);
    assert_string_equal(tr_safetensors_path(st), tr_test_file);
    for (int i = 0; i < 8; i++) {
        assert_string_equal(tr_safetensors_name(st, i), names[i]); /* offsets in the order given */
        struct tr_tensor t;
        assert_int_equal(tr_safetensors_get(st, names[i], &t, &e), TR_OK);
        assert_int_equal(t.dtype, in[i].dtype);
        assert_int_equal(t.ndim, in[i].ndim);
        for (int d = 0; d < t.ndim; d++) assert_int_equal(t.shape[d], in[i].shape[d]);
        assert_true(tr_tensor_is_contiguous(&t));
        if (i != 7 && tr_tensor_nbytes(&t)) assert_memory_equal(t.data, in[i].data, tr_tensor_nbytes(&t));
    }
    struct tr_tensor t;
    assert_int_equal(tr_safetensors_get(st, "transposed", &t, &e), TR_OK);
    for (int64_t r = 0; r < 4; r++)
        for (int64_t c = 0; c < 3; c++)
            assert_true(((float *)t.data)[r * 3 + c] == ((float *)ts[7].data)[c * 4 + r]);
    assert_int_equal(tr_safetensors_get(st, "big", &t, &e), TR_OK);
    assert_true(((int64_t *)t.data)[4] == (int64_t)1 << 60);

    assert_int_equal(tr_safetensors_get(st, "nope", &t, &e), TR_ERR_NOT_FOUND);
    tr_assert_msg_has(&e, "nope");
    tr_assert_msg_has(&e, tr_test_file);
    assert_null(tr_safetensors_name(st, 8));
    tr_safetensors_close(st);
    tr_test_tensors_free(8, ts);
}

static void test_write_refuses_bad_input(void **state) {
    int64_t s[1] = {2};
    struct tr_tensor t = tr_test_tensor(TR_DTYPE_F32, 1, s);
    tr_test_randn(&t, 1, 1);
    struct tr_tensor two[2] = {t, t};
    const char *dup[2] = {"x", "x"};
    struct tr_error e = {0};
    assert_int_equal(tr_safetensors_write(tr_test_file, 2, dup, two, &e), TR_ERR_INVALID);
    tr_assert_msg_has(&e, "'x'");
    const char *meta[1] = {"__metadata__"};
    assert_int_equal(tr_safetensors_write(tr_test_file, 1, meta, &t, &e), TR_ERR_INVALID);
    const char *ok[1] = {"x"};
    assert_int_equal(tr_safetensors_write("/nonexistent-dir/x.safetensors", 1, ok, &t, &e), TR_ERR_IO);
    tr_assert_msg_has(&e, "/nonexistent-dir/x.safetensors");
    tr_test_tensor_free(&t);
}

static void test_metadata_and_alignment(void **state) {
    /* An unpadded header (length 0 mod 8 is not required by the format) and a U8 tensor
     * first, so the F32 tensor sits at offset 3: it still reads right, and U8 is refused
     * on get only. */
    float vals[2] = {1.5f, -2.25f};
    unsigned char data[11] = {7, 8, 9};
    memcpy(data + 3, vals, 8);
    write_raw("{\"__metadata__\":{\"format\":\"pt\"},\"u\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]},"
              "\"f\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[3,11]}}",
              data, sizeof data, -1);
    struct tr_safetensors *st = NULL;
    struct tr_error e = {0};
    assert_int_equal(tr_safetensors_open(tr_test_file, &st, &e), TR_OK);
    assert_int_equal(tr_safetensors_count(st), 2);
    struct tr_tensor t;
    assert_int_equal(tr_safetensors_get(st, "f", &t, &e), TR_OK);
    assert_int_equal((uintptr_t)t.data % 4, 0);
    assert_true(((float *)t.data)[0] == 1.5f && ((float *)t.data)[1] == -2.25f);
    assert_int_equal(tr_safetensors_get(st, "u", &t, &e), TR_ERR_UNSUPPORTED);
    tr_assert_msg_has(&e, "'u'");
    tr_assert_msg_has(&e, "U8");
    tr_assert_msg_has(&e, tr_test_file);
    assert_int_equal(tr_safetensors_get(st, "__metadata__", &t, &e), TR_ERR_NOT_FOUND);
    tr_safetensors_close(st);
}

static void test_wrong_dtype_string(void **state) {
    float v[2] = {1, 2};
    write_raw("{\"w\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", v, 8, -1);
    struct tr_safetensors *st = NULL;
    struct tr_error e = {0};
    assert_int_equal(tr_safetensors_open(tr_test_file, &st, &e), TR_OK);
    struct tr_tensor t;
    assert_int_equal(tr_safetensors_get(st, "w", &t, &e), TR_ERR_UNSUPPORTED);
    tr_assert_msg_has(&e, "'w'");
    tr_assert_msg_has(&e, "F33");
    tr_assert_msg_has(&e, tr_test_file);
    tr_safetensors_close(st);
}

static void test_truncated(void **state) {
    int64_t s[1] = {16};
    struct tr_tensor t = tr_test_tensor(TR_DTYPE_F32, 1, s);
    tr_test_randn(&t, 2, 1);
    const char *names[1] = {"layer.weight"};
    struct tr_error e = {0};
    assert_int_equal(tr_safetensors_write(tr_test_file, 1, names, &t, &e), TR_OK);
    tr_test_tensor_free(&t);
    FILE *f = fopen(tr_test_file, "rb");
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fclose(f);
    /* Cut into the data: the tensor's offsets reach beyond the file. */
    assert_int_equal(truncate(tr_test_file, size - 4), 0);
    expect_open_error(TR_ERR_FORMAT, "layer.weight");
    /* Cut into the header: the header length reaches beyond the file. */
    assert_int_equal(truncate(tr_test_file, 20), 0);
    expect_open_error(TR_ERR_FORMAT, NULL);
    assert_int_equal(truncate(tr_test_file, 5), 0);
    expect_open_error(TR_ERR_FORMAT, NULL);
}

static void test_bad_header_length(void **state) {
    write_raw("{}", NULL, 0, (long long)1 << 40);
    expect_open_error(TR_ERR_FORMAT, NULL);
    struct tr_error e = {0};
    struct tr_safetensors *st;
    assert_int_equal(tr_safetensors_open(tr_test_file, &st, &e), TR_ERR_FORMAT);
    tr_assert_msg_has(&e, "header length");
}

static void test_bad_json(void **state) {
    write_raw("{\"w\":{\"dtype\":\"F32\",", NULL, 0, -1);
    expect_open_error(TR_ERR_FORMAT, NULL);
    write_raw("[1,2]", NULL, 0, -1);
    expect_open_error(TR_ERR_FORMAT, NULL);
    write_raw("{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", NULL, 0, -1);
    expect_open_error(TR_ERR_FORMAT, "'w'");
    float v = 1;
    write_raw("{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", &v, 4, -1);
    expect_open_error(TR_ERR_FORMAT, "'w'");
    write_raw("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
              "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
              &v, 4, -1);
    expect_open_error(TR_ERR_FORMAT, "'w'");
}

static void test_bad_offsets(void **state) {
    float v[2] = {1, 2};
    write_raw("{\"ok\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
              "\"far\":{\"dtype\":\"F32\",\"shape\":[25],\"data_offsets\":[0,100]}}",
              v, 8, -1);
    expect_open_error(TR_ERR_FORMAT, "'far'");
    expect_open_error(TR_ERR_FORMAT, "out of range");
    write_raw("{\"back\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}", v, 8, -1);
    expect_open_error(TR_ERR_FORMAT, "'back'");
    expect_open_error(TR_ERR_FORMAT, "data_offsets [8, 4] end before they begin");
    /* Bytes that do not match numel x element size. */
    write_raw("{\"size\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", v, 8, -1);
    expect_open_error(TR_ERR_FORMAT, "'size'");
    write_raw("{\"size\":{\"dtype\":\"U16\",\"shape\":[3],\"data_offsets\":[0,8]}}", v, 8, -1);
    expect_open_error(TR_ERR_FORMAT, "'size'");
}

/* The data section as the format lays it out: byte ranges from 0, in any header order,
 * with no overlap, no gap and nothing after the last; shapes within 2^48 bytes. */
static void test_layout_rules(void **state) {
    float v[4] = {1, 2, 3, 4};
    /* header order need not be offset order */
    write_raw("{\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
              "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
              "\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[16,16]}}",
              v, 16, -1);
    struct tr_safetensors *st = NULL;
    struct tr_error e = {0};
    assert_int_equal(tr_safetensors_open(tr_test_file, &st, &e), TR_OK);
    tr_safetensors_close(st);
    static const struct {
        const char *json, *needle;
    } bad[] = {
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]},"
         "\"c\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[12,16]}}",
         "tensors 'a' [0, 8] and 'b' [4, 12] share bytes"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[12,16]}}",
         "4 bytes of the data section before tensor 'b' (at 12) belong to no tensor"},
        {"{\"b\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[4,16]}}", "before tensor 'b' (at 4)"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", "last 8 bytes belong to no tensor"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"same\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"c\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
         "'a' [0, 8] and 'same' [0, 8] share bytes"},
        /* an empty tensor whose other extents multiply past 2^48: strides would overflow */
        {"{\"e\":{\"dtype\":\"F32\",\"shape\":[0,9007199254740992,9007199254740992],\"data_offsets\":[0,0]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
         "tensor 'e': shape entry 1 is 9007199254740992, more than 2^48"},
        {"{\"e\":{\"dtype\":\"F32\",\"shape\":[0,16777216,16777216],\"data_offsets\":[0,0]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
         "tensor 'e': shape [0,16777216,16777216] is more than 2^48 bytes"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_raw(bad[i].json, v, 16, -1);
        expect_open_error(TR_ERR_FORMAT, bad[i].needle);
    }
}

/* A FIFO where a file is expected is refused by what it is, without blocking on it; so is
 * a directory. */
static void test_not_a_regular_file(void **state) {
    char fifo[600];
    snprintf(fifo, sizeof fifo, "%s.fifo", tr_test_file);
    unlink(fifo);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    struct tr_safetensors *st = NULL;
    struct tr_error e = {0};
    assert_int_equal(tr_safetensors_open(fifo, &st, &e), TR_ERR_INVALID);
    tr_assert_msg_has(&e, "is a FIFO, not a regular file");
    unlink(fifo);
    assert_int_equal(tr_safetensors_open("/tmp", &st, &e), TR_ERR_INVALID);
    tr_assert_msg_has(&e, "'/tmp' is a directory");
}

static void test_too_many_dims(void **state) {
    float v = 1;
    write_raw("{\"deep\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", &v, 4, -1);
    expect_open_error(TR_ERR_UNSUPPORTED, "'deep'");
}

static void test_missing_file(void **state) {
    struct tr_safetensors *st;
    struct tr_error e = {0};
    assert_int_equal(tr_safetensors_open("/nonexistent/x.safetensors", &st, &e), TR_ERR_IO);
    tr_assert_msg_has(&e, "/nonexistent/x.safetensors");
}

/* The file transformers wrote: every tensor reads, with the state_dict's shapes. */
static void test_reads_hugging_face_file(void **state) {
    struct tr_safetensors *st = NULL;
    struct tr_error e = {0};
    assert_int_equal(tr_safetensors_open(TR_SOURCE_DIR "/tests/fixtures/bert_tiny.safetensors", &st, &e), TR_OK);
    assert_int_equal(tr_safetensors_count(st), 5 + 2 * 16 + 4); /* embeddings, 2 layers, pooler + classifier */
    int64_t total = 0;
    for (int i = 0; i < tr_safetensors_count(st); i++) {
        struct tr_tensor t;
        assert_int_equal(tr_safetensors_get(st, tr_safetensors_name(st, i), &t, &e), TR_OK);
        assert_int_equal(t.dtype, TR_DTYPE_F32);
        total += tr_tensor_numel(&t);
    }
    assert_int_equal(total, 143682);
    struct tr_tensor t;
    assert_int_equal(tr_safetensors_get(st, "bert.embeddings.word_embeddings.weight", &t, &e), TR_OK);
    assert_int_equal(t.ndim, 2);
    assert_int_equal(t.shape[0], 1000);
    assert_int_equal(t.shape[1], 64);
    tr_safetensors_close(st);
}

/* A checkpoint of another format (what the Hub holds beside safetensors) is named as
 * what it is, with how to convert it, rather than as a bad header length. */
static void test_other_formats(void **state) {
    (void)state;
    static const struct {
        const char *bytes;
        size_t n;
        const char *what;
    } files[] = {
#define BYTES(s) s, sizeof s - 1
        {BYTES("PK\x03\x04\x14\x00\x00\x00\x08\x00rest of a zip"), "a zip archive: PyTorch's torch.save"},
        {BYTES("\x80\x02}q\x00(X\x05\x00\x00\x00model"), "a Python pickle"},
        {BYTES("GGUF\x03\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"), "a GGUF file"},
        {BYTES("\x89HDF\r\n\x1a\n\x00\x00\x00\x00\x00\x00\x00\x00"), "an HDF5 file"},
#undef BYTES
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        FILE *f = fopen(tr_test_file, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(files[i].bytes, 1, files[i].n, f), files[i].n);
        fclose(f);
        struct tr_error e = {0};
        struct tr_safetensors *st = (void *)1;
        assert_int_equal(tr_safetensors_open(tr_test_file, &st, &e), TR_ERR_FORMAT);
        assert_null(st);
        tr_assert_msg_has(&e, "not a safetensors file but ");
        tr_assert_msg_has(&e, files[i].what);
        tr_assert_msg_has(&e, "safetensors.torch.save_file");
    }
}

TR_TEST_MAIN(tr_test_dir_setup, tr_test_dir_teardown, test_round_trip, test_write_refuses_bad_input,
             test_metadata_and_alignment, test_wrong_dtype_string, test_truncated, test_bad_header_length,
             test_bad_json, test_bad_offsets, test_layout_rules, test_not_a_regular_file, test_too_many_dims,
             test_missing_file, test_reads_hugging_face_file, test_other_formats)
