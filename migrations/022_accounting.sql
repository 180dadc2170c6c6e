-- Compute accounting (README, "A shared cluster"; docs/design.md#tables):
-- one row per attempt of a run, from its claim to its end, with the steps
-- its metrics reported. Triggers keep it, so that every way an attempt
-- starts or ends (a claim; a result, a requeue, a lease that expired, a
-- worker that restarted, a cancel) is counted without each statement
-- having to say so.
--
-- device-seconds = devices x (ended_at or now - started_at), devices being
-- the run's GPUs, or its CPU slots (one per rank) for a CPU run.
-- The steps an attempt trained are (first_step - 1, last_step]: its first
-- metric row is the step after the checkpoint (or branch point) it resumed
-- from. Those a later attempt of the run trained again are lost (a failure,
-- a fenced trainer, a restart from an older checkpoint); the others are
-- kept: summed over a run, the kept steps are its metric rows (the view
-- attempt_accounting below).
-- runs.owner_id is its sweep's owner (set on insert: a sweep's owner never
-- changes), so that the queue can be read a person at a time from an index.
ALTER TABLE runs ADD COLUMN owner_id bigint;
UPDATE runs r SET owner_id = sw.owner_id FROM sweeps sw WHERE sw.id = r.sweep_id;
CREATE FUNCTION runs_owner() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.owner_id := (SELECT owner_id FROM sweeps WHERE id = NEW.sweep_id);
  RETURN NEW;
END $$;
CREATE TRIGGER runs_owner BEFORE INSERT ON runs FOR EACH ROW EXECUTE FUNCTION runs_owner();
CREATE INDEX runs_queue_owner ON runs (owner_id, priority DESC, sweep_id, flops DESC NULLS LAST, id)
  WHERE status = 'queued';

CREATE TABLE attempt_usage (
  run_id         bigint NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  attempt        int NOT NULL,
  sweep_id       bigint NOT NULL,
  owner_id       bigint NOT NULL,         -- its sweep's (runs.owner_id)
  gpus           int NOT NULL,            -- 0: a CPU run
  devices        int NOT NULL,            -- GPUs, or CPU slots of a CPU run
  started_at     timestamptz NOT NULL DEFAULT now(),  -- claimed
  ended_at       timestamptz,             -- NULL while it runs
  ended_as       text,                    -- the run's status after it: queued is a retry
  first_step     bigint,                  -- the lowest step its metrics reported
  last_step      bigint,                  -- the highest
  flops_per_step double precision,        -- the run's FLOPs / its planned steps
  PRIMARY KEY (run_id, attempt)
);
CREATE INDEX attempt_usage_by_sweep ON attempt_usage (sweep_id);
CREATE INDEX attempt_usage_open ON attempt_usage (run_id) WHERE ended_at IS NULL;

CREATE FUNCTION runs_attempt_usage() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.status = 'running' THEN
    INSERT INTO attempt_usage (run_id, attempt, sweep_id, owner_id, gpus, devices, flops_per_step)
    VALUES (NEW.id, NEW.attempt, NEW.sweep_id, NEW.owner_id, NEW.gpus,
            CASE WHEN NEW.gpus > 0 THEN NEW.gpus
                 ELSE greatest(coalesce((NEW.config->>'world_size')::int, 1), 1) END,
            NEW.flops * NEW.batch_size * (NEW.config->'model'->>'seq_len')::float8
              / nullif(NEW.tokens, 0))
    ON CONFLICT (run_id, attempt) DO NOTHING;
  ELSIF OLD.status = 'running' THEN
    UPDATE attempt_usage SET ended_at = now(), ended_as = NEW.status::text
      WHERE run_id = OLD.id AND attempt = OLD.attempt AND ended_at IS NULL;
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER runs_attempt_usage AFTER UPDATE OF status ON runs FOR EACH ROW
  WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION runs_attempt_usage();

-- A metric batch is stored only for the run's running attempt (the fence of
-- store/metrics.c), so the open row is the attempt that reported it; one
-- statement a batch, not one a row.
CREATE FUNCTION metrics_attempt_steps() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE attempt_usage a SET first_step = least(a.first_step, m.lo),
                             last_step = greatest(a.last_step, m.hi)
    FROM (SELECT run_id, min(step) AS lo, max(step) AS hi FROM new_rows GROUP BY run_id) m
    WHERE a.run_id = m.run_id AND a.ended_at IS NULL;
  RETURN NULL;
END $$;
CREATE TRIGGER metrics_attempt_steps_ins AFTER INSERT ON metrics
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION metrics_attempt_steps();
CREATE TRIGGER metrics_attempt_steps_upd AFTER UPDATE ON metrics
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION metrics_attempt_steps();

-- Each attempt's figures (README, "A shared cluster"). An attempt's steps
-- that a later attempt of the run trained again (from the lowest step a
-- later one resumed from up to the highest one a later one reached) are
-- lost; the rest are kept, so that a run's kept steps are its metric rows.
-- A step a trainer took but never reported (killed between two metric
-- batches) is in neither: the accounting counts what the metrics say.
CREATE VIEW attempt_accounting AS
SELECT x.run_id, x.attempt, x.sweep_id, x.owner_id, x.gpus, x.devices, x.started_at, x.ended_at,
       x.ended_as, x.device_s, x.steps, x.steps - x.lost AS steps_kept, x.lost AS steps_lost,
       (x.steps - x.lost) * x.flops_per_step AS flops_trained, x.lost * x.flops_per_step AS flops_lost
FROM (SELECT a.*,
             a.devices * extract(epoch FROM coalesce(a.ended_at, now()) - a.started_at)::float8
               AS device_s,
             coalesce(a.last_step - greatest(a.first_step - 1, 0), 0) AS steps,
             CASE WHEN a.later_hi IS NULL THEN 0 -- no later attempt reported a step
                  ELSE coalesce(greatest(least(a.last_step, a.later_hi)
                                - greatest(a.first_step - 1, 0, a.later_lo), 0), 0) END AS lost
      FROM (SELECT u.*,
                   min(greatest(u.first_step - 1, 0)) OVER later AS later_lo,
                   max(u.last_step) OVER later AS later_hi
            FROM attempt_usage u
            WINDOW later AS (PARTITION BY u.owner_id, u.sweep_id, u.run_id ORDER BY u.attempt
                             ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING)) a) x;
