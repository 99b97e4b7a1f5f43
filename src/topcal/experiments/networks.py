"""Step 2 of the ensemble experiment (:mod:`topcal.experiments.ensembles`): the networks.

:class:`NetworkCache` keeps each trained network's log-softmax outputs on both test sets on
disk (an interrupted run resumes, later analyses reuse them); :func:`network_outputs` trains
the missing networks (:mod:`topcal.experiments.mlp`) and returns :class:`NetworkOutputs`.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from .._parallel import available_cpus
from ..errors import DataError, ParameterError, TopcalError
from .ensembles import ExperimentConfig, combine_log_probs
from .idx import MnistData, load_mnist, split_train_test1

__all__ = ["NetworkCache", "NetworkOutputs", "network_outputs"]


# -------------------------------------------------------------------- cache
class NetworkCache:
    """Per-network log-softmax outputs on both test sets, on disk.

    One directory per network configuration (named by a hash of
    :meth:`ExperimentConfig.network_key`), holding ``key.json`` and one ``net_NNNNN.npz``
    per network with ``test1`` and ``test2`` (float32, shape (n, K)). Files are written
    atomically, so a killed run leaves only complete files; the next run trains just the
    missing networks.
    """

    def __init__(self, root, key: dict):
        self.key = key
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
        self.dir = Path(root) / digest
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            kf = self.dir / "key.json"
            if not kf.exists():
                kf.write_text(json.dumps(key, indent=1, sort_keys=True))
        except OSError as exc:
            raise TopcalError(
                f"cannot use cache directory {str(self.dir)!r}: {exc.strerror or exc}"
            ) from None

    def path(self, i: int) -> Path:
        """File of network ``i``."""
        return self.dir / f"net_{i:05d}.npz"

    def checkpoint_path(self, indices: Sequence[int]) -> Path:
        """Training checkpoint of the batch of networks ``indices``."""
        tag = hashlib.sha256(",".join(map(str, indices)).encode()).hexdigest()[:12]
        return self.dir / f"train_{tag}.pt"

    def has(self, i: int) -> bool:
        """Whether network ``i`` is cached."""
        return self.path(i).is_file()

    def save(self, i: int, test1: np.ndarray, test2: np.ndarray) -> None:
        """Store network ``i``'s outputs (atomic: temp file, then rename)."""
        tmp = self.dir / f".net_{i:05d}.tmp.npz"
        np.savez(tmp, test1=test1.astype(np.float32), test2=test2.astype(np.float32))
        os.replace(tmp, self.path(i))

    def load(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Network ``i``'s (test1, test2) log-softmax outputs."""
        p = self.path(i)
        try:
            with np.load(p, allow_pickle=False) as f:
                return f["test1"], f["test2"]
        except (OSError, KeyError, ValueError) as exc:
            raise DataError(
                f"cached network file {str(p)!r} is unreadable ({exc}); delete it and the run "
                f"retrains that network"
            ) from None


@dataclass(frozen=True, eq=False)
class NetworkOutputs:
    """The M networks' outputs on both test sets.

    Attributes
    ----------
    log_probs : (ndarray, ndarray)
        float32 arrays of shape (M, n1, K) and (M, n2, K).
    labels : (ndarray, ndarray)
        int64 true classes of test set 1 and test set 2.
    classes : tuple of str
    trained : tuple of int
        Networks trained in this call (the others came from the cache).
    train_seconds : float
        Wall time spent training in this call.
    cache_dir : str
    """

    log_probs: tuple[np.ndarray, np.ndarray]
    labels: tuple[np.ndarray, np.ndarray]
    classes: tuple[str, ...]
    trained: tuple[int, ...]
    train_seconds: float
    cache_dir: str

    @property
    def n_networks(self) -> int:
        """M."""
        return int(self.log_probs[0].shape[0])

    def ensemble_data(self, members: np.ndarray, rule: str = "product"):
        """The ensemble of networks ``members`` on (test set 1, test set 2), as two
        TopLabelData."""
        from ..data import TopLabelData

        return tuple(
            TopLabelData.from_logits(combine_log_probs(lp[members], rule), y, self.classes)
            for lp, y in zip(self.log_probs, self.labels)
        )

    def accuracy(self) -> np.ndarray:
        """Accuracy of each network on each test set, shape (M, 2)."""
        return np.stack(
            [
                (lp.argmax(axis=2) == y[None, :]).mean(axis=1)
                for lp, y in zip(self.log_probs, self.labels)
            ],
            axis=1,
        )


def _prepare(data: MnistData, cfg: ExperimentConfig):
    n_total = data.train_images.shape[0]
    split_seed = np.random.SeedSequence([cfg.seed, 1])  # stream 1: the split
    train_idx, test1_idx = split_train_test1(n_total, cfg.n_test1, split_seed)
    if cfg.train_size is not None:
        if cfg.train_size > train_idx.size:
            raise ParameterError(
                f"train_size {cfg.train_size} exceeds the {train_idx.size} training images "
                "left after test set 1"
            )
        rng = np.random.default_rng(np.random.SeedSequence([cfg.seed, 2]))
        train_idx = np.sort(rng.choice(train_idx, size=cfg.train_size, replace=False))
    return train_idx, test1_idx


def _flat(images: np.ndarray) -> np.ndarray:
    return images.reshape(images.shape[0], -1)


def network_outputs(
    cfg: ExperimentConfig,
    data: MnistData | None = None,
    *,
    cache_root,
    device: str = "auto",
    threads: int | None = None,
    chunk: int | None = None,
    checkpoint_seconds: float = 120.0,
    progress: bool = True,
) -> NetworkOutputs:
    """Outputs of networks 0..M-1 on both test sets, training those not cached.

    Parameters
    ----------
    cfg : ExperimentConfig
    data : MnistData, optional
        Default: read from ``cfg.data_dir``.
    cache_root : path
        Root of the network cache (a subdirectory per configuration).
    device : str, default "auto"
        "auto" (CUDA when present), "cpu" or "cuda[:N]".
    threads : int, optional
        ``torch.set_num_threads``; default: the CPUs this process may use.
    chunk : int, optional
        Networks trained together in one batch. Default: 10 on CPU (with minibatches of
        1,000 one network already keeps two cores busy, and larger batches measured slower:
        ``benchmarks/bench_training.py``), 100 on a GPU. Networks do not depend on it beyond
        float round-off.
    checkpoint_seconds : float, default 120
        Save the training state of the running batch this often.
    progress : bool, default True
    """
    if chunk is not None and (
        isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer)) or chunk < 1
    ):
        raise ParameterError(f"chunk must be an integer >= 1, got {chunk!r}")
    if data is None:
        data = load_mnist(cfg.data_dir)
    n_classes = data.n_classes
    classes = tuple(str(i) for i in range(n_classes))
    train_idx, test1_idx = _prepare(data, cfg)
    y1 = data.train_labels[test1_idx].astype(np.int64)
    y2 = data.test_labels.astype(np.int64)
    cache = NetworkCache(cache_root, cfg.network_key(data.fingerprint()))
    missing = [i for i in range(cfg.n_networks) if not cache.has(i)]
    t0 = time.monotonic()
    if missing:
        run = {"device": device, "threads": threads, "chunk": chunk, "progress": progress}
        run["checkpoint_seconds"] = checkpoint_seconds
        _train_missing(data, cfg, cache, missing, (train_idx, test1_idx), **run)
    train_seconds = time.monotonic() - t0
    lp1 = np.empty((cfg.n_networks, y1.size, n_classes), dtype=np.float32)
    lp2 = np.empty((cfg.n_networks, y2.size, n_classes), dtype=np.float32)
    for i in range(cfg.n_networks):
        a, b = cache.load(i)
        if a.shape != lp1.shape[1:] or b.shape != lp2.shape[1:]:
            raise DataError(
                f"cached network file {str(cache.path(i))!r} has shapes "
                f"{a.shape}/{b.shape}, expected {lp1.shape[1:]}/{lp2.shape[1:]}; delete it "
                "and the run retrains that network"
            )
        lp1[i], lp2[i] = a, b
    return NetworkOutputs(
        (lp1, lp2), (y1, y2), classes, tuple(missing), train_seconds, str(cache.dir)
    )


def _train_missing(
    data, cfg, cache, missing, rows, *, device, threads, chunk, checkpoint_seconds, progress
) -> None:
    """Train networks ``missing`` in batches of ``chunk`` and cache their outputs on both
    test sets (``rows``: the training rows and test set 1's)."""
    from . import mlp

    train_idx, test1_idx = rows

    torch = mlp.require_torch()
    dev = mlp.pick_device(device)
    if chunk is None:
        chunk = 10 if dev.type == "cpu" else 100
    old_threads = torch.get_num_threads()
    if dev.type == "cpu":
        torch.set_num_threads(int(threads) if threads else available_cpus())
    try:
        scale = np.float32(1.0 / 255.0)
        xt = torch.from_numpy(
            _flat(data.train_images[train_idx]).astype(np.float32) * scale
        ).to(dev)
        yt = torch.from_numpy(data.train_labels[train_idx].astype(np.int64)).to(dev)
        x1 = torch.from_numpy(
            _flat(data.train_images[test1_idx]).astype(np.float32) * scale
        ).to(dev)
        x2 = torch.from_numpy(_flat(data.test_images).astype(np.float32) * scale).to(dev)
        batches = [missing[i : i + chunk] for i in range(0, len(missing), chunk)]
        for b, idx in enumerate(batches):
            label = f"nets {idx[0]}-{idx[-1]} ({b + 1}/{len(batches)})" if progress else False
            params = mlp.train_networks(
                xt,
                yt,
                mlp.network_seeds(cfg.seed, idx),
                cfg.train,
                n_classes=data.n_classes,
                device=dev,
                checkpoint=cache.checkpoint_path(idx),
                checkpoint_seconds=checkpoint_seconds,
                progress=label,
            )
            o1 = mlp.predict_log_softmax(params, x1)
            o2 = mlp.predict_log_softmax(params, x2)
            for j, i in enumerate(idx):
                cache.save(i, o1[j], o2[j])
    finally:
        torch.set_num_threads(old_threads)
