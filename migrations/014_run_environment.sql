-- Where each attempt of a run ran: the trainer's "environment" (its config
-- event: host, CPU model, the CPU kernels' level and OpenBLAS's core type,
-- or the GPU, its compute capability and CUDA's versions; threads; the
-- scalesweep version) with the worker's name, one row per attempt, and the
-- latest on the run itself, whose code_version is its scalesweep version.
-- runs.worker is cleared when a run ends; these stay.
CREATE TABLE attempts (
  run_id      bigint NOT NULL,
  attempt     int NOT NULL,
  worker      text NOT NULL,
  environment jsonb NOT NULL,
  started_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (run_id, attempt)
);
ALTER TABLE runs ADD COLUMN environment jsonb;
