"""Extraction benchmarks for layercache on all-MiniLM-L6-v2 (CPU) with SST-2 and AG News, on the public API.

Measures, on real data from ``../shared/data`` (see benchmarks/README.md), what a user can time from outside:

1. overhead  - ``layercache.extraction.extract_loaded`` (the extraction of data and a backbone already loaded by
               ``load_inputs``: the run's loop, with its disk check, dtype probe, shard writes and manifest) over a
               bare forward pass (``Backbone.hidden_states``) of the same planned batches of the same inputs; and
               ``layercache.extract()`` end to end over ``load_inputs`` + that bare forward
2. padding   - padded / real tokens: the batch plan ``load_inputs`` makes (``plan_batches``) vs fixed batches of 32
               in dataset order
3. size      - cache bytes on disk / (tokens x states x hidden x 2), and ``estimate_bytes`` / bytes on disk
4. rss       - peak RSS of an ``extract()`` of 1k and 10k AG News examples, each in a fresh process (the peak is
               sampled every 20 ms, so the peak at half the run's wall time is known too)
5. read      - ``LayerCache`` reads: one layer over all tokens, random batches, shuffled iteration; and a default
               head's epochs from the cache (``LayerHead``: the first, which reads the shards, and the best later)

What the port to the public API dropped, since it cannot be measured from outside the library: the breakdown of
``extract()``'s loop into phases (forward, post-processing, waits for the writer, heap trims, shard appends and
commits), which wrapped private functions, and with it the per-batch-minimum ratio (each batch's fastest loop
iteration inside ``extract()``); the overhead target is now judged on the fastest loop over the fastest bare pass
("min/min"), the figure least moved by other work on the machine. The peak RSS per batch became the peak RSS over
time. The head feed's "mapped" against "copied" reads (a private option of the feed) became a head's epochs.

Run ``python benchmarks/extract.py`` (about 6 minutes on 2 idle CPU cores) or ``--quick`` (about a minute: 100
examples per dataset, one rep, padding on the first 2,000 examples, RSS at 50 and 200). Every run checks what does
not depend on timing, and ``--quick`` fails on it: both passes ran the same batches and tokens, ``extract()`` and
``extract_loaded`` wrote the same examples, tokens and batches, the plan ``load_inputs`` made is ``plan_batches`` of
the examples' costs, the plan pads less than fixed batches of 32 (and at most 1.10x on the full data: a slice fills
its batches less well), every cache's ``estimate_bytes`` is within ``ESTIMATE_TOLERANCE`` (or 64 KiB) of the bytes on
disk it counts, and the reads give back every token and example once. Prints tables and writes JSON (default
``benchmarks/results/extract.json``, ``extract-quick.json`` with ``--quick``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:  # _common.py, when imported from elsewhere
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    DEFAULT_DATA,
    HERE,
    loadavg,
    machine_meta,
    print_table,
    quiet_transformers,
    work_folder,
    write_results,
)

MODEL = "minilm"
DEVICE = "cpu"
BATCH_TOKENS = 8192  # extract() defaults
BATCH_SIZE = 256
NAIVE_BATCH = 32
STORAGE = {"storage_dtype": "auto"}
"""extract()'s storage options for the overhead and size passes (``--storage-dtype``, ``--project``)."""

# name -> (file under the data folder, split name used in the cache)
DATASETS = {
    "sst2": ("sst2/train.tsv", "train"),
    "agnews": ("agnews/dev.tsv", "dev"),
}

TARGETS = {
    "overhead_ratio_max": 1.10,
    "padding_ratio_max": 1.10,
    "rss_ratio_approx": 1.0,
}
ESTIMATE_TOLERANCE = 0.03
"""--quick: ``estimate_bytes`` within 3 % of the bytes on disk it counts: the shards, the manifest and a projection's
basis, not the other side files (``vocab.json``: 0.3 MB for MiniLM, 1 % of a 200-sentence cache); it counts chunk
padding and HDF5 metadata, and the disk check adds 5 % on top."""
ESTIMATE_SLACK_BYTES = 1 << 16
"""... or within 64 KiB, whichever is more: the estimate counts some 30-35 KB less than a shard holds, whatever its
size (measured on MiniLM caches of 100 sentences, float16 to int4 + project 32), which is 4 % of a 1 MB cache."""


def estimate_ok(size: dict) -> bool:
    """Whether ``cache_size``'s estimate is within ``ESTIMATE_TOLERANCE`` (or ``ESTIMATE_SLACK_BYTES``) of what it
    counts on disk."""
    counted = size["bytes_counted"]
    return abs(size["estimate_bytes"] - counted) <= max(ESTIMATE_TOLERANCE * counted, ESTIMATE_SLACK_BYTES)
RSS_SAMPLE_S = 0.02


# --------------------------------------------------------------------------------------------
# small helpers


def proc_status_bytes(key: str) -> int | None:
    """VmHWM / VmRSS of this process from /proc (Linux), in bytes."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def dir_bytes(path: Path) -> tuple[int, int]:
    """(apparent bytes, allocated bytes) of every file under ``path``."""
    apparent = allocated = 0
    for f in Path(path).rglob("*"):
        if f.is_file():
            st = f.stat()
            apparent += st.st_size
            allocated += getattr(st, "st_blocks", 0) * 512
    return apparent, allocated


def mb(n: float) -> float:
    return n / 1e6


def split_files(data: Path, name: str) -> tuple[dict[str, str], str]:
    rel, split = DATASETS[name]
    return {split: str(data / rel)}, split


def batching() -> object:
    """The BatchSpec of every run here: extract()'s defaults on ``DEVICE``."""
    from layercache.extraction import BatchSpec

    return BatchSpec(batch_tokens=BATCH_TOKENS, batch_size=BATCH_SIZE, device=DEVICE)


def storage_spec(storage: dict | None = None) -> object:
    from layercache.extraction import StorageSpec

    return StorageSpec(**{k: v for k, v in (STORAGE if storage is None else storage).items() if v is not None})


def load(files: dict[str, str], limit: int | None, model: str = MODEL, **batch_options) -> tuple[object, float]:
    """``load_inputs`` of ``files`` (first ``limit`` rows): data, backbone, tokenization and batch plan; and its
    wall seconds."""
    import dataclasses

    from layercache.extraction import DataSpec, load_inputs

    t = time.perf_counter()
    inputs = load_inputs(model, DataSpec(dataset=None, split_files=files, limit=limit), storage_spec(),
                         dataclasses.replace(batching(), **batch_options), allow_pickle=False)
    return inputs, time.perf_counter() - t


# --------------------------------------------------------------------------------------------
# 1. extraction overhead


def pad(examples, pad_id: int):
    """(R, W) input ids and attention mask of every window of ``examples``, right-padded (as extraction pads)."""
    import numpy as np
    import torch

    windows = [w for ex in examples for w in ex.windows]
    width = max(len(w) for w in windows)
    ids = np.full((len(windows), width), pad_id, np.int64)
    mask = np.zeros((len(windows), width), np.int64)
    for r, window in enumerate(windows):
        ids[r, :len(window)] = window
        mask[r, :len(window)] = 1
    return torch.from_numpy(ids), torch.from_numpy(mask)


def bare_pass(inputs, split: str, max_batches: int | None = None) -> dict:
    """Only the forward passes: every planned batch of ``split``, padded, through ``Backbone.hidden_states``."""
    backbone, plan = inputs.backbone, inputs.plans[split]
    pad_id = backbone.tokenizer.pad_token_id
    real = padded = 0
    batch_s = []
    t0, c0 = time.perf_counter(), time.process_time()
    for batch in plan.batches[:max_batches]:
        tb = time.perf_counter()
        ids, mask = pad([plan.examples[i] for i in batch], pad_id)
        backbone.hidden_states(ids, mask)
        batch_s.append(time.perf_counter() - tb)
        real += int(mask.sum())
        padded += mask.numel()
    return {"forward_s": time.perf_counter() - t0, "forward_cpu_s": time.process_time() - c0,
            "n_examples": len(plan.examples), "n_batches": len(batch_s), "real_tokens": real,
            "padded_tokens": padded, "batch_s": batch_s}


def warmup(inputs, split: str) -> float:
    """A few forward batches, so one-time kernel setup is not in the first timed pass."""
    t = time.perf_counter()
    bare_pass(inputs, split, max_batches=3)
    return time.perf_counter() - t


def extract_loaded_pass(inputs, out: Path, storage: dict | None = None) -> tuple[dict, object]:
    """``extract_loaded`` of ``inputs`` into ``out``: extraction's loop, with nothing to load."""
    from layercache.extraction import extract_loaded

    t0, c0 = time.perf_counter(), time.process_time()
    result = extract_loaded(inputs, out, storage_spec(storage), batching=batching(), overwrite=True)
    return {"loop_s": time.perf_counter() - t0, "loop_cpu_s": time.process_time() - c0}, result


def extract_pass(files: dict[str, str], limit: int | None, out: Path, storage: dict | None = None,
                 **options) -> tuple[dict, object]:
    """``layercache.extract()`` end to end (data, model, plan, loop), the quality check off (it is not extraction);
    ``options``: more of extract()'s keywords (``device_map``...)."""
    import layercache

    options = {"device": DEVICE, **options}
    t0, c0 = time.perf_counter(), time.process_time()
    result = layercache.extract(MODEL, None, out, split_files=files, limit=limit, progress=False,
                                quality_examples=0, overwrite=True, **{
                                    k: v for k, v in (STORAGE if storage is None else storage).items()
                                    if v is not None}, **options)
    return {"total_s": time.perf_counter() - t0, "total_cpu_s": time.process_time() - c0}, result


def split_counts(result, split: str) -> dict:
    info = result.manifest.splits[split]
    return {"n_examples": info.n_examples, "n_tokens": info.n_tokens, "n_batches": info.n_batches}


def bench_overhead(data: Path, n_examples: int, reps: int, workdir: Path) -> tuple[dict, dict]:
    results, keep_caches = {}, {}
    for name in DATASETS:
        files, split = split_files(data, name)
        inputs, load_s = load(files, n_examples)
        warm = warmup(inputs, split)
        bares, loops, ends = [], [], []
        last_cache = None
        for rep in range(reps):
            kinds = ["bare", "loaded", "end to end"]
            for what in kinds[rep % 3:] + kinds[:rep % 3]:  # rotated: drift falls on every one
                la = loadavg()
                if what == "bare":
                    b = bare_pass(inputs, split)
                    b["loadavg_before"] = la
                    bares.append(b)
                elif what == "loaded":
                    out = workdir / f"overhead-{name}-{rep}"
                    e, result = extract_loaded_pass(inputs, out)
                    e.update(split_counts(result, split), loadavg_before=la)
                    loops.append(e)
                    if last_cache is not None:
                        shutil.rmtree(last_cache, ignore_errors=True)
                    last_cache = out
                else:
                    out = workdir / f"overhead-{name}-e2e"
                    e, result = extract_pass(files, n_examples, out)
                    e.update(split_counts(result, split), loadavg_before=la)
                    ends.append(e)
                    shutil.rmtree(out, ignore_errors=True)
            print(f"  overhead {name} rep {rep + 1}/{reps}: bare forward {bares[-1]['forward_s']:.1f}s, "
                  f"extract loop {loops[-1]['loop_s']:.1f}s, extract() {ends[-1]['total_s']:.1f}s, "
                  f"load avg {loadavg()}", flush=True)
        med = statistics.median
        bare_fwd = med([b["forward_s"] for b in bares])
        loop = med([e["loop_s"] for e in loops])
        end_to_end = med([e["total_s"] for e in ends])
        first = loops[0]
        results[name] = {
            "split": split, "n_examples": first["n_examples"], "real_tokens": first["n_tokens"],
            "n_batches": first["n_batches"], "padded_tokens": bares[0]["padded_tokens"], "reps": reps,
            "same_plan": all(e["n_batches"] == b["n_batches"] and e["n_tokens"] == b["real_tokens"]
                             for e in loops for b in bares),
            "same_cache_end_to_end": all({k: e[k] for k in ("n_examples", "n_tokens", "n_batches")}
                                         == {k: first[k] for k in ("n_examples", "n_tokens", "n_batches")}
                                         for e in ends),
            "load_inputs_s": load_s, "warmup_s": warm,
            "bare_forward_s": bare_fwd, "extract_loop_s": loop, "extract_total_s": end_to_end,
            "ratio_loop": loop / bare_fwd,
            "ratio_loop_per_rep": [e["loop_s"] / b["forward_s"] for e, b in zip(loops, bares)],
            "ratio_loop_min": min(e["loop_s"] for e in loops) / min(b["forward_s"] for b in bares),
            "ratio_loop_cpu": med([e["loop_cpu_s"] for e in loops]) / med([b["forward_cpu_s"] for b in bares]),
            "ratio_end_to_end": end_to_end / (load_s + bare_fwd),
            "bare_tokens_per_s": first["n_tokens"] / bare_fwd, "extract_tokens_per_s": first["n_tokens"] / loop,
            "bare_runs": bares, "extract_loaded_runs": loops, "extract_runs": ends,
        }
        keep_caches[name] = (last_cache, split)
        del inputs
    return {"datasets": results, "caches": {k: str(v[0]) for k, v in keep_caches.items()}}, keep_caches


# --------------------------------------------------------------------------------------------
# 2. padding


def bench_padding(data: Path, limit: int | None) -> dict:
    """Padded / real tokens of the plan ``load_inputs`` makes against fixed batches of 32 (tokenization only)."""
    import numpy as np

    from layercache.extraction import BatchCost, fixed_batches, padded_tokens, plan_batches

    out = {}
    for name in DATASETS:
        files, split = split_files(data, name)
        inputs, load_s = load(files, limit)
        plan = inputs.plans[split]
        costs = [BatchCost(ex.n_rows, ex.width, ex.n_tokens) for ex in plan.examples]
        planned = plan_batches(costs, BATCH_TOKENS, BATCH_SIZE)
        naive = fixed_batches(len(costs), NAIVE_BATCH)
        p_pad, p_real = padded_tokens(plan.batches, costs)
        n_pad, n_real = padded_tokens(naive, costs)
        out[name] = {
            "file": files[split], "limit": limit, "n_examples": len(costs), "real_tokens": p_real,
            "mean_tokens": p_real / len(costs), "max_width": max(c.width for c in costs),
            "n_truncated": plan.n_truncated, "load_inputs_s": load_s,
            "plan_is_plan_batches": len(planned) == len(plan.batches)
            and all(np.array_equal(a, b) for a, b in zip(planned, plan.batches)),
            "length_batched": {"batch_tokens": BATCH_TOKENS, "max_batch_size": BATCH_SIZE,
                               "n_batches": len(plan.batches), "padded_tokens": p_pad, "ratio": p_pad / p_real},
            "fixed_32": {"batch_size": NAIVE_BATCH, "n_batches": len(naive), "padded_tokens": n_pad,
                         "ratio": n_pad / n_real},
        }
        del inputs
    return out


# --------------------------------------------------------------------------------------------
# 3. cache size


def cache_size(path: Path) -> dict:
    from layercache import read_manifest
    from layercache.extraction import estimate_bytes

    manifest = read_manifest(path)
    apparent, allocated = dir_bytes(path)
    states = len(manifest.storage.layers)
    hidden = manifest.hidden_size
    tokens = sum(s.n_tokens for s in manifest.splits.values())
    examples = sum(s.n_examples for s in manifest.splits.values())
    raw = tokens * states * hidden * 2
    shards = sum(len(s.shards) for s in manifest.splits.values())
    estimate = estimate_bytes(manifest)
    # what the estimate counts: shards, manifest and a projection's basis; not vocab.json or a decoder's lens
    counted = apparent - sum(side.bytes for kind, side in manifest.side_files.items() if kind != "projection")
    return {"path": str(path), "n_examples": examples, "tokens": tokens, "states": states, "hidden": hidden,
            "n_shards": shards, "bytes_apparent": apparent, "bytes_allocated": allocated, "raw_state_bytes": raw,
            "shard_bytes": sum(s.bytes_written for s in manifest.splits.values()), "bytes_counted": counted,
            "ratio": apparent / raw, "ratio_allocated": allocated / raw,
            "estimate_bytes": estimate, "estimate_over_actual": estimate / apparent,
            "estimate_over_counted": estimate / counted}


# --------------------------------------------------------------------------------------------
# 4. peak RSS, each extraction in a fresh process


def rss_child(payload: dict) -> dict:
    """Runs in a fresh interpreter: one ``extract()``, its peak RSS sampled every ``RSS_SAMPLE_S`` seconds."""
    import resource

    quiet_transformers()
    import torch  # noqa: F401  (baseline includes the libraries every extraction needs)
    import transformers  # noqa: F401

    import layercache

    baseline = proc_status_bytes("VmRSS")
    samples: list[tuple[float, int | None]] = []  # (seconds since the call, VmHWM)
    stop = threading.Event()
    t0 = time.perf_counter()

    def sample() -> None:
        while not stop.wait(RSS_SAMPLE_S):
            samples.append((time.perf_counter() - t0, proc_status_bytes("VmHWM")))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    result = layercache.extract(MODEL, None, payload["out"], split_files=payload["files"], limit=payload["limit"],
                                device=DEVICE, progress=False, quality_examples=0)
    wall = time.perf_counter() - t0
    stop.set()
    sampler.join()
    info = next(iter(result.manifest.splits.values()))
    half = [hwm for t, hwm in samples if t <= wall / 2]
    return {"limit": payload["limit"], "n_examples": info.n_examples, "n_tokens": info.n_tokens,
            "n_shards": len(info.shards), "extract_s": wall, "tokens_per_s": info.n_tokens / wall,
            "rss_baseline_after_imports": baseline, "peak_rss_vmhwm": proc_status_bytes("VmHWM"),
            "peak_rss_at_half_the_time": half[-1] if half else baseline,
            "rss_end": proc_status_bytes("VmRSS"), "peak_rss_samples": len(samples),
            "ru_maxrss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "torch_threads": __import__("torch").get_num_threads()}


def max_example_tokens(path: Path) -> int:
    from layercache import LayerCache

    cache = LayerCache.open(path)
    try:
        return max(int(cache.lengths(split).max()) for split in cache.splits)
    finally:
        cache.close()


def run_rss_child(files: dict[str, str], limit: int | None, out: Path, env: dict | None = None) -> dict:
    payload = json.dumps({"files": files, "limit": limit, "out": str(out)})
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--_rss-child", payload],
                          capture_output=True, text=True, env={**os.environ, **(env or {})})
    if proc.returncode != 0:
        raise RuntimeError(f"RSS child failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RSS_RESULT ")][-1]
    res = json.loads(line[len("RSS_RESULT "):])
    res["process_wall_s"] = time.perf_counter() - t
    return res


def bench_rss(data: Path, limits: tuple[int, int], workdir: Path) -> dict:
    """Peak RSS at the small and large limit, plus the small size with the large run's longest example.

    The widest batch sets the forward pass's peak (attention is rows x width^2 under a fixed token
    budget), and a longer prefix of a dataset tends to hold a longer longest example; the third run
    (first SMALL-1 rows + the longest of the first LARGE rows) has the same widest batch as the
    large run, so large / that run isolates growth with the number of examples.
    """
    files, split = split_files(data, "agnews")
    small, large = limits
    inputs, _ = load(files, large)
    plan, records = inputs.plans[split], inputs.records.splits[split]
    widest = max(plan.examples, key=lambda ex: ex.n_tokens)
    longest = records.source_index[widest.row]  # the source row, as a line of the (headerless) file
    del inputs
    lines = Path(files[split]).read_text(encoding="utf-8").splitlines(keepends=True)
    widest_file = workdir / f"agnews-{small - 1}-plus-longest.tsv"
    chosen = lines[:small] if longest < small else lines[:small - 1] + [lines[longest]]
    widest_file.write_text("".join(chosen), encoding="utf-8")

    plan = [(f"first {small}", files, small, None),
            (f"first {small - 1} + longest of {large}", {split: str(widest_file)}, None, None),
            (f"first {large}", files, large, None)]
    runs = {}
    for label, run_files, limit, env in plan:
        out = workdir / "rss-run"
        la = loadavg()
        res = run_rss_child(run_files, limit, out, env)
        res["env"] = env or {}
        res["loadavg_before"] = la
        res["file"] = next(iter(run_files.values()))
        res["cache"] = cache_size(out)
        res["longest_example_tokens"] = max_example_tokens(out)
        shutil.rmtree(out, ignore_errors=True)
        runs[label] = res
        print(f"  rss agnews {label}: {res['n_examples']} examples, {res['n_tokens']:,} tokens (longest "
              f"{res['longest_example_tokens']}) in {res['extract_s']:.1f}s, peak RSS "
              f"{mb(res['peak_rss_vmhwm']):.0f} MB, load avg {loadavg()}", flush=True)
    a, w, b = (runs[label] for label, *_ in plan)

    def growth(x):
        return x["peak_rss_vmhwm"] - x["rss_baseline_after_imports"]

    half = b["peak_rss_at_half_the_time"]
    return {
        "dataset": "agnews", "runs": runs, "examples_ratio": b["n_examples"] / a["n_examples"],
        "large_peak_at_half_the_time": half, "large_peak_growth_in_second_half": b["peak_rss_vmhwm"] - half,
        "peak_ratio": b["peak_rss_vmhwm"] / a["peak_rss_vmhwm"],
        "growth_over_baseline_ratio": growth(b) / growth(a),
        "peak_ratio_same_longest": b["peak_rss_vmhwm"] / w["peak_rss_vmhwm"],
        "growth_over_baseline_ratio_same_longest": growth(b) / growth(w),
    }


# --------------------------------------------------------------------------------------------
# 5. read throughput


def timed_loop(fn, min_time: float, min_iters: int = 1) -> tuple[float, int, list]:
    """Call fn() until min_time has passed (at least min_iters times): (seconds, iterations, results)."""
    outs = []
    t0 = time.perf_counter()
    while True:
        outs.append(fn())
        elapsed = time.perf_counter() - t0
        if elapsed >= min_time and len(outs) >= min_iters:
            return elapsed, len(outs), outs


def bench_read(path: Path, split: str, min_time: float, head_epochs: int = 3, seed: int = 0) -> dict:
    import numpy as np

    from layercache import LayerCache, LayerHead

    cache = LayerCache.open(path)
    n = cache.num_examples(split)
    S, D = len(cache.layer_names), cache.hidden_size
    layer = cache.layer_names[-1]
    lengths = cache.lengths(split)

    # (a) one layer across all tokens
    def one_layer():
        return sum(block.shape[0] for block in cache.layer_tokens(split, layer))

    one_layer()  # open handles / offsets once, outside the timing
    dt, iters, outs = timed_loop(one_layer, min_time)
    tokens = sum(outs)
    layer_res = {"layer": layer, "passes": iters, "seconds": dt, "pass_s": dt / iters, "tokens_per_pass": outs[0],
                 "tokens_per_s": tokens / dt, "mb_per_s_stored_fp16": mb(tokens * D * 2) / dt,
                 "mb_per_s_returned_fp32": mb(tokens * D * 4) / dt,
                 "every_token": all(o == int(lengths.sum()) for o in outs)}

    # (b) all layers of 32 random rows
    rng = np.random.default_rng(seed)
    rows_ok = []

    def random_rows():
        rows = rng.choice(n, size=min(32, n), replace=False)
        got = [len(x) for x in cache.tokens(split, rows)]
        rows_ok.append(got == [int(lengths[r]) for r in rows])
        return sum(got)

    dt, iters, outs = timed_loop(random_rows, min_time, min_iters=5)
    rows_res = {"batch_rows": min(32, n), "batches": iters, "seconds": dt, "batch_s": dt / iters,
                "batches_per_s": iters / dt, "tokens_per_s": sum(outs) / dt,
                "mb_per_s_stored_fp16": mb(sum(outs) * S * D * 2) / dt, "lengths_match": all(rows_ok)}

    # (c) shuffled padded minibatches over the whole split
    epoch = [0]
    seen_ok = []

    def shuffled_epoch():
        epoch[0] += 1
        ex = tok = 0
        seen = []
        for batch in cache.iter_batches(split, batch_size=32, shuffle=True, seed=epoch[0]):
            ex += len(batch.rows)
            tok += int(batch.mask.sum())
            seen.extend(int(r) for r in batch.rows)
        seen_ok.append(sorted(seen) == list(range(n)))
        return ex, tok

    dt, iters, outs = timed_loop(shuffled_epoch, min_time)
    ex = sum(o[0] for o in outs)
    tok = sum(o[1] for o in outs)
    iter_res = {"batch_size": 32, "epochs": iters, "seconds": dt, "epoch_s": dt / iters, "examples_per_s": ex / dt,
                "tokens_per_s": tok / dt, "batches_per_s": (ex / 32) / dt, "every_example_once": all(seen_ok)}

    # (d) a default head's epochs from the cache: the first reads the shards, later ones find them in memory
    head = LayerHead(epochs=head_epochs, patience=head_epochs, seed=seed, progress=False).fit(cache, split)
    seconds = [e.seconds for e in head.history_.epochs]
    head_res = {"epochs": len(seconds), "epoch_s": seconds, "first_epoch_s": seconds[0],
                "later_epoch_s": min(seconds[1:]) if len(seconds) > 1 else None}
    cache.close()
    return {"path": str(path), "split": split, "n_examples": n, "states": S, "hidden": D,
            "layer_tokens": layer_res, "tokens_random_32": rows_res, "iter_batches_shuffled": iter_res,
            "head_epochs": head_res}


# --------------------------------------------------------------------------------------------
# main


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small smoke run (about a minute) with checks")
    p.add_argument("--out", type=Path, default=None,
                   help="JSON output (default: benchmarks/results/extract.json, extract-quick.json with --quick)")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA,
                   help=f"folder with sst2/ and agnews/ (default: {DEFAULT_DATA})")
    p.add_argument("--examples", type=int, default=None,
                   help="examples per dataset for the overhead benchmark (default 2000; --quick 100)")
    p.add_argument("--reps", type=int, default=None,
                   help="repetitions of bare/loop/end-to-end triples (default 3; --quick 1)")
    p.add_argument("--read-seconds", type=float, default=None,
                   help="minimum seconds per read measurement (default 5; --quick 0.3)")
    p.add_argument("--padding-limit", type=int, default=None,
                   help="first N examples of each dataset for the padding benchmark (default: all; --quick 2000)")
    p.add_argument("--rss-limits", type=int, nargs=2, default=None, metavar=("SMALL", "LARGE"),
                   help="AG News examples for the two RSS runs (default 1000 10000; --quick 50 200)")
    p.add_argument("--only", nargs="+", choices=["overhead", "padding", "size", "rss", "read"], default=None,
                   help="run only these benchmarks (size and read need overhead's caches)")
    p.add_argument("--workdir", type=Path, default=None, help="where temporary caches go (default: a temp dir)")
    p.add_argument("--storage-dtype", default="auto", help="extract()'s storage dtype (e.g. float16, int8)")
    p.add_argument("--project", type=int, default=None, help="extract()'s --project K")
    p.add_argument("--_rss-child", dest="rss_child", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def check_data(data: Path) -> None:
    missing = [str(data / rel) for rel, _ in DATASETS.values() if not (data / rel).is_file()]
    if missing:
        sys.exit(f"benchmarks/extract.py: benchmark data not found: {', '.join(missing)}.\n"
                 f"It reads SST-2 and AG News from {data} (the shared data folder next to the repository); "
                 "pass --data FOLDER holding sst2/train.tsv and agnews/dev.tsv.")


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.rss_child is not None:
        res = rss_child(json.loads(args.rss_child))
        print("RSS_RESULT " + json.dumps(res), flush=True)
        return 0

    STORAGE.update(storage_dtype=args.storage_dtype, project=args.project)
    data = args.data.expanduser().resolve()
    check_data(data)
    quick = args.quick
    n_examples = args.examples or (100 if quick else 2000)
    reps = args.reps or (1 if quick else 3)
    read_s = args.read_seconds or (0.3 if quick else 5.0)
    padding_limit = args.padding_limit or (2000 if quick else None)
    rss_limits = tuple(args.rss_limits or ((50, 200) if quick else (1000, 10000)))
    only = set(args.only or ["overhead", "padding", "size", "rss", "read"])
    if only & {"size", "read"}:
        only.add("overhead")
    out_json = args.out or (HERE / "results" / ("extract-quick.json" if quick else "extract.json"))

    quiet_transformers()
    import torch

    import layercache
    from layercache import load_backbone

    t_start = time.perf_counter()
    with work_folder(args.workdir, "layercache-bench-") as workdir:
        meta = {
            **machine_meta(quick, MODEL, DEVICE), "data": str(data), "overhead_examples": n_examples, "reps": reps,
            "read_min_seconds": read_s, "padding_limit": padding_limit, "rss_limits": list(rss_limits),
            "storage": dict(STORAGE),
            "note": "2 CPU cores shared with other work (tests may run concurrently); load averages are recorded "
                    "next to each measurement. Read benchmarks run right after writing, so the page cache is warm.",
        }
        print(f"layercache {layercache.__version__} extraction benchmark ({'quick' if quick else 'full'}): "
              f"{MODEL} on {DEVICE}, torch {torch.__version__}, {torch.get_num_threads()} torch threads, "
              f"{os.cpu_count()} CPU cores (shared with other work: tests may be running), "
              f"load avg {loadavg()}", flush=True)
        results: dict = {"meta": meta, "targets": TARGETS}

        t = time.perf_counter()
        backbone = load_backbone(MODEL, device=DEVICE)  # imports and the page cache warm before any timing
        meta["model_load_s"] = time.perf_counter() - t
        meta.update(n_states=backbone.n_layers + 1, hidden=backbone.hidden_size, max_length=backbone.max_length)
        del backbone

        caches = {}
        if "overhead" in only:
            print(f"\n[1/5] extraction overhead: {n_examples} examples per dataset, {reps} rep(s)", flush=True)
            t = time.perf_counter()
            overhead, caches = bench_overhead(data, n_examples, reps, workdir)
            overhead["seconds"] = time.perf_counter() - t
            results["overhead"] = overhead
        if "padding" in only:
            print("\n[2/5] padding (tokenization only)", flush=True)
            t = time.perf_counter()
            results["padding"] = bench_padding(data, padding_limit)
            results["padding"]["seconds"] = time.perf_counter() - t
        if "size" in only:
            results["cache_size"] = {name: cache_size(path) for name, (path, _) in caches.items()}
        if "rss" in only:
            print(f"\n[4/5] peak RSS: agnews at {rss_limits[0]} and {rss_limits[1]} examples, fresh processes",
                  flush=True)
            t = time.perf_counter()
            results["rss"] = bench_rss(data, rss_limits, workdir)
            results["rss"]["seconds"] = time.perf_counter() - t
        if "read" in only:
            print(f"\n[5/5] read throughput ({read_s:g}s minimum per measurement)", flush=True)
            t = time.perf_counter()
            results["read"] = {name: bench_read(path, split, read_s) for name, (path, split) in caches.items()}
            results["read"]["seconds"] = time.perf_counter() - t

        meta["loadavg_end"] = loadavg()
        meta["total_s"] = time.perf_counter() - t_start

    report(results)
    results["figures"] = figures(results)
    # for compare.py: an estimate over the actual size is best at 1, not lower
    results["figure_directions"] = {k: "either" for k in results["figures"] if "_estimate" in k}
    failures = quick_checks(results) if quick else []
    results["quick_failures"] = failures
    write_results(results, out_json)
    if failures:
        raise AssertionError("--quick: " + "; ".join(failures))
    return 0


def figures(results: dict) -> dict[str, float]:
    """The headline figures, flat, for ``benchmarks/compare.py``: times end in ``_s``, ratios in ``_ratio``."""
    out: dict[str, float] = {"total_s": results["meta"]["total_s"]}
    for name, r in results.get("overhead", {}).get("datasets", {}).items():
        out.update({f"{name}_bare_forward_s": r["bare_forward_s"], f"{name}_extract_loop_s": r["extract_loop_s"],
                    f"{name}_extract_total_s": r["extract_total_s"], f"{name}_loop_ratio": r["ratio_loop"],
                    f"{name}_loop_min_ratio": r["ratio_loop_min"], f"{name}_loop_cpu_ratio": r["ratio_loop_cpu"],
                    f"{name}_end_to_end_ratio": r["ratio_end_to_end"]})
    for name, r in results.get("padding", {}).items():
        if isinstance(r, dict):
            out[f"{name}_padding_ratio"] = r["length_batched"]["ratio"]
            out[f"{name}_fixed_32_padding_ratio"] = r["fixed_32"]["ratio"]
    for name, c in results.get("cache_size", {}).items():
        out[f"{name}_size_ratio"] = c["ratio"]
        out[f"{name}_estimate_ratio"] = c["estimate_over_actual"]
        out[f"{name}_estimate_counted_ratio"] = c["estimate_over_counted"]
    if "rss" in results:
        r = results["rss"]
        out.update({"rss_peak_ratio": r["peak_ratio"], "rss_peak_same_longest_ratio": r["peak_ratio_same_longest"]})
        for label, run in r["runs"].items():
            out[f"rss_{label.replace(' ', '_')}_peak_mib"] = run["peak_rss_vmhwm"] / 2**20
    for name, r in results.get("read", {}).items():
        if isinstance(r, dict):
            out.update({f"{name}_read_layer_pass_s": r["layer_tokens"]["pass_s"],
                        f"{name}_read_random_32_s": r["tokens_random_32"]["batch_s"],
                        f"{name}_read_shuffled_epoch_s": r["iter_batches_shuffled"]["epoch_s"],
                        f"{name}_head_first_epoch_s": r["head_epochs"]["first_epoch_s"]})
            if r["head_epochs"]["later_epoch_s"] is not None:
                out[f"{name}_head_later_epoch_s"] = r["head_epochs"]["later_epoch_s"]
    return out


def quick_checks(results: dict) -> list[str]:
    """What --quick asserts (nothing that depends on timing); the failures, as sentences."""
    failures = []
    for name, r in results.get("overhead", {}).get("datasets", {}).items():
        if not r["same_plan"]:
            failures.append(f"overhead {name}: extract_loaded and the bare pass ran different batches or tokens")
        if not r["same_cache_end_to_end"]:
            failures.append(f"overhead {name}: extract() and extract_loaded wrote different examples, tokens or "
                            "batches")
    for name, r in results.get("padding", {}).items():
        if not isinstance(r, dict):
            continue
        planned, fixed = r["length_batched"]["ratio"], r["fixed_32"]["ratio"]
        if not r["plan_is_plan_batches"]:
            failures.append(f"padding {name}: the plan load_inputs made is not plan_batches of the examples' costs")
        if not planned < fixed:
            failures.append(f"padding {name}: the plan pads {planned:.3f}x, not less than fixed batches' {fixed:.3f}x")
        if r["limit"] is None and not planned <= TARGETS["padding_ratio_max"]:  # a slice fills fewer batches
            failures.append(f"padding {name}: the plan pads {planned:.3f}x of the full data (target "
                            f"<= {TARGETS['padding_ratio_max']})")
    sizes = dict(results.get("cache_size", {}))
    for label, run in results.get("rss", {}).get("runs", {}).items():
        sizes[f"agnews {label} (rss)"] = run["cache"]
        if run["n_examples"] != (run["limit"] or run["n_examples"]):
            failures.append(f"rss {label}: {run['n_examples']} examples extracted, {run['limit']} asked")
    for name, c in sizes.items():
        if not estimate_ok(c):
            failures.append(f"size {name}: estimate_bytes is {c['estimate_over_counted']:.3f}x the bytes on disk it "
                            f"counts (tolerance {ESTIMATE_TOLERANCE} or {ESTIMATE_SLACK_BYTES:,} bytes)")
    for name, r in results.get("read", {}).items():
        if not isinstance(r, dict):
            continue
        if not r["layer_tokens"]["every_token"]:
            failures.append(f"read {name}: layer_tokens did not give every token of the split")
        if not r["tokens_random_32"]["lengths_match"]:
            failures.append(f"read {name}: tokens() of random rows did not match the cache's lengths")
        if not r["iter_batches_shuffled"]["every_example_once"]:
            failures.append(f"read {name}: a shuffled epoch did not give every example once")
    return failures


def report(results: dict) -> None:
    meta = results["meta"]
    print("\n" + "=" * 100)
    print(f"Results: {meta['model']} ({meta.get('n_states')} states x {meta.get('hidden')}), {meta['device']}, "
          f"{meta['torch_threads']} torch threads, {meta['cpu_count']} shared CPU cores, "
          f"load avg start {meta['loadavg_start']} end {meta['loadavg_end']}")

    if "overhead" in results:
        rows = []
        for name, r in results["overhead"]["datasets"].items():
            ratio = r["ratio_loop_min"]
            ok = "PASS" if ratio <= TARGETS["overhead_ratio_max"] else "FAIL"
            rows.append([name, r["n_examples"], r["real_tokens"], r["n_batches"], r["bare_forward_s"],
                         r["extract_loop_s"], ratio, r["ratio_loop"], r["ratio_loop_cpu"], r["load_inputs_s"],
                         r["extract_total_s"], r["ratio_end_to_end"], r["bare_tokens_per_s"],
                         r["extract_tokens_per_s"], ok])
        print_table(
            "1. Extraction overhead (target: min/min ratio <= 1.10)",
            ["dataset", "examples", "tokens", "batches", "bare fwd s", "extract loop s", "min/min",
             "ratio loop", "cpu ratio", "load_inputs s", "extract() s", "ratio e2e", "bare tok/s", "extract tok/s",
             "target"], rows,
            note="extract loop = extract_loaded(inputs loaded by load_inputs): extraction with nothing to load "
                 "(disk check, dtype probe, forward passes, shard writes, manifest)\n"
                 "bare fwd = padding + Backbone.hidden_states over the same planned batches of the same inputs\n"
                 "ratio loop = medians' ratio; min/min = fastest loop / fastest bare pass; cpu ratio = the "
                 "medians in process CPU time (all threads)\n"
                 "ratio e2e = extract() wall (data, model, plan, loop) / (load_inputs + bare forward)\n"
                 "Same plan on both sides (checked: batch and token counts match).")
        for name, r in results["overhead"]["datasets"].items():
            print(f"   {name}: per-rep loop ratios {', '.join(f'{x:.3f}' for x in r['ratio_loop_per_rep'])}")

    if "padding" in results:
        rows = []
        for name, r in results["padding"].items():
            if not isinstance(r, dict):
                continue
            lb, fx = r["length_batched"], r["fixed_32"]
            ok = "PASS" if lb["ratio"] <= TARGETS["padding_ratio_max"] else "FAIL"
            rows.append([name, r["n_examples"], r["real_tokens"], r["mean_tokens"], r["max_width"], lb["n_batches"],
                         lb["padded_tokens"], lb["ratio"], fx["n_batches"], fx["padded_tokens"], fx["ratio"], ok])
        limit = next((r["limit"] for r in results["padding"].values() if isinstance(r, dict)), None)
        which = f"first {limit:,} examples" if limit else "full sst2 train, full agnews dev"
        print_table(f"2. Padding: padded / real tokens ({which}; target length-batched <= 1.10)",
                    ["dataset", "examples", "real tokens", "mean len", "max len", "plan batches", "plan padded",
                     "plan ratio", "fixed-32 batches", "fixed-32 padded", "fixed-32 ratio", "target"], rows,
                    note=f"plan = load_inputs' plan, plan_batches(budget {BATCH_TOKENS} padded tokens, <= "
                         f"{BATCH_SIZE} rows); fixed-32 = fixed_batches(n, {NAIVE_BATCH}) in dataset order.")

    sizes = dict(results.get("cache_size", {}))
    if "rss" in results:
        for label, run in results["rss"]["runs"].items():
            sizes[f"agnews {label} (rss)"] = run["cache"]
    if sizes:
        rows = [[name, c["n_examples"], c["tokens"], c["n_shards"], mb(c["raw_state_bytes"]), mb(c["bytes_apparent"]),
                 c["ratio"], c["ratio_allocated"], c["estimate_over_actual"], c["estimate_over_counted"]]
                for name, c in sizes.items()]
        print_table("3. Cache size on disk (all states stored as tokens, mean pooled)",
                    ["cache", "examples", "tokens", "shards", "raw MB", "on disk MB", "ratio", "ratio (blocks)",
                     "estimate/actual", "estimate/counted"], rows,
                    note="raw = tokens x states x hidden x 2 bytes; the rest is pooled means, input/word ids, "
                         "offsets, labels, stats, HDF5 metadata.\nestimate/actual = estimate_bytes(manifest) / "
                         "bytes on disk (the disk-space check's accuracy); estimate/counted: over what it counts "
                         "(every file less vocab.json and a lens).")

    if "rss" in results:
        r = results["rss"]
        rows = [[f"agnews {k}", v["n_examples"], v["n_tokens"], v["longest_example_tokens"], v["extract_s"],
                 v["tokens_per_s"], mb(v["rss_baseline_after_imports"]), mb(v["peak_rss_vmhwm"]), mb(v["ru_maxrss"])]
                for k, v in r["runs"].items()]
        print_table("4. Peak RSS of one extraction in a fresh process (target: ratio ~1)",
                    ["run", "examples", "tokens", "longest", "extract s", "tok/s", "RSS after imports MB",
                     "peak RSS MB", "ru_maxrss MB"], rows,
                    note=f"large / small: peak ratio {r['peak_ratio']:.3f} for {r['examples_ratio']:.1f}x the "
                         f"examples (growth over the RSS after imports: {r['growth_over_baseline_ratio']:.3f})\n"
                         f"large / small-with-the-same-longest-example: peak ratio "
                         f"{r['peak_ratio_same_longest']:.3f} (growth over imports: "
                         f"{r['growth_over_baseline_ratio_same_longest']:.3f})\n"
                         f"within the large run: peak {mb(r['large_peak_at_half_the_time']):.0f} MB at half its wall "
                         f"time, +{mb(r['large_peak_growth_in_second_half']):.0f} MB over the second half\n"
                         "peak RSS = VmHWM of the child (its own address space); ru_maxrss can carry the parent's "
                         "RSS across fork+exec, so it is shown for reference only.")

    if "read" in results:
        rows = []
        for name, r in results["read"].items():
            if not isinstance(r, dict):
                continue
            a, b, c = r["layer_tokens"], r["tokens_random_32"], r["iter_batches_shuffled"]
            rows.append([name, r["n_examples"], a["tokens_per_pass"], a["tokens_per_s"], a["mb_per_s_stored_fp16"],
                         b["batches_per_s"], b["tokens_per_s"], c["examples_per_s"], c["tokens_per_s"]])
        print_table("5. Read throughput from the written cache (warm page cache)",
                    ["cache", "examples", "tokens", "(a) layer tok/s", "(a) MB/s fp16", "(b) batch/s",
                     "(b) tok/s", "(c) ex/s", "(c) tok/s"], rows,
                    note="(a) layer_tokens(split, last layer) over all tokens; MB/s of stored fp16 bytes.\n"
                         "(b) tokens(split, 32 random rows), all states.  (c) iter_batches(shuffle=True, "
                         "batch_size=32), all states, padded float32 torch batches.")
        rows = [[name, r["head_epochs"]["epochs"], r["head_epochs"]["first_epoch_s"],
                 r["head_epochs"]["later_epoch_s"]]
                for name, r in results["read"].items() if isinstance(r, dict)]
        if rows:
            print_table("6. A default head's epochs from the cache (LayerHead, batch 32, warm page cache)",
                        ["cache", "epochs", "first epoch s", "best later epoch s"], rows)


if __name__ == "__main__":
    sys.exit(main())
