/* Read bandwidth of this machine, as the embedding benchmark's yardstick: T threads
   each sum their share of a buffer of N bytes (vectorized loads, nothing written), best
   of R passes. Usage: membw BYTES THREADS [PASSES]; prints GB/s (10^9 bytes per second). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct { const float* p; size_t n; float sum; } Job;

static void* run(void* arg) {
  Job* j = arg;
  float s[16] = {0};
  for (size_t i = 0; i + 16 <= j->n; i += 16)
    for (int k = 0; k < 16; ++k) s[k] += j->p[i + k];
  float t = 0;
  for (int k = 0; k < 16; ++k) t += s[k];
  j->sum = t;
  return NULL;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  if (argc < 3) { fprintf(stderr, "usage: membw BYTES THREADS [PASSES]\n"); return 2; }
  size_t bytes = strtoull(argv[1], NULL, 10);
  int threads = atoi(argv[2]), passes = argc > 3 ? atoi(argv[3]) : 5;
  size_t n = bytes / sizeof(float);
  float* buf = malloc(n * sizeof(float));
  if (!buf) { fprintf(stderr, "membw: out of memory\n"); return 1; }
  for (size_t i = 0; i < n; ++i) buf[i] = (float)(i & 255);
  double best = 1e30, total = 0;
  for (int r = 0; r < passes; ++r) {
    pthread_t th[64];
    Job jobs[64];
    double t0 = now();
    for (int t = 0; t < threads; ++t) {
      jobs[t].p = buf + n * t / threads;
      jobs[t].n = n * (t + 1) / threads - n * t / threads;
      pthread_create(&th[t], NULL, run, &jobs[t]);
    }
    for (int t = 0; t < threads; ++t) { pthread_join(th[t], NULL); total += jobs[t].sum; }
    double dt = now() - t0;
    if (dt < best) best = dt;
  }
  printf("%.2f\n", (double)bytes / best / 1e9);
  return total == -1.0;  /* keep the sums alive */
}
