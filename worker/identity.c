/* The worker's identity (internal.h; docs/runtime.md, "Worker identity"):
 * the secret the scheduler gave this worker's name at its first
 * registration, kept in WORK_DIR/identity.json with the name it belongs to
 * ({"name": NAME, "secret": SECRET}, mode 0600), and presented in every
 * hello; a worker restarted with the same --name and --work-dir is the same
 * worker. The instance is this process's own random string. */
#include "worker/identity.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/err.h"
#include "common/fileio.h"
#include "common/token.h"
#include "worker/internal.h"
#include "worker/log.h"

static void identity_path(const wrk__worker *w, char *out, size_t n) {
  snprintf(out, n, "%s/identity.json", w->work_dir);
}

void wrk__identity_load(wrk__worker *w) {
  token_random_hex(w->instance, 16); /* none on failure: the hello leaves it out */
  char path[PATH_MAX + 32], err[256];
  identity_path(w, path, sizeof path);
  char *text = NULL;
  if (fio_read_all(path, &text, NULL, err, sizeof err) != 0)
    return; /* none yet: the first welcome gives one */
  json_t *j = json_loads(text, 0, NULL);
  free(text);
  const char *name = json_string_value(json_object_get(j, "name"));
  const char *secret = json_string_value(json_object_get(j, "secret"));
  if (name && secret && !strcmp(name, w->name) && strlen(secret) < sizeof w->secret)
    snprintf(w->secret, sizeof w->secret, "%s", secret);
  else if (name && strcmp(name, w->name) != 0)
    wrk__log("%s holds the identity of worker \"%s\", not of \"%s\": registering as a new "
             "worker name",
             path, name, w->name);
  else
    wrk__log("%s: not an identity ({\"name\", \"secret\"}); ignored", path);
  json_decref(j);
}

void wrk__identity_welcome(wrk__worker *w, const json_t *welcome) {
  const char *secret = json_string_value(json_object_get(welcome, "secret"));
  if (!secret || strlen(secret) >= sizeof w->secret)
    return;
  snprintf(w->secret, sizeof w->secret, "%s", secret);
  char path[PATH_MAX + 32], err[PATH_MAX + 512];
  identity_path(w, path, sizeof path);
  json_t *j = json_pack("{s:s,s:s}", "name", w->name, "secret", w->secret);
  char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
  json_decref(j);
  fio_atomic a;
  int rc = text ? fio_atomic_open(&a, path, err, sizeof err) : SS_ENOMEM;
  if (rc == 0) {
    if (fchmod(a.fd, 0600) != 0) {
      snprintf(err, sizeof err, "%s: chmod: %s", path, strerror(errno));
      fio_atomic_abort(&a);
      rc = SS_EIO;
    } else {
      fio_atomic_write(&a, text, strlen(text));
      fio_atomic_write(&a, "\n", 1);
      rc = fio_atomic_commit(&a, err, sizeof err);
    }
  }
  free(text);
  if (rc)
    wrk__log("cannot keep this worker's identity (%s): a restart will register the name anew, "
             "which the scheduler allows only once no run is leased to it",
             rc == SS_ENOMEM ? "out of memory" : err);
}
