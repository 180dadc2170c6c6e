/* $.adaptive (spec.h spec_adaptive; docs/sweeps.md "An adaptive design"). */
#include <math.h>
#include <string.h>

#include "sweeps/spec.h"
#include "sweeps/spec_json.h"

/* the Chinchilla law has 5 parameters, and its fit asks for 7 points: a
 * first round must fit it */
#define MIN_INITIAL 7

void spec__parse_adaptive(spec_adaptive *a, json_t *root, int method, int lr_tune,
                          size_t candidates, spec_problems *pr) {
  json_t *sec = spec__get_object(
      pr, root, "$", "adaptive", 0,
      "{\"question\": \"n_opt\" or \"loss\", \"flops\": C*, \"precision\", \"compute\", ...}");
  if (!sec)
    return;
  static const char *const keys[] = {"question",  "flops",   "params",    "tokens",
                                     "precision", "compute", "initial",   "round",
                                     "bootstrap", "seed",    "criterion", NULL};
  spec__check_keys(pr, sec, "$.adaptive", keys);
  a->present = 1;
  if (method != SPEC_ISOFLOP)
    spec_problem_add(pr, "$.adaptive",
                     "found beside method \"%s\", expected method \"isoflop\": its runs are the "
                     "candidates the adaptive design chooses from",
                     spec_method_name((spec_method)method));
  if (lr_tune)
    spec_problem_add(pr, "$.adaptive",
                     "found with $.lr_tune; expected one of them: a study whose rate is tuned "
                     "first is not designed adaptively (yet)");
  static const char *const questions[] = {"n_opt", "loss", NULL};
  const char *q = spec__get_string(pr, sec, "$.adaptive", "question", questions, 0,
                                   "the question the study answers");
  a->question = q && !strcmp(q, "loss") ? SPEC_Q_LOSS : SPEC_Q_N_OPT;
  if (a->question == SPEC_Q_N_OPT) {
    spec__get_number(pr, sec, "$.adaptive", "flops", &a->flops, 1, 1e30, 0, 1,
                     "the compute C* (FLOPs, counted as 6ND) whose optimal N and D are asked, "
                     "from 1 to 1e30");
    for (int k = 0; k < 2; k++) {
      const char *key = k ? "tokens" : "params";
      if (json_object_get(sec, key))
        spec_problem_add(pr, k ? "$.adaptive.tokens" : "$.adaptive.params",
                         "found with question \"n_opt\"; expected it only with question "
                         "\"loss\"");
    }
  } else {
    spec__get_number(pr, sec, "$.adaptive", "params", &a->params, 1, 1e15, 0, 1,
                     "the non-embedding parameters N whose loss is asked, from 1 to 1e15");
    spec__get_number(pr, sec, "$.adaptive", "tokens", &a->tokens, 1, 1e18, 0, 1,
                     "the tokens D whose loss is asked, from 1 to 1e18");
    if (json_object_get(sec, "flops"))
      spec_problem_add(pr, "$.adaptive.flops",
                       "found with question \"loss\"; expected it only with question \"n_opt\"");
  }
  a->precision =
      a->question == SPEC_Q_LOSS ? SPEC_ADAPTIVE_PRECISION_LOSS : SPEC_ADAPTIVE_PRECISION_N_OPT;
  spec__get_number(pr, sec, "$.adaptive", "precision", &a->precision, 1e-4, 10, 0, 0,
                   "the half-width of the answer's 95% interval wanted, relative to it: from "
                   "0.0001 to 10 (0.25: within +-25%)");
  spec__get_number(pr, sec, "$.adaptive", "compute", &a->compute, 1, 1e30, 0, 1,
                   "the FLOPs the study may train, from 1 to 1e30");
  int most = candidates > 1 ? (int)fmin((double)candidates - 1, 100000) : MIN_INITIAL;
  a->initial = SPEC_ADAPTIVE_INITIAL < most ? SPEC_ADAPTIVE_INITIAL : most;
  if (json_object_get(sec, "initial") && candidates > 0 && most < MIN_INITIAL)
    spec_problem_add(pr, "$.adaptive.initial",
                     "found %zu candidate runs in $.isoflop; expected at least %d (a first round "
                     "of %d to fit the law, and one more to choose)",
                     candidates, MIN_INITIAL + 1, MIN_INITIAL);
  else
    spec__get_int(pr, sec, "$.adaptive", "initial", &a->initial, MIN_INITIAL,
                  most < MIN_INITIAL ? MIN_INITIAL : most, 0);
  if (!json_object_get(sec, "initial") && candidates > 0 && candidates < MIN_INITIAL + 1)
    spec_problem_add(pr, "$.isoflop",
                     "found %zu candidate runs; expected at least %d for $.adaptive (a first "
                     "round of %d to fit the law, and one more to choose)",
                     candidates, MIN_INITIAL + 1, MIN_INITIAL);
  a->round = SPEC_ADAPTIVE_ROUND;
  spec__get_int(pr, sec, "$.adaptive", "round", &a->round, 1, 256, 0);
  a->bootstrap = SPEC_ADAPTIVE_BOOTSTRAP;
  spec__get_int(pr, sec, "$.adaptive", "bootstrap", &a->bootstrap, 50, 5000, 0);
  static const char *const crits[] = {"linear", "reweight", NULL};
  const char *cr = spec__get_string(pr, sec, "$.adaptive", "criterion", crits, 0,
                                    "the criterion that chooses each round");
  a->criterion = cr && !strcmp(cr, "reweight") ? SPEC_CRIT_REWEIGHT : SPEC_CRIT_LINEAR;
  double seed = 0;
  if (spec__get_number(pr, sec, "$.adaptive", "seed", &seed, 0, 9007199254740992.0, 1, 0,
                       "a whole number from 0 to 2^53"))
    a->seed = (uint64_t)seed;
}
