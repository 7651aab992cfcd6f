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

#ifdef __cplusplus
}
#endif
#endif
