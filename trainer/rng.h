/* The trainer's deterministic random numbers: xoshiro256** (Blackman and
 * Vigna) seeded through splitmix64. Everything here is a pure function of the
 * state, so a generator saved as four uint64 (checkpoints, trn_loader_pos)
 * resumes exactly, on every platform. */
#ifndef SS_TRAINER_RNG_H
#define SS_TRAINER_RNG_H

#include <stdint.h>

static inline uint64_t trn__splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static inline uint64_t trn__rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

/* Fills the state from one 64-bit seed. splitmix64 never yields four zero
 * words in a row, so every seed (0 included) gives a valid state. */
static inline void trn_rng_seed(uint64_t s[4], uint64_t seed) {
  for (int i = 0; i < 4; i++)
    s[i] = trn__splitmix64(&seed);
}

/* The next 64 random bits. */
static inline uint64_t trn_rng_next(uint64_t s[4]) {
  uint64_t result = trn__rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = trn__rotl(s[3], 45);
  return result;
}

/* A double uniform on [0, 1): the top 53 bits of the next output, so every
 * value is a multiple of 2^-53 and 1.0 is never returned. */
static inline double trn_rng_uniform(uint64_t s[4]) {
  return (double)(trn_rng_next(s) >> 11) * 0x1.0p-53;
}

#endif
