-- The queue in placement order is a sweep's largest runs first (by their
-- FLOPs, the runs of unknown compute last): the longest runs start while
-- the short ones fill the slots around them, so a sweep on a few slots does
-- not end on one long run with the other slots idle, and a WSD trunk (the
-- longest run of its group) starts before the branches that wait for its
-- checkpoints. The index serves the queue read in that order.
DROP INDEX runs_queue;
CREATE INDEX runs_queue ON runs (priority DESC, sweep_id, flops DESC NULLS LAST, id)
  WHERE status = 'queued';
