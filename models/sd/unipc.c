/* UniPC's predictor-corrector steps (unipc.h). */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "unipc.h"

#define P TR_UNIPC_MAX_ORDER

/* λ = log α − log s = −log σ */
static double lambda(double sigma) { return -log(sigma); }

static double alpha(double sigma) { return 1.0 / sqrt(sigma * sigma + 1.0); }

/* R·x = b for the n×n R (n ≤ P), by elimination with partial pivoting; 0 where R is singular. */
static int solve(int n, double R[P][P], double *b, double *x) {
    for (int c = 0; c < n; c++) {
        int piv = c;
        for (int r = c + 1; r < n; r++)
            if (fabs(R[r][c]) > fabs(R[piv][c])) piv = r;
        if (!(fabs(R[piv][c]) > 0)) return 0;
        for (int k = 0; k < n; k++) {
            const double t = R[c][k];
            R[c][k] = R[piv][k], R[piv][k] = t;
        }
        const double t = b[c];
        b[c] = b[piv], b[piv] = t;
        for (int r = c + 1; r < n; r++) {
            const double f = R[r][c] / R[c][c];
            for (int k = c; k < n; k++) R[r][k] -= f * R[c][k];
            b[r] -= f * b[c];
        }
    }
    for (int r = n - 1; r >= 0; r--) {
        double v = b[r];
        for (int k = r + 1; k < n; k++) v -= R[r][k] * x[k];
        x[r] = v / R[r][r];
    }
    return 1;
}

/* One update from σ_s (steps[s]) to σ_t of order p, as diffusers' multistep_uni_*_bh_update
 * computes it: its base (s_t/s_s, −α_t·φ), −α_t·B and the ρ that weigh the differences
 * D_k = (d_{s−k} − d_s)/r_k, k = 1..p−1 (the predictor's, n = p − 1 of them), and with
 * `corrector` the last ρ weighing the new output's d_t − d_s too (n = p). */
struct update {
    double x, d, scale; /* x' = x·x_s + d·d_s + scale·(Σ ρ_k·D_k + ρ_{p−1}·(d_t − d_s)) */
    double r[P], rho[P];
};

static int update(const struct tr_unipc_step *steps, int64_t s, double sigma_t, int p, int bh1, int corrector,
                  struct update *u) {
    const double sg = steps[s].sigma, at = alpha(sigma_t), st = sigma_t * at, ss = sg * alpha(sg);
    const double h = lambda(sigma_t) - lambda(sg), hh = -h, phi = expm1(hh), B = bh1 ? hh : phi;
    *u = (struct update){.x = st / ss, .d = -at * phi, .scale = -at * B};
    double R[P][P], b[P], hk = phi / hh - 1.0, fact = 1.0;
    for (int k = 0; k < p; k++) u->r[k] = k < p - 1 ? (lambda(steps[s - 1 - k].sigma) - lambda(sg)) / h : 1.0;
    for (int j = 0; j < p; j++) {
        b[j] = hk * fact / B;
        fact *= j + 2;
        hk = hk / hh - 1.0 / fact;
        for (int k = 0; k < p; k++) R[j][k] = pow(u->r[k], j);
    }
    const int n = corrector ? p : p - 1;
    if (n == 1) u->rho[0] = 0.5; /* diffusers' simplified orders: the corrector's 1, the predictor's 2 */
    else if (n > 0 && !solve(n, R, b, u->rho)) return 0;
    return 1;
}

/* Step i's "i,j,.." holds i − 1: no corrector before step i. */
static int parse_disabled(const char *list, int64_t S, unsigned char *off, struct tr_error *err) {
    for (const char *p = list; *p;) {
        while (isspace((unsigned char)*p) || *p == ',') p++;
        if (!*p) break;
        char *end;
        const long long v = strtoll(p, &end, 10);
        if (end == p)
            return tr_error_set(err, TR_ERR_INVALID, "unipc: disable_corrector = '%s': expected step numbers, as "
                                "\"0,1\"", list);
        if (v >= 0 && v < S) off[v] = 1;
        p = end;
    }
    return TR_OK;
}

int tr_unipc_plan(const struct tr_ddim *s, const struct tr_unipc_config *e, struct tr_unipc_step *steps,
                  struct tr_error *err) {
    const int64_t S = s->steps;
    if (e->order < 1 || e->order > P)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "unipc: solver_order = %d: 1 to %d is provided", e->order, P);
    struct tr_dpm_step *d = malloc(sizeof *d * (size_t)S);
    unsigned char *off = calloc((size_t)S, 1);
    const struct tr_dpm_config dc = {.order = 1, .karras = e->karras, .sigma_min = e->sigma_min,
                                     .sigma_max = e->sigma_max, .final_sigma_min = e->final_sigma_min,
                                     .karras_round = 1, .final_karras_last = 1};
    int rc = !d || !off ? tr_error_set(err, TR_ERR_NOMEM, "unipc: no memory for %lld steps", (long long)S)
                        : tr_dpm_plan(s, &dc, d, err);
    if (!rc) rc = parse_disabled(e->disable_corrector ? e->disable_corrector : "", S, off, err);
    for (int64_t i = 0; i < S && !rc; i++) {
        struct tr_unipc_step *k = &steps[i];
        *k = (struct tr_unipc_step){.t = d[i].t, .sigma = d[i].sigma, .sigma_next = d[i].sigma_next,
                                    .d_x = d[i].d_x, .d_o = d[i].d_o};
        const int64_t run = i - e->begin + 1; /* the outputs there are, this one's too */
        int p = (int)(run < e->order ? (run > 0 ? run : 1) : e->order);
        if (e->lower_order_final && S - i < p) p = (int)(S - i);
        k->order = p;
        struct update u;
        if (i > e->begin && !off[i - 1]) { /* UniC: x_i from L = x_{i−1} and d_{i−1}, d_{i−2}.., d_i */
            const int q = steps[i - 1].order;
            if (!update(steps, i - 1, k->sigma, q, e->bh1, 1, &u)) {
                rc = tr_error_set(err, TR_ERR_INVALID, "unipc: step %lld: the corrector's system is singular "
                                  "(two steps at one sigma?)", (long long)i);
                break;
            }
            k->corrected = 1, k->k_last = u.x;
            k->k_d[0] = u.scale * u.rho[q - 1];
            k->k_d[1] = u.d - u.scale * u.rho[q - 1];
            for (int j = 1; j < q; j++) {
                const double c = u.scale * u.rho[j - 1] / u.r[j - 1];
                k->k_d[j + 1] += c, k->k_d[1] -= c;
            }
        }
        if (k->sigma_next == 0) { /* λ' = ∞: x' is the data prediction */
            if (p > 1) {
                rc = tr_error_set(err, TR_ERR_UNSUPPORTED, "unipc: the last step is of order %d onto sigma 0, where "
                                  "diffusers' UniPC divides by 0 (NaN): lower_order_final = true, or "
                                  "final_sigmas_type = sigma_min", p);
                break;
            }
            k->p_x = 0, k->p_d[0] = 1;
            continue;
        }
        if (!update(steps, i, k->sigma_next, p, e->bh1, 0, &u)) {
            rc = tr_error_set(err, TR_ERR_INVALID, "unipc: step %lld: the predictor's system is singular (two steps "
                              "at one sigma?)", (long long)i);
            break;
        }
        k->p_x = u.x, k->p_d[0] = u.d;
        for (int j = 1; j < p; j++) {
            const double c = u.scale * u.rho[j - 1] / u.r[j - 1];
            k->p_d[j] += c, k->p_d[0] -= c;
        }
    }
    free(d);
    free(off);
    return rc;
}
