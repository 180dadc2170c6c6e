/* Compute accounting and fair share's figures (usage.h). */
#include "store/usage.h"

#include <stdio.h>
#include <stdlib.h>

#include "store/internal.h"

void store_usage_start(db *d, int half_life_s, store_done_cb cb, void *ud) {
  store__call *c = store__exec_call(cb, ud);
  if (!c)
    return;
  char hl[24];
  const char *sqls[3] = {
      "UPDATE share_settings SET half_life_s = $1::float8", "DELETE FROM share_usage",
      "INSERT INTO share_usage (owner_id, device_s, at) SELECT a.owner_id, "
      "sum(a.devices * extract(epoch FROM a.ended_at - a.started_at)::float8 * power(0.5, "
      "extract(epoch FROM now() - a.ended_at)::float8 / $1::float8)), now() FROM attempt_usage a "
      "WHERE a.ended_at IS NOT NULL AND a.owner_id IS NOT NULL GROUP BY a.owner_id"};
  const char *p[1] = {store__itoa(hl, sizeof hl, half_life_s)};
  const char *const *ps[3] = {p, NULL, p};
  const int np[3] = {1, 0, 1};
  db_tx(d, 3, sqls, np, ps, store__on_exec, c);
}

/* the attempts a usage document counts ($1 since or NULL, $2 the person
 * or 0) */
#define USAGE_ATTEMPTS                                                                   \
  "a AS (SELECT * FROM attempt_accounting WHERE ($1::timestamptz IS NULL OR started_at " \
  ">= $1::timestamptz) AND ($2::bigint = 0 OR owner_id = $2::bigint)) "

static const char by_person[] =
    "WITH " USAGE_ATTEMPTS ", "
    "q AS (SELECT owner_id, count(*) AS queued_runs, coalesce(sum(flops), 0) AS queued_flops "
    "FROM runs WHERE status = 'queued' GROUP BY owner_id), "
    "s AS (SELECT e.owner_id, e.usage_s, e.gpus, rank() OVER (ORDER BY e.usage_s) AS standing "
    "FROM (SELECT us.id AS owner_id, coalesce(f.usage_s, 0) AS usage_s, coalesce(f.gpus, 0) AS "
    "gpus FROM users us LEFT JOIN share_effective f ON f.owner_id = us.id WHERE us.id IN "
    "(SELECT owner_id FROM q)) e), "
    "g AS (SELECT us.id, us.name AS person, " STORE__USAGE_SUMS
    "FROM users us LEFT JOIN a ON a.owner_id = us.id WHERE $2::bigint = 0 OR us.id = $2::bigint "
    "GROUP BY us.id, us.name) "
    "SELECT json_build_object('since', $1::timestamptz, 'by', 'person', 'half_life_s', "
    "(SELECT half_life_s FROM share_settings), 'people_queued', (SELECT count(*) FROM s), "
    "'rows', coalesce(json_agg(json_build_object('person', g.person, 'attempts', g.attempts, "
    "'runs', g.runs, 'gpu_s', g.gpu_s, 'cpu_slot_s', g.cpu_slot_s, 'device_s', g.device_s, "
    "'steps_kept', g.steps_kept, 'steps_lost', g.steps_lost, 'flops_trained', g.flops_trained, "
    "'flops_lost', g.flops_lost, 'retried_attempts', g.retried_attempts, 'retried_device_s', "
    "g.retried_device_s, 'effective_usage_s', coalesce(f.usage_s, 0), 'gpus_in_use', "
    "coalesce(f.gpus, 0), 'standing', s.standing, 'queued_runs', coalesce(q.queued_runs, 0), "
    "'queued_flops', coalesce(q.queued_flops, 0), 'limits', json_build_object('max_gpus', "
    "l.max_gpus, 'max_queued_runs', l.max_queued_runs, 'max_queued_flops', l.max_queued_flops)) "
    "ORDER BY coalesce(f.usage_s, 0) DESC, g.person), '[]')) "
    "FROM g LEFT JOIN share_effective f ON f.owner_id = g.id LEFT JOIN s ON s.owner_id = g.id "
    "LEFT JOIN q ON q.owner_id = g.id LEFT JOIN user_limits l ON l.user_id = g.id";

static const char by_sweep[] =
    "WITH " USAGE_ATTEMPTS ", "
    "g AS (SELECT a.sweep_id, " STORE__USAGE_SUMS "FROM a GROUP BY a.sweep_id) "
    "SELECT json_build_object('since', $1::timestamptz, 'by', 'sweep', 'half_life_s', "
    "(SELECT half_life_s FROM share_settings), 'rows', coalesce(json_agg(json_build_object("
    "'sweep_id', g.sweep_id, 'name', sw.name, 'person', us.name, 'attempts', g.attempts, 'runs', "
    "g.runs, 'gpu_s', g.gpu_s, 'cpu_slot_s', g.cpu_slot_s, 'device_s', g.device_s, 'steps_kept', "
    "g.steps_kept, 'steps_lost', g.steps_lost, 'flops_trained', g.flops_trained, 'flops_lost', "
    "g.flops_lost, 'retried_attempts', g.retried_attempts, 'retried_device_s', "
    "g.retried_device_s) ORDER BY g.sweep_id), '[]')) "
    "FROM g JOIN sweeps sw ON sw.id = g.sweep_id JOIN users us ON us.id = sw.owner_id";

void store_usage_json(db *d, const char *since, const char *by, int64_t only, store_json_cb cb,
                      void *ud) {
  char who[24];
  const char *p[2] = {since, store__itoa(who, sizeof who, only)};
  store__query_json(d, by && by[0] == 's' ? by_sweep : by_person, 2, p, cb, ud);
}

void store_usage_sweep(db *d, int64_t sweep_id, store_json_cb cb, void *ud) {
  store__query_json_id(d,
                       "WITH a AS (SELECT * FROM attempt_accounting WHERE sweep_id = $1) "
                       "SELECT row_to_json(g) FROM (SELECT " STORE__USAGE_SUMS
                       "FROM a) g WHERE EXISTS (SELECT 1 FROM sweeps WHERE id = $1)",
                       sweep_id, cb, ud);
}

void store_usage_set_limits(db *d, const char *name, const store_limits *l, store_done_cb cb,
                            void *ud) {
  const char *p[4] = {name, l->max_gpus, l->max_queued_runs, l->max_queued_flops};
  store__exec(d,
              "INSERT INTO user_limits (user_id, max_gpus, max_queued_runs, max_queued_flops) "
              "SELECT id, $2::int, $3::int, $4::float8 FROM users WHERE name = $1 AND "
              "revoked_at IS NULL ON CONFLICT (user_id) DO UPDATE SET max_gpus = "
              "EXCLUDED.max_gpus, max_queued_runs = EXCLUDED.max_queued_runs, "
              "max_queued_flops = EXCLUDED.max_queued_flops RETURNING user_id",
              4, p, cb, ud);
}

void store_usage_check_submit(db *d, int64_t owner, int64_t sweep_id, const char *runs_json,
                              store_json_cb cb, void *ud) {
  char who[24], sw[24];
  const char *p[3] = {store__itoa(who, sizeof who, owner), runs_json,
                      store__itoa(sw, sizeof sw, sweep_id)};
  /* the runs are counted only for a person with limits (a lateral over
   * their user_limits row): the others' submissions parse nothing twice */
  store__query_json(
      d,
      "SELECT CASE WHEN q.runs + n.runs > l.max_queued_runs THEN json_build_object("
      "'limit', 'max_queued_runs', 'max', l.max_queued_runs, 'queued', q.runs, 'adding', "
      "n.runs) WHEN q.flops + n.flops > l.max_queued_flops THEN json_build_object("
      "'limit', 'max_queued_flops', 'max', l.max_queued_flops, 'queued', q.flops, 'adding', "
      "n.flops) END FROM user_limits l CROSS JOIN LATERAL (SELECT count(*) AS runs, "
      "coalesce(sum(flops), 0) AS flops FROM runs WHERE owner_id = l.user_id AND status = "
      "'queued') q CROSS JOIN LATERAL (SELECT count(*) AS runs, coalesce(sum((e->>'flops')::"
      "float8), 0) AS flops FROM jsonb_array_elements($2::text::jsonb) e WHERE $3::bigint = 0 OR "
      "NOT EXISTS (SELECT 1 FROM runs r WHERE r.sweep_id = $3::bigint AND r.config_hash = "
      "e->>'config_hash')) n WHERE l.user_id = "
      "coalesce(nullif($1::bigint, 0), (SELECT owner_id FROM sweeps WHERE id = $3::bigint))",
      3, p, cb, ud);
}
