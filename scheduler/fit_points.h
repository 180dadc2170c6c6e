/* A stored run's point (store/fits.h) as the loss laws take it
 * (sweeps/fit.h): the refits, the next-budget design and the adaptive
 * design read the same rows and fit them the same way. */
#ifndef SS_SCHEDULER_FIT_POINTS_H
#define SS_SCHEDULER_FIT_POINTS_H

#include <math.h>

#include "store/fits.h"
#include "sweeps/fit.h"

/* p in group (-1: none; one group per run is the run's index). */
static inline fit_point sched__fit_point(const store_fit_point *p, int group) {
  return (fit_point){.params = p->params,
                     .tokens = p->tokens,
                     .flops = p->flops,
                     .loss = p->loss,
                     .batch_size = p->batch_size,
                     .steps = p->steps,
                     .lr = p->lr,
                     .group = group};
}

/* A point of the batch and curve laws: the steps taken at batch_size
 * (NAN: not known) to reach loss, at tokens (NAN: not known), in group;
 * no size, compute or rate. */
static inline fit_point sched__steps_point(double steps, double batch_size, double loss,
                                           double tokens, int group) {
  fit_point p = {.params = NAN, .tokens = tokens, .flops = NAN, .lr = NAN, .group = group};
  p.loss = loss;
  p.batch_size = batch_size;
  p.steps = steps;
  return p;
}

#endif
