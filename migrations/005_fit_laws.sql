-- The scheduler also fits the critical batch size from a sweep's batch
-- ladder ('batch', from the steps its runs took to reach each target loss)
-- and the optimal batch size and learning rate against compute ('bopt'),
-- and predicts each running run's final loss from its curve so far
-- (runs.prediction: the prediction, its 95% interval, the fitted surface's
-- loss for the run and whether the run is flagged as far off it).
ALTER TABLE fits DROP CONSTRAINT fits_law_check;
ALTER TABLE fits ADD CONSTRAINT fits_law_check
  CHECK (law IN ('chinchilla', 'kaplan', 'isoflop', 'batch', 'bopt'));
ALTER TABLE runs ADD COLUMN prediction jsonb;
