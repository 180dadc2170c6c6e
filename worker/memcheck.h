/* An assignment's memory against the host's, before it starts
 * (memcheck.c). */
#ifndef SS_WORKER_MEMCHECK_H
#define SS_WORKER_MEMCHECK_H

typedef struct wrk__run wrk__run;

/* 1 after failing r's start (wrk__run_fail_start, exit code 2) when its
 * memory (runcfg/memory.h) exceeds what it would run on: MemAvailable for a
 * CPU run, the smallest of its GPUs' reported memory for a GPU run; 0 when
 * it fits or that cannot be told. config_text: the assigned config as the
 * worker encoded it for config.json (proc.c), so it is encoded once. */
int wrk__run_memory_refused(wrk__run *r, const char *config_text);

#endif
