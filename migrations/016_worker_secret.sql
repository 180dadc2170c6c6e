-- A worker's identity is more than its name: at its first registration a
-- worker is given a random secret (kept in its work directory), and only
-- the SHA-256 of it is stored here. A hello that presents the secret is that
-- worker, reconnecting or restarted; one without it may take the name only
-- while no connection holds it and no running run is leased to it
-- (docs/runtime.md, "Worker identity"). NULL: a row from before this
-- migration, whose next registration sets it.
ALTER TABLE workers ADD COLUMN secret_hash text;
