/* Finding and loading the CUDA module (cuda_module.h). */
#include "kernels/cuda_module.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
static const kern_cuda_module *loaded;

/* The directory of the running executable, without the trailing slash;
 * 0, or -1 when /proc/self/exe cannot be read. */
static int exe_dir(char *dir, size_t len) {
  char path[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0)
    return -1;
  path[n] = '\0';
  char *slash = strrchr(path, '/');
  if (!slash)
    return -1;
  *slash = '\0';
  snprintf(dir, len, "%s", path);
  return 0;
}

/* dlopen of one path: the module's table, or NULL with why appended to
 * tried (missing files say only "not found"). */
static const kern_cuda_module *try_path(const char *path, char *tried, size_t len) {
  size_t off = strlen(tried);
  if (access(path, F_OK) != 0) {
    snprintf(tried + off, len - off, "%s%s (not found)", off ? "; " : "", path);
    return NULL;
  }
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(tried + off, len - off, "%s%s (%s)", off ? "; " : "", path, dlerror());
    return NULL;
  }
  const kern_cuda_module *m = dlsym(h, KERN_CUDA_MODULE_SYMBOL);
  if (!m || m->abi != KERN_CUDA_MODULE_ABI) {
    snprintf(tried + off, len - off, "%s%s (%s)", off ? "; " : "", path,
             m ? "built by another version of scalesweep" : "no " KERN_CUDA_MODULE_SYMBOL);
    dlclose(h);
    return NULL;
  }
  return m; /* never closed: cudart does not support being unloaded */
}

const kern_cuda_module *kern_cuda_load(char *err, size_t errlen) {
  pthread_mutex_lock(&load_lock);
  const kern_cuda_module *m = loaded;
  char tried[2048] = "";
  if (!m) {
    const char *env = getenv(KERN_CUDA_MODULE_ENV);
    char dir[PATH_MAX], path[PATH_MAX + 64];
    if (env && env[0]) {
      m = try_path(env, tried, sizeof tried);
    } else if (exe_dir(dir, sizeof dir) == 0) {
      snprintf(path, sizeof path, "%s/%s", dir, KERN_CUDA_MODULE_FILE);
      m = try_path(path, tried, sizeof tried);
      if (!m) {
        snprintf(path, sizeof path, "%s/../lib/scalesweep/%s", dir, KERN_CUDA_MODULE_FILE);
        m = try_path(path, tried, sizeof tried);
      }
    } else {
      snprintf(tried, sizeof tried, "/proc/self/exe cannot be read");
    }
    loaded = m;
  }
  pthread_mutex_unlock(&load_lock);
  if (!m)
    snprintf(err, errlen,
             "backend \"cuda\": cannot load the CUDA module %s: %s\nHINT: it is built beside "
             "scalesweep wherever nvcc is found at configure time (cmake's \"CUDA kernels ON\"); "
             "its CUDA libraries (libcudart, libcublas, libcublasLt) must be on the loader's "
             "path; %s=PATH names another; or use \"backend\": \"cpu\"",
             KERN_CUDA_MODULE_FILE, tried, KERN_CUDA_MODULE_ENV);
  return m;
}
