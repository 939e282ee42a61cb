"""Probe benchmarks for layercache on all-MiniLM-L6-v2 (CPU): LinearProbes against scikit-learn, and
token probes on the full CoNLL-2003 train set.

Measures, on real data from ``../shared/data`` (see benchmarks/README.md), through the public API only:

1. sst2  - :class:`layercache.probes.LinearProbes` on the 7 mean-pooled states of SST-2 against
   scikit-learn doing the same work: one ``LogisticRegression`` (lbfgs, its default tol 1e-4,
   ``max_iter`` 1000) per layer and per C of the same grid, on the same rows (the training part
   minus the seeded stratified 10% validation slice both sides hold out,
   :func:`layercache.heads.validation_slice`; ``LinearProbes(max_train=None)`` fits every one of
   them), the same standardised features (the training rows' own mean and std), C chosen per layer
   by the same criterion (the smallest validation cross-entropy, the smaller C within 0.1 % of it,
   as ``LinearProbes`` chooses), then accuracy on the held-out split (``dev.tsv``). Both sides are
   timed end to end from the open cache (reading the pooled vectors included); scikit-learn once
   without and once with warm starts along the grid (``warm_start=True``, C ascending), the faster
   of the two being the baseline. Beside it, ``LinearProbes()`` at its default, a seeded sample of
   at most 4,000 training rows (``max_train``): its time and accuracy, and its ratio to
   scikit-learn on every row, which is NOT equal work and is labelled so. Targets: every layer
   within 0.5 point of scikit-learn at equal C and equal rows, and at the chosen C; all layers
   together at least 20x faster at equal rows. Then what bounds that fit, measured (``sst2.bound``
   in the JSON, the table ``sst2_bound``): one more ``LinearProbes(max_train=None)`` fit, outside
   the timed runs, with ``torch.bmm``, ``torch.baddbmm`` and ``torch.linalg.eigh`` replaced by
   wrappers that log each call's operand shapes, bytes, FLOPs and seconds
   (:func:`recording_products`): the products over the training features are the objective's two
   passes per evaluation (outputs ``X W``, gradient ``dZ^T X``; their count is the evaluations),
   the Gram-shaped one the preconditioner's ``X^T X``, ``eigh`` its eigendecompositions. Against
   this machine's rates, measured with the fit's thread count: its read bandwidth
   (:func:`read_bandwidth_gb_s`, ``torch.sum`` over 384 MiB) and the same Gram product and
   ``eigh`` timed again on the very tensors the fit passed them. Their sum (the passes' bytes and
   one pass each for reading and standardising at the bandwidth, the Gram product and ``eigh`` at
   their measured times) is a lower bound on the fit at that many evaluations, set against the
   measured fit; scikit-learn's seconds over it is the speed-up such a fit would reach, so the
   report says whether 20x is within reach on this machine.
2. conll - token probes (first sub-token of each word) for the NER tags on the full CoNLL-2003
   train set (~204k words, 7 states, 9 classes; ``max_train=None``; a seeded 10% of the sentences
   validates), in a fresh interpreter so its peak memory (``VmHWM``) is the probe's: time by
   phase, peak RSS, and accuracy on ``valid.txt`` by layer.
3. report - :func:`layercache.report.probe_report` on the SST-2 cache, in a fresh interpreter: the
   seconds of each part (probes, control task, prediction depth, MDL for all layers, cumulative
   scoring, CKA, the act head it trains for per-token depth, token categories, writing the HTML)
   and in total.

Caches are extracted into ``--cache-dir`` when missing (default ``/tmp/lc-bench-caches``, the
names ``benchmarks/heads.py`` uses, so either benchmark reuses the other's caches; an extraction
takes 2-7 minutes on 2 cores). ``python benchmarks/probes.py`` runs all three parts (a few minutes
with the caches present); ``--quick`` runs parts 1 and 2 on the first 500 SST-2 and 300 CoNLL
sentences of each file (about a minute) and asserts what does not depend on timing: equal rows on
both sides, every layer and C within 0.5 point of scikit-learn at equal C and at the chosen C, at
least one counted objective evaluation per L-BFGS iteration and at least 2 passes x the features'
bytes x the evaluations read by the solve's passes, and the CoNLL probes' best layer above the
majority class. Prints tables and writes JSON (default
``benchmarks/results/probes.json``, ``probes-quick.json`` with ``--quick``) with the headline
``figures``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:  # _common.py, when imported from elsewhere
    sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402
from _common import DEFAULT_DATA, HERE, loadavg, machine_meta, quiet_transformers, write_results  # noqa: E402

MODEL = "minilm"
DEVICE = "cpu"
THREADS = 2
REPORT_SPLIT = "test"  # the held-out file's split name: not a validation name, so nothing selects on it
C_GRID = (0.01, 0.1, 1.0, 10.0)  # the full run's grid (the README's figures); --quick: LinearProbes' default grid
SKLEARN_MAX_ITER = 1000
DEFAULT_CACHE_DIR = Path("/tmp/lc-bench-caches")
DATASETS = {  # name -> (train file, held-out file, what the held-out file is)
    "sst2": ("sst2/train.tsv", "sst2/dev.tsv", "SST-2 dev"),
    "conll": ("conll2003/train.txt", "conll2003/valid.txt", "CoNLL-2003 valid"),
}
VAL_FRACTION = 0.1  # LinearProbes' default slice of train, held out on both sides
TARGETS = {"accuracy_difference_max_points": 0.5, "speedup_min": 20.0}
QUICK_LIMITS = {"sst2": 500, "conll": 150}  # --quick: the first N examples of each file


def log(text: str) -> None:
    print(f"  [{time.strftime('%H:%M:%S')}] {text}", flush=True)


def get_cache(name: str, data: Path, limit: int | None, cache_dir: Path) -> tuple[Path, dict]:
    """Extract (or reuse) the cache of one dataset, as benchmarks/heads.py names and makes it."""
    from layercache import extract

    train, held_out, _ = DATASETS[name]
    files = {"train": str(data / train), REPORT_SPLIT: str(data / held_out)}
    path = cache_dir / f"{name}-{limit or 'all'}"
    timing_file = cache_dir / f"{name}-{limit or 'all'}.extract-time.json"
    t0 = time.perf_counter()
    result = extract(MODEL, None, path, split_files=files, limit=limit, device=DEVICE, progress=False)
    seconds = time.perf_counter() - t0
    if result.already_complete:
        info = {**(json.loads(timing_file.read_text()) if timing_file.is_file() else {}), "reused": True}
    else:
        info = {"extract_s": seconds, "reused": False, "loadavg": loadavg()}
        timing_file.write_text(json.dumps(info, indent=2) + "\n")
    return path, info


# --------------------------------------------------------------------------------------------
# 1. SST-2: LinearProbes against scikit-learn, on equal rows


LOSS_RTOL = 1e-3
"""C is chosen per layer as ``LinearProbes`` documents it: the smallest validation cross-entropy, the smallest C whose
loss lies within 0.1 % of it (a tie in loss is won by the stronger regularisation)."""


def choose_by_loss(losses: dict[float, float]) -> float:
    """The C of ``{C: mean validation cross-entropy}`` that LinearProbes' rule keeps (ascending C, 0.1 % margin)."""
    best = min(losses.values())
    return next(C for C in sorted(losses) if losses[C] <= best + LOSS_RTOL * abs(best))


def sklearn_probes(cache, warm: bool, seed: int) -> dict:
    """What LinearProbes(max_train=None) does, with scikit-learn: per layer and C a LogisticRegression on the same
    training rows, C chosen per layer by the same validation-loss rule on the same slice."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import log_loss

    from layercache.heads import validation_slice

    t0 = time.perf_counter()
    task = next(t for t in cache.tasks if t.name == "label")
    X = cache.pooled("train", "mean")  # (n, L, D)
    y = cache.labels("train", "label")
    X_test, y_test = cache.pooled(REPORT_SPLIT, "mean"), cache.labels(REPORT_SPLIT, "label")
    rows, val = validation_slice(cache, "train", [task], VAL_FRACTION, seed)  # the slice LinearProbes holds out
    mean, std = X[rows].mean(0), X[rows].std(0)
    std[std == 0] = 1.0
    Z, Z_test = (X - mean) / std, (X_test - mean) / std
    read_s = time.perf_counter() - t0
    layers, not_converged = [], 0
    for layer in range(X.shape[1]):
        every_C, losses, val_acc = {}, {}, {}
        model = LogisticRegression(max_iter=SKLEARN_MAX_ITER, warm_start=warm)
        for C in sorted(C_GRID):
            if not warm:
                model = LogisticRegression(max_iter=SKLEARN_MAX_ITER)
            model.set_params(C=C)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", ConvergenceWarning)
                model.fit(Z[rows, layer], y[rows])
            not_converged += any(issubclass(w.category, ConvergenceWarning) for w in caught)
            losses[C] = float(log_loss(y[val], model.predict_proba(Z[val, layer]), labels=model.classes_))
            val_acc[C] = float(model.score(Z[val, layer], y[val]))
            every_C[C] = float(model.score(Z_test[:, layer], y_test))
        C = choose_by_loss(losses)
        layers.append({"val": val_acc[C], "val_loss": losses[C], "C": C, "test": every_C[C], "test_by_C": every_C})
    return {"seconds": time.perf_counter() - t0, "read_s": read_s, "layers": layers, "warm_start": warm,
            "fits_not_converged": not_converged, "n_train": int(len(rows)), "n_val": int(len(val))}


def ours_probes(cache, seed: int, max_train) -> dict:
    """``LinearProbes(max_train=...)`` (``"default"``: its own default) fitted end to end from the open cache
    (timed), then scored on the held-out split (not timed: scikit-learn's test scoring is inside its loop, but it
    costs a few ms on both sides)."""
    from layercache.probes import LinearProbes

    options = {} if max_train == "default" else {"max_train": max_train}
    t0 = time.perf_counter()
    probes = LinearProbes(task="label", C_grid=C_GRID, seed=seed, val_fraction=VAL_FRACTION, **options).fit(cache)
    seconds = time.perf_counter() - t0
    test = probes.score(cache, REPORT_SPLIT)
    return {"seconds": seconds, "max_train": probes.max_train, "timings": probes.timings_, "n_iter": probes.n_iter_,
            "converged": probes.converged_,
            "layers": [{"val": float(v), "C": float(c), "test": float(t)}
                       for v, c, t in zip(probes.scores_, probes.C_, test)],
            "layer_names": probes.layer_names_, "n_train": int(probes.n_train_),
            "n_train_available": int(probes.n_train_available_), "n_val": int(probes.n_val_)}


def ours_by_C(cache, seed: int) -> list[dict]:
    """Held-out accuracy of LinearProbes fitted on every training row with each C alone (not timed): per layer,
    C -> accuracy."""
    from layercache.probes import LinearProbes

    by_C = {C: LinearProbes(task="label", C_grid=(C,), seed=seed, val_fraction=VAL_FRACTION, max_train=None)
            .fit(cache).score(cache, REPORT_SPLIT) for C in C_GRID}
    return [{C: float(by_C[C][layer]) for C in C_GRID} for layer in range(len(by_C[C_GRID[0]]))]


# What bounds the fit: its products counted and timed from outside, against this machine's rates

BANDWIDTH_MIB = 384
"""Size of the array :func:`read_bandwidth_gb_s` streams: far beyond any CPU cache, so every pass comes from DRAM."""
MACHINE_REPS = 7
"""Timed passes of each machine measurement (after one warm-up); the median counts."""


def read_bandwidth_gb_s(mib: int = BANDWIDTH_MIB, reps: int = MACHINE_REPS) -> float:
    """This machine's memory read bandwidth in GB/s (1e9 bytes a second), at torch's current thread count.

    The median over ``reps`` timed ``torch.sum`` passes over a float32 array of ``mib`` MiB (filled, so its pages
    are resident), after one warm-up pass. A reduction reads each byte once, writes nothing and does one addition
    per element, so it is the fastest any pass over a large array can go here: a product over the features, which
    also multiplies and writes its outputs, can at best match it (a small array held in the CPU's caches can
    exceed it)."""
    import torch

    a = torch.ones(mib * 2**20 // 4)
    torch.sum(a)
    seconds = []
    for _ in range(reps):
        t0 = time.perf_counter()
        torch.sum(a)
        seconds.append(time.perf_counter() - t0)
    return a.numel() * a.element_size() / statistics.median(seconds) / 1e9


def _is_gram(a, b) -> bool:
    """Whether ``bmm(a, b)`` has the Gram matrix's form: ``A^T A``-shaped, square output over a longer inner
    dimension (the preconditioner's ``X^T X``; its few-rows variant ``X X^T`` too)."""
    return (a.dim() == 3 and b.dim() == 3 and a.shape[1] == b.shape[2] and a.shape[2] == b.shape[1]
            and a.shape[2] > a.shape[1])


@contextlib.contextmanager
def recording_products():
    """Within it, every ``torch.bmm``, ``torch.baddbmm`` and ``torch.linalg.eigh`` call (what the solver's
    objective and preconditioner are made of) is timed and logged: op, operand shapes, seconds, bytes of the
    operands read, FLOPs; the operands of Gram-shaped products and of ``eigh`` are kept, to be timed again
    afterwards; torch's thread count at each call is noted. The solver looks these functions up on ``torch`` at each
    call, so replacing them there counts its calls without touching layercache; they are put back on leaving.
    Yields the log (a list of dicts)."""
    import torch

    calls: list[dict] = []
    originals = {"bmm": torch.bmm, "baddbmm": torch.baddbmm, "eigh": torch.linalg.eigh}

    def recorded(op: str, function):
        def call(*args, **kwargs):
            t0 = time.perf_counter()
            out = function(*args, **kwargs)
            seconds = time.perf_counter() - t0
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            entry = {"op": op, "shapes": [tuple(t.shape) for t in tensors], "seconds": seconds,
                     "bytes_read": sum(t.numel() * t.element_size() for t in tensors), "flop": 0, "gram": False,
                     "threads": torch.get_num_threads()}
            if op != "eigh" and len(tensors) >= 2:
                a, b = tensors[-2], tensors[-1]
                entry["flop"] = 2 * a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2]
                entry["gram"] = op == "bmm" and _is_gram(a, b)
            if entry["gram"] or op == "eigh":
                entry["operands"] = tensors
            calls.append(entry)
            return out

        return call

    torch.bmm, torch.baddbmm = recorded("bmm", originals["bmm"]), recorded("baddbmm", originals["baddbmm"])
    torch.linalg.eigh = recorded("eigh", originals["eigh"])
    try:
        yield calls
    finally:
        torch.bmm, torch.baddbmm, torch.linalg.eigh = originals["bmm"], originals["baddbmm"], originals["eigh"]


def median_seconds(function, reps: int = MACHINE_REPS) -> float:
    """The median seconds of ``reps`` calls of ``function()``, after one warm-up call."""
    function()
    seconds = []
    for _ in range(reps):
        t0 = time.perf_counter()
        function()
        seconds.append(time.perf_counter() - t0)
    return statistics.median(seconds)


def profile_fit(cache, seed: int) -> dict:
    """What bounds ``LinearProbes(max_train=None)``'s fit: one more fit (not among the timed runs) with its products
    recorded (:func:`recording_products`), then this machine's rates for the same work.

    Of the fit's products, those over the training features ``(L, N, D)`` are the objective's two passes per
    evaluation (the outputs ``baddbmm(b, X, W)``, then the gradient ``bmm(dZ^T, X)``): their count is the number of
    evaluations, their operands the bytes they read, their seconds the solve's passes. The Gram-shaped product is
    the preconditioner's ``X^T X`` (its FLOPs), ``eigh`` its eigendecompositions. Then, outside the fit and with
    the thread count its products ran with: the machine's read bandwidth (:func:`read_bandwidth_gb_s`), and the
    same Gram product and ``eigh`` on the very tensors the fit passed them (median of :data:`MACHINE_REPS` and of
    3): the machine's matmul rate for that shape and its eigendecomposition time. The lower bound on the fit
    (:func:`add_bound`) puts these together."""
    import torch

    from layercache.probes import LinearProbes

    with recording_products() as calls:
        t0 = time.perf_counter()
        probes = LinearProbes(task="label", C_grid=C_GRID, seed=seed, val_fraction=VAL_FRACTION,
                              max_train=None).fit(cache)
        fit_s = time.perf_counter() - t0
    L, N, D = len(probes.layer_names_), int(probes.n_train_), int(probes.coef_.shape[1])
    features = (L, N, D)
    feature_bytes = L * N * D * 4  # float32, as the solver holds them
    outputs = [c for c in calls if c["op"] == "baddbmm" and len(c["shapes"]) == 3 and c["shapes"][1] == features]
    gradient = [c for c in calls if c["op"] == "bmm" and not c["gram"] and c["shapes"][1] == features]
    grams = [c for c in calls if c["gram"]]
    eighs = [c for c in calls if c["op"] == "eigh"]
    passes = outputs + gradient
    counted = {id(c) for c in passes}
    others = [c for c in calls if c["op"] != "eigh" and not c["gram"] and id(c) not in counted]
    solve_bytes = sum(c["bytes_read"] for c in passes)
    passes_s = sum(c["seconds"] for c in passes)
    outside = torch.get_num_threads()
    threads = calls[0]["threads"] if calls else outside  # the fit's count: the machine is measured with it
    torch.set_num_threads(threads)
    try:
        bandwidth = read_bandwidth_gb_s()
        machine_gram_s = sum(median_seconds(lambda c=c: torch.bmm(*c["operands"][-2:])) for c in grams)
        machine_eigh_s = sum(median_seconds(lambda c=c: torch.linalg.eigh(c["operands"][0]), reps=3) for c in eighs)
    finally:
        torch.set_num_threads(outside)
    gram_flop = sum(c["flop"] for c in grams)
    gram_s, eigh_s = sum(c["seconds"] for c in grams), sum(c["seconds"] for c in eighs)
    timings = dict(probes.timings_)
    solve_s = timings.get("solve", 0.0)
    for c in calls:
        c.pop("operands", None)
    return {
        "feature_shape": list(features), "feature_mb": feature_bytes / 1e6, "n_iter": int(probes.n_iter_),
        "objective_evaluations": len(outputs), "gradient_passes": len(gradient),
        "solve_bytes_read_gb": solve_bytes / 1e9, "solve_passes_s": passes_s,
        "outputs_pass_ms_median": 1e3 * statistics.median(c["seconds"] for c in outputs) if outputs else None,
        "gradient_pass_ms_median": 1e3 * statistics.median(c["seconds"] for c in gradient) if gradient else None,
        "solve_read_gb_per_s": solve_bytes / passes_s / 1e9 if passes_s else None,
        "machine_read_gb_per_s": bandwidth, "machine_bandwidth_mib": BANDWIDTH_MIB, "threads": threads,
        "solve_fraction_of_machine_bandwidth": solve_bytes / passes_s / 1e9 / bandwidth if passes_s else None,
        "gram_shapes": [c["shapes"] for c in grams], "gram_gflop": gram_flop / 1e9, "gram_s": gram_s,
        "gram_gflop_per_s": gram_flop / gram_s / 1e9 if gram_s else None, "machine_gram_s": machine_gram_s,
        "machine_gram_gflop_per_s": gram_flop / machine_gram_s / 1e9 if machine_gram_s else None,
        "eigh_shapes": [c["shapes"][0] for c in eighs], "eigh_s": eigh_s, "machine_eigh_s": machine_eigh_s,
        "other_products": len(others), "other_products_s": sum(c["seconds"] for c in others),
        "solve_rest_s": solve_s - passes_s - gram_s - eigh_s,
        "profiled_fit_s": fit_s, "profiled_timings": timings,
    }


def add_bound(b: dict, fit_s: float, sklearn_s: float) -> None:
    """Complete ``profile_fit``'s figures with the lower bound on the fit's time on this machine: the solve's
    passes (the bytes they read) at the machine's read bandwidth, the Gram product at its measured matmul rate,
    the eigendecompositions at their measured time, reading and standardising the features at one pass each at
    the read bandwidth; the rest of the solve (L-BFGS bookkeeping, elementwise work, small products) and choosing
    C bounded by zero. Against the measured fit (``fit_s``, the timed median) and the speed-up over scikit-learn
    (``sklearn_s``) that a fit at the bound would reach."""
    bandwidth = b["machine_read_gb_per_s"] * 1e9
    one_pass = b["feature_mb"] * 1e6 / bandwidth
    b["bound_parts_s"] = {"read": one_pass, "standardise": one_pass,
                          "objective passes": b["solve_bytes_read_gb"] * 1e9 / bandwidth,
                          "gram": b["machine_gram_s"], "eigh": b["machine_eigh_s"]}
    b["fit_lower_bound_s"] = sum(b["bound_parts_s"].values())
    b["fit_measured_s"], b["sklearn_s"] = fit_s, sklearn_s
    b["fit_over_bound_ratio"] = fit_s / b["fit_lower_bound_s"]
    b["sklearn_over_bound_ratio"] = sklearn_s / b["fit_lower_bound_s"]
    b["speedup_target_reachable"] = b["sklearn_over_bound_ratio"] >= TARGETS["speedup_min"]


def bench_sst2(path: Path, reps: int, seed: int) -> dict:
    from layercache import LayerCache

    runs, sampled, sk = [], [], {}
    with LayerCache.open(path) as cache:
        cache.pooled("train", "mean")  # page cache warm for both sides
        for rep in range(reps):
            runs.append(ours_probes(cache, seed, None))
            log(f"LinearProbes, every training row, run {rep + 1}/{reps}: {runs[-1]['seconds']:.2f}s, "
                f"{runs[-1]['n_iter']} L-BFGS iterations")
            sampled.append(ours_probes(cache, seed, "default"))
            log(f"LinearProbes, default sample (max_train {sampled[-1]['max_train']:,}), run {rep + 1}/{reps}: "
                f"{sampled[-1]['seconds']:.2f}s on {sampled[-1]['n_train']:,} rows")
            if rep == 0:  # interleaved, so both sides see similar load
                for warm in (False, True):
                    key = "warm" if warm else "cold"
                    sk[key] = sklearn_probes(cache, warm, seed)
                    log(f"scikit-learn ({key} starts), every training row: {sk[key]['seconds']:.1f}s")
        bound = profile_fit(cache, seed)
        log(f"what bounds the fit (one more run, its products recorded): {bound['objective_evaluations']} "
            f"evaluations, {bound['solve_bytes_read_gb']:.2f} GB read at {bound['solve_read_gb_per_s'] or 0:.1f} "
            f"GB/s, machine {bound['machine_read_gb_per_s']:.1f} GB/s")
        same_C = ours_by_C(cache, seed)
    ours = runs[0]
    median = statistics.median(r["seconds"] for r in runs)
    sampled_median = statistics.median(r["seconds"] for r in sampled)
    baseline = min(sk.values(), key=lambda r: r["seconds"])
    diffs = [100 * (o["test"] - s["test"]) for o, s in zip(ours["layers"], baseline["layers"])]
    val_diffs = [100 * (o["val"] - s["val"]) for o, s in zip(ours["layers"], baseline["layers"])]
    sampled_diffs = [100 * (o["test"] - s["test"]) for o, s in zip(sampled[0]["layers"], baseline["layers"])]
    add_bound(bound, median, baseline["seconds"])
    equal_C = {key: [100 * (mine[C] - theirs["test_by_C"][C]) for mine, theirs in zip(same_C, run["layers"])
                     for C in C_GRID] for key, run in sk.items()}
    return {
        "ours": ours, "ours_seconds_all_runs": [r["seconds"] for r in runs], "ours_seconds_median": median,
        "ours_default_sample": sampled[0], "ours_default_sample_seconds_all_runs": [r["seconds"] for r in sampled],
        "ours_default_sample_seconds_median": sampled_median,
        "equal_rows": {"ours_n_train": ours["n_train"], "ours_n_val": ours["n_val"],
                       "sklearn_n_train": baseline["n_train"], "sklearn_n_val": baseline["n_val"],
                       "equal": ours["n_train"] == baseline["n_train"] and ours["n_val"] == baseline["n_val"]},
        "ours_test_by_C": same_C, "equal_C_differences_points": equal_C,
        "equal_C_max_abs_difference_points": {k: max(abs(d) for d in v) for k, v in equal_C.items()},
        "sklearn": sk, "baseline": "warm" if baseline is sk["warm"] else "cold",
        "test_accuracy_difference_points": diffs, "val_accuracy_difference_points": val_diffs,
        "max_abs_difference_points": max(abs(d) for d in diffs),
        "same_C_chosen": [o["C"] == s["C"] for o, s in zip(ours["layers"], baseline["layers"])],
        "default_sample_test_accuracy_difference_points": sampled_diffs,
        "speedup": baseline["seconds"] / median,
        "speedup_vs_cold_sklearn": sk["cold"]["seconds"] / median,
        "speedup_default_sample_unequal_rows": baseline["seconds"] / sampled_median,
        "bound": bound,
        "loadavg": loadavg(),
    }


# --------------------------------------------------------------------------------------------
# 2. CoNLL-2003 token probes, in a fresh interpreter


def peak_rss_mb() -> float:
    """This process's peak resident memory (VmHWM) in MB; ru_maxrss where /proc is missing."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def conll_child(path: Path, seed: int, threads: int | None) -> dict:
    """Runs in the child: fit the token probes on every word of the train split (``max_train=None``: the
    probes' default sample would fit 4,000 of them), score the held-out split."""
    import numpy as np

    from layercache import LayerCache, use_threads  # kept by every computing call, even at torch's default count
    from layercache.probes import LinearProbes

    use_threads(threads)
    baseline = peak_rss_mb()
    with LayerCache.open(path) as cache:
        words = sum(len(w) for w in cache.labels("train", "ner"))
        t0 = time.perf_counter()
        probes = LinearProbes(task="ner", C_grid=C_GRID, seed=seed, max_train=None).fit(cache)
        fit_s = time.perf_counter() - t0
        fit_peak = peak_rss_mb()
        t0 = time.perf_counter()
        test = probes.score(cache, REPORT_SPLIT)
        score_s = time.perf_counter() - t0
        gold = np.concatenate(cache.labels(REPORT_SPLIT, "ner"))
        majority = float(np.mean(gold == np.bincount(gold).argmax()))
    return {"train_words": words, "n_train": int(probes.n_train_), "n_val": int(probes.n_val_),
            "layers": probes.layer_names_,
            "fit_s": fit_s, "timings": probes.timings_, "score_s": score_s, "n_iter": probes.n_iter_,
            "converged": probes.converged_, "C": [float(c) for c in probes.C_],
            "val_accuracy": [float(x) for x in probes.scores_], "test_accuracy": [float(x) for x in test],
            "test_majority_accuracy": majority, "best_layer": probes.layer_names_[probes.best_layer_],
            "best_layer_test_accuracy": float(test[probes.best_layer_]),
            "features_mb": probes.n_train_ * len(probes.layer_names_) * cache.hidden_size * 4 / 2**20,
            "rss_after_imports_mb": baseline, "peak_rss_fit_mb": fit_peak, "peak_rss_mb": peak_rss_mb(),
            "loadavg": loadavg()}


def bench_conll(path: Path, seed: int, threads: int | None) -> dict:
    return run_child("--conll-child", path, seed, threads)


def run_child(flag: str, path: Path, seed: int, threads: int | None) -> dict:
    """Run one part in a fresh interpreter (its own peak memory, no warm caches) and read its JSON line."""
    cmd = [sys.executable, str(Path(__file__).resolve()), flag, str(path), "--seed", str(seed),
           "--threads", "auto" if threads is None else str(threads), "--C-grid", *map(str, C_GRID)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy())
    if proc.returncode != 0:
        raise RuntimeError(f"the {flag} child failed:\n{proc.stderr[-4000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["child_wall_s"] = time.perf_counter() - t0
    return result


def report_child(path: Path, seed: int, threads: int | None) -> dict:
    """Runs in the child: the whole probe report of the SST-2 cache, with the seconds of each part."""
    import tempfile

    from layercache import use_threads  # kept by every computing call, even at torch's default count
    from layercache.report import probe_report

    use_threads(threads)
    with tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        report, paths = probe_report(path, out, seed=seed, progress=False)
        total = time.perf_counter() - t0
        html_mb = paths.html.stat().st_size / 2**20
    parts = dict(report.timings)
    parts["writing the HTML and the rest"] = total - sum(parts.values())  # the act head is a part of its own
    task = next(iter(report.tasks.values()))
    return {"total_s": total, "parts_s": parts, "html_mb": html_mb, "peak_rss_mb": peak_rss_mb(),
            "best_layer": task["probe"]["best_layer"], "mdl_compression": task["mdl"]["compression"],
            "loadavg": loadavg()}


# --------------------------------------------------------------------------------------------


def bound_rows(b: dict) -> list[list[str]]:
    """The rows of the "what bounds the fit" table (console and markdown alike): part, measured seconds (the profiled
    run), work, achieved rate, this machine's rate, the part's lower bound in seconds (:func:`add_bound`)."""
    def num(x, digits=3):
        return "–" if x is None else f"{x:,.{digits}f}"

    bw, t, parts = b["machine_read_gb_per_s"], b["profiled_timings"], b["bound_parts_s"]
    L, N, D = b["feature_shape"]
    gb = b["feature_mb"] / 1e3
    rows = []
    for phase, what in (("read", "reading the pooled vectors"), ("standardise", "standardising them")):
        s = t.get(phase)
        rows.append([what, num(s), f"the features once: {gb:.3f} GB", f"{gb / s:.1f} GB/s" if s else "–",
                     f"{bw:.1f} GB/s read", num(parts[phase])])
    rows.append([f"objective: {b['objective_evaluations']} evaluations x 2 passes over the features (`X W`, "
                 f"`dZ^T X`)", num(b["solve_passes_s"]), f"{b['solve_bytes_read_gb']:.2f} GB read",
                 f"{b['solve_read_gb_per_s']:.1f} GB/s" if b["solve_read_gb_per_s"] else "–", f"{bw:.1f} GB/s read",
                 num(parts["objective passes"])])
    shapes = " + ".join(" @ ".join(str(tuple(x)).replace(" ", "") for x in pair) for pair in b["gram_shapes"])
    rows.append([f"preconditioner: Gram product `X^T X` {shapes}".rstrip(), num(b["gram_s"]),
                 f"{b['gram_gflop']:.1f} GFLOP",
                 f"{b['gram_gflop_per_s']:.0f} GFLOP/s" if b["gram_gflop_per_s"] else "–",
                 f"{b['machine_gram_gflop_per_s']:.0f} GFLOP/s" if b["machine_gram_gflop_per_s"] else "–",
                 num(parts["gram"])])
    count = sum(shape[0] if len(shape) == 3 else 1 for shape in b["eigh_shapes"])
    size = " x ".join(str(x) for x in b["eigh_shapes"][0][-2:]) if b["eigh_shapes"] else "–"
    rows.append([f"preconditioner: {count} symmetric eigendecompositions, {size}", num(b["eigh_s"]), "–", "–",
                 f"{b['machine_eigh_s']:.3f} s", num(parts["eigh"])])
    rows.append(["rest of the solve (L-BFGS steps, elementwise work, means, small products)", num(b["solve_rest_s"]),
                 "–", "–", "–", "–"])
    rows.append(["choosing C (validation outputs, losses)", num(t.get("select")), "–", "–", "–", "–"])
    rows.append(["the fit (this run; lower bound: the sum)", num(b["profiled_fit_s"]), "–", "–", "–",
                 num(b["fit_lower_bound_s"])])
    return rows


def bound_note(b: dict, baseline: str) -> str:
    """The sentences under the bound table: the bound against the measured fit, and the ratio it allows."""
    fraction = b["solve_fraction_of_machine_bandwidth"]
    return (f"Lower bound {b['fit_lower_bound_s']:.2f} s against the measured fit {b['fit_measured_s']:.2f} s (median "
            f"of the timed runs): {b['fit_over_bound_ratio']:.1f}x the bound. The solve's passes read at "
            f"{b['solve_read_gb_per_s'] or 0:.1f} GB/s, {100 * (fraction or 0):.0f} % of this machine's "
            f"{b['machine_read_gb_per_s']:.1f} GB/s (`torch.sum` over {b['machine_bandwidth_mib']} MiB, "
            f"{b['threads']} threads); one pass over the features: outputs {b['outputs_pass_ms_median'] or 0:.1f} ms, "
            f"gradient {b['gradient_pass_ms_median'] or 0:.1f} ms (medians); {b['n_iter']} L-BFGS iterations. "
            f"scikit-learn ({baseline} starts) {b['sklearn_s']:.2f} s / the bound = "
            f"**{b['sklearn_over_bound_ratio']:.1f}x**: the {TARGETS['speedup_min']:.0f}x target is "
            + ("within reach" if b["speedup_target_reachable"] else "out of reach")
            + f" on this machine for a fit that makes {b['objective_evaluations']} evaluations.")


def report(results: dict) -> None:
    meta = results["meta"]
    print("\n" + "=" * 100)
    print(f"Results: {meta['model']}, {meta['device']}, {meta['torch_threads']} torch threads, {meta['cpu_count']} "
          f"CPU cores, load avg start {meta['loadavg_start']} end {meta.get('loadavg_end')}"
          + ("  [QUICK: subsets]" if meta["quick"] else ""))
    if "sst2" in results:
        r = results["sst2"]
        ours, base, sampled = r["ours"], r["sklearn"][r["baseline"]], r["ours_default_sample"]
        rows = [[name, o["C"], s["C"], o["test"], s["test"], d, p["test"]]
                for name, o, s, d, p in zip(ours["layer_names"], ours["layers"], base["layers"],
                                            r["test_accuracy_difference_points"], sampled["layers"])]
        eq = r["equal_rows"]
        _common.print_table(
            f"[1] SST-2 dev accuracy by layer: LinearProbes(max_train=None) vs scikit-learn ({r['baseline']} "
            f"starts), both on the same {eq['ours_n_train']:,} training rows, C chosen per layer by the smallest "
            f"validation loss on the same {eq['ours_n_val']:,}-row slice",
            ["layer", "C ours", "C sklearn", "acc ours", "acc sklearn", "diff (points)",
             f"acc ours, default sample ({sampled['n_train']:,} rows)"], rows, digits=4)
        sk = r["sklearn"]
        base_s = sk[r["baseline"]]["seconds"]
        _common.print_table(
            f"    time, all {len(ours['layers'])} layers x {len(C_GRID)} C (end to end from the open cache)",
            ["", "training rows", "seconds", "scikit-learn (faster) / this"],
            [[f"LinearProbes(max_train=None) (median of {len(r['ours_seconds_all_runs'])})", ours["n_train"],
              r["ours_seconds_median"], r["speedup"]],
             ["scikit-learn, cold starts", sk["cold"]["n_train"], sk["cold"]["seconds"], None],
             ["scikit-learn, warm starts along C", sk["warm"]["n_train"], sk["warm"]["seconds"], None],
             [f"LinearProbes() default sample, max_train {sampled['max_train']:,}: NOT equal work",
              sampled["n_train"], r["ours_default_sample_seconds_median"], r["speedup_default_sample_unequal_rows"]]],
            note=f"LinearProbes runs (every row): {', '.join(f'{s:.2f}' for s in r['ours_seconds_all_runs'])} s; "
                 f"{ours['n_iter']} L-BFGS iterations; phases of run 1: "
                 + ", ".join(f"{k} {v:.2f}s" for k, v in ours["timings"].items())
                 + f".\nThe default sample fits {sampled['n_train']:,} of {sampled['n_train_available']:,} rows, "
                   f"so its ratio to scikit-learn on every row ({base_s:.2f}s) is not a like-for-like speed-up."
                 + f"\nAt equal C and equal rows (each of the {len(ours['layers']) * len(C_GRID)} layer x C fits), "
                   "max |diff| "
                 + ", ".join(f"{v:.2f} points vs {k}" for k, v in r["equal_C_max_abs_difference_points"].items())
                 + f".\nAt the chosen C, max |diff| {r['max_abs_difference_points']:.2f} points (target <= "
                 f"{TARGETS['accuracy_difference_max_points']}), the same C on {sum(r['same_C_chosen'])} of "
                 f"{len(r['same_C_chosen'])} layers; speed-up at equal rows {r['speedup']:.1f}x vs the faster "
                 f"scikit-learn (target >= {TARGETS['speedup_min']:.0f}x"
                 + (": not judged on a quick run)." if meta["quick"] else
                    f": {'PASS' if r['speedup'] >= TARGETS['speedup_min'] else 'FAIL'})."))
        if "bound" in r:
            _common.print_table("    what bounds the fit: one more LinearProbes(max_train=None) run, its products "
                                "timed, against this machine's rates",
                                ["part", "seconds", "work", "achieved", "this machine", "lower bound s"],
                                bound_rows(r["bound"]), note=bound_note(r["bound"], r["baseline"]).replace("**", ""))
    if "conll" in results:
        c = results["conll"]
        rows = [[name, C, v, t] for name, C, v, t in zip(c["layers"], c["C"], c["val_accuracy"], c["test_accuracy"])]
        _common.print_table(
            f"[2] CoNLL-2003 NER token probes: {c['n_train']:,} training words (+{c['n_val']:,} validating) x "
            f"{len(c['layers'])} states x {len(C_GRID)} C, one run", ["layer", "C", "val acc", "valid.txt acc"], rows,
            digits=4,
            note=f"fit {c['fit_s']:.1f}s (" + ", ".join(f"{k} {v:.1f}s" for k, v in c["timings"].items())
                 + f"), {c['n_iter']} L-BFGS iterations, converged: {c['converged']}; scoring valid.txt "
                 f"{c['score_s']:.1f}s.\npeak RSS {c['peak_rss_mb']:,.0f} MB (after imports "
                 f"{c['rss_after_imports_mb']:,.0f} MB; training features alone {c['features_mb']:,.0f} MB); "
                 f"majority-class accuracy {c['test_majority_accuracy']:.4f}; best layer {c['best_layer']}.")
    if "report" in results:
        report_table(results)


def report_table(results: dict) -> None:
    """The report part's seconds by part (called from :func:`report`)."""
    r = results["report"]
    rows = [[part, seconds] for part, seconds in r["parts_s"].items()] + [["total", r["total_s"]]]
    _common.print_table("[3] probe-report on SST-2: seconds by part", ["part", "seconds"], rows, digits=1,
                        note=f"HTML {r['html_mb']:.2f} MB, peak RSS {r['peak_rss_mb']:,.0f} MB, best layer "
                             f"{r['best_layer']}, MDL compression by layer "
                             + ", ".join(f"{c:.2f}" for c in r["mdl_compression"]) + ".")


def figures(results: dict) -> dict[str, float]:
    """The headline figures, flat (``benchmarks/compare.py`` compares them), each one larger when worse: seconds,
    peak memory, LinearProbes' time over scikit-learn's, accuracy differences from scikit-learn; and what bounds the
    fit (``sst2_*``: evaluations, bytes read, the lower bound and its ratios), its rates as their inverse
    (``*_s_per_gb``; the machine's read rate over the solve's) and the speed-up the bound allows as the bound over
    scikit-learn's seconds, so that none of them is larger when better. The rates themselves are in
    ``results["sst2"]["bound"]``."""
    out: dict[str, float] = {"total_s": results["meta"]["total_s"]}
    if "sst2" in results:
        r = results["sst2"]
        out.update(sst2_linearprobes_every_row_s=r["ours_seconds_median"],
                   sst2_linearprobes_default_sample_s=r["ours_default_sample_seconds_median"],
                   sst2_sklearn_cold_s=r["sklearn"]["cold"]["seconds"],
                   sst2_sklearn_warm_s=r["sklearn"]["warm"]["seconds"],
                   sst2_linearprobes_over_sklearn_equal_rows_ratio=1 / r["speedup"],
                   sst2_default_sample_over_sklearn_unequal_rows_ratio=1 / r["speedup_default_sample_unequal_rows"],
                   sst2_chosen_C_max_abs_difference_points=r["max_abs_difference_points"],
                   sst2_equal_C_max_abs_difference_points=max(r["equal_C_max_abs_difference_points"].values()))
        if "bound" in r:  # rates as their inverse (seconds per GB, machine over solve), so larger is still worse
            b = r["bound"]
            out.update(sst2_feature_mb=b["feature_mb"], sst2_objective_evaluations=b["objective_evaluations"],
                       sst2_solve_bytes_read_gb=b["solve_bytes_read_gb"], sst2_solve_passes_s=b["solve_passes_s"],
                       sst2_solve_read_s_per_gb=1 / b["solve_read_gb_per_s"] if b["solve_read_gb_per_s"] else None,
                       sst2_machine_read_s_per_gb=1 / b["machine_read_gb_per_s"],
                       sst2_machine_over_solve_read_rate_ratio=1 / b["solve_fraction_of_machine_bandwidth"]
                       if b["solve_fraction_of_machine_bandwidth"] else None,
                       sst2_gram_gflop=b["gram_gflop"], sst2_gram_s=b["gram_s"], sst2_eigh_s=b["eigh_s"],
                       sst2_fit_lower_bound_s=b["fit_lower_bound_s"],
                       sst2_fit_over_lower_bound_ratio=b["fit_over_bound_ratio"],
                       sst2_lower_bound_over_sklearn_ratio=1 / b["sklearn_over_bound_ratio"])
    if "conll" in results:
        c = results["conll"]
        out.update(conll_fit_s=c["fit_s"], conll_score_s=c["score_s"], conll_peak_rss_mb=c["peak_rss_mb"])
    if "report" in results:
        out["report_s"] = results["report"]["total_s"]
    return {k: float(v) for k, v in out.items() if v is not None}


def tables(results: dict) -> dict[str, str]:
    """Markdown tables of a run, for ``render.py``: ``sst2_speed`` (LinearProbes against scikit-learn, equal rows and
    the default sample), ``sst2_accuracy`` (dev accuracy by layer) and ``sst2_bound`` (what bounds the fit: its
    parts' seconds, work and rates against this machine's, the lower bound; a line saying it was not measured for
    a run recorded before it was), where the run has part 1."""
    out: dict[str, str] = {}
    if "sst2" not in results:
        return out
    r = results["sst2"]
    ours, sk, sampled = r["ours"], r["sklearn"], r["ours_default_sample"]
    runs = ", ".join(f"{s:.2f}" for s in r["ours_seconds_all_runs"])
    phases = ", ".join(f"{k} {v:.2f} s" for k, v in (ours.get("timings") or {}).items())
    rows = [
        "| fit, all 7 states x 4 C, from the open cache | training rows | seconds | scikit-learn (faster) / this |",
        "|---|---|---|---|",
        f"| `LinearProbes(max_train=None)`, median of {len(r['ours_seconds_all_runs'])} ({runs}) | "
        f"{ours['n_train']:,} | {r['ours_seconds_median']:.2f} | **{r['speedup']:.1f}x** |",
        f"| scikit-learn, warm starts along C | {sk['warm']['n_train']:,} | {sk['warm']['seconds']:.2f} | – |",
        f"| scikit-learn, cold starts | {sk['cold']['n_train']:,} | {sk['cold']['seconds']:.2f} | – |",
        f"| `LinearProbes()` at its default sample (NOT equal work) | {sampled['n_train']:,} | "
        f"{r['ours_default_sample_seconds_median']:.2f} | {r['speedup_default_sample_unequal_rows']:.1f}x |",
    ]
    notes = (f"\n`LinearProbes` on every row: {ours['n_iter']} L-BFGS iterations; phases of its first run: {phases}. "
             f"Target: at least {TARGETS['speedup_min']:.0f}x at equal rows. At equal C and equal rows (28 fits) "
             f"within {max(r['equal_C_max_abs_difference_points'].values()):.2f} point of scikit-learn; at the "
             f"chosen C within {r['max_abs_difference_points']:.2f} point, the same C on "
             f"{sum(r['same_C_chosen'])} of {len(r['same_C_chosen'])} states.\n")
    out["sst2_speed"] = "\n".join(rows) + "\n" + notes
    names = ours.get("layer_names") or [f"state {i}" for i in range(len(ours["layers"]))]
    acc = ["| state | C (this) | C (scikit-learn) | dev accuracy (this) | dev accuracy (scikit-learn) | difference "
           "(points) |", "|---|---|---|---|---|---|"]
    base = sk[r["baseline"]]["layers"]
    for name, mine, theirs, diff in zip(names, ours["layers"], base, r["test_accuracy_difference_points"]):
        acc.append(f"| {name} | {mine['C']:g} | {theirs['C']:g} | {mine['test']:.4f} | {theirs['test']:.4f} | "
                   f"{diff:+.2f} |")
    out["sst2_accuracy"] = "\n".join(acc) + "\n"
    if "bound" not in r:
        out["sst2_bound"] = ("What bounds the fit was not measured in this run (recorded before "
                             "`benchmarks/probes.py` measured it).\n")
        return out
    b = r["bound"]
    lines = ["| part of the fit (one more run, its products timed) | seconds | work | achieved | this machine | "
             "lower bound, seconds |", "|---|---|---|---|---|---|"]
    for i, row in enumerate(bound_rows(b)):
        last = i == len(bound_rows(b)) - 1
        lines.append("| " + " | ".join(f"**{c}**" if last and c != "–" else c for c in row) + " |")
    out["sst2_bound"] = "\n".join(lines) + "\n\n" + bound_note(b, r["baseline"]) + "\n"
    return out


def check(results: dict) -> list[str]:
    """What a run must show whatever the machine's speed (asserted by ``--quick``): equal rows on both sides, every
    layer and C within the accuracy target of scikit-learn at equal C and at the chosen C, at least one counted
    objective evaluation per L-BFGS iteration and at least two passes over the features per evaluation in the
    bytes read, and CoNLL probes that beat the majority class."""
    failed = []
    limit = TARGETS["accuracy_difference_max_points"]
    if "sst2" in results:
        r = results["sst2"]
        if not r["equal_rows"]["equal"]:
            failed.append(f"unequal rows: {r['equal_rows']}")
        for key, worst in r["equal_C_max_abs_difference_points"].items():
            if worst > limit:
                failed.append(f"at equal C, a fit differs from scikit-learn ({key} starts) by {worst:.2f} points "
                              f"(> {limit})")
        if r["max_abs_difference_points"] > limit:
            failed.append(f"at the chosen C, a layer differs from scikit-learn by {r['max_abs_difference_points']:.2f} "
                          f"points (> {limit})")
        if "bound" in r:  # counted from the recorded products: no timing involved
            b = r["bound"]
            evaluations, least = b["objective_evaluations"], max(1, b["n_iter"])
            if evaluations < least:
                failed.append(f"{evaluations} objective evaluations counted, fewer than the fit's {b['n_iter']} "
                              "L-BFGS iterations (at least one each): the count of the outputs' products is wrong")
            floor = 2 * b["feature_mb"] / 1e3 * evaluations
            if evaluations and b["solve_bytes_read_gb"] < floor * (1 - 1e-9):
                failed.append(f"the solve's passes read {b['solve_bytes_read_gb']:.3f} GB, less than 2 passes x "
                              f"{b['feature_mb']:.1f} MB x {evaluations} evaluations = {floor:.3f} GB")
    if "conll" in results:
        c = results["conll"]
        if not c["best_layer_test_accuracy"] > c["test_majority_accuracy"]:
            failed.append(f"CoNLL probes' best layer {c['best_layer_test_accuracy']:.4f} is not above the majority "
                          f"class {c['test_majority_accuracy']:.4f}")
    return failed


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help=f"parts sst2 and conll on the first {QUICK_LIMITS['sst2']} SST-2 and {QUICK_LIMITS['conll']} "
                        "CoNLL examples of each file, one LinearProbes run; asserts what does not depend on timing")
    p.add_argument("--out", type=Path, default=None,
                   help="JSON output (default: benchmarks/results/probes.json, probes-quick.json with --quick)")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA,
                   help=f"folder with sst2/ and conll2003/ (default: {DEFAULT_DATA})")
    p.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR,
                   help=f"caches are reused from / extracted into this folder (default: {DEFAULT_CACHE_DIR})")
    p.add_argument("--only", nargs="+", choices=["sst2", "conll", "report"], default=None,
                   help="run only these parts (default: all three; --quick: sst2 and conll)")
    p.add_argument("--reps", type=int, default=None,
                   help="LinearProbes runs on SST-2; the median time counts (default 3; --quick 1)")
    p.add_argument("--threads", default=None,
                   help=f"torch threads, or auto (the idle cores; default {THREADS}, --quick auto: timing is not "
                        "judged there, and 2 threads beside a busy process run many times slower)")
    p.add_argument("--C-grid", dest="c_grid", type=float, nargs="+", default=None,
                   help="the C grid (default 0.01 0.1 1 10; --quick: LinearProbes' default grid, without C = 10, "
                        "whose weakly regularised fits of a few hundred rows stop at tol where scikit-learn's stop "
                        "elsewhere)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--conll-child", type=Path, default=None, help=argparse.SUPPRESS)
    p.add_argument("--report-child", type=Path, default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv=None) -> int:
    global C_GRID
    args = parse_args(argv)
    if args.c_grid:
        C_GRID = tuple(sorted(args.c_grid))
    elif args.quick:
        from layercache.probes import LinearProbes

        C_GRID = tuple(sorted(LinearProbes().C_grid))
    threads = args.threads or ("auto" if args.quick else str(THREADS))
    args.threads = None if threads == "auto" else int(threads)
    if args.conll_child is not None:
        print(json.dumps(conll_child(args.conll_child, args.seed, args.threads)))
        return 0
    if args.report_child is not None:
        print(json.dumps(report_child(args.report_child, args.seed, args.threads)))
        return 0
    data = args.data.expanduser().resolve()
    missing = [str(data / f) for name in DATASETS for f in DATASETS[name][:2] if not (data / f).is_file()]
    if missing:
        sys.exit(f"benchmarks/probes.py: benchmark data not found: {', '.join(missing)}; pass --data FOLDER holding "
                 "sst2/{train,dev}.tsv and conll2003/{train,valid}.txt.")
    only = args.only or (["sst2", "conll"] if args.quick else ["sst2", "conll", "report"])
    limits = dict(QUICK_LIMITS) if args.quick else {"sst2": None, "conll": None}
    reps = args.reps or (1 if args.quick else 3)
    out_json = args.out or (HERE / "results" / ("probes-quick.json" if args.quick else "probes.json"))
    quiet_transformers()
    import torch

    import layercache
    from layercache import use_threads  # kept by every computing call, even at torch's default count

    use_threads(args.threads)
    cache_dir = args.cache_dir.expanduser()
    cache_dir.mkdir(parents=True, exist_ok=True)
    os.environ["LAYERCACHE_HOME"] = str(cache_dir / "home")  # never move the user's "latest cache"
    t_start = time.perf_counter()
    meta = {**machine_meta(args.quick, MODEL, DEVICE), "data": str(data), "C_grid": list(C_GRID), "seed": args.seed,
            "sklearn_max_iter": SKLEARN_MAX_ITER, "limits": limits, "reps": reps, "threads": threads,
            "note": "2 CPU cores possibly shared with other work; load averages are recorded."}
    print(f"layercache {layercache.__version__} probes benchmark: {MODEL} on {DEVICE}, {torch.get_num_threads()} "
          f"torch threads, {os.cpu_count()} CPU cores, load avg {loadavg()}", flush=True)
    results: dict = {"meta": meta, "targets": TARGETS, "caches": {}}
    print("\n[0] caches", flush=True)
    paths = {}
    for name in dict.fromkeys("sst2" if part == "report" else part for part in only):
        paths[name], info = get_cache(name, data, limits[name], cache_dir)
        results["caches"][name] = {"path": str(paths[name]), **info}
        log(f"{name}: {paths[name]} " + ("reused" if info["reused"] else f"extracted in {info['extract_s']:.0f}s"))
    if "sst2" in only:
        print(f"\n[1] SST-2: LinearProbes vs scikit-learn on equal rows, 7 states x {len(C_GRID)} C", flush=True)
        results["sst2"] = bench_sst2(paths["sst2"], reps, args.seed)
    if "conll" in only:
        print("\n[2] CoNLL-2003 token probes, every word of the train split (fresh interpreter)", flush=True)
        results["conll"] = bench_conll(paths["conll"], args.seed, args.threads)
        log(f"fit {results['conll']['fit_s']:.1f}s, peak RSS {results['conll']['peak_rss_mb']:,.0f} MB")
    if "report" in only:
        print("\n[3] probe-report on SST-2 (fresh interpreter)", flush=True)
        results["report"] = run_child("--report-child", paths["sst2"], args.seed, args.threads)
        log(f"report {results['report']['total_s']:.1f}s")
    meta["loadavg_end"] = loadavg()
    meta["total_s"] = time.perf_counter() - t_start
    results["figures"] = figures(results)
    results["checks_failed"] = check(results)
    report(results)
    write_results(results, out_json)
    if results["checks_failed"]:
        print("\nFAILED:\n  " + "\n  ".join(results["checks_failed"]))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
