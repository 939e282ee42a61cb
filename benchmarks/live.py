"""Live backbone vs cache: prediction parity, LiveBundle latency / throughput, and verify's time.

With all-MiniLM-L6-v2 on SST-2 (``train.tsv`` to train heads from the cache ``benchmarks/probes.py``
extracts to ``/tmp/lc-bench-caches/sst2-all``, ``dev.tsv`` as its ``test`` split):

1. agreement of live-bundle vs cache predictions of an ``adaptive`` head and a ``layer:3`` head on dev
   (:func:`layercache.live.parity.parity`);
2. latency per text (batch 1, median over ``--texts`` texts) and throughput (texts/s, batch 32) of
   ``LiveBundle.predict`` with 1 head and with 3 heads, against the bare backbone forward
   (``Backbone.hidden_states``) on the same texts: ratios "1 head / bare" and "3 heads / 1 head";
3. ``verify_cache`` time for 100 examples.

Prints a table and writes JSON (default ``benchmarks/results/live.json``, ``live-quick.json`` with
``--quick``: 300 examples per file, 20 texts, 1 training epoch; a smoke run).
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
    p.add_argument("--quick", action="store_true", help="300 examples per file, 20 texts, 1 epoch (a smoke run)")
    p.add_argument("--out", type=Path, default=None,
                   help="JSON output (default: benchmarks/results/live.json, live-quick.json with --quick)")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help=f"folder with sst2/ (default: {DEFAULT_DATA})")
    p.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR,
                   help=f"the SST-2 cache is reused from / extracted into this folder (default: {DEFAULT_CACHE_DIR})")
    p.add_argument("--texts", type=int, default=100, help="texts timed for latency and throughput (default 100)")
    p.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
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
    epochs = 1 if args.quick else 5
    out_json = args.out or (HERE / "results" / ("live-quick.json" if args.quick else "live.json"))
    quiet_transformers()

    import layercache as lc
    from layercache.core.threads import use_threads  # kept by every computing call, even at torch's default count
    from layercache.live.bundle import LiveBundle
    from layercache.live.parity import parity
    from layercache.live.verify import load_cache_backbone, verify_cache
    from layercache.sources.datasets import load_dataset_records

    use_threads(args.threads)
    cache_dir = args.cache_dir.expanduser()
    cache_dir.mkdir(parents=True, exist_ok=True)
    os.environ["LAYERCACHE_HOME"] = str(cache_dir / "home")  # never move the user's "latest cache"
    t_start = time.perf_counter()
    meta = {**machine_meta(args.quick, MODEL, DEVICE), "data": str(data), "seed": args.seed, "limit": limit,
            "texts": n_texts, "epochs": epochs,
            "note": "2 CPU cores possibly shared with other work; load averages are recorded."}
    path = cache_dir / f"sst2-{limit or 'all'}"
    log(f"cache {path}")
    lc.extract(MODEL, None, path, split_files={k: str(v) for k, v in files.items()}, limit=limit, device=DEVICE,
               progress=False)
    runs_dir = cache_dir / f"sst2-{limit or 'all'}.live-bench-runs"
    results: dict = {"meta": meta, "parity": {}, "speed": {}}
    with lc.LayerCache.open(path) as cache:
        backbone = load_cache_backbone(cache, device=DEVICE)
        runs = {}
        for name, mixer in (("adaptive", "adaptive"), ("layer3", "layer:3"), ("layer6", "layer:-1")):
            log(f"train {mixer}")
            runs[name] = lc.train_head(cache, mixer, out=runs_dir / name, overwrite=True, tasks=["label"],
                                       epochs=epochs, seed=args.seed, progress=False, device=DEVICE).run
        for name in ("adaptive", "layer3"):
            log(f"parity {name}")
            t0 = time.perf_counter()
            agreement = parity(runs[name], cache, "test", backbone=backbone)
            results["parity"][name] = {**agreement.to_json(), "seconds": time.perf_counter() - t0}
        log("verify 100 examples of test")
        t0 = time.perf_counter()
        checked = verify_cache(cache, sample=100, seed=args.seed, split="test", backbone=backbone)
        results["verify"] = {"seconds": time.perf_counter() - t0, "passed": checked.passed,
                             "examples": checked.examples, "worst": max(r.worst for r in checked.rows)}

    texts = load_dataset_records(None, split_files={"test": str(files["test"])}).splits["test"].texts[:n_texts]
    one = LiveBundle.from_runs([runs["adaptive"]], device=DEVICE)
    three = LiveBundle.from_runs([runs["adaptive"], runs["layer3"], runs["layer6"]], device=DEVICE)
    tokenizer = one.backbone.tokenizer

    def bare(batch):
        enc = tokenizer(list(batch), truncation=True, max_length=one.max_length, padding=True, return_tensors="pt")
        one.backbone.hidden_states(enc["input_ids"], enc["attention_mask"])

    for name, fn in (("bare", bare), ("1 head", lambda b: one.predict(b)), ("3 heads", lambda b: three.predict(b))):
        log(f"speed {name}")
        results["speed"][name] = {"latency_ms": 1000 * median_latency(fn, texts), "texts_per_s": throughput(fn, texts)}
    s = results["speed"]
    results["ratios"] = {
        "latency 1 head / bare": s["1 head"]["latency_ms"] / s["bare"]["latency_ms"],
        "latency 3 heads / 1 head": s["3 heads"]["latency_ms"] / s["1 head"]["latency_ms"],
        "throughput 1 head / bare": s["1 head"]["texts_per_s"] / s["bare"]["texts_per_s"],
        "throughput 3 heads / 1 head": s["3 heads"]["texts_per_s"] / s["1 head"]["texts_per_s"]}
    meta["loadavg_end"] = loadavg()
    meta["total_s"] = time.perf_counter() - t_start
    report(results)
    write_results(results, out_json)
    return 0


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
