#include "runcfg/memory.h"

#include <stdio.h>
#include <string.h>

/* bytes of a buffer of n elements of es bytes as the model carves it:
 * rounded up to 64 */
static double buf(double n, double es) {
  double b = n * es;
  return b < 1e18 ? (double)(((unsigned long long)b + 63) / 64 * 64) : b;
}

/* bytes of one layer's saved activations (trainer/model.c layer_acts), xs
 * the bytes of one kern_x: flash attention saves lse (B, NH, T) where the
 * other path saves the probabilities att (B, NH, T, T), both fp32 */
static double layer_bytes(double BT, double C, double NH, double T, int flash, double xs) {
  return 4 * buf(BT * C, xs)                         /* ln1, atty, resid2, ln2 */
         + 4 * buf(BT, 4)                            /* ln1 and ln2 mean, rstd */
         + buf(BT * 3 * C, xs)                       /* qkv */
         + buf(BT / T * NH * T * (flash ? 1 : T), 4) /* lse or att */
         + 2 * buf(BT * 4 * C, xs);                  /* fch, fch_gelu */
}

/* kernels/kern.h's kern_x: the CUDA backend stores activations, their
 * gradients and the weights' rounded copy as bf16 or fp16 themselves; the
 * CPU in fp32 containers */
static double x_bytes(const rcfg *c) {
  return strcmp(c->backend, "cuda") == 0 && c->precision != RCFG_FP32 ? 2 : 4;
}

/* trainer/model.c's use_flash: the CUDA backend's flash attention, at
 * these head sizes; the CPU backend has none */
static int flash_attention(const rcfg *c) {
  int hs = c->model.n_head > 0 ? c->model.d_model / c->model.n_head : 0;
  return strcmp(c->backend, "cuda") == 0 && (hs == 16 || hs == 32 || hs == 64);
}

rcfg_mem rcfg_memory(const rcfg *c) {
  rcfg_mem m;
  memset(&m, 0, sizeof m);
  double L = c->model.n_layer, C = c->model.d_model, NH = c->model.n_head;
  double T = c->model.seq_len, V = c->model.vocab_size;
  double B = c->train.micro_batch_size > 0 ? c->train.micro_batch_size : c->train.batch_size;
  double BT = B * T;
  int flash = flash_attention(c);
  double xs = x_bytes(c);
  /* the tensors of trainer/model.c, in order */
  double sz[16] = {V * C,         T * C, L * C, L * C, L * 3 * C * C, L * 3 * C,
                   L * C * C,     L * C, L * C, L * C, L * 4 * C * C, L * 4 * C,
                   L * C * 4 * C, L * C, C,     C};
  double P = 0, blocks = 0;
  for (int i = 0; i < 16; i++) {
    P += sz[i];
    blocks += sz[i] < 1e18
                  ? (double)(((unsigned long long)sz[i] + RCFG_Q8_BLOCK - 1) / RCFG_Q8_BLOCK)
                  : sz[i] / RCFG_Q8_BLOCK;
  }
  m.params = 4 * P + (c->precision == RCFG_FP32 ? 0 : xs * P); /* master, rounded copy */
  m.grads = 4 * P * (c->train.batch_size > B ? 2 : 1);
  m.optimizer = strcmp(c->optimizer.name, "adamw8bit") ? 8 * P : 2 * P + 8 * blocks;
  if (c->optimizer.zero && c->world_size > 1) /* ZeRO-1: this rank's shard */
    m.optimizer /= c->world_size;
  double acts = (L + 1) * buf(BT * C, xs) /* block inputs */
                + (c->memory.recompute ? 1 : L) * layer_bytes(BT, C, NH, T, flash, xs) +
                2 * buf(BT * C, xs) /* proj, lnf */
                + 3 * buf(BT, 4)    /* lnf mean, rstd; losses */
                + buf(BT * V, xs);  /* logits */
  double back = 3 * buf(BT * C, xs) + buf(BT * 3 * C, xs) + (flash ? 0 : buf(B * NH * T * T, 4)) +
                buf(BT * 4 * C, xs);             /* dresid, dln, datty; dqkv; datt; dfch */
  m.activations = acts + back + 2 * 4 * BT + 64; /* + tokens, targets; the step's scalars */
  double nval = (double)(c->eval.tokens / (c->model.seq_len > 0 ? c->model.seq_len : 1));
  m.other = 4 * (BT + 1) + 4 * (nval * T + 1);
  if (c->checkpoint.every_tokens > 0) /* staging: the larger of weights and optimizer state */
    m.other += 4 * P > m.optimizer ? 4 * P : m.optimizer;
  m.total = m.params + m.grads + m.optimizer + m.activations + m.other;
  return m;
}

void rcfg_bytes_text(double b, char *buf, size_t n) {
  static const char *const unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (b >= 1024 && u < 6) {
    b /= 1024;
    u++;
  }
  snprintf(buf, n, "%.3g %s", b, unit[u]);
}

void rcfg_memory_text(const rcfg_mem *m, char *buf, size_t n) {
  char t[32], p[32], g[32], o[32], a[32];
  rcfg_bytes_text(m->total, t, sizeof t);
  rcfg_bytes_text(m->params, p, sizeof p);
  rcfg_bytes_text(m->grads, g, sizeof g);
  rcfg_bytes_text(m->optimizer, o, sizeof o);
  rcfg_bytes_text(m->activations, a, sizeof a);
  snprintf(buf, n, "%s (parameters %s, gradients %s, optimizer %s, activations %s)", t, p, g, o, a);
}

rcfg_mem rcfg_memory_host(const rcfg *cfg) {
  rcfg_mem m = rcfg_memory(cfg);
  if (strcmp(cfg->backend, "cpu") == 0 && cfg->world_size > 1) {
    double n = cfg->world_size;
    m.params *= n;
    m.grads *= n;
    m.optimizer *= n;
    m.activations *= n;
    m.other *= n;
    m.total *= n;
  }
  return m;
}
