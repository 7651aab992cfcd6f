/* The models built into trident, for the code in models/ and the program: the public
 * list and descriptors (trident/models.h, installed), and the helpers the models share,
 * which are not part of the installed API. */
#ifndef TRIDENT_MODELS_MODELS_H
#define TRIDENT_MODELS_MODELS_H

#include "trident/rng.h"
#include "trident/model.h"
#include "trident/models.h"

/* A comma-separated list of integers in [lo, hi] ("320, 640,1280"; spaces allowed) from
 * the STRING key `key` of `model` (s, a char[cap]): *n entries into v (room for max).
 * Errors name the model, the key, the value and what is expected (as `example`). */
int tr_model_int_list(const char *model, const char *key, const char *s, size_t cap, int64_t lo, int64_t hi,
                      const char *example, int64_t *v, int max, int *n, struct tr_error *err);

/* The same for numbers (finite, in [lo, hi]; "450.5, 600"): *n entries into v. */
int tr_model_num_list(const char *model, const char *key, const char *s, size_t cap, double lo, double hi,
                      const char *example, double *v, int max, int *n, struct tr_error *err);

/* A config value (or a build option) a model needs to be at least 1, named as its key. */
struct tr_model_pos {
    const char *name;
    int64_t v;
};
/* Each of pos[0..n) at least 1, else "MODEL: NAME = V, expected at least 1". */
int tr_model_check_positive(const char *model, const struct tr_model_pos *pos, int n, struct tr_error *err);

/* make_inputs' synthetic data (inputs.c), drawn from seed and the input's name: t (a host
 * tensor) filled with normal(0, 1); or, for t an NHWC image (N,S,S,C), each image and
 * channel a sinusoid amp·sin(2π(fx·x + fy·y)/S + a random phase) plus uniform noise in
 * [-noise, noise], so that convolutions see structure. */
void tr_model_fill_normal(struct tr_tensor *t, uint64_t seed, const char *name);
void tr_model_fill_image(struct tr_tensor *t, uint64_t seed, const char *name, double amp, int64_t fx, int64_t fy,
                         double noise);
/* t, an NHWC tensor (N,H,W,C), filled by `calls` draws torch.randn((N / calls, C, H, W),
 * generator=g) in float32 one after another on r (rng.h), each permuted to NHWC: with r
 * just seeded and one call, diffusers' initial latents for that generator (0 on success;
 * TR_ERR_NOMEM). */
int tr_model_fill_torch_randn_nhwc(struct tr_tensor *t, struct tr_torch_rng *r, int64_t calls, struct tr_error *err);

/* A model descriptor's trainable where the fit graph builds only what fit trains (the
 * VAE's encoder, SAM's image encoder): every PARAM of g. */
int tr_model_trainable_all(const void *config, const struct tr_graph *g, int *ids, int max, int *n,
                           struct tr_error *err);

#endif
