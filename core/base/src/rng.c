/* Counter-based random numbers: value i of stream (seed, key) is a pure function of the
 * three, so weights and batches do not depend on order, threads or backend. The mixer
 * is SplitMix64's finaliser applied twice (good avalanche, no state). */
#include <math.h>
#include "trident/rng.h"

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t draw(uint64_t seed, uint64_t key, uint64_t i) {
    return mix64(mix64(seed ^ 0x9e3779b97f4a7c15ull) ^ mix64(key + 0x632be59bd9b4e019ull) ^ (i * 0x9e3779b97f4a7c15ull));
}

double tr_rng_uniform(uint64_t seed, uint64_t key, uint64_t i) {
    return (double)(draw(seed, key, i) >> 11) * 0x1.0p-53;
}

void tr_rng_normal2(uint64_t seed, uint64_t key, uint64_t k, double *even, double *odd) {
    /* Box–Muller on the two draws of counter pair k: both of its normals, r·cos and r·sin */
    uint64_t a = draw(seed, key, 2 * k), b = draw(seed, key, 2 * k + 1);
    double u1 = ((double)(a >> 11) + 0.5) * 0x1.0p-53; /* (0,1): log is finite */
    double u2 = (double)(b >> 11) * 0x1.0p-53;
    double r = sqrt(-2.0 * log(u1)), t = 6.283185307179586 * u2;
    *even = r * cos(t);
    *odd = r * sin(t);
}

double tr_rng_normal(uint64_t seed, uint64_t key, uint64_t i) {
    double even, odd;
    tr_rng_normal2(seed, key, i >> 1, &even, &odd);
    return i & 1 ? odd : even;
}

uint64_t tr_hash_str(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}
