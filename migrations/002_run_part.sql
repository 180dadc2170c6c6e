-- Which part of its sweep's plan a run belongs to ('grid', 'isoflop',
-- 'batch' or 'runs'): the fits take their points by part (an IsoFLOP
-- profile from the isoflop runs, the critical batch size from the ladder),
-- and the ladder's target losses.
ALTER TABLE runs ADD COLUMN part text;
ALTER TABLE runs ADD COLUMN target_loss jsonb;
