/* runcfg/memory.c against what the trainer really allocates.
 *
 * How it is measured: the model and the optimizer state are allocated the
 * way trn_train does (trn_model_init, trn_optim_init) through the CPU
 * backend with its alloc/free wrapped by a counter; the bytes live at the
 * peak must equal the estimate's parameters + gradients + optimizer +
 * activations (the backend rounds each allocation up to 64 bytes: at most
 * 64 bytes x a dozen buffers apart); for a CUDA config, with the CPU twin of
 * the CUDA backend's flash attention in the table, as the CUDA run lays out
 * its buffers; in both model families (gpt2, and llama with and without
 * QK-norm, tied and untied, with recompute). Then one real run (trn_train, a model
 * whose attention buffers make the estimate ~0.3 GiB) compares the growth of
 * the process's peak RSS with the estimate: generous bounds, because RSS
 * also holds OpenBLAS's buffers and the allocator's slack. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "check.h"
#include "common/err.h"
#include "runcfg/memory.h"
#include "runcfg/runcfg.h"
#include "trainer/model.h"
#include "trainer/optim.h"
#include "trainer/train.h"

static const kern_ops *real_ops;
static kern_ops counting;
static double live, peak;

/* the size of each block, before it, so that free can count it */
static void *count_alloc(kern_ctx *k, size_t bytes) {
  k->ops = real_ops;
  char *p = real_ops->alloc(k, bytes + 64);
  k->ops = &counting;
  if (!p)
    return NULL;
  *(size_t *)p = bytes;
  live += (double)bytes;
  if (live > peak)
    peak = live;
  return p + 64;
}

static void count_free(kern_ctx *k, void *p) {
  if (!p)
    return;
  char *b = (char *)p - 64;
  live -= (double)*(size_t *)b;
  k->ops = real_ops;
  real_ops->free(k, b);
  k->ops = &counting;
}

static void parse(const char *text, rcfg *c) {
  char err[2048];
  if (rcfg_parse(text, "test", c, err, sizeof err) != 0) {
    fprintf(stderr, "%s\n", err);
    exit(1);
  }
}

/* the trainer's allocations for c, counted */
static double measured(const rcfg *c) {
  kern_ctx k;
  kern_cpu_init(&k, trn_kern_prec(c->precision), 1);
  real_ops = k.ops;
  counting = *k.ops;
  counting.alloc = count_alloc;
  counting.free = count_free;
  if (!strcmp(c->backend, "cuda")) { /* the CUDA backend's flash attention, by its CPU twin */
    counting.flash_attention_forward = kern_cpu_flash_attention_forward;
    counting.flash_attention_backward = kern_cpu_flash_attention_backward;
    /* and its kern_x: bf16 / fp16 values of 2 bytes (only allocated here, never computed on) */
    if (c->precision != RCFG_FP32)
      k.xbytes = 2;
  }
  k.ops = &counting;
  live = peak = 0;
  rcfg_shape s = rcfg_shape_of(c);
  trn_model m;
  trn_optim o;
  int mb = c->train.micro_batch_size;
  CHECK_INT_EQ(trn_model_init(&m, &k, &s, mb, c->memory.recompute, c->train.batch_size > mb), 0);
  CHECK_INT_EQ(trn_optim_init(&o, &m, !strcmp(c->optimizer.name, "adamw8bit")), 0);
  double at_peak = peak;
  trn_optim_free(&o);
  trn_model_free(&m);
  CHECK(live == 0);
  return at_peak;
}

static void test_counted(void) {
  static const char *const configs[] = {
      "{\"model\":{\"n_layer\":2,\"d_model\":64,\"n_head\":4,\"seq_len\":64}}",
      "{\"model\":{\"n_layer\":3,\"d_model\":48,\"n_head\":3,\"seq_len\":32,\"vocab_size\":300},"
      "\"precision\":\"bf16\",\"optimizer\":{\"name\":\"adamw8bit\"},"
      "\"train\":{\"batch_size\":8,\"micro_batch_size\":2}}",
      "{\"model\":{\"n_layer\":4,\"d_model\":32,\"n_head\":2,\"seq_len\":128},"
      "\"precision\":\"fp16\",\"memory\":{\"recompute\":true},\"train\":{\"batch_size\":4}}",
      /* CUDA: flash attention saves (B, NH, T) where the CPU saves (B, NH, T, T) */
      "{\"model\":{\"n_layer\":2,\"d_model\":64,\"n_head\":4,\"seq_len\":256},"
      "\"backend\":\"cuda\",\"precision\":\"bf16\"}",
      "{\"model\":{\"n_layer\":3,\"d_model\":64,\"n_head\":2,\"seq_len\":128},"
      "\"backend\":\"cuda\",\"memory\":{\"recompute\":true},\"train\":{\"batch_size\":4}}",
      /* llama: no positions or biases, RMSNorm's rstd alone, the SwiGLU's 2F and F; an
       * untied head by default; QK-norm's gains, q and k before it and their rstd */
      "{\"model\":{\"family\":\"llama\",\"n_layer\":2,\"d_model\":64,\"n_head\":4,"
      "\"seq_len\":64}}",
      "{\"model\":{\"family\":\"llama\",\"n_layer\":3,\"d_model\":48,\"n_head\":3,"
      "\"seq_len\":32,\"vocab_size\":300,\"qk_norm\":true,\"tie_embeddings\":true},"
      "\"precision\":\"bf16\",\"optimizer\":{\"name\":\"adamw8bit\"},"
      "\"train\":{\"batch_size\":8,\"micro_batch_size\":2}}",
      "{\"model\":{\"family\":\"llama\",\"n_layer\":4,\"d_model\":32,\"n_head\":2,"
      "\"seq_len\":128,\"qk_norm\":true},\"precision\":\"fp16\",\"memory\":{\"recompute\":true},"
      "\"train\":{\"batch_size\":4}}",
      "{\"model\":{\"family\":\"llama\",\"n_layer\":2,\"d_model\":96,\"n_head\":6,"
      "\"seq_len\":64,\"vocab_size\":500,\"tie_embeddings\":true,\"mlp_multiple_of\":256,"
      "\"parametrization\":\"mup\",\"base_width\":32},\"memory\":{\"recompute\":true}}",
      "{\"model\":{\"family\":\"llama\",\"n_layer\":2,\"d_model\":64,\"n_head\":4,"
      "\"seq_len\":256,\"qk_norm\":true},\"backend\":\"cuda\",\"precision\":\"bf16\"}",
      "{\"model\":{\"family\":\"llama\",\"n_layer\":3,\"d_model\":64,\"n_head\":2,"
      "\"seq_len\":128,\"tie_embeddings\":true},\"backend\":\"cuda\","
      "\"memory\":{\"recompute\":true},\"train\":{\"batch_size\":4}}",
  };
  for (size_t i = 0; i < sizeof configs / sizeof *configs; i++) {
    rcfg c;
    parse(configs[i], &c);
    rcfg_mem e = rcfg_memory(&c);
    double est = e.params + e.grads + e.optimizer + e.activations, got = measured(&c);
    char text[256];
    rcfg_memory_text(&e, text, sizeof text);
    printf("config %zu: estimate %.0f bytes, trainer allocates %.0f (ratio %.6f); %s\n", i, est,
           got, est / got, text);
    CHECK_NEAR(est, got, 64.0 * 16, 0); /* the backend's 64-byte rounding, a dozen buffers */
    CHECK(e.total > est);               /* batch buffers, checkpoint staging on top */
  }
  /* the shape: far beyond any GPU, and the text says so */
  rcfg c;
  parse("{\"model\":{\"n_layer\":2,\"d_model\":64,\"n_head\":4,\"seq_len\":64}}", &c);
  c.model.n_layer = 1024;
  c.model.d_model = 65536;
  c.model.n_head = 512;
  c.model.seq_len = 65536;
  rcfg_mem e = rcfg_memory(&c);
  char text[256];
  rcfg_memory_text(&e, text, sizeof text);
  printf("n_layer 1024, d_model 65536, seq_len 65536: %s\n", text);
  CHECK(e.total > 1e15 && e.params > 2e14);
  CHECK(strstr(text, "parameters") && strstr(text, "optimizer") && strstr(text, "activations"));
}

static long long maxrss(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (long long)ru.ru_maxrss * 1024;
}

static void test_rss(void) {
  rcfg c;
  parse("{\"model\":{\"n_layer\":2,\"d_model\":64,\"n_head\":8,\"seq_len\":512},"
        "\"train\":{\"batch_size\":8,\"tokens\":8192},\"eval\":{\"tokens\":512,"
        "\"every_tokens\":0},\"threads\":1}",
        &c);
  rcfg_mem e = rcfg_memory(&c);
  FILE *out = tmpfile();
  char err[1024];
  long long before = maxrss();
  trn_train_opts o = {.resume_max_step = -1};
  CHECK_INT_EQ(trn_train(&c, &o, out, err, sizeof err), 0);
  long long grew = maxrss() - before;
  fclose(out);
  printf("one real run: estimate %.0f bytes, peak RSS grew %lld (ratio %.3f)\n", e.total, grew,
         (double)grew / e.total);
  /* RSS holds more (OpenBLAS buffers, the loaders, the allocator's slack)
   * and never less than what was touched, less what an earlier test left
   * at the peak: 0.8x to 1.5x */
  CHECK(grew > 0.8 * e.total && grew < 1.5 * e.total);
}

int main(void) {
  test_counted();
  test_rss();
  CHECK_DONE();
}
