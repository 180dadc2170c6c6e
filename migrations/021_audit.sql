-- The audit trail (README, "A shared cluster"): one row per change made or
-- refused through the API (submit, cancel, priority, next, reproduce, the
-- user routes), written by the scheduler when it answers. user_id is NULL
-- for a request without a known token (the name then says "-"); peer is
-- the client's address as the scheduler saw it. Rows are never changed.
CREATE TABLE audit (
  id        bigserial PRIMARY KEY,
  at        timestamptz NOT NULL DEFAULT now(),
  user_id   bigint REFERENCES users (id),
  user_name text NOT NULL,
  peer      text NOT NULL,
  action    text NOT NULL,
  target    text NOT NULL,
  outcome   text NOT NULL CHECK (outcome IN ('ok', 'refused', 'failed')),
  status    integer NOT NULL, -- the HTTP status answered
  detail    text NOT NULL
);
CREATE INDEX audit_by_time ON audit (at);
CREATE INDEX audit_by_user ON audit (user_id, at);
