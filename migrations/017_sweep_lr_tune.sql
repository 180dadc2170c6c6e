-- The learning rate a sweep's lr tune chose (docs/sweeps.md, "Tuning the
-- learning rate on a muP proxy"): a spec with "lr_tune" is stored with the
-- tune's runs only (runs.part 'lr_tune', on the proxy); once every one of
-- them has ended, the scheduler writes its decision here in the statement
-- that adds the study's runs at the chosen rate, so that the two are never
-- apart: {"status" ('decided', 'undecided' or 'failed'), "lr", "at_edge",
-- "warnings", "rates" (each rate with its mean final loss and its runs),
-- "reason", "proxy", "study_runs", "decided_at"} (sweeps/lr_tune.h). NULL:
-- a sweep without a tune, or one whose tune runs have not all ended.
ALTER TABLE sweeps ADD COLUMN lr_tune jsonb;
