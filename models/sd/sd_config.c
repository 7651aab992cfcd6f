/* Stable Diffusion's keys and presets, a diffusers pipeline's config files read into them
 * (sd.h), and the schedule they make (tr_sd_resolve). */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <cjson/cJSON.h>
#include "hf_json.h"
#include "models.h"
#include "sd_internal.h"
#include "clip/clip.h"
#include "unet/unet.h"
#include "vae/vae.h"

#define KEY_(field, type, lo, hi, doc) {#field, type, offsetof(struct tr_sd_config, field), lo, hi, doc}

static const struct tr_model_key sd_keys[] = {
    KEY_(unet, TR_KEY_STRING, 0, 0, "the UNet: a preset of unet_2d_condition (tiny, small, sd-v1-4)"),
    KEY_(text_encoder, TR_KEY_STRING, 0, 0, "generate's text encoder: a preset of clip_text"),
    KEY_(vae, TR_KEY_STRING, 0, 0, "generate's image decoder: a preset of autoencoder_kl"),
    KEY_(num_inference_steps, TR_KEY_INT, 1, 100000, "denoising steps of the schedule"),
    KEY_(step, TR_KEY_INT, 0, 100000, "the step predict runs, 0 (the first, noisiest) to num_inference_steps - 1"),
    KEY_(guidance_scale, TR_KEY_FLOAT, 0, 1e6, "classifier-free guidance: eps_u + scale * (eps_c - eps_u); at or "
         "below 1 none, the UNet on the conditional half alone (as diffusers)"),
    KEY_(guidance_rescale, TR_KEY_FLOAT, 0, 1, "the pipeline's guidance_rescale (0: none): the guided output "
         "rescaled to the conditional one's standard deviation, that much (for zero-SNR models)"),
    KEY_(eta, TR_KEY_FLOAT, 0, 1, "ddim, generate: the pipeline's eta (0 deterministic; above, fresh noise each "
         "step from [run] seed, as torch's generator draws it for diffusers)"),
    KEY_(clip_skip, TR_KEY_INT, 0, 1000, "generate: the pipeline's clip_skip (0: none): the prompt's embeddings "
         "from the text encoder's layer num_hidden_layers - clip_skip, then its final layer norm; the negative "
         "prompt's from the last layer, as diffusers' pipelines take them"),
    KEY_(strength, TR_KEY_FLOAT, 0, 1, "generate: image to image from [generate] init_image, as "
         "StableDiffusionImg2ImgPipeline's strength (the last int(steps * strength) steps run on the image's latents "
         "noised to the first of them); 0 (the default): text to image"),
    KEY_(num_train_timesteps, TR_KEY_INT, 2, 1e7, "the scheduler's training timesteps"),
    KEY_(beta_start, TR_KEY_FLOAT, 0, 1, "the noise schedule's first beta (scaled_linear)"),
    KEY_(beta_end, TR_KEY_FLOAT, 0, 1, "the noise schedule's last beta"),
    KEY_(steps_offset, TR_KEY_INT, 0, 1e6, "added to every timestep (1 in SD)"),
    KEY_(set_alpha_to_one, TR_KEY_BOOL, 0, 0, "the last step's alpha_prev is 1 rather than alpha_cumprod[0]"),
    KEY_(beta_schedule, TR_KEY_STRING, 0, 0, "the betas: scaled_linear (SD's), linear or squaredcos_cap_v2"),
    KEY_(timestep_spacing, TR_KEY_STRING, 0, 0, "which timesteps the steps visit: leading (SD's), trailing or linspace"),
    KEY_(prediction_type, TR_KEY_STRING, 0, 0, "what the UNet predicts: epsilon (SD 1's), v_prediction or sample"),
    KEY_(rescale_betas_zero_snr, TR_KEY_BOOL, 0, 0, "rescale the schedule to zero terminal SNR"),
    KEY_(clip_sample, TR_KEY_BOOL, 0, 0, "ddim: clamp the predicted x0 to [-clip_sample_range, clip_sample_range]"),
    KEY_(clip_sample_range, TR_KEY_FLOAT, 0, 1e30, "the clamp's bound"),
    KEY_(scheduler, TR_KEY_STRING, 0, 0, "ddim, ddpm (DDPMScheduler, noise as euler_ancestral's), pndm (diffusers' "
         "PNDMScheduler for SD, PLMS steps), euler (EulerDiscreteScheduler), euler_ancestral "
         "(EulerAncestralDiscreteScheduler, noise from [run] seed as torch's generator draws it), lms "
         "(LMSDiscreteScheduler, order 4), heun (HeunDiscreteScheduler), dpm (DPMSolverMultistepScheduler, "
         "DPM-Solver++) or unipc (UniPCMultistepScheduler); all but ddim: generate only"),
    KEY_(use_karras_sigmas, TR_KEY_BOOL, 0, 0, "euler, lms, heun, dpm, unipc: the sigmas of Karras et al. (rho 7)"),
    KEY_(sigma_min, TR_KEY_FLOAT, 0, 1e30, "euler, heun, dpm, unipc with karras: the smallest sigma; 0: the schedule's "
                                           "(lms: always its schedule's, as LMSDiscreteScheduler has no such key)"),
    KEY_(sigma_max, TR_KEY_FLOAT, 0, 1e30, "euler, heun, dpm, unipc with karras: the largest sigma; 0: the schedule's"),
    KEY_(final_sigmas_type, TR_KEY_STRING, 0, 0, "euler, dpm, unipc: the sigma the last step lands on: zero or sigma_min"),
    KEY_(solver_order, TR_KEY_INT, 1, 3, "dpm: 2 (DPM-Solver++ 2M) or 1; unipc: 1 to 3"),
    KEY_(solver_type, TR_KEY_STRING, 0, 0, "dpm: the second-order step, midpoint or heun; unipc: B(h), bh1 or bh2 "
         "(as diffusers, dpm reads bh1 and bh2 as midpoint, unipc midpoint and heun as bh2)"),
    KEY_(algorithm_type, TR_KEY_STRING, 0, 0, "dpm: dpmsolver++ (DPM++ 2M) or sde-dpmsolver++ (DPM++ 2M SDE: fresh "
         "noise each step from [run] seed, as torch's generator draws it)"),
    KEY_(lower_order_final, TR_KEY_BOOL, 0, 0, "dpm: the last step first order where there are fewer than 15; "
         "unipc: each step's order at most the steps left"),
    KEY_(euler_at_final, TR_KEY_BOOL, 0, 0, "dpm: the last step first order always"),
    KEY_(disable_corrector, TR_KEY_STRING, 0, 0, "unipc: the steps after which the corrector does not run, as "
         "\"0,1\" (none by default)"),
};

/* Stable Diffusion's scheduler_config.json (v1.4's; 2.1's predicts v), keras-cv's guidance and steps. */
#define SD_COMMON(pred) .num_inference_steps = 50, .guidance_scale = 7.5, .num_train_timesteps = 1000, \
                  .beta_start = 0.00085, .beta_end = 0.012, .steps_offset = 1, .beta_schedule = "scaled_linear", \
                  .timestep_spacing = "leading", .prediction_type = pred, .clip_sample_range = 1.0, \
                  .scheduler = "ddim", .final_sigmas_type = "zero", .solver_order = 2, .solver_type = "midpoint", \
                  .algorithm_type = "dpmsolver++", \
                  .lower_order_final = 1
static const struct tr_sd_config sd_tiny = {SD_COMMON("epsilon"), .unet = "tiny", .text_encoder = "tiny", .vae = "tiny"};
static const struct tr_sd_config sd_small = {SD_COMMON("epsilon"), .unet = "small", .text_encoder = "small", .vae = "small"};
static const struct tr_sd_config sd_v14 = {SD_COMMON("epsilon"), .unet = "sd-v1-4", .text_encoder = "sd-v1-4", .vae = "sd-v1-4"};
/* stabilityai/stable-diffusion-2-1: its scheduler_config.json is a DDIMScheduler's with
 * v_prediction; its VAE is SD 1's */
static const struct tr_sd_config sd_v21 = {SD_COMMON("v_prediction"), .unet = "sd-2-1", .text_encoder = "sd-2-1",
                                           .vae = "sd-v1-4"};

static const struct tr_model_preset sd_presets[] = {
    {"tiny", &sd_tiny, "unet_2d_condition tiny, 8x8 latents, 50-step DDIM, guidance 7.5 (tests)"},
    {"small", &sd_small, "unet_2d_condition small, 32x32 latents (256x256 images), 50-step DDIM (CPU benchmarks)"},
    {"sd-v1-4", &sd_v14, "CompVis/stable-diffusion-v1-4's unet, 64x64 latents (512x512 images), 50-step DDIM, "
                         "guidance 7.5 (the benchmark's row: batch 13, 77 text tokens)"},
    {"sd-2-1", &sd_v21, "stabilityai/stable-diffusion-2-1's unet, text_encoder and vae, 96x96 latents (768x768 "
                        "images), 50-step DDIM with v prediction, guidance 7.5"},
};


static const void *find_preset(const struct tr_model_desc *m, const char *name, size_t cap) {
    for (int i = 0; i < m->n_presets; i++)
        if (strncmp(m->presets[i].name, name, cap) == 0) return m->presets[i].config;
    return NULL;
}

/* The three parts: the [model] key naming each (a preset of its model, or the file below
 * once hf_config read it into the config at `hf`; bit 1 << PART_x of hf_parts says so). */
#define NAME_CAP sizeof(((struct tr_sd_config *)0)->unet) /* every part's key: char[64] */
static const struct sd_part {
    const struct tr_model_desc *m;
    const char *key, *file;
    size_t name, hf; /* offsets in tr_sd_config of the key's value and of the config read */
} parts[] = {
    {&tr_model_unet_2d_condition, "unet", "unet/config.json", offsetof(struct tr_sd_config, unet),
     offsetof(struct tr_sd_config, hf_unet)},
    {&tr_model_clip_text, "text_encoder", "text_encoder/config.json", offsetof(struct tr_sd_config, text_encoder),
     offsetof(struct tr_sd_config, hf_text_encoder)},
    {&tr_model_autoencoder_kl, "vae", "vae/config.json", offsetof(struct tr_sd_config, vae),
     offsetof(struct tr_sd_config, hf_vae)},
};

/* Part p's config: the preset its key names, or the config hf_config read; NULL for neither. */
const void *tr_sd_part(const struct tr_sd_config *c, int p) {
    const char *name = (const char *)c + parts[p].name;
    if ((c->hf_parts & 1u << p) && strncmp(name, parts[p].file, NAME_CAP) == 0) return (const char *)c + parts[p].hf;
    return find_preset(parts[p].m, name, NAME_CAP);
}

/* Part p's key names neither a preset nor a part hf_config read. */
int tr_sd_no_part(const struct tr_sd_config *c, int p, struct tr_error *err) {
    const struct tr_model_desc *m = parts[p].m;
    char names[256] = "";
    for (int i = 0; i < m->n_presets; i++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "", m->presets[i].name);
    return tr_error_set(err, TR_ERR_NOT_FOUND, "stable_diffusion: %s = '%.*s': not a preset of %s (%s), nor a part "
                        "[model] hf_config read", parts[p].key, (int)NAME_CAP - 1, (const char *)c + parts[p].name,
                        m->name, names);
}

/* value's index in names (n of them), or an error naming the key and what it can be. */
static int pick(const char *key, const char *value, const char *const *names, int n, int *out, struct tr_error *err) {
    for (int i = 0; i < n; i++)
        if (strcmp(value, names[i]) == 0) return *out = i, TR_OK;
    char list[128] = "";
    for (int i = 0; i < n; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? (i == n - 1 ? " or " : ", ") : "", names[i]);
    return tr_error_set(err, TR_ERR_INVALID, "%s = '%s': expected %s", key, value, list);
}

/* The scheduler keys as ddim.h takes them. */
static int ddim_config(const struct tr_sd_config *c, struct tr_ddim_config *d, struct tr_error *err) {
    static const char *const betas[] = {"scaled_linear", "linear", "squaredcos_cap_v2"},
                      *const spacing[] = {"leading", "trailing", "linspace"},
                      *const prediction[] = {"epsilon", "v_prediction", "sample"};
    int b = 0, sp = 0, p = 0; /* pick() sets them; 0 for -Wmaybe-uninitialized */
    int rc = pick("beta_schedule", c->beta_schedule, betas, 3, &b, err);
    if (!rc) rc = pick("timestep_spacing", c->timestep_spacing, spacing, 3, &sp, err);
    if (!rc) rc = pick("prediction_type", c->prediction_type, prediction, 3, &p, err);
    if (!rc && c->clip_sample && !(c->clip_sample_range > 0))
        rc = tr_error_set(err, TR_ERR_INVALID, "clip_sample_range = %g, expected more than 0",
                          c->clip_sample_range);
    if (rc) return rc;
    /* zero SNR is DDIM's, Euler's and DPM's: PNDMScheduler and HeunDiscreteScheduler have no
     * such key, and their from_config drops it */
    *d = (struct tr_ddim_config){c->num_train_timesteps, c->beta_start, c->beta_end, c->steps_offset,
                                 c->set_alpha_to_one, (enum tr_ddim_betas)b, (enum tr_ddim_spacing)sp,
                                 (enum tr_ddim_prediction)p, c->rescale_betas_zero_snr && !pndm(c) && !heun(c) && !lms(c),
                                 /* the clamp is DDIM's alone: the others' from_config ignores it */
                                 c->clip_sample && (ddim(c) || ddpm(c)) ? c->clip_sample_range : 0.0,
                                 euler(c) || euler_a(c) || dpm(c) || unipc(c), c->eta, ddpm(c) ? 1 + c->ddpm_large : 0};
    return TR_OK;
}

int tr_sd_resolve(const struct tr_sd_config *c, const struct tr_unet_config **unet, struct tr_ddim *sched,
                  struct tr_error *err) {
    *unet = tr_sd_part(c, TR_SD_PART_UNET);
    if (!*unet) return tr_sd_no_part(c, TR_SD_PART_UNET, err);
    if (c->step >= c->num_inference_steps)
        return tr_error_set(err, TR_ERR_INVALID, "stable_diffusion: step = %lld, expected 0 to num_inference_steps - 1 "
                            "= %lld", (long long)c->step, (long long)(c->num_inference_steps - 1));
    struct tr_ddim_config dc;
    static const char *const kinds[] = {"ddim", "ddpm", "pndm", "euler", "euler_ancestral", "lms", "heun", "dpm", "unipc"},
                      *const finals[] = {"zero", "sigma_min"}, *const solvers[] = {"midpoint", "heun", "bh1", "bh2"},
                      *const algorithms[] = {"dpmsolver++", "sde-dpmsolver++"};
    int kind, final, solver, algorithm;
    int rc = pick("scheduler", c->scheduler, kinds, 9, &kind, err);
    if (rc && strstr(c->scheduler, "Scheduler")) /* a scheduler file's class (read_scheduler) */
        rc = tr_error_set(err, TR_ERR_UNSUPPORTED, "the pipeline's model_index.json (else its scheduler_config.json's "
                          "_class_name) names %s, which trident does not run "
                          "(DDIMScheduler, DDPMScheduler, PNDMScheduler, EulerDiscreteScheduler, "
                          "EulerAncestralDiscreteScheduler, LMSDiscreteScheduler, HeunDiscreteScheduler, "
                          "DPMSolverMultistepScheduler, UniPCMultistepScheduler); [model] scheduler = ddim, ddpm, pndm, "
                          "euler, euler_ancestral, lms, heun, dpm or unipc after hf_config runs one of those on its "
                          "schedule",
                          c->scheduler);
    if (!rc) rc = pick("final_sigmas_type", c->final_sigmas_type, finals, 2, &final, err);
    if (!rc) rc = pick("solver_type", c->solver_type, solvers, 4, &solver, err);
    if (!rc) rc = pick("algorithm_type", c->algorithm_type, algorithms, 2, &algorithm, err);
    if (!rc && c->eta > 0 && !ddim(c))
        rc = tr_error_set(err, TR_ERR_INVALID, "eta = %g: eta is DDIM's (the pipeline passes it to DDIMScheduler's "
                          "step alone), and scheduler = %s", c->eta, c->scheduler);
    if (!rc && dpm(c) && c->solver_order > 2)
        rc = tr_error_set(err, TR_ERR_UNSUPPORTED, "solver_order = %lld: DPM-Solver++ of order 1 or 2 is provided",
                          (long long)c->solver_order);
    if (!rc) rc = ddim_config(c, &dc, err);
    if (!rc && (rc = tr_ddim_init(sched, &dc, c->num_inference_steps, err)) != TR_OK)
        tr_error_prefix(err, "scheduler = %s", c->scheduler); /* every sampler's schedule, not DDIM's alone */
    if (rc) return tr_error_prefix(err, "stable_diffusion");
    return TR_OK;
}

struct tr_euler_config tr_sd_euler_config(const struct tr_sd_config *c) {
    return (struct tr_euler_config){c->use_karras_sigmas, c->sigma_min, c->sigma_max,
                                    strcmp(c->final_sigmas_type, "sigma_min") == 0, euler_a(c), sd_begin(c)};
}

struct tr_dpm_config tr_sd_dpm_config(const struct tr_sd_config *c) {
    return (struct tr_dpm_config){(int)c->solver_order, strcmp(c->solver_type, "heun") == 0, dpm_sde(c),
                                  c->lower_order_final,
                                  c->euler_at_final, c->use_karras_sigmas, c->sigma_min, c->sigma_max,
                                  strcmp(c->final_sigmas_type, "sigma_min") == 0, 0, 0, sd_begin(c)};
}

struct tr_unipc_config tr_sd_unipc_config(const struct tr_sd_config *c) {
    return (struct tr_unipc_config){(int)c->solver_order, strcmp(c->solver_type, "bh1") == 0, c->lower_order_final,
                                    c->use_karras_sigmas, c->sigma_min, c->sigma_max,
                                    strcmp(c->final_sigmas_type, "sigma_min") == 0, c->disable_corrector, sd_begin(c)};
}

/* The prompt's tokens: the text encoder's max_position_embeddings (77), as the pipeline
 * pads every prompt to it; 0 (core's default) where the preset is unknown, which the
 * build then names. */
static int64_t sd_default_seq_len(const void *config) {
    const struct tr_sd_config *c = config;
    const struct tr_clip_text_config *clip = tr_sd_part(c, TR_SD_PART_TEXT);
    return clip ? clip->max_position_embeddings : 0;
}

/* Part p of the pipeline, DIR/its file, over the preset its key names (or what an earlier
 * hf_config read); the key then names the file. An absent optional part keeps the preset. */
static int read_part(const char *dir, int p, struct tr_sd_config *c, int required, struct tr_error *err) {
    char path[4096 + 64];
    struct stat sb;
    snprintf(path, sizeof path, "%s/%s", dir, parts[p].file);
    if (stat(path, &sb) != 0)
        return required ? tr_error_set(err, TR_ERR_NOT_FOUND, "'%s': no %s: expected a diffusers pipeline's directory "
                                       "(unet/, text_encoder/, vae/, scheduler/) or its model_index.json", dir,
                                       parts[p].file)
                        : TR_OK;
    const void *base = tr_sd_part(c, p);
    void *hf = (char *)c + parts[p].hf;
    if (!base) return tr_sd_no_part(c, p, err);
    if (base != hf) memcpy(hf, base, parts[p].m->config_size);
    int rc = parts[p].m->read_hf_config(hf, path, err);
    if (rc) return rc;
    snprintf((char *)c + parts[p].name, NAME_CAP, "%s", parts[p].file);
    c->hf_parts |= 1u << p;
    return TR_OK;
}

/* A DDPMScheduler's variance_type: fixed_small (its default) and fixed_small_log give the same
 * σ, fixed_large its own; the learned ones need a model that predicts them. */
static int ddpm_variance(const cJSON *root, const char *path, struct tr_sd_config *c, struct tr_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "variance_type");
    if (!v || cJSON_IsNull(v)) return TR_OK;
    const char *s = cJSON_IsString(v) ? v->valuestring : "(not a string)";
    if (!strcmp(s, "fixed_small") || !strcmp(s, "fixed_small_log") || !strcmp(s, "fixed_large"))
        return c->ddpm_large = !strcmp(s, "fixed_large"), TR_OK;
    return tr_error_set(err, TR_ERR_UNSUPPORTED, "'%s': \"variance_type\" = %s: fixed_small, fixed_small_log and "
                        "fixed_large are provided", path, s);
}

/* What of DPMSolverMultistepScheduler is not provided, by its key: the non-++ solvers
 * (dpmsolver, sde-dpmsolver), the other sigma schedules, a clipped lambda, a learned
 * variance. diffusers itself reads algorithm_type deis as dpmsolver++, and solver_type
 * logrho, bh1 and bh2 as midpoint. */
static int dpm_refusals(cJSON *root, const char *path, struct tr_error *err) {
    const cJSON *alg = cJSON_GetObjectItemCaseSensitive(root, "algorithm_type"),
                *lam = cJSON_GetObjectItemCaseSensitive(root, "lambda_min_clipped");
    cJSON *st = cJSON_GetObjectItemCaseSensitive(root, "solver_type");
    if (alg && !(cJSON_IsString(alg) && (!strcmp(alg->valuestring, "dpmsolver++") || !strcmp(alg->valuestring, "deis") ||
                                         !strcmp(alg->valuestring, "sde-dpmsolver++"))))
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "'%s': \"algorithm_type\" = %s: \"dpmsolver++\" and "
                            "\"sde-dpmsolver++\" are provided", path,
                            cJSON_IsString(alg) ? alg->valuestring : "(not a string)");
    if (alg && !strcmp(alg->valuestring, "deis") && !cJSON_SetValuestring((cJSON *)alg, "dpmsolver++"))
        return tr_error_set(err, TR_ERR_NOMEM, "'%s': out of memory", path);
    if (cJSON_IsString(st) && (!strcmp(st->valuestring, "logrho") || !strcmp(st->valuestring, "bh1") ||
                               !strcmp(st->valuestring, "bh2")) && !cJSON_SetValuestring(st, "midpoint"))
        return tr_error_set(err, TR_ERR_NOMEM, "'%s': out of memory", path);
    if (lam && !cJSON_IsNull(lam) && !(cJSON_IsNumber(lam) && isinf(lam->valuedouble) && lam->valuedouble < 0))
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "'%s': \"lambda_min_clipped\" is set: only -Infinity (none) is "
                            "provided", path);
    static const char *const off[] = {"use_lu_lambdas", "use_exponential_sigmas", "use_beta_sigmas", "use_flow_sigmas",
                                      "use_dynamic_shifting"};
    int rc = TR_OK;
    for (size_t i = 0; !rc && i < sizeof off / sizeof off[0]; i++) rc = tr_hf_json_expect_bool(root, path, off[i], 0, err);
    if (!rc) rc = tr_hf_json_expect_null(root, path, "variance_type", err);
    return rc;
}

/* What of UniPCMultistepScheduler is not provided, by its key: the noise-prediction form
 * (predict_x0 false, whose last step onto σ 0 is NaN in diffusers), another solver as its
 * predictor, the other sigma schedules. diffusers itself reads solver_type midpoint, heun
 * and logrho as bh2. */
static int unipc_refusals(cJSON *root, const char *path, struct tr_error *err) {
    cJSON *st = cJSON_GetObjectItemCaseSensitive(root, "solver_type");
    if (cJSON_IsString(st) && (!strcmp(st->valuestring, "midpoint") || !strcmp(st->valuestring, "heun") ||
                               !strcmp(st->valuestring, "logrho")) && !cJSON_SetValuestring(st, "bh2"))
        return tr_error_set(err, TR_ERR_NOMEM, "'%s': out of memory", path);
    static const char *const off[] = {"use_exponential_sigmas", "use_beta_sigmas", "use_flow_sigmas",
                                      "use_dynamic_shifting"};
    int rc = tr_hf_json_expect_bool(root, path, "predict_x0", 1, err);
    for (size_t i = 0; !rc && i < sizeof off / sizeof off[0]; i++) rc = tr_hf_json_expect_bool(root, path, off[i], 0, err);
    if (!rc) rc = tr_hf_json_expect_null(root, path, "solver_p", err);
    return rc;
}

/* A scheduler_config.json: a PNDMScheduler's runs PNDM (PLMS, pndm.h), as PNDMScheduler
 * reads it; an EulerDiscreteScheduler's Euler (euler.h); a HeunDiscreteScheduler's Heun
 * (heun.h); a DPMSolverMultistepScheduler's DPM-Solver++ (dpm.h); a UniPCMultistepScheduler's
 * UniPC (unipc.h); a DDIMScheduler's, or a
 * file naming no class, DDIM. Another class
 * is named in `scheduler`, which resolving refuses unless a [model] line after hf_config
 * picks one of those to run on its schedule (its keys read as DDIMScheduler.from_config
 * reads them: the betas, the spacing, the prediction that every diffusers scheduler
 * shares). What the file lacks takes that class's defaults. pipeline: the file is a
 * pipeline's (whose constructor rewrites clip_sample and steps_offset). */
static int read_scheduler(const char *path, const char *index_class, int pipeline, struct tr_sd_config *c,
                          struct tr_error *err) {
    cJSON *root;
    int rc = tr_hf_json_load(path, &root, err);
    if (rc) return rc;
    /* a pipeline's model_index.json names the class from_pretrained builds, whatever the
     * file's own _class_name says: the file's keys go to that class */
    if (index_class) {
        cJSON *name = cJSON_CreateString(index_class);
        if (!name || (cJSON_HasObjectItem(root, "_class_name")
                          ? !cJSON_ReplaceItemInObjectCaseSensitive(root, "_class_name", name)
                          : !cJSON_AddItemToObject(root, "_class_name", name))) {
            cJSON_Delete(name);
            cJSON_Delete(root);
            return tr_error_set(err, TR_ERR_NOMEM, "'%s': no memory", path);
        }
    }
    const cJSON *cls = cJSON_GetObjectItemCaseSensitive(root, "_class_name");
    const int is_pndm = cJSON_IsString(cls) && strcmp(cls->valuestring, "PNDMScheduler") == 0;
    const int is_euler = cJSON_IsString(cls) && strcmp(cls->valuestring, "EulerDiscreteScheduler") == 0;
    const int is_euler_a = cJSON_IsString(cls) && strcmp(cls->valuestring, "EulerAncestralDiscreteScheduler") == 0;
    const int is_lms = cJSON_IsString(cls) && strcmp(cls->valuestring, "LMSDiscreteScheduler") == 0;
    const int is_ddpm = cJSON_IsString(cls) && strcmp(cls->valuestring, "DDPMScheduler") == 0;
    const int is_dpm = cJSON_IsString(cls) && strcmp(cls->valuestring, "DPMSolverMultistepScheduler") == 0;
    const int is_heun = cJSON_IsString(cls) && strcmp(cls->valuestring, "HeunDiscreteScheduler") == 0;
    const int is_unipc = cJSON_IsString(cls) && strcmp(cls->valuestring, "UniPCMultistepScheduler") == 0;
    c->num_train_timesteps = 1000, c->beta_start = 0.0001, c->beta_end = 0.02, c->steps_offset = 0;
    c->set_alpha_to_one = !is_pndm;
    c->ddpm_large = 0;
    c->clip_sample = !is_pndm && !is_euler && !is_euler_a && !is_lms && !is_dpm && !is_heun && !is_unipc;
    c->clip_sample_range = 1.0;
    if (is_heun) c->beta_start = 0.00085, c->beta_end = 0.012; /* HeunDiscreteScheduler's defaults */
    c->rescale_betas_zero_snr = 0;
    c->use_karras_sigmas = 0, c->sigma_min = 0, c->sigma_max = 0;
    c->solver_order = 2, c->lower_order_final = 1, c->euler_at_final = 0;
    snprintf(c->solver_type, sizeof c->solver_type, "%s", is_unipc ? "bh2" : "midpoint");
    c->disable_corrector[0] = 0;
    snprintf(c->algorithm_type, sizeof c->algorithm_type, "dpmsolver++");
    snprintf(c->final_sigmas_type, sizeof c->final_sigmas_type, "zero");
    const int other = cJSON_IsString(cls) && strcmp(cls->valuestring, "DDIMScheduler") != 0;
    snprintf(c->scheduler, sizeof c->scheduler, "%s",
             is_pndm    ? "pndm"
             : is_euler ? "euler"
             : is_euler_a ? "euler_ancestral"
             : is_lms   ? "lms"
             : is_ddpm  ? "ddpm"
             : is_heun  ? "heun"
             : is_dpm   ? "dpm"
             : is_unipc ? "unipc"
             : other    ? cls->valuestring
                        : "ddim");
    snprintf(c->beta_schedule, sizeof c->beta_schedule, "linear");
    snprintf(c->timestep_spacing, sizeof c->timestep_spacing, "%s",
             is_euler || is_euler_a || is_lms || is_dpm || is_heun || is_unipc ? "linspace" : "leading");
    snprintf(c->prediction_type, sizeof c->prediction_type, "epsilon");
    static const char *const skip[] = {"unet",          "text_encoder", "vae", "num_inference_steps", "step",
                                       "guidance_scale", "eta",         "scheduler",
                                       "guidance_rescale", "clip_skip", "strength", NULL};
    /* PNDM's Runge-Kutta warm-up (skip_prk_steps false, its default) is not provided: SD's
     * files skip it */
    const cJSON *prk = cJSON_GetObjectItemCaseSensitive(root, "skip_prk_steps");
    rc = is_pndm && !cJSON_IsTrue(prk)
             ? tr_error_set(err, TR_ERR_UNSUPPORTED, "'%s': a PNDMScheduler without \"skip_prk_steps\": true (its "
                            "Runge-Kutta warm-up steps) is not provided; Stable Diffusion's files skip them", path)
             : TR_OK;
    if (!rc) rc = tr_hf_json_expect_null(root, path, "trained_betas", err);
    if (!rc) rc = tr_hf_json_expect_bool(root, path, "thresholding", 0, err);
    /* Euler's other sigma schedules and EDM's timesteps are not provided */
    if (!rc && is_euler) rc = tr_hf_json_expect_str(root, path, "interpolation_type", "linear", err);
    if (!rc && is_euler) rc = tr_hf_json_expect_str(root, path, "timestep_type", "discrete", err);
    if (!rc && is_dpm) rc = dpm_refusals(root, path, err);
    if (!rc && is_unipc) rc = unipc_refusals(root, path, err);
    if (!rc && is_ddpm) rc = ddpm_variance(root, path, c, err);
    /* Heun's own clamp on x0 (its clip_sample, off by default) is not provided; in a
     * pipeline the pipeline's constructor turns it off (below), so it is not asked */
    if (!rc && is_heun && !pipeline) rc = tr_hf_json_expect_bool(root, path, "clip_sample", 0, err);
    if (!rc && (is_euler || is_heun || is_lms)) rc = tr_hf_json_expect_bool(root, path, "use_exponential_sigmas", 0, err);
    if (!rc && (is_euler || is_heun || is_lms)) rc = tr_hf_json_expect_bool(root, path, "use_beta_sigmas", 0, err);
    if (!rc) rc = tr_hf_json_apply(root, path, sd_keys, (int)(sizeof sd_keys / sizeof sd_keys[0]), c, skip, err);
    cJSON_Delete(root);
    struct tr_ddim_config d;
    if (!rc && (rc = ddim_config(c, &d, err)) != TR_OK) tr_error_prefix(err, "'%s'", path);
    return rc;
}

/* [model] hf_config = a diffusers pipeline's directory or its model_index.json, or a
 * scheduler_config.json alone (sd.h). */
static int sd_read_hf_config(void *config, const char *path, struct tr_error *err) {
    struct tr_sd_config *c = config;
    char dir[4096], index[4096 + 64];
    struct stat sb;
    if (stat(path, &sb) != 0) return tr_error_set(err, TR_ERR_NOT_FOUND, "cannot open '%s'", path);
    snprintf(dir, sizeof dir, "%s", path);
    if (!S_ISDIR(sb.st_mode)) {
        char *slash = strrchr(dir, '/');
        const char *name = slash ? slash + 1 : dir;
        if (strcmp(name, "scheduler_config.json") == 0) return read_scheduler(path, NULL, 0, c, err); /* the schedule alone */
        if (strcmp(name, "model_index.json") != 0)
            return tr_error_set(err, TR_ERR_INVALID, "'%s': expected a diffusers pipeline's directory, its "
                                "model_index.json, or a scheduler_config.json", path);
        if (slash) *slash = 0;
        else snprintf(dir, sizeof dir, ".");
    }
    snprintf(index, sizeof index, "%s/model_index.json", dir);
    char sched_class[96] = "";
    if (stat(index, &sb) == 0) {
        cJSON *root;
        int rc = tr_hf_json_load(index, &root, err);
        if (rc) return rc;
        rc = tr_hf_json_expect_str(root, index, "_class_name", "StableDiffusionPipeline", err);
        const cJSON *sc = cJSON_GetObjectItemCaseSensitive(root, "scheduler"); /* ["diffusers", "PNDMScheduler"] */
        if (cJSON_GetArraySize(sc) == 2 && cJSON_IsString(cJSON_GetArrayItem(sc, 1)))
            snprintf(sched_class, sizeof sched_class, "%s", cJSON_GetArrayItem(sc, 1)->valuestring);
        cJSON_Delete(root);
        if (rc) return rc;
    }
    int rc = TR_OK;
    for (int p = TR_SD_PART_UNET; p <= TR_SD_PART_VAE && !rc; p++) rc = read_part(dir, p, c, p == TR_SD_PART_UNET, err);
    snprintf(index, sizeof index, "%s/scheduler/scheduler_config.json", dir);
    if (rc || stat(index, &sb) != 0) return rc;
    rc = read_scheduler(index, sched_class[0] ? sched_class : NULL, 1, c, err);
    /* StableDiffusionPipeline's constructor rewrites these two of its scheduler (an "outdated"
     * file, it says), so every run of the pipeline has them so; [model] keys still win */
    c->steps_offset = 1;
    c->clip_sample = 0;
    return rc;
}

const struct tr_model_desc tr_model_stable_diffusion = {
    .name = "stable_diffusion",
    .description = "Stable Diffusion 1.x/2.x: one denoising step (predict: the UNet on 2B, guidance, DDIM) or text to "
                   "image (generate: DDIM, DDPM, PNDM, Euler, Euler ancestral, LMS, Heun, DPM-Solver++ or UniPC)",
    .config_size = sizeof(struct tr_sd_config),
    TR_MODEL_TABLES(sd_keys, sd_presets),
    .tasks = 1u << TR_TASK_PREDICT | 1u << TR_TASK_GENERATE,
    .build = tr_sd_build,
    .make_inputs = tr_sd_make_inputs,
    .default_seq_len = sd_default_seq_len,
    .read_hf_config = sd_read_hf_config,
    /* predict: one UNet step; generate: a sampler's bound (1e-1) */
    .bf16_tolerance = TR_UNET_BF16_TOLERANCE,
    .bf16_why = TR_UNET_BF16_WHY,
};
