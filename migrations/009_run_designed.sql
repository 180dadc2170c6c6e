-- What `scalesweep next` predicted for a run when it designed the run's
-- compute budget (sweeps/next.h): {"flops", "loss", "ci95", "noise_sd",
-- "n_opt", "fit_points"}. NULL for the runs a submitted spec planned. The
-- page and the API show it beside the run's measured final loss.
ALTER TABLE runs ADD COLUMN designed jsonb;
