/* Chinchilla Approach 3's objective and its minimiser (fit_chinchilla.c,
 * sweeps/internal.h): the summed Huber loss on log loss with its analytic
 * gradient and Hessian, and GSL's BFGS2, first in centred coordinates and
 * then whitened by the Hessian. */
#include <gsl/gsl_multimin.h>
#include <math.h>
#include <string.h>

#include "sweeps/internal.h"

#define NT FIT__CHIN_NT /* t0 (a), t1 (b), e, alpha, beta */
#define HUBER_DELTA 1e-3
#define MAX_ITERS 500 /* per BFGS2 run */
#define LINE_TOL 0.1  /* Fletcher's sigma; GSL recommends 0.1 for bfgs2 */

static double huber(double r, double *dr) {
  double ar = fabs(r);
  if (ar <= HUBER_DELTA) {
    *dr = r;
    return 0.5 * r * r;
  }
  *dr = r > 0 ? HUBER_DELTA : -HUBER_DELTA;
  return HUBER_DELTA * (ar - 0.5 * HUBER_DELTA);
}

double fit__chin_eval(fit__chin_objective *o, const double *t, double *g) {
  if (o->cvalid && !memcmp(t, o->cx, sizeof o->cx)) {
    memcpy(g, o->cg, sizeof o->cg);
    return o->cf;
  }
  double f = 0, g0 = 0, g1 = 0, g2 = 0, g3 = 0, g4 = 0;
  const double t0 = t[0], t1 = t[1], e = t[2], al = t[3], be = t[4];
  for (int i = 0; i < o->m; i++) {
    double u1 = t0 - al * o->x1[i], u2 = t1 - be * o->x2[i];
    double mx = u1 > u2 ? u1 : u2;
    mx = mx > e ? mx : e;
    double p1 = exp(u1 - mx), p2 = exp(u2 - mx), p3 = exp(e - mx);
    double s = p1 + p2 + p3;
    double r = mx + log(s) - o->y[i];
    double dr;
    f += o->w[i] * huber(r, &dr);
    double c = o->w[i] * dr / s;
    g0 += c * p1;
    g1 += c * p2;
    g2 += c * p3;
    g3 -= c * p1 * o->x1[i];
    g4 -= c * p2 * o->x2[i];
  }
  g[0] = g0, g[1] = g1, g[2] = g2, g[3] = g3, g[4] = g4;
  memcpy(o->cx, t, sizeof o->cx);
  memcpy(o->cg, g, sizeof o->cg);
  o->cf = f;
  o->cvalid = 1;
  return f;
}

double fit__chin_eval_hessian(const fit__chin_objective *o, const double *t, double *g,
                              double H[FIT__CHIN_NT][FIT__CHIN_NT]) {
  double f = 0;
  memset(H, 0, sizeof(double) * NT * NT);
  memset(g, 0, sizeof(double) * NT);
  for (int i = 0; i < o->m; i++) {
    double x1 = o->x1[i], x2 = o->x2[i];
    double u1 = t[0] - t[3] * x1, u2 = t[1] - t[4] * x2;
    double mx = fmax(fmax(u1, u2), t[2]);
    double p1 = exp(u1 - mx), p2 = exp(u2 - mx), p3 = exp(t[2] - mx);
    double s = p1 + p2 + p3;
    p1 /= s, p2 /= s, p3 /= s;
    double r = mx + log(s) - o->y[i], h1;
    double w = o->w[i];
    f += w * huber(r, &h1);
    double h2 = fabs(r) <= HUBER_DELTA ? 1.0 : 0.0;
    double J[NT] = {p1, p2, p3, -p1 * x1, -p2 * x2};
    for (int a = 0; a < NT; a++) {
      g[a] += w * h1 * J[a];
      for (int b = 0; b <= a; b++)
        H[a][b] += w * (h2 - h1) * J[a] * J[b];
    }
    /* h1 sum_k p_k m_k m_k^T: m_1 = (1,0,0,-x1,0), m_2 = (0,1,0,0,-x2), m_3 = e_2 */
    double c1 = w * h1 * p1, c2 = w * h1 * p2;
    H[0][0] += c1, H[3][0] -= c1 * x1, H[3][3] += c1 * x1 * x1;
    H[1][1] += c2, H[4][1] -= c2 * x2, H[4][4] += c2 * x2 * x2;
    H[2][2] += w * h1 * p3;
  }
  for (int a = 0; a < NT; a++)
    for (int b = a + 1; b < NT; b++)
      H[a][b] = H[b][a];
  return f;
}

/* The coordinates GSL iterates in: t itself, or z = L^T (t - tc) with
 * L L^T the (shifted) Cholesky factor of the Hessian at tc, where the
 * Hessian is near the identity. GSL's BFGS2 normalises its search
 * direction and guesses the first trial step from the last decrease, which
 * in the raw coordinates (condition number ~1e3) costs ~80 iterations of
 * linear convergence and stalls on rounding before a tight gradient
 * tolerance; whitened, it reaches the tolerance in a few. */
typedef struct {
  fit__chin_objective *o;
  int whiten;
  double tc[NT];
  double L[NT][NT];
} frame;

static void frame_point(const frame *fr, const double *z, double *t) {
  if (!fr->whiten) {
    memcpy(t, z, sizeof(double) * NT);
    return;
  }
  double d[NT];
  for (int a = NT - 1; a >= 0; a--) { /* L^T d = z */
    double v = z[a];
    for (int b = a + 1; b < NT; b++)
      v -= fr->L[b][a] * d[b];
    d[a] = v / fr->L[a][a];
  }
  for (int a = 0; a < NT; a++)
    t[a] = fr->tc[a] + d[a];
}

/* gradient in t from the gradient in z: g_t = L g_z */
static void frame_grad_t(const frame *fr, const double *gz, double *gt) {
  for (int a = 0; a < NT; a++) {
    double v = 0;
    for (int b = 0; b <= a; b++)
      v += (fr->whiten ? fr->L[a][b] : (a == b)) * gz[b];
    gt[a] = v;
  }
}

static double frame_eval(frame *fr, const double *z, double *gz) {
  double t[NT], gt[NT];
  frame_point(fr, z, t);
  double f = fit__chin_eval(fr->o, t, gt);
  if (!fr->whiten) {
    memcpy(gz, gt, sizeof gt);
    return f;
  }
  for (int a = 0; a < NT; a++) { /* L g_z = g_t */
    double v = gt[a];
    for (int b = 0; b < a; b++)
      v -= fr->L[a][b] * gz[b];
    gz[a] = v / fr->L[a][a];
  }
  return f;
}

/* L L^T = H + shift I, the smallest shift (0, then from 1e-10 of the
 * largest diagonal up by tens) that makes it positive definite: far from
 * an optimum H may be indefinite, and it is only a preconditioner. */
static int precondition(frame *fr, double H[NT][NT]) {
  double scale = 0;
  for (int a = 0; a < NT; a++)
    scale = fmax(scale, fabs(H[a][a]));
  if (!(scale > 0) || !isfinite(scale))
    return fr->whiten = 0;
  for (double shift = 0; shift < 10 * scale; shift = shift ? shift * 10 : 1e-10 * scale) {
    int ok = 1;
    for (int a = 0; a < NT && ok; a++) {
      for (int b = 0; b <= a; b++) {
        double v = H[a][b] + (a == b ? shift : 0);
        for (int k = 0; k < b; k++)
          v -= fr->L[a][k] * fr->L[b][k];
        if (a == b) {
          ok = v > 1e-14 * scale;
          fr->L[a][a] = ok ? sqrt(v) : 0;
        } else {
          fr->L[a][b] = v / fr->L[b][b];
        }
        if (!ok)
          break;
      }
    }
    if (ok)
      return fr->whiten = 1;
  }
  return fr->whiten = 0;
}

static double gsl_f(const gsl_vector *x, void *p) {
  double g[NT];
  return frame_eval(p, x->data, g);
}

static void gsl_df(const gsl_vector *x, void *p, gsl_vector *g) { frame_eval(p, x->data, g->data); }

static void gsl_fdf(const gsl_vector *x, void *p, double *f, gsl_vector *g) {
  *f = frame_eval(p, x->data, g->data);
}

static double norm5(const double *g) {
  double s = 0;
  for (int k = 0; k < NT; k++)
    s += g[k] * g[k];
  return sqrt(s);
}

static double gnorm_t(const frame *fr, const gsl_multimin_fdfminimizer *s) {
  double gt[NT];
  frame_grad_t(fr, s->gradient->data, gt);
  return norm5(gt);
}

/* BFGS2 in frame fr from z0 until |grad_t f| < gtol, max_iters, or no
 * progress (a stalled line search gets one restart, a fresh Hessian
 * estimate, before giving up). Leaves the best point seen in t (GSL's line
 * search can end on a worse one when it runs out of trials); returns the
 * iterations. */
static int bfgs_in(frame *fr, gsl_multimin_fdfminimizer *s, const double *z0, double step,
                   int max_iters, double gtol, double *t, double *f, double *gn) {
  gsl_multimin_function_fdf fn = {gsl_f, gsl_df, gsl_fdf, NT, fr};
  gsl_vector_const_view x0 = gsl_vector_const_view_array(z0, NT);
  gsl_multimin_fdfminimizer_set(s, &fn, &x0.vector, step, LINE_TOL);
  int iter = 0, stalls = 0;
  double best[NT], fbest = s->f, gbest = gnorm_t(fr, s);
  memcpy(best, s->x->data, sizeof best);
  while (gbest >= gtol && iter < max_iters && isfinite(s->f)) {
    double fprev = s->f;
    int st = gsl_multimin_fdfminimizer_iterate(s);
    iter++;
    if (s->f < fbest || (s->f == fbest && gnorm_t(fr, s) < gbest)) {
      fbest = s->f;
      gbest = gnorm_t(fr, s);
      memcpy(best, s->x->data, sizeof best);
    }
    if (st != GSL_SUCCESS || !(s->f < fprev)) {
      if (++stalls > 1)
        break;
      gsl_multimin_fdfminimizer_restart(s);
    } else {
      stalls = 0;
    }
  }
  frame_point(fr, best, t);
  *f = fbest;
  *gn = gbest;
  return iter;
}

void fit__chin_minimise(fit__chin_objective *o, gsl_multimin_fdfminimizer *s, const double *t0,
                        int plain_iters, int polish, double gtol, fit__chin_run *out) {
  frame fr = {.o = o};
  double t[NT], f = NAN, gn = INFINITY, zero[NT] = {0};
  int iters = 0;
  memcpy(t, t0, sizeof t);
  o->cvalid = 0;
  if (plain_iters > 0)
    iters += bfgs_in(&fr, s, t, 0.1, plain_iters, gtol, t, &f, &gn);
  for (int round = 0; round < polish && !(gn < gtol) && isfinite(t[0]); round++) {
    double H[NT][NT], gz[NT], gt[NT], step = 0.1;
    fit__chin_eval_hessian(o, t, gt, H);
    memcpy(fr.tc, t, sizeof t);
    if (precondition(&fr, H)) {
      /* whitened, the Newton step has length |g_z| */
      frame_eval(&fr, zero, gz);
      step = norm5(gz) > 0 ? norm5(gz) : 1e-3;
    }
    iters += bfgs_in(&fr, s, fr.whiten ? zero : t, step, MAX_ITERS, gtol, t, &f, &gn);
  }
  memcpy(out->t, t, sizeof t);
  out->f = f;
  out->gnorm = gn;
  out->converged = gn < gtol && isfinite(f);
  out->iters = iters;
}
