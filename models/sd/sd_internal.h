/* What the two files of the Stable Diffusion model share: sd_config.c (its keys, presets,
 * diffusers' config files and the schedule they make) and sd.c (its graphs and inputs). */
#ifndef TRIDENT_MODELS_SD_INTERNAL_H
#define TRIDENT_MODELS_SD_INTERNAL_H

#include <stdint.h>
#include <string.h>
#include "sd.h"

/* Which scheduler [model] scheduler names, and what the run asks of it. */
static inline int pndm(const struct tr_sd_config *c) { return strcmp(c->scheduler, "pndm") == 0; }
static inline int euler(const struct tr_sd_config *c) { return strcmp(c->scheduler, "euler") == 0; }
static inline int euler_a(const struct tr_sd_config *c) { return strcmp(c->scheduler, "euler_ancestral") == 0; }
static inline int ddim(const struct tr_sd_config *c) { return strcmp(c->scheduler, "ddim") == 0; }
static inline int lms(const struct tr_sd_config *c) { return strcmp(c->scheduler, "lms") == 0; }
static inline int ddpm(const struct tr_sd_config *c) { return strcmp(c->scheduler, "ddpm") == 0; }
static inline int dpm(const struct tr_sd_config *c) { return strcmp(c->scheduler, "dpm") == 0; }
static inline int unipc(const struct tr_sd_config *c) { return strcmp(c->scheduler, "unipc") == 0; }
static inline int heun(const struct tr_sd_config *c) { return strcmp(c->scheduler, "heun") == 0; }
static inline int dpm_sde(const struct tr_sd_config *c) { return strcmp(c->algorithm_type, "sde-dpmsolver++") == 0; }
static inline int img2img(const struct tr_sd_config *c) { return c->strength > 0; }
/* image to image's first step: diffusers' t_start, num_inference_steps − int(steps·strength)
 * (in double, as Python multiplies); 0 for text to image */
static inline int64_t sd_begin(const struct tr_sd_config *c) {
    if (!img2img(c)) return 0;
    const int64_t S = c->num_inference_steps, n = (int64_t)((double)S * c->strength);
    return S - (n < S ? n : S);
}
/* generate draws fresh noise each step (its third input, "noise") */
static inline int noisy(const struct tr_sd_config *c) {
    return euler_a(c) || (ddim(c) && c->eta > 0) || (dpm(c) && dpm_sde(c)) || ddpm(c);
}

/* An inpainting UNet (runwayml/stable-diffusion-inpainting's): the latents' channels, the
 * mask's and the masked picture's latents' in (9 for 4). */
static inline int inpainting(const struct tr_unet_config *u) { return u->in_channels == 2 * u->out_channels + 1; }
/* Inpainting with a UNet of the latents' channels: a mask given (diffusers' blend of the
 * known region after every step); and inpainting of either kind. */
static inline int blending(const struct tr_unet_config *u, const struct tr_build_opts *o) {
    return !inpainting(u) && o->mask_image;
}
static inline int masked(const struct tr_unet_config *u, const struct tr_build_opts *o) {
    return inpainting(u) || blending(u, o);
}
/* The run starts from the picture's latents noised (image to image; inpainting with
 * strength below 1), not from noise: diffusers' is_strength_max is false. */
static inline int from_image(const struct tr_sd_config *c, const struct tr_unet_config *u,
                             const struct tr_build_opts *o) {
    return img2img(c) && !(masked(u, o) && c->strength >= 1.0);
}

/* The three parts: the [model] key naming each (a preset of its model, or the file
 * hf_config read). Part p's config (NULL for neither), and the error naming the key. */
enum { TR_SD_PART_UNET, TR_SD_PART_TEXT, TR_SD_PART_VAE };
const void *tr_sd_part(const struct tr_sd_config *c, int p);
int tr_sd_no_part(const struct tr_sd_config *c, int p, struct tr_error *err);

/* The model's build and make_inputs (sd.c), for its descriptor (sd_config.c). */
int tr_sd_build(const void *config, const struct tr_build_opts *o, struct tr_graph *g, struct tr_error *err);
int tr_sd_make_inputs(const void *config, const struct tr_build_opts *o, uint64_t seed, int n, struct tr_tensor *inputs,
                      struct tr_error *err);

#endif
