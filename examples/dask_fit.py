"""Fit and apply with Dask: statistics merged across partitions, the same model as in memory.

DenseNet-BC-100 on CIFAR-100, as a top-score table (``pred, score, label``) split into 8
partitions of a Dask DataFrame. ``topcal.dask.fit`` counts each partition's statistics where
it lies and merges them (a tree reduction), so the data never meet in one place.
``topcal.dask.apply`` adds the calibrated confidence lazily, partition by
partition. The model equals the in-memory fit from the same statistics (``Evidence.for_fit``);
a fit on the rows themselves differs by the statistics' fine score grid. Needs ``topcal[dask]``;
with a ``distributed.Client`` the same code runs on a cluster.

    python examples/dask_fit.py --out example-output
"""

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd

import topcal
import topcal.dask
from _common import bench_file, output_dir

out = output_dir(__doc__.splitlines()[0])
full = topcal.read_data(bench_file("densenet-bc-100-cifar-100.npz"))
classes = np.asarray(full.classes)
frame = pd.DataFrame(
    {"pred": classes[full.pred], "score": full.score, "label": classes[full.labels]}
)
ddf = dd.from_pandas(frame, npartitions=8)

with dask.config.set(scheduler="threads", num_workers=2):
    model = topcal.dask.fit(ddf, "kde-mon2", classes=list(full.classes))
    scored = topcal.dask.apply(model, ddf, interval=0.9).compute()

conf = scored["confidence"].to_numpy()
from_stats = topcal.calibrator("kde-mon2").fit(topcal.Evidence.for_fit(full))
from_rows = topcal.calibrator("kde-mon2").fit(full)
lines = [
    f"rows: {len(frame)}, classes: {full.n_classes}, partitions: {ddf.npartitions}",
    f"output columns: {', '.join(scored.columns)}",
    f"largest difference from the in-memory fit on the same statistics: "
    f"{np.abs(conf - from_stats.predict(full)).max():.2e}",
    f"largest difference from the in-memory fit on the rows: "
    f"{np.abs(conf - from_rows.predict(full)).max():.2e}",
    f"top-label NLL, raw: {topcal.metrics.nll(full, full.score).overall:.4f}",
    f"top-label NLL, kde-mon2 fitted with Dask: "
    f"{topcal.metrics.nll(full, conf).overall:.4f}",
]
(out / "dask_fit.txt").write_text("\n".join(lines) + "\n")
print("\n".join(lines))

biggest = list(np.argsort(np.bincount(full.pred, minlength=full.n_classes))[-6:])
grid = topcal.plots.calibration_curves(full, {"kde-mon2": model}, only=biggest)
fig = topcal.plots.plot_calibration_curves(grid, ncols=3, title="CIFAR-100: six largest classes")
fig.savefig(out / "dask_fit.png", dpi=90)
