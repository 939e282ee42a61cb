"""Extraction benchmarks for layercache on all-MiniLM-L6-v2 (CPU) with SST-2 and AG News.

Measures, on real data from ``../shared/data`` (see benchmarks/README.md):

1. overhead  - wall time of ``layercache.extract`` / a bare forward pass over the same planned batches
2. padding   - padded / real tokens: length-bucketed ``plan_batches`` vs fixed batches of 32 in dataset order
3. size      - cache bytes on disk / (tokens x states x hidden x 2)
4. rss       - peak RSS of an extraction of 1k and 10k AG News examples, each in a fresh process
5. read      - LayerCache read throughput: one layer over all tokens, random batches, shuffled iteration

Run ``python benchmarks/extract.py`` (about 6 minutes on 2 idle CPU cores) or ``--quick`` (about 1 minute).
Prints tables and writes JSON (default ``benchmarks/results/extract.json``, ``extract-quick.json``
with ``--quick``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
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


# --------------------------------------------------------------------------------------------
# 1. extraction overhead


class PhaseTimer:
    """Time the phases of one ``extract()`` call by wrapping (not replacing) the functions it calls.

    Each wrapper adds two ``perf_counter`` calls; the code that runs is the library's own.
    ``ShardWriter.append`` / ``commit`` run inside the writer's jobs: inline on a machine with no
    spare core (then they are part of the "writing shards" phase), or on the writer thread,
    overlapped with the forward passes (then that phase is only the main thread's waiting). Their
    own times are reported beside the breakdown, not inside it.
    Process CPU times of a phase include every thread's CPU during it.
    """

    def __init__(self):
        self.times: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self.starts: list[tuple[str, float]] = []
        """(key, perf_counter) at each start of the phases in MARKED, in call order."""
        self._restore: list[tuple[object, str, object]] = []

    MARKED = ("run_batch", "split_stats")

    def iteration_seconds(self) -> list[float]:
        """Wall time of each loop iteration: from one batch's ``run_batch`` to the next one's.

        The last batch of a split runs until ``_split_stats`` starts, so it includes the
        split's final shard commit. One entry per batch, in plan order.
        """
        out = []
        for (key, t), (_, t_next) in zip(self.starts, self.starts[1:]):
            if key == "run_batch":
                out.append(t_next - t)
        return out

    def _add(self, key: str, dt: float, dc: float = 0.0) -> None:
        self.times[key] = self.times.get(key, 0.0) + dt
        self.cpu[key] = self.cpu.get(key, 0.0) + dc
        self.calls[key] = self.calls.get(key, 0) + 1

    def _wrap(self, owner, attr: str, key: str, post=None) -> None:
        original = getattr(owner, attr)

        def wrapper(*args, **kwargs):
            t, c = time.perf_counter(), time.process_time()
            if key in self.MARKED:
                self.starts.append((key, t))
            try:
                out = original(*args, **kwargs)
            finally:
                self._add(key, time.perf_counter() - t, time.process_time() - c)
            return post(out) if post else out

        self._restore.append((owner, attr, original))
        setattr(owner, attr, wrapper)

    def _wrap_backbone(self, backbone):
        original = backbone.hidden_states

        def hidden_states(*args, **kwargs):
            t, c = time.perf_counter(), time.process_time()
            try:
                return original(*args, **kwargs)
            finally:
                self._add("forward", time.perf_counter() - t, time.process_time() - c)

        backbone.hidden_states = hidden_states  # instance attribute: this backbone only
        return backbone

    def __enter__(self):
        import layercache.extraction.background as background_mod
        import layercache.extraction.job as job_mod
        import layercache.extraction.memory as memory_mod
        import layercache.extraction.shards as shards_mod
        import layercache.extraction.steps as steps_mod
        import layercache.store.writer as writer_mod

        self._wrap(job_mod, "load_dataset_records", "load_data")
        self._wrap(job_mod, "load_backbone", "load_model", post=self._wrap_backbone)
        self._wrap(job_mod, "plan_split", "tokenize_plan")
        self._wrap(job_mod, "check_disk", "check_disk")
        self._wrap(job_mod, "write_manifest", "write_manifest")
        self._wrap(steps_mod, "run_batch", "run_batch")
        self._wrap(steps_mod, "write_manifest", "write_manifest")
        self._wrap(steps_mod, "merge_parts", "write_manifest")
        self._wrap(steps_mod, "split_stats", "split_stats")
        self._wrap(memory_mod.HeapTrimmer, "batch_done", "heap_trim")
        # main thread waiting for the writer thread: a free buffer, room in its queue, the split's last jobs
        self._wrap(background_mod.BufferPool, "take", "wait_writer")
        self._wrap(background_mod.BackgroundWriter, "submit", "wait_writer")
        self._wrap(background_mod.BackgroundWriter, "__exit__", "wait_writer")
        # on the writer thread: the writer's manifest part after each committed shard
        self._wrap(shards_mod, "write_part", "writer_manifest")
        self._wrap(writer_mod.ShardWriter, "append", "shard_append")
        self._wrap(writer_mod.ShardWriter, "commit", "shard_commit")
        return self

    def __exit__(self, *exc):
        for owner, attr, original in reversed(self._restore):
            setattr(owner, attr, original)
        self._restore.clear()


def bare_pass(backbone, files: dict[str, str], split: str, limit: int | None) -> dict:
    """Load + tokenize + plan exactly as extract() does, then only pad_windows + hidden_states."""
    from layercache.extraction.batching import BatchCost, plan_batches
    from layercache.extraction.forward import pad_windows
    from layercache.extraction.tokenize import encode_split
    from layercache.sources.datasets import load_dataset_records

    t0, c0 = time.perf_counter(), time.process_time()
    records = load_dataset_records(None, split_files=files, limit=limit)
    t1 = time.perf_counter()
    examples = list(encode_split(backbone.tokenizer, records.splits[split], max_length=backbone.max_length,
                                 stride=None, causal=backbone.is_causal))
    costs = [BatchCost(ex.n_rows, ex.width, ex.n_tokens) for ex in examples]
    batches = plan_batches(costs, BATCH_TOKENS, BATCH_SIZE)
    t2, c2 = time.perf_counter(), time.process_time()
    pad_id = backbone.tokenizer.pad_token_id
    real = padded = 0
    batch_s = []
    for batch in batches:
        tb = time.perf_counter()
        ids, mask = pad_windows([examples[i] for i in batch], pad_id)
        backbone.hidden_states(ids, mask)
        batch_s.append(time.perf_counter() - tb)
        real += int(mask.sum())
        padded += mask.numel()
    t3, c3 = time.perf_counter(), time.process_time()
    return {"load_data_s": t1 - t0, "tokenize_plan_s": t2 - t1, "forward_s": t3 - t2, "total_s": t3 - t0,
            "forward_cpu_s": c3 - c2, "total_cpu_s": c3 - c0, "n_examples": len(examples), "n_batches": len(batches),
            "real_tokens": real, "padded_tokens": padded, "batch_s": batch_s}


def extract_pass(files: dict[str, str], limit: int | None, out: Path) -> tuple[dict, object]:
    from layercache import extract

    with PhaseTimer() as pt:
        t0, c0 = time.perf_counter(), time.process_time()
        result = extract(MODEL, None, out, split_files=files, limit=limit, device=DEVICE, progress=False, **STORAGE)
        t1, c1 = time.perf_counter(), time.process_time()
    phases = dict(pt.times)
    setup_keys = ("load_data", "load_model", "tokenize_plan")
    setup = sum(phases.get(k, 0.0) for k in setup_keys)
    setup_cpu = sum(pt.cpu.get(k, 0.0) for k in setup_keys)
    total = t1 - t0
    out_d = {"total_s": total, "total_cpu_s": c1 - c0, "phases_s": phases, "phases_cpu_s": dict(pt.cpu),
             "phase_calls": dict(pt.calls), "setup_s": setup, "loop_s": total - setup,
             "loop_cpu_s": (c1 - c0) - setup_cpu, "iteration_s": pt.iteration_seconds(),
             "minus_model_load_s": total - phases.get("load_model", 0.0)}
    return out_d, result


def bench_overhead(backbone, data: Path, n_examples: int, reps: int, workdir: Path) -> dict:
    from layercache.extraction.forward import pad_windows

    results = {}
    keep_caches = {}
    for name in DATASETS:
        files, split = split_files(data, name)
        # Warm-up: a few forward batches so one-time kernel setup is not in the first timed pass.
        warm = bare_pass_warmup(backbone, files, split, pad_windows)
        bares, extracts = [], []
        last_cache = None
        for rep in range(reps):
            order = ("bare", "extract") if rep % 2 == 0 else ("extract", "bare")
            for what in order:
                la = loadavg()
                if what == "bare":
                    b = bare_pass(backbone, files, split, n_examples)
                    b["loadavg_before"] = la
                    bares.append(b)
                else:
                    out = workdir / f"overhead-{name}-{rep}"
                    e, result = extract_pass(files, n_examples, out)
                    e["loadavg_before"] = la
                    info = result.manifest.splits[split]
                    e["n_examples"], e["n_tokens"], e["n_batches"] = info.n_examples, info.n_tokens, info.n_batches
                    extracts.append(e)
                    if last_cache is not None:
                        shutil.rmtree(last_cache, ignore_errors=True)
                    last_cache = out
            print(f"  overhead {name} rep {rep + 1}/{reps}: bare forward {bares[-1]['forward_s']:.1f}s, "
                  f"extract loop {extracts[-1]['loop_s']:.1f}s (total {extracts[-1]['total_s']:.1f}s), "
                  f"load avg {loadavg()}", flush=True)
        same_plan = all(e["n_batches"] == bares[0]["n_batches"] and e["n_tokens"] == bares[0]["real_tokens"]
                        for e in extracts)
        med = statistics.median
        bare_fwd = med([b["forward_s"] for b in bares])
        bare_total = med([b["total_s"] for b in bares])
        loop = med([e["loop_s"] for e in extracts])
        minus_load = med([e["minus_model_load_s"] for e in extracts])
        inner_fwd = med([e["phases_s"].get("forward", 0.0) for e in extracts])
        per_rep_loop_ratio = [e["loop_s"] / b["forward_s"] for e, b in zip(extracts, bares)]
        # Per batch, the fastest of the reps on each side: interference from other work on the machine
        # only ever slows a batch down, so the minimum is the best estimate of what each batch costs.
        bare_batch_min = [min(x) for x in zip(*(b["batch_s"] for b in bares))]
        extract_batch_min = [min(x) for x in zip(*(e["iteration_s"] for e in extracts))]
        per_batch_ok = len(bare_batch_min) == len(extract_batch_min) == bares[0]["n_batches"]
        # Where extract's loop time goes (medians over reps).
        keys = ["forward", "run_batch", "wait_writer", "heap_trim", "split_stats", "write_manifest", "check_disk",
                "shard_append", "shard_commit", "writer_manifest"]
        mid = sorted(extracts, key=lambda e: e["loop_s"])[len(extracts) // 2]  # the median rep, so parts add up
        ph = {k: mid["phases_s"].get(k, 0.0) for k in keys}
        breakdown = {
            "forward (model)": ph["forward"],
            "run_batch minus forward (pad, gather, pool, stats, cast)": ph["run_batch"] - ph["forward"],
            "writing shards (inline writer), or waiting for the writer thread": ph["wait_writer"],
            "heap trims (malloc_trim)": ph["heap_trim"],
            "_split_stats + write_manifest + _check_disk":
                ph["split_stats"] + ph["write_manifest"] + ph["check_disk"],
        }
        breakdown["other (loop bookkeeping, progress, manifest build)"] = mid["loop_s"] - sum(breakdown.values())
        writer_thread = {
            "ShardWriter.append (HDF5 writes)": ph["shard_append"],  # on the writer thread, when there is one
            "ShardWriter.commit (close, fsync + checksum)": ph["shard_commit"],
            "manifest writes after commits": ph["writer_manifest"],
        }
        results[name] = {
            "split": split, "n_examples": extracts[0]["n_examples"], "real_tokens": extracts[0]["n_tokens"],
            "n_batches": extracts[0]["n_batches"], "padded_tokens": bares[0]["padded_tokens"],
            "same_plan": same_plan, "reps": reps, "warmup_s": warm,
            "bare_forward_s": bare_fwd, "bare_total_s": bare_total,
            "extract_loop_s": loop, "extract_minus_model_load_s": minus_load,
            "extract_forward_inside_s": inner_fwd,
            "ratio_loop": loop / bare_fwd,
            "ratio_loop_per_rep": per_rep_loop_ratio,
            "ratio_loop_min": min(e["loop_s"] for e in extracts) / min(b["forward_s"] for b in bares),
            "ratio_batch_min": sum(extract_batch_min) / sum(bare_batch_min) if per_batch_ok else None,
            "bare_batch_min_s": bare_batch_min, "extract_batch_min_s": extract_batch_min,
            "ratio_loop_cpu": med([e["loop_cpu_s"] for e in extracts]) / med([b["forward_cpu_s"] for b in bares]),
            "ratio_end_to_end": minus_load / bare_total,
            "ratio_loop_vs_own_forward": loop / inner_fwd if inner_fwd else None,
            "bare_tokens_per_s": extracts[0]["n_tokens"] / bare_fwd,
            "extract_tokens_per_s": extracts[0]["n_tokens"] / loop,
            "breakdown_s": breakdown, "breakdown_rep_loop_s": mid["loop_s"], "writer_thread_s": writer_thread,
            "bare_runs": bares, "extract_runs": extracts,
        }
        keep_caches[name] = (last_cache, split)
    return {"datasets": results, "caches": {k: str(v[0]) for k, v in keep_caches.items()}}, keep_caches


def bare_pass_warmup(backbone, files, split, pad_windows) -> float:
    from layercache.extraction.batching import BatchCost, plan_batches
    from layercache.extraction.tokenize import encode_split
    from layercache.sources.datasets import load_dataset_records

    t = time.perf_counter()
    records = load_dataset_records(None, split_files=files, limit=256)
    examples = list(encode_split(backbone.tokenizer, records.splits[split], max_length=backbone.max_length,
                                 stride=None, causal=backbone.is_causal))
    costs = [BatchCost(ex.n_rows, ex.width, ex.n_tokens) for ex in examples]
    for batch in plan_batches(costs, BATCH_TOKENS, BATCH_SIZE)[:3]:
        ids, mask = pad_windows([examples[i] for i in batch], backbone.tokenizer.pad_token_id)
        backbone.hidden_states(ids, mask)
    return time.perf_counter() - t


# --------------------------------------------------------------------------------------------
# 2. padding


def bench_padding(backbone, data: Path) -> dict:
    from layercache.extraction.batching import BatchCost, fixed_batches, padded_tokens, plan_batches
    from layercache.extraction.tokenize import encode_split
    from layercache.sources.datasets import load_dataset_records

    out = {}
    for name in DATASETS:
        files, split = split_files(data, name)
        t = time.perf_counter()
        records = load_dataset_records(None, split_files=files)
        examples = list(encode_split(backbone.tokenizer, records.splits[split], max_length=backbone.max_length,
                                     stride=None, causal=backbone.is_causal))
        tok_s = time.perf_counter() - t
        costs = [BatchCost(ex.n_rows, ex.width, ex.n_tokens) for ex in examples]
        planned = plan_batches(costs, BATCH_TOKENS, BATCH_SIZE)
        naive = fixed_batches(len(costs), NAIVE_BATCH)
        p_pad, p_real = padded_tokens(planned, costs)
        n_pad, n_real = padded_tokens(naive, costs)
        out[name] = {
            "file": files[split], "n_examples": len(examples), "real_tokens": p_real,
            "mean_tokens": p_real / len(examples), "max_width": max(c.width for c in costs),
            "n_truncated": sum(ex.truncated for ex in examples), "load_tokenize_s": tok_s,
            "length_batched": {"batch_tokens": BATCH_TOKENS, "max_batch_size": BATCH_SIZE,
                               "n_batches": len(planned), "padded_tokens": p_pad, "ratio": p_pad / p_real},
            "fixed_32": {"batch_size": NAIVE_BATCH, "n_batches": len(naive), "padded_tokens": n_pad,
                         "ratio": n_pad / n_real},
        }
    return out


# --------------------------------------------------------------------------------------------
# 3. cache size


def cache_size(path: Path) -> dict:
    from layercache import read_manifest
    from layercache.extraction.estimate import estimate_bytes

    manifest = read_manifest(path)
    apparent, allocated = dir_bytes(path)
    states = len(manifest.storage.layers)
    hidden = manifest.hidden_size
    tokens = sum(s.n_tokens for s in manifest.splits.values())
    examples = sum(s.n_examples for s in manifest.splits.values())
    raw = tokens * states * hidden * 2
    shards = sum(len(s.shards) for s in manifest.splits.values())
    return {"path": str(path), "n_examples": examples, "tokens": tokens, "states": states, "hidden": hidden,
            "n_shards": shards, "bytes_apparent": apparent, "bytes_allocated": allocated, "raw_state_bytes": raw,
            "ratio": apparent / raw, "ratio_allocated": allocated / raw,
            "estimate_bytes": estimate_bytes(manifest), "estimate_over_actual": estimate_bytes(manifest) / apparent}


# --------------------------------------------------------------------------------------------
# 4. peak RSS, each extraction in a fresh process


def rss_child(payload: dict) -> dict:
    """Runs in a fresh interpreter: one extraction, then report this process's peak RSS."""
    import resource

    quiet_transformers()
    import torch  # noqa: F401  (baseline includes the libraries every extraction needs)
    import transformers  # noqa: F401

    import layercache.extraction.run as run_mod
    from layercache import extract

    # The peak after every batch: shows whether memory keeps growing over a long run or levels off.
    hwm_by_batch = []
    run_batch = run_mod.run_batch

    def recording_run_batch(*args, **kwargs):
        out = run_batch(*args, **kwargs)
        hwm_by_batch.append(proc_status_bytes("VmHWM"))
        return out

    run_mod.run_batch = recording_run_batch
    baseline = proc_status_bytes("VmRSS")
    t0 = time.perf_counter()
    result = extract(MODEL, None, payload["out"], split_files=payload["files"], limit=payload["limit"],
                     device=DEVICE, progress=False)
    wall = time.perf_counter() - t0
    run_mod.run_batch = run_batch
    info = next(iter(result.manifest.splits.values()))
    return {"limit": payload["limit"], "n_examples": info.n_examples, "n_tokens": info.n_tokens,
            "n_shards": len(info.shards), "extract_s": wall, "tokens_per_s": info.n_tokens / wall,
            "rss_baseline_after_imports": baseline, "peak_rss_vmhwm": proc_status_bytes("VmHWM"),
            "rss_end": proc_status_bytes("VmRSS"), "peak_rss_by_batch": hwm_by_batch,
            "ru_maxrss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "torch_threads": __import__("torch").get_num_threads()}


def max_example_tokens(path: Path) -> int:
    import h5py
    import numpy as np

    from layercache import read_manifest

    widest = 0
    for split in read_manifest(path).splits.values():
        for shard in split.shards:
            with h5py.File(path / shard.file, "r") as h:
                widest = max(widest, int(np.diff(h["offsets"][:]).max()))
    return widest


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


def bench_rss(backbone, data: Path, limits: tuple[int, int], workdir: Path) -> dict:
    """Peak RSS at the small and large limit, plus the small size with the large run's longest example.

    The widest batch sets the forward pass's peak (attention is rows x width^2 under a fixed token
    budget), and a longer prefix of a dataset tends to hold a longer longest example; the third run
    (first SMALL-1 rows + the longest of the first LARGE rows) has the same widest batch as the
    large run, so large / that run isolates growth with the number of examples.
    (layercache/extraction/memory.py explains where growth came from - glibc's heap under a batch
    plan whose batch sizes wobble - and how the non-increasing plan removes it.)
    """
    from layercache.extraction.tokenize import encode_split
    from layercache.sources.datasets import load_dataset_records

    files, split = split_files(data, "agnews")
    small, large = limits
    records = load_dataset_records(None, split_files=files, limit=large)
    lengths = [ex.n_tokens for ex in encode_split(backbone.tokenizer, records.splits[split],
                                                  max_length=backbone.max_length, stride=None,
                                                  causal=backbone.is_causal)]
    longest = max(range(len(lengths)), key=lengths.__getitem__)
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

    by_batch = b["peak_rss_by_batch"]
    half = by_batch[len(by_batch) // 2 - 1] if len(by_batch) >= 2 else by_batch[-1]
    return {
        "dataset": "agnews", "runs": runs, "examples_ratio": b["n_examples"] / a["n_examples"],
        "large_peak_at_half_the_batches": half, "large_peak_growth_in_second_half": by_batch[-1] - half,
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


def bench_read(path: Path, split: str, min_time: float, seed: int = 0) -> dict:
    import numpy as np

    from layercache import LayerCache

    cache = LayerCache.open(path)
    n = cache.num_examples(split)
    S, D = len(cache.layer_names), cache.hidden_size
    layer = cache.layer_names[-1]

    # (a) one layer across all tokens
    def one_layer():
        return sum(block.shape[0] for block in cache.layer_tokens(split, layer))

    one_layer()  # open handles / offsets once, outside the timing
    dt, iters, outs = timed_loop(one_layer, min_time)
    tokens = sum(outs)
    layer_res = {"layer": layer, "passes": iters, "seconds": dt, "tokens_per_pass": outs[0],
                 "tokens_per_s": tokens / dt, "mb_per_s_stored_fp16": mb(tokens * D * 2) / dt,
                 "mb_per_s_returned_fp32": mb(tokens * D * 4) / dt}

    # (b) all layers of 32 random rows
    rng = np.random.default_rng(seed)

    def random_rows():
        rows = rng.choice(n, size=min(32, n), replace=False)
        return sum(len(x) for x in cache.tokens(split, rows))

    dt, iters, outs = timed_loop(random_rows, min_time, min_iters=5)
    rows_res = {"batch_rows": min(32, n), "batches": iters, "seconds": dt, "batches_per_s": iters / dt,
                "tokens_per_s": sum(outs) / dt, "mb_per_s_stored_fp16": mb(sum(outs) * S * D * 2) / dt}

    # (c) shuffled padded minibatches over the whole split
    epoch = [0]

    def shuffled_epoch():
        epoch[0] += 1
        ex = tok = 0
        for batch in cache.iter_batches(split, batch_size=32, shuffle=True, seed=epoch[0]):
            ex += len(batch.rows)
            tok += int(batch.mask.sum())
        return ex, tok

    dt, iters, outs = timed_loop(shuffled_epoch, min_time)
    ex = sum(o[0] for o in outs)
    tok = sum(o[1] for o in outs)
    iter_res = {"batch_size": 32, "epochs": iters, "seconds": dt, "examples_per_s": ex / dt,
                "tokens_per_s": tok / dt, "batches_per_s": (ex / 32) / dt}

    # (d) a head's CacheFeed, shuffled batches of 32 in the stored precision: its first epoch (which
    # reads the shards) and its best later one, through the memory map and through h5py copies
    from layercache.store.cache_feed import CacheFeed

    feed_res = {}
    for label, memory_map in (("mapped", True), ("copied", False)):
        feed = CacheFeed(cache, split, batch_size=32, memory_map=memory_map)
        seconds = []
        for seed in range(3):
            t0 = time.perf_counter()
            for _ in feed.epoch(shuffle=True, seed=seed):
                pass
            seconds.append(time.perf_counter() - t0)
        feed_res[label] = {"first_epoch_s": seconds[0], "later_epoch_s": min(seconds[1:]), "batches": len(feed)}
        del feed
    cache.close()
    return {"path": str(path), "split": split, "n_examples": n, "states": S, "hidden": D,
            "layer_tokens": layer_res, "tokens_random_32": rows_res, "iter_batches_shuffled": iter_res,
            "head_feed": feed_res}


# --------------------------------------------------------------------------------------------
# main


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small smoke run (about a minute)")
    p.add_argument("--out", type=Path, default=None,
                   help="JSON output (default: benchmarks/results/extract.json, extract-quick.json with --quick)")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA,
                   help=f"folder with sst2/ and agnews/ (default: {DEFAULT_DATA})")
    p.add_argument("--examples", type=int, default=None,
                   help="examples per dataset for the overhead benchmark (default 2000; --quick 300)")
    p.add_argument("--reps", type=int, default=None, help="repetitions of bare/extract pairs (default 3; --quick 1)")
    p.add_argument("--read-seconds", type=float, default=None,
                   help="minimum seconds per read measurement (default 5; --quick 1)")
    p.add_argument("--rss-limits", type=int, nargs=2, default=None, metavar=("SMALL", "LARGE"),
                   help="AG News examples for the two RSS runs (default 1000 10000; --quick 100 1000)")
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
    n_examples = args.examples or (300 if quick else 2000)
    reps = args.reps or (1 if quick else 3)
    read_s = args.read_seconds or (1.0 if quick else 5.0)
    rss_limits = tuple(args.rss_limits or ((100, 1000) if quick else (1000, 10000)))
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
            "read_min_seconds": read_s, "rss_limits": list(rss_limits),
            "note": "2 CPU cores shared with other work (tests may run concurrently); load averages are recorded "
                    "next to each measurement. Read benchmarks run right after writing, so the page cache is warm.",
        }
        print(f"layercache {layercache.__version__} extraction benchmark ({'quick' if quick else 'full'}): "
              f"{MODEL} on {DEVICE}, torch {torch.__version__}, {torch.get_num_threads()} torch threads, "
              f"{os.cpu_count()} CPU cores (shared with other work: tests may be running), "
              f"load avg {loadavg()}", flush=True)
        results: dict = {"meta": meta, "targets": TARGETS}

        t = time.perf_counter()
        backbone = load_backbone(MODEL, device=DEVICE)
        meta["model_load_s"] = time.perf_counter() - t
        meta.update(n_states=backbone.n_layers + 1, hidden=backbone.hidden_size, max_length=backbone.max_length)

        caches = {}
        if "overhead" in only:
            print(f"\n[1/5] extraction overhead: {n_examples} examples per dataset, {reps} rep(s)", flush=True)
            t = time.perf_counter()
            overhead, caches = bench_overhead(backbone, data, n_examples, reps, workdir)
            overhead["seconds"] = time.perf_counter() - t
            results["overhead"] = overhead
        if "padding" in only:
            print("\n[2/5] padding (tokenization only)", flush=True)
            t = time.perf_counter()
            results["padding"] = bench_padding(backbone, data)
            results["padding"]["seconds"] = time.perf_counter() - t
        if "size" in only:
            results["cache_size"] = {name: cache_size(path) for name, (path, _) in caches.items()}
        if "rss" in only:
            print(f"\n[4/5] peak RSS: agnews at {rss_limits[0]} and {rss_limits[1]} examples, fresh processes",
                  flush=True)
            t = time.perf_counter()
            results["rss"] = bench_rss(backbone, data, rss_limits, workdir)
            results["rss"]["seconds"] = time.perf_counter() - t
        if "read" in only:
            print(f"\n[5/5] read throughput ({read_s:g}s minimum per measurement)", flush=True)
            t = time.perf_counter()
            results["read"] = {name: bench_read(path, split, read_s) for name, (path, split) in caches.items()}
            results["read"]["seconds"] = time.perf_counter() - t

        meta["loadavg_end"] = loadavg()
        meta["total_s"] = time.perf_counter() - t_start

    report(results)
    write_results(results, out_json)
    return 0


def report(results: dict) -> None:
    meta = results["meta"]
    print("\n" + "=" * 100)
    print(f"Results: {meta['model']} ({meta.get('n_states')} states x {meta.get('hidden')}), {meta['device']}, "
          f"{meta['torch_threads']} torch threads, {meta['cpu_count']} shared CPU cores, "
          f"load avg start {meta['loadavg_start']} end {meta['loadavg_end']}")

    if "overhead" in results:
        rows = []
        for name, r in results["overhead"]["datasets"].items():
            ratio = r["ratio_batch_min"]
            ok = "n/a" if ratio is None else ("PASS" if ratio <= TARGETS["overhead_ratio_max"] else "FAIL")
            rows.append([name, r["n_examples"], r["real_tokens"], r["n_batches"], r["bare_forward_s"],
                         r["extract_loop_s"], ratio, r["ratio_loop"], r["ratio_loop_min"], r["ratio_loop_cpu"],
                         r["bare_total_s"], r["extract_minus_model_load_s"], r["ratio_end_to_end"],
                         r["bare_tokens_per_s"], r["extract_tokens_per_s"], ok])
        print_table(
            "1. Extraction overhead (target: per-batch-min ratio <= 1.10)",
            ["dataset", "examples", "tokens", "batches", "bare fwd s", "extract loop s", "per-batch-min ratio",
             "ratio loop", "min/min", "cpu ratio", "bare+tok s", "extract-load s", "ratio e2e", "bare tok/s",
             "extract tok/s", "target"], rows,
            note="per-batch-min ratio = sum over batches of the fastest rep's loop iteration inside extract() "
                 "(forward, post-processing, shard writes and commits) / sum over batches of the fastest rep's "
                 "bare forward\n"
                 "ratio loop = (extract() wall - data load - model load - tokenize/plan) / (pad_windows + "
                 "hidden_states over the same batches), medians; min/min = fastest loop / fastest bare pass;\n"
                 "cpu ratio = the same with process CPU time (all threads) instead of wall time\n"
                 "ratio e2e  = (extract() wall - model load) / (data load + tokenize + plan + bare forward)\n"
                 "Same tokenization and plan_batches plan on both sides (checked: batch and token counts match).")
        for name, r in results["overhead"]["datasets"].items():
            total = r["breakdown_rep_loop_s"]
            rows = [[k, v, 100 * v / total] for k, v in r["breakdown_s"].items()]
            rows.append(["bare forward (median, for reference)", r["bare_forward_s"],
                         100 * r["bare_forward_s"] / total])
            rows += [[f"  of the writer's jobs: {k}", v, 100 * v / total]
                     for k, v in r.get("writer_thread_s", {}).items()]
            print_table(f"   where extract()'s loop time goes, {name}, median rep (s, % of loop; per-rep loop ratios "
                        f"{', '.join(f'{x:.3f}' for x in r['ratio_loop_per_rep'])})",
                        ["phase", "seconds", "% of loop"], rows)

    if "padding" in results:
        rows = []
        for name, r in results["padding"].items():
            if not isinstance(r, dict):
                continue
            lb, fx = r["length_batched"], r["fixed_32"]
            ok = "PASS" if lb["ratio"] <= TARGETS["padding_ratio_max"] else "FAIL"
            rows.append([name, r["n_examples"], r["real_tokens"], r["mean_tokens"], r["max_width"], lb["n_batches"],
                         lb["padded_tokens"], lb["ratio"], fx["n_batches"], fx["padded_tokens"], fx["ratio"], ok])
        print_table("2. Padding: padded / real tokens (full sst2 train, full agnews dev; "
                    "target length-batched <= 1.10)",
                    ["dataset", "examples", "real tokens", "mean len", "max len", "plan batches", "plan padded",
                     "plan ratio", "fixed-32 batches", "fixed-32 padded", "fixed-32 ratio", "target"], rows,
                    note=f"plan = plan_batches(budget {BATCH_TOKENS} padded tokens, <= {BATCH_SIZE} rows); "
                         f"fixed-32 = fixed_batches(n, {NAIVE_BATCH}) in dataset order.")

    sizes = dict(results.get("cache_size", {}))
    if "rss" in results:
        for label, run in results["rss"]["runs"].items():
            sizes[f"agnews {label} (rss)"] = run["cache"]
    if sizes:
        rows = [[name, c["n_examples"], c["tokens"], c["n_shards"], mb(c["raw_state_bytes"]), mb(c["bytes_apparent"]),
                 c["ratio"], c["ratio_allocated"], c["estimate_over_actual"]] for name, c in sizes.items()]
        print_table("3. Cache size on disk (fp16, all states stored as tokens, mean pooled)",
                    ["cache", "examples", "tokens", "shards", "raw MB", "on disk MB", "ratio", "ratio (blocks)",
                     "estimate/actual"], rows,
                    note="raw = tokens x states x hidden x 2 bytes; the rest is pooled means, input/word ids, "
                         "offsets, labels, stats, HDF5 metadata.\nestimate/actual = estimate_bytes(manifest) / "
                         "bytes on disk (the disk-space check's accuracy).")

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
                         f"within the large run: peak {mb(r['large_peak_at_half_the_batches']):.0f} MB after half "
                         f"of its batches, +{mb(r['large_peak_growth_in_second_half']):.0f} MB over the second half\n"
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
        rows = [[name, r["head_feed"][label]["batches"], label, r["head_feed"][label]["first_epoch_s"],
                 r["head_feed"][label]["later_epoch_s"]]
                for name, r in results["read"].items() if isinstance(r, dict) and "head_feed" in r
                for label in ("mapped", "copied")]
        if rows:
            print_table("6. A head's CacheFeed over the whole split (batch 32, all states, warm page cache)",
                        ["cache", "batches", "shards read", "first epoch s", "later epoch s"], rows,
                        note="mapped: gathered from a memory map of the shards' chunks (the default); copied: "
                             "each block copied out through h5py and kept (memory_map=False).")


if __name__ == "__main__":
    sys.exit(main())
