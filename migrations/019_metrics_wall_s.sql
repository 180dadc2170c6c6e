-- wall_s: seconds since the trainer started, per step line (the built-in
-- trainer's clock; an external trainer may leave it out). Stored beside
-- tok_per_s so that a run's progress can be read in time as well as in
-- tokens: a slow start, a pause, a worker that got slower.
ALTER TABLE metrics ADD COLUMN wall_s double precision;
