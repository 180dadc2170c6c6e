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
-- attempt_accounting, migration 023).
CREATE TABLE attempt_usage (
  run_id         bigint NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  attempt        int NOT NULL,
  sweep_id       bigint NOT NULL,
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
    INSERT INTO attempt_usage (run_id, attempt, sweep_id, gpus, devices, flops_per_step)
    VALUES (NEW.id, NEW.attempt, NEW.sweep_id, NEW.gpus,
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
