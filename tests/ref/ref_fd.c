/* The one central finite-difference checker: gradients of any scalar function of a
 * double array, compared by the relative error of the whole vector (an element-wise
 * tolerance would fail on the gradients' small entries, where differences are noise). */
#include <math.h>
#include "ref.h"
#include "testutil.h"

void tr_ref_fd_grad(double (*f)(void *ctx), void *ctx, double *x, int64_t n, double h, double *grad) {
    for (int64_t i = 0; i < n; i++) {
        double x0 = x[i];
        x[i] = x0 + h;
        double lp = f(ctx);
        x[i] = x0 - h;
        double lm = f(ctx);
        x[i] = x0;
        grad[i] = (lp - lm) / (2 * h);
    }
}

double tr_ref_rel_err(const double *a, const double *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

void tr_ref_check_fd(const char *what, const double *got, const double *fd, int64_t n, double tol) {
    double e = tr_ref_rel_err(got, fd, n);
    if (!(e < tol)) fail_msg("%s: relative error %.3g against finite differences >= %.1g", what, e, tol);
}
