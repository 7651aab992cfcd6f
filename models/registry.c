#include "models.h"

const struct tr_model_desc *const tr_builtin_models[] = {
    &tr_model_bert,
    &tr_model_gemma,
    &tr_model_mistral,
    &tr_model_autoencoder_kl,
    &tr_model_clip_text,
    &tr_model_unet_2d_condition,
    &tr_model_stable_diffusion,
    &tr_model_sam,
    NULL,
};
