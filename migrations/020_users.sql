-- A shared cluster's people (docs/security.md, "A shared cluster"): each
-- has a role and tokens of their own; only a token's SHA-256 is stored (a
-- token is 256 random bits, so a hash is as good as a salted one and lets
-- the scheduler find the token's owner by the hash). A user is never
-- deleted (their sweeps and the audit trail name them); revoking sets
-- revoked_at on the user and every token. The token of --api-token-file
-- (or the cluster token) is the user "admin", made here, who owns every
-- sweep submitted before this migration.
CREATE TABLE users (
  id           bigserial PRIMARY KEY,
  name         text NOT NULL UNIQUE CHECK (name ~ '^[a-z0-9][a-z0-9_.-]{0,31}$'),
  role         text NOT NULL CHECK (role IN ('admin', 'member', 'viewer')),
  created_at   timestamptz NOT NULL DEFAULT now(),
  revoked_at   timestamptz,
  -- the sweep priorities a member may submit or set (an admin any)
  priority_min integer NOT NULL DEFAULT -1000000,
  priority_max integer NOT NULL DEFAULT 0,
  CHECK (priority_min <= priority_max)
);

CREATE TABLE user_tokens (
  hash        bytea PRIMARY KEY CHECK (octet_length(hash) = 32), -- sha256(token)
  user_id     bigint NOT NULL REFERENCES users (id),
  created_at  timestamptz NOT NULL DEFAULT now(),
  revoked_at  timestamptz
);
CREATE INDEX user_tokens_by_user ON user_tokens (user_id);

INSERT INTO users (name, role, priority_min, priority_max)
  VALUES ('admin', 'admin', -1000000, 1000000);

ALTER TABLE sweeps ADD COLUMN owner_id bigint REFERENCES users (id);
UPDATE sweeps SET owner_id = (SELECT id FROM users WHERE name = 'admin');
ALTER TABLE sweeps ALTER COLUMN owner_id SET NOT NULL;
CREATE INDEX sweeps_by_owner ON sweeps (owner_id);
