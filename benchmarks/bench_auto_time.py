"""auto's fit time before and after issue 22, in one process, on the ImageNet sets (top score only).

"before": auto with today's candidates before issue 22 (uncalibrated, kde-mon2, hist, cum-opt,
bts, btswa on top scores) and the smallest-mean rule (tolerance 0); "after": the default auto
(pooled and hierarchical candidates added, one-standard-error rule). Both run the same 5-fold
cross-validation. Prints seconds per fit (best of ``--repeat``) and the ratio after / before.

Run: ``.venv/bin/python benchmarks/bench_auto_time.py [--data imagenet-densenet161.csv ...]
[--repeat 1]``

``--cells 1e4x10 1e5x10 ...`` (issue 26) instead times, per cell of simulated outputs
(``_measure.make_data``), the default auto against scikit-learn's temperature calibration
(``CalibratedClassifierCV(FrozenEstimator, method="temperature")``, as ``bench_scaling.py``) and
per-class isotonic regression, interleaved in one process, minimum of ``--repeat``; with
``--floor`` also, per cell, one all-data fit of each of auto's candidates (no cross-validation):
their sum and the cheapest one ÷ scikit-learn's temperature calibration (and auto's first look
alone, plus one fit of each contender: :func:`look_floor`), the floor of any rule
that fits every candidate once (auto fits each ``folds + 1`` times); with
``--old DIR`` also an older topcal exported as the package ``topcal_old`` in DIR (``git archive
<commit> src/topcal | tar -x -C DIR; mv DIR/src/topcal DIR/topcal_old``), its auto on the same data;
with ``--all-rows`` also auto with ``cv_rows=None`` (its choice made on all the rows, as before
2026-11-27) and, for both, the top-label NLL on a second seeded data set of the same cell (seed 1:
out of sample) and their ratio.

``--table`` (issue 36) runs the issue's seven cells (10^4, 10^5, 10^6 x 10; 10^5, 10^6 x 100;
10^4, 10^5 x 1,000) unless ``--cells`` names others, prints after each cell the stage every
candidate of auto reached (the first look only, or the K folds; ``Auto.stages_``), and at the end
the issue's table: auto ÷ scikit-learn's temperature calibration and auto's seconds per cell (and
the old auto's with ``--old``). A contestant whose time, extrapolated linearly in n from the last
cell of the same K, would exceed ``--max-seconds`` (default 300) is skipped there and the table says
so; ``--repeat`` rounds are interleaved, the minimum kept.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import topcal
from topcal.calibrators import get_class
from topcal.calibrators.select.rules import DEFAULT_CANDIDATES
from topcal.metrics import nll

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_heldout import OLD_AUTO, load  # noqa: E402


def best_of(f, repeat):
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        model = f()
        out.append(time.perf_counter() - t)
    return min(out), model


def _cell_label(n: int) -> str:
    """10^5 for 100000, 2×10^5 for 200000."""
    e = len(str(n)) - 1
    lead = n // 10**e
    return (f"{lead}×" if lead != 1 else "") + f"10^{e}"


#: The cells of issue 36's table.
ISSUE_CELLS = ["1e4x10", "1e5x10", "1e6x10", "1e5x100", "1e6x100", "1e4x1000", "1e5x1000"]


def stage_line(model) -> str:
    """The stage each of auto's candidates reached, in one table row."""
    st = getattr(model, "stages_", None)
    if not st:
        return f"|   stages: no first look ({len(model.cv_)} candidates, all to the K folds) |"
    table = st["table"]
    two = [n for n, v in table.items() if v["stage"] == 2]
    one = sorted(
        (n for n, v in table.items() if v["stage"] == 1 and n not in model.cv_),
        key=lambda n: table[n]["nll"] if table[n]["nll"] is not None else 9e9,
    )
    best = table[st["best"]]["nll"]

    def z(n):
        v = table[n]
        return "failed" if v["nll"] is None else f"{(v['nll'] - best) / (v['diff_se'] or 1):.1f}"

    if st["decided"] == 1:
        head = f"decided at the first look ({', '.join(model.cv_)})"
    else:
        head = f"{len(two)} to the K folds ({', '.join(two)})"
    return (
        f"|   stages (first look {st['rows']:g} + {st['test']:g} rows): {head}; "
        f"{len(one)} stopped at the first look (SE behind {st['best']}: "
        + ", ".join(f"{n} {z(n)}" for n in one)
        + ") |"
    )


def _too_slow(last: dict, name: str, n: int, k: int, limit: float) -> bool:
    """Whether ``name``'s time at n x k, extrapolated linearly in n from the last cell of the
    same k, exceeds ``limit`` seconds."""
    seen = last.get((name, k))
    return seen is not None and seen[1] * n / seen[0] > limit


def cells(args):
    """The --cells mode: auto vs scikit-learn's temperature calibration on simulated outputs."""
    from _measure import loadavg, make_data, old_topcal
    from bench_scaling import isotonic_per_class, sklearn_ts

    old = old_topcal(args.old)
    peers = [sklearn_ts(), isotonic_per_class()]
    print(
        "| n × K | auto s | sklearn-ts s | isotonic/class s | auto ÷ sklearn-ts | auto ÷ isotonic"
        + (" | old auto s | old ÷ new |" if old else " |")
        + " load |"
    )
    last, issue = {}, {}
    for cell in args.cells:
        n, k = (int(float(v)) for v in cell.split("x"))
        skip = {c for c in ("auto", "old") if _too_slow(last, c, n, k, args.max_seconds)}
        if "auto" in skip:
            print(f"| {_cell_label(n)} × {k} | skipped: auto would take > {args.max_seconds:g} s |")
            issue[(n, k)] = None
            continue
        probs, labels = make_data(n, k, 0)
        runs = {
            "auto": (
                lambda d: topcal.calibrator("auto").fit(d),
                topcal.TopLabelData.from_probs(probs, labels),
            )
        }
        if old and "old" not in skip:
            runs["old"] = (
                lambda d: old.calibrator("auto").fit(d),
                old.TopLabelData.from_probs(probs, labels),
            )
        if args.all_rows:
            runs["all rows"] = (
                lambda d: topcal.calibrator("auto", cv_rows=None).fit(d),
                runs["auto"][1],
            )
        best, models = {}, {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(args.repeat):
                for c in peers:
                    t = time.perf_counter()
                    c.fit(probs, labels, runs["auto"][1])
                    best[c.name] = min(best.get(c.name, 1e99), time.perf_counter() - t)
                for name, (fit, d) in runs.items():
                    t = time.perf_counter()
                    model = fit(d)
                    best[name] = min(best.get(name, 1e99), time.perf_counter() - t)
                    best[name + " chose"] = model.method_
                    models[name] = model
        if args.floor:
            d = runs["auto"][1]
            for name in [
                c for c in DEFAULT_CANDIDATES if not get_class(c).needs_full or d.has_full
            ]:
                for _ in range(args.repeat):
                    t = time.perf_counter()
                    topcal.calibrator(name).fit(d)
                    best["fit " + name] = min(
                        best.get("fit " + name, 1e99), time.perf_counter() - t
                    )
        a, ts, iso = best["auto"], best["sklearn-ts"], best["isotonic/class"]
        row = (
            f"| {_cell_label(n)} × {k} | {a:.2f} | {ts:.3f} | {iso:.3f} | {a / ts:.1f} | "
            f"{a / iso:.0f}"
        )
        if old and "old" in skip:
            row += f" | skipped: > {args.max_seconds:g} s | -"
        elif old:
            row += f" | {best['old']:.2f} | {best['old'] / a:.2f}"
            if best["old chose"] != best["auto chose"]:
                row += f" (chose {best['old chose']} vs {best['auto chose']})"
        print(row + f" | {loadavg()} |", flush=True)
        for c in ("auto", "old"):
            if c in best:
                last[(c, k)] = (n, best[c])
        issue[(n, k)] = (a, ts, best.get("old"), loadavg())
        if args.table:
            print(stage_line(models["auto"]), flush=True)
        if args.all_rows:
            p2, y2 = make_data(n, k, 1)
            test = topcal.TopLabelData.from_probs(p2, y2)
            held = {
                name: nll(test, models[name].predict(test)).overall for name in ("auto", "all rows")
            }
            print(
                f"|   cv_rows=None: {best['all rows']:.2f} s (chose {best['all rows chose']}; auto "
                f"chose "
                f"{best['auto chose']}), {best['all rows'] / a:.1f} × auto's time; held-out NLL "
                f"(seed 1) "
                f"auto {held['auto']:.5f}, cv_rows=None {held['all rows']:.5f}, ratio "
                f"{held['auto'] / held['all rows']:.5f} |",
                flush=True,
            )
        if args.floor:
            fits = {k[4:]: v for k, v in best.items() if k.startswith("fit ")}
            cheap = min(fits, key=fits.get)
            print(
                f"|   floor: one fit of each of {len(fits)} candidates {sum(fits.values()):.2f} s "
                f"= "
                f"{sum(fits.values()) / ts:.1f} × sklearn-ts; cheapest ({cheap}) "
                f"{fits[cheap] / ts:.2f} ×; "
                "slowest: "
                + ", ".join(
                    f"{k} {v:.2f} s" for k, v in sorted(fits.items(), key=lambda kv: -kv[1])[:3]
                )
                + " |",
                flush=True,
            )
            look_floor(models["auto"], runs["auto"][1], best, ts, args.repeat)
    if args.table:
        print_issue_table(issue, old is not None, args.max_seconds)
    return 0


def look_floor(model, data, best: dict, ts: float, repeat: int) -> None:
    """With ``--floor``: auto's first look alone (its candidates, on the rows auto chose on; the
    minimum of ``repeat`` rounds, after the interleaved ones) and, added to it, one all-data fit of
    each candidate that reached auto's K folds (or its decided pair): the floor of any rule with
    this first look (issue 36)."""
    from topcal.calibrators.select.rules import CV_ROWS
    from topcal.calibrators.select.staging import SCREEN_ROWS, first_look
    from topcal.data import stratified_subsample

    if not model.stages_:
        return
    if data.n_rows > CV_ROWS:
        data = stratified_subsample(data, CV_ROWS, seed=0)
    look = 1e99
    for _ in range(repeat):
        t = time.perf_counter()
        first_look(data, list(model.stages_["table"]), rows=SCREEN_ROWS)
        look = min(look, time.perf_counter() - t)
    fits = sum(best.get("fit " + c, 0.0) for c in model.cv_)
    print(
        f"|   first look alone {look:.2f} s = {look / ts:.1f} × sklearn-ts; with one all-data fit "
        f"of each contender ({', '.join(model.cv_)}: {fits:.2f} s) {(look + fits) / ts:.1f} × |",
        flush=True,
    )


def print_issue_table(issue: dict, with_old: bool, limit: float) -> None:
    """Issue 36's table: per cell auto ÷ scikit-learn's temperature calibration and auto's s."""
    heads = [f"{_cell_label(n)} × {k:,}" for n, k in issue]
    skipped = f"not measured: > {limit:g} s"
    print("\n| n × K | " + " | ".join(heads) + " |")
    print("|---|" + "---|" * len(heads))
    lines = [
        ("auto ÷ CCV-T", lambda a, ts, o: f"{a / ts:.2f}"),
        ("auto s", lambda a, ts, o: f"{a:.2f}"),
    ]
    lines.append(("CCV-T s", lambda a, ts, o: f"{ts:.3f}"))
    if with_old:
        lines += [
            ("old auto ÷ CCV-T", lambda a, ts, o: skipped if o is None else f"{o / ts:.2f}"),
            ("old ÷ new", lambda a, ts, o: "-" if o is None else f"{o / a:.2f}"),
        ]
    for name, f in lines:
        print(
            f"| {name} | "
            + " | ".join(skipped if v is None else f(*v[:3]) for v in issue.values())
            + " |"
        )
    print("| load | " + " | ".join("-" if v is None else v[3] for v in issue.values()) + " |")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--data", nargs="+", default=["imagenet-densenet161.csv", "imagenet-resnet101.csv"]
    )
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument(
        "--after-first",
        action="store_true",
        help="time the new auto first (the second fit in a process may find warm caches)",
    )
    ap.add_argument(
        "--cells",
        nargs="+",
        help="simulated cells NxK (e.g. 1e4x10): auto vs scikit-learn's temperature calibration",
    )
    ap.add_argument(
        "--floor", action="store_true", help="with --cells: also one all-data fit of each candidate"
    )
    ap.add_argument(
        "--all-rows",
        action="store_true",
        help="with --cells: also auto with cv_rows=None, and "
        "both autos' NLL on a second seeded data set",
    )
    ap.add_argument(
        "--old", help="with --cells: a folder holding an older topcal as the package topcal_old"
    )
    ap.add_argument(
        "--table",
        action="store_true",
        help="issue 36's table (its seven cells unless --cells), with every candidate's stage",
    )
    ap.add_argument(
        "--max-seconds",
        type=float,
        default=300.0,
        help="with --cells/--table: skip a contestant whose time, extrapolated from the last "
        "cell of the same K, would exceed this",
    )
    args = ap.parse_args(argv)
    if args.table and not args.cells:
        args.cells = ISSUE_CELLS
    if args.cells:
        return cells(args)
    for name in args.data:
        data = load(name)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            runs = {
                "before": lambda: topcal.calibrator("auto", **OLD_AUTO).fit(data),
                "after": lambda: topcal.calibrator("auto").fit(data),
            }
            got = {
                k: best_of(runs[k], args.repeat)
                for k in (("after", "before") if args.after_first else ("before", "after"))
            }
            (before, old), (after, new) = got["before"], got["after"]
        print(
            f"{name}: {data.n_samples:g} samples, {data.n_classes} classes; auto before "
            f"{before:.1f} s "
            f"(chose {old.method_}), after {after:.1f} s (chose {new.method_}); after / before "
            f"{after / before:.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
