/* The memory one training run needs (runcfg/memory.c): what the trainer
 * allocates for a run config, by the same arithmetic as its allocations
 * (trainer/model.c, optim.c, train.c), in either model family (gpt2,
 * llama: runcfg.h model.family), so that the planner can refuse a
 * spec whose runs cannot fit and a worker an assignment its host cannot
 * hold, instead of meeting the OOM killer. */
#ifndef SS_RUNCFG_MEMORY_H
#define SS_RUNCFG_MEMORY_H

#include <stddef.h>

#include "runcfg/runcfg.h"

/* Blocks of the 8-bit optimizer's absmax scales (kernels/kern.h
 * KERN_Q8_BLOCK; the trainer asserts they agree). */
#define RCFG_Q8_BLOCK 256

/* Bytes, as doubles: a spec's worst shapes overflow no integer here. One
 * data-parallel rank holds all of it (a full replica; with ZeRO-1 its
 * share of the optimizer state). */
typedef struct rcfg_mem {
  double params;      /* fp32 master weights, plus the rounded copy in bf16/fp16 */
  double grads;       /* fp32 gradients, plus the micro-batch buffer with accumulation */
  double optimizer;   /* AdamW m and v: fp32, or int8 with fp32 absmax per block */
  double activations; /* saved for backward (per layer, or one layer with
                       * recompute), logits B*T*V, backward scratch, token buffers;
                       * 2-byte values on CUDA at bf16/fp16, fp32 containers on the CPU */
  double other;       /* batch buffers, the checkpoint's staging buffer */
  double total;
} rcfg_mem;

/* The estimate for cfg (micro-batch micro_batch_size sequences of seq_len
 * tokens; the shapes are not re-validated). */
rcfg_mem rcfg_memory(const rcfg *cfg);

/* What the run needs of one device: a GPU run's one rank per GPU; a CPU
 * run's ranks all share the host's memory (world_size times one rank's). */
rcfg_mem rcfg_memory_host(const rcfg *cfg);

/* "1.2 TiB (parameters 300 GiB, gradients ..., optimizer ..., activations
 * ...)" into buf. */
void rcfg_memory_text(const rcfg_mem *m, char *buf, size_t n);

/* "80 GiB", "512 MiB", ... (binary units, 3 significant digits). */
void rcfg_bytes_text(double bytes, char *buf, size_t n);

#endif
