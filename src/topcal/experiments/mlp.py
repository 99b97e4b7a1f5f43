"""Many small MLPs trained at once with batched weights (PyTorch).

The paper's networks are 784-300-100-10 multilayer perceptrons with ReLU hidden layers and a
softmax output, trained with categorical cross-entropy and Adam (learning rate 1e-3) on
minibatches of 1,000 images drawn with replacement. Training M of them one after another
wastes a small machine: each step is three modest matrix products. Here the weights of M
networks are stacked (layer 1: shape (M, 784, 300)) and one ``torch.baddbmm`` runs layer 1
of all M networks, each on its own minibatch. That pays on a GPU; on a 2-core CPU one
network's minibatch of 1,000 already fills both cores and batching measured no faster
(``benchmarks/bench_training.py``), so there the batch size (``chunk``) mostly sets the
granularity of the cache.

Independence is kept exactly where it matters:

* every network has its own seeded generator for its initial weights and another for its
  minibatch indices, both derived from ``(seed, index)``, so network *i* is the same network
  whether it is trained alone or in a batch of 100 (up to float round-off of the batched
  products);
* the loss is the *sum* over networks of each network's mean cross-entropy, so network i's
  gradient is its own; and one Adam over the stacked tensors equals M independent Adams
  because Adam is elementwise.

torch is imported lazily (:func:`require_torch`), so ``import topcal`` never needs it.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from .. import _progress
from ..errors import ParameterError, TopcalError

__all__ = [
    "TrainConfig",
    "require_torch",
    "pick_device",
    "network_seeds",
    "init_params",
    "forward",
    "train_networks",
    "predict_log_softmax",
]


def require_torch():
    """Import and return torch, or raise a TopcalError saying how to install it."""
    try:
        import torch
    except ImportError:
        raise TopcalError(
            "the ensemble experiment needs PyTorch: run 'pip install torch==2.13.0 tqdm' "
            "(or 'make install', which installs the 'experiments' extra)"
        ) from None
    return torch


def progress_bar(**kwargs):
    """A tqdm progress bar on stderr where progress is shown (a terminal, no --quiet;
    topcal._progress)."""
    return _progress.bar(**kwargs)


def pick_device(device: str = "auto"):
    """The torch device: ``"auto"`` is CUDA when available, else CPU."""
    torch = require_torch()
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise ParameterError(f"device must be 'auto', 'cpu' or 'cuda[:N]', got {device!r}")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise TopcalError(
            f"device {device!r} was asked for but torch sees no CUDA GPU; use --device cpu"
        )
    return torch.device(device)


@dataclass(frozen=True)
class TrainConfig:
    """How each network is built and trained (the paper's appendix by default).

    Attributes
    ----------
    hidden : tuple of int, default (300, 100)
        Hidden layer widths (ReLU).
    steps : int, default 400
        Adam steps: 400 = the paper's "under-trained", 10,000 = "over-trained".
    batch_size : int, default 1000
        Minibatch size; indices drawn with replacement.
    lr : float, default 1e-3
        Adam learning rate (betas 0.9, 0.999, eps 1e-8, as Keras and PyTorch).
    precision : {"float32", "bfloat16"}, default "float32"
        "bfloat16" runs the training matrix products in bfloat16 under ``torch.autocast``
        (weights, Adam and the loss stay float32): about 5x faster on CPUs with AMX
        (Sapphire Rapids and later), slower on CPUs without bfloat16 units. Test-set outputs
        are always computed in float32.
    """

    hidden: tuple[int, ...] = (300, 100)
    steps: int = 400
    batch_size: int = 1000
    lr: float = 1e-3
    precision: str = "float32"

    def __post_init__(self):
        if not self.hidden or any(int(h) < 1 for h in self.hidden):
            raise ParameterError(
                f"hidden layer sizes must be positive integers, got {self.hidden!r}"
            )
        if int(self.steps) < 1:
            raise ParameterError(f"steps must be >= 1, got {self.steps!r}")
        if int(self.batch_size) < 1:
            raise ParameterError(f"batch_size must be >= 1, got {self.batch_size!r}")
        if not (float(self.lr) > 0 and np.isfinite(self.lr)):
            raise ParameterError(f"lr must be a positive number, got {self.lr!r}")
        if self.precision not in ("float32", "bfloat16"):
            raise ParameterError(
                f"precision must be 'float32' or 'bfloat16', got {self.precision!r}"
            )

    def to_dict(self) -> dict:
        """JSON-ready dict (part of the cache key)."""
        d = asdict(self)
        d["hidden"] = list(self.hidden)
        return d


def network_seeds(seed: int, indices: Sequence[int]) -> list[tuple[int, int]]:
    """(init seed, minibatch seed) of each network, from ``SeedSequence([seed, index])``.

    Depends only on the run seed and the network's index, never on which other networks
    share its batch.
    """
    out = []
    for i in indices:
        st = (
            np.random.SeedSequence([int(seed), int(i)])
            .generate_state(4, dtype=np.uint32)
            .astype(np.int64)
        )
        # two 31-bit halves -> a non-negative 62-bit seed (torch wants < 2**63)
        out.append(
            (int((st[0] >> 1) << 31 | (st[1] >> 1)), int((st[2] >> 1) << 31 | (st[3] >> 1)))
        )
    return out


def init_params(
    sizes: Sequence[int], init_seeds: Sequence[int], device=None, dtype=None
) -> list:
    """Stacked initial parameters of M networks: [W1, b1, W2, b2, ...].

    ``W_l`` has shape (M, n_in, n_out), ``b_l`` shape (M, 1, n_out). Weights are
    Glorot-uniform, biases zero (Keras' Dense defaults; the paper's networks were
    Keras-style), each network from its own generator.
    """
    torch = require_torch()
    dtype = dtype or torch.float32
    params = []
    gens = [torch.Generator().manual_seed(s) for s in init_seeds]
    for n_in, n_out in zip(sizes[:-1], sizes[1:]):
        limit = float(np.sqrt(6.0 / (n_in + n_out)))
        w = torch.stack(
            [
                (torch.rand(n_in, n_out, generator=g, dtype=torch.float64) * 2 - 1) * limit
                for g in gens
            ]
        ).to(device=device, dtype=dtype)
        b = torch.zeros(len(gens), 1, n_out, device=device, dtype=dtype)
        params += [w.requires_grad_(), b.requires_grad_()]
    return params


def forward(params: list, x):
    """Logits of every network.

    Parameters
    ----------
    params : list of tensors from :func:`init_params`
    x : tensor of shape (M, B, n_in) (one batch per network) or (B, n_in) (shared)

    Returns
    -------
    tensor of shape (M, B, n_classes)
    """
    torch = require_torch()
    h = x
    n_layers = len(params) // 2
    for layer in range(n_layers):
        w, b = params[2 * layer], params[2 * layer + 1]
        if h.dim() == 2:
            h = torch.matmul(h, w) + b  # broadcast the shared batch over networks
        else:
            h = torch.baddbmm(b, h, w)
        if layer < n_layers - 1:
            h = torch.relu(h)
    return h


def _atomic_torch_save(obj, path: Path) -> None:
    torch = require_torch()
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def train_networks(
    x_train,
    y_train,
    seeds: Sequence[tuple[int, int]],
    config: TrainConfig,
    *,
    n_classes: int,
    device=None,
    checkpoint: str | os.PathLike | None = None,
    checkpoint_seconds: float = 120.0,
    progress: bool | str = True,
    callback: Callable[[int], None] | None = None,
) -> list:
    """Train len(seeds) networks at once; return their stacked parameters.

    Parameters
    ----------
    x_train : tensor of float32, shape (n, n_in), on ``device``
        Training images, flattened and scaled to [0, 1].
    y_train : tensor of int64, shape (n,), on ``device``
    seeds : list of (init seed, minibatch seed)
        One pair per network (see :func:`network_seeds`).
    config : TrainConfig
    n_classes : int
    device : torch.device, optional
    checkpoint : path, optional
        Where to save the training state (parameters, Adam moments, each network's generator
        state, step) every ``checkpoint_seconds``; if the file exists and belongs to the
        same networks and configuration, training resumes from it. Removed when training
        completes.
    checkpoint_seconds : float, default 120
    progress : bool or str, default True
        Show a tqdm bar (a string is used as its description).
    callback : callable, optional
        Called as ``callback(step)`` after every step (steps counted from 1).

    Returns
    -------
    list of tensors
        Trained parameters as in :func:`init_params` (detached).
    """
    torch = require_torch()
    n = int(x_train.shape[0])
    m = len(seeds)
    sizes = [int(x_train.shape[1]), *config.hidden, n_classes]
    params = init_params(sizes, [s[0] for s in seeds], device=device)
    opt = torch.optim.Adam(params, lr=config.lr)
    gens = [torch.Generator().manual_seed(s[1]) for s in seeds]
    start = 0
    key = {"seeds": [list(s) for s in seeds], "config": config.to_dict(), "n_train": n}
    key["sizes"] = sizes
    ckpt = Path(checkpoint) if checkpoint is not None else None
    if ckpt is not None and ckpt.is_file():
        start = _resume(torch, ckpt, key, params, opt, gens, device)

    bar = None
    if progress:
        desc = progress if isinstance(progress, str) else f"training {m} nets"
        bar = progress_bar(
            total=config.steps, initial=start, desc=desc, unit="step", leave=False
        )
    last = time.monotonic()
    dev_type = torch.device(device).type if device is not None else "cpu"
    for step in range(start, config.steps):
        _adam_step(torch, params, opt, gens, x_train, y_train, config, device, dev_type)
        if bar is not None:
            bar.update(1)
        if callback is not None:
            callback(step + 1)
        due = ckpt is not None and time.monotonic() - last > checkpoint_seconds
        if due and step + 1 < config.steps:
            _save(ckpt, key, step + 1, params, opt, gens)
            last = time.monotonic()
    if bar is not None:
        bar.close()
    if ckpt is not None and ckpt.exists():
        ckpt.unlink()
    return [p.detach() for p in params]


def _save(ckpt, key, step, params, opt, gens) -> None:
    _atomic_torch_save(
        {
            "key": key,
            "step": step,
            "params": [p.detach().cpu() for p in params],
            "opt": opt.state_dict(),
            "gens": [g.get_state() for g in gens],
        },
        ckpt,
    )


def _resume(torch, ckpt, key, params, opt, gens, device) -> int:
    """Load a checkpoint of the same networks and configuration into ``params``, ``opt`` and
    ``gens``: the step it reached, or 0 (nothing loaded) for a torn or foreign file."""
    try:
        # weights_only: tensors and plain containers only, never arbitrary pickled objects
        state = torch.load(ckpt, map_location=device, weights_only=True)
        ok = state.get("key") == key
    except Exception:  # a torn or foreign file: start over, it is only a cache
        ok = False
    if not ok:
        return 0
    with torch.no_grad():
        for p, saved in zip(params, state["params"]):
            p.copy_(saved)
    opt.load_state_dict(state["opt"])
    for g, gs in zip(gens, state["gens"]):
        g.set_state(gs)
    return int(state["step"])


def _adam_step(torch, params, opt, gens, x_train, y_train, config, device, dev_type) -> None:
    """One Adam step of every network on its own minibatch (drawn with replacement)."""
    n, m, bs = int(x_train.shape[0]), len(gens), config.batch_size
    idx = torch.stack([torch.randint(n, (bs,), generator=g) for g in gens]).to(device)
    xb = x_train[idx]  # (m, bs, n_in)
    yb = y_train[idx]
    with torch.autocast(
        dev_type, dtype=torch.bfloat16, enabled=config.precision == "bfloat16"
    ):
        logits = forward(params, xb)
    # sum over networks of each network's mean loss: network i's gradient is its own
    loss = (
        torch.nn.functional.cross_entropy(logits.float().reshape(m * bs, -1), yb.reshape(-1))
        * m
    )
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


def predict_log_softmax(params: list, x, *, batch: int = 2000) -> np.ndarray:
    """log-softmax outputs of every network on shared inputs ``x`` (n, n_in).

    Returns
    -------
    ndarray of float32, shape (M, n, n_classes)
    """
    torch = require_torch()
    outs = []
    with torch.no_grad():
        for i in range(0, int(x.shape[0]), batch):
            outs.append(torch.log_softmax(forward(params, x[i : i + batch]), dim=-1).cpu())
    return torch.cat(outs, dim=1).numpy().astype(np.float32, copy=False)
