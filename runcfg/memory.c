#include "runcfg/memory.h"

#include "runcfg/flops.h"

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
 * other path saves the probabilities att (B, NH, T, T), both fp32. gpt2:
 * LayerNorm's mean and rstd, the 4C MLP; llama (F = its MLP width): RMSNorm's
 * rstd only, the gate | up (2F) and SwiGLU's output (F), and with QK-norm q
 * and k before it and their rstd per head */
static double layer_bytes(double BT, double C, double NH, double T, int flash, double xs, int llama,
                          double F, int qk_norm) {
  double att = buf(BT / T * NH * T * (flash ? 1 : T), 4); /* lse or att */
  if (llama)
    return 4 * buf(BT * C, xs)                                         /* ln1, atty, resid2, ln2 */
           + 2 * buf(BT, 4)                                            /* ln1 and ln2 rstd */
           + buf(BT * 3 * C, xs)                                       /* qkv */
           + (qk_norm ? buf(BT * 3 * C, xs) + buf(BT * 2 * NH, 4) : 0) /* qkv_pre, qk_rstd */
           + att + buf(BT * 2 * F, xs) + buf(BT * F, xs);              /* fch, fch_gelu */
  return 4 * buf(BT * C, xs)                                           /* ln1, atty, resid2, ln2 */
         + 4 * buf(BT, 4)                                              /* ln1 and ln2 mean, rstd */
         + buf(BT * 3 * C, xs)                                         /* qkv */
         + att + 2 * buf(BT * 4 * C, xs);                              /* fch, fch_gelu */
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
  rcfg_shape sh = rcfg_shape_of(c);
  int llama = sh.family == RCFG_LLAMA, qk = llama && sh.qk_norm;
  double F = rcfg_ffn_hidden(&sh), hs = NH > 0 ? C / NH : 0;
  /* the tensors of trainer/model.c (trn_weights), in order: wte, wpe, ln1w,
   * ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw,
   * fcprojb, qnw, knw, lnfw, lnfb, head. gpt2 has positions, biases and a 4C
   * MLP; llama none of those, the SwiGLU's gate | up (2F) and down (F), the
   * QK-norm gains with qk_norm and a head of its own when untied */
  double b = llama ? 0 : 1; /* gpt2's biases, norm biases, positions */
  double up = llama ? 2 * F : 4 * C, down = llama ? F : 4 * C;
  double qn = qk ? L * hs : 0, head = llama && sh.untied ? V * C : 0;
  double sz[19] = {
      V * C,     b * T * C, L * C,     b * L * C,  L * 3 * C * C, b * L * 3 * C, L * C * C,
      b * L * C, L * C,     b * L * C, L * up * C, b * L * up,    L * C * down,  b * L * C,
      qn,        qn,        C,         b * C,      head};
  double P = 0, blocks = 0;
  for (int i = 0; i < 19; i++) {
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
                +
                (c->memory.recompute ? 1 : L) * layer_bytes(BT, C, NH, T, flash, xs, llama, F, qk) +
                2 * buf(BT * C, xs)            /* proj, lnf */
                + (llama ? 2 : 3) * buf(BT, 4) /* lnf mean (gpt2), rstd; losses */
                + buf(BT * V, xs);             /* logits */
  double back = 3 * buf(BT * C, xs) + buf(BT * 3 * C, xs) + (flash ? 0 : buf(B * NH * T * T, 4));
  /* dresid, dln, datty; dqkv; datt; then gpt2's dfch (4C), llama's dfch (2F) and dact (F) */
  back += llama ? buf(BT * 2 * F, xs) + buf(BT * F, xs) : buf(BT * 4 * C, xs);
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
