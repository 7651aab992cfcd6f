/* A run's inputs file, outputs file and reference file (bench_io.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench_io.h"
#include "bench_util.h"
#include "trident/parse.h"
#include "trident/graph.h"

/* "input_ids i32[8,128], attention_mask i32[8,128]": what a file must hold. */
static void inputs_list(const struct tr_graph *g, int n, char *buf, size_t cap) {
    size_t off = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && off < cap; i++) {
        int id = tr_graph_input(g, i);
        char sh[96];
        tr_shape_str(tr_node_ndim(g, id), tr_node_shape(g, id), sh, sizeof sh);
        off += (size_t)snprintf(buf + off, cap - off, "%s%s %s%s", i ? ", " : "", tr_node_name(g, id),
                                tr_dtype_name((enum tr_dtype)tr_node_dtype(g, id)), sh);
    }
}

static int is_int(int dt) { return dt == TR_DTYPE_I32 || dt == TR_DTYPE_I64; }

/* src into dst (same shape): the same dtype copied; ints to ints and floats to floats
 * converted, an int that does not fit refused (its element named). Ints also convert to
 * a float input when each is exact there (a tokenizer's int64 attention_mask of 1s and
 * 0s, fed to a model that takes it as f32); floats never become ints. */
static int convert(const struct tr_tensor *src, struct tr_tensor *dst, const char *name, struct tr_error *err) {
    const int64_t n = tr_tensor_numel(dst);
    if (src->dtype == dst->dtype) {
        memcpy(dst->data, src->data, tr_tensor_nbytes(dst));
        return TR_OK;
    }
    if (!is_int(src->dtype) && is_int(dst->dtype))
        return tr_error_set(err, TR_ERR_SHAPE, "'%s' is %s, the graph's input is %s (floats do not convert to "
                            "integers)", name, tr_dtype_name((enum tr_dtype)src->dtype),
                            tr_dtype_name((enum tr_dtype)dst->dtype));
    for (int64_t i = 0; i < n; i++) {
        if (src->dtype == TR_DTYPE_I64 && dst->dtype == TR_DTYPE_I32) {
            const int64_t v = ((const int64_t *)src->data)[i];
            if (v < INT32_MIN || v > INT32_MAX)
                return tr_error_set(err, TR_ERR_INVALID, "'%s' element %lld is %lld, which does not fit the input's "
                                    "i32", name, (long long)i, (long long)v);
            ((int32_t *)dst->data)[i] = (int32_t)v;
        } else {
            const double v = tr_tensor_get_f64(src, i);
            tr_tensor_set_f64(dst, i, v);
            if (is_int(src->dtype) && !is_int(dst->dtype) && tr_tensor_get_f64(dst, i) != v)
                return tr_error_set(err, TR_ERR_INVALID, "'%s' element %lld is %.0f, which the input's %s does not "
                                    "hold exactly", name, (long long)i, v, tr_dtype_name((enum tr_dtype)dst->dtype));
        }
    }
    return TR_OK;
}

/* Whether ids node `src` is a*x + b of input node `in` (through reshapes, casts, scales
 * and concatenations: SAM's labels + 1 beside its padding label), *a and *b set. */
static int affine_of(const struct tr_graph *g, int src, int in, double a, double b, double *ao, double *bo, int depth) {
    for (; src >= 0 && depth < 64; depth++) {
        if (src == in) {
            *ao = a, *bo = b;
            return 1;
        }
        const int op = tr_node_op(g, src);
        if (op == TR_OP_SCALE) { /* a(alpha x + beta) + b */
            const struct tr_attrs *at = tr_node_attrs(g, src);
            b += a * (double)at->floats[1];
            a *= (double)at->floats[0];
        } else if (op == TR_OP_CONCAT) {
            for (int i = 0; i < tr_node_n_inputs(g, src); i++)
                if (affine_of(g, tr_node_input(g, src, i), in, a, b, ao, bo, depth + 1)) return 1;
            return 0;
        } else if (op != TR_OP_RESHAPE && op != TR_OP_CAST && op != TR_OP_BROADCAST) {
            return 0;
        }
        src = tr_node_input(g, src, 0);
    }
    return 0;
}

/* The ids input node `in` may hold: [lo, hi) of the values that index the smallest
 * embedding table it reaches (as a*x + b, affine_of), so that an id outside is said here,
 * naming the file's tensor and element, rather than by each backend's kernel as a flat
 * index. 0 when it indexes none. */
static int embedding_range(const struct tr_graph *g, int in, double *lo, double *hi) {
    int found = 0;
    for (int id = 0; id < tr_graph_n_nodes(g); id++) {
        double a, b;
        if (tr_node_op(g, id) != TR_OP_EMBEDDING || !affine_of(g, tr_node_input(g, id, 1), in, 1, 0, &a, &b, 0) ||
            a == 0)
            continue;
        const double rows = (double)tr_node_shape(g, tr_node_input(g, id, 0))[0];
        double l = (0 - b) / a, h = (rows - b) / a; /* a*x + b in [0, rows) */
        if (a < 0) {
            const double t = l;
            l = h, h = t;
        }
        if (!found || l > *lo) *lo = l;
        if (!found || h < *hi) *hi = h;
        found = 1;
    }
    return found;
}

/* Whether CONST node id holds `ignore` alone (a column of ignored labels beside a slice). */
static int const_all(const struct tr_graph *g, int id, double ignore) {
    struct tr_tensor t = tr_node_tensor(g, id);
    t.data = (void *)tr_node_data(g, id);
    for (int64_t e = 0; t.data && e < tr_tensor_numel(&t); e++)
        if (tr_tensor_get_f64(&t, e) != ignore) return 0;
    return t.data != NULL;
}

int tr_bench_loss_labels(const struct tr_graph *g, int loss, int *slice) {
    const int64_t ignore = tr_node_attrs(g, loss)->ints[1] ? tr_node_attrs(g, loss)->ints[0] : INT64_MIN;
    int lab = tr_node_input(g, loss, 1);
    *slice = -1;
    for (int depth = 0; lab >= 0 && depth < 16; depth++) {
        const int op = tr_node_op(g, lab);
        if (op == TR_OP_RESHAPE || op == TR_OP_CAST) {
            lab = tr_node_input(g, lab, 0);
        } else if (op == TR_OP_SLICE && *slice < 0) {
            *slice = lab;
            lab = tr_node_input(g, lab, 0);
        } else if (op == TR_OP_CONCAT) {
            int next = -1;
            for (int i = 0; i < tr_node_n_inputs(g, lab); i++) {
                const int x = tr_node_input(g, lab, i);
                if (tr_node_op(g, x) == TR_OP_CONST && ignore != INT64_MIN && const_all(g, x, (double)ignore)) continue;
                if (next >= 0) return -1;
                next = x;
            }
            lab = next;
        } else {
            break;
        }
    }
    return lab;
}

int tr_bench_slice_keeps(const struct tr_graph *g, int slice, const struct tr_tensor *t, int64_t e) {
    if (slice < 0) return 1;
    const int64_t *sl = tr_node_attrs(g, slice)->ints; /* axis, start, end, step */
    int64_t inner = 1;
    for (int d = (int)sl[0] + 1; d < t->ndim; d++) inner *= t->shape[d];
    const int64_t k = (e / inner) % t->shape[sl[0]];
    return k >= sl[1] && k < sl[2] && (k - sl[1]) % sl[3] == 0;
}

/* Input node `in`'s labels against every cross-entropy they reach: each element the loss
 * reads is a class of its logits or the ignore index, else it is named here by the file's
 * [sample][position] (the kernel would name it after the shift, flattened). */
static int labels_check(const struct tr_graph *g, int in, const struct tr_tensor *t, const char *name,
                        struct tr_error *err) {
    for (int id = 0; id < tr_graph_n_nodes(g); id++) {
        int slice;
        if (tr_node_op(g, id) != TR_OP_CROSS_ENTROPY || tr_bench_loss_labels(g, id, &slice) != in) continue;
        const struct tr_attrs *at = tr_node_attrs(g, id);
        const int logits = tr_node_input(g, id, 0);
        const double classes = (double)tr_node_shape(g, logits)[tr_node_ndim(g, logits) - 1];
        for (int64_t e = 0; e < tr_tensor_numel(t); e++) {
            const double v = tr_tensor_get_f64(t, e);
            if (!tr_bench_slice_keeps(g, slice, t, e) || (v >= 0 && v < classes) || (at->ints[1] && v == (double)at->ints[0]))
                continue;
            char at_s[64] = "", ign[48] = "";
            if (t->ndim == 2)
                snprintf(at_s, sizeof at_s, " (sample %lld, position %lld)", (long long)(e / t->shape[1]),
                         (long long)(e % t->shape[1]));
            if (at->ints[1]) snprintf(ign, sizeof ign, " and is not the ignore index %lld", (long long)at->ints[0]);
            return tr_error_set(err, TR_ERR_INVALID, "'%s' element %lld%s is %.0f: outside the loss's classes [0, %.0f) "
                                "(the logits' last dimension: vocab_size or num_labels)%s", name, (long long)e, at_s, v,
                                classes, ign);
        }
    }
    return TR_OK;
}

/* A BOOL, U8 or I8 tensor of the file (torch's bool attention mask, a uint8 one) as an i32
 * tensor in *buf (the caller frees it), so that convert takes it as any integers: true 1,
 * false 0. Another dtype keeps the reader's refusal. */
static int small_ints(const struct tr_safetensors *st, const char *name, struct tr_tensor *t, int32_t **buf,
                      const char **file_dt, struct tr_error *err) {
    const char *dt;
    int nd;
    int64_t shape[TR_MAX_DIMS];
    const void *data;
    int rc = tr_safetensors_get_bytes(st, name, &dt, &nd, shape, &data, err);
    if (rc) return rc;
    const int kind = !strcmp(dt, "BOOL") ? 1 : !strcmp(dt, "U8") ? 2 : !strcmp(dt, "I8") ? 3 : 0;
    if (!kind) return err->status;
    *file_dt = dt;
    int64_t numel = 1;
    for (int d = 0; d < nd; d++) numel *= shape[d];
    if (!(*buf = malloc((size_t)(numel ? numel : 1) * sizeof **buf))) return tr_error_set(err, TR_ERR_NOMEM, "no memory");
    const unsigned char *b = data;
    for (int64_t k = 0; k < numel; k++)
        (*buf)[k] = kind == 1 ? b[k] != 0 : kind == 2 ? (int32_t)b[k] : (int32_t)(signed char)b[k];
    if ((rc = tr_tensor_make(t, *buf, TR_DTYPE_I32, nd, shape, err)) != TR_OK) free(*buf), *buf = NULL;
    return rc;
}

/* Whether a and b have the same sizes once their 1s are dropped ([B,1] and [B]). */
static int squeezed_same(const struct tr_tensor *a, const struct tr_tensor *b) {
    int i = 0, j = 0;
    for (;;) {
        while (i < a->ndim && a->shape[i] == 1) i++;
        while (j < b->ndim && b->shape[j] == 1) j++;
        if (i == a->ndim || j == b->ndim) return i == a->ndim && j == b->ndim;
        if (a->shape[i++] != b->shape[j++]) return 0;
    }
}

/* The input named `name` among ts[0..n), or NULL. */
static struct tr_tensor *input_named(const struct tr_graph *g, int n, struct tr_tensor *ts, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(tr_node_name(g, tr_graph_input(g, i)), name)) return &ts[i];
    return NULL;
}

/* position_ids the file leaves out, as transformers makes them: its forward (fit,
 * predict) 0..T-1 in every row; its generate cumsum(attention_mask) - 1, 1 on pads. */
static void default_positions(struct tr_tensor *pos, const struct tr_tensor *mask, int generate) {
    const int64_t B = pos->shape[0], T = pos->shape[1];
    for (int64_t b = 0; b < B; b++) {
        double c = 0;
        for (int64_t t = 0; t < T; t++) {
            const int keep = !generate || !mask || tr_tensor_get_f64(mask, b * T + t) != 0;
            c += keep;
            tr_tensor_set_f64(pos, b * T + t, !generate ? (double)t : keep ? c - 1 : 1);
        }
    }
}

/* The file's tensor `name` holds 0 .. T-1 in every row of its [B, T] (integers): the
 * positions a model without a position_ids input makes itself (BERT's). */
static int default_positions_given(const struct tr_safetensors *st, const char *name) {
    struct tr_tensor t;
    struct tr_error e = {0};
    if (tr_safetensors_get(st, name, &t, &e) != TR_OK || t.ndim != 2 || !is_int(t.dtype)) return 0;
    for (int64_t k = 0; k < tr_tensor_numel(&t); k++)
        if (tr_tensor_get_f64(&t, k) != (double)(k % t.shape[1])) return 0;
    return 1;
}

/* A causal LM's label right after a pad (labels[b][t+1] with attention_mask[b][t] = 0):
 * the pad position predicts it from a row that sees only padding, which transformers
 * computes one way in eager attention, another in sdpa, and trident a third; the loss then
 * cannot agree. Said once; -100 there (what trident's own batch has) makes it agree. */
static void warn_label_after_pad(const struct tr_graph *g, int n, struct tr_tensor *ts) {
    const struct tr_tensor *lab = input_named(g, n, ts, "labels"), *mask = input_named(g, n, ts, "attention_mask");
    if (!lab || !mask || lab->ndim != 2 || mask->ndim != 2 || lab->shape[0] != mask->shape[0] ||
        lab->shape[1] != mask->shape[1])
        return;
    const int64_t B = lab->shape[0], T = lab->shape[1];
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t + 1 < T; t++)
            if (tr_tensor_get_f64(mask, b * T + t) == 0 && tr_tensor_get_f64(lab, b * T + t + 1) != -100) {
                fprintf(stderr, "trident: warning: [run] inputs: labels[%lld][%lld] = %.0f follows a pad "
                        "(attention_mask[%lld][%lld] = 0): that position predicts it from a row that sees only "
                        "padding, which transformers computes differently in eager and sdpa attention (and trident "
                        "otherwise), so the losses will differ; -100 there (a padded sample's first token) makes "
                        "them agree\n", (long long)b, (long long)t + 1, tr_tensor_get_f64(lab, b * T + t + 1),
                        (long long)b, (long long)t);
                return;
            }
}

static int inputs_fill(const struct tr_safetensors *st, const struct tr_graph *g, int n, struct tr_tensor *ts,
                       int generate, struct tr_error *err) {
    char want[768];
    int made_pos = -1;
    for (int i = 0; i < n; i++) {
        const int id = tr_graph_input(g, i);
        const char *name = tr_node_name(g, id);
        struct tr_tensor t;
        struct tr_error e = {0};
        const int mask = !strcmp(name, "attention_mask"), types = !strcmp(name, "token_type_ids");
        if ((mask || types) && ts[i].ndim == 2 && tr_safetensors_find(st, name) < 0) {
            /* left out, as transformers' forward takes it: every token attended to, every
             * token of segment 0 */
            for (int64_t k = 0; k < tr_tensor_numel(&ts[i]); k++) tr_tensor_set_f64(&ts[i], k, mask ? 1.0 : 0.0);
            fprintf(stderr, "trident: note: [run] inputs has no %s: %s, as transformers takes its absence\n", name,
                    mask ? "all ones (every token attended to)" : "all zeros (every token of the first segment)");
            continue;
        }
        if (!strcmp(name, "position_ids") && ts[i].ndim == 2 && is_int(ts[i].dtype) &&
            tr_safetensors_find(st, name) < 0) { /* made below, once the mask is read */
            made_pos = i;
            continue;
        }
        int32_t *bytes_as_i32 = NULL; /* a BOOL, U8 or I8 tensor (a bool mask) widened to i32 */
        const char *file_dt = NULL;  /* then its dtype as the file names it */
        if (tr_safetensors_get(st, name, &t, &e) == TR_ERR_UNSUPPORTED) {
            int rc = small_ints(st, name, &t, &bytes_as_i32, &file_dt, &e);
            if (rc == TR_OK) e.status = TR_OK;
        }
        if (e.status != TR_OK) {
            inputs_list(g, n, want, sizeof want);
            return e.status == TR_ERR_NOT_FOUND
                       ? tr_error_set(err, TR_ERR_NOT_FOUND, "no tensor '%s'; the graph's inputs are %s", name, want)
                       : tr_error_set(err, e.status, "%s", e.msg);
        }
        int same = t.ndim == ts[i].ndim;
        for (int d = 0; same && d < t.ndim; d++) same = t.shape[d] == ts[i].shape[d];
        if (!same && squeezed_same(&t, &ts[i])) { /* [B,1] for [B] (a regression's labels): the same values, as
                                                     transformers squeezes them */
            t.ndim = ts[i].ndim;
            for (int d = 0; d < t.ndim; d++) t.shape[d] = ts[i].shape[d], t.strides[d] = ts[i].strides[d];
            same = 1;
        }
        if (!same) {
            free(bytes_as_i32);
            char got[96], exp[96];
            /* float labels of [B, C] for class labels of [B]: transformers infers
             * multi_label_classification from them where the config does not say */
            const int multi = !strcmp(name, "labels") && !is_int(t.dtype) && is_int(ts[i].dtype) && t.ndim == 2 &&
                              ts[i].ndim == 1 && t.shape[0] == ts[i].shape[0];
            return tr_error_set(err, TR_ERR_SHAPE, "'%s' is %s%s, the graph's input is %s%s (%s)", name,
                                file_dt ? file_dt : tr_dtype_name((enum tr_dtype)t.dtype),
                                tr_shape_str(t.ndim, t.shape, got, sizeof got),
                                tr_dtype_name((enum tr_dtype)ts[i].dtype),
                                tr_shape_str(ts[i].ndim, ts[i].shape, exp, sizeof exp),
                                multi ? "float labels of [batch, num_labels] are a multi-label problem, as transformers "
                                        "infers it: set [model] problem_type = multi_label_classification"
                                      : "the INI's batch, seq_len and the model's sizes make it");
        }
        int rc = convert(&t, &ts[i], name, err);
        free(bytes_as_i32);
        if (rc) return rc;
        double lo = 0, hi = 0;
        const int ranged = is_int(ts[i].dtype) && embedding_range(g, id, &lo, &hi);
        for (int64_t k = 0; ranged && k < tr_tensor_numel(&ts[i]); k++) {
            const double v = tr_tensor_get_f64(&ts[i], k);
            if (v < lo || v >= hi) {
                char at[64] = "", range[160];
                if (ts[i].ndim == 2)
                    snprintf(at, sizeof at, " (sample %lld, position %lld)", (long long)(k / ts[i].shape[1]),
                             (long long)(k % ts[i].shape[1]));
                if (lo == 0) snprintf(range, sizeof range, "outside the embedding table's [0, %.0f) (a vocab_size or "
                                      "type_vocab_size other than the tokenizer's?)", hi);
                else snprintf(range, sizeof range, "outside [%.0f, %.0f), the values the model takes", lo, hi);
                return tr_error_set(err, TR_ERR_INVALID, "'%s' element %lld%s is %.0f, %s", name, (long long)k, at, v,
                                    range);
            }
        }
        if (is_int(ts[i].dtype) && (rc = labels_check(g, id, &ts[i], name, err))) return rc;
        /* a tokenizer's mask is 0 or 1: another value would weigh a key where transformers
         * (which reads any nonzero as 1) attends to it plainly */
        for (int64_t k = 0; strcmp(name, "attention_mask") == 0 && ts[i].ndim == 2 && k < tr_tensor_numel(&ts[i]); k++) {
            const double v = tr_tensor_get_f64(&ts[i], k);
            if (v != 0.0 && v != 1.0)
                return tr_error_set(err, TR_ERR_INVALID, "'attention_mask' element %lld is %g: expected 0 (a pad) or 1 "
                                    "(a token), as a tokenizer writes it", (long long)k, v);
        }
    }
    if (made_pos >= 0) {
        default_positions(&ts[made_pos], input_named(g, n, ts, "attention_mask"), generate);
        fprintf(stderr, "trident: note: [run] inputs has no position_ids: %s, as transformers' %s makes them\n",
                generate ? "cumsum(attention_mask) - 1 (1 on pads)" : "0 .. seq_len-1 in every row",
                generate ? "generate" : "forward");
    }
    if (!generate) warn_label_after_pad(g, n, ts);
    for (int k = 0; k < tr_safetensors_count(st); k++) {
        const char *name = tr_safetensors_name(st, k);
        int used = 0;
        for (int i = 0; i < n && !used; i++) used = strcmp(tr_node_name(g, tr_graph_input(g, i)), name) == 0;
        if (!used && !strcmp(name, "labels")) { /* a fit's batch run by predict: what transformers' forward
                                                     reads only for its loss */
            fprintf(stderr, "trident: note: [run] inputs: 'labels' is read by task = fit; this task leaves it "
                    "unread\n");
            continue;
        }
        if (!used && !strcmp(name, "position_ids") && default_positions_given(st, name)) {
            fprintf(stderr, "trident: note: [run] inputs: 'position_ids' are 0 .. seq_len-1 in every row, the "
                    "positions the model takes itself: not read\n");
            continue;
        }
        if (!used) {
            inputs_list(g, n, want, sizeof want);
            return tr_error_set(err, TR_ERR_NOT_FOUND, "tensor '%s' is not an input of the graph (its inputs: %s)%s",
                                name, want, strcmp(name, "position_ids") ? ""
                                : "; this model takes positions 0 .. seq_len-1 in every row, which these are not");
        }
    }
    return TR_OK;
}

int tr_bench_inputs_load(const struct tr_config *cfg, const struct tr_graph *g, int n, struct tr_tensor *ts,
                         struct tr_error *err) {
    struct tr_safetensors *st = NULL;
    int rc = tr_safetensors_open(cfg->inputs, &st, err);
    if (!rc) rc = inputs_fill(st, g, n, ts, !strcmp(cfg->task, "generate"), err);
    tr_safetensors_close(st);
    return rc ? tr_error_prefix(err, "%s:%d: [run] inputs = %s", cfg->file, cfg->inputs_line, cfg->inputs) : TR_OK;
}

/* ---- outputs ---- */

int tr_bench_outputs_add(struct tr_bench_outputs *o, const char *label, const char *name, const struct tr_tensor *t,
                         struct tr_error *err) {
    if (o->n == o->cap) {
        int cap = o->cap ? 2 * o->cap : 16;
        char **names = realloc(o->names, sizeof *names * (size_t)cap);
        if (names) o->names = names;
        struct tr_tensor *ts = names ? realloc(o->ts, sizeof *ts * (size_t)cap) : NULL;
        if (!ts) return tr_error_set(err, TR_ERR_NOMEM, "outputs: out of memory");
        o->ts = ts;
        o->cap = cap;
    }
    const size_t len = strlen(label) + strlen(name) + 2;
    char *full = malloc(len);
    if (!full) return tr_error_set(err, TR_ERR_NOMEM, "outputs: out of memory");
    snprintf(full, len, "%s/%s", label, name);
    struct tr_tensor c = *t;
    c.data = NULL;
    const size_t nb = tr_tensor_nbytes(t);
    int rc = tr_host_alloc(&c.data, nb ? nb : 1, err);
    if (rc) {
        free(full);
        return rc;
    }
    /* a strided view is copied element by element into a contiguous tensor */
    if (tr_tensor_is_contiguous(t)) memcpy(c.data, t->data, nb);
    else {
        int64_t stride = 1;
        for (int d = c.ndim - 1; d >= 0; d--) {
            c.strides[d] = stride;
            stride *= c.shape[d];
        }
        for (int64_t i = 0; i < tr_tensor_numel(t); i++) tr_tensor_set_f64(&c, i, tr_tensor_get_f64(t, i));
    }
    o->names[o->n] = full;
    o->ts[o->n++] = c;
    return TR_OK;
}

int tr_bench_outputs_write(const struct tr_bench_outputs *o, const char *path, struct tr_error *err) {
    int rc = tr_safetensors_write(path, o->n, (const char *const *)o->names, o->ts, err);
    return rc ? tr_error_prefix(err, "--outputs %s", path) : TR_OK;
}

void tr_bench_outputs_free(struct tr_bench_outputs *o) {
    for (int i = 0; i < o->n; i++) {
        free(o->names[i]);
        tr_host_free(o->ts[i].data);
    }
    free(o->names);
    free(o->ts);
    memset(o, 0, sizeof *o);
}

/* ---- reference ---- */

static int find_output(const struct tr_graph *g, const char *name) {
    for (int i = 0; i < tr_graph_n_outputs(g); i++)
        if (strcmp(tr_graph_output_name(g, i), name) == 0) return i;
    return -1;
}

/* A name of --outputs' file, "BACKEND/OUTPUT": the part after the backend's label and its
 * '/', or the whole name; *label (when not NULL) the label's length (0: none). */
static const char *output_part(const char *name, size_t *label) {
    const char *slash = strchr(name, '/');
    if (label) *label = slash ? (size_t)(slash - name) : 0;
    return slash ? slash + 1 : name;
}

/* The label of a backend of cfg that is name's first len bytes, or NULL. */
static const char *run_label(const struct tr_config *cfg, const char *name, size_t len, char *buf, size_t n) {
    for (int b = 0; b < cfg->n_backends; b++) {
        tr_bench_label(cfg, b, buf, n);
        if (strlen(buf) == len && strncmp(buf, name, len) == 0) return buf;
    }
    return NULL;
}

static int same_kind(const struct tr_tensor *t, int ndim, const int64_t *shape, int dtype) {
    int same = t->ndim == ndim && tr_dtype_is_float((enum tr_dtype)t->dtype) == tr_dtype_is_float((enum tr_dtype)dtype);
    for (int d = 0; same && d < ndim; d++) same = t->shape[d] == shape[d];
    return same;
}

static int reference_check(const struct tr_config *cfg, const struct tr_safetensors *st, const struct tr_graph *g,
                           int fit, const struct tr_bench_reference *r, struct tr_error *err) {
    int compared = 0;
    for (int k = 0; k < tr_safetensors_count(st); k++) {
        const char *full = tr_safetensors_name(st, k);
        struct tr_tensor t;
        int rc = tr_safetensors_get(st, full, &t, err);
        if (rc) return rc;
        size_t label_len;
        const char *name = output_part(full, &label_len);
        char label[96];
        if (label_len && !run_label(cfg, full, label_len, label, sizeof label))
            return tr_error_set(err, TR_ERR_NOT_FOUND, "tensor '%s' is for backend '%.*s', which this run does not list "
                                "(a file of --outputs holds each backend's outputs as BACKEND/OUTPUT)", full,
                                (int)label_len, full);
        if (fit && strcmp(name, "loss") == 0) {
            if (t.ndim > 1 || !tr_dtype_is_float((enum tr_dtype)t.dtype))
                return tr_error_set(err, TR_ERR_SHAPE, "'loss' is %s with %d dimensions; expected the loss of each "
                                    "step, one float per step", tr_dtype_name((enum tr_dtype)t.dtype), t.ndim);
            compared++;
            continue;
        }
        if (r->extra_name && strcmp(name, r->extra_name) == 0) {
            if (!same_kind(&t, r->extra.ndim, r->extra.shape, r->extra.dtype)) {
                char a[96], b[96];
                return tr_error_set(err, TR_ERR_SHAPE, "'%s' is %s%s, the run makes %s%s", name,
                                    tr_dtype_name((enum tr_dtype)t.dtype), tr_shape_str(t.ndim, t.shape, a, sizeof a),
                                    tr_dtype_name((enum tr_dtype)r->extra.dtype),
                                    tr_shape_str(r->extra.ndim, r->extra.shape, b, sizeof b));
            }
            compared++;
            continue;
        }
        int i = find_output(g, name);
        char outs[512] = "";
        for (int j = 0, off = 0; j < tr_graph_n_outputs(g) && off < (int)sizeof outs; j++)
            off += snprintf(outs + off, sizeof outs - (size_t)off, "%s%s", j ? ", " : "", tr_graph_output_name(g, j));
        if (i < 0)
            return tr_error_set(err, TR_ERR_NOT_FOUND, "tensor '%s' is not an output of the graph (outputs: %s%s%s%s)",
                                name, outs, r->extra_name ? "; and " : "", r->extra_name ? r->extra_name : "",
                                fit ? "; fit compares 'loss', one value per step" : "");
        const int id = tr_graph_output(g, i);
        if (!same_kind(&t, tr_node_ndim(g, id), tr_node_shape(g, id), tr_node_dtype(g, id))) {
            char a[96], b[96];
            return tr_error_set(err, TR_ERR_SHAPE, "'%s' is %s%s, the graph's output is %s%s", name,
                                tr_dtype_name((enum tr_dtype)t.dtype), tr_shape_str(t.ndim, t.shape, a, sizeof a),
                                tr_dtype_name((enum tr_dtype)tr_node_dtype(g, id)),
                                tr_shape_str(tr_node_ndim(g, id), tr_node_shape(g, id), b, sizeof b));
        }
        compared++;
    }
    if (!compared) return tr_error_set(err, TR_ERR_NOT_FOUND, "the file has no tensor to compare");
    return TR_OK;
}

int tr_bench_reference_open(const struct tr_config *cfg, const struct tr_graph *g, struct tr_bench_reference *r,
                            struct tr_error *err) {
    return tr_bench_reference_open_extra(cfg, g, NULL, NULL, r, err);
}

int tr_bench_reference_open_extra(const struct tr_config *cfg, const struct tr_graph *g, const char *extra_name,
                                  const struct tr_tensor *extra, struct tr_bench_reference *r, struct tr_error *err) {
    memset(r, 0, sizeof *r);
    if (extra_name) r->extra_name = extra_name, r->extra = *extra, r->extra.data = NULL;
    if (!cfg->reference[0]) return TR_OK;
    int rc = tr_safetensors_open(cfg->reference, &r->st, err);
    if (!rc) rc = reference_check(cfg, r->st, g, tr_graph_n_updates(g) > 0, r, err);
    if (rc) {
        tr_bench_reference_close(r);
        return tr_error_prefix(err, "%s:%d: [run] reference = %s", cfg->file, cfg->reference_line, cfg->reference);
    }
    return TR_OK;
}

void tr_bench_reference_close(struct tr_bench_reference *r) {
    tr_safetensors_close(r->st);
    r->st = NULL;
}

/* "[3,17]" for flat index i of shape. */
static void coords(int ndim, const int64_t *shape, int64_t i, char *buf, size_t n) {
    int64_t c[TR_MAX_DIMS];
    for (int d = ndim - 1; d >= 0; d--) {
        c[d] = shape[d] ? i % shape[d] : 0;
        i = shape[d] ? i / shape[d] : 0;
    }
    size_t off = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < ndim && off < n; d++) off += (size_t)snprintf(buf + off, n - off, "%s%lld", d ? "," : "", (long long)c[d]);
    if (off < n) snprintf(buf + off, n - off, "]");
}

static void note_worst(struct tr_bench_row *row, double rel, const char *name, const char *where, double got,
                       double want) {
    if (rel <= row->ref_rel_diff && row->ref_worst[0]) return;
    row->ref_rel_diff = rel;
    snprintf(row->ref_worst, sizeof row->ref_worst, "'%s' %.2e; worst element %s%s: %.9g here, %.9g in the reference",
             name, rel, name, where, got, want);
}

/* The output a reference tensor's name holds row to: "OUTPUT", or "BACKEND/OUTPUT" when
 * BACKEND is row's label; NULL for another backend's. */
static const char *row_output(const char *full, const struct tr_bench_row *row) {
    size_t label_len;
    const char *name = output_part(full, &label_len);
    if (label_len && (strlen(row->label) != label_len || strncmp(row->label, full, label_len) != 0)) return NULL;
    return name;
}

void tr_bench_reference_compare(const struct tr_bench_reference *r, const struct tr_graph *g, int n_out,
                                const struct tr_tensor *out, const double *losses, int64_t n_losses,
                                double tolerance, struct tr_bench_row *row) {
    row->ref_compared = 0;
    row->ref_rel_diff = 0;
    row->ref_worst[0] = '\0';
    if (!r->st) return;
    for (int k = 0; k < tr_safetensors_count(r->st); k++) {
        const char *full = tr_safetensors_name(r->st, k);
        struct tr_tensor ref;
        if (tr_safetensors_get(r->st, full, &ref, NULL) != TR_OK) continue; /* checked when opened */
        const char *name = row_output(full, row);
        if (!name) continue;
        if (strcmp(name, "loss") == 0 && losses) { /* fit: every step's loss, not the last one alone */
            const int64_t n = tr_tensor_numel(&ref) < n_losses ? tr_tensor_numel(&ref) : n_losses;
            for (int64_t s = 0; s < n; s++) {
                const double want = tr_tensor_get_f64(&ref, s), got = losses[s];
                double rel = fabs(got - want) / (fabs(want) > 0 ? fabs(want) : 1.0);
                if (!isfinite(got)) rel = INFINITY;
                char where[48];
                snprintf(where, sizeof where, " of step %lld", (long long)s + 1);
                note_worst(row, rel, "loss", where, got, want);
            }
            if (tr_tensor_numel(&ref) != n_losses) { /* a reference of another run's length: said, not cut */
                row->ref_rel_diff = INFINITY;
                snprintf(row->ref_worst, sizeof row->ref_worst, "'loss' holds %lld steps' losses in the reference, "
                         "the run took %lld steps (warm-up and timed): compare runs of the same length",
                         (long long)tr_tensor_numel(&ref), (long long)n_losses);
            }
            row->ref_compared++;
            continue;
        }
        const int i = find_output(g, name);
        if (i < 0 || i >= n_out) continue;
        const struct tr_tensor *a = &out[i];
        const int64_t n = tr_tensor_numel(&ref);
        double num = 0, den = 0, worst = -1;
        int64_t wi = 0;
        for (int64_t e = 0; e < n; e++) {
            const double x = tr_tensor_get_f64(a, e), y = tr_tensor_get_f64(&ref, e), d = x - y;
            num += d * d, den += y * y;
            if (!(fabs(d) <= worst)) worst = isfinite(d) ? fabs(d) : INFINITY, wi = e;
        }
        double rel = den > 0 ? sqrt(num) / sqrt(den) : sqrt(num);
        if (!isfinite(num)) rel = INFINITY;
        char where[96];
        coords(ref.ndim, ref.shape, wi, where, sizeof where);
        note_worst(row, rel, name, where, n ? tr_tensor_get_f64(a, wi) : 0, n ? tr_tensor_get_f64(&ref, wi) : 0);
        row->ref_compared++;
    }
    row->ref_agrees = row->ref_compared > 0 && row->ref_rel_diff <= tolerance;
}

void tr_bench_reference_compare_extra(const struct tr_bench_reference *r, const struct tr_tensor *t, double tolerance,
                                      struct tr_bench_row *row) {
    if (!r->st || !r->extra_name) return;
    for (int k = 0; k < tr_safetensors_count(r->st); k++) {
        const char *full = tr_safetensors_name(r->st, k);
        const char *name = row_output(full, row);
        if (!name || strcmp(name, r->extra_name) != 0) continue;
        struct tr_tensor ref;
        if (tr_safetensors_get(r->st, full, &ref, NULL) != TR_OK) continue; /* checked when opened */
        const int64_t n = tr_tensor_numel(&ref);
        row->ref_compared++;
        /* ids: equal or not; the first difference in row-major order (for generate's
         * tokens, sample by sample) and how many differ */
        int64_t first = -1, differ = 0;
        for (int64_t e = 0; e < n; e++)
            if (tr_tensor_get_f64(t, e) != tr_tensor_get_f64(&ref, e)) differ++, first = first < 0 ? e : first;
        if (!differ) continue;
        char where[96];
        coords(ref.ndim, ref.shape, first, where, sizeof where);
        row->ref_rel_diff = INFINITY;
        snprintf(row->ref_worst, sizeof row->ref_worst, "'%s': %lld of %lld differ, the first %s%s: %.0f here, %.0f "
                 "in the reference", name, (long long)differ, (long long)n, name, where, tr_tensor_get_f64(t, first),
                 tr_tensor_get_f64(&ref, first));
    }
    row->ref_agrees = row->ref_compared > 0 && row->ref_rel_diff <= tolerance;
}

void tr_bench_print_reference(const struct tr_bench_report *rep, const struct tr_config *cfg, FILE *f) {
    if (!cfg->reference[0]) return;
    fprintf(f, "\nagainst [run] reference = %s (within %s, %s):\n", cfg->reference,
            tr_tol_str(rep->reference_tolerance, (char[32]){0}, 32), rep->reference_why);
    for (int i = 0; i < rep->n_rows; i++) {
        const struct tr_bench_row *r = &rep->rows[i];
        if (!r->ok) continue;
        fprintf(f, "  %-24s %-3s %s\n", r->label, r->ref_agrees ? "ok" : "NO", r->ref_worst);
    }
}
