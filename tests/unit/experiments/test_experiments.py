"""Tests of topcal.experiments: IDX files, ensembling, batched training, cache, end to end."""

from __future__ import annotations

import gzip
import json
import math
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from topcal.errors import DataError, ParameterError, TopcalError
from topcal.experiments import (
    ExperimentConfig,
    combine_log_probs,
    draw_ensembles,
    load_mnist,
    read_idx,
    split_train_test1,
    write_idx,
)

pytestmark = pytest.mark.slow

IN_CI = os.environ.get("CI") == "true"
FASHION = Path("/usr/share/datasets/fashion-mnist")


def _need_torch():
    try:
        import torch  # noqa: F401
    except ImportError:
        if IN_CI:
            pytest.fail("torch is missing under CI=true; run 'make install'")
        pytest.skip("torch not installed (pip install torch==2.13.0)")


def make_synthetic_mnist(root: Path, *, n_train=1200, n_test=300, k=10, seed=0, gz=True) -> Path:
    """Write four MNIST-format IDX files of a learnable but noisy 10-class problem."""
    rng = np.random.default_rng(seed)
    protos = rng.random((k, 28, 28)) < 0.25

    def images(n):
        y = rng.integers(0, k, n).astype(np.uint8)
        x = protos[y] * 110.0 + rng.normal(0, 70, (n, 28, 28)) + 60
        return np.clip(x, 0, 255).astype(np.uint8), y

    root.mkdir(parents=True, exist_ok=True)
    ext = ".gz" if gz else ""
    xtr, ytr = images(n_train)
    xte, yte = images(n_test)
    write_idx(root / f"train-images-idx3-ubyte{ext}", xtr)
    write_idx(root / f"train-labels-idx1-ubyte{ext}", ytr)
    write_idx(root / f"t10k-images-idx3-ubyte{ext}", xte)
    write_idx(root / f"t10k-labels-idx1-ubyte{ext}", yte)
    return root


# ---------------------------------------------------------------- IDX files
@pytest.mark.parametrize("name", ["a-idx3-ubyte", "a-idx3-ubyte.gz"])
def test_idx_round_trip_plain_and_gzip(tmp_path, name):
    arr = np.random.default_rng(1).integers(0, 256, (7, 5, 3)).astype(np.uint8)
    p = write_idx(tmp_path / name, arr)
    assert (p.read_bytes()[:2] == b"\x1f\x8b") == name.endswith(".gz")
    out = read_idx(p)
    assert out.dtype == np.uint8 and out.shape == (7, 5, 3)
    np.testing.assert_array_equal(out, arr)


def test_idx_reads_big_endian_ints_and_floats(tmp_path):
    a = np.array([[1, -2], [70000, 3]], dtype=np.int32)
    np.testing.assert_array_equal(read_idx(write_idx(tmp_path / "i", a)), a)
    # hand-made header: 0x00 0x00 0x0D (float32) 0x01 dims=[2], big-endian values
    raw = (
        bytes([0, 0, 0x0D, 1])
        + (2).to_bytes(4, "big")
        + np.array([1.5, -2.25], dtype=">f4").tobytes()
    )
    (tmp_path / "f").write_bytes(raw)
    np.testing.assert_array_equal(read_idx(tmp_path / "f"), [1.5, -2.25])


def test_idx_malformed_magic_names_file_expected_and_found(tmp_path):
    p = tmp_path / "train-images-idx3-ubyte"
    p.write_bytes(b"\x12\x34\x08\x03" + b"\x00" * 20)
    with pytest.raises(DataError) as exc:
        read_idx(p)
    msg = str(exc.value)
    assert (
        str(p) in msg and "0x12340803" in msg and "expected 0x0000TTNN" in msg and "\n" not in msg
    )


def test_idx_truncated_data_reports_sizes(tmp_path):
    arr = np.zeros((4, 28, 28), dtype=np.uint8)
    p = write_idx(tmp_path / "x.gz", arr)
    body = gzip.decompress(p.read_bytes())
    p.write_bytes(gzip.compress(body[:-100]))
    with pytest.raises(
        DataError, match=r"declares shape \(4, 28, 28\) \(3136 data bytes\) but holds 3036"
    ):
        read_idx(p)


def test_idx_truncated_header_and_broken_gzip(tmp_path):
    p = tmp_path / "h"
    p.write_bytes(bytes([0, 0, 8, 3]) + b"\x00\x00\x00\x04")
    with pytest.raises(DataError, match="truncated in its header: expected 16 bytes"):
        read_idx(p)
    g = tmp_path / "g.gz"
    g.write_bytes(gzip.compress(b"\x00" * 1000)[:20])
    with pytest.raises(DataError, match="does not decompress"):
        read_idx(g)
    (tmp_path / "tiny").write_bytes(b"\x00\x00")
    with pytest.raises(DataError, match="at least a 4-byte magic"):
        read_idx(tmp_path / "tiny")


def test_load_mnist_checks_the_four_files(tmp_path):
    root = make_synthetic_mnist(tmp_path / "d", n_train=50, n_test=20, gz=False)
    d = load_mnist(root)
    assert (
        d.train_images.shape == (50, 28, 28) and d.test_labels.shape == (20,) and d.n_classes == 10
    )
    assert d.fingerprint() == load_mnist(root).fingerprint()
    write_idx(root / "t10k-labels-idx1-ubyte", np.zeros(19, dtype=np.uint8))
    with pytest.raises(DataError, match="has 20 images but .* has 19 labels"):
        load_mnist(root)
    (root / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(DataError, match="no t10k-labels-idx1-ubyte"):
        load_mnist(root)
    with pytest.raises(DataError, match="does not exist"):
        load_mnist(tmp_path / "nowhere")


def test_split_is_seeded_disjoint_and_complete():
    tr, t1 = split_train_test1(600, 100, 5)
    assert tr.size == 500 and t1.size == 100
    assert np.intersect1d(tr, t1).size == 0
    np.testing.assert_array_equal(np.sort(np.concatenate([tr, t1])), np.arange(600))
    np.testing.assert_array_equal(split_train_test1(600, 100, 5)[1], t1)
    assert not np.array_equal(split_train_test1(600, 100, 6)[1], t1)
    with pytest.raises(ParameterError):
        split_train_test1(100, 100, 0)


@pytest.mark.skipif(
    not FASHION.is_dir() and not IN_CI, reason="dataset-fashion-mnist not installed"
)
def test_fashion_mnist_from_debian_reads():
    d = load_mnist(FASHION)
    assert d.train_images.shape == (60000, 28, 28) and d.test_images.shape == (10000, 28, 28)
    assert np.bincount(d.test_labels).tolist() == [1000] * 10


# ------------------------------------------------------------------ ensembling
def _log_softmax(z):
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def test_combination_is_the_normalised_product_of_member_probabilities():
    rng = np.random.default_rng(3)
    lp = _log_softmax(rng.normal(0, 2, (10, 50, 4)))
    out = combine_log_probs(lp)
    p = np.exp(lp)
    prod = p.prod(axis=0)
    np.testing.assert_allclose(np.exp(out), prod / prod.sum(axis=1, keepdims=True), rtol=1e-10)
    np.testing.assert_allclose(np.exp(out).sum(axis=1), 1.0)
    # = the normalised geometric mean at temperature 1/n, and not the geometric mean itself
    geo = np.exp(lp.mean(axis=0))
    np.testing.assert_allclose(
        np.exp(out), geo**10 / (geo**10).sum(axis=1, keepdims=True), rtol=1e-8
    )
    assert np.abs(np.exp(out) - geo / geo.sum(axis=1, keepdims=True)).max() > 0.05
    # one member: the member itself; unnormalised logits give the same ensemble
    np.testing.assert_allclose(combine_log_probs(lp[:1]), lp[0], atol=1e-12)
    shifted = lp + rng.normal(0, 5, (10, 50, 1))
    np.testing.assert_allclose(combine_log_probs(shifted), out, atol=1e-10)
    with pytest.raises(DataError):
        combine_log_probs(lp[0])


def test_geometric_rule_is_the_normalised_geometric_mean():
    rng = np.random.default_rng(5)
    lp = _log_softmax(rng.normal(0, 2, (10, 40, 3)))
    geo = np.exp(lp).prod(axis=0) ** (1 / 10)
    out = combine_log_probs(lp, "geometric")
    np.testing.assert_allclose(np.exp(out), geo / geo.sum(axis=1, keepdims=True), rtol=1e-10)
    prod = combine_log_probs(lp, "product")
    np.testing.assert_array_equal(out.argmax(axis=1), prod.argmax(axis=1))  # same predicted class
    assert np.all(prod.max(axis=1) >= out.max(axis=1) - 1e-12)  # the product is sharper
    with pytest.raises(ParameterError, match="product"):
        combine_log_probs(lp, "mean")


def test_combination_survives_extreme_log_probs():
    lp = np.array([[[-1e4, 0.0, -800.0]]] * 10)
    out = combine_log_probs(lp)
    assert np.all(np.isfinite(out)) and out.argmax() == 1 and abs(out[0, 1]) < 1e-12


def test_ensemble_logits_feed_toplabeldata():
    from topcal import TopLabelData

    rng = np.random.default_rng(4)
    lp = _log_softmax(rng.normal(0, 1, (3, 20, 5)))
    d = TopLabelData.from_logits(combine_log_probs(lp), rng.integers(0, 5, 20))
    prod = np.exp(lp).prod(axis=0)
    np.testing.assert_allclose(d.score, prod.max(axis=1) / prod.sum(axis=1))
    np.testing.assert_array_equal(d.pred, lp.sum(axis=0).argmax(axis=1))


def test_draw_ensembles_distinct_and_seeded():
    e = draw_ensembles(12, 60, 10, 0)  # only 66 exist: enumerated path
    assert e.shape == (60, 10)
    assert len({tuple(r) for r in e}) == 60
    assert all(len(set(r)) == 10 and list(r) == sorted(r) for r in e)
    big = draw_ensembles(40, 30, 10, 1)  # rejection path
    assert len({tuple(r) for r in big}) == 30 and big.max() < 40
    np.testing.assert_array_equal(draw_ensembles(40, 30, 10, 1), big)
    with pytest.raises(ParameterError, match="66 exist"):
        draw_ensembles(12, 67, 10, 0)


def test_config_validation_messages():
    with pytest.raises(ParameterError, match="ensemble_size .* larger than the number of networks"):
        ExperimentConfig.for_regime("x", "under", n_networks=5)
    with pytest.raises(ParameterError, match=f"only {math.comb(11, 10)} distinct ensembles"):
        ExperimentConfig.for_regime("x", "over", n_networks=11)
    with pytest.raises(ParameterError, match="regime"):
        ExperimentConfig.for_regime("x", "medium")
    c = ExperimentConfig.for_regime("x", "over")
    assert c.train.steps == 10_000 and c.n_networks == 12 and c.train.precision == "bfloat16"
    c = ExperimentConfig.for_regime("x", "under", steps=50, precision=None)
    assert c.train.steps == 50 and c.train.precision == "float32" and c.n_networks == 40
    with pytest.raises(ParameterError, match="precision"):
        ExperimentConfig.for_regime("x", "under", precision="float16")


def test_missing_torch_is_a_topcal_error(monkeypatch):
    from topcal.experiments import mlp

    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(TopcalError, match=r"pip install torch==2\.13\.0"):
        mlp.require_torch()


# ------------------------------------------------------------ batched training
def _tensors(root):
    import torch

    d = load_mnist(root)
    x = torch.from_numpy(d.train_images.reshape(len(d.train_images), -1).astype(np.float32) / 255)
    y = torch.from_numpy(d.train_labels.astype(np.int64))
    xt = torch.from_numpy(d.test_images.reshape(len(d.test_images), -1).astype(np.float32) / 255)
    return x, y, xt, d.test_labels


def test_batched_training_equals_one_at_a_time_and_learns(tmp_path):
    _need_torch()
    from topcal.experiments import mlp

    x, y, xt, yt = _tensors(make_synthetic_mnist(tmp_path / "d", n_train=400, n_test=200))
    cfg = mlp.TrainConfig(hidden=(32, 16), steps=30, batch_size=64)
    seeds = mlp.network_seeds(7, range(3))
    together = mlp.predict_log_softmax(
        mlp.train_networks(x, y, seeds, cfg, n_classes=10, progress=False), xt
    )
    alone = mlp.predict_log_softmax(
        mlp.train_networks(x, y, seeds[2:], cfg, n_classes=10, progress=False), xt
    )
    assert together.shape == (3, 200, 10)
    np.testing.assert_allclose(alone[0], together[2], atol=2e-4)
    assert np.abs(together[0] - together[1]).max() > 0.1  # different seeds, different networks
    acc = (together.argmax(axis=2) == yt[None]).mean(axis=1)
    assert np.all(acc > 0.5), acc  # chance is 0.1
    np.testing.assert_allclose(np.exp(together).sum(axis=2), 1.0, atol=1e-5)


def test_bfloat16_training_learns_and_keeps_float32_weights(tmp_path):
    _need_torch()
    import torch

    from topcal.experiments import mlp

    x, y, xt, yt = _tensors(make_synthetic_mnist(tmp_path / "d", n_train=400, n_test=200))
    seeds = mlp.network_seeds(1, range(2))
    outs = {}
    for prec in ("float32", "bfloat16"):
        cfg = mlp.TrainConfig(hidden=(32,), steps=30, batch_size=64, precision=prec)
        params = mlp.train_networks(x, y, seeds, cfg, n_classes=10, progress=False)
        assert all(p.dtype == torch.float32 for p in params)
        outs[prec] = mlp.predict_log_softmax(params, xt)
    assert outs["bfloat16"].dtype == np.float32
    assert np.all((outs["bfloat16"].argmax(axis=2) == yt[None]).mean(axis=1) > 0.5)
    assert 0 < np.abs(outs["bfloat16"] - outs["float32"]).max()  # really a different computation


def test_interrupted_training_resumes_from_checkpoint(tmp_path):
    _need_torch()
    from topcal.experiments import mlp

    x, y, xt, _ = _tensors(make_synthetic_mnist(tmp_path / "d", n_train=300, n_test=50))
    cfg = mlp.TrainConfig(hidden=(16,), steps=20, batch_size=32)
    seeds = mlp.network_seeds(0, range(2))
    ref = mlp.predict_log_softmax(
        mlp.train_networks(x, y, seeds, cfg, n_classes=10, progress=False), xt
    )
    ck = tmp_path / "ck.pt"

    def stop(step):
        if step == 12:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        mlp.train_networks(
            x,
            y,
            seeds,
            cfg,
            n_classes=10,
            progress=False,
            checkpoint=ck,
            checkpoint_seconds=0.0,
            callback=stop,
        )
    assert ck.is_file()
    steps = []
    out = mlp.train_networks(
        x, y, seeds, cfg, n_classes=10, progress=False, checkpoint=ck, callback=steps.append
    )
    assert steps[0] == 12 and steps[-1] == 20  # resumed after the last saved step (11)
    assert not ck.exists()
    np.testing.assert_allclose(mlp.predict_log_softmax(out, xt), ref, atol=1e-6)


def test_network_cache_resumes_only_missing_networks(tmp_path, monkeypatch):
    _need_torch()
    from topcal.experiments import mlp, networks

    root = make_synthetic_mnist(tmp_path / "d", n_train=500, n_test=100)
    small = dict(
        n_networks=3, n_ensembles=1, ensemble_size=2, batch_size=50, hidden=(16,), n_test1=100
    )
    cfg = ExperimentConfig.for_regime(str(root), "under", steps=10, **small)
    cache = tmp_path / "cache"
    first = networks.network_outputs(cfg, cache_root=cache, chunk=2, progress=False)
    assert first.trained == (0, 1, 2)
    files = sorted(Path(first.cache_dir).glob("net_*.npz"))
    assert [f.name for f in files] == ["net_00000.npz", "net_00001.npz", "net_00002.npz"]
    files[1].unlink()
    calls = []
    real = mlp.train_networks

    def spy(x, y, seeds, config, **kw):
        calls.append(list(seeds))
        return real(x, y, seeds, config, **kw)

    monkeypatch.setattr(mlp, "train_networks", spy)
    second = networks.network_outputs(cfg, cache_root=cache, chunk=2, progress=False)
    assert second.trained == (1,) and calls == [mlp.network_seeds(cfg.seed, [1])]
    for a, b in zip(first.log_probs, second.log_probs):
        np.testing.assert_allclose(a, b, atol=2e-4)
    third = networks.network_outputs(cfg, cache_root=cache, progress=False)
    assert third.trained == () and len(calls) == 1
    # a different training configuration does not reuse these networks
    other = ExperimentConfig.for_regime(str(root), "under", steps=11, **small)
    assert (
        networks.network_outputs(other, cache_root=cache, progress=False).cache_dir
        != first.cache_dir
    )


# ---------------------------------------------------------------- end to end
@pytest.mark.heavy
def test_tiny_end_to_end_run_through_the_cli(tmp_path, capsys):
    _need_torch()
    from topcal.cli import main

    root = make_synthetic_mnist(tmp_path / "d", n_train=1200, n_test=300)
    out = tmp_path / "out"
    argv = [
        "experiment",
        "ensembles",
        "--data-dir",
        str(root),
        "--networks",
        "4",
        "--ensembles",
        "3",
        "--ensemble-size",
        "2",
        "--steps",
        "20",
        "--batch-size",
        "100",
        "--test1-size",
        "300",
        "--methods",
        "hist,conf1,uncalibrated",
        "-o",
        str(out),
        "--cache-dir",
        str(tmp_path / "c"),
        "--quiet",
    ]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "median NLL over ensembles" in text and "set 2 vs set 1" in text
    doc = json.loads((out / "summary.json").read_text())
    assert doc["config"]["methods"] == ["hist", "conf1", "uncalibrated"]
    assert doc["config"]["train"]["steps"] == 20
    res = np.load(out / "results.npz")
    assert res["values"].shape == (3, 3, 2, 3, 11)
    assert np.all(np.isfinite(res["values"]))
    ens = res["ensembles"]
    assert ens.shape == (3, 2) and len({tuple(r) for r in ens}) == 3
    # medians in the summary are the medians of the per-ensemble values
    j = 0  # hist
    med = np.median(res["values"][:, j, 1, 0, 10])
    assert doc["metrics"]["nll"]["hist"]["test2"]["overall"]["median"] == pytest.approx(med)
    gap = np.median(res["values"][:, j, 1, 0, 10] - res["values"][:, j, 0, 0, 10])
    assert doc["set2_vs_set1"]["nll"]["median_gap"]["hist"] == pytest.approx(gap)
    # calibrating beats the raw score on test set 1 for NLL (hist is fit there)
    assert np.all(res["values"][:, 0, 0, 0, 10] <= res["values"][:, 2, 0, 0, 10] + 1e-9)
    assert doc["network_accuracy"]["test2"]["median"] > 0.3
    counts = res["counts"]  # (E, 2, 4, K): TP + FP per set = the set's size
    np.testing.assert_allclose(counts[:, 0, :2].sum(axis=(1, 2)), 300)
    assert np.all(counts[:, :, 2] <= counts[:, :, 0]) and np.all(counts[:, :, 3] <= counts[:, :, 1])
    rows = (out / "medians.csv").read_text().strip().splitlines()
    assert len(rows) == 1 + 3 * 3 * 2 * 11
    # the figures by content: the size their layout asks for (90 dpi), and drawn on, not blank
    from matplotlib.image import imread

    from topcal.experiments.plots import curves_figure_size

    w, h = curves_figure_size(len(res["classes"]))
    expected = {"overall.png": (675, 630), "curves.png": (int(round(h * 90)), int(round(w * 90)))}
    for png, shape in expected.items():
        img = imread(out / png)
        assert img.shape[:2] == shape, (png, img.shape)
        ink = (img[..., :3] < 0.9).any(axis=2)  # pixels that are not (near) white
        assert 0.02 < ink.mean() < 0.6, (png, ink.mean())
        assert (
            len(np.unique(img[..., :3].reshape(-1, 3), axis=0)) > 20
        )  # lines, text and fills, not one colour
    # second run: every network from the cache, same numbers
    assert main(argv) == 0
    assert "0 trained now" in capsys.readouterr().out
    np.testing.assert_array_equal(np.load(out / "results.npz")["values"], res["values"])


def test_cli_reports_malformed_idx_in_one_line(tmp_path, capsys):
    from topcal.cli import main

    root = make_synthetic_mnist(tmp_path / "d", n_train=50, n_test=20, gz=False)
    bad = root / "train-labels-idx1-ubyte"
    bad.write_bytes(bad.read_bytes()[:-5])
    code = main(
        ["experiment", "ensembles", "--data-dir", str(root), "-o", str(tmp_path / "o"), "--quiet"]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("error: IDX file") and str(bad) in err and err.count("\n") == 1


def test_cli_rejects_unknown_method_before_training(tmp_path, capsys):
    from topcal.cli import main

    code = main(
        [
            "experiment",
            "ensembles",
            "--data-dir",
            str(tmp_path),
            "--methods",
            "hist,nope",
            "--quiet",
            "-o",
            str(tmp_path / "o"),
        ]
    )
    assert code == 2 and "unknown method 'nope'" in capsys.readouterr().err


def test_class_counts_split_low_scores():
    from topcal import TopLabelData
    from topcal.experiments import class_counts

    probs = np.array([[0.995, 0.005], [0.6, 0.4], [0.999, 0.001], [0.3, 0.7], [0.2, 0.8]])
    d = TopLabelData.from_probs(probs, [0, 0, 1, 1, 0])
    # class 0: TP 0.995, TP 0.6, FP 0.999; class 1: TP 0.7, FP 0.8
    np.testing.assert_array_equal(class_counts(d), [[2, 1], [1, 1], [1, 1], [0, 1]])
