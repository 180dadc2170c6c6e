-- Fair share and limits (README, "A shared cluster"; docs/design.md#tables).

-- Per person, set by an admin (`scalesweep limits`); NULL: no limit.
CREATE TABLE user_limits (
  user_id          bigint PRIMARY KEY REFERENCES users (id),
  max_gpus         integer CHECK (max_gpus >= 0),          -- GPUs in use at once
  max_queued_runs  integer CHECK (max_queued_runs >= 0),   -- runs queued at once
  max_queued_flops double precision CHECK (max_queued_flops >= 0) -- their planned FLOPs
);

-- Each person's device-seconds of ended attempts, decayed with the
-- scheduler's half-life (--share-half-life-seconds, share_settings) to `at`:
-- usage now = device_s * 0.5 ^ ((now - at) / half_life). Kept by the
-- trigger below as attempts end; the scheduler recomputes it from
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

CREATE FUNCTION attempt_usage_ended() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO share_usage AS su (owner_id, device_s, at)
  VALUES (NEW.owner_id,
          NEW.devices * extract(epoch FROM NEW.ended_at - NEW.started_at)::float8, now())
  ON CONFLICT (owner_id) DO UPDATE SET
    device_s = su.device_s * power(0.5, extract(epoch FROM now() - su.at)::float8
               / (SELECT half_life_s FROM share_settings)) + EXCLUDED.device_s,
    at = now();
  RETURN NULL;
END $$;
CREATE TRIGGER attempt_usage_ended AFTER UPDATE OF ended_at ON attempt_usage FOR EACH ROW
  WHEN (OLD.ended_at IS NULL AND NEW.ended_at IS NOT NULL)
  EXECUTE FUNCTION attempt_usage_ended();

-- Each person's effective usage, placement's order across people: their
-- ended attempts' device-seconds decayed to now plus their running ones'
-- so far; and the GPUs their running attempts hold (max_gpus's count).
CREATE VIEW share_effective AS
SELECT z.owner_id, sum(z.s) AS usage_s, sum(z.g)::int AS gpus
FROM (SELECT su.owner_id,
             su.device_s * power(0.5, extract(epoch FROM now() - su.at)::float8
                                      / (SELECT half_life_s FROM share_settings)) AS s, 0 AS g
      FROM share_usage su
      UNION ALL
      SELECT a.owner_id, a.devices * extract(epoch FROM now() - a.started_at)::float8, a.gpus
      FROM attempt_usage a WHERE a.ended_at IS NULL) z
GROUP BY z.owner_id;
