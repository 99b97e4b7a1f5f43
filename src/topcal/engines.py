"""Where fit, update and apply run: one interface, three engines.

* ``local``: the file is read whole (fit, update); apply streams it in chunks, since its
  output is row by row anyway.
* ``stream``: fit and update gather :class:`~topcal.evidence.core.Evidence` chunk by chunk
  (``chunk_rows``), in memory bounded by the statistics.
* ``dask``: the same Evidence gathered per partition on a Dask cluster (a scheduler's
  ``address``, else a LocalCluster started for the call).

Every engine takes a fitted or unfitted calibrator, a path and the read options of
:func:`topcal.io.read_frame`, and leaves the model logic to the calibrator (``fit``,
``fit(evidence)``, ``update``). Every engine's apply formats its output with
:func:`topcal.stream.with_confidence` and writes it with the one output writer,
:func:`topcal.io.write_frames`. The command line picks an engine in one place
(:func:`for_options`) and never asks which it got.
"""

from __future__ import annotations

from .calibrators.registry import require_counts
from .errors import TopcalError
from .io import DEFAULT_CHUNK_ROWS, read_data
from .stream import apply_file, fit_file, update_file

__all__ = ["Engine", "LocalEngine", "StreamEngine", "DaskEngine", "ENGINES", "for_options"]


class Engine:
    """The interface: ``fit``, ``update`` and ``apply`` a model on the data at a path."""

    name = ""
    #: whether a fit is made from statistics (score methods only) rather than from the rows
    from_counts = False
    #: whether this process reads the rows itself (so a row progress bar can follow them)
    reads_rows = True

    def fit(self, cal, path, *, progress=None, **options):
        """Fit the unfitted calibrator ``cal`` on the labelled data at ``path``; returns it."""
        raise NotImplementedError  # pragma: no cover - interface

    def update(self, model, path, *, progress=None, **options):
        """Add the labelled data at ``path`` to ``model`` (:meth:`Calibrator.update`);
        returns it."""
        raise NotImplementedError  # pragma: no cover - interface

    def apply(
        self,
        model,
        path,
        output,
        *,
        progress=None,
        interval=None,
        thresholds=None,
        tally=None,
        full=False,
        **options,
    ):
        """Write ``path``'s rows with ``pred``, ``confidence`` (and interval limits,
        ``accepted``, with ``full`` the calibrated vectors:
        :func:`topcal.stream.apply_file`) to ``output``; returns the number of rows where
        the engine knows it, else None. ``tally`` (a dict) gets the accepted rows' count
        under "accepted" where the engine knows it."""
        raise NotImplementedError  # pragma: no cover - interface

    def _check_countable(self, cal) -> None:
        require_counts(
            cal,
            "drop --chunk-rows/--engine dask to fit it in memory, or choose a score method",
        )


class LocalEngine(Engine):
    """Read the file whole (fit, update); apply in chunks of ``chunk_rows``."""

    name = "local"

    def __init__(self, chunk_rows: int | None = None):
        self.chunk_rows = chunk_rows

    def fit(self, cal, path, *, progress=None, **options):
        return cal.fit(read_data(path, **options))

    def update(self, model, path, *, progress=None, **options):
        return update_file(model, path, chunk_rows=None, **options)

    def apply(self, model, path, output, *, progress=None, **options):
        # interval, thresholds, tally and full pass through to apply_file as they are
        return apply_file(
            model,
            path,
            output,
            chunk_rows=self.chunk_rows or DEFAULT_CHUNK_ROWS,
            progress=progress,
            **options,
        )


class StreamEngine(LocalEngine):
    """Fit and update from Evidence gathered chunk by chunk (bounded memory)."""

    name = "stream"
    from_counts = True

    def __init__(self, chunk_rows: int = DEFAULT_CHUNK_ROWS):
        super().__init__(chunk_rows)

    def fit(self, cal, path, *, progress=None, **options):
        self._check_countable(cal)
        return fit_file(cal, path, chunk_rows=self.chunk_rows, progress=progress, **options)

    def update(self, model, path, *, progress=None, **options):
        return update_file(
            model, path, chunk_rows=self.chunk_rows, progress=progress, **options
        )


class DaskEngine(Engine):
    """Fit, update and apply on a Dask cluster: at ``address``, else a LocalCluster started
    per call."""

    name = "dask"
    from_counts = True
    reads_rows = False  # the workers read the partitions

    def __init__(self, address: str | None = None):
        self.address = address

    def _dask(self):
        from . import dask as tdask

        return tdask

    def fit(self, cal, path, *, progress=None, **options):
        self._check_countable(cal)
        tdask = self._dask()
        with tdask.Session(self.address):
            return tdask.fit(
                tdask.read_parquet(path), cal.name, params=cal.get_params(), **options
            )

    def update(self, model, path, *, progress=None, **options):
        tdask = self._dask()
        tdask.check_updatable(model)  # before a cluster is started
        with tdask.Session(self.address):
            return tdask.update(model, tdask.read_parquet(path), **options)

    def apply(self, model, path, output, *, progress=None, tally=None, **options):
        # interval, thresholds and full pass through to the workers' apply as they are
        tdask = self._dask()  # ``tally`` stays empty: the rows are counted on the workers
        with tdask.Session(self.address):
            tdask.apply_file(model, path, output, **options)
        return None


#: The engines by name.
ENGINES = {"local": LocalEngine, "stream": StreamEngine, "dask": DaskEngine}


def for_options(
    engine: str = "local", *, chunk_rows: int | None = None, scheduler: str | None = None
) -> Engine:
    """The engine the command-line options ``--engine``, ``--chunk-rows`` and
    ``--scheduler`` ask for."""
    if engine == "dask":
        return DaskEngine(scheduler)
    if engine != "local":
        raise TopcalError(f"unknown engine {engine!r}. Options are: local, dask")
    return StreamEngine(chunk_rows) if chunk_rows is not None else LocalEngine()
