"""Live backbone vs cache: prediction parity, LiveBundle latency / throughput, and verify's time.

With all-MiniLM-L6-v2 on SST-2 (``train.tsv`` to train heads from the cache ``benchmarks/probes.py``
extracts to ``/tmp/lc-bench-caches/sst2-all``, ``dev.tsv`` as its ``test`` split), through the public
API only (:mod:`layercache.live`):

1. agreement of live-bundle vs cache predictions of an ``adaptive`` head and a ``layer:3`` head on dev
   (:func:`layercache.live.parity`);
2. latency per text (batch 1, median over ``--texts`` texts) and throughput (texts/s, batch 32) of
   ``LiveBundle.predict`` with 1 head and with 3 heads, against the bare backbone forward
   (``Backbone.hidden_states`` of the bundle's own backbone) on the same texts: ratios "1 head / bare"
   and "3 heads / 1 head";
3. :func:`layercache.live.verify_cache` time for 100 examples.

The backbone of parts 1 and 3 is the 1-head bundle's (``LiveBundle.from_runs`` loads the model the runs
were trained on, with their caches' maximum length), so the model loads once.

Prints a table and writes JSON (default ``benchmarks/results/live.json``, ``live-quick.json`` with
``--quick``: 300 examples per file, 20 texts, 3 training epochs; a smoke run that asserts what does not
depend on timing: live and cache predictions agree on at least 99 % of dev for both heads, verify passes,
and the 3-head bundle predicts what the 1-head bundle does for the head they share). ``figures``: the
seconds of each part, latency and time per text at batch 32, and the ratios (larger is worse).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:  # _common.py, when imported from elsewhere
    sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402
from _common import DEFAULT_DATA, HERE, loadavg, machine_meta, quiet_transformers, write_results  # noqa: E402

MODEL, DEVICE = "minilm", "cpu"
DEFAULT_CACHE_DIR = Path("/tmp/lc-bench-caches")


def log(text: str) -> None:
    print(f"  [{time.strftime('%H:%M:%S')}] {text}", flush=True)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="300 examples per file, 20 texts, 3 epochs (a smoke run with checks)")
    p.add_argument("--out", type=Path, default=None,
                   help="JSON output (default: benchmarks/results/live.json, live-quick.json with --quick)")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help=f"folder with sst2/ (default: {DEFAULT_DATA})")
    p.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR,
                   help=f"the SST-2 cache is reused from / extracted into this folder (default: {DEFAULT_CACHE_DIR})")
    p.add_argument("--texts", type=int, default=100, help="texts timed for latency and throughput (default 100)")
    p.add_argument("--threads", default=None,
                   help="torch threads, or auto (the idle cores; default 2, --quick auto: timing is not judged there, "
                        "and 2 threads beside a busy process run many times slower)")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def median_latency(fn, texts) -> float:
    """Median seconds of ``fn([text])`` over ``texts``, after one warm-up call."""
    fn(texts[:1])
    times = []
    for text in texts:
        t0 = time.perf_counter()
        fn([text])
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def throughput(fn, texts, batch: int = 32) -> float:
    """Texts per second of ``fn`` over ``texts`` in batches of ``batch``."""
    fn(texts[:batch])
    t0 = time.perf_counter()
    for i in range(0, len(texts), batch):
        fn(texts[i:i + batch])
    return len(texts) / (time.perf_counter() - t0)


def main(argv=None) -> int:
    args = parse_args(argv)
    data = args.data.expanduser().resolve()
    files = {"train": data / "sst2" / "train.tsv", "test": data / "sst2" / "dev.tsv"}
    missing = [str(f) for f in files.values() if not f.is_file()]
    if missing:
        sys.exit(f"benchmarks/live.py: benchmark data not found: {', '.join(missing)}; pass --data FOLDER holding "
                 "sst2/{train,dev}.tsv.")
    limit = 300 if args.quick else None
    n_texts = min(args.texts, 20) if args.quick else args.texts
    epochs = 3 if args.quick else 5  # quick: 1 epoch on 270 rows left the adaptive head on one class
    out_json = args.out or (HERE / "results" / ("live-quick.json" if args.quick else "live.json"))
    quiet_transformers()

    import numpy as np

    import layercache as lc
    from layercache import live  # live.parity: `from layercache.live import parity` names the module parity.py
    from layercache.sources import load_dataset_records

    threads = args.threads or ("auto" if args.quick else "2")
    lc.use_threads(None if threads == "auto" else int(threads))  # kept by every computing call
    cache_dir = args.cache_dir.expanduser()
    cache_dir.mkdir(parents=True, exist_ok=True)
    os.environ["LAYERCACHE_HOME"] = str(cache_dir / "home")  # never move the user's "latest cache"
    t_start = time.perf_counter()
    meta = {**machine_meta(args.quick, MODEL, DEVICE), "data": str(data), "seed": args.seed, "limit": limit,
            "texts": n_texts, "epochs": epochs, "threads": threads,
            "note": "2 CPU cores possibly shared with other work; load averages are recorded."}
    path = cache_dir / f"sst2-{limit or 'all'}"
    log(f"cache {path}")
    lc.extract(MODEL, None, path, split_files={k: str(v) for k, v in files.items()}, limit=limit, device=DEVICE,
               progress=False)
    runs_dir = cache_dir / f"sst2-{limit or 'all'}.live-bench-runs"
    results: dict = {"meta": meta, "parity": {}, "speed": {}}
    with lc.LayerCache.open(path) as cache:
        runs = {}
        for name, mixer in (("adaptive", "adaptive"), ("layer3", "layer:3"), ("layer6", "layer:-1")):
            log(f"train {mixer}")
            runs[name] = lc.train_head(cache, mixer, out=runs_dir / name, overwrite=True, tasks=["label"],
                                       epochs=epochs, seed=args.seed, progress=False, device=DEVICE).run
        t0 = time.perf_counter()
        one = lc.LiveBundle.from_runs([runs["adaptive"]], device=DEVICE)
        results["bundle_load_s"] = time.perf_counter() - t0
        three = lc.LiveBundle.from_runs([runs["adaptive"], runs["layer3"], runs["layer6"]], device=DEVICE)
        backbone = one.backbone  # the runs' model, loaded once for parity and verify too
        for name in ("adaptive", "layer3"):
            log(f"parity {name}")
            t0 = time.perf_counter()
            agreement = live.parity(runs[name], cache, "test", backbone=backbone)
            results["parity"][name] = {**agreement.to_json(), "seconds": time.perf_counter() - t0}
        log("verify 100 examples of test")
        t0 = time.perf_counter()
        checked = live.verify_cache(cache, sample=100, seed=args.seed, split="test", backbone=backbone)
        results["verify"] = {"seconds": time.perf_counter() - t0, "passed": checked.passed,
                             "examples": checked.examples, "worst": max(r.worst for r in checked.rows)}

    texts = load_dataset_records(None, split_files={"test": str(files["test"])}).splits["test"].texts[:n_texts]
    tokenizer = backbone.tokenizer

    def bare(batch):
        enc = tokenizer(list(batch), truncation=True, max_length=one.max_length, padding=True, return_tensors="pt")
        backbone.hidden_states(enc["input_ids"], enc["attention_mask"])

    for name, fn in (("bare", bare), ("1 head", lambda b: one.predict(b)), ("3 heads", lambda b: three.predict(b))):
        log(f"speed {name}")
        results["speed"][name] = {"latency_ms": 1000 * median_latency(fn, texts), "texts_per_s": throughput(fn, texts)}
    s = results["speed"]
    results["ratios"] = {
        "latency 1 head / bare": s["1 head"]["latency_ms"] / s["bare"]["latency_ms"],
        "latency 3 heads / 1 head": s["3 heads"]["latency_ms"] / s["1 head"]["latency_ms"],
        "throughput 1 head / bare": s["1 head"]["texts_per_s"] / s["bare"]["texts_per_s"],
        "throughput 3 heads / 1 head": s["3 heads"]["texts_per_s"] / s["1 head"]["texts_per_s"]}
    # The head both bundles hold predicts the same labels whether it shares the forward pass or not.
    alone, shared = one.predict(texts).heads[0], three.predict(texts).heads[0]
    results["shared_head_same_labels"] = all(
        np.array_equal(np.asarray(alone.tasks[t].labels), np.asarray(shared.tasks[t].labels)) for t in alone.tasks)
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


MIN_AGREEMENT = 0.99
"""Live and cache predictions of one run agree on at least this share of dev (the live path rounds its states to the
cache's storage dtype, so only a prediction on a knife edge may differ)."""


def figures(results: dict) -> dict[str, float]:
    """The headline figures, flat (``benchmarks/compare.py`` compares them), each one larger when worse: seconds,
    and the ratios of the live bundle's time over the bare forward's (and 3 heads' over 1 head's)."""
    s = results["speed"]
    out = {"total_s": results["meta"]["total_s"], "bundle_load_s": results["bundle_load_s"],
           "verify_s": results["verify"]["seconds"],
           **{f"parity_{name}_s": p["seconds"] for name, p in results["parity"].items()}}
    for name, key in (("bare", "bare"), ("1 head", "1head"), ("3 heads", "3heads")):
        out[f"latency_{key}_s"] = s[name]["latency_ms"] / 1000
        out[f"batch32_per_text_{key}_s"] = 1 / s[name]["texts_per_s"]
    out["latency_1head_over_bare_ratio"] = s["1 head"]["latency_ms"] / s["bare"]["latency_ms"]
    out["latency_3heads_over_1head_ratio"] = s["3 heads"]["latency_ms"] / s["1 head"]["latency_ms"]
    out["batch32_1head_over_bare_ratio"] = s["bare"]["texts_per_s"] / s["1 head"]["texts_per_s"]
    out["batch32_3heads_over_1head_ratio"] = s["1 head"]["texts_per_s"] / s["3 heads"]["texts_per_s"]
    return out


def check(results: dict) -> list[str]:
    """What does not depend on timing: parity, verify, and the shared head's labels."""
    failed = []
    for name, p in results["parity"].items():
        rate = min(t["agreement"] for t in p["tasks"].values() if "agreement" in t)
        if rate < MIN_AGREEMENT:
            failed.append(f"{name}: live and cache predictions agree on {rate:.4f} of dev (< {MIN_AGREEMENT})")
    if not results["verify"]["passed"]:
        failed.append(f"verify_cache failed (worst {results['verify']['worst']:.3g} of its tolerance)")
    if not results["shared_head_same_labels"]:
        failed.append("the 3-head bundle's adaptive head predicts other labels than the 1-head bundle's")
    return failed


def report(results: dict) -> None:
    rows = [[name, p["tasks"]["label"]["agreement"], p["tasks"]["label"]["compared"], p["seconds"]]
            for name, p in results["parity"].items()]
    _common.print_table("[1] live bundle vs cache predictions on dev", ["head", "agreement", "examples", "seconds"],
                        rows, digits=4)
    rows = [[name, v["latency_ms"], v["texts_per_s"]] for name, v in results["speed"].items()]
    _common.print_table(f"[2] LiveBundle.predict vs bare forward ({results['meta']['texts']} texts)",
                        ["", "latency ms (batch 1, median)", "texts/s (batch 32)"], rows)
    _common.print_table("[2] ratios", ["", "ratio"], [[k, v] for k, v in results["ratios"].items()], digits=3)
    v = results["verify"]
    _common.print_table("[3] verify", ["examples", "seconds", "passed", "worst / tolerance"],
                        [[sum(v["examples"].values()), v["seconds"], v["passed"], v["worst"]]], digits=3)


if __name__ == "__main__":
    sys.exit(main())
