/* The Stable Diffusion step against diffusers: the DDIM scheduler's timesteps and update
 * at every one of 50 steps (float64, diffusers' DDIMScheduler on SD v1.4's scheduler
 * config), and the whole step (the tiny UNet on the doubled batch, guidance 7.5, the
 * update) on every backend in f32, bf16 and f16 against tests/fixtures/make_sd_fixture.py.
 * Also: config errors, the synthetic inputs, the full-size parameter count. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include "modelutil.h"
#include "models.h"
#include "sd/heun.h"
#include "sd/pndm.h"
#include "sd/sd.h"
#include <png.h>
#include "trident/image.h"
#include "trident/bench.h"
#include "trident/config.h"
#include "trident/image.h"
#include "trident/safetensors.h"
#include "trident/weights.h"
#include "unet/unet.h"

#define UNET_WEIGHTS TR_SOURCE_DIR "/tests/fixtures/sd_tiny/unet/diffusion_pytorch_model.safetensors"
#define FIXTURE_IO TR_SOURCE_DIR "/tests/fixtures/sd_tiny_io.safetensors"
#define HINT " (regenerate with: cd tests/fixtures && python3 make_sd_fixture.py)"
#define PARTS TR_SOURCE_DIR "/tests/fixtures/sd_tiny"
#define PIPELINE_IO TR_SOURCE_DIR "/tests/fixtures/sd_pipeline_io.safetensors"
#define PIPELINE_HINT " (regenerate with: cd tests/fixtures && python3 make_sd_pipeline_fixture.py)"

static const struct tr_model_desc *const M = &tr_model_stable_diffusion;
#define preset(name) ((const struct tr_sd_config *)tr_test_preset(M, name))

/* Step i of c's schedule: its timestep (*t) and coefficients. */
static struct tr_ddim_coeffs step_of(const struct tr_sd_config *c, int64_t i, int64_t *t) {
    const struct tr_unet_config *u;
    struct tr_ddim s;
    struct tr_error e = {0};
    if (tr_sd_resolve(c, &u, &s, &e)) fail_msg("%s", e.msg);
    struct tr_ddim_coeffs k;
    tr_ddim_step(&s, i, t, &k);
    tr_ddim_free(&s);
    return k;
}

static void test_scheduler_matches_diffusers(void **state) {
    struct tr_safetensors *io = tr_test_open(FIXTURE_IO, HINT);
    struct tr_tensor ts, xs, es, ps;
    struct tr_error e = {0};
    if (tr_safetensors_get(io, "sched.timesteps", &ts, &e) || tr_safetensors_get(io, "sched.x", &xs, &e) ||
        tr_safetensors_get(io, "sched.eps", &es, &e) || tr_safetensors_get(io, "sched.prev", &ps, &e))
        fail_msg("%s" HINT, e.msg);
    const struct tr_unet_config *u;
    struct tr_ddim s;
    assert_int_equal(tr_sd_resolve(preset("sd-v1-4"), &u, &s, &e), TR_OK);
    assert_int_equal(s.steps, 50);
    assert_int_equal(tr_tensor_numel(&ts), 50);
    const int64_t K = tr_tensor_numel(&xs);
    const double *x = xs.data, *eps = es.data, *prev = ps.data;
    double worst = 0;
    for (int64_t i = 0; i < 50; i++) {
        int64_t t;
        struct tr_ddim_coeffs c;
        tr_ddim_step(&s, i, &t, &c);
        assert_int_equal(t, ((const int64_t *)ts.data)[i]);
        double num = 0, den = 0;
        for (int64_t k = 0; k < K; k++) {
            double d = c.c_x * x[k] + c.c_o * eps[k] - prev[i * K + k];
            num += d * d, den += prev[i * K + k] * prev[i * K + k];
        }
        worst = fmax(worst, sqrt(num / den));
    }
    print_message("ddim: 50 steps (t %lld .. %lld), worst rel err vs diffusers %.2e\n", (long long)s.timesteps[0],
                  (long long)s.timesteps[49], worst);
    assert_true(worst < 1e-12);
    assert_true(s.timesteps[0] == 981 && s.timesteps[49] == 1);
    tr_ddim_free(&s);
    tr_safetensors_close(io);
}

static void test_scheduler_errors(void **state) {
    struct tr_ddim s;
    struct tr_error e = {0};
    const struct tr_ddim_config ok = {.num_train_timesteps = 1000, .beta_start = 0.00085, .beta_end = 0.012,
                                      .steps_offset = 1};
    struct tr_ddim_config bad_beta = ok, bad_offset = ok;
    bad_beta.beta_start = 0.02, bad_offset.steps_offset = 20;
    const char *want[] = {"0 inference steps", "1001 inference steps", "beta_start = 0.02", "steps_offset = 20"};
    int rc[4] = {tr_ddim_init(&s, &ok, 0, &e)};
    tr_assert_msg_has(&e, want[0]);
    rc[1] = tr_ddim_init(&s, &ok, 1001, &e);
    tr_assert_msg_has(&e, want[1]);
    rc[2] = tr_ddim_init(&s, &bad_beta, 50, &e);
    tr_assert_msg_has(&e, want[2]);
    rc[3] = tr_ddim_init(&s, &bad_offset, 50, &e); /* 49·20 + 20 = 1000 */
    tr_assert_msg_has(&e, want[3]);
    for (int i = 0; i < 4; i++) assert_int_equal(rc[i], TR_ERR_INVALID);
    /* one step: t = steps_offset, alpha_prev = alpha_cumprod[0] (set_alpha_to_one off) or 1 */
    struct tr_ddim_config one = ok;
    one.set_alpha_to_one = 1;
    assert_int_equal(tr_ddim_init(&s, &one, 1, &e), TR_OK);
    int64_t t;
    struct tr_ddim_coeffs c;
    tr_ddim_step(&s, 0, &t, &c);
    assert_int_equal(t, 1);
    assert_true(fabs(c.c_x * sqrt(s.alphas_cumprod[1]) - 1.0) < 1e-15); /* x_prev = x0 */
    tr_ddim_free(&s);
}

/* Scheduler configs unlike SD v1's (linear, cosine and zero-SNR betas; trailing and
 * linspace spacing; v and sample prediction; the clamp; a PNDM file), each read from its
 * scheduler_config.json by hf_config: the timesteps and every step's update against
 * DDIMScheduler.from_config on the same file (its schedule in float32, so 1e-5). */
#define DDIM_IO TR_SOURCE_DIR "/tests/fixtures/ddim_io.safetensors"
#define DDIM_HINT " (regenerate with: cd tests/fixtures && python3 make_ddim_fixture.py)"
/* PNDM's runs (pndm.h) in double on the fixture's model outputs, from x: the worst relative
 * error of the latents after a run against diffusers' PNDMScheduler. */
static double pndm_runs(int n, const struct tr_ddim *s, const struct tr_safetensors *io, struct tr_tensor ts,
                        struct tr_tensor ps, const double *x, int64_t K) {
    char key[64];
    struct tr_tensor os;
    struct tr_error e = {0};
    snprintf(key, sizeof key, "%d.outputs", n);
    if (tr_safetensors_get(io, key, &os, &e)) fail_msg("case %d: %s" DDIM_HINT, n, e.msg);
    struct tr_pndm_run runs[64];
    int64_t runs_n;
    assert_true(s->steps + 1 <= 64);
    if (tr_pndm_plan(s, 0, runs, &runs_n, &e)) fail_msg("case %d: %s", n, e.msg);
    assert_int_equal(runs_n, tr_tensor_numel(&ts));
    const double *out = os.data;
    double *cur = malloc(sizeof(double) * (size_t)K), *start = malloc(sizeof(double) * (size_t)K), worst = 0;
    memcpy(cur, x, sizeof(double) * (size_t)K);
    memcpy(start, x, sizeof(double) * (size_t)K);
    for (int64_t i = 0; i < runs_n; i++) {
        if (runs[i].t != ((const int64_t *)ts.data)[i])
            fail_msg("pndm case %d run %lld: timestep %lld, diffusers %lld", n, (long long)i, (long long)runs[i].t,
                     (long long)((const int64_t *)ts.data)[i]);
        const double *want = (const double *)ps.data + i * K;
        double num = 0, den = 0;
        for (int64_t j = 0; j < K; j++) {
            double v = runs[i].c_x * (runs[i].from_start ? start[j] : cur[j]);
            for (int k = 0; k < runs[i].n; k++) v += runs[i].c_e * runs[i].w[k] * out[runs[i].idx[k] * K + j];
            cur[j] = v;
            num += (v - want[j]) * (v - want[j]), den += want[j] * want[j];
        }
        worst = fmax(worst, sqrt(num / den));
    }
    free(cur);
    free(start);
    return worst;
}

/* Case n's tensor `what` of the scheduler fixture ("N.what"). */
static struct tr_tensor case_get(const struct tr_safetensors *io, int n, const char *what) {
    char key[64];
    struct tr_tensor t;
    struct tr_error e = {0};
    snprintf(key, sizeof key, "%d.%s", n, what);
    if (tr_safetensors_get(io, key, &t, &e)) fail_msg("case %d: %s" DDIM_HINT, n, e.msg);
    return t;
}

/* Step i of a multistep case: its timestep as diffusers' (tw), its σ and the next as
 * diffusers' float32 ones (sw). */
static void expect_step(const char *kind, int n, int64_t i, double t, double sigma, double sigma_next,
                        const double *tw, const double *sw) {
    if (t != tw[i] || fabs(sigma - sw[i]) > 1e-5 * sw[i] + 2e-6 || fabs(sigma_next - sw[i + 1]) > 1e-5 * sw[i + 1] + 2e-6)
        fail_msg("%s case %d step %lld: t %g sigma %.8g -> %.8g; diffusers t %g sigma %.8g -> %.8g", kind, n,
                 (long long)i, t, sigma, sigma_next, tw[i], sw[i], sw[i + 1]);
}

/* A DPM-Solver++ case of the fixture (dpm.h): its timesteps and σ, and the latents after
 * every step, carried from x with each step's own model output, against diffusers'. */
static double dpm_runs(int n, const struct tr_sd_config *c, const struct tr_ddim *s, const struct tr_safetensors *io,
                       const struct tr_tensor *ps, const double *x, int64_t K) {
    const struct tr_dpm_config dc = tr_sd_dpm_config(c);
    struct tr_dpm_step *st = calloc((size_t)s->steps, sizeof *st);
    double *cur = malloc(sizeof(double) * (size_t)K), *d = malloc(sizeof(double) * (size_t)K),
           *dp = calloc((size_t)K, sizeof(double));
    assert_true(st && cur && d && dp);
    struct tr_error e = {0};
    if (tr_dpm_plan(s, &dc, st, &e)) fail_msg("case %d: %s", n, e.msg);
    const struct tr_tensor os = case_get(io, n, "outputs"), ts = case_get(io, n, "timesteps_f"),
                           sg = case_get(io, n, "sigmas");
    assert_int_equal(tr_tensor_numel(&ts), s->steps);
    const double *out = os.data, *tw = ts.data, *sw = sg.data;
    memcpy(cur, x, sizeof(double) * (size_t)K);
    double worst = 0;
    for (int64_t i = 0; i < s->steps; i++) {
        const struct tr_dpm_step *k = &st[i];
        expect_step("dpm", n, i, k->t, k->sigma, k->sigma_next, tw, sw);
        const double *want = (const double *)ps->data + i * K;
        double num = 0, den = 0;
        for (int64_t j = 0; j < K; j++) {
            d[j] = k->d_x * cur[j] + k->d_o * out[i * K + j];
            const double v = k->c_x * cur[j] + k->c_d * d[j] + k->c_dprev * dp[j];
            dp[j] = d[j], cur[j] = v;
            num += (v - want[j]) * (v - want[j]), den += want[j] * want[j];
        }
        worst = fmax(worst, sqrt(num / den));
    }
    free(st), free(cur), free(d), free(dp);
    return worst;
}

/* A UniPC case of the fixture (unipc.h): its timesteps and σ, and the latents after every
 * step (the predictor's, from the corrected sample), carried from x with each step's own
 * model output, against diffusers'. */
static double unipc_runs(int n, const struct tr_sd_config *c, const struct tr_ddim *s, const struct tr_safetensors *io,
                         const struct tr_tensor *ps, const double *x, int64_t K) {
    const struct tr_unipc_config uc = tr_sd_unipc_config(c);
    struct tr_unipc_step *st = calloc((size_t)s->steps, sizeof *st);
    double *cur = malloc(sizeof(double) * (size_t)K), *last = malloc(sizeof(double) * (size_t)K),
           *d = malloc(sizeof(double) * (size_t)(K * s->steps));
    assert_true(st && cur && last && d);
    struct tr_error e = {0};
    if (tr_unipc_plan(s, &uc, st, &e)) fail_msg("case %d: %s", n, e.msg);
    const struct tr_tensor os = case_get(io, n, "outputs"), ts = case_get(io, n, "timesteps_f"),
                           sg = case_get(io, n, "sigmas");
    assert_int_equal(tr_tensor_numel(&ts), s->steps);
    const double *out = os.data, *tw = ts.data, *sw = sg.data;
    memcpy(cur, x, sizeof(double) * (size_t)K);
    double worst = 0;
    for (int64_t i = 0; i < s->steps; i++) {
        const struct tr_unipc_step *k = &st[i];
        expect_step("unipc", n, i, k->t, k->sigma, k->sigma_next, tw, sw);
        const double *want = (const double *)ps->data + i * K;
        double num = 0, den = 0;
        for (int64_t j = 0; j < K; j++) {
            double *di = d + i * K;
            di[j] = k->d_x * cur[j] + k->d_o * out[i * K + j];
            if (k->corrected) {
                double v = k->k_last * last[j];
                for (int q = 0; q <= st[i - 1].order; q++) v += k->k_d[q] * d[(i - q) * K + j];
                cur[j] = v;
            }
            last[j] = cur[j];
            double v = k->p_x * cur[j];
            for (int q = 0; q < k->order; q++) v += k->p_d[q] * d[(i - q) * K + j];
            cur[j] = v;
            num += (v - want[j]) * (v - want[j]), den += want[j] * want[j];
        }
        worst = fmax(worst, sqrt(num / den));
    }
    free(st), free(cur), free(last), free(d);
    return worst;
}

/* A Heun case of the fixture (heun.h): its 2·steps − 1 runs' timesteps, σ, c_in and the
 * initial σ, and the latents after every run, carried from x with each run's own model
 * output, against diffusers'. */
static double heun_runs(int n, const struct tr_sd_config *c, const struct tr_ddim *s, const struct tr_safetensors *io,
                        const struct tr_tensor *ps, const double *x, int64_t K) {
    const struct tr_euler_config ec = tr_sd_euler_config(c);
    struct tr_heun_run *r = calloc((size_t)(2 * s->steps), sizeof *r);
    double *cur = malloc(sizeof(double) * (size_t)K), *saved = malloc(sizeof(double) * (size_t)K),
           *d1 = malloc(sizeof(double) * (size_t)K);
    assert_true(r && cur && saved && d1);
    struct tr_error e = {0};
    double init = 0;
    int64_t runs = 0;
    if (tr_heun_plan(s, &ec, r, &runs, &init, &e)) fail_msg("case %d: %s", n, e.msg);
    const struct tr_tensor os = case_get(io, n, "outputs"), ts = case_get(io, n, "timesteps_f"),
                           ci = case_get(io, n, "c_in"), is = case_get(io, n, "init_sigma");
    assert_int_equal(tr_tensor_numel(&ts), runs);
    const double *out = os.data, *tw = ts.data, *cw = ci.data;
    double worst = fabs(init - *(const double *)is.data) / *(const double *)is.data;
    memcpy(cur, x, sizeof(double) * (size_t)K);
    for (int64_t i = 0; i < runs; i++) {
        const struct tr_heun_run *k = &r[i];
        if (fabs(k->t - tw[i]) > 1e-3 * fmax(1.0, tw[i]) || fabs(k->c_in - cw[i]) > 1e-6)
            fail_msg("heun case %d run %lld: t %.6g c_in %.8g; diffusers t %.6g c_in %.8g", n, (long long)i, k->t,
                     k->c_in, tw[i], cw[i]);
        const double *want = (const double *)ps->data + i * K;
        double num = 0, den = 0;
        for (int64_t j = 0; j < K; j++) {
            const double d = k->p * cur[j] + k->q * out[i * K + j];
            if (!k->second) saved[j] = cur[j], d1[j] = d, cur[j] += k->dt * d;
            else cur[j] = saved[j] + 0.5 * k->dt * (d1[j] + d);
            num += (cur[j] - want[j]) * (cur[j] - want[j]), den += want[j] * want[j];
        }
        worst = fmax(worst, sqrt(num / den));
    }
    free(r), free(cur), free(saved), free(d1);
    return worst;
}

/* An Euler case of the fixture (euler.h): its timesteps, σ, c_in and initial σ, and every
 * step from the same x and o against diffusers'; returns the worst relative difference. */
static double euler_steps(int n, const struct tr_sd_config *c, const struct tr_ddim *s,
                          const struct tr_safetensors *io, const struct tr_tensor *ps, const double *x, const double *o,
                          int64_t K) {
    const struct tr_euler_config ec = tr_sd_euler_config(c);
    struct tr_euler_step *st = calloc((size_t)s->steps, sizeof *st);
    assert_non_null(st);
    double init = 0;
    struct tr_error e = {0};
    if (tr_euler_plan(s, &ec, st, &init, &e)) fail_msg("case %d: %s", n, e.msg);
    const struct tr_tensor ts = case_get(io, n, "timesteps_f"), sg = case_get(io, n, "sigmas"),
                           ci = case_get(io, n, "c_in"), is = case_get(io, n, "init_sigma");
    const double *tw = ts.data, *sw = sg.data, *cw = ci.data;
    double worst = fabs(init - *(const double *)is.data) / *(const double *)is.data;
    for (int64_t i = 0; i < s->steps; i++) {
        const struct tr_euler_step *k = &st[i];
        /* diffusers' own timesteps and σ are float32: its 1 − ᾱ_0 = 1e-4 is off by 6e-8, σ_0 by 8e-7 */
        if (fabs(k->t - tw[i]) > 1e-3 * fmax(1.0, tw[i]) || fabs(k->sigma - sw[i]) > 1e-5 * sw[i] + 2e-6 ||
            fabs(k->sigma_next - sw[i + 1]) > 1e-5 * sw[i + 1] + 2e-6 || fabs(k->c_in - cw[i]) > 1e-6)
            fail_msg("case %d step %lld: t %.6g sigma %.8g -> %.8g c_in %.8g; diffusers t %.6g sigma %.8g -> %.8g c_in "
                     "%.8g", n, (long long)i, k->t, k->sigma, k->sigma_next, k->c_in, tw[i], sw[i], sw[i + 1], cw[i]);
        const double *want = (const double *)ps->data + i * K;
        double num = 0, den = 0;
        for (int64_t j = 0; j < K; j++) {
            const double d = k->c_x * x[j] + k->c_o * o[j] - want[j];
            num += d * d, den += want[j] * want[j];
        }
        worst = fmax(worst, sqrt(num / den));
    }
    free(st);
    return worst;
}

static void test_scheduler_configs(void **state) {
    struct tr_safetensors *io = tr_test_open(DDIM_IO, DDIM_HINT);
    struct tr_tensor xs, os, ns, ts, as, ps;
    struct tr_error e = {0};
    if (tr_safetensors_get(io, "x", &xs, &e) || tr_safetensors_get(io, "o", &os, &e)) fail_msg("%s" DDIM_HINT, e.msg);
    const int64_t K = tr_tensor_numel(&xs);
    const double *x = xs.data, *o = os.data;
    int n = 0;
    for (char name[64]; snprintf(name, sizeof name, "%d.steps", n), tr_safetensors_get(io, name, &ns, &e) == TR_OK; n++) {
        const int64_t steps = *(const int64_t *)ns.data;
        char key[64], ini[256];
        snprintf(ini, sizeof ini, "[model]\nhf_config = tests/fixtures/ddim/%d/scheduler_config.json\n"
                 "num_inference_steps = %lld\n", n, (long long)steps);
        struct tr_config cfg;
        struct tr_sd_config c;
        assert_int_equal(tr_config_load_string(ini, "t.ini", &cfg, &e), TR_OK);
        if (tr_model_resolve(M, "tiny", &cfg, &c, &e)) fail_msg("case %d: %s", n, e.msg);
        const struct tr_unet_config *u;
        struct tr_ddim s;
        if (tr_sd_resolve(&c, &u, &s, &e)) fail_msg("case %d: %s", n, e.msg);
        snprintf(key, sizeof key, "%d.timesteps", n);
        assert_int_equal(tr_safetensors_get(io, key, &ts, &e), TR_OK);
        snprintf(key, sizeof key, "%d.alphas_cumprod", n);
        assert_int_equal(tr_safetensors_get(io, key, &as, &e), TR_OK);
        snprintf(key, sizeof key, "%d.prev", n);
        assert_int_equal(tr_safetensors_get(io, key, &ps, &e), TR_OK);
        assert_int_equal(tr_tensor_numel(&as), s.c.num_train_timesteps);
        double worst_a = 0, worst = 0;
        for (int64_t t = 0; t < s.c.num_train_timesteps; t++)
            worst_a = fmax(worst_a, fabs(s.alphas_cumprod[t] - ((const double *)as.data)[t]));
        if (strcmp(c.scheduler, "heun") == 0) {
            worst = heun_runs(n, &c, &s, io, &ps, x, K);
            print_message("heun case %d: %s, %s, %s%s, %lld steps: alphas_cumprod within %.1e, the initial sigma and "
                          "the latents after every run within %.1e\n", n, c.beta_schedule, c.timestep_spacing,
                          c.prediction_type, c.use_karras_sigmas ? ", karras" : "", (long long)steps, worst_a, worst);
            assert_true(worst_a < 1e-6 && worst < 1e-5);
            tr_ddim_free(&s);
            continue;
        }
        if (strcmp(c.scheduler, "dpm") == 0) {
            worst = dpm_runs(n, &c, &s, io, &ps, x, K);
            print_message("dpm case %d: %s, %s, %s%s%s, order %lld %s, %lld steps: alphas_cumprod within %.1e, the "
                          "latents after every step within %.1e\n", n, c.beta_schedule, c.timestep_spacing,
                          c.prediction_type, c.rescale_betas_zero_snr ? ", zero SNR" : "",
                          c.use_karras_sigmas ? ", karras" : "", (long long)c.solver_order, c.solver_type,
                          (long long)steps, worst_a, worst);
            assert_true(worst_a < 1e-6 && worst < 1e-5);
            tr_ddim_free(&s);
            continue;
        }
        if (strcmp(c.scheduler, "unipc") == 0) {
            worst = unipc_runs(n, &c, &s, io, &ps, x, K);
            print_message("unipc case %d: %s, %s, %s%s%s, order %lld %s%s%s, %lld steps: alphas_cumprod within %.1e, "
                          "the latents after every step within %.1e\n", n, c.beta_schedule, c.timestep_spacing,
                          c.prediction_type, c.rescale_betas_zero_snr ? ", zero SNR" : "",
                          c.use_karras_sigmas ? ", karras" : "", (long long)c.solver_order, c.solver_type,
                          c.disable_corrector[0] ? ", no corrector after " : "", c.disable_corrector,
                          (long long)steps, worst_a, worst);
            assert_true(worst_a < 1e-6 && worst < 1e-5);
            tr_ddim_free(&s);
            continue;
        }
        if (strcmp(c.scheduler, "euler") == 0) {
            worst = euler_steps(n, &c, &s, io, &ps, x, o, K);
            print_message("euler case %d: %s, %s, %s%s%s, %lld steps: alphas_cumprod within %.1e, the initial sigma "
                          "and every step within %.1e\n", n, c.beta_schedule, c.timestep_spacing, c.prediction_type,
                          c.rescale_betas_zero_snr ? ", zero SNR" : "", c.use_karras_sigmas ? ", karras" : "",
                          (long long)steps, worst_a, worst);
            assert_true(worst_a < 1e-6 && worst < 1e-5);
            tr_ddim_free(&s);
            continue;
        }
        if (strcmp(c.scheduler, "pndm") == 0) {
            worst = pndm_runs(n, &s, io, ts, ps, x, K);
            print_message("pndm case %d: %s, %s, %s, %lld steps in %lld runs: alphas_cumprod within %.1e, the latents "
                          "after every run within %.1e\n", n, c.beta_schedule, c.timestep_spacing, c.prediction_type,
                          (long long)steps, (long long)tr_tensor_numel(&ts), worst_a, worst);
            assert_true(worst_a < 1e-6 && worst < 1e-5);
            tr_ddim_free(&s);
            continue;
        }
        for (int64_t i = 0; i < steps; i++) {
            int64_t t;
            struct tr_ddim_coeffs k;
            tr_ddim_step(&s, i, &t, &k);
            if (t != ((const int64_t *)ts.data)[i])
                fail_msg("case %d step %lld: timestep %lld, diffusers %lld", n, (long long)i, (long long)t,
                         (long long)((const int64_t *)ts.data)[i]);
            const double *want = (const double *)ps.data + i * K;
            double num = 0, den = 0;
            for (int64_t j = 0; j < K; j++) {
                double x0 = k.x0_x * x[j] + k.x0_o * o[j];
                if (s.c.clip > 0) x0 = fmin(fmax(x0, -s.c.clip), s.c.clip);
                const double d = k.p_x0 * x0 + k.p_e * (k.e_x * x[j] + k.e_o * o[j]) - want[j];
                num += d * d, den += want[j] * want[j];
            }
            worst = fmax(worst, sqrt(num / den));
        }
        print_message("ddim case %d: %s, %s, %s%s%s, %lld steps (t %lld .. %lld): alphas_cumprod within %.1e, "
                      "updates within %.1e\n", n, c.beta_schedule, c.timestep_spacing, c.prediction_type,
                      c.rescale_betas_zero_snr ? ", zero SNR" : "", c.clip_sample ? ", clamped" : "", (long long)steps,
                      (long long)s.timesteps[0], (long long)s.timesteps[steps - 1], worst_a, worst);
        assert_true(worst_a < 1e-6 && worst < 1e-5);
        tr_ddim_free(&s);
    }
    assert_int_equal(n, 32);
    tr_safetensors_close(io);
}

/* predict's step with the clamp (ddim_coeffs [6]) and v prediction, on every backend:
 * prev_sample against ddim.h's three lines in double on the step's own guided output. */
static void test_predict_clamped(void **state) {
    struct tr_sd_config c = *preset("tiny");
    c.step = 1, c.clip_sample = 1, c.clip_sample_range = 0.5;
    snprintf(c.prediction_type, sizeof c.prediction_type, "v_prediction");
    const int64_t B = 2, T = 5;
    struct tr_graph *g = tr_test_model_build(M, &c, TR_TASK_PREDICT, TR_DTYPE_F32, B, T);
    assert_int_equal(tr_graph_set_output(g, tr_graph_find(g, "guidance"), "guided"), TR_OK);
    struct tr_build_opts o = {.task = TR_TASK_PREDICT, .dtype = TR_DTYPE_F32, .batch = B, .seq_len = T};
    struct tr_tensor in[4], out[2];
    tr_test_input_tensors(g, 4, in);
    struct tr_error e = {0};
    assert_int_equal(M->make_inputs(&c, &o, 3, 4, in, &e), TR_OK);
    assert_int_equal(tr_tensor_numel(&in[3]), 6);
    int64_t t;
    const struct tr_ddim_coeffs k = step_of(&c, 1, &t);
    const float *kf = in[3].data;
    assert_true(kf[0] == (float)k.x0_x && kf[1] == (float)k.x0_o && kf[2] == (float)k.e_x && kf[3] == (float)k.e_o &&
                kf[4] == (float)k.p_x0 && kf[5] == (float)k.p_e);
    struct tr_weights *w = NULL;
    if (tr_weights_load(g, UNET_WEIGHTS, &w, &e)) fail_msg("%s" HINT, e.msg);
    const int64_t n = tr_tensor_numel(&in[0]);
    double *ref = malloc(sizeof(double) * (size_t)n);
    assert_non_null(ref);
    for (int b = 0; b < TR_TEST_N_BACKENDS; b++) {
        tr_test_run_backend(&tr_test_backends[b], tr_test_dir, g, in, 1, out, NULL);
        const float *x = in[0].data, *v = out[1].data;
        int64_t clamped = 0;
        for (int64_t i = 0; i < n; i++) {
            double x0 = kf[0] * (double)x[i] + kf[1] * (double)v[i];
            clamped += fabs(x0) > c.clip_sample_range;
            x0 = fmin(fmax(x0, -c.clip_sample_range), c.clip_sample_range);
            ref[i] = kf[4] * x0 + kf[5] * (kf[2] * (double)x[i] + kf[3] * (double)v[i]);
        }
        const double err = tr_test_rel_err(&out[0], ref);
        print_message("%-22s predict, v prediction clamped to 0.5 (%lld of %lld x0 clamped): prev_sample within %.1e\n",
                      tr_test_backends[b].label, (long long)clamped, (long long)n, err);
        assert_true(clamped > 0 && clamped < n && err < 1e-5);
        tr_test_tensors_free(2, out);
    }
    free(ref);
    tr_test_tensors_free(4, in);
    tr_weights_free(w);
    tr_graph_free(g);
}

/* hf_config = a diffusers pipeline's directory (or its model_index.json): every part from
 * its config.json, the scheduler's file with StableDiffusionPipeline's two rewrites; a
 * scheduler_config.json alone, as it says; what is not a pipeline, refused by name. */
#define PIPE_DIR "tests/fixtures/reference_sd/pipeline"
static void test_pipeline_config(void **state) {
    static const char *const paths[] = {PIPE_DIR, PIPE_DIR "/model_index.json", PIPE_DIR "/"};
    struct tr_error e = {0};
    struct tr_config cfg;
    struct tr_sd_config c;
    char ini[768];
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        snprintf(ini, sizeof ini, "[model]\nhf_config = %s\n", paths[i]);
        assert_int_equal(tr_config_load_string(ini, "t.ini", &cfg, &e), TR_OK);
        if (tr_model_resolve(M, "sd-v1-4", &cfg, &c, &e)) fail_msg("%s: %s", paths[i], e.msg);
        assert_string_equal(c.unet, "unet/config.json");
        assert_string_equal(c.text_encoder, "text_encoder/config.json");
        assert_string_equal(c.vae, "vae/config.json");
        assert_string_equal(c.hf_unet.block_out_channels, "4,4,4"); /* the file's, not sd-v1-4's */
        assert_true(c.hf_unet.use_linear_projection);
        assert_true(c.hf_unet.cross_attention_dim == c.hf_text_encoder.hidden_size && c.hf_text_encoder.hidden_size == 8);
        assert_string_equal(c.hf_vae.block_out_channels, "12");
        assert_string_equal(c.beta_schedule, "linear");
        assert_string_equal(c.timestep_spacing, "leading");
        assert_string_equal(c.prediction_type, "v_prediction");
        assert_true(c.rescale_betas_zero_snr && !c.set_alpha_to_one && c.clip_sample_range == 1.5);
        assert_true(c.steps_offset == 1 && !c.clip_sample); /* the file: 0 and true, as the pipeline rewrites them */
        assert_string_equal(c.scheduler, "ddim");
    }
    print_message("%s: unet %s, text_encoder %s, vae %s; scheduler %s %s %s\n", PIPE_DIR, c.unet, c.text_encoder,
                  c.vae, c.beta_schedule, c.timestep_spacing, c.prediction_type);
    /* model_index.json names the scheduler's class, as from_pretrained builds it: an Euler
     * pipeline over a file whose own _class_name is DDIM's runs Euler */
    {
        char dir[600], path[700], src[700];
        snprintf(dir, sizeof dir, "%s/pipe_euler", tr_test_dir);
        assert_int_equal(mkdir(dir, 0700), 0);
        static const char *const parts[] = {"unet", "text_encoder", "vae"};
        for (int k = 0; k < 3; k++) {
            snprintf(src, sizeof src, "%s/" PIPE_DIR "/%s", TR_SOURCE_DIR, parts[k]);
            snprintf(path, sizeof path, "%s/%s", dir, parts[k]);
            assert_int_equal(symlink(src, path), 0);
        }
        snprintf(path, sizeof path, "pipe_euler/model_index.json");
        tr_test_dir_file(path, "{\"_class_name\": \"StableDiffusionPipeline\", \"scheduler\": [\"diffusers\", "
                         "\"EulerDiscreteScheduler\"]}", src, sizeof src);
        snprintf(path, sizeof path, "%s/scheduler", dir);
        assert_int_equal(mkdir(path, 0700), 0);
        tr_test_dir_file("pipe_euler/scheduler/scheduler_config.json", "{\"_class_name\": \"DDIMScheduler\"}", src,
                         sizeof src);
        snprintf(ini, sizeof ini, "[model]\nhf_config = %s\n", dir);
        assert_int_equal(tr_config_load_string(ini, "t.ini", &cfg, &e), TR_OK);
        if (tr_model_resolve(M, "sd-v1-4", &cfg, &c, &e)) fail_msg("%s: %s", dir, e.msg);
        assert_string_equal(c.scheduler, "euler");
        assert_string_equal(c.timestep_spacing, "linspace"); /* EulerDiscreteScheduler's default */
    }
    /* CompVis/stable-diffusion-v1-4's and stabilityai/stable-diffusion-2-1's published files
     * (a PNDMScheduler's config; a DDIMScheduler's predicting v) over the tiny preset: every
     * scheduler key as the preset has it, every part's key as its preset has it (but the
     * VAE's sample_size, 768 in 2.1's file and unused by generate), and the UNet's size */
    static const struct {
        const char *dir, *preset, *scheduler;
        int64_t unet_params;
    } pub[] = {{"tests/fixtures/hf/sd-v1-4-pipeline", "sd-v1-4", "pndm", 859520964},
               {"tests/fixtures/hf/sd-2-1-pipeline", "sd-2-1", "ddim", 865910724}};
    for (size_t p = 0; p < sizeof pub / sizeof pub[0]; p++) {
        snprintf(ini, sizeof ini, "[model]\nhf_config = %s\n", pub[p].dir);
        assert_int_equal(tr_config_load_string(ini, "t.ini", &cfg, &e), TR_OK);
        struct tr_sd_config got;
        if (tr_model_resolve(M, "tiny", &cfg, &got, &e)) fail_msg("%s", e.msg);
        const struct tr_sd_config *want = preset(pub[p].preset);
        /* the parts name their files; the scheduler is the file's class: 1.4's PNDM (the presets run DDIM) */
        tr_test_expect_same_config(M, &got, want, pub[p].dir, "unet,text_encoder,vae,scheduler");
        assert_string_equal(got.scheduler, pub[p].scheduler);
        const struct {
            const struct tr_model_desc *m;
            const void *got;
            const char *preset;
        } parts[] = {{&tr_model_unet_2d_condition, &got.hf_unet, want->unet},
                     {&tr_model_clip_text, &got.hf_text_encoder, want->text_encoder},
                     {&tr_model_autoencoder_kl, &got.hf_vae, want->vae}};
        for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
            const struct tr_model_desc *m = parts[i].m;
            tr_test_expect_same_config(m, parts[i].got, tr_test_preset(m, parts[i].preset), pub[p].dir,
                                       m == &tr_model_autoencoder_kl ? "sample_size" : NULL);
        }
        snprintf(got.scheduler, sizeof got.scheduler, "ddim"); /* predict's one step is DDIM's */
        struct tr_graph *g = tr_test_model_build(M, &got, TR_TASK_PREDICT, TR_DTYPE_F32, 1, 77);
        assert_int_equal(tr_test_param_count(g), pub[p].unet_params);
        tr_graph_free(g);
        print_message("%s: the %s preset, every part and the scheduler\n", pub[p].dir, pub[p].preset);
    }
    /* the default prompt length follows the text encoder read */
    assert_int_equal(M->default_seq_len(&c), c.hf_text_encoder.max_position_embeddings);
    assert_int_equal(tr_config_load_string("[model]\nhf_config = " PIPE_DIR "/scheduler/scheduler_config.json\n", "t.ini",
                                           &cfg, &e), TR_OK);
    assert_int_equal(tr_model_resolve(M, "tiny", &cfg, &c, &e), TR_OK);
    assert_true(c.steps_offset == 0 && c.clip_sample && strcmp(c.unet, "tiny") == 0);
    char prk[512];
    tr_test_dir_file("scheduler_config.json", "{\"_class_name\": \"PNDMScheduler\", \"beta_schedule\": "
                     "\"scaled_linear\"}", prk, sizeof prk);
    snprintf(ini, sizeof ini, "[model]\nhf_config = %s\n", prk);
    assert_int_equal(tr_config_load_string(ini, "t.ini", &cfg, &e), TR_OK);
    assert_int_not_equal(tr_model_resolve(M, "tiny", &cfg, &c, &e), TR_OK);
    tr_assert_msg_has(&e, "a PNDMScheduler without \"skip_prk_steps\": true (its Runge-Kutta warm-up steps) is not "
                          "provided");
    static const struct {
        const char *lines, *want;
    } bad[] = {{"hf_config = tests/fixtures/ddim", "'tests/fixtures/ddim': no unet/config.json: expected a diffusers"},
               {"hf_config = tests/fixtures/hf/sd-v1-4-unet.json", "expected a diffusers pipeline's directory, its "
                                                                   "model_index.json, or a scheduler_config.json"},
               {"hf_config = tests/fixtures/none", "cannot open 'tests/fixtures/none'"},
               {"beta_schedule = cosine", "beta_schedule = 'cosine': expected scaled_linear, linear or squaredcos_cap_v2"},
               {"timestep_spacing = even", "timestep_spacing = 'even': expected leading, trailing or linspace"},
               {"prediction_type = noise", "prediction_type = 'noise': expected epsilon, v_prediction or sample"},
               {"rescale_betas_zero_snr = true\ntimestep_spacing = trailing", "timestep 999 has alpha_cumprod 0"},
               {"scheduler = pndm", "scheduler = pndm runs in task generate"},
               {"clip_skip = 1", "clip_skip = 1 is generate's text encoder's"},
               {"scheduler = plms", "scheduler = 'plms': expected ddim, ddpm, pndm, euler, euler_ancestral, lms, heun, dpm "
                                    "or unipc"},
               {"scheduler = dpm\nalgorithm_type = dpmsolver", "algorithm_type = 'dpmsolver': expected dpmsolver++ or "
                                                                "sde-dpmsolver++"},
               {"unet = unet/config.json", "unet = 'unet/config.json': not a preset of unet_2d_condition (tiny, small, "
                                           "sd-v1-4, sd-2-1), nor a part [model] hf_config read"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(ini, sizeof ini, "[run]\nmodel = stable_diffusion\npreset = tiny\n[model]\n%s\n", bad[i].lines);
        assert_int_equal(tr_config_load_string(ini, "t.ini", &cfg, &e), TR_OK);
        struct tr_task_graph tg;
        assert_int_not_equal(tr_task_graph_build(&cfg, tr_builtin_models, &tg, &e), TR_OK);
        tr_assert_msg_has(&e, bad[i].want);
        print_message("refused: %s\n", e.msg);
    }
    /* what generate's UniPC plan refuses */
    static const struct {
        const char *lines, *want;
    } plan[] = {{"lower_order_final = false", "unipc: the last step is of order 2 onto sigma 0, where diffusers' UniPC "
                                              "divides by 0 (NaN)"},
                {"disable_corrector = 1;2", "disable_corrector = '1;2': expected step numbers"},
                {"clip_skip = 2", "clip_skip = 2, expected 0 to num_hidden_layers - 1 = 1"}};
    for (size_t i = 0; i < sizeof plan / sizeof plan[0]; i++) {
        snprintf(ini, sizeof ini, "[run]\nmodel = stable_diffusion\npreset = tiny\ntask = generate\n[model]\n"
                 "scheduler = unipc\nnum_inference_steps = 3\n%s\n", plan[i].lines);
        assert_int_equal(tr_config_load_string(ini, "t.ini", &cfg, &e), TR_OK);
        struct tr_task_graph tg;
        assert_int_not_equal(tr_task_graph_build(&cfg, tr_builtin_models, &tg, &e), TR_OK);
        tr_assert_msg_has(&e, plan[i].want);
        print_message("refused: %s\n", e.msg);
    }
}

static void test_config_errors(void **state) {
    static const struct tr_test_refusal r[] = {
        {TR_TASK_PREDICT, {{"unet", "huge"}}, {"unet = 'huge'", "tiny, small, sd-v1-4, sd-2-1"}},
        {TR_TASK_PREDICT, {{"step", "50"}}, {"step = 50", "num_inference_steps - 1 = 49"}},
        {TR_TASK_FIT, {{NULL}}, {"fit", "autoencoder_kl"}},
    };
    TR_TEST_EXPECT_REFUSALS(M, "tiny", r);
    /* full size: the UNet's parameters and nothing else */
    struct tr_graph *g = tr_test_model_build(M, preset("sd-v1-4"), TR_TASK_PREDICT, TR_DTYPE_F32, 13, 77);
    assert_int_equal(tr_test_param_count(g), 859520964);
    const int64_t text[3] = {26, 77, 768};
    int id = tr_graph_input(g, 2);
    assert_string_equal(tr_node_name(g, id), "encoder_hidden_states");
    assert_true(tr_shape_equal(tr_node_ndim(g, id), tr_node_shape(g, id), 3, text));
    tr_graph_free(g);
}

static void test_make_inputs(void **state) {
    struct tr_sd_config c = *preset("tiny");
    c.step = 7;
    struct tr_graph *g = tr_test_model_build(M, &c, TR_TASK_PREDICT, TR_DTYPE_F32, 3, 5);
    struct tr_build_opts o = {.task = TR_TASK_PREDICT, .dtype = TR_DTYPE_F32, .batch = 3, .seq_len = 5};
    struct tr_tensor in[4];
    tr_test_input_tensors(g, 4, in);
    struct tr_error e = {0};
    assert_int_equal(M->make_inputs(&c, &o, 9, 4, in, &e), TR_OK);
    int64_t t;
    const struct tr_ddim_coeffs k = step_of(&c, 7, &t);
    assert_true(*(const float *)in[1].data == (float)t && t == 841);
    assert_true(((const float *)in[3].data)[0] == (float)k.c_x && ((const float *)in[3].data)[1] == (float)k.c_o);
    double mean, sd, lo, hi;
    tr_test_moments(&in[0], &mean, &sd, &lo, &hi);
    assert_true(fabs(mean) < 0.2 && fabs(sd - 1.0) < 0.2);
    assert_int_equal(M->make_inputs(&c, &o, 9, 3, in, &e), TR_ERR_INVALID);
    tr_assert_msg_has(&e, "expected 4");
    tr_test_tensors_free(4, in);
    tr_graph_free(g);
}

static void step_matches_diffusers(enum tr_dtype dt) {
    struct tr_safetensors *io = tr_test_open(FIXTURE_IO, HINT);
    struct tr_sd_config c = *preset("tiny");
    c.step = 1;
    struct tr_tensor in[4] = {tr_test_io_tensor(io, "latents", dt, HINT), tr_test_io_tensor(io, "timestep", TR_DTYPE_F32, HINT),
                              tr_test_io_tensor(io, "encoder_hidden_states", dt, HINT),
                              tr_test_tensor(TR_DTYPE_F32, 1, (const int64_t[]){2})};
    struct tr_graph *g = tr_test_model_build(M, &c, TR_TASK_PREDICT, dt, in[0].shape[0], in[2].shape[1]);
    assert_int_equal(tr_graph_n_outputs(g), 1);
    assert_int_equal(tr_graph_set_output(g, tr_graph_find(g, "guidance"), "noise_pred"), TR_OK); /* checked too */
    struct tr_error e = {0};
    int64_t t;
    const struct tr_ddim_coeffs k = step_of(&c, 1, &t);
    assert_true((float)t == *(const float *)in[1].data);
    tr_tensor_set_f64(&in[3], 0, k.c_x);
    tr_tensor_set_f64(&in[3], 1, k.c_o);
    struct tr_weights *w = NULL;
    if (tr_weights_load(g, UNET_WEIGHTS, &w, &e)) fail_msg("%s" HINT, e.msg);
    tr_test_expect_fixture_outputs(g, in, io, dt, 2, "diffusers", HINT);
    tr_test_tensors_free(4, in);
    tr_weights_free(w);
    tr_graph_free(g);
    tr_safetensors_close(io);
}

TR_TEST_F32_BF16_F16(test_step_matches_diffusers, step_matches_diffusers)

/* A whole text-to-image run (task generate: the text encoder, 4 DDIM steps with guidance
 * 7.5, the VAE decoder) with the weights of a diffusers pipeline's directory, against
 * diffusers' StableDiffusionPipeline on the same parts, prompts and initial latents. */
static void test_generate_matches_pipeline(void **state) {
    struct tr_safetensors *io = tr_test_open(PIPELINE_IO, PIPELINE_HINT);
    struct tr_tensor in[2] = {tr_test_io_tensor(io, "input_ids", TR_DTYPE_I32, PIPELINE_HINT),
                              tr_test_io_tensor(io, "latents", TR_DTYPE_F32, PIPELINE_HINT)};
    struct tr_sd_config c = *preset("tiny");
    c.num_inference_steps = 4;
    const int64_t B = in[1].shape[0], T = in[0].shape[1];
    struct tr_graph *g = tr_test_model_build(M, &c, TR_TASK_GENERATE, TR_DTYPE_F32, B, T);
    /* the three parts' parameters, each once: the UNet's shared by its 4 instances */
    int64_t want = 0;
    const struct tr_model_desc *parts[3] = {&tr_model_clip_text, &tr_model_unet_2d_condition, &tr_model_autoencoder_kl};
    for (int i = 0; i < 3; i++) {
        struct tr_graph *p = tr_test_model_build(parts[i], tr_test_preset(parts[i], "tiny"), TR_TASK_PREDICT,
                                                 TR_DTYPE_F32, 2, 16);
        want += tr_test_param_count(p);
        tr_graph_free(p);
    }
    struct tr_graph *enc = tr_test_model_build(&tr_model_autoencoder_kl, tr_test_preset(&tr_model_autoencoder_kl, "tiny"),
                                               TR_TASK_FIT, TR_DTYPE_F32, 2, 1);
    want -= tr_test_param_count(enc); /* generate has no VAE encoder */
    tr_graph_free(enc);
    assert_int_equal(tr_test_param_count(g), want);
    struct tr_weights *w = NULL;
    struct tr_error e = {0};
    if (tr_weights_load(g, PARTS, &w, &e)) fail_msg("%s", e.msg);
    tr_test_expect_fixture_outputs(g, in, io, TR_DTYPE_F32, 1, "diffusers' pipeline", PIPELINE_HINT);
    tr_test_tensors_free(2, in);
    tr_weights_free(w);
    tr_graph_free(g);
    tr_safetensors_close(io);
}

/* `trident run` of generate with [generate] image: the PNG holds the reference backend's
 * pictures side by side, each value mapped as diffusers' "pil" output maps it. */
static void test_generate_writes_png(void **state) {
    char ini[1024], png[512];
    snprintf(png, sizeof png, "%s/sd.png", tr_test_dir);
    snprintf(ini, sizeof ini,
             "[run]\nmodel = stable_diffusion\npreset = tiny\ntask = generate\nbackends = torch, tf\nbatch = 2\n"
             "seq_len = 16\nsteps = 1\nwarmup = 1\nweights = %s\n[model]\nnum_inference_steps = 2\n"
             "[generate]\nimage = %s\n", PARTS, png);
    struct tr_bench_report rep;
    tr_test_bench_run(ini, "gen.ini", tr_builtin_models, &rep);
    png_image pi;
    memset(&pi, 0, sizeof pi);
    pi.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_file(&pi, png)) fail_msg("%s: %s", png, pi.message);
    assert_int_equal(pi.width, 2 * 16);
    assert_int_equal(pi.height, 16);
    pi.format = PNG_FORMAT_RGB;
    static uint8_t px[16 * 32 * 3];
    assert_true(png_image_finish_read(&pi, NULL, px, 0, NULL));
    /* the same graph's image on torch, mapped here */
    struct tr_sd_config c = *preset("tiny");
    c.num_inference_steps = 2;
    struct tr_graph *g = tr_test_model_build(M, &c, TR_TASK_GENERATE, TR_DTYPE_F32, 2, 16);
    struct tr_weights *w = NULL;
    struct tr_error e = {0};
    if (tr_weights_load(g, PARTS, &w, &e)) fail_msg("%s", e.msg);
    struct tr_tensor in[2], out[2];
    struct tr_build_opts o = {.task = TR_TASK_GENERATE, .dtype = TR_DTYPE_F32, .batch = 2, .seq_len = 16};
    tr_test_input_tensors(g, 2, in);
    assert_int_equal(M->make_inputs(&c, &o, 1234, 2, in, &e), TR_OK); /* the INI's default seed */
    tr_test_run_backend(&tr_test_backends[0], NULL, g, in, 1, out, NULL);
    int differ = 0, distinct = 0;
    for (int64_t b = 0; b < 2; b++)
        for (int64_t y = 0; y < 16; y++)
            for (int64_t x = 0; x < 16; x++)
                for (int64_t ch = 0; ch < 3; ch++) {
                    uint8_t want = tr_image_pixel(tr_tensor_get_f64(&out[0], ((b * 16 + y) * 16 + x) * 3 + ch));
                    uint8_t got = px[(y * 32 + b * 16 + x) * 3 + ch];
                    differ += abs((int)want - (int)got) > 1; /* a last-bit difference may round apart */
                    distinct += got != px[0];
                }
    assert_int_equal(differ, 0);
    assert_true(distinct > 100);
    assert_true(tr_image_pixel(-1.0) == 0 && tr_image_pixel(1.0) == 255 && tr_image_pixel(0.0) == 128 &&
                tr_image_pixel(7.0) == 255 && tr_image_pixel(NAN) == 0);
    tr_test_tensors_free(2, in);
    tr_test_tensors_free(2, out);
    tr_weights_free(w);
    tr_graph_free(g);
}

/* [generate] prompt: the text through the tokenizer (the toy CLIP vocabulary of
 * tests/fixtures/clip_tokenizer) into the positive half of input_ids, negative_prompt
 * ("" by default) into the other; a prompt without a tokenizer is refused. */
/* A PNG read back as written (v = 2·p/255 − 1 for every 8-bit p, into every image of the
 * batch); a size other than the tensor's, or no PNG, refused with the sizes. */
static void test_read_png(void **state) {
    (void)state;
    char png[512];
    snprintf(png, sizeof png, "%s/in.png", tr_test_dir);
    static float src[1 * 3 * 5 * 3], dst[2 * 3 * 5 * 3];
    for (int i = 0; i < 45; i++) src[i] = 2.0f * ((float)((i * 37 + 11) % 256) / 255.0f) - 1.0f;
    struct tr_tensor in, out;
    struct tr_error e = {0};
    assert_int_equal(tr_tensor_make(&in, src, TR_DTYPE_F32, 4, (int64_t[]){1, 3, 5, 3}, &e), TR_OK);
    assert_int_equal(tr_image_write_png(png, &in, &e), TR_OK);
    for (int i = 0; i < 90; i++) dst[i] = NAN;
    assert_int_equal(tr_tensor_make(&out, dst, TR_DTYPE_F32, 4, (int64_t[]){2, 3, 5, 3}, &e), TR_OK);
    if (tr_image_read_png(png, &out, &e)) fail_msg("%s", e.msg);
    for (int i = 0; i < 90; i++) assert_true(dst[i] == src[i % 45]);
    assert_int_equal(tr_tensor_make(&out, dst, TR_DTYPE_F32, 4, (int64_t[]){1, 5, 3, 3}, &e), TR_OK);
    assert_int_not_equal(tr_image_read_png(png, &out, &e), TR_OK);
    tr_assert_msg_has(&e, "is 5x3 (width x height), expected 3x5: resize it first");
    tr_test_dir_file("text.png", "not a picture\n", png, sizeof png);
    assert_int_not_equal(tr_image_read_png(png, &out, &e), TR_OK);
    tr_assert_msg_has(&e, "text.png': cannot read it as a PNG");
}

/* Image to image: what it refuses, by key; and the inputs it adds. */
static void test_img2img_config(void **state) {
    (void)state;
    static const struct {
        const char *task, *lines, *want;
    } bad[] = {{"predict", "[model]\nstrength = 0.5", "strength = 0.5 (image to image) runs in task generate"},
               {"generate", "[model]\nstrength = 0.1\nnum_inference_steps = 5",
                "strength = 0.1 over num_inference_steps = 5 runs no step"},
               {"generate", "[model]\nstrength = 1.5", "strength"},
               {"generate", "[model]\nstrength = 0.5\n[generate]\ninit_image = nowhere.png",
                "[generate] init_image: image '"},
               {"generate", "[generate]\ninit_image = png_zoo/rgb8.png",
                "init_image is read by image to image, which needs [model] strength"},
               {"generate", "[model]\nstrength = 0\n[generate]\ninit_image = png_zoo/rgb8.png",
                "init_image is read by image to image, which needs [model] strength"},
               {"generate", "[generate]\nmask_image = png_zoo/rgb8.png", "[generate] mask_image needs init_image"},
               {"generate", "[generate]\nimage = out.jpg", "t.ini:10: [generate] image = out.jpg: expected a .png file"},
               {"generate", "[generate]\nimage = /nowhere/x/out.png", "the directory '/nowhere/x' is not there"},
               {"generate", "[generate]\nprompt = a cat\nprompts = p.txt", "give one of prompt and prompts"},
               {"generate", "[generate]\nprompts = nowhere.txt\ntokenizer = tests/fixtures/clip_tokenizer",
                "[generate] prompts: cannot open 'nowhere.txt'"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char ini[512];
        snprintf(ini, sizeof ini, "[run]\nmodel = stable_diffusion\npreset = tiny\ntask = %s\nbackends = torch\n"
                 "steps = 1\nwarmup = 1\nweights = %s\n%s\n", bad[i].task, PARTS, bad[i].lines);
        struct tr_config cfg;
        struct tr_error e = {0};
        int rc = tr_config_load_string(ini, "t.ini", &cfg, &e);
        if (!rc) {
            struct tr_bench_report rep;
            rc = tr_bench_run(&cfg, tr_builtin_models, &rep, &e);
        }
        assert_int_not_equal(rc, TR_OK);
        tr_assert_msg_has(&e, bad[i].want);
        print_message("refused: %s\n", e.msg);
    }
    /* an inpainting UNet: generate only */
    char ini[512];
    snprintf(ini, sizeof ini, "[run]\nmodel = stable_diffusion\npreset = tiny\ntask = predict\n[model]\n"
             "hf_config = tests/fixtures/sd_tiny_inpaint\n");
    struct tr_config cfg;
    struct tr_error e = {0};
    struct tr_task_graph tg;
    assert_int_equal(tr_config_load_string(ini, "t.ini", &cfg, &e), TR_OK);
    assert_int_not_equal(tr_task_graph_build(&cfg, tr_builtin_models, &tg, &e), TR_OK);
    tr_assert_msg_has(&e, "takes 9 channels, an inpainting UNet's");
    struct tr_sd_config c = *preset("tiny");
    c.num_inference_steps = 4, c.strength = 0.5;
    struct tr_graph *g = tr_test_model_build(M, &c, TR_TASK_GENERATE, TR_DTYPE_F32, 2, 16);
    assert_int_equal(tr_graph_n_inputs(g), 4);
    static const char *const names[] = {"input_ids", "latents", "image", "image_noise"};
    for (int i = 0; i < 4; i++) assert_string_equal(tr_node_name(g, tr_graph_input(g, i)), names[i]);
    tr_graph_free(g);
}

/* The prompt's length is the tokenizer's model_max_length where its tokenizer_config.json
 * gives one (StableDiffusionPipeline pads and cuts to it), not the text encoder's
 * positions; one past those positions is refused, as the pipeline refuses it. */
static void test_prompt_length_of_tokenizer(void **state) {
    (void)state;
    char dir[600], path[700], ini[1024];
    snprintf(dir, sizeof dir, "%s/tok12", tr_test_dir);
    assert_int_equal(mkdir(dir, 0700), 0);
    static const char *const files[] = {"vocab.json", "merges.txt"};
    for (int k = 0; k < 2; k++) {
        char src[700];
        snprintf(src, sizeof src, "%s/tests/fixtures/clip_tokenizer/%s", TR_SOURCE_DIR, files[k]);
        snprintf(path, sizeof path, "%s/%s", dir, files[k]);
        assert_int_equal(symlink(src, path), 0);
    }
    static const struct {
        int max;
        int ok;
    } cases[] = {{12, 1}, {77, 0}};
    for (size_t i = 0; i < 2; i++) {
        char json[96];
        snprintf(json, sizeof json, "{\"model_max_length\": %d}", cases[i].max);
        tr_test_dir_file("tok12/tokenizer_config.json", json, path, sizeof path);
        snprintf(ini, sizeof ini, "[run]\nmodel = stable_diffusion\npreset = tiny\ntask = generate\nbatch = 1\n"
                 "[model]\nnum_inference_steps = 2\n[generate]\nprompt = a cat\ntokenizer = %s\n", dir);
        struct tr_config cfg;
        struct tr_error e = {0};
        struct tr_task_graph tg;
        assert_int_equal(tr_config_load_string(ini, "t.ini", &cfg, &e), TR_OK);
        const int rc = tr_task_graph_build(&cfg, tr_builtin_models, &tg, &e);
        if (cases[i].ok) {
            if (rc) fail_msg("%s", e.msg);
            assert_int_equal(tg.opts.seq_len, 12);
            assert_int_equal(tr_node_shape(tg.graph, tr_graph_input(tg.graph, 0))[1], 12);
            tr_task_graph_free(&tg);
        } else {
            assert_int_not_equal(rc, TR_OK);
            tr_assert_msg_has(&e, "the tokenizer's model_max_length 77");
        }
    }
}

static void test_generate_prompt(void **state) {
    char ini[1024];
    snprintf(ini, sizeof ini,
             "[run]\nmodel = stable_diffusion\npreset = tiny\ntask = generate\nbatch = 2\nseq_len = 16\n[model]\n"
             "num_inference_steps = 2\n[generate]\nprompt = A photo of an astronaut\ntokenizer = %s\n",
             TR_SOURCE_DIR "/tests/fixtures/clip_tokenizer");
    struct tr_task_graph tg;
    tr_test_task_graph(ini, "p.ini", tr_builtin_models, &tg);
    struct tr_tensor in[2];
    tr_test_input_tensors(tg.graph, 2, in);
    struct tr_error e = {0};
    assert_int_equal(tg.model->make_inputs(tg.config, &tg.opts, 1, 2, in, &e), TR_OK);
    /* transformers' CLIPTokenizer on that vocabulary (make_clip_tokenizer_fixture.py) */
    const int32_t pos[16] = {536, 320, 520, 516, 64, 333, 522, 524, 525, 339, 537, 537, 537, 537, 537, 537};
    const int32_t *ids = in[0].data;
    for (int b = 0; b < 4; b++)
        for (int t = 0; t < 16; t++)
            assert_int_equal(ids[b * 16 + t], b >= 2 ? pos[t] : t == 0 ? 536 : 537);
    tr_test_tensors_free(2, in);
    tr_task_graph_free(&tg);
    struct tr_config cfg;
    assert_int_equal(tr_config_load_string("[run]\nmodel = stable_diffusion\npreset = tiny\ntask = generate\n"
                                           "[generate]\nprompt = a cat\n", "q.ini", &cfg, &e), TR_OK);
    assert_int_not_equal(tr_task_graph_build(&cfg, tr_builtin_models, &tg, &e), TR_OK);
    tr_assert_msg_has(&e, "q.ini:6: [generate] prompt needs a tokenizer");
}

/* Python's json writes inf and nan as Infinity and NaN, and diffusers' save_config passes
 * them through (DPMSolverMultistepScheduler's lambda_min_clipped = -Infinity): such a file
 * reads, the words inside strings untouched; an Infinity where a bounded number belongs
 * is refused by its key. */
static void test_python_json_literals(void **state) {
    struct tr_sd_config c;
    struct tr_error e = {0};
    char path[512];
    tr_test_dir_file("scheduler_config.json",
                     "{\"_class_name\": \"DDIMScheduler\", \"lambda_min_clipped\": -Infinity, \"x\": [Infinity,NaN],"
                     " \"note\": \"NaN, \\\"Infinity\\\"\", \"y\" :\tNaN, \"timestep_spacing\": \"trailing\"}",
                     path, sizeof path);
    if (tr_test_resolve_hf(M, path, "", &c, &e)) fail_msg("%s", e.msg);
    assert_string_equal(c.timestep_spacing, "trailing");
    tr_test_dir_file("scheduler_config.json", "{\"clip_sample_range\": Infinity}", path, sizeof path);
    assert_int_not_equal(tr_test_resolve_hf(M, path, "", &c, &e), TR_OK);
    tr_assert_msg_has(&e, "\"clip_sample_range\" is not a number");
    /* NaN where a number is read: refused, not the class's default (transformers would
     * compute with it) */
    tr_test_dir_file("scheduler_config.json", "{\"beta_end\": NaN}", path, sizeof path);
    assert_int_not_equal(tr_test_resolve_hf(M, path, "", &c, &e), TR_OK);
    tr_assert_msg_has(&e, "\"beta_end\"");
    /* a key given twice: the last, as Python's json (and so diffusers) reads it */
    tr_test_dir_file("scheduler_config.json",
                     "{\"timestep_spacing\": \"leading\", \"x\": {\"a\": 1, \"a\": 2}, \"timestep_spacing\": \"trailing\"}",
                     path, sizeof path);
    if (tr_test_resolve_hf(M, path, "", &c, &e)) fail_msg("%s", e.msg);
    assert_string_equal(c.timestep_spacing, "trailing");
}

/* A scheduler file of a class trident does not run (UniPCMultistepScheduler) is refused by
 * that name, not run as DDIM without a word; a [model] scheduler line after hf_config runs
 * one of those on its schedule, as X.from_config(its config) would (DDIM's clamp default
 * ignored by the others). An EulerAncestralDiscreteScheduler's or LMSDiscreteScheduler's
 * file is run as that, with its class's defaults (no clamp, linspace). */
static void test_other_scheduler_class(void **state) {
    struct tr_sd_config c;
    struct tr_error e = {0};
    char path[512];
    const struct tr_unet_config *u;
    struct tr_ddim s;
    tr_test_dir_file("scheduler_config.json",
                     "{\"_class_name\": \"EulerAncestralDiscreteScheduler\", \"beta_schedule\": \"scaled_linear\", "
                     "\"beta_start\": 0.00085, \"beta_end\": 0.012, \"timestep_spacing\": \"trailing\"}",
                     path, sizeof path);
    if (tr_test_resolve_hf(M, path, "", &c, &e) || tr_sd_resolve(&c, &u, &s, &e)) fail_msg("%s", e.msg);
    assert_string_equal(c.scheduler, "euler_ancestral");
    assert_false(c.clip_sample);
    tr_ddim_free(&s);
    tr_test_dir_file("scheduler_config.json", "{\"_class_name\": \"LMSDiscreteScheduler\", \"use_karras_sigmas\": true}",
                     path, sizeof path);
    if (tr_test_resolve_hf(M, path, "", &c, &e) || tr_sd_resolve(&c, &u, &s, &e)) fail_msg("%s", e.msg);
    assert_string_equal(c.scheduler, "lms");
    assert_string_equal(c.timestep_spacing, "linspace"); /* LMSDiscreteScheduler's default */
    assert_true(c.use_karras_sigmas);
    tr_ddim_free(&s);
    /* a DDPMScheduler's file: its defaults (the clamp, leading), its variance */
    tr_test_dir_file("scheduler_config.json", "{\"_class_name\": \"DDPMScheduler\", \"variance_type\": \"fixed_large\"}",
                     path, sizeof path);
    if (tr_test_resolve_hf(M, path, "", &c, &e) || tr_sd_resolve(&c, &u, &s, &e)) fail_msg("%s", e.msg);
    assert_string_equal(c.scheduler, "ddpm");
    assert_true(c.clip_sample);
    assert_true(c.ddpm_large);
    assert_string_equal(c.timestep_spacing, "leading");
    tr_ddim_free(&s);
    tr_test_dir_file("scheduler_config.json", "{\"_class_name\": \"DDPMScheduler\", \"variance_type\": \"learned\"}",
                     path, sizeof path);
    assert_int_not_equal(tr_test_resolve_hf(M, path, "", &c, &e), TR_OK);
    tr_assert_msg_has(&e, "\"variance_type\" = learned: fixed_small, fixed_small_log and fixed_large are provided");
    /* DPMSolverMultistepScheduler's algorithms: ++ and its SDE read, deis read as ++ (as
     * diffusers reads it), the non-++ ones refused */
    static const struct {
        const char *alg, *want;
    } algs[] = {{"sde-dpmsolver++", "sde-dpmsolver++"}, {"deis", "dpmsolver++"}, {"dpmsolver++", "dpmsolver++"},
                {"sde-dpmsolver", NULL}, {"dpmsolver", NULL}};
    for (size_t i = 0; i < sizeof algs / sizeof algs[0]; i++) {
        char json[160];
        snprintf(json, sizeof json, "{\"_class_name\": \"DPMSolverMultistepScheduler\", \"algorithm_type\": \"%s\"}",
                 algs[i].alg);
        tr_test_dir_file("scheduler_config.json", json, path, sizeof path);
        const int rc = tr_test_resolve_hf(M, path, "", &c, &e);
        if (!algs[i].want) {
            assert_int_not_equal(rc, TR_OK);
            tr_assert_msg_has(&e, "\"dpmsolver++\" and \"sde-dpmsolver++\" are provided");
            continue;
        }
        if (rc || tr_sd_resolve(&c, &u, &s, &e)) fail_msg("%s: %s", algs[i].alg, e.msg);
        assert_string_equal(c.algorithm_type, algs[i].want);
        tr_ddim_free(&s);
    }
    /* UniPCMultistepScheduler: its defaults, its solver types as diffusers reads them
     * (midpoint, heun and logrho as bh2), disable_corrector's list; the noise-prediction
     * form, another predictor and the other sigma schedules refused by key */
    static const struct {
        const char *keys, *type, *disabled, *refused;
    } uni[] = {{"", "bh2", "", NULL},
               {", \"solver_type\": \"bh1\", \"disable_corrector\": [0, 3]", "bh1", "0,3", NULL},
               {", \"solver_type\": \"logrho\"", "bh2", "", NULL},
               {", \"solver_type\": \"midpoint\"", "bh2", "", NULL},
               {", \"predict_x0\": false", NULL, NULL, "\"predict_x0\" = false: only true is provided"},
               {", \"solver_p\": {}", NULL, NULL, "\"solver_p\" = {}: only null is provided"},
               {", \"use_flow_sigmas\": true", NULL, NULL, "\"use_flow_sigmas\" = true: only false is provided"}};
    for (size_t i = 0; i < sizeof uni / sizeof uni[0]; i++) {
        char json[200];
        snprintf(json, sizeof json, "{\"_class_name\": \"UniPCMultistepScheduler\"%s}", uni[i].keys);
        tr_test_dir_file("scheduler_config.json", json, path, sizeof path);
        const int rc = tr_test_resolve_hf(M, path, "", &c, &e);
        if (uni[i].refused) {
            assert_int_not_equal(rc, TR_OK);
            tr_assert_msg_has(&e, uni[i].refused);
            continue;
        }
        if (rc || tr_sd_resolve(&c, &u, &s, &e)) fail_msg("%s: %s", json, e.msg);
        assert_string_equal(c.scheduler, "unipc");
        assert_string_equal(c.solver_type, uni[i].type);
        assert_string_equal(c.disable_corrector, uni[i].disabled);
        assert_string_equal(c.timestep_spacing, "linspace");
        assert_false(c.clip_sample);
        assert_int_equal(c.solver_order, 2);
        assert_true(c.lower_order_final);
        tr_ddim_free(&s);
    }
    tr_test_dir_file("scheduler_config.json",
                     "{\"_class_name\": \"DEISMultistepScheduler\", \"beta_schedule\": \"scaled_linear\", "
                     "\"beta_start\": 0.00085, \"beta_end\": 0.012, \"timestep_spacing\": \"trailing\"}",
                     path, sizeof path);
    assert_int_equal(tr_test_resolve_hf(M, path, "", &c, &e), TR_OK);
    assert_int_not_equal(tr_sd_resolve(&c, &u, &s, &e), TR_OK);
    tr_assert_msg_has(&e, "names DEISMultistepScheduler, which trident does not run");
    tr_assert_msg_has(&e, "scheduler = ddim, ddpm, pndm, euler, euler_ancestral, lms, heun, dpm or unipc after "
                      "hf_config");
    static const char *const kinds[] = {"scheduler = euler\n", "scheduler = heun\n", "scheduler = dpm\n",
                                        "scheduler = ddim\n", "scheduler = lms\n", "scheduler = unipc\n"};
    for (int i = 0; i < 6; i++) {
        if (tr_test_resolve_hf(M, path, kinds[i], &c, &e)) fail_msg("%s", e.msg);
        if (tr_sd_resolve(&c, &u, &s, &e)) fail_msg("%s: %s", kinds[i], e.msg);
        assert_string_equal(c.timestep_spacing, "trailing");
        assert_true(c.clip_sample); /* DDIMScheduler's default: DDIM clamps, the others ignore it */
        tr_ddim_free(&s);
    }
}

/* The published config.json of each part over the tiny preset is the sd-v1-4 preset; a
 * [model] key after it still wins; what SD 1.x does not have is refused by its key. */
static void test_hf_configs(void **state) {
    static const struct {
        const struct tr_model_desc *m;
        const char *file;
    } parts[] = {{&tr_model_unet_2d_condition, "sd-v1-4-unet.json"},
                 {&tr_model_autoencoder_kl, "sd-v1-4-vae.json"},
                 {&tr_model_clip_text, "sd-v1-4-text_encoder.json"},
                 /* the same configs as diffusers 0.42 and transformers 5 save them today: every key */
                 {&tr_model_unet_2d_condition, "sd-v1-4-unet-saved.json"},
                 {&tr_model_autoencoder_kl, "sd-v1-4-vae-saved.json"},
                 {&tr_model_clip_text, "sd-v1-4-text_encoder-saved.json"}};
    struct tr_error e = {0};
    struct tr_config cfg;
    char path[512], ini[512];
    static char got[4096];
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        const struct tr_model_desc *m = parts[i].m;
        assert_true(m->config_size <= sizeof got);
        snprintf(path, sizeof path, "tests/fixtures/hf/%s", parts[i].file);
        if (tr_test_resolve_hf(m, path, "", got, &e)) fail_msg("%s: %s", m->name, e.msg);
        tr_test_expect_same_config(m, got, tr_test_preset(m, "sd-v1-4"), parts[i].file, NULL);
        print_message("%s: %s gives preset sd-v1-4 (%d keys)\n", m->name, parts[i].file, m->n_keys);
    }
    assert_int_equal(tr_config_load_string("[model]\nhf_config = tests/fixtures/hf/sd-v1-4-unet.json\nsample_size = 32\n",
                                           "t.ini", &cfg, &e), TR_OK);
    const struct tr_unet_config *u = (const void *)got;
    assert_int_equal(tr_model_resolve(&tr_model_unet_2d_condition, "tiny", &cfg, got, &e), TR_OK);
    assert_true(u->sample_size == 32 && u->cross_attention_dim == 768);
    static const struct {
        const char *line, *want;
    } bad[] = {{"hf_config = tests/fixtures/hf/sd-v1-4-vae.json", "\"_class_name\" = AutoencoderKL: only"},
               {"hf_config = tests/fixtures/hf/none.json", "cannot open 'tests/fixtures/hf/none.json'"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(ini, sizeof ini, "[model]\n%s\n", bad[i].line);
        assert_int_equal(tr_config_load_string(ini, "t.ini", &cfg, &e), TR_OK);
        assert_int_not_equal(tr_model_resolve(&tr_model_unet_2d_condition, "tiny", &cfg, got, &e), TR_OK);
        tr_assert_msg_has(&e, "t.ini:2: [model] hf_config = ");
        tr_assert_msg_has(&e, bad[i].want);
        print_message("refused: %s\n", e.msg);
    }
}

TR_TEST_MAIN(tr_test_dir_setup, tr_test_dir_teardown, test_prompt_length_of_tokenizer, test_scheduler_matches_diffusers, test_scheduler_errors,
             test_scheduler_configs, test_predict_clamped, test_pipeline_config,
             test_config_errors, test_make_inputs, test_hf_configs, test_generate_matches_pipeline,
             test_generate_writes_png, test_read_png, test_img2img_config, test_generate_prompt, test_python_json_literals, test_other_scheduler_class, test_step_matches_diffusers_f32, test_step_matches_diffusers_bf16,
             test_step_matches_diffusers_f16)
