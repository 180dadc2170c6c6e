/* sgemm_rate: this machine's OpenBLAS cblas_sgemm rate, for tests/bench/run.sh.
 *
 * Measures GFLOP/s (2*M*N*K per call) at a fixed thread count on a square
 * 1024 problem and on the shapes a GPT training step issues (row-major
 * activations X[BT][din], weights W[dout][din]):
 *   forward  Y  = X  W^T   (M=BT,   N=dout, K=din)
 *   backward dX = dY W     (M=BT,   N=din,  K=dout)
 *   backward dW = dY^T X   (M=dout, N=din,  K=BT)
 * for the four linears of a block (qkv, attention out, MLP up, MLP down) and
 * the tied vocabulary head. Each rate is the median of several repeats, each
 * repeat timing enough calls to last about 50 ms. "mix" is one training
 * step's linear-layer GEMMs run back to back: total FLOPs / total time.
 *
 * Usage: sgemm_rate [--threads N] [--repeats R] [--bt BT] [--vocab V]
 *                   [--d d1,d2,...] [--quick]
 * --quick measures only the square problem and the mixes (a second or two),
 * so run.sh can sample the rate between training runs on a noisy machine.
 * Prints one JSON object on stdout.
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
  const char *name;
  int ta, tb; /* 1 = transposed */
  int m, n, k;
} gemm_t;

static float *buf_a, *buf_b, *buf_c;

static void alloc_buffers(size_t n) {
  buf_a = aligned_alloc(64, n * sizeof(float));
  buf_b = aligned_alloc(64, n * sizeof(float));
  buf_c = aligned_alloc(64, n * sizeof(float));
  if (!buf_a || !buf_b || !buf_c) {
    fprintf(stderr, "sgemm_rate: out of memory\n");
    exit(1);
  }
  unsigned s = 12345u;
  for (size_t i = 0; i < n; i++) {
    s = s * 1103515245u + 12345u;
    buf_a[i] = (float)((s >> 8) & 0xffff) / 65536.0f - 0.5f;
    buf_b[i] = buf_a[(i * 7919u) % n];
    buf_c[i] = 0.0f;
  }
}

static void run_gemm(const gemm_t *g) {
  /* row-major; op(A) is m x k, op(B) is k x n */
  int lda = g->ta ? g->m : g->k;
  int ldb = g->tb ? g->k : g->n;
  cblas_sgemm(CblasRowMajor, g->ta ? CblasTrans : CblasNoTrans, g->tb ? CblasTrans : CblasNoTrans,
              g->m, g->n, g->k, 1.0f, buf_a, lda, buf_b, ldb, 0.0f, buf_c, g->n);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Runs the list of GEMMs back to back; returns the median and max GFLOP/s
 * over `repeats` timed repeats. */
static void measure(const gemm_t *gs, int n_gs, int repeats, double *median, double *best) {
  double flops = 0.0;
  for (int i = 0; i < n_gs; i++)
    flops += 2.0 * gs[i].m * (double)gs[i].n * gs[i].k;
  /* warm up and size the batch so a repeat lasts ~50 ms */
  double t0 = now_s();
  for (int i = 0; i < n_gs; i++)
    run_gemm(&gs[i]);
  for (int i = 0; i < n_gs; i++)
    run_gemm(&gs[i]);
  double once = (now_s() - t0) / 2.0;
  int calls = once > 0 ? (int)(0.05 / once) : 1;
  if (calls < 1)
    calls = 1;
  double *rates = malloc((size_t)repeats * sizeof(double));
  for (int r = 0; r < repeats; r++) {
    double t = now_s();
    for (int c = 0; c < calls; c++)
      for (int i = 0; i < n_gs; i++)
        run_gemm(&gs[i]);
    double dt = now_s() - t;
    rates[r] = flops * calls / dt / 1e9;
  }
  qsort(rates, (size_t)repeats, sizeof(double), cmp_double);
  *median = repeats % 2 ? rates[repeats / 2] : 0.5 * (rates[repeats / 2 - 1] + rates[repeats / 2]);
  *best = rates[repeats - 1];
  free(rates);
}

/* The linear-layer GEMMs of one training step at width d (one block's worth
 * and the head; the per-layer mix is the same for every layer). */
static int step_gemms(gemm_t *out, int bt, int d, int vocab) {
  struct {
    const char *name;
    int din, dout;
  } lin[] = {
      {"qkv", d, 3 * d},      {"attn_out", d, d}, {"mlp_up", d, 4 * d},
      {"mlp_down", 4 * d, d}, {"head", d, vocab},
  };
  int n = 0;
  for (size_t i = 0; i < sizeof lin / sizeof lin[0]; i++) {
    out[n++] = (gemm_t){lin[i].name, 0, 1, bt, lin[i].dout, lin[i].din};
    out[n++] = (gemm_t){lin[i].name, 0, 0, bt, lin[i].din, lin[i].dout};
    out[n++] = (gemm_t){lin[i].name, 1, 0, lin[i].dout, lin[i].din, bt};
  }
  return n;
}

static const char *pass_name(const gemm_t *g) {
  if (!g->ta && g->tb)
    return "fwd";
  if (!g->ta && !g->tb)
    return "bwd_dx";
  return "bwd_dw";
}

int main(int argc, char **argv) {
  int threads = 2, repeats = 7, bt = 2048, vocab = 256;
  int ds[16] = {128, 256, 384};
  int n_ds = 3, quick = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--threads") && i + 1 < argc)
      threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--repeats") && i + 1 < argc)
      repeats = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--bt") && i + 1 < argc)
      bt = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--vocab") && i + 1 < argc)
      vocab = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--quick"))
      quick = 1;
    else if (!strcmp(argv[i], "--d") && i + 1 < argc) {
      n_ds = 0;
      for (char *s = strtok(argv[++i], ","); s && n_ds < 16; s = strtok(NULL, ","))
        ds[n_ds++] = atoi(s);
    } else {
      fprintf(stderr, "usage: sgemm_rate [--threads N] [--repeats R] "
                      "[--bt BT] [--vocab V] [--d d1,d2,...] "
                      "[--quick]\n");
      return 2;
    }
  }
  if (threads < 1 || repeats < 1 || bt < 1 || vocab < 1 || n_ds < 1) {
    fprintf(stderr, "sgemm_rate: bad arguments\n");
    return 2;
  }
  openblas_set_num_threads(threads);

  size_t need = 1024 * 1024;
  for (int i = 0; i < n_ds; i++) {
    size_t d = (size_t)ds[i];
    size_t big = (size_t)bt * 4 * d;
    if ((size_t)bt * vocab > big)
      big = (size_t)bt * vocab;
    if (16 * d * d > big)
      big = 16 * d * d;
    if (big > need)
      need = big;
  }
  alloc_buffers(need);

  printf("{\"threads\": %d, \"openblas_threads\": %d, \"repeats\": %d, "
         "\"openblas_config\": \"%s\", \"openblas_corename\": \"%s\", "
         "\"openblas_parallel\": %d",
         threads, openblas_get_num_threads(), repeats, openblas_get_config(),
         openblas_get_corename(), openblas_get_parallel());

  double med, best;
  gemm_t sq = {"square", 0, 0, 1024, 1024, 1024};
  measure(&sq, 1, repeats, &med, &best);
  printf(", \"square1024_gflops\": %.3f, \"square1024_gflops_max\": %.3f", med, best);
  printf(", \"shapes\": [");
  int first = 1;
  for (int i = 0; i < n_ds && !quick; i++) {
    gemm_t gs[32];
    int n = step_gemms(gs, bt, ds[i], vocab);
    for (int j = 0; j < n; j++) {
      measure(&gs[j], 1, repeats, &med, &best);
      printf("%s{\"d\": %d, \"gemm\": \"%s\", \"pass\": \"%s\", "
             "\"M\": %d, \"N\": %d, \"K\": %d, \"gflops\": %.3f, "
             "\"gflops_max\": %.3f}",
             first ? "" : ", ", ds[i], gs[j].name, pass_name(&gs[j]), gs[j].m, gs[j].n, gs[j].k,
             med, best);
      first = 0;
    }
  }
  printf("], \"mix\": [");
  for (int i = 0; i < n_ds; i++) {
    gemm_t gs[32];
    int n = step_gemms(gs, bt, ds[i], vocab);
    measure(gs, n, repeats, &med, &best);
    printf("%s{\"d\": %d, \"bt\": %d, \"vocab\": %d, \"gflops\": %.3f, "
           "\"gflops_max\": %.3f}",
           i ? ", " : "", ds[i], bt, vocab, med, best);
  }
  printf("]}\n");
  free(buf_a);
  free(buf_b);
  free(buf_c);
  return 0;
}
