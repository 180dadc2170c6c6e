/* Fair share's order and limits (scheduler/share.c), against plain
 * expectations: people of equal usage alternate; less usage goes first;
 * ties fall back to priority, then sweep order; a person's own order is
 * kept; a GPU limit counts the GPUs in use and those given in the pass. */
#include <string.h>

#include "scheduler/share.h"
#include "tests/check.h"

static store_queued run(int64_t id, int64_t owner, int64_t sweep, int priority, double usage) {
  return (store_queued){.id = id,
                        .slots = 1,
                        .owner_id = owner,
                        .sweep_id = sweep,
                        .priority = priority,
                        .owner_usage = usage,
                        .owner_max_gpus = -1};
}

static void ids(const store_queued *r, int n, int64_t *out) {
  for (int i = 0; i < n; i++)
    out[i] = r[i].id;
}

int main(void) {
  /* two people with no usage: they alternate, the earlier sweep first */
  store_queued a[6] = {run(1, 7, 1, 0, 0), run(2, 7, 1, 0, 0), run(3, 7, 1, 0, 0),
                       run(4, 9, 2, 0, 0), run(5, 9, 2, 0, 0), run(6, 9, 2, 0, 0)};
  int64_t got[6];
  CHECK_INT_EQ(sched__share_order(a, 6), 0);
  ids(a, 6, got);
  const int64_t alternate[6] = {1, 4, 2, 5, 3, 6};
  CHECK(!memcmp(got, alternate, sizeof got));

  /* person 7 has used 2 runs' worth (2 x 600 s): person 9 takes two first */
  store_queued b[4] = {run(1, 7, 1, 0, 1200), run(2, 7, 1, 0, 1200), run(3, 9, 2, 0, 0),
                       run(4, 9, 2, 0, 0)};
  sched__share_order(b, 4);
  ids(b, 4, got);
  CHECK_INT_EQ(got[0], 3);
  CHECK_INT_EQ(got[1], 4);
  CHECK_INT_EQ(got[2], 1);

  /* equal usage: the higher priority first, even in a later sweep */
  store_queued c[2] = {run(1, 7, 1, 0, 50), run(2, 9, 2, 5, 50)};
  sched__share_order(c, 2);
  CHECK_INT_EQ(c[0].id, 2);

  /* people interleaved (placement's cache): each one's own order kept */
  store_queued d[4] = {run(1, 7, 1, 0, 0), run(2, 9, 2, 0, 1e9), run(3, 7, 1, 0, 0),
                       run(4, 9, 2, 0, 1e9)};
  sched__share_order(d, 4);
  ids(d, 4, got);
  const int64_t regrouped[4] = {1, 3, 2, 4};
  CHECK(!memcmp(got, regrouped, sizeof regrouped));

  /* the expected device-seconds: 2 GPUs x 1e18 FLOPs / 1e15 FLOP/s */
  store_queued g = run(1, 7, 1, 0, 0);
  g.gpus = 2;
  g.flops = 1e18;
  g.throughput = 1e15;
  CHECK(sched__share_expected_s(&g) == 2000);
  g.throughput = 0;
  CHECK(sched__share_expected_s(&g) == 2 * SCHED__SHARE_EST_S);

  /* a 1-GPU limit with none in use: one 1-GPU run, then no more */
  static sched__share_pass p;
  store_queued l = run(1, 7, 1, 0, 0);
  l.gpus = 1;
  l.owner_max_gpus = 1;
  CHECK(sched__share_allows(&p, &l));
  sched__share_took(&p, &l);
  CHECK(!sched__share_allows(&p, &l));
  store_queued other = run(2, 9, 2, 0, 0); /* no limit */
  other.gpus = 4;
  CHECK(sched__share_allows(&p, &other));
  store_queued cpu = l; /* a CPU run of the limited person */
  cpu.gpus = 0;
  CHECK(sched__share_allows(&p, &cpu));
  store_queued busy = l; /* another pass: 1 GPU already in use */
  static sched__share_pass q;
  busy.owner_gpus = 1;
  CHECK(!sched__share_allows(&q, &busy));
  CHECK_DONE();
}
