/* The backends this worker can run (backends.c): the trainer's own answer
 * to `BIN devices --json`, asked once at start. */
#ifndef SS_WORKER_BACKENDS_H
#define SS_WORKER_BACKENDS_H

#include <jansson.h>

typedef struct wrk__worker wrk__worker;
typedef struct wrk__run wrk__run;

/* How long `BIN devices --json` may take (loading CUDA, counting devices). */
#define WRK__PROBE_TIMEOUT_MS 60000

/* Asks the trainer (w->bin devices --json) whether CUDA runs on the offered
 * GPUs: sets cuda_ok and the GPUs' compute capability, or cuda_error (and
 * logs it). No GPU: nothing is run. */
void wrk__backends_probe(wrk__worker *w);
/* The hello's "backends": {"cpu": {"slots": K}, "cuda": {"devices": [...]}
 * or {"error": WHY}}. */
json_t *wrk__backends_json(const wrk__worker *w);
/* 1 after failing r's start (exit code 1) when its config asks for the CUDA
 * backend and this worker cannot run it (the scheduler does not place such
 * a run here; an assignment from elsewhere is refused with the reason). */
int wrk__run_backend_refused(wrk__run *r);

#endif
