-- Not a migration of scalesweep: the migration that the test build of "the
-- next version" (scalesweep_next, tests/CMakeLists.txt) adds to those of
-- migrations/, for tests/integration/test_upgrade.py to apply to a database
-- holding a running sweep. It makes the kinds of change a release makes to
-- the tables the sweep is writing: a column with a default on runs and a
-- backfill of the rows in flight, a column with a volatile default on
-- metrics (which rewrites the table under an exclusive lock) and an index
-- built on it. Nothing is IF NOT EXISTS: applied a second time it would
-- fail, so a test that sees every step succeed has seen it applied once.
ALTER TABLE runs ADD COLUMN upgrade_note text NOT NULL DEFAULT 'added';
UPDATE runs SET upgrade_note = 'backfilled while ' || status::text
  WHERE status IN ('queued', 'running');
ALTER TABLE metrics ADD COLUMN upgrade_written_at timestamptz DEFAULT clock_timestamp();
CREATE INDEX metrics_upgrade_written_at ON metrics (run_id, upgrade_written_at);
