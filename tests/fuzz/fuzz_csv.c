/* The fit CSV reader (`scalesweep fit --points FILE.csv`): fit_read_csv on
 * the input written to a scratch file. What it accepts must be usable by
 * the fits: at least one point, every value present positive and finite. */
#include <math.h>
#include <stdlib.h>

#include "fuzz.h"
#include "sweeps/fit.h"

static int bad_value(double v) { return !isnan(v) && !(isfinite(v) && v > 0); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_write_file("points.csv", data, size);
  fit_point *pts = NULL;
  int n = 0;
  char err[512] = "";
  if (fit_read_csv(path, &pts, &n, err, sizeof err) == 0) {
    if (n < 1 || !pts)
      abort();
    for (int i = 0; i < n; i++)
      if (bad_value(pts[i].params) || bad_value(pts[i].tokens) || bad_value(pts[i].loss) ||
          bad_value(pts[i].flops) || bad_value(pts[i].batch_size) || bad_value(pts[i].steps) ||
          bad_value(pts[i].lr) || pts[i].group < -1 || pts[i].group >= n)
        abort();
  } else if (!err[0] || pts || n) {
    abort();
  }
  free(pts);
  return 0;
}
