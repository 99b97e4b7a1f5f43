"""Loss tables: the mergeable statistics of ``sts`` and ``csts``, so that ``update`` needs
no old data.

A full score vector has no finite summary on a score grid, but the *loss* these two methods
minimise does: it is a sum over rows, and the rows of predicted class k depend on one
parameter only, theta = log T (T_k for ``csts``, the shared T for ``sts``). So a model
keeps, per predicted class, the summed loss and its first two derivatives in theta at
:data:`N_NODES` equally spaced nodes of the whole box theta in [log T_MIN, log T_MAX]
(:func:`tabulate_losses`). Tables of two parts add up (exactly up to float rounding), and
``update`` refits by running the same bounded Newton solver on the quintic Hermite
interpolant of the summed table (C2, matches value, slope and curvature at every node), from
the same start and with the same stopping rules as a fit on the data.

Accuracy (measured, ``docs/scale.md``): with 257 nodes (spacing 0.054 in log T) the fitted T
of every class of five CIFAR networks' outputs (10 and 100 classes) is within 5.1e-8
relative of the fit on the data after 6 updates; with 129 nodes 1.3e-6. The interpolation
error falls like spacing^6.

Size: per predicted class and table, 3 x 257 numbers; a model keeps the tables of its
objective ("nll", or "brier" with "nll" for its warm start, or "multinomial"), plus
"nll-raw" for the reported ``nll_``: 2-3 tables, about 31-46 KB of JSON per class, whatever
the number of samples.

Why not ``tswa``/``cstswa``: with an award the rows of class k depend on two parameters
(theta, b = A / T), and the loss is a genuinely two-dimensional function (``docs/scale.md``
gives the sizes a tensor table would need).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scipy.special import expit

from ...errors import DataError
from ._core import BLOCK, T_MAX, T_MIN, loss_derivs, loss_parts

__all__ = ["N_NODES", "NODES", "LossTables", "TabulatedObjective", "tabulate_losses"]

#: Nodes of the tables in theta = log T: 257 over [log 1e-3, log 1e3] (spacing 0.054). The
#: interpolation error of the fitted T falls like spacing^6: on five CIFAR networks'
#: outputs, 129 nodes gave up to 1.3e-6 relative (a Brier fit of a 100-class network's small
#: class), 257 nodes at most 5.1e-8 (docs/scale.md).
N_NODES = 257
NODES = np.linspace(np.log(T_MIN), np.log(T_MAX), N_NODES)


#: Elements of the (nodes, K - 1, rows) block :func:`tabulate_losses` exponentiates at once
#: (8 MB).
_TAB_ELEMENTS = 1 << 20


def tabulate_losses(d, others, tp, fp, thetas, losses) -> dict:
    """Summed losses and their first two derivatives in theta = log T at each of ``thetas``.

    The loss tables behind ``update`` of the temperature methods without awards (this
    module): the margins m, their derivatives in theta and every loss in ``losses`` (names
    in :data:`~._core.LOSSES`) with its derivatives, summed over rows, the same quantities
    as :class:`~._core.TopLabelObjective` at each node. Many nodes are evaluated at once on
    a block of rows (a class has few rows when there are many classes: one node at a time
    would spend its time in Python, not in exp()).

    Returns
    -------
    dict loss -> ndarray (len(thetas), 3)
        (value, d/dtheta, d2/dtheta2) at each node.
    """
    betas = np.exp(-np.asarray(thetas, dtype=np.float64))
    out = {name: np.zeros((betas.size, 3)) for name in losses}
    n = d.shape[0]
    r = others.shape[0]
    for a in range(0, n, BLOCK):
        b = min(a + BLOCK, n)
        oc = others[None, :, a:b]
        db, tpb, fpb = d[a:b], tp[a:b], fp[a:b]
        step = max(1, _TAB_ELEMENTS // (r * (b - a)))
        for i in range(0, betas.size, step):
            bet = betas[i : i + step, None]
            e = np.exp(bet[:, :, None] * oc)
            s0 = e.sum(axis=1)
            e *= oc
            mean = e.sum(axis=1) / s0
            e *= oc
            var = np.maximum(e.sum(axis=1) / s0 - mean * mean, 0.0)
            dm_db = db - mean
            m = db * bet - np.log(s0)
            # as in TopLabelObjective: theta = log T, d beta / d theta = -beta
            dm_dt = -bet * dm_db
            d2m_dt2 = bet * dm_db - (bet * bet) * var
            pq = (expit(m), expit(-m))  # shared by every loss
            for name in losses:
                f_tp, f_fp = loss_parts(m, name, pq)
                l1, l2 = loss_derivs(m, tpb, fpb, name, pq)
                rows = out[name][i : i + step]
                rows[:, 0] += f_tp @ tpb + f_fp @ fpb
                rows[:, 1] += (l1 * dm_dt).sum(axis=1)
                rows[:, 2] += (l2 * dm_dt * dm_dt + l1 * d2m_dt2).sum(axis=1)
    return out


class TabulatedObjective:
    """A summed loss in x = (theta,) from its table: quintic Hermite interpolation between
    nodes.

    Offers the ``value``/``grad_hess`` interface of the objectives in :mod:`~._core`, so
    :func:`~._core.bounded_newton` runs on it unchanged.

    Parameters
    ----------
    table : ndarray (N_NODES, 3)
        (value, first, second derivative in theta) at :data:`NODES`.
    """

    dim = 1

    def __init__(self, table: np.ndarray):
        self.table = table
        self.h = float(NODES[1] - NODES[0])

    def _eval(self, x):
        theta = float(
            np.clip(np.asarray(x, dtype=np.float64).reshape(-1)[0], NODES[0], NODES[-1])
        )
        h = self.h
        i = int(np.clip(np.floor((theta - NODES[0]) / h), 0, N_NODES - 2))
        t = (theta - NODES[i]) / h
        (f0, d0, s0), (f1, d1, s1) = self.table[i], self.table[i + 1]
        c = np.array([f0, h * d0, h * h * s0, f1, h * d1, h * h * s1])
        t2, t3, t4, t5 = t * t, t**3, t**4, t**5
        # the six quintic Hermite basis functions on [0, 1] (value, slope, curvature at 0,
        # then at 1)
        basis = np.array(
            [
                1 - 10 * t3 + 15 * t4 - 6 * t5,
                t - 6 * t3 + 8 * t4 - 3 * t5,
                0.5 * t2 - 1.5 * t3 + 1.5 * t4 - 0.5 * t5,
                10 * t3 - 15 * t4 + 6 * t5,
                -4 * t3 + 7 * t4 - 3 * t5,
                0.5 * t3 - t4 + 0.5 * t5,
            ]
        )
        d1b = np.array(
            [
                -30 * t2 + 60 * t3 - 30 * t4,
                1 - 18 * t2 + 32 * t3 - 15 * t4,
                t - 4.5 * t2 + 6 * t3 - 2.5 * t4,
                30 * t2 - 60 * t3 + 30 * t4,
                -12 * t2 + 28 * t3 - 15 * t4,
                1.5 * t2 - 4 * t3 + 2.5 * t4,
            ]
        )
        d2b = np.array(
            [
                -60 * t + 180 * t2 - 120 * t3,
                -36 * t + 96 * t2 - 60 * t3,
                1 - 9 * t + 18 * t2 - 10 * t3,
                60 * t - 180 * t2 + 120 * t3,
                -24 * t + 84 * t2 - 60 * t3,
                3 * t - 12 * t2 + 10 * t3,
            ]
        )
        return float(c @ basis), float(c @ d1b) / h, float(c @ d2b) / (h * h)

    def value(self, x) -> float:
        return self._eval(x)[0]

    def grad_hess(self, x):
        _, g, hh = self._eval(x)
        return np.array([g]), np.array([[hh]])


@dataclass(frozen=True, eq=False)
class LossTables:
    """Per predicted class, summed losses and derivatives at :data:`NODES`, and the TP/FP
    counts.

    Attributes
    ----------
    tables : dict str -> ndarray (K, N_NODES, 3)
        Per loss name ("nll", "brier", "nll-raw", "multinomial"), per class, the (value,
        d/dtheta, d2/dtheta2) of the loss summed over the class's rows.
    n_tp, n_fp : ndarray (K,)
        Weighted true and false positives per predicted class.
    """

    tables: dict
    n_tp: np.ndarray
    n_fp: np.ndarray

    @property
    def n_classes(self) -> int:
        return int(self.n_tp.shape[0])

    @property
    def n_samples(self) -> float:
        return float(self.n_tp.sum() + self.n_fp.sum())

    def merge(self, other: "LossTables") -> "LossTables":
        """The tables of both parts' data together (sums; raises DataError if they do not
        match)."""
        if not isinstance(other, LossTables):
            raise DataError(
                f"loss tables merge only with loss tables, got {type(other).__name__}"
            )
        if other.n_classes != self.n_classes or set(other.tables) != set(self.tables):
            raise DataError(
                f"loss tables of {other.n_classes} classes with losses "
                f"{sorted(other.tables)} do not match those of {self.n_classes} classes "
                f"with losses {sorted(self.tables)}"
            )
        return LossTables(
            {name: self.tables[name] + other.tables[name] for name in self.tables},
            self.n_tp + other.n_tp,
            self.n_fp + other.n_fp,
        )

    def objective(self, name: str, classes) -> TabulatedObjective:
        """The loss ``name`` summed over ``classes`` (indices or a boolean mask), as an
        objective."""
        rows = self.tables[name][np.asarray(classes)]
        return TabulatedObjective(rows.sum(axis=0) if rows.ndim == 3 else rows)

    def value(self, name: str, k: int, theta: float) -> float:
        """Loss ``name`` of class ``k`` at theta (interpolated)."""
        return TabulatedObjective(self.tables[name][k]).value([theta])

    # ----------------------------------------------------------- persistence
    def to_dict(self) -> dict:
        return {
            "kind": "loss-tables",
            "log_t_range": [float(NODES[0]), float(NODES[-1])],
            "n_nodes": N_NODES,
            "n_tp": self.n_tp.tolist(),
            "n_fp": self.n_fp.tolist(),
            "tables": {
                name: [row.reshape(-1).tolist() for row in t]
                for name, t in sorted(self.tables.items())
            },
        }

    @classmethod
    def from_dict(cls, d: dict, n_classes: int) -> "LossTables":
        """Rebuild from :meth:`to_dict` output (raises ValueError when malformed)."""
        if d.get("kind") != "loss-tables":
            raise ValueError("statistics of a temperature model must be loss tables")
        if d["n_nodes"] != N_NODES or not np.allclose(
            d["log_t_range"], [NODES[0], NODES[-1]], rtol=0, atol=1e-12
        ):
            raise ValueError(
                f"loss tables on another grid ({d['n_nodes']} nodes over log T in "
                f"{d['log_t_range']})"
            )
        n_tp = np.asarray(d["n_tp"], dtype=np.float64)
        n_fp = np.asarray(d["n_fp"], dtype=np.float64)
        if n_tp.shape != (n_classes,) or n_fp.shape != (n_classes,):
            raise ValueError(f"loss tables need TP and FP counts of {n_classes} classes")
        tables = {}
        for name, rows in d["tables"].items():
            t = np.asarray(rows, dtype=np.float64)
            if t.shape != (n_classes, 3 * N_NODES):
                raise ValueError(
                    f"loss table {name!r} has shape {t.shape}, expected ({n_classes}, "
                    f"{3 * N_NODES})"
                )
            tables[str(name)] = t.reshape(n_classes, N_NODES, 3)
        if not tables or not all(np.all(np.isfinite(t)) for t in tables.values()):
            raise ValueError("loss tables must be present and finite")
        if not (
            np.all(np.isfinite(n_tp))
            and np.all(n_tp >= 0)
            and np.all(np.isfinite(n_fp))
            and np.all(n_fp >= 0)
        ):
            raise ValueError("loss tables' counts must be finite and >= 0")
        return cls(tables, n_tp, n_fp)
