/* The Stable Diffusion denoising step (sd.h). */
#include <stddef.h>
#include <string.h>
#include "layers.h"
#include "models.h"
#include "sd.h"
#include "trident/rng.h"
#include "clip/clip.h"
#include "clip/tokenizer.h"
#include "unet/unet.h"
#include "vae/vae.h"

#define KEY_(field, type, lo, hi, doc) {#field, type, offsetof(struct tr_sd_config, field), lo, hi, doc}

static const struct tr_model_key sd_keys[] = {
    KEY_(unet, TR_KEY_STRING, 0, 0, "the UNet: a preset of unet_2d_condition (tiny, small, sd-v1-4)"),
    KEY_(text_encoder, TR_KEY_STRING, 0, 0, "generate's text encoder: a preset of clip_text"),
    KEY_(vae, TR_KEY_STRING, 0, 0, "generate's image decoder: a preset of autoencoder_kl"),
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
static const struct tr_sd_config sd_tiny = {SD_COMMON, .unet = "tiny", .text_encoder = "tiny", .vae = "tiny"};
static const struct tr_sd_config sd_small = {SD_COMMON, .unet = "small", .text_encoder = "small", .vae = "small"};
static const struct tr_sd_config sd_v14 = {SD_COMMON, .unet = "sd-v1-4", .text_encoder = "sd-v1-4", .vae = "sd-v1-4"};

static const struct tr_model_preset sd_presets[] = {
    {"tiny", &sd_tiny, "unet_2d_condition tiny, 8x8 latents, 50-step DDIM, guidance 7.5 (tests)"},
    {"small", &sd_small, "unet_2d_condition small, 32x32 latents (256x256 images), 50-step DDIM (CPU benchmarks)"},
    {"sd-v1-4", &sd_v14, "CompVis/stable-diffusion-v1-4's unet, 64x64 latents (512x512 images), 50-step DDIM, "
                         "guidance 7.5 (the benchmark's row: batch 13, 77 text tokens)"},
};

static const void *find_preset(const struct tr_model_desc *m, const char *name, size_t cap) {
    for (int i = 0; i < m->n_presets; i++)
        if (strncmp(m->presets[i].name, name, cap) == 0) return m->presets[i].config;
    return NULL;
}

static int no_preset(const struct tr_model_desc *m, const char *key, const char *value, size_t cap,
                     struct tr_error *err) {
    return tr_error_set(err, TR_ERR_NOT_FOUND, "stable_diffusion: %s = '%.*s': not a preset of %s (tiny, small, "
                        "sd-v1-4)", key, (int)cap - 1, value, m->name);
}

int tr_sd_resolve(const struct tr_sd_config *c, const struct tr_unet_config **unet, struct tr_ddim *sched,
                  struct tr_error *err) {
    *unet = find_preset(&tr_model_unet_2d_condition, c->unet, sizeof c->unet);
    if (!*unet) return no_preset(&tr_model_unet_2d_condition, "unet", c->unet, sizeof c->unet, err);
    if (c->step >= c->num_inference_steps)
        return tr_error_set(err, TR_ERR_INVALID, "stable_diffusion: step = %lld, expected 0 to num_inference_steps - 1 "
                            "= %lld", (long long)c->step, (long long)(c->num_inference_steps - 1));
    const struct tr_ddim_config dc = {c->num_train_timesteps, c->beta_start, c->beta_end, c->steps_offset,
                                      c->set_alpha_to_one};
    int rc = tr_ddim_init(sched, &dc, c->num_inference_steps, err);
    if (rc) return tr_error_prefix(err, "stable_diffusion");
    return TR_OK;
}

/* generate's text encoder and decoder, and that they fit the UNet. */
static int sd_parts(const struct tr_sd_config *c, const struct tr_unet_config *u,
                    const struct tr_clip_text_config **clip, const struct tr_vae_config **vae, struct tr_error *err) {
    *clip = find_preset(&tr_model_clip_text, c->text_encoder, sizeof c->text_encoder);
    if (!*clip) return no_preset(&tr_model_clip_text, "text_encoder", c->text_encoder, sizeof c->text_encoder, err);
    *vae = find_preset(&tr_model_autoencoder_kl, c->vae, sizeof c->vae);
    if (!*vae) return no_preset(&tr_model_autoencoder_kl, "vae", c->vae, sizeof c->vae, err);
    if ((*clip)->hidden_size != u->cross_attention_dim)
        return tr_error_set(err, TR_ERR_INVALID, "stable_diffusion: text_encoder %s is %lld wide, unet %s attends to "
                            "%lld (cross_attention_dim)", c->text_encoder, (long long)(*clip)->hidden_size, c->unet,
                            (long long)u->cross_attention_dim);
    if ((*vae)->latent_channels != u->out_channels || u->in_channels != u->out_channels)
        return tr_error_set(err, TR_ERR_INVALID, "stable_diffusion: vae %s decodes %lld latent channels, unet %s makes "
                            "%lld from %lld", c->vae, (long long)(*vae)->latent_channels, c->unet,
                            (long long)u->out_channels, (long long)u->in_channels);
    return TR_OK;
}

static int sd_check(const struct tr_sd_config *c, const struct tr_build_opts *o, const struct tr_unet_config **u,
                    struct tr_ddim *s, struct tr_error *err) {
    int rc = tr_sd_resolve(c, u, s, err);
    if (rc) return rc;
    if (o->task != TR_TASK_PREDICT && o->task != TR_TASK_GENERATE) {
        tr_ddim_free(s);
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "stable_diffusion: task '%s' is not provided (stable_diffusion "
                            "offers: predict, generate; fit trains the VAE encoder: model = autoencoder_kl)",
                            tr_task_name(o->task));
    }
    return TR_OK;
}

/* One denoising step on the latents xf, f32 [B,S,S,C], with the text [2B,T,D]: the UNet on
 * the doubled batch (in the graph's dtype), guidance, the DDIM update in f32 (c_x is
 * within 1e-3 of 1 late in the schedule, which bf16 cannot hold; and a run of steps keeps
 * its latents in f32, so bf16 rounds only what the UNet sees). The coefficients are the
 * [1] f32 nodes cx, ce, or, where cx < 0, the constants kx, ke. Returns x_{t-1} in f32;
 * *guided gets the guided noise (the graph's dtype). */
static int denoise(struct tr_graph *g, const struct tr_sd_config *c, const struct tr_unet_config *u,
                   const struct tr_build_opts *o, int xf, int t, int text, int cx, int ce, double kx, double ke,
                   int *guided, struct tr_error *err) {
    const enum tr_dtype dt = o->dtype;
    const int64_t B = o->batch, B2 = 2 * B, b2[1] = {B2};
    const int x = dt == TR_DTYPE_F32 ? xf : tr_cast(g, xf, dt), pair[2] = {x, x};
    const struct tr_build_opts uo = {.task = TR_TASK_PREDICT, .dtype = dt, .batch = B2, .seq_len = o->seq_len};
    int eps;
    int rc = tr_unet_graph(u, &uo, g, tr_concat(g, 2, pair, 0), tr_broadcast(g, t, 1, b2), text, &eps, err);
    if (rc) return -1;
    int eu = tr_slice(g, eps, 0, 0, B, 1), ec = tr_slice(g, eps, 0, B, B2, 1);
    *guided = tr_add(g, eu, tr_scale(g, tr_sub(g, ec, eu), (float)c->guidance_scale, 0.0f));
    tr_graph_set_name(g, *guided, "guidance");
    int ef = dt == TR_DTYPE_F32 ? *guided : tr_cast(g, *guided, TR_DTYPE_F32);
    return cx >= 0 ? tr_add(g, tr_mul(g, xf, cx), tr_mul(g, ef, ce))
                   : tr_add(g, tr_scale(g, xf, (float)kx, 0.0f), tr_scale(g, ef, (float)ke, 0.0f));
}

static int sd_predict(const struct tr_sd_config *c, const struct tr_unet_config *u, const struct tr_build_opts *o,
                      struct tr_graph *g, struct tr_error *err) {
    const enum tr_dtype dt = o->dtype;
    const int64_t B = o->batch, S = u->sample_size;
    const int64_t lat[4] = {B, S, S, u->in_channels}, one[1] = {1}, two[1] = {2},
                  ts[3] = {2 * B, o->seq_len, u->cross_attention_dim};
    int x = tr_input(g, "latents", dt, 4, lat);
    int t = tr_input(g, "timestep", TR_DTYPE_F32, 1, one);
    int text = tr_input(g, "encoder_hidden_states", dt, 3, ts);
    int coeffs = tr_input(g, "ddim_coeffs", TR_DTYPE_F32, 1, two);
    int guided;
    int xf = dt == TR_DTYPE_F32 ? x : tr_cast(g, x, TR_DTYPE_F32);
    int prev = denoise(g, c, u, o, xf, t, text, tr_slice(g, coeffs, 0, 0, 1, 1), tr_slice(g, coeffs, 0, 1, 2, 1), 0, 0,
                       &guided, err);
    if (prev < 0 && err->status) return err->status;
    if (dt != TR_DTYPE_F32) prev = tr_cast(g, prev, dt);
    /* the guided noise (node "guidance") is not an output: guidance multiplies the two
     * halves' difference by 7.5, so in bf16 two backends' last-bit differences in the UNet
     * grow past any tolerance the step's result needs (4e-2 apart where prev_sample is 1e-2) */
    tr_graph_set_output(g, prev, "prev_sample");
    return TR_OK;
}

/* A whole text-to-image run: the text encoder on the 2B prompts, every step of the
 * schedule (each an instance of the UNet, sharing its weights; timesteps and coefficients
 * constants), the latents scaled back and decoded. */
static int sd_generate(const struct tr_sd_config *c, const struct tr_unet_config *u, const struct tr_ddim *s,
                       const struct tr_build_opts *o, struct tr_graph *g, struct tr_error *err) {
    const struct tr_clip_text_config *clip;
    const struct tr_vae_config *vae;
    int rc = sd_parts(c, u, &clip, &vae, err);
    if (rc) return rc;
    const enum tr_dtype dt = o->dtype;
    const int64_t B = o->batch, S = u->sample_size, lat[4] = {B, S, S, u->in_channels}, ids_sh[2] = {2 * B, o->seq_len},
                  one[1] = {1};
    int ids = tr_input(g, "input_ids", TR_DTYPE_I32, 2, ids_sh);
    int x = tr_input(g, "latents", dt, 4, lat);
    if (dt != TR_DTYPE_F32) x = tr_cast(g, x, TR_DTYPE_F32);
    const struct tr_build_opts to = {.task = TR_TASK_PREDICT, .dtype = dt, .batch = 2 * B, .seq_len = o->seq_len};
    int text;
    if ((rc = tr_clip_text_graph(clip, &to, g, ids, &text, err)) != TR_OK) return rc;
    for (int64_t i = 0; i < s->steps; i++) {
        int64_t t;
        double kx, ke;
        tr_ddim_step(s, i, &t, &kx, &ke);
        tr_graph_set_instance(g, (int)i);
        const float tf = (float)t;
        int guided;
        x = denoise(g, c, u, o, x, tr_const(g, "timestep", TR_DTYPE_F32, 1, one, &tf), text, -1, -1, kx, ke, &guided,
                    err);
        if (x < 0 && err->status) return err->status;
    }
    tr_graph_set_instance(g, 0);
    /* the decoder in f32 whatever the dtype, as diffusers' pipeline upcasts the VAE
     * (force_upcast): in bf16 its 30-odd layers alone are 2e-2 off */
    int image;
    const struct tr_build_opts vo = {.task = TR_TASK_PREDICT, .dtype = TR_DTYPE_F32, .batch = B, .seq_len = o->seq_len};
    rc = tr_vae_decode_graph(vae, &vo, g, tr_scale(g, x, (float)(1.0 / vae->scaling_factor), 0.0f), &image, err);
    if (rc) return rc;
    tr_graph_set_output(g, image, "image");
    tr_graph_set_output(g, dt == TR_DTYPE_F32 ? x : tr_cast(g, x, dt), "denoised_latents");
    return TR_OK;
}

static int sd_build(const void *config, const struct tr_build_opts *o, struct tr_graph *g, struct tr_error *err) {
    const struct tr_sd_config *c = config;
    const struct tr_unet_config *u;
    struct tr_ddim sched;
    int rc = sd_check(c, o, &u, &sched, err);
    if (rc) return rc;
    rc = o->task == TR_TASK_GENERATE ? sd_generate(c, u, &sched, o, g, err) : sd_predict(c, u, o, g, err);
    tr_ddim_free(&sched);
    if (!rc) rc = tr_graph_status(g, err);
    if (rc) return tr_error_prefix(err, "stable_diffusion");
    return TR_OK;
}


/* [generate] prompt (rows B..2B) and negative_prompt ("" by default, rows 0..B) through the
 * tokenizer at o->tokenizer, and the initial noise. */
static int prompt_ids(const struct tr_clip_text_config *clip, const struct tr_build_opts *o, int32_t *ids,
                      struct tr_tensor *latents, uint64_t seed, struct tr_error *err) {
    struct tr_clip_tokenizer *tok = NULL;
    int rc = tr_clip_tokenizer_load(o->tokenizer, &tok, err);
    if (rc) return tr_error_prefix(err, "stable_diffusion: [generate] tokenizer");
    const int64_t B = o->batch, T = o->seq_len;
    for (int64_t b = 0; b < 2 * B && !rc; b++)
        rc = tr_clip_tokenize(tok, b < B ? (o->negative_prompt ? o->negative_prompt : "") : o->prompt, ids + b * T,
                              (int)T, err);
    tr_clip_tokenizer_free(tok);
    for (int64_t i = 0; i < 2 * B * T && !rc; i++)
        if (ids[i] < 0 || ids[i] >= clip->vocab_size)
            rc = tr_error_set(err, TR_ERR_INVALID, "stable_diffusion: the tokenizer at '%s' gives id %d, past the text "
                              "encoder's vocabulary of %lld: a tokenizer of another model?", o->tokenizer, (int)ids[i],
                              (long long)clip->vocab_size);
    if (!rc) tr_model_fill_normal(latents, seed, "latents");
    return rc;
}

/* generate: the prompts as CLIP's tokenizer makes them (clip_text's synthetic ones), the
 * first B of them empty (the negative prompt "": start, then end-padding), as diffusers'
 * pipeline batches them; the first latents normal(0, 1) (DDIM's initial noise sigma is 1). */
static int generate_inputs(const struct tr_sd_config *c, const struct tr_unet_config *u, const struct tr_build_opts *o,
                           uint64_t seed, int n, struct tr_tensor *inputs, struct tr_error *err) {
    const struct tr_clip_text_config *clip;
    const struct tr_vae_config *vae;
    int rc = sd_parts(c, u, &clip, &vae, err);
    if (rc) return rc;
    if (n != 2)
        return tr_error_set(err, TR_ERR_INVALID, "stable_diffusion: %d inputs given, expected 2 (input_ids, latents)", n);
    const int64_t B = o->batch, T = o->seq_len, S = u->sample_size, lat[4] = {B, S, S, u->in_channels};
    const struct tr_build_opts to = {.task = TR_TASK_PREDICT, .dtype = o->dtype, .batch = 2 * B, .seq_len = T};
    if ((rc = tr_model_clip_text.make_inputs(clip, &to, seed, 1, &inputs[0], err)) != TR_OK) return rc;
    if ((rc = tr_model_check_input("stable_diffusion", &inputs[1], "latents", o->dtype, 4, lat, err)) != TR_OK)
        return rc;
    int32_t *ids = inputs[0].data;
    if (o->prompt) /* the user's prompt, tokenized as the pipeline tokenizes it */
        return prompt_ids(clip, o, ids, &inputs[1], seed, err);
    for (int64_t i = 0; i < B * T; i++) ids[i] = (int32_t)(clip->vocab_size - (i % T == 0 ? 2 : 1));
    tr_model_fill_normal(&inputs[1], seed, "latents");
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
    if (o->task == TR_TASK_GENERATE) return generate_inputs(c, u, o, seed, n, inputs, err);
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
    tr_model_fill_normal(&inputs[0], seed, "latents");
    tr_model_fill_normal(&inputs[2], seed, "encoder_hidden_states");
    tr_tensor_set_f64(&inputs[1], 0, (double)t);
    tr_tensor_set_f64(&inputs[3], 0, cx);
    tr_tensor_set_f64(&inputs[3], 1, ce);
    return TR_OK;
}

/* The prompt's tokens: the text encoder's max_position_embeddings (77), as the pipeline
 * pads every prompt to it; 0 (core's default) where the preset is unknown, which the
 * build then names. */
static int64_t sd_default_seq_len(const void *config) {
    const struct tr_sd_config *c = config;
    const struct tr_clip_text_config *clip = find_preset(&tr_model_clip_text, c->text_encoder, sizeof c->text_encoder);
    return clip ? clip->max_position_embeddings : 0;
}

const struct tr_model_desc tr_model_stable_diffusion = {
    .name = "stable_diffusion",
    .description = "Stable Diffusion v1: one denoising step (predict: the UNet on 2B, guidance, DDIM) or text to image (generate)",
    .config_size = sizeof(struct tr_sd_config),
    TR_MODEL_TABLES(sd_keys, sd_presets),
    .tasks = 1u << TR_TASK_PREDICT | 1u << TR_TASK_GENERATE,
    .build = sd_build,
    .make_inputs = sd_make_inputs,
    .default_seq_len = sd_default_seq_len,
};
