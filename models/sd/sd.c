/* Stable Diffusion's graphs, predict's step and generate's whole run, and their inputs (sd.h). */
#include <stdlib.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "layers.h"
#include "models.h"
#include "heun.h"
#include "lms.h"
#include "pndm.h"
#include "unipc.h"
#include "sd_internal.h"
#include "trident/generate.h"
#include "trident/image.h"
#include "trident/rng.h"
#include "clip/clip.h"
#include "clip/tokenizer.h"
#include "unet/unet.h"
#include "vae/vae.h"


/* generate's text encoder and decoder, and that they fit the UNet. */
static int sd_parts(const struct tr_sd_config *c, const struct tr_unet_config *u,
                    const struct tr_clip_text_config **clip, const struct tr_vae_config **vae, struct tr_error *err) {
    if (!(*clip = tr_sd_part(c, TR_SD_PART_TEXT))) return tr_sd_no_part(c, TR_SD_PART_TEXT, err);
    if (!(*vae = tr_sd_part(c, TR_SD_PART_VAE))) return tr_sd_no_part(c, TR_SD_PART_VAE, err);
    if ((*clip)->hidden_size != u->cross_attention_dim)
        return tr_error_set(err, TR_ERR_INVALID, "stable_diffusion: text_encoder %s is %lld wide, unet %s attends to "
                            "%lld (cross_attention_dim)", c->text_encoder, (long long)(*clip)->hidden_size, c->unet,
                            (long long)u->cross_attention_dim);
    if ((*vae)->latent_channels != u->out_channels || (u->in_channels != u->out_channels && !inpainting(u)))
        return tr_error_set(err, TR_ERR_INVALID, "stable_diffusion: vae %s decodes %lld latent channels, unet %s makes "
                            "%lld from %lld (the latents', or an inpainting UNet's 2 * %lld + 1)", c->vae,
                            (long long)(*vae)->latent_channels, c->unet, (long long)u->out_channels,
                            (long long)u->in_channels, (long long)u->out_channels);
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
    if (o->task == TR_TASK_PREDICT && pndm(c)) { /* its step needs the outputs of the steps before */
        tr_ddim_free(s);
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "stable_diffusion: scheduler = pndm runs in task generate (each "
                            "step combines the outputs of those before); predict's one step is DDIM's: scheduler = "
                            "ddim");
    }
    if (o->task == TR_TASK_PREDICT && c->eta > 0) {
        tr_ddim_free(s);
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "stable_diffusion: eta = %g runs in task generate (each step draws "
                            "fresh noise); predict's one step is eta 0's", c->eta);
    }
    if (o->task == TR_TASK_PREDICT && (euler(c) || euler_a(c) || lms(c) || dpm(c) || heun(c) || ddpm(c) || unipc(c))) {
        tr_ddim_free(s);
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "stable_diffusion: scheduler = %s runs in task generate; "
                            "predict's one step is DDIM's: scheduler = ddim", c->scheduler);
    }
    if (o->task == TR_TASK_PREDICT && inpainting(*u)) {
        tr_ddim_free(s);
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "stable_diffusion: unet %s takes %lld channels, an inpainting "
                            "UNet's (the latents', the mask's, the masked picture's): it runs in task generate, with "
                            "[generate] init_image and mask_image", c->unet, (long long)(*u)->in_channels);
    }
    /* [generate] pictures that would go unread, or half of an inpainting's pair */
    const char *unread = NULL;
    if (o->mask_image && !o->init_image)
        unread = "[generate] mask_image needs init_image, the picture whose masked part is repainted (diffusers' "
                 "inpainting pipelines take both)";
    else if (inpainting(*u) && o->init_image && !o->mask_image)
        unread = "[generate] init_image with an inpainting UNet needs mask_image, the part to repaint (or give "
                 "neither: a synthetic picture and mask stand in)";
    else if (o->init_image && !img2img(c) && !masked(*u, o))
        unread = "[generate] init_image is read by image to image, which needs [model] strength (0 < strength <= "
                 "1; diffusers' default 0.8), or by inpainting (with mask_image): without either it would go unread";
    if (o->task == TR_TASK_GENERATE && unread) {
        tr_ddim_free(s);
        return tr_error_set(err, TR_ERR_INVALID, "stable_diffusion: %s", unread);
    }
    if (o->task == TR_TASK_PREDICT && c->clip_skip > 0) {
        tr_ddim_free(s);
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "stable_diffusion: clip_skip = %lld is generate's text encoder's; "
                            "predict takes the text's embeddings as an input", (long long)c->clip_skip);
    }
    if (img2img(c) && (o->task == TR_TASK_PREDICT || sd_begin(c) >= c->num_inference_steps)) {
        tr_ddim_free(s);
        if (o->task == TR_TASK_PREDICT)
            return tr_error_set(err, TR_ERR_UNSUPPORTED, "stable_diffusion: strength = %g (image to image) runs in "
                                "task generate", c->strength);
        return tr_error_set(err, TR_ERR_INVALID, "stable_diffusion: strength = %g over num_inference_steps = %lld runs "
                            "no step (int(steps * strength) = 0, where diffusers' pipeline fails too)", c->strength,
                            (long long)c->num_inference_steps);
    }
    return TR_OK;
}

/* a·x, with a either coeffs[i] (an f32 [n] node) or, where coeffs < 0, the constant v. */
static int term(struct tr_graph *g, int x, int coeffs, int i, double v) {
    return coeffs >= 0 ? tr_mul(g, x, tr_slice(g, coeffs, 0, i, i + 1, 1)) : tr_scale(g, x, (float)v, 0.0f);
}

/* clamp(x, lo, hi) = x − relu(x − hi) + relu(lo − x): x itself, bit for bit, between. */
static int clamp(struct tr_graph *g, int x, double lo, double hi) {
    return tr_add(g, tr_sub(g, x, tr_unary(g, TR_OP_RELU, tr_scale(g, x, 1.0f, (float)-hi))),
                  tr_unary(g, TR_OP_RELU, tr_scale(g, x, -1.0f, (float)lo)));
}

/* The DDIM update (ddim.h) of x by the model's output o, both f32: c_x·x + c_o·o, or with a
 * clamp on the predicted x0 (clip > 0) the three lines of ddim.h. The coefficients are the
 * node coeffs (f32 [2]: c_x, c_o; [6] with the clamp: x0_x, x0_o, e_x, e_o, p_x0, p_e) or,
 * where coeffs < 0, the constants k. */
static int ddim_update(struct tr_graph *g, int x, int o, int coeffs, const struct tr_ddim_coeffs *k, double clip) {
    if (!(clip > 0)) return tr_add(g, term(g, x, coeffs, 0, k->c_x), term(g, o, coeffs, 1, k->c_o));
    int x0 = tr_add(g, term(g, x, coeffs, 0, k->x0_x), term(g, o, coeffs, 1, k->x0_o));
    x0 = clamp(g, x0, -clip, clip);
    const int eps = tr_add(g, term(g, x, coeffs, 2, k->e_x), term(g, o, coeffs, 3, k->e_o));
    return tr_add(g, term(g, x0, coeffs, 4, k->p_x0), term(g, eps, coeffs, 5, k->p_e));
}

/* diffusers' rescale_noise_cfg on the guided output cfg and the conditional one cond (f32
 * [B,...], n values a sample): cfg·(r·std(cond)/std(cfg) + 1 − r), each std a sample's, as
 * torch's std takes it (over n − 1). */
static int rescale_cfg(struct tr_graph *g, int cfg, int cond, double r, int64_t B, int64_t n, const int64_t *shape) {
    const int64_t flat[2] = {B, n};
    int sd[2];
    for (int k = 0; k < 2; k++) {
        const int x = tr_reshape(g, k ? cond : cfg, 2, flat);
        const int d = tr_sub(g, x, tr_broadcast(g, tr_reduce(g, TR_OP_MEAN, x, 1, 1), 2, flat));
        sd[k] = tr_unary(g, TR_OP_SQRT, tr_scale(g, tr_reduce(g, TR_OP_SUM, tr_mul(g, d, d), 1, 1),
                                                  (float)(1.0 / (double)(n > 1 ? n - 1 : 1)), 0.0f));
    }
    const int f = tr_scale(g, tr_div(g, sd[1], sd[0]), (float)r, (float)(1.0 - r));
    return tr_reshape(g, tr_mul(g, tr_reshape(g, cfg, 2, flat), tr_broadcast(g, f, 2, flat)), 4, shape);
}

/* The UNet on the latents xf, f32 [B,S,S,C], with the text [2B,T,D] (in the graph's dtype)
 * and guidance: returns the guided output in f32 (-1 on an error); *guided gets it in the
 * graph's dtype, named "guidance". The update that follows is in f32 (c_x is within 1e-3 of
 * 1 late in the schedule, which bf16 cannot hold; and a run of steps keeps its latents in
 * f32, so bf16 rounds only what the UNet sees). */
static int unet_guided(struct tr_graph *g, const struct tr_sd_config *c, const struct tr_unet_config *u,
                       const struct tr_build_opts *o, int xf, int t, int text, int *guided, struct tr_error *err) {
    const enum tr_dtype dt = o->dtype;
    /* at or below 1 diffusers' pipeline guides nothing: the UNet on the conditional half alone */
    const int guide = c->guidance_scale > 1;
    const int64_t B = o->batch, B2 = 2 * B, bu[1] = {guide ? B2 : B};
    const int x = dt == TR_DTYPE_F32 ? xf : tr_cast(g, xf, dt), pair[2] = {x, x};
    const struct tr_build_opts uo = {.task = TR_TASK_PREDICT, .dtype = dt, .batch = bu[0], .seq_len = o->seq_len};
    int eps;
    int rc = tr_unet_graph(u, &uo, g, guide ? tr_concat(g, 2, pair, 0) : x, tr_broadcast(g, t, 1, bu),
                           guide ? text : tr_slice(g, text, 0, B, B2, 1), &eps, err);
    if (rc) return -1;
    if (guide) {
        int eu = tr_slice(g, eps, 0, 0, B, 1), ec = tr_slice(g, eps, 0, B, B2, 1);
        *guided = tr_add(g, eu, tr_scale(g, tr_sub(g, ec, eu), (float)c->guidance_scale, 0.0f));
        if (c->guidance_rescale > 0) { /* in f32, as the update after it */
            const int64_t S = u->sample_size, C = u->out_channels, shape[4] = {B, S, S, C};
            const int gf = dt == TR_DTYPE_F32 ? *guided : tr_cast(g, *guided, TR_DTYPE_F32);
            const int cf = dt == TR_DTYPE_F32 ? ec : tr_cast(g, ec, TR_DTYPE_F32);
            const int r = rescale_cfg(g, gf, cf, c->guidance_rescale, B, S * S * C, shape);
            *guided = dt == TR_DTYPE_F32 ? r : tr_cast(g, r, dt);
            tr_graph_set_name(g, *guided, "guidance");
            return r;
        }
    } else {
        *guided = eps;
    }
    tr_graph_set_name(g, *guided, "guidance");
    return dt == TR_DTYPE_F32 ? *guided : tr_cast(g, *guided, TR_DTYPE_F32);
}

/* Σ w[j]·nodes[j] over the w that are not 0 (one of them is not). */
static int lincomb(struct tr_graph *g, int n, const int *nodes, const double *w) {
    int acc = -1;
    for (int j = 0; j < n; j++) {
        if (w[j] == 0) continue;
        const int t = tr_scale(g, nodes[j], (float)w[j], 0.0f);
        acc = acc < 0 ? t : tr_add(g, acc, t);
    }
    return acc;
}

/* a·x + b·y, the terms whose weight is 0 left out (not both). */
static int lin2(struct tr_graph *g, int x, double a, int y, double b) {
    return lincomb(g, 2, (const int[2]){x, y}, (const double[2]){a, b});
}

/* What every run of a sampler takes besides the latents: the text's embeddings [2B,T,D]; the
 * fresh noise (f32 [steps·B,S,S,C], -1 none); what an inpainting UNet takes after the
 * latents' channels (f32 [B,S,S,C + 1]: the mask and the masked picture's latents; -1
 * none); whether the latents start from a picture (not scaled by the initial σ then); and
 * for the blend after every run (inpainting with a UNet of the latents' channels; keep -1
 * otherwise) the mask at the latents' size, the picture's latents and the first noise. */
struct sd_run {
    int text, noise, extra, from_image;
    int keep, x0, eps;
};

/* The scheduler's add_noise, a·x0 + b·ε, at a noise level: by ᾱ at timestep t (DDIM, DDPM,
 * PNDM), or by σ (a = 1, b = σ for Euler and the samplers on its schedule; α = 1/√(σ²+1)
 * and σ·α for DPM-Solver's and UniPC's). */
static void level_alpha(const struct tr_ddim *s, int64_t t, double *a, double *b) {
    *a = sqrt(s->alphas_cumprod[t]), *b = sqrt(1.0 - s->alphas_cumprod[t]);
}
static void level_sigma(const struct tr_sd_config *c, double sigma, double *a, double *b) {
    const double al = dpm(c) || unipc(c) ? 1.0 / sqrt(sigma * sigma + 1.0) : 1.0;
    *a = al, *b = sigma * al;
}

/* diffusers' inpainting blend after a run: (1 − mask)·(a·x0 + b·ε) + mask·x, the known
 * region put back at the level the latents are at (a = 1, b = 0 after the last). */
static int blend(struct tr_graph *g, const struct sd_run *sr, int x, double a, double b) {
    if (sr->keep < 0) return x;
    const int known = lin2(g, sr->x0, a, sr->eps, b);
    return tr_add(g, tr_mul(g, tr_scale(g, sr->keep, -1.0f, 1.0f), known), tr_mul(g, sr->keep, x));
}
/* The blend at σ (level_sigma), noise-free after the last run. */
static int blend_sigma(struct tr_graph *g, const struct tr_sd_config *c, const struct sd_run *sr, int x, double sigma,
                       int last) {
    double a = 1, b = 0;
    if (!last) level_sigma(c, sigma, &a, &b);
    return blend(g, sr, x, a, b);
}

/* Run i of a sampler: instance i of the guided UNet on c_in·x (x where c_in is 1), then
 * r->extra's channels, at the constant timestep t; its f32 output, or -1 with err set. */
static int unet_run(struct tr_graph *g, const struct tr_sd_config *c, const struct tr_unet_config *u,
                    const struct tr_build_opts *o, int64_t i, int x, double c_in, double t, const struct sd_run *r,
                    struct tr_error *err) {
    const int64_t one[1] = {1};
    const float tf = (float)t;
    int guided;
    tr_graph_set_instance(g, (int)i);
    if (c_in != 1) x = tr_scale(g, x, (float)c_in, 0.0f);
    if (r->extra >= 0) x = tr_concat(g, 2, (const int[2]){x, r->extra}, 3);
    const int e = unet_guided(g, c, u, o, x, tr_const(g, "timestep", TR_DTYPE_F32, 1, one, &tf), r->text, &guided,
                              err);
    if (e < 0 && !err->status) tr_error_set(err, TR_ERR_INTERNAL, "stable_diffusion: run %lld's UNet failed", (long long)i);
    return e;
}

/* x plus scale times step i's B rows of the fresh noise (f32 [steps·B,S,S,C], sd.h) */
static int add_noise(struct tr_graph *g, int x, int noise, int64_t i, int64_t B, double scale) {
    return tr_add(g, x, tr_scale(g, tr_slice(g, noise, 0, i * B, (i + 1) * B, 1), (float)scale, 0.0f));
}

/* One DDIM step: the guided UNet, then the update by the node coeffs or the constants k
 * (ddim_update). Returns x_{t-1} in f32. */
static int denoise(struct tr_graph *g, const struct tr_sd_config *c, const struct tr_unet_config *u,
                   const struct tr_build_opts *o, int xf, int t, int text, int coeffs, const struct tr_ddim_coeffs *k,
                   int *guided, struct tr_error *err) {
    const int ef = unet_guided(g, c, u, o, xf, t, text, guided, err);
    if (ef < 0) return -1;
    return ddim_update(g, xf, ef, coeffs, k, c->clip_sample ? c->clip_sample_range : 0.0);
}

/* PNDM's runs (pndm.h) on the latents x, f32: each an instance of the UNet; returns the
 * denoised latents (-1 on an error). */
static int pndm_steps(struct tr_graph *g, const struct tr_sd_config *c, const struct tr_unet_config *u,
                      const struct tr_build_opts *o, const struct tr_ddim *s, int x, const struct sd_run *sr,
                      struct tr_error *err) {
    struct tr_pndm_run *runs = malloc(sizeof *runs * (size_t)(s->steps + 1));
    int *e = malloc(sizeof *e * (size_t)(s->steps + 1));
    int64_t n = 0;
    int rc = !runs || !e ? tr_error_set(err, TR_ERR_NOMEM, "stable_diffusion: no memory for %lld PNDM steps",
                                        (long long)s->steps)
                         : tr_pndm_plan(s, sd_begin(c), runs, &n, err);
    const int start = x;
    for (int64_t i = sd_begin(c); i < n && !rc; i++) {
        const struct tr_pndm_run *r = &runs[i];
        if ((e[i] = unet_run(g, c, u, o, i, x, 1, r->t, sr, err)) < 0) {
            rc = err->status;
            break;
        }
        int next = tr_scale(g, r->from_start ? start : x, (float)r->c_x, 0.0f);
        for (int k = 0; k < r->n; k++) next = tr_add(g, next, tr_scale(g, e[r->idx[k]], (float)(r->c_e * r->w[k]), 0.0f));
        double a = 1, b = 0;
        if (i + 1 < n) level_alpha(s, tr_pndm_timestep(s, i + 1), &a, &b);
        x = blend(g, sr, next, a, b);
    }
    free(runs);
    free(e);
    return rc ? -1 : x;
}


/* Euler's steps (euler.h) on the latents x, f32, scaled by the initial σ first: each an
 * instance of the UNet on c_in·x; ancestral ones add c_n times step i's rows of noise
 * (f32 [steps·B,S,S,C]; -1 otherwise). Returns the denoised latents (-1 on an error). */
static int euler_steps(struct tr_graph *g, const struct tr_sd_config *c, const struct tr_unet_config *u,
                       const struct tr_build_opts *o, const struct tr_ddim *s, int x, const struct sd_run *sr,
                       struct tr_error *err) {
    struct tr_euler_step *steps = malloc(sizeof *steps * (size_t)s->steps);
    const struct tr_euler_config ec = tr_sd_euler_config(c);
    double init = 1;
    int rc = !steps ? tr_error_set(err, TR_ERR_NOMEM, "stable_diffusion: no memory for %lld Euler steps",
                                   (long long)s->steps)
                    : tr_euler_plan(s, &ec, steps, &init, err);
    if (!rc && !sr->from_image) x = tr_scale(g, x, (float)init, 0.0f);
    for (int64_t i = sd_begin(c); i < s->steps && !rc; i++) {
        const struct tr_euler_step *k = &steps[i];
        const int e = unet_run(g, c, u, o, i, x, k->c_in, k->t, sr, err);
        if (e < 0) rc = err->status;
        else x = tr_add(g, tr_scale(g, x, (float)k->c_x, 0.0f), tr_scale(g, e, (float)k->c_o, 0.0f));
        if (!rc && sr->noise >= 0 && k->c_n > 0)
            x = add_noise(g, x, sr->noise, i, o->batch, k->c_n);
        if (!rc) x = blend_sigma(g, c, sr, x, k->sigma_next, i + 1 == s->steps);
    }
    free(steps);
    return rc ? -1 : x;
}

/* LMS's steps (lms.h) on the latents x, f32, scaled by the initial σ first: each an
 * instance of the UNet on c_in·x, its derivative kept for the steps after; returns the
 * denoised latents (-1 on an error). */
static int lms_steps(struct tr_graph *g, const struct tr_sd_config *c, const struct tr_unet_config *u,
                     const struct tr_build_opts *o, const struct tr_ddim *s, int x, const struct sd_run *sr,
                      struct tr_error *err) {
    struct tr_lms_step *steps = malloc(sizeof *steps * (size_t)s->steps);
    int *d = malloc(sizeof *d * (size_t)s->steps);
    const struct tr_euler_config ec = tr_sd_euler_config(c);
    double init = 1;
    int rc = !steps || !d ? tr_error_set(err, TR_ERR_NOMEM, "stable_diffusion: no memory for %lld LMS steps",
                                         (long long)s->steps)
                          : tr_lms_plan(s, &ec, steps, &init, err);
    if (!rc && !sr->from_image) x = tr_scale(g, x, (float)init, 0.0f);
    for (int64_t i = sd_begin(c); i < s->steps && !rc; i++) {
        const struct tr_lms_step *k = &steps[i];
        const int e = unet_run(g, c, u, o, i, x, k->c_in, k->t, sr, err);
        if (e < 0) {
            rc = err->status;
            break;
        }
        d[i] = tr_add(g, tr_scale(g, x, (float)k->p, 0.0f), tr_scale(g, e, (float)k->q, 0.0f));
        for (int j = 0; j < k->k; j++) x = tr_add(g, x, tr_scale(g, d[i - j], (float)k->c[j], 0.0f));
        x = blend_sigma(g, c, sr, x, i + 1 < s->steps ? steps[i + 1].sigma : 0.0, i + 1 == s->steps);
    }
    free(steps);
    free(d);
    return rc ? -1 : x;
}

/* Heun's runs (heun.h) on the latents x, f32, scaled by the initial σ first: each an
 * instance of the UNet on c_in·x; a step's first run keeps its input and derivative for its
 * second; returns the denoised latents (-1 on an error). */
static int heun_steps(struct tr_graph *g, const struct tr_sd_config *c, const struct tr_unet_config *u,
                      const struct tr_build_opts *o, const struct tr_ddim *s, int x, const struct sd_run *sr,
                      struct tr_error *err) {
    struct tr_heun_run *runs = malloc(sizeof *runs * (size_t)(2 * s->steps));
    const struct tr_euler_config ec = tr_sd_euler_config(c);
    double init = 1;
    int64_t n = 0;
    int rc = !runs ? tr_error_set(err, TR_ERR_NOMEM, "stable_diffusion: no memory for %lld Heun steps",
                                  (long long)s->steps)
                   : tr_heun_plan(s, &ec, runs, &n, &init, err);
    if (!rc && !sr->from_image) x = tr_scale(g, x, (float)init, 0.0f);
    int saved = -1, d1 = -1;
    for (int64_t i = 2 * sd_begin(c); i < n && !rc; i++) { /* step b's first run is run 2b */
        const struct tr_heun_run *r = &runs[i];
        const int e = unet_run(g, c, u, o, i, x, r->c_in, r->t, sr, err);
        if (e < 0) {
            rc = err->status;
            break;
        }
        const int d = lin2(g, x, r->p, e, r->q);
        if (!r->second) {
            saved = x, d1 = d;
            x = tr_add(g, x, tr_scale(g, d, (float)r->dt, 0.0f));
        } else {
            x = tr_add(g, saved, tr_scale(g, tr_add(g, d1, d), (float)(0.5 * r->dt), 0.0f));
        }
        x = blend_sigma(g, c, sr, x, r->sigma_to, i + 1 == n);
    }
    free(runs);
    return rc ? -1 : x;
}

/* DPM-Solver++'s steps (dpm.h) on the latents x, f32: each an instance of the UNet on x;
 * the data predictions d_i carried to the next step; returns the denoised latents (-1 on
 * an error). */
static int dpm_steps(struct tr_graph *g, const struct tr_sd_config *c, const struct tr_unet_config *u,
                     const struct tr_build_opts *o, const struct tr_ddim *s, int x, const struct sd_run *sr,
                     struct tr_error *err) {
    struct tr_dpm_step *steps = malloc(sizeof *steps * (size_t)s->steps);
    const struct tr_dpm_config dc = tr_sd_dpm_config(c);
    int rc = !steps ? tr_error_set(err, TR_ERR_NOMEM, "stable_diffusion: no memory for %lld DPM-Solver steps",
                                   (long long)s->steps)
                    : tr_dpm_plan(s, &dc, steps, err);
    int d_prev = -1;
    for (int64_t i = sd_begin(c); i < s->steps && !rc; i++) {
        const struct tr_dpm_step *k = &steps[i];
        const int e = unet_run(g, c, u, o, i, x, 1, k->t, sr, err);
        if (e < 0) {
            rc = err->status;
            break;
        }
        const int d = lin2(g, x, k->d_x, e, k->d_o);
        int next = lin2(g, x, k->c_x, d, k->c_d);
        if (k->c_dprev != 0) next = tr_add(g, next, tr_scale(g, d_prev, (float)k->c_dprev, 0.0f));
        if (sr->noise >= 0 && k->c_n > 0)
            next = add_noise(g, next, sr->noise, i, o->batch, k->c_n);
        x = blend_sigma(g, c, sr, next, k->sigma_next, i + 1 == s->steps), d_prev = d;
    }
    free(steps);
    return rc ? -1 : x;
}

/* UniPC's steps (unipc.h) on the latents x, f32: each an instance of the UNet on x, then
 * the corrector on x and the predictor from it; the data predictions d_i kept for the
 * steps after. Returns the denoised latents (-1 on an error). */
static int unipc_steps(struct tr_graph *g, const struct tr_sd_config *c, const struct tr_unet_config *u,
                       const struct tr_build_opts *o, const struct tr_ddim *s, int x, const struct sd_run *sr,
                      struct tr_error *err) {
    struct tr_unipc_step *steps = malloc(sizeof *steps * (size_t)s->steps);
    int *d = malloc(sizeof *d * (size_t)s->steps);
    const struct tr_unipc_config uc = tr_sd_unipc_config(c);
    int rc = !steps || !d ? tr_error_set(err, TR_ERR_NOMEM, "stable_diffusion: no memory for %lld UniPC steps",
                                         (long long)s->steps)
                          : tr_unipc_plan(s, &uc, steps, err);
    int last = -1; /* the sample the step before's predictor started from */
    for (int64_t i = sd_begin(c); i < s->steps && !rc; i++) {
        const struct tr_unipc_step *k = &steps[i];
        const int e = unet_run(g, c, u, o, i, x, 1, k->t, sr, err);
        if (e < 0) {
            rc = err->status;
            break;
        }
        d[i] = lin2(g, x, k->d_x, e, k->d_o);
        int nodes[TR_UNIPC_MAX_ORDER + 2];
        double w[TR_UNIPC_MAX_ORDER + 2];
        if (k->corrected) {
            const int q = steps[i - 1].order;
            nodes[0] = last, w[0] = k->k_last;
            for (int j = 0; j <= q; j++) nodes[1 + j] = d[i - j], w[1 + j] = k->k_d[j];
            x = lincomb(g, q + 2, nodes, w);
        }
        last = x;
        nodes[0] = x, w[0] = k->p_x;
        for (int j = 0; j < k->order; j++) nodes[1 + j] = d[i - j], w[1 + j] = k->p_d[j];
        x = blend_sigma(g, c, sr, lincomb(g, k->order + 1, nodes, w), k->sigma_next, i + 1 == s->steps);
    }
    free(steps);
    free(d);
    return rc ? -1 : x;
}

static int sd_predict(const struct tr_sd_config *c, const struct tr_unet_config *u, const struct tr_build_opts *o,
                      struct tr_graph *g, struct tr_error *err) {
    const enum tr_dtype dt = o->dtype;
    const int64_t B = o->batch, S = u->sample_size;
    const int64_t lat[4] = {B, S, S, u->in_channels}, one[1] = {1}, nk[1] = {c->clip_sample ? 6 : 2},
                  ts[3] = {2 * B, o->seq_len, u->cross_attention_dim};
    int x = tr_input(g, "latents", dt, 4, lat);
    int t = tr_input(g, "timestep", TR_DTYPE_F32, 1, one);
    int text = tr_input(g, "encoder_hidden_states", dt, 3, ts);
    int coeffs = tr_input(g, "ddim_coeffs", TR_DTYPE_F32, 1, nk);
    int guided;
    int xf = dt == TR_DTYPE_F32 ? x : tr_cast(g, x, TR_DTYPE_F32);
    const struct tr_ddim_coeffs none = {0};
    int prev = denoise(g, c, u, o, xf, t, text, coeffs, &none, &guided, err);
    if (prev < 0 && err->status) return err->status;
    if (dt != TR_DTYPE_F32) prev = tr_cast(g, prev, dt);
    /* the guided noise (node "guidance") is not an output: guidance multiplies the two
     * halves' difference by 7.5, so in bf16 two backends' last-bit differences in the UNet
     * grow past any tolerance the step's result needs (4e-2 apart where prev_sample is 1e-2) */
    tr_graph_set_output(g, prev, "prev_sample");
    return TR_OK;
}

/* The VAE's downscale f (2^(blocks − 1)): an image is f times the latents' side. */
static int vae_factor(const struct tr_vae_config *v, int64_t *f, struct tr_error *err) {
    int64_t ch[TR_VAE_MAX_BLOCKS];
    int nb = 1;
    const int rc = tr_vae_channels(v, ch, &nb, err);
    *f = (int64_t)1 << (nb - 1);
    return rc;
}

/* Image to image's start, diffusers' scheduler.add_noise at the first step run (level_*):
 * by ᾱ at its timestep, or by its σ, which the sampler's own plan gives. */
static int start_coeffs(const struct tr_sd_config *c, const struct tr_ddim *s, double *a, double *b,
                        struct tr_error *err) {
    const int64_t begin = sd_begin(c), S = s->steps;
    if (ddim(c) || ddpm(c) || pndm(c)) { /* PNDM's run `begin` of its list (pndm.h) */
        level_alpha(s, pndm(c) ? tr_pndm_timestep(s, begin) : s->timesteps[begin], a, b);
        return TR_OK;
    }
    const size_t size = dpm(c) ? sizeof(struct tr_dpm_step) : unipc(c) ? sizeof(struct tr_unipc_step)
                                                                      : sizeof(struct tr_euler_step);
    void *st = malloc(size * (size_t)S);
    if (!st) return tr_error_set(err, TR_ERR_NOMEM, "stable_diffusion: no memory for %lld steps", (long long)S);
    double init, sigma = 0;
    int rc;
    if (dpm(c)) {
        const struct tr_dpm_config dc = tr_sd_dpm_config(c);
        if (!(rc = tr_dpm_plan(s, &dc, st, err))) sigma = ((struct tr_dpm_step *)st)[begin].sigma;
    } else if (unipc(c)) {
        const struct tr_unipc_config uc = tr_sd_unipc_config(c);
        if (!(rc = tr_unipc_plan(s, &uc, st, err))) sigma = ((struct tr_unipc_step *)st)[begin].sigma;
    } else { /* Euler's σ, which LMS, Heun and the ancestral step share */
        struct tr_euler_config ec = tr_sd_euler_config(c);
        ec.ancestral = 0, ec.final_sigma_min = 0;
        if (!(rc = tr_euler_plan(s, &ec, st, &init, err))) sigma = ((struct tr_euler_step *)st)[begin].sigma;
    }
    free(st);
    level_sigma(c, sigma, a, b);
    return rc;
}

/* The latents' encoding of n pictures (f32 [n,8S,8S,3] in [-1,1]) with their posterior's
 * noise (f32 [n,S,S,C]): the VAE's encoder in f32, mean + std·noise (the log-variance
 * clamped to [−30, 20], as diffusers' DiagonalGaussianDistribution), times scaling_factor;
 * -1 on an error. */
static int encode_pictures(struct tr_graph *g, const struct tr_vae_config *vae, const struct tr_build_opts *o, int pics,
                           int noise, struct tr_error *err) {
    const int64_t L = vae->latent_channels, n = tr_node_shape(g, pics)[0];
    const struct tr_build_opts vo = {.task = TR_TASK_PREDICT, .dtype = TR_DTYPE_F32, .batch = n, .seq_len = o->seq_len};
    int m;
    if (tr_vae_encode_graph(vae, &vo, g, pics, &m, err)) return -1;
    const int mean = tr_slice(g, m, 3, 0, L, 1), lv = tr_slice(g, m, 3, L, 2 * L, 1);
    const int std = tr_unary(g, TR_OP_EXP, tr_scale(g, clamp(g, lv, -30.0, 20.0), 0.5f, 0.0f));
    return tr_scale(g, tr_add(g, mean, tr_mul(g, std, noise)), (float)vae->scaling_factor, 0.0f);
}

/* The picture's part of a run (sd.h): the inputs image [B,8S,8S,3] (in [-1,1]), image_noise
 * [B,S,S,C] where the run starts from the picture (image to image; inpainting below
 * strength 1) or blends it in, mask [B,8S,8S,1] (1: repaint) when inpainting, and for an
 * inpainting UNet masked_image_noise [B,S,S,C]. The pictures are encoded in one batch.
 * Image to image's start, *x: the picture's latents noised with ε (the input latents, *x
 * as given) to the first step run, as the scheduler's add_noise. An inpainting UNet's
 * r->extra: the mask at the latents' size (nearest: every f-th pixel) and the latents of
 * the picture where the mask is 0, the channels it takes after the latents'. The blend's
 * r->keep, x0 and eps: that mask, the picture's latents, ε. Returns the status. */
static int picture(struct tr_graph *g, const struct tr_sd_config *c, const struct tr_unet_config *u,
                   const struct tr_vae_config *vae, const struct tr_build_opts *o, const struct tr_ddim *s, int *x,
                   struct sd_run *r, struct tr_error *err) {
    const enum tr_dtype dt = o->dtype;
    int64_t f;
    if (vae_factor(vae, &f, err)) return err->status;
    const int64_t B = o->batch, S = u->sample_size, L = vae->latent_channels, P = S * f,
                  img[4] = {B, P, P, vae->in_channels}, lat[4] = {B, S, S, L}, msk[4] = {B, P, P, 1};
    const int start = from_image(c, u, o), inpaint = inpainting(u), blends = blending(u, o), own = start || blends;
    int image = tr_input(g, "image", dt, 4, img), noise = own ? tr_input(g, "image_noise", dt, 4, lat) : -1;
    int mask = masked(u, o) ? tr_input(g, "mask", dt, 4, msk) : -1;
    int masked_noise = inpaint ? tr_input(g, "masked_image_noise", dt, 4, lat) : -1;
    if (dt != TR_DTYPE_F32) {
        image = tr_cast(g, image, TR_DTYPE_F32);
        if (own) noise = tr_cast(g, noise, TR_DTYPE_F32);
        if (mask >= 0) mask = tr_cast(g, mask, TR_DTYPE_F32);
        if (inpaint) masked_noise = tr_cast(g, masked_noise, TR_DTYPE_F32);
    }
    int pics = image, eps = noise;
    if (inpaint) { /* the picture where the mask is 0 (diffusers' image · (mask < 0.5) on its 0/1 mask) */
        const int hidden = tr_mul(g, image, tr_scale(g, mask, -1.0f, 1.0f));
        pics = own ? tr_concat(g, 2, (const int[2]){image, hidden}, 0) : hidden;
        eps = own ? tr_concat(g, 2, (const int[2]){noise, masked_noise}, 0) : masked_noise;
    }
    const int z = encode_pictures(g, vae, o, pics, eps, err);
    if (z < 0) return err->status;
    const int z_image = !own ? -1 : inpaint ? tr_slice(g, z, 0, 0, B, 1) : z;
    const int small = mask >= 0 ? tr_slice(g, tr_slice(g, mask, 1, 0, P, f), 2, 0, P, f) : -1;
    if (blends) r->keep = small, r->x0 = z_image, r->eps = *x;
    if (start) {
        double a = 0, b = 0; /* start_coeffs sets them; 0 for -Wmaybe-uninitialized */
        if (start_coeffs(c, s, &a, &b, err)) return err->status;
        *x = lin2(g, z_image, a, *x, b);
    }
    if (inpaint) r->extra = tr_concat(g, 2, (const int[2]){small, own ? tr_slice(g, z, 0, B, 2 * B, 1) : z}, 3);
    return TR_OK;
}

/* A whole text-to-image run: the text encoder on the 2B prompts, every step of the
 * schedule (each an instance of the UNet, sharing its weights; timesteps and coefficients
 * constants), the latents scaled back and decoded. */
static int sd_generate(const struct tr_sd_config *c, const struct tr_unet_config *u, const struct tr_ddim *s,
                       const struct tr_build_opts *o, struct tr_graph *g, struct tr_error *err) {
    const struct tr_clip_text_config *clip = NULL;
    const struct tr_vae_config *vae = NULL;
    int rc = sd_parts(c, u, &clip, &vae, err);
    if (rc) return rc;
    const enum tr_dtype dt = o->dtype;
    const int64_t B = o->batch, S = u->sample_size, lat[4] = {B, S, S, u->out_channels},
                  ids_sh[2] = {2 * B, o->seq_len};
    int ids = tr_input(g, "input_ids", TR_DTYPE_I32, 2, ids_sh);
    int x = tr_input(g, "latents", dt, 4, lat), noise = -1;
    if (dt != TR_DTYPE_F32) x = tr_cast(g, x, TR_DTYPE_F32);
    if (noisy(c)) { /* each step's fresh noise, B rows a step (sd.h) */
        const int64_t nz[4] = {s->steps * B, S, S, u->out_channels};
        noise = tr_input(g, "noise", dt, 4, nz);
        if (dt != TR_DTYPE_F32) noise = tr_cast(g, noise, TR_DTYPE_F32);
    }
    struct sd_run run = {.noise = noise, .extra = -1, .from_image = from_image(c, u, o), .keep = -1, .x0 = -1, .eps = -1};
    if ((img2img(c) || masked(u, o)) && (rc = picture(g, c, u, vae, o, s, &x, &run, err)) != TR_OK) return rc;
    const struct tr_build_opts to = {.task = TR_TASK_PREDICT, .dtype = dt, .batch = 2 * B, .seq_len = o->seq_len};
    int text;
    int skipped = -1;
    if ((rc = tr_clip_text_graph_skip(clip, &to, g, ids, c->clip_skip, &text, &skipped, err)) != TR_OK) return rc;
    if (c->clip_skip > 0) { /* diffusers skips layers for the prompt alone: the negative rows keep the last */
        const int halves[2] = {tr_slice(g, text, 0, 0, B, 1), tr_slice(g, skipped, 0, B, 2 * B, 1)};
        text = tr_concat(g, 2, halves, 0);
    }
    run.text = text;
    if (pndm(c) && (x = pndm_steps(g, c, u, o, s, x, &run, err)) < 0) return err->status;
    if ((euler(c) || euler_a(c)) && (x = euler_steps(g, c, u, o, s, x, &run, err)) < 0) return err->status;
    if (dpm(c) && (x = dpm_steps(g, c, u, o, s, x, &run, err)) < 0) return err->status;
    if (unipc(c) && (x = unipc_steps(g, c, u, o, s, x, &run, err)) < 0) return err->status;
    if (lms(c) && (x = lms_steps(g, c, u, o, s, x, &run, err)) < 0) return err->status;
    if (heun(c) && (x = heun_steps(g, c, u, o, s, x, &run, err)) < 0) return err->status;
    for (int64_t i = sd_begin(c); i < s->steps && (ddim(c) || ddpm(c)); i++) {
        int64_t t;
        struct tr_ddim_coeffs k;
        tr_ddim_step(s, i, &t, &k);
        const int e = unet_run(g, c, u, o, i, x, 1, (double)t, &run, err);
        if (e < 0) return err->status;
        x = ddim_update(g, x, e, -1, &k, c->clip_sample ? c->clip_sample_range : 0.0);
        if (noise >= 0 && k.p_n > 0)
            x = add_noise(g, x, noise, i, B, k.p_n);
        double a = 1, b = 0;
        if (i + 1 < s->steps) level_alpha(s, s->timesteps[i + 1], &a, &b);
        x = blend(g, &run, x, a, b);
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

int tr_sd_build(const void *config, const struct tr_build_opts *o, struct tr_graph *g, struct tr_error *err) {
    const struct tr_sd_config *c = config;
    const struct tr_unet_config *u;
    struct tr_ddim sched;
    int rc = sd_check(c, o, &u, &sched, err);
    if (rc) return rc;
    rc = o->task == TR_TASK_GENERATE ? sd_generate(c, u, &sched, o, g, err) : sd_predict(c, u, o, g, err);
    tr_ddim_free(&sched);
    /* what a diffusers pipeline's directory holds that this graph does not run: the safety
     * checker always, and a step (predict) takes the prompts' embeddings as an input */
    tr_graph_omit(g, "safety_checker/");
    if (o->task == TR_TASK_PREDICT) tr_graph_omit(g, "text_encoder/"), tr_graph_omit(g, "vae/");
    if (!rc) rc = tr_graph_status(g, err);
    if (rc) return tr_error_prefix(err, "stable_diffusion");
    return TR_OK;
}


/* [generate] prompt, or prompts (row B + b takes prompt b mod their count), in rows B..2B,
 * and negative_prompt ("" by default) in rows 0..B, through the tokenizer at o->tokenizer. */
static int prompt_ids(const struct tr_clip_text_config *clip, const struct tr_build_opts *o, int32_t *ids,
                      struct tr_error *err) {
    const int64_t B = o->batch, T = o->seq_len;
    char **lines = NULL;
    int n = 0;
    int rc = o->prompts ? tr_generate_read_prompts(o->prompts, &lines, &n, err) : TR_OK;
    if (rc) tr_error_prefix(err, "stable_diffusion: [generate] prompts");
    else if (n > B)
        rc = tr_error_set(err, TR_ERR_INVALID, "stable_diffusion: [generate] prompts '%s': %d prompts for [run] batch = "
                          "%lld: expected at most one a sample", o->prompts, n, (long long)B);
    struct tr_clip_tokenizer *tok = NULL;
    if (!rc && (rc = tr_clip_tokenizer_load(o->tokenizer, &tok, err)) != TR_OK)
        tr_error_prefix(err, "stable_diffusion: [generate] tokenizer");
    for (int64_t b = 0; b < 2 * B && !rc; b++) {
        const char *text = b < B ? (o->negative_prompt ? o->negative_prompt : "") : lines ? lines[(b - B) % n] : o->prompt;
        rc = tr_clip_tokenize(tok, text, ids + b * T, (int)T, err);
    }
    tr_clip_tokenizer_free(tok);
    free(lines);
    for (int64_t i = 0; i < 2 * B * T && !rc; i++)
        if (ids[i] < 0 || ids[i] >= clip->vocab_size)
            rc = tr_error_set(err, TR_ERR_INVALID, "stable_diffusion: the tokenizer at '%s' gives id %d, past the text "
                              "encoder's vocabulary of %lld: a tokenizer of another model?", o->tokenizer, (int)ids[i],
                              (long long)clip->vocab_size);
    return rc;
}

/* Every row of t the same: the value at the first row's bytes. */
static void repeat_rows(struct tr_tensor *t) {
    const size_t row = (size_t)(t->shape[1] * t->shape[2] * t->shape[3]) * tr_dtype_size((enum tr_dtype)t->dtype);
    for (int64_t b = 1; b < t->shape[0]; b++) memcpy((char *)t->data + (size_t)b * row, t->data, row);
}

/* t (every row the same) from `path` (the [generate] key `key`): a PNG of t's size, the
 * picture in [-1, 1] (3 channels) or the mask binarized as diffusers' mask processor does
 * (1 channel: 1 where its grey level is 0.5 or more); without one, a smooth random picture
 * from the seed, or a mask of the middle half. */
static int picture_input(const char *path, const char *key, struct tr_tensor *t, uint64_t seed, struct tr_error *err) {
    const int64_t H = t->shape[1], W = t->shape[2];
    if (path) {
        const int rc = tr_image_read_png(path, t, err);
        if (rc) return tr_error_prefix(err, "stable_diffusion: [generate] %s", key);
    } else if (t->shape[3] == 1) {
        for (int64_t i = 0; i < H * W; i++) {
            const int64_t y = i / W, x = i % W;
            tr_tensor_set_f64(t, i, y >= H / 4 && y < H - H / 4 && x >= W / 4 && x < W - W / 4 ? 1.0 : 0.0);
        }
    } else {
        struct tr_tensor one = *t;
        one.shape[0] = 1;
        tr_model_fill_image(&one, seed, "image", 0.6, 1, 2, 0.3);
    }
    if (t->shape[3] == 1) /* image[image < 0.5] = 0, image[image >= 0.5] = 1 */
        for (int64_t i = 0; i < H * W; i++) tr_tensor_set_f64(t, i, tr_tensor_get_f64(t, i) >= 0.5 ? 1.0 : 0.0);
    repeat_rows(t);
    return TR_OK;
}

/* One posterior's draw for the one picture, torch.randn((1, C, S, S)), in every row of t. */
static int draw_once(struct tr_tensor *t, struct tr_torch_rng *r, struct tr_error *err) {
    struct tr_tensor one = *t;
    one.shape[0] = 1;
    const int rc = tr_model_fill_torch_randn_nhwc(&one, r, 1, err);
    if (!rc) repeat_rows(t);
    return rc;
}

/* generate: the prompts as CLIP's tokenizer makes them (clip_text's synthetic ones), the
 * first B of them empty (the negative prompt "": start, then end-padding), as diffusers'
 * pipeline batches them; the picture and the mask ([generate] init_image and mask_image,
 * or synthetic ones); then what diffusers' pipeline draws with generator =
 * torch.manual_seed(seed), in its order and in float32: the picture's posterior sample
 * (one draw for the one picture, repeated) where the run starts from it, the first latents
 * normal(0, 1) (the scheduler's initial σ scales them in the graph) or the noise added to
 * the picture's, the masked picture's posterior sample, then each step run's fresh noise. */
static int generate_inputs(const struct tr_sd_config *c, const struct tr_unet_config *u, const struct tr_build_opts *o,
                           const struct tr_ddim *s, uint64_t seed, int n, struct tr_tensor *inputs,
                           struct tr_error *err) {
    const struct tr_clip_text_config *clip = NULL;
    const struct tr_vae_config *vae = NULL;
    int rc = sd_parts(c, u, &clip, &vae, err);
    if (rc) return rc;
    const int pic = img2img(c) || masked(u, o), inpaint = inpainting(u), mask_in = masked(u, o);
    const int start = from_image(c, u, o) || blending(u, o); /* the picture's own posterior drawn */
    const int want = 2 + noisy(c) + pic + start + mask_in + inpaint, at = 2 + noisy(c); /* the picture's from at */
    if (n != want)
        return tr_error_set(err, TR_ERR_INVALID, "stable_diffusion: %d inputs given, expected %d (input_ids, latents%s%s%s%s%s)",
                            n, want, noisy(c) ? ", noise" : "", pic ? ", image" : "", start ? ", image_noise" : "",
                            mask_in ? ", mask" : "", inpaint ? ", masked_image_noise" : "");
    int64_t f;
    if ((rc = vae_factor(vae, &f, err)) != TR_OK) return rc;
    const int64_t B = o->batch, T = o->seq_len, S = u->sample_size, C = u->out_channels, P = S * f,
                  lat[4] = {B, S, S, C}, nz[4] = {s->steps * B, S, S, C}, img[4] = {B, P, P, vae->in_channels},
                  msk[4] = {B, P, P, 1};
    const struct tr_build_opts to = {.task = TR_TASK_PREDICT, .dtype = o->dtype, .batch = 2 * B, .seq_len = T};
    if ((rc = tr_model_clip_text.make_inputs(clip, &to, seed, 1, &inputs[0], err)) != TR_OK) return rc;
    static const char *const M = "stable_diffusion";
    struct tr_tensor *image = pic ? &inputs[at] : NULL, *image_noise = start ? &inputs[at + 1] : NULL,
                     *mask = mask_in ? &inputs[at + 1 + start] : NULL,
                     *masked_noise = inpaint ? &inputs[at + 2 + start] : NULL;
    if ((rc = tr_model_check_input(M, &inputs[1], "latents", o->dtype, 4, lat, err)) ||
        (noisy(c) && (rc = tr_model_check_input(M, &inputs[2], "noise", o->dtype, 4, nz, err))) ||
        (pic && (rc = tr_model_check_input(M, image, "image", o->dtype, 4, img, err))) ||
        (start && (rc = tr_model_check_input(M, image_noise, "image_noise", o->dtype, 4, lat, err))) ||
        (mask_in && (rc = tr_model_check_input(M, mask, "mask", o->dtype, 4, msk, err))) ||
        (inpaint && (rc = tr_model_check_input(M, masked_noise, "masked_image_noise", o->dtype, 4, lat, err))))
        return rc;
    int32_t *ids = inputs[0].data;
    if (o->prompt || o->prompts) { /* the user's prompts, tokenized as the pipeline tokenizes them */
        if ((rc = prompt_ids(clip, o, ids, err)) != TR_OK) return rc;
    } else {
        for (int64_t i = 0; i < B * T; i++) ids[i] = (int32_t)(clip->vocab_size - (i % T == 0 ? 2 : 1));
    }
    if ((pic && (rc = picture_input(o->init_image, "init_image", image, seed, err))) ||
        (mask_in && (rc = picture_input(o->mask_image, "mask_image", mask, seed, err))))
        return rc;
    struct tr_torch_rng r;
    tr_torch_rng_seed(&r, seed);
    if ((start && (rc = draw_once(image_noise, &r, err))) || (rc = tr_model_fill_torch_randn_nhwc(&inputs[1], &r, 1, err)) ||
        (inpaint && (rc = draw_once(masked_noise, &r, err))))
        return rc;
    if (blending(u, o)) { /* the pipeline encodes the masked picture all the same: its draw, unused */
        float *skip = malloc(sizeof(float) * (size_t)(S * S * C));
        if (!skip) return tr_error_set(err, TR_ERR_NOMEM, "stable_diffusion: no memory for a draw");
        tr_torch_randn(&r, skip, S * S * C);
        free(skip);
    }
    if (!noisy(c)) return TR_OK;
    /* the steps run draw theirs in turn; image to image's skipped ones draw none (their rows 0) */
    struct tr_tensor run = inputs[2];
    const int64_t begin = sd_begin(c), row = B * S * S * C;
    memset(run.data, 0, (size_t)(begin * row) * tr_dtype_size((enum tr_dtype)run.dtype));
    run.data = (char *)run.data + (size_t)(begin * row) * tr_dtype_size((enum tr_dtype)run.dtype);
    run.shape[0] = (s->steps - begin) * B;
    return tr_model_fill_torch_randn_nhwc(&run, &r, s->steps - begin, err);
}

int tr_sd_make_inputs(const void *config, const struct tr_build_opts *o, uint64_t seed, int n,
                          struct tr_tensor *inputs, struct tr_error *err) {
    const struct tr_sd_config *c = config;
    const struct tr_unet_config *u;
    struct tr_ddim sched;
    int rc = sd_check(c, o, &u, &sched, err);
    if (rc) return rc;
    int64_t t;
    struct tr_ddim_coeffs k;
    tr_ddim_step(&sched, c->step, &t, &k);
    if (o->task == TR_TASK_GENERATE) rc = generate_inputs(c, u, o, &sched, seed, n, inputs, err);
    tr_ddim_free(&sched);
    if (o->task == TR_TASK_GENERATE) return rc;
    if (n != 4)
        return tr_error_set(err, TR_ERR_INVALID, "stable_diffusion: %d inputs given, expected 4 (latents, timestep, "
                            "encoder_hidden_states, ddim_coeffs)", n);
    const int64_t B = o->batch, S = u->sample_size;
    const int64_t lat[4] = {B, S, S, u->in_channels}, one[1] = {1}, nk[1] = {c->clip_sample ? 6 : 2},
                  ts[3] = {2 * B, o->seq_len, u->cross_attention_dim};
    static const char *const M = "stable_diffusion";
    rc = tr_model_check_input(M, &inputs[0], "latents", o->dtype, 4, lat, err);
    if (!rc) rc = tr_model_check_input(M, &inputs[1], "timestep", TR_DTYPE_F32, 1, one, err);
    if (!rc) rc = tr_model_check_input(M, &inputs[2], "encoder_hidden_states", o->dtype, 3, ts, err);
    if (!rc) rc = tr_model_check_input(M, &inputs[3], "ddim_coeffs", TR_DTYPE_F32, 1, nk, err);
    if (rc) return rc;
    tr_model_fill_normal(&inputs[0], seed, "latents");
    tr_model_fill_normal(&inputs[2], seed, "encoder_hidden_states");
    tr_tensor_set_f64(&inputs[1], 0, (double)t);
    const double all[6] = {k.x0_x, k.x0_o, k.e_x, k.e_o, k.p_x0, k.p_e}, linear[2] = {k.c_x, k.c_o};
    for (int i = 0; i < nk[0]; i++) tr_tensor_set_f64(&inputs[3], i, c->clip_sample ? all[i] : linear[i]);
    return TR_OK;
}
