-- An interruption is not a failure (issue 14): a run whose worker stops
-- (SIGTERM, Ctrl-C under `scalesweep up`, the end of a Slurm job) goes back
-- to the queue from its checkpoint without spending one of its
-- max_attempts. `attempt` still counts every attempt (it fences stale
-- messages); `interruptions` counts those that ended in an interruption,
-- and the failure budget is attempt - interruptions. stopping_attempt is
-- the attempt whose worker said it is stopping: if its report never comes
-- (the lease expires, the worker restarts), the run is still not charged.
ALTER TABLE runs
  ADD COLUMN interruptions integer NOT NULL DEFAULT 0 CHECK (interruptions >= 0),
  ADD COLUMN stopping_attempt integer;
ALTER TABLE runs DROP CONSTRAINT attempts_bounded;
ALTER TABLE runs ADD CONSTRAINT attempts_bounded
  CHECK (interruptions <= attempt AND attempt - interruptions <= max_attempts);
