-- What `scalesweep next` predicted for a run when it designed the run's
-- compute budget (sweeps/next.h): {"flops", "loss", "ci95", "noise_sd",
-- "n_opt", "fit_points"}. NULL for the runs a submitted spec planned. The
-- page and the API show it beside the run's measured final loss.
ALTER TABLE runs ADD COLUMN designed jsonb;
-- A budget designed twice at once (two `next --submit` racing) adds its runs
-- once: the insert skips a designed run whose config the sweep has already.
CREATE UNIQUE INDEX runs_designed_once ON runs (sweep_id, config_hash)
  WHERE designed IS NOT NULL;
