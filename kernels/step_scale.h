/* The update's gradient factor (kern_ops.step_scale), one formula for the
 * host and the device: every backend returns the bits of this fp64 code
 * (nvcc compiles it with --fmad=false and IEEE sqrt and division, as gcc
 * does on the host). */
#ifndef SS_KERNELS_STEP_SCALE_H
#define SS_KERNELS_STEP_SCALE_H

#include <math.h>

#ifdef __CUDACC__
#define KERN__HOST_DEVICE __host__ __device__
#else
#define KERN__HOST_DEVICE
#endif

/* gnorm2: sum of squares of the gradient of the loss times loss_scale.
 * Returns (clip / gnorm if clip > 0 and gnorm > clip, else 1) / loss_scale
 * with gnorm = sqrt(gnorm2) / loss_scale; 0 when gnorm2 is not finite. */
static inline KERN__HOST_DEVICE float kern__step_scale(double gnorm2, double loss_scale,
                                                       double clip) {
  if (!isfinite(gnorm2))
    return 0.0f;
  double gnorm = sqrt(gnorm2) / loss_scale;
  double c = clip > 0 && gnorm > clip ? clip / gnorm : 1.0;
  return (float)(c / loss_scale);
}

#endif
