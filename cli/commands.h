/* The scalesweep subcommands: each takes main's argc/argv with argv[0] the
 * subcommand's name and returns the process exit code (common/err.h). */
#ifndef SS_CLI_COMMANDS_H
#define SS_CLI_COMMANDS_H

/* Every subcommand, in the order `scalesweep --help` lists them: its name
 * (cmd_NAME runs it) and its line of help. */
#define CLI_COMMANDS(X)                                                    \
  X(up, "everything on one machine: database, scheduler, a local worker")  \
  X(plan, "validate a sweep spec and print the runs it plans")             \
  X(submit, "submit a sweep spec to the scheduler")                        \
  X(status, "sweeps and their progress")                                   \
  X(runs, "the runs of a sweep")                                           \
  X(cancel, "cancel a sweep or a run")                                     \
  X(reproduce, "run a finished run again from its stored config")          \
  X(priority, "set a sweep's priority")                                    \
  X(fit, "fit scaling laws to a sweep's runs or to a CSV of points")       \
  X(next, "the next compute budget of a sweep, designed from its fits")    \
  X(usage, "compute used and lost, per person or sweep; your standing")    \
  X(limits, "set a person's limits: GPUs at once, runs and FLOPs queued")  \
  X(train, "train one model from a run config, JSON lines on stdout")      \
  X(launch, "run a declared trainer's ranks with torchrun's environment")  \
  X(devices, "the backends this host can train on (CPU, CUDA devices)")    \
  X(data, "prepare token shards from text, or write the synthetic corpus") \
  X(scheduler, "the scheduler daemon (API, page, worker port)")            \
  X(worker, "the worker agent of a GPU (or CPU) host")                     \
  X(migrate, "apply the database migrations")                              \
  X(user, "a shared cluster's people: add, list, revoke, token, set")      \
  X(audit, "who changed what, when, from where (admins)")

#define CLI__DECLARE(name, help) int cmd_##name(int argc, char **argv);
CLI_COMMANDS(CLI__DECLARE)
#undef CLI__DECLARE

/* submit's work: sends the spec in `file` (relative token shard paths made
 * absolute against the current directory) to the scheduler found from url,
 * state and token_file (cli/client.h); prints the new sweep (its JSON with
 * json_out) and sets *id. With `earlier` non-NULL, a spec identical to one
 * submitted before (409 with that sweep's id) is no error: *id is that sweep
 * and *earlier is set to 1. Returns the exit code. */
int cli_submit(const char *file, const char *url, const char *state, const char *token_file,
               int json_out, long long *id, int *earlier);

#endif
