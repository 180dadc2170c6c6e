/* The backends this worker can run (internal.h): on a host with GPUs, the
 * trainer's own answer to `BIN devices --json`, run once at start in a
 * process of its own (the worker never maps the CUDA libraries). A GPU that
 * nvidia-smi lists is only offered for CUDA runs when the trainer could load
 * the CUDA module and CUDA sees the device; otherwise the hello says why, and
 * the scheduler places no GPU run here. */
#include "worker/backends.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/err.h"
#include "worker/internal.h"
#include "worker/lifecycle.h"
#include "worker/log.h"

extern char **environ;

enum { PROBE_MAX_OUTPUT = 1 << 16 };

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Runs BIN devices --json with a time limit; its stdout (NUL-terminated,
 * caller frees) or NULL with why in err. */
static char *probe_output(const char *bin, int timeout_ms, char *err, size_t errlen) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    snprintf(err, errlen, "pipe: %s", strerror(errno));
    return NULL;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  char *argv[] = {(char *)bin, "devices", "--json", NULL};
  pid_t pid;
  int rc = posix_spawn(&pid, bin, &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    snprintf(err, errlen, "cannot run %.300s devices: %s", bin, strerror(rc));
    return NULL;
  }
  char *out = malloc(PROBE_MAX_OUTPUT + 1);
  size_t n = 0;
  int timed_out = 0;
  uint64_t deadline = now_ms() + (uint64_t)timeout_ms;
  while (out) {
    uint64_t t = now_ms();
    if (t >= deadline) {
      timed_out = 1;
      break;
    }
    struct pollfd p = {.fd = fds[0], .events = POLLIN};
    int r = poll(&p, 1, (int)(deadline - t));
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      continue; /* the deadline check ends it */
    ssize_t got = read(fds[0], out + n, PROBE_MAX_OUTPUT - n);
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0 || (n += (size_t)got) == PROBE_MAX_OUTPUT)
      break;
  }
  close(fds[0]);
  if (timed_out)
    kill(pid, SIGKILL);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
    ;
  if (!out) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  out[n] = '\0';
  if (timed_out || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    if (timed_out)
      snprintf(err, errlen, "%.300s devices did not answer within %d s", bin, timeout_ms / 1000);
    else if (WIFEXITED(st))
      snprintf(err, errlen, "%.300s devices exited with code %d", bin, WEXITSTATUS(st));
    else
      snprintf(err, errlen, "%.300s devices was killed by signal %d", bin, WTERMSIG(st));
    free(out);
    return NULL;
  }
  return out;
}

/* Takes the CUDA devices of the probe's answer into the offered GPUs (same
 * index: both count in PCI bus order); 0, or -1 with why in err. */
static int take_devices(wrk__worker *w, const json_t *cuda, char *err, size_t errlen) {
  const char *e = json_string_value(json_object_get(cuda, "error"));
  json_t *devs = json_object_get(cuda, "devices");
  if (e) {
    snprintf(err, errlen, "%s", e);
    return -1;
  }
  if (!json_is_array(devs)) {
    snprintf(err, errlen, "the trainer's devices answer has no \"cuda\" devices");
    return -1;
  }
  int missing = 0;
  for (int i = 0; i < w->ngpus; i++) {
    wrk__gpu *g = &w->gpus[i];
    size_t j;
    json_t *d;
    int found = 0;
    json_array_foreach(devs, j, d) {
      if (json_integer_value(json_object_get(d, "index")) != g->index)
        continue;
      snprintf(g->cc, sizeof g->cc, "%s",
               json_string_value(json_object_get(d, "compute_capability")) ?: "");
      found = 1;
    }
    if (!found) {
      wrk__log("GPU %d (%s): nvidia-smi lists it, CUDA does not (CUDA_VISIBLE_DEVICES?)",
               g->index, g->name);
      missing++;
    }
  }
  if (missing == w->ngpus) {
    snprintf(err, errlen, "CUDA sees none of the GPUs nvidia-smi lists");
    return -1;
  }
  return 0;
}

void wrk__backends_probe(wrk__worker *w) {
  w->cuda_ok = 0;
  w->cuda_error[0] = '\0';
  if (w->ngpus == 0) {
    snprintf(w->cuda_error, sizeof w->cuda_error, "no GPU on this host (nvidia-smi lists none)");
    return;
  }
  char err[sizeof w->cuda_error] = "";
  char *out = probe_output(w->bin, WRK__PROBE_TIMEOUT_MS, err, sizeof err);
  json_error_t je;
  json_t *all = out ? json_loads(out, 0, &je) : NULL;
  if (out && !all)
    snprintf(err, sizeof err, "%.300s devices --json: not JSON (%s)", w->bin, je.text);
  free(out);
  if (all && take_devices(w, json_object_get(all, "cuda"), err, sizeof err) == 0)
    w->cuda_ok = 1;
  json_decref(all);
  if (w->cuda_ok) {
    wrk__log("CUDA backend ready on %d GPU(s)", w->ngpus);
    return;
  }
  snprintf(w->cuda_error, sizeof w->cuda_error, "%s", err);
  /* one line: the reason's HINT goes to the hello, not the log */
  char *nl = strchr(err, '\n');
  if (nl)
    *nl = '\0';
  wrk__log("%d GPU(s) listed by nvidia-smi, but the CUDA backend cannot run here: %s; the "
           "scheduler places no GPU run on this worker",
           w->ngpus, err);
}

json_t *wrk__backends_json(const wrk__worker *w) {
  json_t *cuda;
  if (w->cuda_ok) {
    json_t *devs = json_array();
    for (int i = 0; i < w->ngpus; i++)
      json_array_append_new(devs, json_pack("{s:i,s:s,s:I,s:s}", "index", w->gpus[i].index,
                                            "name", w->gpus[i].name, "memory_bytes",
                                            (json_int_t)w->gpus[i].memory_bytes,
                                            "compute_capability", w->gpus[i].cc));
    cuda = json_pack("{s:o}", "devices", devs);
  } else {
    cuda = json_pack("{s:s}", "error", w->cuda_error);
  }
  return json_pack("{s:{s:i},s:o}", "cpu", "slots", w->cpu_slots, "cuda", cuda);
}

int wrk__run_backend_refused(wrk__run *r) {
  const char *backend =
      json_string_value(json_object_get(json_object_get(r->assign, "config"), "backend"));
  if (!backend || strcmp(backend, "cuda") != 0 || r->w->cuda_ok)
    return 0;
  char why[sizeof r->w->cuda_error];
  snprintf(why, sizeof why, "%s", r->w->cuda_error);
  char *nl = strchr(why, '\n');
  if (nl)
    *nl = '\0';
  wrk__run_fail_start(r, SS_EXIT_FAILURE,
                      "not started: this worker cannot run \"backend\": \"cuda\": %s", why);
  return 1;
}
