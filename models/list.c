/* Model keys' values: comma-separated integer and number lists, and those that must be
 * positive (models.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "models.h"

/* The list s of integers (iv) or numbers (dv), each in [lo, hi]: "320, 640,1280". */
static int parse_list(const char *model, const char *key, const char *s, size_t cap, double lo, double hi,
                      const char *example, int64_t *iv, double *dv, int max, int *n, struct tr_error *err) {
    if (strnlen(s, cap) == cap)
        return tr_error_set(err, TR_ERR_INVALID, "%s: %s is not terminated within %zu bytes", model, key, cap);
    int k = 0;
    const char *p = s;
    while (*p) {
        char *end;
        while (*p == ' ') p++;
        const long long i = iv ? strtoll(p, &end, 10) : 0;
        const double x = iv ? (double)i : strtod(p, &end);
        while (*end == ' ') end++;
        if (end == p || !isfinite(x) || x < lo || x > hi || (*end && *end != ','))
            return tr_error_set(err, TR_ERR_INVALID, "%s: %s = '%s': expected %s from %.17g to %.17g separated by "
                                "commas, such as \"%s\"", model, key, s, iv ? "integers" : "numbers", lo, hi, example);
        if (k == max)
            return tr_error_set(err, TR_ERR_INVALID, "%s: %s = '%s' has more than %d entries", model, key, s, max);
        if (iv) iv[k++] = i;
        else dv[k++] = x;
        p = *end ? end + 1 : end;
    }
    if (k == 0)
        return tr_error_set(err, TR_ERR_INVALID, "%s: %s is empty; expected a list such as \"%s\"", model, key, example);
    *n = k;
    return TR_OK;
}

int tr_model_int_list(const char *model, const char *key, const char *s, size_t cap, int64_t lo, int64_t hi,
                      const char *example, int64_t *v, int max, int *n, struct tr_error *err) {
    return parse_list(model, key, s, cap, (double)lo, (double)hi, example, v, NULL, max, n, err);
}

int tr_model_num_list(const char *model, const char *key, const char *s, size_t cap, double lo, double hi,
                      const char *example, double *v, int max, int *n, struct tr_error *err) {
    return parse_list(model, key, s, cap, lo, hi, example, NULL, v, max, n, err);
}

int tr_model_check_positive(const char *model, const struct tr_model_pos *pos, int n, struct tr_error *err) {
    for (int i = 0; i < n; i++)
        if (pos[i].v < 1)
            return tr_error_set(err, TR_ERR_INVALID, "%s: %s = %lld, expected at least 1", model, pos[i].name,
                                (long long)pos[i].v);
    return TR_OK;
}
