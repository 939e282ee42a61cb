"""What lossless compression (``--compression zstd``) saves in bytes and costs in time, on a real MiniLM cache.

MiniLM (CPU) over SST-2 (``train.tsv`` as train, ``dev.tsv`` as test), every state kept, float16, int8 and int4,
each written uncompressed and compressed. Three parts:

1. filters: HDF5 filters from hdf5plugin (and HDF5's own gzip) on the first 40,960 tokens of a float16 and an
   int8 shard, in the cache's chunk layout (512 tokens of one state) and others: the bytes kept, and write and
   read speed (one core, whole dataset, median of the reps, filters interleaved). What chose ``zstd``'s filters.
2. caches: each cache's bytes on disk, and extract()'s wall time (one run each, the four interleaved).
3. reads: side by side, the variants interleaved and their order rotated each rep, so a busy spell on a shared
   machine falls on every variant alike: a feed epoch that only reads (every training batch gathered, nothing
   computed), the default ``adaptive`` head's epoch (median of its epochs, one torch thread), and linear probe
   fits on the pooled means and on token means. Twice: under the default memory budget (a feed keeps what it
   read from a compressed shard in memory, up to an eighth of the budget, so epochs after the first do not
   decompress) and under ``--budget`` (the at-scale case: a cache larger than memory, every epoch decompresses).
   Each time is divided by the uncompressed cache's of the same rep, and the median ratio is reported.

Run ``python benchmarks/compression.py`` (about 30 minutes on 2 idle cores; ``--workdir`` keeps the caches for
a second run, ``--skip-filters`` leaves part 1 out; ``--quick``: 200 examples, one rep, a smoke run that checks
every compressed cache gives back its uncompressed twin's states to the bit and is smaller). Prints tables and
writes JSON (default ``benchmarks/results/compression.json``).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DEFAULT_DATA, HERE, loadavg, machine_meta, print_table, work_folder, write_results  # noqa: E402

SAMPLE_TOKENS = 40_960
DTYPES = ("float16", "int8", "int4")
COMPRESSIONS = ("none", "zstd")


def filter_candidates() -> dict[str, dict]:
    """Name -> create_dataset keywords of every filter tried (hdf5plugin's, and HDF5's gzip with its shuffle)."""
    import hdf5plugin

    blosc2 = hdf5plugin.Blosc2
    return {
        "gzip 1 + shuffle (HDF5's own)": dict(compression="gzip", compression_opts=1, shuffle=True),
        "zstd 1": dict(hdf5plugin.Zstd(clevel=1)),
        "zstd 3": dict(hdf5plugin.Zstd(clevel=3)),
        "blosc2 zstd 1 + shuffle": dict(blosc2(cname="zstd", clevel=1, filters=blosc2.SHUFFLE)),
        "blosc2 zstd 3 + shuffle": dict(blosc2(cname="zstd", clevel=3, filters=blosc2.SHUFFLE)),
        "blosc2 zstd 5 + shuffle": dict(blosc2(cname="zstd", clevel=5, filters=blosc2.SHUFFLE)),
        "blosc2 zstd 3 + bitshuffle": dict(blosc2(cname="zstd", clevel=3, filters=blosc2.BITSHUFFLE)),
        "blosc2 lz4 + shuffle": dict(blosc2(cname="lz4", clevel=5, filters=blosc2.SHUFFLE)),
        "bitshuffle + lz4": dict(hdf5plugin.Bitshuffle(cname="lz4")),
    }


def survey_filters(caches: dict, work: Path, reps: int) -> list[dict]:
    """Part 1: each filter (and chunk length) on the first SAMPLE_TOKENS tokens of a float16 and an int8 shard."""
    import h5py
    import numpy as np

    samples = {}
    for dtype in DTYPES:
        shard = sorted((caches[dtype, "none"] / "train").glob("shard-*.h5"))[0]
        with h5py.File(shard, "r") as h:
            samples[dtype] = h["hidden"][:SAMPLE_TOKENS]
    trials = [(name, dtype, 512) for name in ["none", *filter_candidates()] for dtype in DTYPES]
    trials += [(name, dtype, chunk) for name in ("blosc2 zstd 1 + shuffle", "zstd 1") for dtype in DTYPES
               for chunk in (128, 2048)]
    times = {trial: {"write": [], "read": []} for trial in trials}
    ratios = {}
    path = work / "filter-trial.h5"
    for _ in range(reps):
        for trial in trials:
            name, dtype, chunk = trial
            values = samples[dtype]
            options = {} if name == "none" else filter_candidates()[name]
            start = time.perf_counter()
            with h5py.File(path, "w") as h:
                h.create_dataset("x", data=values, chunks=(chunk, 1, values.shape[2]), **options)  # int4: D / 2
            times[trial]["write"].append(time.perf_counter() - start)
            with h5py.File(path, "r", rdcc_nbytes=0) as h:
                ratios[trial] = h["x"].id.get_storage_size() / values.nbytes
                out = np.empty_like(values)
                start = time.perf_counter()
                h["x"].read_direct(out)
                times[trial]["read"].append(time.perf_counter() - start)
            assert np.array_equal(out, values)
    rows = []
    for trial in trials:
        name, dtype, chunk = trial
        mb = samples[dtype].nbytes / 1e6
        rows.append({"filter": name, "dtype": dtype, "chunk_tokens": chunk, "ratio": ratios[trial],
                     "write_mb_s": mb / statistics.median(times[trial]["write"]),
                     "read_mb_s": mb / statistics.median(times[trial]["read"])})
    path.unlink(missing_ok=True)
    return rows


def extract_caches(files: dict[str, str], work: Path, limit: int | None) -> tuple[dict, dict]:
    """Part 2: the four caches (kept when the work folder has them), their bytes and extract()'s wall time."""
    import layercache as lc

    caches, seconds = {}, {}
    for dtype in DTYPES:
        for how in COMPRESSIONS:
            out = work / f"{dtype}-{how}"
            start = time.perf_counter()
            caches[dtype, how] = lc.extract("minilm", None, out, split_files=files, limit=limit, device="cpu",
                                            storage_dtype=dtype, compression=how, progress=False).path
            seconds[dtype, how] = time.perf_counter() - start
            print(f"extracted {dtype} {how}: {seconds[dtype, how]:.0f}s; load avg {loadavg()}", flush=True)
    return caches, seconds


def cache_bytes(path: Path) -> int:
    """Bytes of every shard of a cache (what compression changes)."""
    return sum(p.stat().st_size for p in path.glob("*/shard-*.h5"))


def read_epoch(cache) -> float:
    """Seconds for one shuffled epoch of the training split's token batches, gathered and nothing else."""
    start = time.perf_counter()
    for _ in cache.iter_batches("train", 32, tasks=["label"], shuffle=True, seed=0):
        pass
    return time.perf_counter() - start


def check_equal_states(caches: dict) -> None:
    """What does not depend on timing: each compressed cache gives back the uncompressed one's states to the bit,
    and is smaller on disk."""
    import numpy as np

    import layercache as lc

    for dtype in DTYPES:
        with lc.LayerCache.open(caches[dtype, "none"]) as plain, lc.LayerCache.open(caches[dtype, "zstd"]) as packed:
            for split in plain.splits:
                rows = list(range(min(64, plain.num_examples(split))))
                for a, b in zip(plain.tokens(split, rows=rows), packed.tokens(split, rows=rows)):
                    assert np.array_equal(a, b), f"{dtype} zstd gives back other states than {dtype} in {split}"
                assert np.array_equal(plain.pooled(split, "mean"), packed.pooled(split, "mean"))
        assert cache_bytes(caches[dtype, "zstd"]) < cache_bytes(caches[dtype, "none"]), f"{dtype} zstd is no smaller"


def measure_reads(caches: dict, reps: int, epochs: int, budget: int | None) -> dict:
    """Part 3 under one memory budget (None: the default): per variant, per rep, the seconds of each task."""
    import layercache as lc

    variants = list(caches)
    out = {variant: {"read_epoch": [], "head_epoch": [], "probe_pooled": [], "probe_tokens": []}
           for variant in variants}
    with lc.memory_limit(budget):
        for rep in range(reps):
            for variant in variants[rep % len(variants):] + variants[:rep % len(variants)]:
                with lc.LayerCache.open(caches[variant]) as cache:  # a fresh reader: nothing kept from before
                    seconds = out[variant]
                    seconds["read_epoch"].append(read_epoch(cache))
                    head = lc.LayerHead(mixer="adaptive", epochs=epochs, seed=0, progress=False).fit(cache)
                    seconds["head_epoch"].append(statistics.median(e.seconds for e in head.history_.epochs))
                    for source, key in (("pooled:mean", "probe_pooled"), ("tokens", "probe_tokens")):
                        start = time.perf_counter()
                        lc.LinearProbes(task="label", source=source).fit(cache)
                        seconds[key].append(time.perf_counter() - start)
            print(f"reads rep {rep + 1}/{reps} (budget {budget or 'default'}): "
                  + ", ".join(f"{d} {h} {out[d, h]['read_epoch'][-1]:.2f}s/{out[d, h]['head_epoch'][-1]:.2f}s"
                              for d, h in variants) + f"; load avg {loadavg()}", flush=True)
    return out


def ratios(seconds: dict, dtype: str) -> dict:
    """Per task, the median over reps of compressed ÷ uncompressed seconds of the same rep."""
    plain, packed = seconds[dtype, "none"], seconds[dtype, "zstd"]
    return {task: statistics.median(b / a for a, b in zip(plain[task], packed[task])) for task in plain}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    p.add_argument("--limit", type=int, default=None, help="first N examples of each split (default: all)")
    p.add_argument("--reps", type=int, default=3, help="interleaved repetitions (default 3)")
    p.add_argument("--epochs", type=int, default=2, help="head epochs per fit (default 2)")
    p.add_argument("--budget", type=int, default=512 << 20,
                   help="the small memory budget, bytes (default 512 MiB: feeds keep 64 MiB, so SST-2 streams)")
    p.add_argument("--skip-filters", action="store_true")
    p.add_argument("--quick", action="store_true",
                   help="200 examples of each split, 1 rep, 1 epoch, no filter survey: checks the states come back "
                        "equal and smaller (seconds)")
    p.add_argument("--out", type=Path, default=HERE / "results" / "compression.json")
    p.add_argument("--workdir", type=Path, default=None)
    args = p.parse_args(argv)
    if args.quick:
        args.limit, args.reps, args.epochs, args.skip_filters = args.limit or 200, 1, 1, True

    import torch

    import layercache as lc

    logging.getLogger("layercache").setLevel(logging.ERROR)  # a 2-epoch head's collapse warnings are not results
    started = time.perf_counter()
    data = args.data.expanduser().resolve()
    files = {"train": str(data / "sst2" / "train.tsv"), "test": str(data / "sst2" / "dev.tsv")}
    results: dict = {"meta": {**machine_meta(args.quick, "minilm", "cpu"), "reps": args.reps, "epochs": args.epochs,
                              "budget": args.budget, "threads": torch.get_num_threads()}}
    with work_folder(args.workdir, "compression-") as work:
        caches, seconds = extract_caches(files, work, args.limit)
        check_equal_states(caches)
        results["caches"] = {f"{d} {h}": {"bytes": cache_bytes(caches[d, h]), "extract_s": seconds[d, h]}
                             for d, h in caches}
        rows = [[f"{d} {h}", cache_bytes(caches[d, h]) / 2**20,
                 cache_bytes(caches[d, h]) / cache_bytes(caches[d, "none"]), seconds[d, h]] for d, h in caches]
        print_table("Caches (SST-2 train + test, MiniLM, 7 states)", ["cache", "shards MiB", "of none", "extract s"],
                    rows, note="extract s: one run each on a shared machine, indicative only")
        if not args.skip_filters:
            results["filters"] = survey_filters(caches, work, args.reps)
            print_table(f"Filters on {SAMPLE_TOKENS:,} tokens x 7 states x 384 (one core)",
                        ["filter", "dtype", "chunk", "kept", "write MB/s", "read MB/s"],
                        [[r["filter"], r["dtype"], r["chunk_tokens"], r["ratio"], r["write_mb_s"], r["read_mb_s"]]
                         for r in results["filters"]], digits=3)
        lc.use_threads(1)
        for label, budget in (("default budget", None), (f"budget {args.budget >> 20} MiB", args.budget)):
            measured = measure_reads(caches, args.reps, args.epochs, budget)
            results[label] = {f"{d} {h}": times for (d, h), times in measured.items()}
            results[label]["ratios"] = {dtype: ratios(measured, dtype) for dtype in DTYPES}
            tasks = ["read_epoch", "head_epoch", "probe_pooled", "probe_tokens"]
            rows = [[f"{d} {h}", *(statistics.median(measured[d, h][t]) for t in tasks)] for d, h in measured]
            rows += [[f"{dtype} zstd / none", *(results[label]["ratios"][dtype][t] for t in tasks)] for dtype in DTYPES]
            print_table(f"Reads, {label} (seconds; ratios: median of per-rep ratios)",
                        ["cache", "read epoch", "head epoch", "probe pooled", "probe tokens"], rows, digits=3)
    results["meta"]["total_s"] = time.perf_counter() - started
    results["meta"]["loadavg_end"] = loadavg()
    results["figures"] = figures(results)
    write_results(results, args.out)
    return 0


def figures(results: dict) -> dict[str, float]:
    """The run's headline numbers, flat: each compressed cache's bytes over its twin's, and per dtype and budget the
    median zstd / none ratio of each read."""
    caches = results["caches"]
    found = {f"{name.replace(' ', '_')}_bytes_ratio": entry["bytes"] / caches[f"{name.split()[0]} none"]["bytes"]
             for name, entry in caches.items() if name.endswith("zstd")}
    for label in (k for k in results if k.startswith(("default budget", "budget "))):
        for dtype, tasks in results[label]["ratios"].items():
            found.update({f"{label.replace(' ', '_')}_{dtype}_{task}_ratio": ratio for task, ratio in tasks.items()})
    return found


def tables(results: dict) -> dict[str, str]:
    """Markdown tables of a run, for ``render.py``: ``caches`` (bytes kept) and ``reads`` (zstd / none per read)."""
    caches = ["| cache | shards | zstd / none |", "|---|---|---|"]
    for name, entry in results["caches"].items():
        plain = results["caches"][f"{name.split()[0]} none"]["bytes"]
        caches.append(f"| {name} | {entry['bytes'] / 2**20:,.1f} MiB | {entry['bytes'] / plain:.2f} |")
    labels = [k for k in results if k.startswith(("default budget", "budget "))]
    tasks = {"read_epoch": "read epoch", "head_epoch": "head epoch", "probe_pooled": "probe (pooled)",
             "probe_tokens": "probe (token means)"}
    reads = ["| zstd / none | " + " | ".join(f"{what}, {label}" for label in labels for what in ("read epoch",
                                                                                             "head epoch")) + " |",
             "|---|" + "---|" * (2 * len(labels))]
    for dtype in results[labels[0]]["ratios"]:
        reads.append(f"| {dtype} | " + " | ".join(f"{results[label]['ratios'][dtype][task]:.2f}" for label in labels
                                                  for task in ("read_epoch", "head_epoch")) + " |")
    seconds = ["| cache | " + " | ".join(f"{tasks[t]}, {labels[0]}" for t in tasks) + " |", "|---|" + "---|" * 4]
    for name in results["caches"]:
        measured = results[labels[0]][name]
        seconds.append(f"| {name} | " + " | ".join(f"{statistics.median(measured[t]):.2f} s" for t in tasks) + " |")
    return {"caches": "\n".join(caches) + "\n", "reads": "\n".join(reads) + "\n",
            "seconds": "\n".join(seconds) + "\n"}


if __name__ == "__main__":
    raise SystemExit(main())
