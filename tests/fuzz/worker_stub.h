/* For the worker's harnesses (fuzz_wconn, fuzz_tline): worker_stub.c
 * replaces worker/proc.c (no trainer is ever spawned) and sets a worker up
 * the way wrk_run does, without its GPU discovery (two GPUs, 0 and 1, and
 * one CPU slot), its signals or its connection. */
#ifndef SS_TESTS_FUZZ_WORKER_STUB_H
#define SS_TESTS_FUZZ_WORKER_STUB_H

#include "worker/conn.h"
#include "worker/gpu.h"
#include "worker/internal.h"
#include "worker/lifecycle.h"
#include "worker/outbox.h"
#include "worker/proc.h"
#include "worker/report.h"
#include "worker/run.h"
#include "worker/wbuf.h"

#define WORKER_STUB_TOKEN "fuzz-cluster-token-0123456789"

/* 1 (the default): a started run's trainer prints its lines by itself
 * (worker_stub.c); 0: it prints nothing (fuzz_tline feeds them). */
extern int worker_stub_trainer;

/* A worker with its loop and handles initialised, its runs under work_dir
 * (not created: no run ever writes there), its scheduler 127.0.0.1:port;
 * no heartbeats (every hour), no drain wait at its end. */
wrk__worker *worker_stub_new(const char *work_dir, int port);
/* A run's output or exit is still to come (on a later loop turn). */
int worker_stub_busy(const wrk__worker *w);
/* Stops it as SIGTERM does (worker.c on_signal): waiting runs go, running
 * ones are cancelled, then it closes everything once they have ended. */
void worker_stub_stop(wrk__worker *w);
/* Runs its loop to the end, asserts that every handle was closed, frees. */
void worker_stub_free(wrk__worker *w);

#endif
