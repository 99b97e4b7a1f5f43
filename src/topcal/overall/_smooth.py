"""Smooth ECE (Blasiok and Nakkiran 2024) on a grid, with its bootstrap."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..data import TopLabelData
from ..errors import ParameterError
from ._binned import basic_interval, cells_of, poisson_factors
from ._common import CHUNK, LEVEL, RESAMPLES, Estimate, Rows, check_level, rows_of

# -------------------------------------------------------------------------------- smooth ECE


@dataclass(frozen=True)
class Grid:
    """How smooth ECE is discretised: ``nodes`` grid points on [0, 1] (linear binning), and
    the boundary: ``"reflect"`` (the definition: the kernel reflected at 0 and 1 keeps each
    sample's mass, so a mass on a boundary node, its own mirror image, counts twice; the
    integral by the trapezoid rule over the samples' weight) or ``"relplot"`` (relplot 1.0's
    discretisation: a boundary node counts once and the sum over nodes is divided by the
    smoothed density's sum, so samples on the boundary node weigh about half; on 1,001
    nodes, as relplot for bandwidths above 0.01)."""

    nodes: int
    boundary: str

    def masses(self, c: np.ndarray, weights: list) -> list:
        x = c * (self.nodes - 1)
        i = np.clip(x.astype(np.int64), 0, self.nodes - 2)
        f = x - i
        return [
            np.bincount(i, weights=w * (1 - f), minlength=self.nodes)
            + np.bincount(i + 1, weights=w * f, minlength=self.nodes)
            for w in weights
        ]

    def smooth(self, v: np.ndarray, sigma: float) -> np.ndarray:
        """Gaussian smoothing (sd ``sigma``) of node masses ``v`` (last axis), the kernel
        reflected at 0 and 1: K(t, x) = phi(t - x) + phi(t + x) + phi(t - 2 + x)."""
        g = self.nodes
        h = 1.0 / (g - 1)
        mid = v.copy()
        if self.boundary == "reflect":
            mid[..., 0] *= 2
            mid[..., -1] *= 2
        ext = np.concatenate([v[..., :0:-1], mid, v[..., -2::-1]], axis=-1)
        half = min(int(np.ceil(8 * sigma / h)), 2 * (g - 1))
        off = np.arange(-half, half + 1) * h
        ker = np.exp(-0.5 * (off / sigma) ** 2) / (np.sqrt(2 * np.pi) * sigma)
        n = 1 << int(np.ceil(np.log2(ext.shape[-1] + ker.size - 1)))
        full = np.fft.irfft(np.fft.rfft(ext, n) * np.fft.rfft(ker, n), n)
        start = g - 1 + half  # the convolution's index of node 0
        return full[..., start : start + g]

    def error(self, mass: np.ndarray, res: np.ndarray, sigma: float) -> np.ndarray:
        """Smooth ECE at bandwidth ``sigma``: the integral over [0, 1] of |kernel-smoothed
        residual mass| over the samples' weight."""
        r = np.abs(self.smooth(res, sigma))
        if self.boundary == "relplot":
            with np.errstate(invalid="ignore", divide="ignore"):  # an empty resample: dropped
                return r.sum(axis=-1) / self.smooth(mass, sigma).sum(axis=-1)
        trap = r.sum(axis=-1) - 0.5 * (r[..., 0] + r[..., -1])
        return trap / (self.nodes - 1) / mass.sum(axis=-1)

    def bandwidth(self, mass: np.ndarray, res: np.ndarray) -> float:
        """The fixed point sigma = smECE_sigma (smECE_sigma decreases in sigma), by
        bisection to 1e-6; the smallest searched bandwidth (8 grid spacings) where the error
        is smaller still."""
        lo, hi = 8.0 / (self.nodes - 1), 1.0
        if self.error(mass, res, lo) <= lo:
            return lo
        if self.error(mass, res, hi) >= hi:
            return hi
        while hi - lo > 1e-6:
            mid = 0.5 * (lo + hi)
            if self.error(mass, res, mid) > mid:
                lo = mid
            else:
                hi = mid
        return 0.5 * (lo + hi)


GRIDS = {"reflect": Grid(4097, "reflect"), "relplot": Grid(1001, "relplot")}


def check_boundary(boundary) -> Grid:
    if boundary not in GRIDS:
        raise ParameterError(
            f"parameter 'boundary' must be one of {', '.join(map(repr, GRIDS))}, got "
            f"{boundary!r}"
        )
    return GRIDS[boundary]


def smece_bandwidth(data: TopLabelData, confidence, *, boundary: str = "relplot") -> float:
    """The automatic bandwidth of smooth ECE: the sigma where smooth ECE at sigma equals
    sigma."""
    grid = check_boundary(boundary)
    r = rows_of(data, confidence)
    return grid.bandwidth(*grid.masses(r.c, [r.tp + r.fp, r.tp * (r.c - 1) + r.fp * r.c]))


def smece(
    data: TopLabelData,
    confidence,
    *,
    level: float = LEVEL,
    resamples: int = RESAMPLES,
    seed: int = 0,
    boundary: str = "relplot",
) -> Estimate:
    """Smooth ECE (Blasiok and Nakkiran 2024): the kernel-smoothed residual (confidence -
    label) integrated in absolute value over [0, 1], Gaussian kernel reflected at 0 and 1,
    bandwidth the fixed point sigma = smECE_sigma; pooled over classes. Bootstrap interval
    at the data's bandwidth. ``boundary="relplot"`` (the default, so that the figure
    compares with published ones) is relplot 1.0's discretisation, ``"reflect"`` the
    definition's reflected kernel; they differ where confidences pile up at 1
    (docs/metrics.md)."""
    grid = check_boundary(boundary)
    check_level(level, resamples, seed)
    return smece_of(rows_of(data, confidence), level, resamples, seed, grid)


def smece_of(r: Rows, level, resamples, seed, grid: Grid) -> Estimate:
    w = r.tp + r.fp
    resid = r.tp * (r.c - 1) + r.fp * r.c
    mass, res = grid.masses(r.c, [w, resid])
    sigma = grid.bandwidth(mass, res)
    value = float(grid.error(mass, res, sigma))
    if r.total < 2:
        return Estimate(value, reason="one sample: no interval")
    # cells: the grid's intervals by label; a resample scales each cell's share of its two
    # nodes
    g = grid.nodes - 1
    key = np.clip((r.c * g).astype(np.int64), 0, g - 1)
    cells = cells_of(r, key, lambda k: k)
    frac = np.concatenate([r.tp * (r.c * g - key), r.fp * (r.c * g - key)])
    frac = frac[np.concatenate([r.tp, r.fp]) > 0]
    right = np.bincount(cells.inverse, weights=frac, minlength=cells.n.size) / cells.n
    resid = cells.s - cells.t  # the cell's sum of (confidence - label)
    ukey = cells.key[cells.starts]
    rng = np.random.default_rng([seed, 4])
    draws = []
    for start in range(0, resamples, CHUNK):
        f = poisson_factors(rng, cells.n, min(CHUNK, resamples - start))
        m = np.zeros((f.shape[0], grid.nodes))
        q = np.zeros((f.shape[0], grid.nodes))
        for out, x in ((m, cells.n), (q, resid)):
            out[:, ukey] += cells.add(f * (x * (1 - right)))
            out[:, ukey + 1] += cells.add(f * (x * right))
        draws.append(grid.error(m, q, sigma))
    return basic_interval(value, np.concatenate(draws), level)
