/* The models built into trident. */
#ifndef TRIDENT_MODELS_H
#define TRIDENT_MODELS_H

#include "trident/model.h"

extern const struct tr_model_desc tr_model_bert;
extern const struct tr_model_desc tr_model_gemma;
extern const struct tr_model_desc tr_model_mistral;
extern const struct tr_model_desc tr_model_autoencoder_kl;
extern const struct tr_model_desc tr_model_clip_text;

/* NULL-terminated. */
extern const struct tr_model_desc *const tr_builtin_models[];

#endif
