/* trident — the models built into trident (libtrident_models).
 *
 * Each is a model descriptor (trident/model.h): its config keys, presets, tasks, and the
 * functions that build a task's graph and a synthetic batch. An application hands the
 * list to tr_task_graph_build or tr_bench_run (trident/bench.h), or picks one itself:
 *
 *   struct tr_task_graph tg;
 *   tr_task_graph_build(&cfg, tr_builtin_models, &tg, &err);   // [run] model names one
 *
 * Link libtrident_models (CMake: trident::models; pkg-config: trident-models), which
 * links libtrident. The descriptors are constant and live as long as the library. */
#ifndef TRIDENT_MODELS_H
#define TRIDENT_MODELS_H

#include "trident/model.h"

#ifdef __cplusplus
extern "C" {
#endif

extern const struct tr_model_desc tr_model_bert;              /* BertForSequenceClassification */
extern const struct tr_model_desc tr_model_gemma;             /* GemmaForCausalLM */
extern const struct tr_model_desc tr_model_mistral;           /* MistralForCausalLM */
extern const struct tr_model_desc tr_model_autoencoder_kl;    /* diffusers' AutoencoderKL */
extern const struct tr_model_desc tr_model_clip_text;         /* CLIPTextModel */
extern const struct tr_model_desc tr_model_unet_2d_condition; /* diffusers' UNet2DConditionModel */
extern const struct tr_model_desc tr_model_stable_diffusion;  /* the three above as one pipeline */
extern const struct tr_model_desc tr_model_sam;               /* SamModel */

/* All of the above, NULL-terminated, in the order `trident list` shows them. */
extern const struct tr_model_desc *const tr_builtin_models[];

#ifdef __cplusplus
}
#endif
#endif
