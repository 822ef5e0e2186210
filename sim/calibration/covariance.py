"""Standard errors of a fit, from the Jacobian of its residuals at the solution (finite steps of 0.05 in log space:
a parameter's ``log_sd`` is its relative uncertainty).

Residuals are in tolerance units, so each cell's noise is about its tolerance; each input (a table, or one observable
of a log) estimates its own as its residuals' mean square over its degrees of freedom, shrunk toward the tolerance
with the weight of two cells (floored at a tenth of the tolerance), so data that agree better than claimed are
trusted more and data that agree worse less; rows are weighted as the soft-L1 fit weighs them. A parameter whose
column of the Jacobian is flat, that only a combination pins down, or whose relative standard error exceeds 100% is
flagged. The calibration file keeps the log-space covariance of the fitted parameters, which ``sim run --uncertainty
N`` samples from.
"""

from __future__ import annotations

import math

import numpy as np

from sim.calibration.problem import Problem, free_sets

SIGMA_FLOOR = 0.1  # tolerance units: no input is trusted beyond a tenth of its claimed error
PRIOR_DOF = 2.0  # an input's noise estimate is shrunk toward its tolerance as if the tolerance were 2 more cells


def jacobian(problem: Problem, names: list[str], x: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Residuals at log values ``x`` and their forward-difference Jacobian (steps of 0.05 in log space, backward at
    the upper bound)."""

    r0 = problem.residuals(free_sets(names, x))
    jac = np.zeros((r0.size, len(names)))
    h = 0.05
    for j in range(len(names)):
        step = x.copy()
        step[j] += h if step[j] + h <= hi[j] + 1e-12 else -h
        jac[:, j] = (problem.residuals(free_sets(names, step)) - r0) / (step[j] - x[j])
    return r0, jac


def standard_errors(problem: Problem, names: list[str], x: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                    jac: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Log-space standard errors and covariance from the Jacobian of the residuals (tolerance units), with the noise
    model of the module docstring; warnings for what the data cannot pin down.

    Each input's noise (in tolerance units) is its residuals' mean square over its degrees of freedom, shrunk toward
    1 (the tolerance) with the weight of ``PRIOR_DOF`` cells: an input with few cells keeps about its tolerance, one
    with many speaks for itself. Rows are then weighted as the soft-L1 loss weighs them at the solution
    (``(1 + r^2)^(-1/2)`` in the normal equations, r in tolerance units), so a cell the fit treats as an outlier
    does not narrow the errors either."""
    m, k = jac.shape
    groups = [t.source + ("" if t.how != "request" else " " + t.metric) for t in problem.fit]
    sigma = np.ones(m)
    for g in set(groups):
        rows_g = np.array([q == g for q in groups])
        n_g = int(rows_g.sum())
        dof = max(n_g - k * n_g / m, 0.0)  # its share of the fit's degrees of freedom
        # (dof * s^2 + PRIOR_DOF * 1) / (dof + PRIOR_DOF), s^2 = rss / dof: its mean square, shrunk toward 1
        var = (float(r[rows_g] @ r[rows_g]) + PRIOR_DOF) / (dof + PRIOR_DOF)
        sigma[rows_g] = max(math.sqrt(var), SIGMA_FLOOR)
    jw = jac / sigma[:, None] * ((1 + r * r) ** -0.25)[:, None]  # the fit's soft-L1 weights, from its residuals
    warnings = []
    if m < k:
        warnings.append(f"{m} measured cells for {k} parameters: the fit is under-determined")
    # covariance from the SVD: a direction the data do not constrain (a singular value under 1e-8 of the largest)
    # has no finite variance, and every parameter along it gets an infinite standard error
    _, sv, vt = np.linalg.svd(jw, full_matrices=False)
    good = sv > 1e-8 * max(float(sv.max()) if sv.size else 0.0, 1e-300)
    cov = (vt[good].T / sv[good] ** 2) @ vt[good]
    blind = np.abs(vt[~good]).max(axis=0) > 1e-6 if (~good).any() else np.zeros(k, dtype=bool)
    if m < k:
        blind[:] = True
    sd = np.sqrt(np.clip(np.diag(cov), 0, None))
    sd[blind] = np.inf
    cov[blind, :] = np.nan
    cov[:, blind] = np.nan
    col = np.linalg.norm(jac, axis=0)
    for i, n in enumerate(names):
        if col[i] < 1e-6 * max(col.max(), 1e-300):
            warnings.append(f"{n}: the observations do not depend on it (flat Jacobian)")
        elif blind[i]:
            warnings.append(f"{n}: only a combination with other parameters is pinned down (no standard error)")
        elif sd[i] > 1.0:
            warnings.append(f"{n}: not pinned down by these observations (relative standard error {sd[i]:.0%})")
        if abs(x[i] - lo[i]) < 1e-6 or abs(x[i] - hi[i]) < 1e-6:
            warnings.append(f"{n}: at its bound ({math.exp(x[i]):.4g}): widen calibrate.free.{n}")
    return sd, cov, warnings
