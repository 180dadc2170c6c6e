-- The synthetic corpus's figures as the trainer reports them in its first
-- line (SCIENCE.md section 5): the exact entropy rate of the token stream
-- and the Bayes-optimal loss of a window of seq_len tokens. The refits
-- compare the fitted E with them; NULL for real text and for runs that
-- started before this migration.
ALTER TABLE runs
  ADD COLUMN entropy_rate double precision,
  ADD COLUMN window_floor double precision;
