-- Metric rows are the hot path: a sweep's workers send up to hundreds of
-- thousands of them per second. The foreign key from metrics.run_id to runs
-- checked every inserted row with a trigger (SELECT ... FOR KEY SHARE on the
-- run, one per row), measured here at 40% of the insert's time. The
-- scheduler's insert already checks, once per batch and in the same
-- statement, that the run exists at the attempt that sent the rows, and no
-- code path deletes runs; what the key also gave, deleting a run's metrics
-- with it (ON DELETE CASCADE, from a sweep too), this trigger keeps.
ALTER TABLE metrics DROP CONSTRAINT metrics_run_id_fkey;

CREATE FUNCTION runs_delete_metrics() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM metrics WHERE run_id = OLD.id;
  RETURN OLD;
END
$$;

CREATE TRIGGER runs_delete_metrics AFTER DELETE ON runs
  FOR EACH ROW EXECUTE FUNCTION runs_delete_metrics();
