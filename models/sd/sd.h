/* Stable Diffusion's denoising step as a trident model `stable_diffusion`: the
 * benchmark's "predict" row, one step of text-to-image sampling.
 *
 * One step runs the UNet once on a batch of 2B (the unconditional half first, then the
 * conditional, as diffusers' StableDiffusionPipeline batches them: the weights are read
 * once per step and every GEMM is twice as tall as with keras-cv's two calls of B, for
 * the same numbers), classifier-free guidance ε = ε_u + guidance_scale·(ε_c − ε_u), and
 * the DDIM update (ddim.h) in f32 whatever the graph's dtype.
 *
 *   predict  inputs   latents [B,S,S,4] (x_t), timestep f32 [1], encoder_hidden_states
 *                     [2B,T,cross_attention_dim] (the text encoder's output for the
 *                     negative and then the positive prompts; T = seq_len), ddim_coeffs
 *                     f32 [2] (c_x, c_o of the step, ddim.h; with clip_sample [6]: x0_x,
 *                     x0_o, e_x, e_o, p_x0, p_e)
 *            outputs  prev_sample [B,S,S,4] (x_{t−1}); the guided ε is the node "guidance"
 * The text encoder runs once per prompt batch, outside the step: `model = clip_text`
 * times it on its own. make_inputs draws latents and text from normal(0, 1) and takes the
 * timestep and coefficients of step `step` of the schedule.
 *
 *   generate inputs   input_ids i32 [2B,T] (the negative prompts, then the positive), latents
 *                     [B,S,S,4] (the initial noise), noise (a sampler's fresh noise,
 *                     below); image to image ([model] strength > 0) then image [B,8S,8S,3]
 *                     (in [-1,1]: [generate] init_image, a PNG) and image_noise [B,S,S,4]
 *            outputs  image f32 [B,8S,8S,3] in [-1,1] (the VAE decoder, in f32 whatever the
 *                     dtype as diffusers upcasts it, on latents/scaling_factor;
 *                     [generate] image = out.png writes it), denoised_latents
 * One graph: the text encoder, then all num_inference_steps steps, each an instance of the
 * UNet (tr_graph_set_instance: the weights shared), then the decoder. Weights: a diffusers
 * pipeline's directory ([run] weights = sd-v1-4/, its unet/, vae/, text_encoder/).
 * Image to image is StableDiffusionImg2ImgPipeline's: the VAE's encoder (f32) on the image,
 * the posterior's sample mean + std·image_noise times scaling_factor, noised with latents
 * as the scheduler's add_noise does to the first step run (num_inference_steps −
 * int(num_inference_steps·strength)), then the steps from there (PNDM's runs from that
 * run of its list, pndm.h).
 * Inpainting is StableDiffusionInpaintPipeline's with an inpainting UNet (in_channels
 * 2·C + 1: runwayml/stable-diffusion-inpainting's 9): the inputs image, [image_noise,]
 * mask [B,8S,8S,1] (1: repaint; [generate] mask_image binarized at grey 0.5) and
 * masked_image_noise; the picture where the mask is 0 encoded as above, the mask taken at
 * every 8th pixel, the two after the latents' channels at every run of the UNet; from
 * noise (strength 0 or 1, diffusers' default 1) or, below 1, from the picture as image to
 * image does. A mask given to a UNet of the latents' channels inpaints as that pipeline does
 * with one: after every run the known region is blended back at the latents' noise level
 * (the inputs image, image_noise and mask). From a seed, as diffusers' generator draws them: image_noise (one draw for
 * the one picture, repeated), latents, masked_image_noise (likewise), then each step run's
 * noise.
 *
 * [model] hf_config = DIR (a diffusers pipeline's directory, or its model_index.json) reads
 * DIR/unet/config.json, and where present text_encoder/config.json, vae/config.json and
 * scheduler/scheduler_config.json, as diffusers' from_pretrained does; the scheduler's keys
 * as DDIMScheduler.from_config reads them (absent ones take DDIMScheduler's defaults),
 * whichever scheduler the file names: a PNDMScheduler's runs PNDM (pndm.h), an
 * EulerDiscreteScheduler's Euler (euler.h), an EulerAncestralDiscreteScheduler's ancestral
 * Euler (euler.h; generate's third input "noise" [steps·B,S,S,C], step i's rows i·B..(i+1)·B,
 * drawn after the latents from [run] seed as torch's generator draws them for diffusers),
 * an LMSDiscreteScheduler's LMS (lms.h), a DDPMScheduler's DDPM (ddim.h; noise as euler_ancestral's),
 * a HeunDiscreteScheduler's Heun (heun.h), a DPMSolverMultistepScheduler's DPM-Solver++
 * (dpm.h), a UniPCMultistepScheduler's UniPC (unipc.h), a DDIMScheduler's (or no class's)
 * DDIM (eta 0), another class refused by name unless a [model] scheduler line after
 * hf_config picks one of those; then, as StableDiffusionPipeline's constructor does,
 * steps_offset = 1 and clip_sample = false ([model] keys after hf_config still win). hf_config = a scheduler_config.json reads the
 * schedule alone, as the file says (over the preset's parts).
 */
#ifndef TRIDENT_MODELS_SD_H
#define TRIDENT_MODELS_SD_H

#include <stdint.h>
#include "ddim.h"
#include "dpm.h"
#include "euler.h"
#include "unipc.h"
#include "trident/model.h"
#include "clip/clip.h"
#include "unet/unet.h"
#include "vae/vae.h"

struct tr_sd_config {
    char unet[64];                  /* the unet_2d_condition preset, or "unet/config.json" (hf_config's) */
    char text_encoder[64];          /* generate: the clip_text preset, or "text_encoder/config.json" */
    char vae[64];                   /* generate: the autoencoder_kl preset (its decoder), or "vae/config.json" */
    int64_t num_inference_steps;    /* the schedule's length (50 in the benchmark) */
    int64_t step;                   /* which of them predict runs (0: the first) */
    double guidance_scale;          /* 7.5 */
    double guidance_rescale;        /* the pipeline's guidance_rescale, 0 to 1 (0: none): the guided
                                       output scaled towards the conditional one's per-sample std */
    double eta;                     /* ddim, generate: the pipeline's eta, 0 to 1 (0: deterministic;
                                       above, fresh noise each step: the input "noise" as for
                                       euler_ancestral) */
    int64_t clip_skip;              /* generate: the pipeline's clip_skip (0: none): the prompt's
                                       embeddings from the text encoder's layer L − clip_skip
                                       (then its final layer norm); the negative prompt's from
                                       layer L, as diffusers' pipelines take them */
    double strength;                /* generate: image to image (StableDiffusionImg2ImgPipeline's
                                       strength, 0 to 1; 0: text to image): the last
                                       int(steps·strength) steps, from the image's latents noised */
    /* the scheduler's config.json values, by its names (ddim.h) */
    int64_t num_train_timesteps;
    double beta_start, beta_end;
    int64_t steps_offset;
    int set_alpha_to_one;
    char beta_schedule[32];         /* scaled_linear, linear, squaredcos_cap_v2 */
    char timestep_spacing[32];      /* leading, trailing, linspace */
    char prediction_type[32];       /* epsilon, v_prediction, sample */
    int rescale_betas_zero_snr;
    int clip_sample;                /* ddim: clamp the predicted x0 to [-clip_sample_range, clip_sample_range] */
    double clip_sample_range;
    char scheduler[48];             /* ddim, pndm (PLMS, pndm.h: the SD v1.x files'), euler or
                                       euler_ancestral (euler.h: the latter's noise an input), lms (lms.h),
                                       heun (heun.h), dpm (dpm.h) or unipc (unipc.h); a scheduler
                                       file's other class, by
                                       name, is refused;
                                       all but ddim: generate only */
    int use_karras_sigmas;          /* euler, lms, heun, dpm (euler.h, lms.h, heun.h, dpm.h) */
    double sigma_min, sigma_max;
    char final_sigmas_type[16];     /* zero, sigma_min (euler, dpm) */
    int ddpm_large;                 /* ddpm: a DDPMScheduler file's variance_type fixed_large (else
                                       fixed_small, or fixed_small_log: the same σ) */
    int64_t solver_order;           /* dpm (dpm.h): 2 or 1; unipc (unipc.h): 1 to 3 */
    char solver_type[16];           /* dpm: midpoint, heun; unipc: bh1, bh2 (midpoint, heun read as bh2) */
    char algorithm_type[20];        /* dpm: dpmsolver++, or sde-dpmsolver++ (fresh noise each step, an
                                       input as for euler_ancestral) */
    int lower_order_final, euler_at_final;
    char disable_corrector[64];     /* unipc: the steps after which no corrector runs, "0,1" */
    /* [model] hf_config = a diffusers pipeline's directory: its parts' config.json, used
     * where unet, text_encoder or vae holds the part's file name (as the reader sets it) */
    unsigned hf_parts;              /* 1 unet, 2 text_encoder, 4 vae: read */
    struct tr_unet_config hf_unet;
    struct tr_clip_text_config hf_text_encoder;
    struct tr_vae_config hf_vae;
};

/* c's keys as euler.h, dpm.h and unipc.h take them. */
struct tr_euler_config tr_sd_euler_config(const struct tr_sd_config *c);
struct tr_dpm_config tr_sd_dpm_config(const struct tr_sd_config *c);
struct tr_unipc_config tr_sd_unipc_config(const struct tr_sd_config *c);

/* c's UNet (a preset's or hf_config's) and its scheduler, made for num_inference_steps;
 * an error names the key. tr_ddim_free the schedule. */
int tr_sd_resolve(const struct tr_sd_config *c, const struct tr_unet_config **unet, struct tr_ddim *sched,
                  struct tr_error *err);

#endif
