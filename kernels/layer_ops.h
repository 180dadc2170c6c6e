/* The kern_ops slots a layer file fills, one list for both backends
 * (kernels/cpu, kernels/cuda). X(slot) names the slot and the file's static
 * function of the same name, so a backend that lacks one of a layer's ops
 * fails to compile instead of leaving the slot NULL until a run calls it. */
#ifndef SS_KERNELS_LAYER_OPS_H
#define SS_KERNELS_LAYER_OPS_H

/* elementwise, less residual_forward (its own file on CUDA) and round (the
 * function is round_: round is libm's) */
#define KERN__OPS_ELEMENTWISE(X) X(gelu_forward) X(gelu_backward) X(axpy) X(scale) X(to_x)

/* the optimizer step's reductions and its gradient factor */
#define KERN__OPS_STEP(X) X(sumsq) X(accumulate) X(mean_into) X(sumsq_into) X(step_scale)

/* the llama family's */
#define KERN__OPS_LLAMA(X) \
  X(rmsnorm_forward)       \
  X(rmsnorm_backward)      \
  X(qknorm_forward)        \
  X(qknorm_backward)       \
  X(rope_forward)          \
  X(rope_backward)         \
  X(swiglu_forward)        \
  X(swiglu_backward)       \
  X(scale_x)

/* X for a fill function whose table is `o` */
#define KERN__FILL(slot) o->slot = slot;

#endif
