/* What the worker port reports, wired to the rest of the scheduler
 * (internal.h sched__port_hooks). Apart from sched.c, so that a harness
 * can wire a port as the scheduler does without linking its start-up
 * (tests/fuzz/fuzz_wmsg.c). */
#include <stdint.h>

#include "scheduler/internal.h"

static void on_capacity(void *ud) { sched__place(ud); }

static void on_freed(void *ud) { sched__place_freed(ud); }

static void on_sweep_changed(void *ud, int64_t sweep_id, int refit, int now) {
  if (now)
    sched__sweep_status(ud, sweep_id);
  else
    sched__sweep_touch(ud, sweep_id, refit);
}

sched__wport_hooks sched__port_hooks(sched *s) {
  return (sched__wport_hooks){.ud = s,
                              .on_capacity = on_capacity,
                              .on_freed = on_freed,
                              .on_sweep_changed = on_sweep_changed};
}
