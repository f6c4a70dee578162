/* The limit a dequantizing .npy is measured against: a plain C loop that
 * dequantizes q8_0 or q4_k blocks already in memory (the model file, read
 * into a buffer first) into a reused 1 MiB float32 buffer, as fast as one
 * core does it with no file system in between.
 *
 *   dequant_limit FILE OFFSET LENGTH TYPE   (TYPE: q8_0 | q4_k)
 *
 * Prints {"bytes": float32 bytes produced, "seconds": ...} as JSON. The
 * loops follow the types' definitions (docs/formats.md, "ggml dequantization"); written for this
 * bench, plain scalar C as a compiler vectorizes it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static float half(const uint8_t *p) {
  uint16_t h = (uint16_t)(p[0] | (p[1] << 8));
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 31, m = h & 1023, bits;
  float f;
  if (e == 31) bits = sign | 0x7F800000u | (m << 13);
  else if (e) bits = sign | ((e + 112) << 23) | (m << 13);
  else {
    f = (float)m * (1.0f / 16777216.0f);
    memcpy(&bits, &f, 4);
    bits |= sign;
  }
  memcpy(&f, &bits, 4);
  return f;
}

static void q8_0(const uint8_t *b, float *y) {
  const float d = half(b);
  for (int j = 0; j < 32; ++j) y[j] = (float)(int8_t)b[2 + j] * d;
}

static void q4_k(const uint8_t *b, float *y) {
  const float d = half(b), dmin = half(b + 2);
  const uint8_t *s = b + 4, *q = b + 16;
  for (int g = 0; g < 4; ++g, q += 32, y += 64) {
    int j = 2 * g;
    uint8_t sc1, m1, sc2, m2;
    if (j < 4) { sc1 = s[j] & 63; m1 = s[j + 4] & 63; }
    else { sc1 = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4); m1 = (s[j + 4] >> 4) | ((s[j] >> 6) << 4); }
    j = 2 * g + 1;
    if (j < 4) { sc2 = s[j] & 63; m2 = s[j + 4] & 63; }
    else { sc2 = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4); m2 = (s[j + 4] >> 4) | ((s[j] >> 6) << 4); }
    const float d1 = d * sc1, n1 = dmin * m1, d2 = d * sc2, n2 = dmin * m2;
    for (int l = 0; l < 32; ++l) y[l] = d1 * (float)(q[l] & 15) - n1;
    for (int l = 0; l < 32; ++l) y[32 + l] = d2 * (float)(q[l] >> 4) - n2;
  }
}

int main(int argc, char **argv) {
  if (argc != 5) return 2;
  FILE *f = fopen(argv[1], "rb");
  long offset = atol(argv[2]), length = atol(argv[3]);
  const int is_q8 = strcmp(argv[4], "q8_0") == 0;
  const long block_bytes = is_q8 ? 34 : 144, block_values = is_q8 ? 32 : 256;
  uint8_t *in = malloc((size_t)length);
  float *out = malloc(1 << 20);
  if (!f || !in || !out || fseek(f, offset, SEEK_SET) || fread(in, 1, (size_t)length, f) != (size_t)length) return 1;
  const long blocks = length / block_bytes, per_buffer = (1 << 20) / (block_values * 4);
  struct timespec t0, t1;
  double sink = 0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (long i = 0; i < blocks; ++i) {
    float *y = out + (i % per_buffer) * block_values;
    if (is_q8) q8_0(in + i * block_bytes, y);
    else q4_k(in + i * block_bytes, y);
    if (i % per_buffer == per_buffer - 1) sink += out[i % 977];
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  const double seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  printf("{\"bytes\": %ld, \"seconds\": %.6f, \"sink\": %g}\n", blocks * block_values * 4, seconds, sink);
  return 0;
}
