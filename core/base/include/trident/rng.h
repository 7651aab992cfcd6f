/* trident — counter-based random numbers: value i of stream (seed, key) is a pure
 * function of the three, so weights and synthetic batches do not depend on the order
 * they are drawn in, the thread count or the backend. */
#ifndef TRIDENT_RNG_H
#define TRIDENT_RNG_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

double tr_rng_normal(uint64_t seed, uint64_t key, uint64_t i);   /* standard normal */
/* Values 2k and 2k+1 of tr_rng_normal at once (one Box–Muller gives both: half the cost). */
void tr_rng_normal2(uint64_t seed, uint64_t key, uint64_t k, double *even, double *odd);
double tr_rng_uniform(uint64_t seed, uint64_t key, uint64_t i);  /* [0,1) */
uint64_t tr_hash_str(const char *s);                             /* FNV-1a 64 */

/* PyTorch's CPU generator, for a draw a user compares with PyTorch's: after
 * tr_torch_rng_seed(r, s) (torch.Generator().manual_seed(s), torch.manual_seed(s)), each
 * tr_torch_randn(r, out, n) gives the n values of the next torch.randn(n, generator=g) of a
 * float32 tensor, in order (diffusers' initial latents, shape (B, C, H, W) flattened).
 * torch's mt19937 and both of its normal paths (Box-Muller over blocks of 16 from n = 16
 * on, one double at a time below), to within float rounding of its vectorised log, sin
 * and cos (1 or 2 ulp). Sequential by nature: for inputs that must not depend on the
 * order they are drawn in, the counter-based stream above. */
struct tr_torch_rng {
    uint32_t mt[624];
    int idx;
    int has_next;        /* the second normal of a double Box-Muller, kept for the next call */
    double next;
};
void tr_torch_rng_seed(struct tr_torch_rng *r, uint64_t seed);
void tr_torch_randn(struct tr_torch_rng *r, float *out, int64_t n);

#ifdef __cplusplus
}
#endif
#endif
