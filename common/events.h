/* The trainer's output events (docs/trainers.md, the contract): one JSON
 * object per line, {"event": NAME, FIELD: VALUE, ...}, the fields in the
 * order listed here. The built-in trainer writes every line from this
 * table (trainer/emit.h); the worker knows the events by it
 * (worker/report.c). Header-only, in common/ so that the worker can read
 * it without linking the trainer.
 *
 * TRN_EVENTS(F, M) calls TRN_EVENT(name, fields) once per event, where
 * fields is a run of F(name, fmt) or, for step and eval, the metric
 * table's columns (common/metric_row.h) as M(name, kind, line, required,
 * fmt); the caller defines TRN_EVENT, F and M. fmt is a printf format of
 * the value (an "ll" one reads an integer, any other a double), or one of
 * TRN_STR, TRN_BOOL, TRN_JSON (a cJSON value printed by cJSON: the config
 * and what it nests), TRN_NUM (a number as cJSON prints it: the config
 * event's, which cJSON has always written). A field the writer is not
 * given is left out. */
#ifndef SS_COMMON_EVENTS_H
#define SS_COMMON_EVENTS_H

#include "common/metric_row.h"

#define TRN_STR "s"
#define TRN_BOOL "b"
#define TRN_JSON "j"
#define TRN_NUM "n"

/* clang-format off */
#define TRN_EVENTS(F, M) \
TRN_EVENT(config, F(config, TRN_JSON) F(config_hash, TRN_STR) F(checkpoint_dir, TRN_STR) \
          F(params, TRN_NUM) F(nonembedding_params, TRN_NUM) F(flops_per_token, TRN_NUM) \
          F(optimizer_state_bytes, TRN_NUM) F(activation_bytes, TRN_NUM) \
          F(memory_bytes, TRN_NUM) F(b_noise_unit, TRN_STR) F(environment, TRN_JSON) \
          F(val_tokens, TRN_NUM) F(lexicon_digest, TRN_STR) F(entropy_rate, TRN_NUM) \
          F(window_floor, TRN_NUM) F(data_hashes, TRN_JSON)) \
TRN_EVENT(step, SS_METRIC_COLS(M)) \
TRN_EVENT(eval, SS_METRIC_COLS(M)) \
TRN_EVENT(checkpoint, F(step, TRN_NUM) F(tokens, TRN_NUM) F(path, TRN_STR) F(branch, TRN_BOOL)) \
TRN_EVENT(done, F(final_val_loss, "%.17g") F(params, "%lld") F(nonembedding_params, "%lld") \
          F(flops, "%.17g") F(flops_6nd, "%.17g") F(tokens, "%lld") F(steps, "%lld") \
          F(wall_s, "%.6g") F(peak_rss_bytes, "%lld") F(peak_device_bytes, "%lld") \
          F(world_size, "%lld") F(optimizer_state_bytes, "%lld") F(grad_buckets, "%lld")) \
TRN_EVENT(error, F(message, TRN_STR))
/* clang-format on */

/* TRN_EV_<name>: the events' indices */
typedef enum trn_event {
#define TRN_EVENT(name, fields) TRN_EV_##name,
  TRN_EVENTS(_, _)
#undef TRN_EVENT
      TRN_EV_N
} trn_event;

static const char *const trn_event_names[TRN_EV_N] = {
#define TRN_EVENT(name, fields) #name,
    TRN_EVENTS(_, _)
#undef TRN_EVENT
};

#endif
