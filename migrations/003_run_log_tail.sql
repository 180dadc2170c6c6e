-- The status page: a failed run's log tail (the last lines its worker sent
-- with the result), and the evaluations of a run found without reading its
-- every step (the page samples long curves by step, evaluations included).
ALTER TABLE runs ADD COLUMN log_tail text;
CREATE INDEX metrics_evals ON metrics (run_id, step) WHERE val_loss IS NOT NULL;
