-- WSD branches (docs/sweeps.md, "WSD branches"): a run whose config differs
-- from a longer "wsd" run's only in train.tokens starts its decay from that
-- run's checkpoint after branch_step steps instead of training the shared
-- phase again. branch_of is that longer run (the trunk); branch_path is
-- where its trainer kept the checkpoint, set when the trunk reports it. The
-- run is claimable once the path is set, or once the trunk has ended
-- without it (then it trains from scratch, to the same result).
ALTER TABLE runs
  ADD COLUMN branch_of bigint REFERENCES runs (id) ON DELETE SET NULL,
  ADD COLUMN branch_step bigint CHECK (branch_step >= 1),
  ADD COLUMN branch_path text;
CREATE INDEX runs_branches ON runs (branch_of) WHERE branch_of IS NOT NULL;
