-- A run that must run on one worker: a reproduction asked for with
-- `scalesweep reproduce RUN --on WORKER` (POST /api/runs/N/reproduce with
-- {"on": WORKER}). Placement gives it only to a connected worker whose name
-- or host is this; NULL (every other run): any worker.
ALTER TABLE runs ADD COLUMN on_worker text;
