/* The worker's two ways of starting a trainer, side by side (docs/runtime.md
 * "Runtime figures"): libuv's uv_spawn (fork, then exec) against
 * posix_spawn (glibc: vfork semantics, no copy of the parent's page
 * tables, no atfork handlers), from a process that holds MIB megabytes
 * touched and links OpenBLAS, as the worker does. Each start is timed from
 * the call to its return (both return once the child has exec'd), then the
 * child is reaped; prints median and p99 of each and their ratio. Built,
 * never run by ctest:
 *   build/tests/spawn_bench [STARTS (300)] [MIB (12)] */
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

extern char **environ;
void openblas_set_num_threads(int); /* linked, as the worker links it */

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void on_exit_cb(uv_process_t *p, int64_t status, int sig) {
  (void)status;
  (void)sig;
  uv_close((uv_handle_t *)p, NULL);
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 300;
  size_t mib = argc > 2 ? (size_t)atoi(argv[2]) : 12;
  if (n < 2) {
    fprintf(stderr, "usage: spawn_bench [STARTS >= 2] [MIB]\n");
    return 2;
  }
  openblas_set_num_threads(2);
  char *ballast = malloc(mib << 20);
  double *fk = malloc(sizeof *fk * (size_t)n), *vf = malloc(sizeof *vf * (size_t)n);
  if (!ballast || !fk || !vf)
    return 1;
  memset(ballast, 1, mib << 20);
  char *args[] = {"/bin/true", NULL};
  uv_loop_t *loop = uv_default_loop();
  for (int i = 0; i < n; i++) {
    uv_process_t p;
    uv_process_options_t o;
    memset(&o, 0, sizeof o);
    o.file = args[0];
    o.args = args;
    o.exit_cb = on_exit_cb;
    double t = now_ms();
    if (uv_spawn(loop, &p, &o) != 0)
      return 1;
    fk[i] = now_ms() - t;
    uv_run(loop, UV_RUN_DEFAULT);
  }
  for (int i = 0; i < n; i++) {
    pid_t pid;
    double t = now_ms();
    if (posix_spawn(&pid, args[0], NULL, NULL, args, environ) != 0)
      return 1;
    vf[i] = now_ms() - t;
    waitpid(pid, NULL, 0);
  }
  qsort(fk, (size_t)n, sizeof *fk, cmp);
  qsort(vf, (size_t)n, sizeof *vf, cmp);
  printf("%d starts of /bin/true from a process with %zu MiB touched (ms):\n", n, mib);
  printf("  uv_spawn (fork + exec)      median %.3f  p99 %.3f\n", fk[n / 2], fk[n * 99 / 100]);
  printf("  posix_spawn (vfork + exec)  median %.3f  p99 %.3f\n", vf[n / 2], vf[n * 99 / 100]);
  printf("  ratio posix_spawn / uv_spawn, median %.3f\n", vf[n / 2] / fk[n / 2]);
  free(ballast);
  free(fk);
  free(vf);
  return 0;
}
