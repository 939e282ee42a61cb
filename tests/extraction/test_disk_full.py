"""A full disk at every write of ``extract`` (issue 36): one sentence, exit code 2, nothing half-written, and the same
command resumes to the cache an uninterrupted run writes.

Two ways to fill the disk. :mod:`disk_full_support` fails, once each, every write ``extract`` makes through Python
(each folder, lock, manifest, manifest part, side file, projection and a shard's commit), so a write site added
later is failed too. A real full file system (a small tmpfs, mounted in a private mount namespace with
``unshare``) fails HDF5's own writes inside a shard, where h5py used to print "Can't decrement id ref count"
tracebacks and the process died of a segmentation fault.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cli_support import invoke
from disk_full_support import DiskFaults, left_behind, site_name
from shard_support import shard_contents

import layercache as lc
from layercache.store.parts import read_committed

SMALL = ("--batch-size", "4", "--shard-size", "1", "--quiet", "--threads", "1")  # a shard per batch


class EveryWrite(DiskFaults):
    """:class:`DiskFaults` that tells apart the calls at one site (the manifest is written several times, each part
    after each shard): ``(kind, site, n)``, the n-th call; with ``fail``, that call fails as a full disk does."""

    def __init__(self, roots: list[Path], fail: tuple[str, str, int] | None = None) -> None:
        super().__init__(roots)
        self.target = fail
        self.counts: dict[tuple[str, str], int] = {}
        self.calls: list[tuple[str, str, int]] = []

    def _hit(self, kind: str, path) -> None:
        site = site_name(path, self.roots) if path is not None else None
        if site is None:
            return
        n = self.counts[kind, site] = self.counts.get((kind, site), 0) + 1
        self.calls.append((kind, site, n))
        if (kind, site, n) == self.target and not self.failed:
            self.failed = True
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))


def problems_after(result, out: Path) -> list[str]:
    """What is wrong with a run the full disk stopped: not one sentence with exit code 2, a temporary file left,
    a committed shard (in the manifest or the writer's part) missing or changed, an uncommitted one kept."""
    text = " ".join(result.output.split())
    message = text.partition("Error: ")[2]
    if result.exit_code != 2 or "Traceback" in text or "Exception ignored" in text:
        return [f"exit code {result.exit_code}: {text[-400:]}"]
    found = []
    if not (message.endswith(".") and ". " not in message):
        found.append(f"not one sentence: {message}")
    elif not ("No space left on device" in message or "the disk is full" in message) or "free space" not in message:
        found.append(f"does not name the full disk and the fix: {message}")
    found += [f"left behind: {name}" for name in left_behind(out) + sorted(map(str, out.rglob("*.h5.tmp")))]
    if (out / "manifest.json").exists():
        manifest = read_committed(out)  # the manifest and the writer's part: both list committed shards
        listed = {s.file for split in manifest.splits.values() for s in split.shards}
        found += [f"an unlisted shard: {p}" for p in out.glob("*/shard-*.h5") if str(p.relative_to(out)) not in listed]
        with lc.LayerCache.open(out, allow_incomplete=True) as cache:
            found += [f"{file}: {problem}" for file, problem in cache.shard_problems().items()]
    return found


@pytest.mark.parametrize("model, options", [("bert", ()), ("gpt2", ("--project", "8"))],
                         ids=["encoder", "projected-decoder"])
def test_a_full_disk_at_every_write_of_extract(tiny_models, tsv, tmp_path, one_backbone, model, options):
    args = ("extract", tiny_models[model], tsv, *SMALL, *options)
    reference = tmp_path / "reference"
    with pytest.MonkeyPatch.context() as mp:
        faults = EveryWrite([tmp_path]).install(mp)
        assert invoke(*args, "--out", reference).exit_code == 0
    calls = [(kind, site.replace("/reference", "/cache", 1), n) for kind, site, n in faults.calls
             if "/reference" in site]  # the cache's writes (not the `latest` pointer's: a convenience, best effort)
    for name in ("manifest.json", "vocab.json", "shard-00000.h5", "manifest-part-00000.json",
                 *(("lens.safetensors", "projection.safetensors") if options else ())):
        assert any(name in site for _, site, _ in calls), (name, calls)
    assert any(n > 1 for _, site, n in calls if "manifest.json" in site)  # the merge's manifest write too
    expected = shard_contents(reference)
    problems = []
    for call in calls:
        out = tmp_path / "cache"
        shutil.rmtree(out, ignore_errors=True)
        with pytest.MonkeyPatch.context() as mp:
            faults = EveryWrite([tmp_path], fail=call).install(mp)
            result = invoke(*args, "--out", out)
        if not faults.failed:
            problems.append(f"{call}: the write was not reached again")
            continue
        problems += [f"{call}: {problem}" for problem in problems_after(result, out)]
        again = invoke(*args, "--out", out)  # the sentence says: free space and run the same command again
        if again.exit_code != 0 or invoke("info", out, "--check").exit_code != 0:
            problems.append(f"{call}: the same command again: {again.output[-300:]}")
        elif shard_contents(out).keys() != expected.keys():
            problems.append(f"{call}: the resumed cache has other shards than an uninterrupted run")
    assert not problems, "\n".join(problems)


# --- a real full file system ---------------------------------------------------------------------------------
# The child mounts a tmpfs of each size in turn (it runs in its own mount namespace) and runs the real CLI into
# it. The size estimate is told the disk is large, as when something else fills the disk during the run.
CHILD = textwrap.dedent("""
    import json, shutil, subprocess, sys
    from pathlib import Path
    from typer.testing import CliRunner
    import layercache.extraction.job as job
    from layercache.cli import app
    job.free_disk_bytes = lambda out: 1 << 40
    mount, keep, args, sizes = Path(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4:]
    unraisable = []
    sys.unraisablehook = lambda hook: unraisable.append(repr(hook.exc_value))  # h5py's ignored exceptions
    report = {}
    for size in sizes:
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], check=True)
        result = CliRunner().invoke(app, [*args, "--out", str(mount / "cache")])
        report[size] = {"exit_code": result.exit_code, "output": result.output, "unraisable": unraisable[:]}
        unraisable.clear()
        if (mount / "cache").exists():
            shutil.copytree(mount / "cache", keep / size, symlinks=True)
        subprocess.run(["umount", str(mount)], check=True)
    print(json.dumps(report))
""")
UNSHARE = ["unshare", "--mount", "--map-root-user"]


def _can_mount() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run([*UNSHARE, "mount", "-t", "tmpfs", "tmpfs", "/mnt"], capture_output=True)
    return probe.returncode == 0


@pytest.mark.skipif(not _can_mount(), reason="needs unshare and mount in a private mount namespace")
def test_a_real_full_disk_inside_a_shard_is_one_sentence_and_resumes(tiny_models, tsv, tmp_path):
    """Sizes that fill the disk before the first shard, inside the first shard's HDF5 writes, and after some shards."""
    mount, keep = tmp_path / "small-disk", tmp_path / "kept"
    mount.mkdir()
    keep.mkdir()
    args = ["extract", str(tiny_models["bert"]), str(tsv), "--batch-size", "2", "--shard-size", "1", "--quiet",
            "--threads", "1"]
    sizes = ["20k", "64k", "160k", "400k", "800k"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.run([*UNSHARE, sys.executable, "-c", CHILD, str(mount), str(keep), json.dumps(args), *sizes],
                           capture_output=True, text=True, env=env, timeout=600)
    assert child.returncode == 0, child.stderr[-3000:]  # a crash (-11: segmentation fault) ends here
    report = json.loads(child.stdout.strip().splitlines()[-1])
    committed = [size for size in report if (keep / size / "manifest.json").exists()
                 and lc.read_manifest(keep / size).splits["train"].shards]
    assert committed and committed != list(report), report  # some runs had committed shards to keep, some not
    problems = []
    for size, run in report.items():
        if run["unraisable"]:
            problems.append(f"{size}: h5py ignored {run['unraisable'][:2]}")
        cache = keep / size
        problems += [f"{size}: {p}" for p in problems_after(_Result(run), cache)]
        if (cache / "manifest.json").exists():
            again = invoke(*args, "--out", cache)  # on a disk with space: the same command resumes
            if again.exit_code != 0 or invoke("info", cache, "--check").exit_code != 0:
                problems.append(f"{size}: the same command again: {again.output[-300:]}")
    assert not problems, "\n".join(problems)


class _Result:
    """A child's run as :func:`problems_after` reads a CLI result."""

    def __init__(self, run: dict):
        self.exit_code, self.output = run["exit_code"], run["output"]
