-- The critical batch size by branching (docs/sweeps.md, "Critical batch size
-- by branching"): a batch ladder with "branch" plans its runs as part
-- 'bcrit' (a trunk at the smallest batch size and, from its checkpoints,
-- one rung per other batch size), and the scheduler fits them as law
-- 'bcrit': B_crit at each branch point, against D and against the loss.
ALTER TABLE fits DROP CONSTRAINT fits_law_check;
ALTER TABLE fits ADD CONSTRAINT fits_law_check
  CHECK (law IN ('chinchilla', 'kaplan', 'isoflop', 'batch', 'bopt', 'bcrit'));
