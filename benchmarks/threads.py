"""Head training on a quiet and on a loaded machine, by torch thread setting: why ``--threads auto``.

torch's OpenMP threads wait for one another at the end of every parallel region; when another busy
process holds one of the cores, the thread that lost its core stalls all of them, thousands of
times a step. This benchmark trains the same head (``--mixer``, default ``adaptive``, the
``sentiment`` task of the built-in set, ``--epochs`` epochs after a one-epoch warm-up, token states)
in a fresh interpreter per measurement, beside 0, 1, ... busy processes (``while True: pass``),
under each setting:

- ``2 threads`` (the torch default on 2 cores: what every command did before ``--threads``);
- ``1 thread``;
- ``2, OMP_WAIT_POLICY=PASSIVE`` and ``2, GOMP_SPINCOUNT=1000``: libgomp's wait policy, the usual
  suspect (set before torch loads);
- ``auto``: :func:`layercache.use_threads` (the idle cores, sampled at start), the default of every
  command now.

The cache is the built-in task set through all-MiniLM-L6-v2, extracted into ``--cache`` when
missing (about 30 s). Prints a table of wall seconds (and the slowdown against the quiet machine
with the same setting) and writes JSON (default ``benchmarks/results/threads.json``) with the headline
``figures``. Each child also reports a digest of the trained weights: the same seed on the same number
of threads must give the same weights whatever else the machine does.

    python benchmarks/threads.py                   # loads 0 and 1, about 3 minutes
    python benchmarks/threads.py --loads 0 1 2 --mixer last
    python benchmarks/threads.py --quick           # 2 threads, 1 thread, auto: a scalar head on 200 examples

``--quick`` (about a minute) trains a ``scalar`` head for one epoch on a cache of the first 200 examples of each
built-in split under ``2 threads``, ``1 thread`` and ``auto``, beside 0 and 1 busy process, and asserts what does
not depend on timing: each setting that ran on the same number of threads at both loads trained the same weights.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import HERE, loadavg, machine_meta, print_table, weights_digest, write_results  # noqa: E402

SETTINGS = {  # name -> (--threads value for the child, environment set before torch loads)
    "2 threads": ("2", {}),
    "1 thread": ("1", {}),
    "2, OMP_WAIT_POLICY=PASSIVE": ("2", {"OMP_WAIT_POLICY": "PASSIVE"}),
    "2, GOMP_SPINCOUNT=1000": ("2", {"GOMP_SPINCOUNT": "1000"}),
    "auto": ("auto", {}),
}
DEFAULT_CACHE = Path("/tmp/lc-bench-caches/builtin-minilm")
QUICK = {"limit": 200, "mixer": "scalar", "epochs": 1, "loads": [0, 1], "settings": ["2 threads", "1 thread", "auto"]}


def child(cache: str, mixer: str, threads: str, epochs: int) -> dict:
    """Runs in the child: one warm-up epoch, then ``epochs`` timed epochs of one head."""
    from layercache import LayerCache, LayerHead, use_threads

    choice = use_threads(None if threads == "auto" else int(threads))
    with LayerCache.open(cache) as handle:
        options = dict(tasks=["sentiment"], source="tokens", progress=False, solver="adamw", patience=0, seed=0)
        LayerHead(mixer, epochs=1, **options).fit(handle)  # warm-up: page cache, kernels
        t0, c0 = time.perf_counter(), time.process_time()
        head = LayerHead(mixer, epochs=epochs, **options).fit(handle)
        return {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0, "threads": choice.threads,
                "weights_sha256": weights_digest(head)}


def spinners(n: int) -> list[subprocess.Popen]:
    """``n`` busy processes, each holding one core for as long as it runs."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def measure(cache: Path, mixer: str, setting: str, epochs: int) -> dict:
    threads, env = SETTINGS[setting]
    cmd = [sys.executable, __file__, "--child", str(cache), "--mixer", mixer, "--threads", threads,
           "--epochs", str(epochs)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env})
    if proc.returncode != 0:
        raise RuntimeError(f"the child failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def slug(setting: str) -> str:
    """A figure's name for a setting: ``2 threads`` -> ``2_threads``, ``2, OMP_WAIT_POLICY=PASSIVE`` ->
    ``2_omp_wait_policy_passive``."""
    return "_".join("".join(c if c.isalnum() else " " for c in setting.lower()).split())


def figures(results: dict) -> dict[str, float]:
    """The headline figures, flat (``benchmarks/compare.py`` compares them): each run's wall seconds, and each
    loaded run's slowdown against the quiet run of its setting."""
    out: dict[str, float] = {"total_s": results["meta"]["total_s"]}
    quiet = {r["setting"]: r["wall_s"] for r in results["runs"] if r["load"] == 0}
    for r in results["runs"]:
        out[f"{slug(r['setting'])}_load{r['load']}_s"] = r["wall_s"]
        if r["load"] and r["setting"] in quiet:
            out[f"{slug(r['setting'])}_load{r['load']}_slowdown_ratio"] = r["wall_s"] / quiet[r["setting"]]
    return out


def check(results: dict) -> list[str]:
    """What does not depend on timing: a setting that ran on the same number of threads beside every load trained
    the same weights (same seed, same data)."""
    failed = []
    for setting in dict.fromkeys(r["setting"] for r in results["runs"]):
        runs = [r for r in results["runs"] if r["setting"] == setting]
        by_threads: dict[int, set[str]] = {}
        for r in runs:
            by_threads.setdefault(r["threads"], set()).add(r["weights_sha256"])
        for threads, digests in by_threads.items():
            if len(digests) > 1:
                failed.append(f"{setting}: {threads} thread(s) trained different weights beside different loads")
    return failed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"settings {', '.join(QUICK['settings'])}; loads 0 and 1; a {QUICK['mixer']} head for "
                             f"{QUICK['epochs']} epoch on the first {QUICK['limit']} examples of each split; asserts "
                             "equal weights on equal threads")
    parser.add_argument("--cache", type=Path, default=None,
                        help=f"built-in MiniLM cache (extracted when missing; default {DEFAULT_CACHE}, with --quick "
                             f"{DEFAULT_CACHE}-{QUICK['limit']})")
    parser.add_argument("--mixer", default=None, help="default adaptive (--quick scalar)")
    parser.add_argument("--epochs", type=int, default=None, help="default 2 (--quick 1)")
    parser.add_argument("--loads", type=int, nargs="+", default=[0, 1], help="busy processes beside the training")
    parser.add_argument("--settings", nargs="+", default=None, choices=list(SETTINGS),
                        help="default: all (--quick: 2 threads, 1 thread, auto)")
    parser.add_argument("--out", type=Path, default=None,
                        help="JSON output (default: benchmarks/results/threads.json, threads-quick.json with --quick)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--threads", help=argparse.SUPPRESS)
    args = parser.parse_args()
    mixer = args.mixer or (QUICK["mixer"] if args.quick else "adaptive")
    epochs = args.epochs or (QUICK["epochs"] if args.quick else 2)
    if args.child:
        print(json.dumps(child(args.child, mixer, args.threads, epochs)))
        return 0

    from layercache import LayerCache, LayercacheError, extract

    limit = QUICK["limit"] if args.quick else None
    cache = args.cache or (Path(f"{DEFAULT_CACHE}-{limit}") if limit else DEFAULT_CACHE)
    settings = args.settings or (QUICK["settings"] if args.quick else list(SETTINGS))
    loads = args.loads
    out = args.out or HERE / "results" / ("threads-quick.json" if args.quick else "threads.json")
    started = time.perf_counter()
    results = {"meta": {**machine_meta(args.quick, "minilm", "cpu"), "cache": str(cache), "limit": limit},
               "mixer": mixer, "epochs": epochs, "runs": []}
    os.environ.setdefault("LAYERCACHE_HOME", str(cache.parent / "home"))  # never move the user's "latest cache"
    try:
        LayerCache.open(cache).close()  # complete: reused (extract() would load the model to say so)
    except LayercacheError:
        extract("minilm", "builtin", cache, limit=limit, progress=False)
    for load in loads:
        busy = spinners(load)
        try:
            time.sleep(0.5)  # let them reach full speed before the child samples the idle cores
            for setting in settings:
                run = {"load": load, "setting": setting, **measure(cache, mixer, setting, epochs),
                       "loadavg": loadavg()}
                results["runs"].append(run)
                print(f"  beside {load} busy process(es), {setting}: {run['wall_s']:.2f} s "
                      f"({run['threads']} thread(s))", flush=True)
        finally:
            for process in busy:
                process.kill()
                process.wait()
    quiet = {r["setting"]: r["wall_s"] for r in results["runs"] if r["load"] == 0}
    rows = []
    for setting in settings:
        row = [setting]
        for load in loads:
            run = next(r for r in results["runs"] if r["load"] == load and r["setting"] == setting)
            slowdown = run["wall_s"] / quiet[setting] if setting in quiet and load else None
            row.append(f"{run['wall_s']:.2f} s ({run['threads']})" + (f", {slowdown:.1f}x" if slowdown else ""))
        rows.append(row)
    failed = check(results)
    print_table(f"{mixer} head, {epochs} epoch(s) of the built-in sentiment task: wall seconds (threads used)"
                ", slowdown against the quiet machine",
                ["setting", *[f"beside {n} busy" for n in loads]], rows,
                note="same weights for the same seed on the same number of threads at every load: "
                     + ("yes" if not failed else "NO"))
    results["meta"]["loadavg_end"] = loadavg()
    results["meta"]["total_s"] = time.perf_counter() - started
    results["figures"] = figures(results)
    results["checks_failed"] = failed
    write_results(results, out)
    if failed:
        print("\nFAILED:\n  " + "\n  ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
