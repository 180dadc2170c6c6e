-- The store (docs/design.md#tables). Table and column names are part of the
-- interface: users query them with SQL.

CREATE TYPE run_status AS ENUM ('queued', 'running', 'succeeded', 'failed', 'cancelled');

CREATE TABLE sweeps (
  id          bigserial PRIMARY KEY,
  name        text NOT NULL CHECK (name <> ''),
  spec        jsonb NOT NULL,
  spec_hash   text NOT NULL UNIQUE,            -- an identical resubmission is refused
  status      run_status NOT NULL DEFAULT 'queued',
  priority    integer NOT NULL DEFAULT 0,
  created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE workers (
  id          bigserial PRIMARY KEY,
  name        text NOT NULL UNIQUE,
  host        text NOT NULL,
  gpus        jsonb NOT NULL DEFAULT '[]',
  cpu_slots   integer NOT NULL DEFAULT 0 CHECK (cpu_slots >= 0),
  last_seen   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE runs (
  id                  bigserial PRIMARY KEY,
  sweep_id            bigint NOT NULL REFERENCES sweeps (id) ON DELETE CASCADE,
  config              jsonb NOT NULL,
  config_hash         text NOT NULL,
  status              run_status NOT NULL DEFAULT 'queued',
  attempt             integer NOT NULL DEFAULT 0 CHECK (attempt >= 0),
  max_attempts        integer NOT NULL DEFAULT 3 CHECK (max_attempts >= 1),
  gpus                integer NOT NULL DEFAULT 0 CHECK (gpus >= 0),  -- 0: one CPU slot
  priority            integer NOT NULL DEFAULT 0,
  worker              bigint REFERENCES workers (id),
  lease_until         timestamptz,
  params              bigint,
  nonembedding_params bigint,
  tokens              bigint,
  batch_size          integer,
  flops               double precision,
  final_val_loss      double precision,
  started_at          timestamptz,
  finished_at         timestamptz,
  reproduces          bigint REFERENCES runs (id),
  code_version        text,
  error               text,
  checkpoint_step     bigint,
  checkpoint_path     text,
  -- a running run is always held by a worker under a lease, and only then
  CONSTRAINT running_has_lease CHECK
    ((status = 'running') = (worker IS NOT NULL AND lease_until IS NOT NULL)),
  CONSTRAINT attempts_bounded CHECK (attempt <= max_attempts)
);
CREATE INDEX runs_queue ON runs (priority DESC, sweep_id, flops, id) WHERE status = 'queued';
CREATE INDEX runs_by_sweep ON runs (sweep_id);
CREATE INDEX runs_running ON runs (worker) WHERE status = 'running';

-- One row per optimizer step; an eval at a step fills val_loss of that row.
-- The primary key makes a resent batch change nothing.
CREATE TABLE metrics (
  run_id      bigint NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  step        integer NOT NULL CHECK (step >= 0),
  tokens      bigint NOT NULL CHECK (tokens >= 0),
  train_loss  double precision,
  val_loss    double precision,
  lr          double precision,
  grad_norm   double precision,
  b_noise     double precision,
  loss_scale  double precision,
  tok_per_s   double precision,
  PRIMARY KEY (run_id, step)
);

CREATE TABLE fits (
  id          bigserial PRIMARY KEY,
  sweep_id    bigint NOT NULL REFERENCES sweeps (id) ON DELETE CASCADE,
  law         text NOT NULL CHECK (law IN ('chinchilla', 'kaplan', 'isoflop', 'batch')),
  params      jsonb NOT NULL,   -- the whole fit object of `scalesweep fit --json`
  intervals   jsonb NOT NULL,   -- its ci95 and stderr
  n_points    integer NOT NULL CHECK (n_points >= 0),
  created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX fits_latest ON fits (sweep_id, law, created_at DESC);
