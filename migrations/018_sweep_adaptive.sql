-- An adaptive design's rounds (docs/sweeps.md, "An adaptive design"): a
-- spec with "adaptive" is stored with its first round's runs only; each
-- time every run of the sweep has ended, the scheduler refits and writes
-- here, in the statement that adds the next round's runs, so that a round
-- is never recorded without its runs nor added twice: {"question",
-- "kind", "precision", "compute", "status" ('running', 'reached', 'spent',
-- 'exhausted'), "spent", "rounds": [{"round", "status", "fitted", "answer",
-- "ci95", "width", "predicted", "E", "alpha", "beta", "points",
-- "noise_sd", "spent", "cost", "runs": [...], "more_flops", "best_width",
-- "reason", "decided_at"}]} (sweeps/adaptive.h). NULL: no adaptive design,
-- or its first round is still running.
ALTER TABLE sweeps ADD COLUMN adaptive jsonb;

-- Branches across rounds: a run that trains whole keeps a checkpoint at
-- each step in keep_steps (a JSON array; the branch points of the shorter
-- candidates of its trajectory, which a later round may choose), besides
-- its waiting branches' steps; kept records the branch points it reported,
-- {"STEP": "PATH"}, so that a later round's run starts from one at once.
ALTER TABLE runs ADD COLUMN keep_steps jsonb, ADD COLUMN kept jsonb;
