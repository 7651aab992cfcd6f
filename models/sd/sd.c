/* The Stable Diffusion denoising step (sd.h). */
#include <stddef.h>
#include <string.h>
#include "layers.h"
#include "models.h"
#include "sd.h"
#include "trident/rng.h"
#include "unet/unet.h"

#define KEY_(field, type, lo, hi, doc) {#field, type, offsetof(struct tr_sd_config, field), lo, hi, doc}

static const struct tr_model_key sd_keys[] = {
    KEY_(unet, TR_KEY_STRING, 0, 0, "the UNet: a preset of unet_2d_condition (tiny, small, sd-v1-4)"),
    KEY_(num_inference_steps, TR_KEY_INT, 1, 100000, "denoising steps of the schedule"),
    KEY_(step, TR_KEY_INT, 0, 100000, "the step predict runs, 0 (the first, noisiest) to num_inference_steps - 1"),
    KEY_(guidance_scale, TR_KEY_FLOAT, 0, 1e6, "classifier-free guidance: eps_u + scale * (eps_c - eps_u)"),
    KEY_(num_train_timesteps, TR_KEY_INT, 2, 1e7, "the scheduler's training timesteps"),
    KEY_(beta_start, TR_KEY_FLOAT, 0, 1, "the noise schedule's first beta (scaled_linear)"),
    KEY_(beta_end, TR_KEY_FLOAT, 0, 1, "the noise schedule's last beta"),
    KEY_(steps_offset, TR_KEY_INT, 0, 1e6, "added to every timestep (1 in SD)"),
    KEY_(set_alpha_to_one, TR_KEY_BOOL, 0, 0, "the last step's alpha_prev is 1 rather than alpha_cumprod[0]"),
};

/* CompVis/stable-diffusion-v1-4's scheduler_config.json, keras-cv's guidance and steps. */
#define SD_COMMON .num_inference_steps = 50, .guidance_scale = 7.5, .num_train_timesteps = 1000, \
                  .beta_start = 0.00085, .beta_end = 0.012, .steps_offset = 1
static const struct tr_sd_config sd_tiny = {SD_COMMON, .unet = "tiny"};
static const struct tr_sd_config sd_small = {SD_COMMON, .unet = "small"};
static const struct tr_sd_config sd_v14 = {SD_COMMON, .unet = "sd-v1-4"};

static const struct tr_model_preset sd_presets[] = {
    {"tiny", &sd_tiny, "unet_2d_condition tiny, 8x8 latents, 50-step DDIM, guidance 7.5 (tests)"},
    {"small", &sd_small, "unet_2d_condition small, 32x32 latents (256x256 images), 50-step DDIM (CPU benchmarks)"},
    {"sd-v1-4", &sd_v14, "CompVis/stable-diffusion-v1-4's unet, 64x64 latents (512x512 images), 50-step DDIM, "
                         "guidance 7.5 (the benchmark's row: batch 13, 77 text tokens)"},
};

int tr_sd_resolve(const struct tr_sd_config *c, const struct tr_unet_config **unet, struct tr_ddim *sched,
                  struct tr_error *err) {
    *unet = NULL;
    for (int i = 0; i < tr_model_unet_2d_condition.n_presets; i++)
        if (strncmp(tr_model_unet_2d_condition.presets[i].name, c->unet, sizeof c->unet) == 0)
            *unet = tr_model_unet_2d_condition.presets[i].config;
    if (!*unet)
        return tr_error_set(err, TR_ERR_NOT_FOUND, "stable_diffusion: unet = '%.*s': not a preset of "
                            "unet_2d_condition (tiny, small, sd-v1-4)", (int)sizeof c->unet - 1, c->unet);
    if (c->step >= c->num_inference_steps)
        return tr_error_set(err, TR_ERR_INVALID, "stable_diffusion: step = %lld, expected 0 to num_inference_steps - 1 "
                            "= %lld", (long long)c->step, (long long)(c->num_inference_steps - 1));
    const struct tr_ddim_config dc = {c->num_train_timesteps, c->beta_start, c->beta_end, c->steps_offset,
                                      c->set_alpha_to_one};
    int rc = tr_ddim_init(sched, &dc, c->num_inference_steps, err);
    if (rc) return tr_error_prefix(err, "stable_diffusion");
    return TR_OK;
}

static int sd_check(const struct tr_sd_config *c, const struct tr_build_opts *o, const struct tr_unet_config **u,
                    struct tr_ddim *s, struct tr_error *err) {
    int rc = tr_sd_resolve(c, u, s, err);
    if (rc) return rc;
    if (o->task != TR_TASK_PREDICT) {
        tr_ddim_free(s);
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "stable_diffusion: task '%s' is not provided (stable_diffusion "
                            "offers: predict; fit trains the VAE encoder: model = autoencoder_kl)", tr_task_name(o->task));
    }
    return TR_OK;
}

static int sd_build(const void *config, const struct tr_build_opts *o, struct tr_graph *g, struct tr_error *err) {
    const struct tr_sd_config *c = config;
    const struct tr_unet_config *u;
    struct tr_ddim sched;
    int rc = sd_check(c, o, &u, &sched, err);
    if (rc) return rc;
    tr_ddim_free(&sched);
    const enum tr_dtype dt = o->dtype;
    const int64_t B = o->batch, S = u->sample_size, B2 = 2 * B;
    const int64_t lat[4] = {B, S, S, u->in_channels}, one[1] = {1}, two[1] = {2}, b2[1] = {B2},
                  ts[3] = {B2, o->seq_len, u->cross_attention_dim};
    int x = tr_input(g, "latents", dt, 4, lat);
    int t = tr_input(g, "timestep", TR_DTYPE_F32, 1, one);
    int text = tr_input(g, "encoder_hidden_states", dt, 3, ts);
    int coeffs = tr_input(g, "ddim_coeffs", TR_DTYPE_F32, 1, two);
    const int pair[2] = {x, x};
    const struct tr_build_opts uo = {TR_TASK_PREDICT, dt, B2, o->seq_len};
    int eps;
    rc = tr_unet_graph(u, &uo, g, tr_concat(g, 2, pair, 0), tr_broadcast(g, t, 1, b2), text, &eps, err);
    if (rc) return tr_error_prefix(err, "stable_diffusion");
    int eu = tr_slice(g, eps, 0, 0, B, 1), ec = tr_slice(g, eps, 0, B, B2, 1);
    int guided = tr_add(g, eu, tr_scale(g, tr_sub(g, ec, eu), (float)c->guidance_scale, 0.0f));
    tr_graph_set_name(g, guided, "guidance");
    /* the update in f32: c_x is within 1e-3 of 1 late in the schedule, which bf16 cannot hold */
    int xf = dt == TR_DTYPE_F32 ? x : tr_cast(g, x, TR_DTYPE_F32);
    int ef = dt == TR_DTYPE_F32 ? guided : tr_cast(g, guided, TR_DTYPE_F32);
    int prev = tr_add(g, tr_mul(g, xf, tr_slice(g, coeffs, 0, 0, 1, 1)), tr_mul(g, ef, tr_slice(g, coeffs, 0, 1, 2, 1)));
    if (dt != TR_DTYPE_F32) prev = tr_cast(g, prev, dt);
    tr_graph_set_output(g, prev, "prev_sample");
    tr_graph_set_output(g, guided, "noise_pred");
    rc = tr_graph_status(g, err);
    if (rc) return tr_error_prefix(err, "stable_diffusion");
    return TR_OK;
}

static int sd_make_inputs(const void *config, const struct tr_build_opts *o, uint64_t seed, int n,
                          struct tr_tensor *inputs, struct tr_error *err) {
    const struct tr_sd_config *c = config;
    const struct tr_unet_config *u;
    struct tr_ddim sched;
    int rc = sd_check(c, o, &u, &sched, err);
    if (rc) return rc;
    int64_t t;
    double cx, ce;
    tr_ddim_step(&sched, c->step, &t, &cx, &ce);
    tr_ddim_free(&sched);
    if (n != 4)
        return tr_error_set(err, TR_ERR_INVALID, "stable_diffusion: %d inputs given, expected 4 (latents, timestep, "
                            "encoder_hidden_states, ddim_coeffs)", n);
    const int64_t B = o->batch, S = u->sample_size;
    const int64_t lat[4] = {B, S, S, u->in_channels}, one[1] = {1}, two[1] = {2},
                  ts[3] = {2 * B, o->seq_len, u->cross_attention_dim};
    static const char *const M = "stable_diffusion";
    rc = tr_model_check_input(M, &inputs[0], "latents", o->dtype, 4, lat, err);
    if (!rc) rc = tr_model_check_input(M, &inputs[1], "timestep", TR_DTYPE_F32, 1, one, err);
    if (!rc) rc = tr_model_check_input(M, &inputs[2], "encoder_hidden_states", o->dtype, 3, ts, err);
    if (!rc) rc = tr_model_check_input(M, &inputs[3], "ddim_coeffs", TR_DTYPE_F32, 1, two, err);
    if (rc) return rc;
    static const char *const keys[3] = {"latents", "timestep", "encoder_hidden_states"};
    for (int k = 0; k < 3; k += 2) {
        const uint64_t key = tr_hash_str(keys[k]);
        for (int64_t i = 0; i < tr_tensor_numel(&inputs[k]); i++)
            tr_tensor_set_f64(&inputs[k], i, tr_rng_normal(seed, key, (uint64_t)i));
    }
    tr_tensor_set_f64(&inputs[1], 0, (double)t);
    tr_tensor_set_f64(&inputs[3], 0, cx);
    tr_tensor_set_f64(&inputs[3], 1, ce);
    return TR_OK;
}

const struct tr_model_desc tr_model_stable_diffusion = {
    .name = "stable_diffusion",
    .description = "Stable Diffusion's denoising step: the UNet on 2B, classifier-free guidance, DDIM (NHWC)",
    .config_size = sizeof(struct tr_sd_config),
    TR_MODEL_TABLES(sd_keys, sd_presets),
    .tasks = 1u << TR_TASK_PREDICT,
    .build = sd_build,
    .make_inputs = sd_make_inputs,
};
