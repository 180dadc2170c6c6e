-- Fair share and limits (README, "A shared cluster"; docs/design.md#tables).
--
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

ALTER TABLE attempt_usage ADD COLUMN owner_id bigint;
UPDATE attempt_usage a SET owner_id = sw.owner_id FROM sweeps sw WHERE sw.id = a.sweep_id;

-- Per person, set by an admin (`scalesweep limits`); NULL: no limit.
CREATE TABLE user_limits (
  user_id          bigint PRIMARY KEY REFERENCES users (id),
  max_gpus         integer CHECK (max_gpus >= 0),          -- GPUs in use at once
  max_queued_runs  integer CHECK (max_queued_runs >= 0),   -- runs queued at once
  max_queued_flops double precision CHECK (max_queued_flops >= 0) -- their planned FLOPs
);

-- Each person's device-seconds of ended attempts, decayed with the
-- scheduler's half-life (--share-half-life, share_settings) to `at`:
-- usage now = device_s * 0.5 ^ ((now - at) / half_life). Kept by the
-- attempt trigger as attempts end; the scheduler recomputes it from
-- attempt_usage when it starts (so a changed half-life applies to the past).
CREATE TABLE share_settings (
  one         boolean PRIMARY KEY DEFAULT true CHECK (one),
  half_life_s double precision NOT NULL DEFAULT 604800 CHECK (half_life_s > 0)
);
INSERT INTO share_settings DEFAULT VALUES;
CREATE TABLE share_usage (
  owner_id bigint PRIMARY KEY REFERENCES users (id),
  device_s double precision NOT NULL,
  at       timestamptz NOT NULL
);

CREATE OR REPLACE FUNCTION runs_attempt_usage() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  ended attempt_usage;
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
      WHERE run_id = OLD.id AND attempt = OLD.attempt AND ended_at IS NULL
      RETURNING * INTO ended;
    IF ended.owner_id IS NOT NULL THEN
      INSERT INTO share_usage AS su (owner_id, device_s, at)
      VALUES (ended.owner_id, ended.devices * extract(epoch FROM ended.ended_at - ended.started_at)::float8, now())
      ON CONFLICT (owner_id) DO UPDATE SET
        device_s = su.device_s * power(0.5, extract(epoch FROM now() - su.at)::float8
                   / (SELECT half_life_s FROM share_settings)) + EXCLUDED.device_s,
        at = now();
    END IF;
  END IF;
  RETURN NULL;
END $$;

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

-- Each person's effective usage, placement's order across people: their
-- ended attempts' device-seconds decayed to now plus their running ones'
-- so far; and the GPUs their running attempts hold (max_gpus's count).
CREATE VIEW share_effective AS
SELECT z.owner_id, sum(z.s) AS usage_s, sum(z.g)::int AS gpus
FROM (SELECT su.owner_id,
             su.device_s * power(0.5, extract(epoch FROM now() - su.at)::float8 / st.half_life_s)
               AS s, 0 AS g
      FROM share_usage su CROSS JOIN share_settings st
      UNION ALL
      SELECT a.owner_id, a.devices * extract(epoch FROM now() - a.started_at)::float8, a.gpus
      FROM attempt_usage a WHERE a.ended_at IS NULL) z
GROUP BY z.owner_id;
