"""Torch's thread count: never more than the usable cores, and by default no more than are idle."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import torch

from layercache.core import threads
from layercache.core.threads import idle_cores, resolve_threads, usable_cores, use_threads
from layercache.errors import ConfigError

STAT = """cpu  900 0 100 1000 0 0 0 0 0 0
cpu0 400 0 50 500 0 0 0 0 0 0
cpu1 500 0 50 500 0 0 0 0 0 0
intr 12345
"""


def test_a_number_is_used_and_more_than_the_cores_is_refused(monkeypatch):
    monkeypatch.setattr(threads, "usable_cores", lambda: 2)
    assert resolve_threads(1).threads == 1 and resolve_threads(2).threads == 2
    with pytest.raises(ConfigError, match="more than the 2 core"):
        resolve_threads(3)
    for bad in (0, -1, 1.5, "two", True):
        with pytest.raises(ConfigError, match="at least 1"):
            resolve_threads(bad)


@pytest.mark.parametrize("idle, expected", [(2.0, 2), (1.6, 2), (1.0, 1), (1.4, 1), (0.1, 1), (None, 2)])
def test_auto_takes_the_idle_cores(monkeypatch, idle, expected):
    monkeypatch.setattr(threads, "usable_cores", lambda: 2)
    monkeypatch.setattr(threads, "idle_cores", lambda sample_s=0.1: idle)
    choice = resolve_threads("auto")
    assert choice.threads == expected and not choice.asked
    assert resolve_threads(None) == choice
    text = choice.describe()
    assert ("--threads 2" in text) == (expected < 2)  # says how to override when it took fewer


def test_auto_keeps_the_environments_count_capped_at_the_cores(monkeypatch):
    """``OMP_NUM_THREADS`` set before the process started is the user's choice, as the library's calls keep it:
    ``auto`` (the CLI's default) takes it without sampling idle cores, never above the usable cores."""
    monkeypatch.setattr(threads, "usable_cores", lambda: 2)
    monkeypatch.setattr(threads, "idle_cores", lambda sample_s=0.1: pytest.fail("sampled idle cores"))
    for name in threads.THREAD_ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert resolve_threads("auto") == threads.ThreadChoice(1, 2, None, asked=True)
    monkeypatch.setenv("OMP_NUM_THREADS", "8")
    assert resolve_threads("auto").threads == 2
    monkeypatch.setenv("OMP_NUM_THREADS", "junk")  # not a count torch would use: the next variable, then idle cores
    monkeypatch.setenv("MKL_NUM_THREADS", "1")
    assert resolve_threads("auto").threads == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert resolve_threads(1).threads == 1  # a number asked for wins


def test_cgroup_quota_caps_the_cores(monkeypatch, tmp_path):
    quota = tmp_path / "cpu.max"
    monkeypatch.setattr(threads, "CGROUP_CPU_MAX", quota)
    quota.write_text("150000 100000\n")  # 1.5 CPUs
    assert usable_cores() == 1
    quota.write_text("max 100000\n")
    assert usable_cores() == min(len(os.sched_getaffinity(0)), os.cpu_count())


def test_idle_time_is_read_per_usable_cpu(monkeypatch, tmp_path):
    stat = tmp_path / "stat"
    stat.write_text(STAT)
    monkeypatch.setattr(threads, "PROC_STAT", stat)
    assert threads._cpu_times({0}) == (500, 950)
    assert threads._cpu_times({0, 1}) == (1000, 2000)
    assert threads._cpu_times({7}) is None  # none of the usable CPUs listed
    stat.write_text("")
    assert threads._cpu_times({0}) is None


@pytest.mark.skipif(not os.path.exists("/proc/stat") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs Linux and two usable cores")
def test_a_busy_process_is_seen():
    usable = sorted(os.sched_getaffinity(0))
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(spinner.pid, {usable[0]})  # holds one core the whole time
        time.sleep(0.2)
        idle = idle_cores(0.3)
    finally:
        spinner.kill()
        spinner.wait()
    assert idle is not None and idle <= len(usable) - 0.6  # other load only lowers it further


def test_use_threads_sets_torch():
    before = torch.get_num_threads()
    try:
        assert use_threads(1).threads == 1 and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


# ---------------------------------------------------------------- the library's computing calls (@computes)
@threads.computes
def seen_threads() -> int:
    """A computing call that reports the torch threads it runs with."""
    return torch.get_num_threads()


def test_a_computing_call_takes_the_idle_cores_and_puts_torch_back(thread_policy):
    assert seen_threads() == thread_policy.other
    assert torch.get_num_threads() == thread_policy.default
    assert seen_threads() == thread_policy.other and thread_policy.samples == 1  # the choice stands a while


def test_the_idle_cores_are_sampled_again_after_a_while(thread_policy):
    seen_threads()
    when, choice = threads._auto
    threads._auto = (when - threads.AUTO_REFRESH_S - 1, choice)
    thread_policy.idle = float(thread_policy.usable)  # the other load has gone
    assert seen_threads() == thread_policy.usable and thread_policy.samples == 2


def test_one_usable_core_needs_no_sample(thread_policy):
    thread_policy.usable = 1
    assert resolve_threads("auto").threads == 1 and thread_policy.samples == 0


def test_nested_calls_run_under_the_outermost_choice(thread_policy):
    @threads.computes
    def outer() -> tuple[int, int, int]:
        inside = seen_threads()
        return torch.get_num_threads(), inside, torch.get_num_threads()

    assert outer() == (thread_policy.other,) * 3  # the inner call neither chose again nor restored
    assert thread_policy.samples == 1 and torch.get_num_threads() == thread_policy.default


def test_torch_is_put_back_when_the_call_fails(thread_policy):
    @threads.computes
    def failing():
        raise ValueError("planted")

    with pytest.raises(ValueError, match="planted"):
        failing()
    assert torch.get_num_threads() == thread_policy.default and threads._running == 0


def test_a_count_the_user_set_in_torch_is_kept(thread_policy):
    mine = thread_policy.other + 1  # neither torch's default nor what auto would take
    mine = mine if mine != thread_policy.default else mine + 1
    torch.set_num_threads(mine)
    assert seen_threads() == mine and thread_policy.samples == 0
    assert torch.get_num_threads() == mine


@pytest.mark.parametrize("variable", threads.THREAD_ENVIRONMENT)
def test_a_thread_variable_in_the_environment_is_kept(thread_policy, monkeypatch, variable):
    monkeypatch.setenv(variable, str(thread_policy.default))
    assert seen_threads() == thread_policy.default and thread_policy.samples == 0


def test_use_threads_is_kept_even_at_torchs_default(thread_policy):
    use_threads(thread_policy.default)  # as --threads N does; the same count as torch's default
    assert seen_threads() == thread_policy.default and thread_policy.samples == 0


def test_an_explicit_count_is_used_for_the_block(thread_policy):
    torch.set_num_threads(thread_policy.other)  # the user's own choice ...
    with threads.computing_threads(thread_policy.default):  # ... and a count for one block, which wins
        assert seen_threads() == thread_policy.default
    assert torch.get_num_threads() == thread_policy.other
    with pytest.raises(ConfigError, match="more than the"):
        with threads.computing_threads(thread_policy.usable + 1):
            pass


def test_a_generator_is_refused():
    def rows():
        yield 1

    with pytest.raises(TypeError, match="generator"):
        threads.computes(rows)
