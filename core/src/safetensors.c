/* safetensors: map a file (its data section read only where touched), check every header
 * entry against the data section before handing out views, and write files the same way Hugging Face's writer does
 * (header padded with spaces to a multiple of 8, offsets in the order given). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "trident/file.h"
#include "trident/safetensors.h"

struct st_entry {
    char *name;
    char dtype_str[24];
    int dtype;                  /* enum tr_dtype, or -1 when trident does not read it */
    int ndim;
    int64_t shape[TR_MAX_DIMS];
    uint64_t begin, end;        /* into the data section */
    void *copy;                 /* an aligned copy when the offset is not aligned to the element */
};

struct tr_safetensors {
    char *path;
    unsigned char *data;        /* the data section: in map, else read into 64-byte aligned memory */
    void *map;                  /* the whole file, mapped copy-on-write; NULL where mmap failed */
    size_t map_size;
    uint64_t data_size;
    int n;
    struct st_entry *e;         /* header order */
    struct st_entry **sorted;   /* by name, for lookup */
};

/* The dtypes of the format. Those trident reads map to an enum tr_dtype; the rest keep
 * their element size so offsets are still checked, and are refused on get. */
static const struct {
    const char *name;
    int dtype;
    int size;
} st_dtypes[] = {
    {"F32", TR_DTYPE_F32, 4}, {"BF16", TR_DTYPE_BF16, 2}, {"F16", TR_DTYPE_F16, 2},
    {"I32", TR_DTYPE_I32, 4}, {"I64", TR_DTYPE_I64, 8},   {"F64", TR_DTYPE_F64, 8},
    {"BOOL", -1, 1},          {"U8", -1, 1},              {"I8", -1, 1},
    {"I16", -1, 2},           {"U16", -1, 2},             {"U32", -1, 4},
    {"U64", -1, 8},           {"F8_E5M2", -1, 1},         {"F8_E4M3", -1, 1},
};
#define N_ST_DTYPES ((int)(sizeof st_dtypes / sizeof st_dtypes[0]))

static const char *st_name_of(enum tr_dtype dt) {
    for (int i = 0; i < N_ST_DTYPES; i++)
        if (st_dtypes[i].dtype == (int)dt) return st_dtypes[i].name;
    return NULL;
}

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

void tr_safetensors_close(struct tr_safetensors *st) {
    if (!st) return;
    for (int i = 0; i < st->n; i++) {
        free(st->e[i].name);
        tr_host_free(st->e[i].copy);
    }
    free(st->e);
    free(st->sorted);
    if (st->map) munmap(st->map, st->map_size);
    else tr_host_free(st->data);
    free(st->path);
    free(st);
}

static int cmp_entry(const void *a, const void *b) {
    return strcmp((*(struct st_entry *const *)a)->name, (*(struct st_entry *const *)b)->name);
}

/* A JSON number that is a non-negative integer below 2^53 (exact in a double). */
static int json_uint(const cJSON *j, uint64_t *out) {
    if (!cJSON_IsNumber(j)) return 0;
    double v = j->valuedouble;
    if (!(v >= 0 && v <= 9007199254740992.0) || v != floor(v)) return 0;
    *out = (uint64_t)v;
    return 1;
}

static int parse_entry(const struct tr_safetensors *st, const cJSON *j, struct st_entry *e, struct tr_error *err) {
    const char *path = st->path;
    if (!cJSON_IsObject(j))
        return tr_error_set(err, TR_ERR_FORMAT, "%s: tensor '%s': header entry is not an object", path, e->name);
    const cJSON *jd = cJSON_GetObjectItemCaseSensitive(j, "dtype");
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(j, "shape");
    const cJSON *jo = cJSON_GetObjectItemCaseSensitive(j, "data_offsets");
    if (!cJSON_IsString(jd) || !cJSON_IsArray(js) || !cJSON_IsArray(jo))
        return tr_error_set(err, TR_ERR_FORMAT,
                            "%s: tensor '%s': header entry needs \"dtype\" (string), \"shape\" (array) and "
                            "\"data_offsets\" (array)",
                            path, e->name);
    snprintf(e->dtype_str, sizeof e->dtype_str, "%s", jd->valuestring);
    int elsize = 0;
    e->dtype = -1;
    for (int i = 0; i < N_ST_DTYPES; i++)
        if (strcmp(jd->valuestring, st_dtypes[i].name) == 0) {
            e->dtype = st_dtypes[i].dtype;
            elsize = st_dtypes[i].size;
        }

    int ndim = cJSON_GetArraySize(js);
    if (ndim > TR_MAX_DIMS)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "%s: tensor '%s': %d dimensions (trident reads at most %d)", path,
                            e->name, ndim, TR_MAX_DIMS);
    e->ndim = ndim;
    uint64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        uint64_t v;
        if (!json_uint(cJSON_GetArrayItem(js, d), &v))
            return tr_error_set(err, TR_ERR_FORMAT, "%s: tensor '%s': shape entry %d is not a non-negative integer "
                                "of at most 2^53 (JSON's exact integers)", path, e->name, d);
        if (v > TR_MAX_TENSOR_BYTES)
            return tr_error_set(err, TR_ERR_FORMAT, "%s: tensor '%s': shape entry %d is %llu, more than 2^48", path,
                                e->name, d, (unsigned long long)v);
        e->shape[d] = (int64_t)v;
        /* exact while the product stays within 2^48 (tr_shape_bytes below refuses the rest) */
        numel = v && numel > (TR_MAX_TENSOR_BYTES + 1) / v ? TR_MAX_TENSOR_BYTES + 1 : numel * v;
    }
    uint64_t bytes;
    if (!tr_shape_bytes(ndim, e->shape, e->dtype, &bytes)) {
        char sh[160];
        return tr_error_set(err, TR_ERR_FORMAT, "%s: tensor '%s': shape %s is more than 2^48 bytes", path, e->name,
                            tr_shape_str(ndim, e->shape, sh, sizeof sh));
    }

    uint64_t b, en;
    if (cJSON_GetArraySize(jo) != 2 || !json_uint(cJSON_GetArrayItem(jo, 0), &b) ||
        !json_uint(cJSON_GetArrayItem(jo, 1), &en))
        return tr_error_set(err, TR_ERR_FORMAT, "%s: tensor '%s': data_offsets must be two non-negative integers",
                            path, e->name);
    if (en < b)
        return tr_error_set(err, TR_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] end before they begin",
                            path, e->name, (unsigned long long)b, (unsigned long long)en);
    if (en > st->data_size)
        return tr_error_set(err, TR_ERR_FORMAT,
                            "%s: tensor '%s': data_offsets [%llu, %llu] out of range (the data section has %llu "
                            "bytes; truncated file?)",
                            path, e->name, (unsigned long long)b, (unsigned long long)en,
                            (unsigned long long)st->data_size);
    e->begin = b;
    e->end = en;
    if (elsize && (numel > UINT64_MAX / (uint64_t)elsize || numel * (uint64_t)elsize != en - b)) {
        char sh[128];
        return tr_error_set(err, TR_ERR_FORMAT,
                            "%s: tensor '%s': %llu bytes in data_offsets, but %s%s needs %llu elements x %d bytes",
                            path, e->name, (unsigned long long)(en - b), e->dtype_str,
                            tr_shape_str(ndim, e->shape, sh, sizeof sh), (unsigned long long)numel, elsize);
    }
    /* Views are typed pointers: a tensor not aligned to its element (an offset the format
     * allows, or a header length that leaves the mapped data section unaligned) gets an
     * aligned copy rather than an unaligned view. */
    if (e->dtype >= 0 && elsize && (uintptr_t)(st->data + b) % (uintptr_t)elsize != 0) {
        int rc = tr_host_alloc(&e->copy, en - b, err);
        if (rc) return rc;
        memcpy(e->copy, st->data + b, en - b);
    }
    return TR_OK;
}

static int cmp_offsets(const void *a, const void *b) {
    const struct st_entry *x = *(const struct st_entry *const *)a, *y = *(const struct st_entry *const *)b;
    return x->begin != y->begin ? (x->begin < y->begin ? -1 : 1) : x->end < y->end ? -1 : x->end > y->end;
}

/* The format's rule for the data section: the tensors' byte ranges, in order, start at 0,
 * follow each other with no gap and no overlap, and end where the file does. */
static int check_layout(const struct tr_safetensors *st, struct tr_error *err) {
    struct st_entry **o = malloc(sizeof *o * (size_t)(st->n ? st->n : 1));
    if (!o) return tr_error_set(err, TR_ERR_NOMEM, "%s: no memory for %d header entries", st->path, st->n);
    for (int i = 0; i < st->n; i++) o[i] = &st->e[i];
    qsort(o, (size_t)st->n, sizeof *o, cmp_offsets);
    int rc = TR_OK;
    uint64_t at = 0;
    for (int i = 0; i < st->n && !rc; i++) {
        if (o[i]->begin < at)
            rc = tr_error_set(err, TR_ERR_FORMAT, "%s: tensors '%s' [%llu, %llu] and '%s' [%llu, %llu] share bytes "
                              "(data_offsets may not overlap)", st->path, o[i - 1]->name,
                              (unsigned long long)o[i - 1]->begin, (unsigned long long)o[i - 1]->end, o[i]->name,
                              (unsigned long long)o[i]->begin, (unsigned long long)o[i]->end);
        else if (o[i]->begin > at)
            rc = tr_error_set(err, TR_ERR_FORMAT, "%s: %llu bytes of the data section before tensor '%s' (at %llu) "
                              "belong to no tensor (the format allows no gap)", st->path,
                              (unsigned long long)(o[i]->begin - at), o[i]->name, (unsigned long long)o[i]->begin);
        at = o[i]->end;
    }
    if (!rc && at != st->data_size)
        rc = tr_error_set(err, TR_ERR_FORMAT, "%s: the data section's last %llu bytes belong to no tensor (the tensors "
                          "end at %llu of %llu)", st->path, (unsigned long long)(st->data_size - at),
                          (unsigned long long)at, (unsigned long long)st->data_size);
    free(o);
    return rc;
}

static int parse_header(struct tr_safetensors *st, const char *json, size_t len, struct tr_error *err) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, 0);
    if (!root) {
        size_t at = end && end >= json ? (size_t)(end - json) : 0;
        return tr_error_set(err, TR_ERR_FORMAT, "%s: header is not valid JSON (error near byte %zu of %zu)", st->path,
                            at, len);
    }
    int rc = TR_OK;
    if (!cJSON_IsObject(root)) {
        rc = tr_error_set(err, TR_ERR_FORMAT, "%s: header is not a JSON object", st->path);
        goto done;
    }
    int n = 0;
    for (const cJSON *j = root->child; j; j = j->next) n += strcmp(j->string, "__metadata__") != 0;
    st->e = calloc((size_t)(n ? n : 1), sizeof *st->e);
    st->sorted = calloc((size_t)(n ? n : 1), sizeof *st->sorted);
    if (!st->e || !st->sorted) {
        rc = tr_error_set(err, TR_ERR_NOMEM, "%s: no memory for %d header entries", st->path, n);
        goto done;
    }
    for (const cJSON *j = root->child; j; j = j->next) {
        if (strcmp(j->string, "__metadata__") == 0) continue;
        struct st_entry *e = &st->e[st->n];
        e->name = dup_str(j->string);
        if (!e->name) {
            rc = tr_error_set(err, TR_ERR_NOMEM, "%s: no memory for a tensor name", st->path);
            goto done;
        }
        st->n++;
        rc = parse_entry(st, j, e, err);
        if (rc) goto done;
        st->sorted[st->n - 1] = e;
    }
    qsort(st->sorted, (size_t)st->n, sizeof *st->sorted, cmp_entry);
    for (int i = 1; i < st->n; i++)
        if (strcmp(st->sorted[i - 1]->name, st->sorted[i]->name) == 0) {
            rc = tr_error_set(err, TR_ERR_FORMAT, "%s: tensor '%s' appears twice in the header", st->path,
                              st->sorted[i]->name);
            goto done;
        }
    rc = check_layout(st, err);
done:
    cJSON_Delete(root);
    return rc;
}

static int read_all(FILE *f, void *p, size_t n) { return n == 0 || fread(p, 1, n, f) == n; }

/* What a file that is not safetensors is, by its first bytes (NULL: not known): the
 * formats a checkpoint on the Hub comes in besides. */
static const char *other_format(const unsigned char *b, long long size) {
    if (size >= 4 && memcmp(b, "PK\x03\x04", 4) == 0)
        return "a zip archive: PyTorch's torch.save (pytorch_model.bin, .pt, .pth) or a Keras .keras file";
    if (size >= 2 && b[0] == 0x80 && b[1] >= 2 && b[1] <= 5)
        return "a Python pickle: an older torch.save (.ckpt, .bin)";
    if (size >= 4 && memcmp(b, "GGUF", 4) == 0) return "a GGUF file (llama.cpp's)";
    if (size >= 4 && memcmp(b, "\x89HDF", 4) == 0) return "an HDF5 file (Keras 2's .h5)";
    return NULL;
}

int tr_safetensors_open(const char *path, struct tr_safetensors **out, struct tr_error *err) {
    *out = NULL;
    FILE *f;
    int orc = tr_fopen_regular(path, &f, err);
    if (orc) return orc;
    struct tr_safetensors *st = calloc(1, sizeof *st);
    char *json = NULL;
    int rc = TR_OK;
    if (!st || !(st->path = dup_str(path))) {
        rc = tr_error_set(err, TR_ERR_NOMEM, "%s: no memory", path);
        goto done;
    }
    long long size = -1;
    if (fseeko(f, 0, SEEK_END) == 0) size = (long long)ftello(f);
    if (size < 0 || fseeko(f, 0, SEEK_SET) != 0) {
        rc = tr_error_set(err, TR_ERR_IO, "%s: cannot seek: %s", path, strerror(errno));
        goto done;
    }
    unsigned char len8[8];
    if (size < 8 || !read_all(f, len8, 8)) {
        rc = tr_error_set(err, TR_ERR_FORMAT, "%s: %lld bytes, too short for the 8-byte header length", path, size);
        goto done;
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | len8[i];
    const char *other = hlen > (uint64_t)size - 8 ? other_format(len8, size) : NULL;
    if (other) {
        rc = tr_error_set(err, TR_ERR_FORMAT, "%s: not a safetensors file but %s; trident reads safetensors "
                          "(transformers' save_pretrained writes it, as does safetensors.torch.save_file of the "
                          "state dict)", path, other);
        goto done;
    }
    if (hlen > (uint64_t)size - 8) {
        rc = tr_error_set(err, TR_ERR_FORMAT,
                          "%s: header length %llu goes beyond the end of the file (%lld bytes; truncated, or not "
                          "a safetensors file?)",
                          path, (unsigned long long)hlen, size);
        goto done;
    }
    json = malloc((size_t)hlen + 1);
    st->data_size = (uint64_t)size - 8 - hlen;
    if (!json) {
        rc = tr_error_set(err, TR_ERR_NOMEM, "%s: no memory for its %llu-byte header", path, (unsigned long long)hlen);
        goto done;
    }
    if (!read_all(f, json, (size_t)hlen)) {
        rc = tr_error_set(err, TR_ERR_IO, "%s: read failed: %s", path, ferror(f) ? strerror(errno) : "short read");
        goto done;
    }
    /* The data section mapped, not read: a tensor costs memory only when it is read (a
     * checkpoint's unused parts, a 7B model's shards, stay on disk); copy-on-write, so a
     * view written to is this process's own, as when it was read. Read where mmap fails. */
    void *m = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fileno(f), 0);
    if (m != MAP_FAILED) {
        st->map = m, st->map_size = (size_t)size;
        st->data = (unsigned char *)m + 8 + hlen;
    } else {
        void *data = NULL;
        if (tr_host_alloc(&data, (size_t)st->data_size, err)) {
            rc = tr_error_set(err, TR_ERR_NOMEM, "%s: no memory for %lld bytes", path, size);
            goto done;
        }
        st->data = data;
        if (!read_all(f, st->data, (size_t)st->data_size)) {
            rc = tr_error_set(err, TR_ERR_IO, "%s: read failed: %s", path, ferror(f) ? strerror(errno) : "short read");
            goto done;
        }
    }
    json[hlen] = '\0';
    rc = parse_header(st, json, (size_t)hlen, err);
done:
    fclose(f);
    free(json);
    if (rc) {
        tr_safetensors_close(st);
        return rc;
    }
    *out = st;
    return TR_OK;
}

int tr_safetensors_count(const struct tr_safetensors *st) { return st->n; }

const char *tr_safetensors_name(const struct tr_safetensors *st, int i) {
    return i >= 0 && i < st->n ? st->e[i].name : NULL;
}

const char *tr_safetensors_path(const struct tr_safetensors *st) { return st->path; }

int tr_safetensors_find(const struct tr_safetensors *st, const char *name) {
    struct st_entry key = {.name = (char *)name}, *pkey = &key;
    struct st_entry **hit = bsearch(&pkey, st->sorted, (size_t)st->n, sizeof *st->sorted, cmp_entry);
    return hit ? (int)(*hit - st->e) : -1;
}

int tr_safetensors_get(const struct tr_safetensors *st, const char *name, struct tr_tensor *out,
                       struct tr_error *err) {
    const int i = tr_safetensors_find(st, name);
    if (i < 0) return tr_error_set(err, TR_ERR_NOT_FOUND, "%s: no tensor '%s' in the file", st->path, name);
    const struct st_entry *e = &st->e[i];
    if (e->dtype < 0)
        return tr_error_set(err, TR_ERR_UNSUPPORTED,
                            "%s: tensor '%s': dtype '%s' is not supported (trident reads F32, BF16, F16, I32, I64, "
                            "F64)",
                            st->path, name, e->dtype_str);
    void *data = e->copy ? e->copy : st->data + e->begin;
    return tr_tensor_make(out, data, (enum tr_dtype)e->dtype, e->ndim, e->shape, err);
}

int tr_safetensors_get_bytes(const struct tr_safetensors *st, const char *name, const char **dtype, int *ndim,
                             int64_t *shape, const void **data, struct tr_error *err) {
    const int i = tr_safetensors_find(st, name);
    if (i < 0) return tr_error_set(err, TR_ERR_NOT_FOUND, "%s: no tensor '%s' in the file", st->path, name);
    const struct st_entry *e = &st->e[i];
    *dtype = e->dtype_str;
    *ndim = e->ndim;
    memcpy(shape, e->shape, sizeof e->shape);
    *data = e->copy ? e->copy : st->data + e->begin;
    return TR_OK;
}

/* ---- writer ---- */

/* Copy a host tensor's elements in row-major order, whatever its strides. */
static void pack(const struct tr_tensor *t, unsigned char *dst) {
    size_t es = tr_dtype_size((enum tr_dtype)t->dtype);
    int64_t n = tr_tensor_numel(t);
    if (tr_tensor_is_contiguous(t)) {
        memcpy(dst, t->data, (size_t)n * es);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t off = 0, r = i;
        for (int d = t->ndim - 1; d >= 0; d--) {
            off += (r % t->shape[d]) * t->strides[d];
            r /= t->shape[d];
        }
        memcpy(dst + (size_t)i * es, (const unsigned char *)t->data + (size_t)off * es, es);
    }
}

int tr_safetensors_write(const char *path, int n, const char *const *names, const struct tr_tensor *ts,
                         struct tr_error *err) {
    cJSON *root = cJSON_CreateObject();
    char *json = NULL;
    unsigned char *buf = NULL;
    FILE *f = NULL;
    int rc = TR_OK;
    if (!root) return tr_error_set(err, TR_ERR_NOMEM, "%s: no memory for the header", path);
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        const struct tr_tensor *t = &ts[i];
        const char *sn = st_name_of((enum tr_dtype)t->dtype);
        if (!names[i] || !names[i][0] || strcmp(names[i], "__metadata__") == 0) {
            rc = tr_error_set(err, TR_ERR_INVALID, "%s: tensor %d has no usable name", path, i);
            goto done;
        }
        if (cJSON_GetObjectItemCaseSensitive(root, names[i])) {
            rc = tr_error_set(err, TR_ERR_INVALID, "%s: tensor '%s' is given twice", path, names[i]);
            goto done;
        }
        if (!sn || t->ndim < 0 || t->ndim > TR_MAX_DIMS || t->device != TR_DEVICE_CPU ||
            (!t->data && tr_tensor_numel(t) > 0)) {
            rc = tr_error_set(err, TR_ERR_INVALID,
                              "%s: tensor '%s': not a host tensor of a writable dtype (%s, %d dims)", path, names[i],
                              tr_dtype_name((enum tr_dtype)t->dtype), t->ndim);
            goto done;
        }
        uint64_t nb = tr_tensor_nbytes(t);
        cJSON *e = cJSON_AddObjectToObject(root, names[i]);
        cJSON *shape = e ? cJSON_AddArrayToObject(e, "shape") : NULL;
        cJSON *offs = e ? cJSON_AddArrayToObject(e, "data_offsets") : NULL;
        int ok = e && shape && offs && cJSON_AddStringToObject(e, "dtype", sn);
        for (int d = 0; ok && d < t->ndim; d++)
            ok = cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[d]));
        ok = ok && cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off)) &&
             cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(off + nb)));
        if (!ok) {
            rc = tr_error_set(err, TR_ERR_NOMEM, "%s: no memory for the header", path);
            goto done;
        }
        off += nb;
    }
    json = cJSON_PrintUnformatted(root);
    if (!json) {
        rc = tr_error_set(err, TR_ERR_NOMEM, "%s: no memory for the header", path);
        goto done;
    }
    size_t jl = strlen(json), hlen = (jl + 7) & ~(size_t)7; /* the data starts 8-byte aligned */
    size_t total = 8 + hlen + (size_t)off;
    buf = malloc(total);
    if (!buf) {
        rc = tr_error_set(err, TR_ERR_NOMEM, "%s: no memory for %zu bytes", path, total);
        goto done;
    }
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    memcpy(buf + 8, json, jl);
    memset(buf + 8 + jl, ' ', hlen - jl);
    unsigned char *p = buf + 8 + hlen;
    for (int i = 0; i < n; i++) {
        pack(&ts[i], p);
        p += tr_tensor_nbytes(&ts[i]);
    }
    f = fopen(path, "wb");
    if (!f) {
        rc = tr_error_set(err, TR_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
        goto done;
    }
    int wr = fwrite(buf, 1, total, f) == total;
    int cl = fclose(f) == 0;
    if (!wr || !cl) {
        rc = tr_error_set(err, TR_ERR_IO, "%s: write failed: %s", path, strerror(errno));
        remove(path);
    }
done:
    free(buf);
    free(json);
    cJSON_Delete(root);
    return rc;
}
