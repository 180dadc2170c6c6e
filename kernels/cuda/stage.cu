/* ops->from_host without waiting for the device: the bytes are copied into
 * one of STAGE_SLOTS pinned slots and uploaded from there on the stream, so
 * the caller may reuse its buffer at once and the host runs ahead of the
 * device (the tokens of each micro-batch no longer cost a stream
 * synchronisation). A slot is reused once its last upload is done (its
 * event): the host is then at most STAGE_SLOTS uploads ahead. A copy larger
 * than a slot (weights at load or resume) waits for the stream instead. */
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/internal.cuh"

#define STAGE_SLOTS 8
#define STAGE_SLOT_BYTES ((size_t)1 << 20)

struct kern__cu_stage {
  char *pinned; /* STAGE_SLOTS x STAGE_SLOT_BYTES */
  cudaEvent_t done[STAGE_SLOTS];
  int next;
};

void kern__cu_stage_init(kern__cu *c) {
  kern__cu_stage *s = (kern__cu_stage *)calloc(1, sizeof *s);
  if (!s) {
    fprintf(stderr, "%s:%d: out of host memory\n", __FILE__, __LINE__);
    exit(1);
  }
  CUDA_CHECK(cudaMallocHost(&s->pinned, STAGE_SLOTS * STAGE_SLOT_BYTES));
  for (int i = 0; i < STAGE_SLOTS; i++)
    CUDA_CHECK(cudaEventCreateWithFlags(&s->done[i], cudaEventDisableTiming));
  c->stage = s;
}

void kern__cu_stage_free(kern__cu *c) {
  kern__cu_stage *s = c->stage;
  if (!s)
    return;
  for (int i = 0; i < STAGE_SLOTS; i++)
    CUDA_CHECK(cudaEventDestroy(s->done[i]));
  CUDA_CHECK(cudaFreeHost(s->pinned));
  free(s);
  c->stage = NULL;
}

void kern__cu_upload(kern_ctx *k, void *dst, const void *src, size_t bytes) {
  kern__cu *c = kern__cu_of(k);
  kern__cu_stage *s = c->stage;
  if (bytes > STAGE_SLOT_BYTES) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream));
    CUDA_CHECK(cudaStreamSynchronize(c->stream));
    return;
  }
  int i = s->next;
  s->next = (i + 1) % STAGE_SLOTS;
  CUDA_CHECK(cudaEventSynchronize(s->done[i])); /* the slot's last upload has left */
  char *slot = s->pinned + (size_t)i * STAGE_SLOT_BYTES;
  memcpy(slot, src, bytes);
  CUDA_CHECK(cudaMemcpyAsync(dst, slot, bytes, cudaMemcpyHostToDevice, c->stream));
  CUDA_CHECK(cudaEventRecord(s->done[i], c->stream));
}
