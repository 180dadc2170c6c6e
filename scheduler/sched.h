/* The scheduler daemon: HTTP API, worker port, placement, leases, metric
 * ingestion, all on one libuv loop, with PostgreSQL as the only durable
 * state (a restarted scheduler recovers everything from it). */
#ifndef SS_SCHEDULER_SCHED_H
#define SS_SCHEDULER_SCHED_H

#include <stddef.h>

#define SCHED_MAX_DATA_DIRS 16
#define SCHED_MAX_SLURM_OPTIONS 16

typedef struct sched_options {
  const char *database;        /* libpq URL or conninfo */
  const char *listen;          /* HTTP API HOST:PORT (port 0: any) */
  const char *workers;         /* worker port HOST:PORT (port 0: any) */
  const char *token_file;      /* cluster token (workers) */
  const char *api_token_file;  /* API mutations (NULL: the cluster token) */
  const char *checkpoint_root; /* where run checkpoints live (shared with local workers) */
  const char *ready_file;      /* written with the bound addresses once serving (NULL: none) */
  int lease_s;                 /* lease length (default 30) */
  int heartbeat_s;             /* heartbeat interval told to workers (default 5) */
  int retry_after_s;           /* a run's first failed attempt waits this long before the
                                * next, doubling with each (default 10; 0: at once) */
  int open_reads;              /* GET needs no token (default 1) */
  int predict_s;               /* seconds between predictions of running runs (default 15) */
  int reserve_after_s;         /* a multi-GPU run waiting this long gets a worker kept for it
                                * (smaller runs stop backfilling it; default 300) */
  int share_half_life_s;       /* fair share: a person's past usage halves in this long
                                * (default 604800, 7 days) */
  int db_read_connections;     /* connections for the API's, the page's and the refits' reads,
                                * apart from the one workers' messages use (default 2) */
  int read_timeout_ms;         /* a read's limit, running or waiting (default 5000; 0: none) */
  /* directories a spec's token shards (data.train, data.val) may lie under,
   * absolute and without symbolic links (cmd_scheduler resolves them);
   * none: specs must use the synthetic corpus */
  const char *data_dirs[SCHED_MAX_DATA_DIRS];
  int ndata_dirs;
  /* the HTTP server's slots (http/http.h http_limits; 0: its default) */
  int http_connections;     /* connection slots, a hard ceiling (default 1024) */
  int http_reserve;         /* of those, kept for the API token and /healthz (default 1/16) */
  int max_streams;          /* event streams in total (default half the slots) */
  int max_streams_per_addr; /* event streams per client address (default 8) */
  int header_timeout_s;     /* a request must be complete this long after its first
                             * byte, or a new connection's accept (default 10) */
  int open_metrics;         /* /metrics needs no token even without open_reads */
  int auth_block_s; /* after 5 wrong worker tokens from an address, its wrong ones are
                     * refused for the rest of this window (default 60) */
  /* elastic workers through Slurm (slurm.h): a partition turns it on */
  const char *slurm_partition;
  const char *slurm_address; /* the worker port as the nodes reach it (default: --workers'
                              * host, or this host's name for a wildcard, and its port) */
  int slurm_max_nodes;       /* nodes of all its jobs together (default 4) */
  int slurm_gpus_per_node;   /* GPUs a GPU job asks for per node (default 0: none) */
  int slurm_cpu_slots;       /* CPU runs a CPU job's worker takes (default 1) */
  int slurm_idle_s;          /* a job whose workers are all idle this long ends (default 120) */
  int slurm_interval_s;      /* between passes (default 10) */
  int slurm_max_minutes;     /* a job's time limit at most (default 1440) */
  const char *slurm_options[SCHED_MAX_SLURM_OPTIONS]; /* more sbatch options, as they are */
  int nslurm_options;
} sched_options;

void sched_options_default(sched_options *o);

/* Runs until SIGINT/SIGTERM. Returns 0, or an SS_E* code with a message in
 * err when it could not start (database unreachable, port taken, ...). */
int sched_run(const sched_options *o, char *err, size_t errlen);

#endif
