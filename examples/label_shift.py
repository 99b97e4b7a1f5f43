"""Label shift: a model calibrated on one mix of classes, adapted to a use set with another.

WRN-16-4 on CIFAR-10 (full probability vectors). The model is fitted on half of the test rows,
which hold the 10 classes equally; the use set is drawn from the other half with classes 0-2
four times as frequent as the rest, and its labels are hidden from ``adapt``, which estimates
the new class frequencies (EM) and moves each calibrated confidence accordingly.

    python examples/label_shift.py --out example-output
"""

import matplotlib.pyplot as plt
import numpy as np

import topcal
from _common import bench_file, output_dir

out = output_dir(__doc__.splitlines()[0])
data = topcal.read_data(bench_file("wideresnet-16-4-cifar-10.npz"))  # netcal's npz layout
rng = np.random.default_rng(0)
rows = rng.permutation(data.n_rows)
source, rest = data.subset(rows[:5000]), rows[5000:]

# the use set: classes 0-2 weighted 4, the others 1 (rows drawn by their true class)
true_class = data.labels[rest]
weight = np.where(true_class < 3, 4.0, 1.0)
use_rows = rng.choice(rest, size=3000, replace=False, p=weight / weight.sum())
use = data.subset(use_rows)
true_priors = np.bincount(data.labels[use_rows], minlength=data.n_classes) / len(use_rows)

model = topcal.calibrator("kde-mon2").fit(source)
adapted = model.adapt(use.without_labels())  # the use set's labels are never shown to it
est = np.asarray(adapted.estimate_.priors)

nll_before = topcal.metrics.nll(use, model.predict(use)).overall
nll_after = topcal.metrics.nll(use, adapted.predict(use)).overall
lines = [
    f"source rows: {source.n_rows} (balanced), use rows: {use.n_rows} (classes 0-2 x4)",
    f"true use priors:      {np.array2string(true_priors, precision=3)}",
    f"estimated use priors: {np.array2string(est, precision=3)}",
    f"top-label NLL on the use set, calibrated on the source mix: {nll_before:.4f}",
    f"top-label NLL on the use set, adapted: {nll_after:.4f}",
]
(out / "label_shift.txt").write_text("\n".join(lines) + "\n")
print("\n".join(lines))

fig, ax = plt.subplots(figsize=(6, 3.4))
x = np.arange(data.n_classes)
source_priors = np.bincount(source.labels, minlength=data.n_classes) / source.n_rows
ax.bar(x - 0.27, source_priors, 0.27, label="source (fitting rows)")
ax.bar(x, true_priors, 0.27, label="use set, true")
ax.bar(x + 0.27, est, 0.27, label="use set, estimated")
ax.set_xticks(x, data.classes)
ax.set_xlabel("class")
ax.set_ylabel("frequency")
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig(out / "label_shift.png", dpi=90)
