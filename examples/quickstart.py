"""Getting started: calibrate the embedded PhANNs test set, look at the curves, save the model.

PhANNs (11 classes of phage proteins) ships with topcal as binned counts of true and false
positives per predicted class and score bin; no other package is needed.

    python examples/quickstart.py --out example-output
"""

import topcal
from _common import output_dir

out = output_dir(__doc__.splitlines()[0])
data = topcal.datasets.load_phanns()
model = topcal.calibrator("kde-mon2").fit(data)  # the paper's recommendation for top scores
conf = model.predict(data)  # calibrated P(prediction is right), per row (here: per bin)
raw = data.score / 10  # PhANNs scores run from 0 to 10

lines = [
    f"classes: {data.n_classes}, samples: {data.n_samples:.0f}",
    f"top-label NLL, uncalibrated score / 10: {topcal.metrics.nll(data, raw).overall:.4f}",
    f"top-label NLL, kde-mon2 (in sample): {topcal.metrics.nll(data, conf).overall:.4f}",
    f"Minor capsid at score 9: {model.curve('Minor capsid', [9.0]).confidence[0]:.3f}",
]
model.save(out / "quickstart-model.json")
same = topcal.load(out / "quickstart-model.json")
lines.append(f"reloaded model predicts the same: {bool((same.predict(data) == conf).all())}")
(out / "quickstart.txt").write_text("\n".join(lines) + "\n")
print("\n".join(lines))

grid = topcal.plots.calibration_curves(data, {"kde-mon2": model}, only=[0, 1, 3, 6, 8, 9])
fig = topcal.plots.plot_calibration_curves(grid, ncols=3, title="PhANNs: six classes")
fig.savefig(out / "quickstart.png", dpi=90)
