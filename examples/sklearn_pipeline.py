"""A scikit-learn pipeline, calibrated per predicted class on held-out data.

scikit-learn's bundled digits (8x8 images, 10 classes): a scaler and a logistic regression fitted
on 40% of the rows, ``TopLabelCalibratedClassifier`` (method ``auto``) on the next 30%, both
judged on the last 30%. Needs ``topcal[sklearn]``.

    python examples/sklearn_pipeline.py --out example-output
"""

import matplotlib.pyplot as plt
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import topcal
from _common import output_dir, reliability

out = output_dir(__doc__.splitlines()[0])
X, y = load_digits(return_X_y=True)
X_train, X_rest, y_train, y_rest = train_test_split(X, y, train_size=0.4, random_state=0)
X_cal, X_test, y_cal, y_test = train_test_split(X_rest, y_rest, train_size=0.5, random_state=0)

clf = make_pipeline(StandardScaler(), LogisticRegression(C=100.0, max_iter=5000))
clf.fit(X_train, y_train)
cal = topcal.TopLabelCalibratedClassifier(clf, method="auto").fit(X_cal, y_cal)  # clf as it is

test = cal.top_label_data(X_test, y_test)  # the classifier's outputs on the test rows
raw = clf.predict_proba(X_test).max(axis=1)  # its own top probability
conf = cal.predict_confidence(X_test)  # calibrated P(prediction is right)
nll_raw = topcal.metrics.nll(test, raw).overall
nll_cal = topcal.metrics.nll(test, conf).overall

lines = [
    f"rows: {len(y_train)} train, {len(y_cal)} calibrate, {len(y_test)} test",
    f"accuracy: {(clf.predict(X_test) == y_test).mean():.3f}",
    f"auto chose: {cal.calibrator_.method_}",
    f"top-label NLL, raw: {nll_raw:.4f}",
    f"top-label NLL, calibrated: {nll_cal:.4f}",
]
(out / "sklearn_pipeline.txt").write_text("\n".join(lines) + "\n")
print("\n".join(lines))

fig, ax = plt.subplots(figsize=(4.5, 4))
correct = clf.predict(X_test) == y_test
reliability(ax, raw, correct, "predict_proba")
reliability(ax, conf, correct, "topcal auto")
ax.set_title("digits, logistic regression (test rows)")
fig.tight_layout()
fig.savefig(out / "sklearn_pipeline.png", dpi=90)
