"""The overall metrics with intervals (topcal.overall): definitions, independent implementations,
intervals' coverage on simulations with a known truth, and the undefined cases."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from topcal import metrics, overall
from topcal.data import TopLabelData
from topcal.errors import DataError, ParameterError

BENCH = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "bench"
if not BENCH.exists():
    BENCH = Path("/work/shared/data/bench")
PEERS_FILE = Path(__file__).resolve().parents[2] / "data" / "metrics_peers.json"
PEERS = json.loads(PEERS_FILE.read_text())


def _bench(name: str) -> TopLabelData:
    path = BENCH / name
    if not path.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"bench set {path} is missing under CI=true", pytrace=False)
        pytest.skip(f"bench set {path} not here")
    if path.suffix == ".npz":
        z = np.load(path)
        return TopLabelData.from_probs(z["predictions"], z["ground_truth"])
    from topcal.io import read_data

    return read_data(str(path))


# ----------------------------------------------------------------- the known-truth simulation

# Three classes: confidence f ~ Beta(a, b), P(right | f) = g(f) (overconfident: g below f).
CLASSES = (
    (5.0, 2.0, lambda f: f**1.6, 0.5),
    (3.0, 2.0, lambda f: 0.9 * f, 0.3),
    (8.0, 2.0, lambda f: f**2.5, 0.2),
)


def simulate(n: int, rng) -> tuple[TopLabelData, np.ndarray]:
    """Labelled top-label data of the three classes above, and a second confidence (f^0.8)."""
    share = np.array([c[3] for c in CLASSES])
    k = rng.choice(len(CLASSES), n, p=share)
    f = np.empty(n)
    right = np.empty(n, dtype=bool)
    for i, (a, b, g, _) in enumerate(CLASSES):
        m = k == i
        f[m] = rng.beta(a, b, m.sum())
        right[m] = rng.random(m.sum()) < g(f[m])
    labels = np.where(right, k, (k + 1) % len(CLASSES))
    data = TopLabelData.from_scores(k, f, labels, classes=["a", "b", "c"])
    return data, f**0.8


def _population(points: int = 200_001):
    """Per class: (share, f grid, density weights, g(f)) for integrals over the truth."""
    out = []
    for a, b, g, share in CLASSES:
        x = (np.arange(points) + 0.5) / points
        w = stats.beta.pdf(x, a, b) / points
        out.append((share, x, w / w.sum(), g(x)))
    return out


def _pooled(pop):
    x = np.concatenate([p[1] for p in pop])
    w = np.concatenate([p[0] * p[2] for p in pop])
    g = np.concatenate([p[3] for p in pop])
    return x, w, g


def _ece_debiased_truth(x, w, g) -> float:
    """The population's L2 calibration error on 15 equal-mass bins (the pooled grid x, weights w,
    P(right) g): the one value of :func:`truths` that some tests need, without the rest's cost."""
    order = np.argsort(x)
    cw = np.cumsum(w[order])
    eb = np.empty(x.size, dtype=int)
    eb[order] = np.minimum((cw * 15).astype(int), 14)
    pb = np.bincount(eb, w, 15)
    gap = np.bincount(eb, w * (g - x), 15) / pb
    return float(np.sqrt(np.dot(pb, gap**2)))


def truths() -> dict:
    """Every overall metric's value on the population (numerical integrals)."""
    pop = _population()
    x, w, g = _pooled(pop)
    nll = lambda c: -(g * np.log(c) + (1 - g) * np.log1p(-c))
    brier = lambda c: g * (1 - c) ** 2 + (1 - g) * c**2
    out = {"nll": np.dot(w, nll(x)), "brier": np.dot(w, brier(x))}
    b = np.clip((x * 15).astype(int), 0, 14)
    out["ece15"] = np.abs(np.bincount(b, w * (g - x), 15)).sum()
    out["ece_debiased"] = _ece_debiased_truth(x, w, g)
    top = 0.0
    for share, xc, wc, gc in pop:
        bc = np.clip(np.ceil(xc * 10).astype(int) - 1, 0, 9)
        top += share * np.abs(np.bincount(bc, wc * (gc - xc), 10)).sum()
    out["ece_top_label"] = top
    from scipy.optimize import minimize

    z = np.log(x) - np.log1p(-x)

    def platt_loss(theta):  # the population's expected NLL after Platt scaling
        u = theta[0] * z + theta[1]
        return np.dot(w, g * np.logaddexp(0, -u) + (1 - g) * np.logaddexp(0, u))

    a, c0 = minimize(platt_loss, [1.0, 0.0], method="Nelder-Mead", options={"xatol": 1e-8}).x
    p = 1 / (1 + np.exp(-(a * z + c0)))
    out["calibration_loss"] = out["nll"] - np.dot(w, nll(p))
    out["calibration_loss_brier"] = out["brier"] - np.dot(w, brier(p))
    # the reference f^0.8's score minus f's
    out["nll_improvement"] = np.dot(w, nll(x**0.8)) - np.dot(w, nll(x))
    out["brier_improvement"] = np.dot(w, brier(x**0.8)) - np.dot(w, brier(x))
    grid = overall.GRIDS["relplot"]
    mass, res = grid.masses(x, [w, w * (x - g)])
    out["smece"] = float(grid.error(mass, res, grid.bandwidth(mass, res)))
    return {k: float(v) for k, v in out.items()}


# ------------------------------------------------------------------------------- definitions


def test_top_label_ece_is_metrics_ece1_overall():
    data, _ = simulate(3000, np.random.default_rng(1))
    c = data.normalized_score()
    got = overall.ece_top_label(data, c, resamples=50)
    assert got.value == pytest.approx(metrics.ece1(data, c).overall, abs=1e-12)


def test_ece15_is_the_pooled_binned_gap_with_one_in_the_last_bin():
    pred = np.array([0, 0, 1, 1, 0])
    conf = np.array([1.0, 1.0, 0.5, 0.1, 0.95])
    labels = np.array([0, 1, 1, 0, 0])  # right, wrong, right, wrong, right
    data = TopLabelData.from_scores(pred, conf, labels)
    # bins [14/15, 1]: 1.0, 1.0, 0.95 (acc 2/3, conf 0.9833); [7/15, 8/15): 0.5 (acc 1);
    # [1/15, 2/15): 0.1 (acc 0)
    want = (3 * abs(2 / 3 - (2.95 / 3)) + abs(1 - 0.5) + abs(0 - 0.1)) / 5
    assert overall.ece15(data, conf, resamples=20).value == pytest.approx(want, abs=1e-12)


def test_debiased_ece_on_hand_examples():
    # one equal-mass bin: mean residual squared minus its variance over n
    conf = np.array([0.9, 0.8, 0.7, 0.6])
    labels = np.array([0, 1, 0, 1])
    data = TopLabelData.from_scores(np.zeros(4, int), conf, labels, classes=["x", "y"])
    d = (labels == 0) - conf
    want = np.sqrt(max(d.mean() ** 2 - d.var(ddof=1) / 4, 0.0))
    assert overall.ece_debiased(data, conf, n_bins=1, resamples=20).value == pytest.approx(want)
    # a constant confidence in the bin: Kumar et al.'s (acc - conf)^2 - acc (1 - acc) / (n - 1)
    conf = np.full(5, 0.9)
    labels = np.array([0, 0, 0, 1, 1])
    data = TopLabelData.from_scores(np.zeros(5, int), conf, labels, classes=["x", "y"])
    acc = 0.6
    want = np.sqrt((acc - 0.9) ** 2 - acc * (1 - acc) / 4)
    assert overall.ece_debiased(data, conf, n_bins=1, resamples=20).value == pytest.approx(want)


def test_debiased_ece_is_unbiased_where_the_plug_in_is_not():
    """On a known truth the debiased square's mean over repetitions matches the population's
    equal-mass binned square; the plug-in's (no correction) is far above it."""
    truth = _ece_debiased_truth(*_pooled(_population())) ** 2
    rng = np.random.default_rng(5)
    deb, plug = [], []
    for _ in range(60):
        data, _ = simulate(400, rng)
        c = data.normalized_score()
        deb.append(overall.ece_debiased(data, c, resamples=10).value ** 2)
        edges = np.quantile(c, np.linspace(0, 1, 16))
        b = np.clip(np.searchsorted(edges, c, side="left") - 1, 0, 14)
        n = np.bincount(b, minlength=15)
        gap = np.bincount(b, data.tp - c, 15) / np.maximum(n, 1)
        plug.append(np.dot(n / n.sum(), gap**2))
    se = np.std(deb) / np.sqrt(len(deb))
    assert abs(np.mean(deb) - truth) < 3 * se + 2e-4
    assert np.mean(plug) - truth > 5 * se


def test_calibration_loss_is_positive_when_miscalibrated_and_near_zero_when_not():
    rng = np.random.default_rng(2)
    data, _ = simulate(20_000, rng)
    c = data.normalized_score()
    assert overall.calibration_loss(data, c).lo > 0.01
    f = rng.uniform(0.3, 1.0, 20_000)
    right = rng.random(20_000) < f
    calibrated = TopLabelData.from_scores(np.zeros(20_000, int), f, np.where(right, 0, 1))
    got = overall.calibration_loss(calibrated, f)
    assert abs(got.value) < 1e-3 and got.lo < 0 < got.hi


def test_improvement_is_the_reference_minus_the_score_paired():
    data, other = simulate(5000, np.random.default_rng(3))
    c = data.normalized_score()
    got = overall.improvement(data, other, c)
    want = overall.nll(data, c).value - overall.nll(data, other).value
    assert got.value == pytest.approx(want, abs=1e-12)
    # paired: narrower than two independent intervals would suggest
    a, b = overall.nll(data, c), overall.nll(data, other)
    assert got.hi - got.lo < (a.hi - a.lo) + (b.hi - b.lo)


def test_seeded_and_reproducible():
    data, _ = simulate(2000, np.random.default_rng(4))
    c = data.normalized_score()
    a = overall.overall_metrics(data, c, seed=3, resamples=100)
    b = overall.overall_metrics(data, c, seed=3, resamples=100)
    assert {k: v.to_dict() for k, v in a.items()} == {k: v.to_dict() for k, v in b.items()}
    assert (
        a["ece15"].to_dict()
        != overall.overall_metrics(data, c, seed=4, resamples=100)["ece15"].to_dict()
    )


def test_binned_counts_give_the_numbers_of_their_samples():
    """A binned row of tp right and fp wrong samples weighs as those samples do."""
    score = np.array([0.55, 0.75, 0.95])
    tp, fp = np.array([3.0, 5.0, 9.0]), np.array([2.0, 2.0, 1.0])
    binned = TopLabelData.from_binned(["x"] * 3, score - 0.05, score + 0.05, tp, fp)
    rows = np.repeat(score, (tp + fp).astype(int))
    right = np.concatenate([[1] * int(t) + [0] * int(f) for t, f in zip(tp, fp)])
    per = TopLabelData.from_scores(
        np.zeros(rows.size, int), rows, np.where(right, 0, 1), classes=["x", "y"]
    )
    a = overall.overall_metrics(binned, binned.normalized_score(), resamples=50)
    b = overall.overall_metrics(per, per.normalized_score(), resamples=50)
    for name in ("nll", "brier", "ece15", "smece", "ece_debiased"):
        assert a[name].value == pytest.approx(b[name].value, abs=1e-9), name


def test_undefined_is_none_with_a_reason_never_nan():
    data = TopLabelData.from_scores([0, 0, 0], [0.9, 0.8, 0.7], [0, 0, 0])  # all right
    got = overall.overall_metrics(data, [0.9, 0.8, 0.7], resamples=20)
    cl = got["calibration_loss"]
    assert cl.value is None and "all right or all wrong" in cl.reason
    one = TopLabelData.from_scores([0], [0.9], [1], classes=["a", "b"])
    got = overall.overall_metrics(one, [0.9], resamples=20)
    for name, e in got.items():
        d = e.to_dict()
        assert all(v is None or np.isfinite(v) for v in (d["value"], d["lo"], d["hi"])), name
        assert e.lo is not None or e.reason, name
    json.dumps({k: v.to_dict() for k, v in got.items()}, allow_nan=False)


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"level": 1.5}, "level"),
        ({"resamples": 3}, "resamples"),
        ({"seed": -1}, "seed"),
        ({"n_bins": 0}, "n_bins"),
    ],
)
def test_bad_parameters_are_one_clear_error(kw, match):
    data, _ = simulate(100, np.random.default_rng(0))
    with pytest.raises(ParameterError, match=match):
        overall.overall_metrics(data, data.normalized_score(), **kw)


def test_bad_confidence_is_a_data_error():
    data, _ = simulate(100, np.random.default_rng(0))
    with pytest.raises(DataError, match="not a probability"):
        overall.ece15(data, np.full(100, 1.5))
    with pytest.raises(DataError, match="one confidence per row"):
        overall.smece(data, np.full(99, 0.5))


# ------------------------------------------------------------- independent implementations


@pytest.mark.parametrize("name", sorted(PEERS["sets"]))
def test_ece15_and_smece_match_torchmetrics_and_relplot_on_the_bench_sets(name):
    rec = PEERS["sets"][name]
    data = _bench(name)
    c = data.normalized_score()
    got = overall.ece15(data, c, resamples=10)
    assert abs(got.value - rec["torchmetrics_binary_ece15"]) < 1e-6
    if "torchmetrics_multiclass_ece15" in rec:  # TorchMetrics sums in float32 there
        assert abs(got.value - rec["torchmetrics_multiclass_ece15"]) < 1e-5
    sm = overall.smece(data, c, resamples=10)
    assert abs(sm.value - rec["relplot_smece"]) < 2e-3
    assert abs(overall.smece_bandwidth(data, c) - rec["relplot_bandwidth"]) < 2e-3


# ------------------------------------------------------------------------------- coverage


@pytest.mark.heavy
@pytest.mark.slow
def test_every_interval_covers_the_truth_at_its_level():
    """500 simulated sets of 2,000 samples: each 90% interval holds the population's value
    between 87% and 93% of the time (the band is 2.2 standard errors of a coverage of 0.90
    at 500 sets; 1,000 sets, twice the time, agree within 0.011: docs/metrics.md)."""
    truth = truths()
    rng = np.random.default_rng(11)
    hits = {name: 0 for name in truth}
    reps = 500
    for rep in range(reps):
        data, other = simulate(2000, rng)
        got = overall.overall_metrics(
            data, data.normalized_score(), reference=other, resamples=200, seed=rep
        )
        for name, t in truth.items():
            e = got[name]
            hits[name] += e.lo <= t <= e.hi
    cover = {name: h / reps for name, h in hits.items()}
    assert all(0.87 <= v <= 0.93 for v in cover.values()), str(cover)


def test_calibration_loss_falls_after_topcal_calibrates_imagenet_out_of_sample():
    """Raw ResNet-101 ImageNet outputs: fit on one half, score the other half."""
    import topcal

    data = _bench("imagenet-resnet101.csv")
    rng = np.random.default_rng(0)
    rows = rng.permutation(data.n_rows)
    fit, held = data.subset(rows[: data.n_rows // 2]), data.subset(rows[data.n_rows // 2 :])
    model = topcal.calibrator("hier-beta").fit(fit)
    before = overall.calibration_loss(held, held.normalized_score())
    after = overall.calibration_loss(held, model.predict(held))
    assert before.lo > 0.01  # the raw scores are overconfident
    assert after.hi < before.lo and after.value < 0.25 * before.value
    gain = overall.improvement(held, model.predict(held), held.normalized_score())
    assert gain.lo > 0


def _classwise_brute(p, y, n_bins=15):
    """Kull et al.'s class-wise ECE written out: per class, equal-width bins of its column."""
    n, k = p.shape
    total = 0.0
    for j in range(k):
        b = np.minimum((p[:, j] * n_bins).astype(int), n_bins - 1)
        for i in range(n_bins):
            m = b == i
            if m.any():
                total += m.sum() / n * abs(np.mean(y[m] == j) - p[m, j].mean())
    return total / k


def test_classwise_ece_is_kull_et_als_definition_with_an_interval_that_covers_it():
    from topcal.overall import classwise_ece

    rng = np.random.default_rng(4)
    logits = rng.normal(size=(3000, 4)) * 2.0
    p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    y = np.array([rng.choice(4, p=row) for row in p ** 1.5 / (p ** 1.5).sum(1, keepdims=True)])
    data = TopLabelData.from_probs(p, y)
    est = classwise_ece(data, p, resamples=200, seed=1)
    assert est.value == pytest.approx(_classwise_brute(p, y), rel=1e-12)
    assert est.lo <= est.value <= est.hi and est.hi - est.lo < 0.05
    again = classwise_ece(data, p, resamples=200, seed=1)
    assert (again.lo, again.hi) == (est.lo, est.hi)  # seeded
    # a calibrated vector (labels drawn from it) has a smaller class-wise ECE than a sharpened one
    y_cal = np.array([rng.choice(4, p=row) for row in p])
    cal = TopLabelData.from_probs(p, y_cal)
    assert classwise_ece(cal, p, resamples=50).value < est.value
    with pytest.raises(DataError, match="probability vectors have shape"):
        classwise_ece(data, p[:, :3])


@pytest.mark.parametrize(
    "n, K, zipf, resamples, seed, want",
    [
        # bins of one or two cells, a chunk of 100 resamples (some cells heavy)
        (3000, 1500, 1.3, 250, 3, [0.11973227495640354, 0.08652335029546324, 0.10479075281773284]),
        # every cell light and ~40,000 of them: chunks of ~50 resamples, the same stream
        (40000, 30000, None, 200, 4, [0.3316342624291584, 0.32125826890627346, 0.3248996640668828]),
    ],
)
def test_top_label_ece_bootstrap_at_many_classes_keeps_its_draws(n, K, zipf, resamples, seed, want):
    """The Poisson bootstrap over (class, bin) cells reuses one buffer, takes each product on
    a group's cells only and, where its draws are of one kind, draws in chunks that fit
    glibc's reuse limit, one thread drawing while another sums the last chunk (where the
    machine has two CPUs); its figures are the former code's (computed at commit 1b81d2f,
    before these changes), stated to 1e-12 for other numpy releases' summation."""
    rng = np.random.default_rng(11 if zipf else 12)
    pred = np.minimum(rng.zipf(zipf, n) - 1, K - 1) if zipf else rng.integers(0, K, n)
    score = rng.beta(4, 1.5, n)
    label = np.where(rng.random(n) < score, pred, (pred + 1) % K)
    d = TopLabelData.from_scores(pred, score, label, classes=[f"c{i}" for i in range(K)])
    conf = np.clip(score * 0.9 + 0.05, 0, 1)
    e = overall.ece_top_label(d, conf, resamples=resamples, seed=seed)
    np.testing.assert_allclose([e.value, e.lo, e.hi], want, rtol=1e-12, atol=0)
