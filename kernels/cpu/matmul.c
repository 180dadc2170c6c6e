/* Linear layers through OpenBLAS sgemm (fp32 accumulation). */
#include <cblas.h>

#include "internal.h"

static void matmul_forward(kern_ctx *k, kern_x *out_x, const kern_x *inp, const kern_x *w,
                           const kern_x *b, int N, int C, int OC) {
  float *out = out_x;
  float beta = 0.0f;
  if (b) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < N; r++)
      memcpy(out + (size_t)r * OC, b, (size_t)OC * sizeof(float));
    beta = 1.0f;
  }
  /* out(N,OC) = inp(N,C) @ w(OC,C)^T (+ out) */
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, w, C, beta, out, OC);
  k->ops->round(k, out, (size_t)N * OC, k->prec);
}

static void matmul_backward(kern_ctx *k, kern_x *dinp, float *dw, float *db, const kern_x *dout,
                            const kern_x *inp, const kern_x *w, int N, int C, int OC) {
  /* dinp(N,C) = dout(N,OC) @ w(OC,C) */
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, w, C, 0.0f, dinp,
              C);
  k->ops->round(k, dinp, (size_t)N * C, k->prec);
  /* dw(OC,C) += dout(N,OC)^T @ inp(N,C) */
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dw,
              C);
  if (db)
    kern__colsum_add(db, dout, N, OC);
}

void kern__cpu_matmul(kern_ops *o) {
  o->matmul_forward = matmul_forward;
  o->matmul_backward = matmul_backward;
}
