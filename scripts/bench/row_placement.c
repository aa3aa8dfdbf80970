/* Where weight rows lie in memory, and how fast one core streams them: the decode step's
   f32 matrix-vector products over one model's matrices (LLaMA-shaped: per layer four
   DIM x DIM, two FF x DIM and one DIM x FF, then a 32000 x DIM output), four rows at a
   time as generate's AVX-512 kernel reads them, from two copies of the weights, each read
   from its start and from 32 bytes on:
     huge        2 MiB-aligned, marked for transparent huge pages (generate --no-mmap)
     huge+32     the same pages, each row 32 bytes on: a GGUF file whose data starts at 32
                 mod 64, read in as it lies, splits every 64-byte load over two cache lines
     small       another copy in 4 KiB pages only (MADV_NOHUGEPAGE), cache-line aligned
     small+32    that copy 32 bytes on
   The four take turns in every round, so that the host's drifting bandwidth meets them all
   alike; the ratio column is the median over rounds of (time of huge) / (time of the row),
   the fair comparison on a noisy machine. An offset is compared on the same pages (huge
   against huge+32, small against small+32); the two copies lie in different memory, which
   on a virtual machine can differ by itself. One thread; prints Markdown.
   Build with 512-bit vectors, as generate's kernel loads (GCC may prefer 256-bit ones, whose
   32-byte loads an offset of 32 does not split):
     gcc -O3 -march=native -mprefer-vector-width=512 -o row_placement row_placement.c
   Usage: row_placement [DIM FF LAYERS ROUNDS]   (default 768 2048 12 31: stories110M) */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

enum { kCopies = 4, kVocab = 32000 };
static const char* const kNames[kCopies] = {"huge", "huge+32", "small", "small+32"};

typedef struct { size_t rows, cols; } Shape;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int by_value(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static double median(double* v, size_t n) {
  qsort(v, n, sizeof *v, by_value);
  return v[n / 2];
}

/* out[r] = a_r . x for the matrix's rows, four at a time, 16 numbers of each a step. */
static void matvec(const float* restrict a, size_t rows, size_t cols, const float* restrict x, float* restrict out) {
  for (size_t r = 0; r + 4 <= rows; r += 4) {
    const float* a0 = a + r * cols;
    float s[4][16] = {{0}};
    for (size_t i = 0; i + 16 <= cols; i += 16)
      for (int q = 0; q < 4; ++q)
        for (int k = 0; k < 16; ++k) s[q][k] += a0[q * cols + i + k] * x[i + k];
    for (int q = 0; q < 4; ++q) {
      float t = 0;
      for (int k = 0; k < 16; ++k) t += s[q][k];
      out[r + q] = t;
    }
  }
}

int main(int argc, char** argv) {
  if (argc != 1 && argc != 5) {
    fprintf(stderr, "usage: row_placement [DIM FF LAYERS ROUNDS]\n");
    return 2;
  }
  const size_t dim = argc > 1 ? strtoul(argv[1], NULL, 10) : 768, ff = argc > 1 ? strtoul(argv[2], NULL, 10) : 2048;
  const size_t layers = argc > 1 ? strtoul(argv[3], NULL, 10) : 12, rounds = argc > 1 ? strtoul(argv[4], NULL, 10) : 31;
  if (dim % 16 || ff % 16 || dim == 0 || ff == 0 || layers == 0 || rounds == 0) {
    fprintf(stderr, "row_placement: error: DIM and FF must be positive multiples of 16, LAYERS and ROUNDS positive\n");
    return 2;
  }
  const size_t n_shapes = layers * 7 + 1;
  Shape* shapes = malloc(n_shapes * sizeof *shapes);
  size_t floats = 0, k = 0;
  for (size_t l = 0; l < layers; ++l) {
    for (int q = 0; q < 4; ++q) shapes[k++] = (Shape){dim, dim};
    shapes[k++] = (Shape){ff, dim};
    shapes[k++] = (Shape){ff, dim};
    shapes[k++] = (Shape){dim, ff};
  }
  shapes[k++] = (Shape){kVocab, dim};
  for (size_t i = 0; i < n_shapes; ++i) floats += shapes[i].rows * shapes[i].cols;
  const size_t huge = (size_t)2 << 20, bytes = floats * sizeof(float) + 2 * huge;
  float* copy[kCopies];
  for (int c = 0; c < kCopies; c += 2) {
    char* raw = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) {
      perror("row_placement: error: mmap");
      return 1;
    }
    char* base = (char*)(((uintptr_t)raw + huge - 1) & ~(uintptr_t)(huge - 1));
    madvise(base, bytes - huge, c < 2 ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    copy[c] = (float*)base;
    copy[c + 1] = (float*)(base + 32);  /* the same pages, each row 32 bytes on */
    /* Random numbers, as in a model: pages of a repeating pattern can be merged by the
       host (same-page merging in a virtual machine), which changes what a read costs. */
    uint64_t s = 0x9E3779B97F4A7C15u;
    for (size_t i = 0; i < floats + 8; ++i) {
      s ^= s << 13, s ^= s >> 7, s ^= s << 17;
      copy[c][i] = (float)(int32_t)(s >> 40) * 1e-9f;
    }
  }
  float* x = malloc((dim > ff ? dim : ff) * sizeof(float));
  float* out = malloc(kVocab * sizeof(float));
  for (size_t i = 0; i < (dim > ff ? dim : ff); ++i) x[i] = 0.5f;
  double* t = malloc(kCopies * rounds * sizeof *t);
  volatile float sink = 0;
  for (size_t r = 0; r < rounds; ++r)
    for (int c = 0; c < kCopies; ++c) {
      const double t0 = now();
      const float* a = copy[c];
      for (size_t i = 0; i < n_shapes; ++i) {
        matvec(a, shapes[i].rows, shapes[i].cols, x, out);
        a += shapes[i].rows * shapes[i].cols;
      }
      t[c * rounds + r] = now() - t0;
      sink += out[0];
    }
  printf("f32 weights %.0f MB (dim %zu, ff %zu, %zu layers), %zu rounds, one thread\n\n", floats * 4 / 1e6, dim, ff, layers,
         rounds);
  printf("| copy | median ms per pass | GB/s | speed against huge (median of the rounds' ratios) |\n|---|---|---|---|\n");
  double* v = malloc(rounds * sizeof *v);
  for (int c = 0; c < kCopies; ++c) {
    for (size_t r = 0; r < rounds; ++r) v[r] = t[0 * rounds + r] / t[c * rounds + r];
    const double ratio = median(v, rounds);
    memcpy(v, t + c * rounds, rounds * sizeof *v);
    const double m = median(v, rounds);
    printf("| %s | %.2f | %.1f | %.3f |\n", kNames[c], m * 1e3, floats * 4 / m / 1e9, ratio);
  }
  if (sink < 0) puts("(negative sums)"); /* reads the sums, so that no pass is optimised away */
  return 0;
}
