"""A PyTorch model's logits, calibrated with temperature scaling and with ``auto``.

A small network trained on scikit-learn's bundled digits (CPU, a few seconds); its logits on a
calibration split go straight into :meth:`topcal.TopLabelData.from_logits` (tensors are
accepted as they are), and the fitted calibrators are judged on a test split. Needs torch.

    python examples/pytorch_logits.py --out example-output
"""

import matplotlib.pyplot as plt
import torch
from sklearn.datasets import load_digits

import topcal
from _common import output_dir, reliability

out = output_dir(__doc__.splitlines()[0])
torch.manual_seed(0)
X, y = load_digits(return_X_y=True)
X = torch.tensor(X / 16.0, dtype=torch.float32)
y = torch.tensor(y)
order = torch.randperm(len(y))
train, calib, test = order[:700], order[700:1250], order[1250:]

# a deliberately over-trained network: confident, so its softmax is over-confident
net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
opt = torch.optim.Adam(net.parameters(), lr=1e-2)
for _ in range(300):
    opt.zero_grad()
    torch.nn.functional.cross_entropy(net(X[train]), y[train]).backward()
    opt.step()

with torch.no_grad():
    logits_cal, logits_test = net(X[calib]), net(X[test])
classes = [str(k) for k in range(10)]
cal_data = topcal.TopLabelData.from_logits(logits_cal, y[calib].numpy(), classes=classes)
test_data = topcal.TopLabelData.from_logits(logits_test, y[test].numpy(), classes=classes)

uncal = topcal.calibrator("uncalibrated").fit(cal_data)
sts = topcal.calibrator("sts").fit(cal_data)  # one shared temperature
auto = topcal.calibrator("auto").fit(cal_data)  # chosen by cross-validated NLL
lines = [f"test rows: {len(test)}, accuracy {test_data.tp.mean():.3f}"]
confs = {}
for name, model in [("uncalibrated", uncal), ("sts", sts), ("auto", auto)]:
    confs[name] = model.predict(test_data)
    nll = topcal.metrics.nll(test_data, confs[name]).overall
    lines.append(f"top-label NLL, {name}: {nll:.4f}")
lines.append(f"sts temperature: {float(sts.temperature_.ravel()[0]):.3f}")
lines.append(f"auto chose: {auto.method_}")
(out / "pytorch_logits.txt").write_text("\n".join(lines) + "\n")
print("\n".join(lines))

fig, ax = plt.subplots(figsize=(4.5, 4))
for name, conf in confs.items():
    reliability(ax, conf, test_data.tp, name)
ax.set_title("digits MLP logits (test rows)")
fig.tight_layout()
fig.savefig(out / "pytorch_logits.png", dpi=90)
