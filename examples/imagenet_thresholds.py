"""ImageNet-style top scores at 1,000 classes: calibrate, then intervals and per-class cut-offs.

torchvision's ResNet-101 on the 50,000 ImageNet validation images, published as
``true_label,pred_label,confidence`` (the top softmax output only: about 50 rows a class).
The rows are split three ways: one part fits the calibrator, a second (which the fit never saw)
chooses the cut-offs, the third checks what both promise.

    python examples/imagenet_thresholds.py --out example-output
"""

import matplotlib.pyplot as plt
import numpy as np

import topcal
from _common import bench_file, output_dir

out = output_dir(__doc__.splitlines()[0])
data = topcal.read_data(bench_file("imagenet-resnet101.csv"))  # the published layout
rng = np.random.default_rng(0)
rows = rng.permutation(data.n_rows)
fit_rows, thr_rows, check_rows = np.split(rows, [25_000, 40_000])
fitting, choosing, checking = (data.subset(r) for r in (fit_rows, thr_rows, check_rows))

# top scores only: the kernel density ratio, each class shrunk toward the pooled curve
model = topcal.calibrator("kde-mon2").fit(fitting)
conf = model.predict(checking)
lo, hi = model.predict_interval(checking, 0.9)  # the model's own uncertainty per row

# per predicted class, the loosest cut-off whose precision >= 0.9 with probability >= 0.95
th = topcal.fit_thresholds(model, choosing, precision=0.9, delta=0.05)
accepted = th.accept(checking.pred, conf, checking.score)  # ties broken by the raw score
cutoffs = th.cutoffs()

raw = checking.score  # the network's own top probability
lines = [
    f"classes: {data.n_classes}, rows: {len(fit_rows)} fit, {len(thr_rows)} choose cut-offs, "
    f"{len(check_rows)} check",
    f"top-label NLL on the check rows, raw: {topcal.metrics.nll(checking, raw).overall:.4f}",
    f"top-label NLL on the check rows, kde-mon2: {topcal.metrics.nll(checking, conf).overall:.4f}",
    f"90% interval width, median: {np.median(hi - lo):.3f}",
    f"classes with a cut-off: {np.isfinite(cutoffs).sum()} of {data.n_classes} "
    f"({sum(c.group == 'shared' for c in th.per_class)} too small to stand alone, pooled into "
    f"one shared group: pool_below={th.pool_below:g} predictions)",
    f"check rows accepted: {accepted.mean():.3f}",
    f"precision of the accepted check rows: {checking.tp[accepted].mean():.4f} (target 0.9)",
]
(out / "imagenet_thresholds.txt").write_text("\n".join(lines) + "\n")
print("\n".join(lines))

fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
axes[0].hist(hi - lo, bins=40)
axes[0].set_xlabel("width of the 90% interval")
axes[0].set_ylabel("check rows")
grid = np.linspace(0.3, 0.95, 66)
axes[1].plot(grid, [checking.tp[conf >= t].mean() for t in grid], label="precision")
axes[1].plot(grid, [(conf >= t).mean() for t in grid], label="fraction accepted")
for cut in np.unique(cutoffs[np.isfinite(cutoffs)]):
    axes[1].axvline(cut, color="k", ls=":", lw=1)
axes[1].set_xlabel("cut-off on the calibrated confidence (dotted: chosen)")
axes[1].set_ylabel("check rows")
axes[1].legend(fontsize=8)
fig.suptitle("ResNet-101 on ImageNet: intervals and cut-offs (precision 0.9, delta 0.05)")
fig.tight_layout()
fig.savefig(out / "imagenet_thresholds.png", dpi=90)
