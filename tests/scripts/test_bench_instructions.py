"""scripts/bench_instructions.py: the child builds each mode's snapshot and calls schedule(); the
parent reads valgrind's count (valgrind itself is not run here: a run takes minutes)."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest
from tests.scripts.load import SCRIPTS, load_script

bench = load_script("bench_instructions")


@pytest.mark.parametrize("mode", bench.MODES)
def test_the_child_schedules_each_mode(mode: str) -> None:
    out = subprocess.run([sys.executable, str(SCRIPTS / "bench_instructions.py"), "--shape", "preemption",
                          "--mode", mode, "--scale", "0.01", "--calls", "2"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize(("cache", "engine"), [("none", []), ("same", []), ("new-pods", []),
                                               ("same", ["--incremental"])])
def test_the_child_makes_the_whole_dra_call(cache: str, engine: list[str]) -> None:
    out = subprocess.run([sys.executable, str(SCRIPTS / "bench_instructions.py"), "--shape", "dra-basic",
                          "--mode", "all", "--scale", "0.01", "--whole", "--cache", cache, *engine, "--calls", "2"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_one_warm_call_is_two_calls_less_one(monkeypatch: pytest.MonkeyPatch) -> None:
    counts = {"1": "==1== I   refs:      1,500,000,000\n", "2": "==1== I   refs:      2,250,000,000\n"}
    monkeypatch.setattr(bench.subprocess, "run", lambda argv, **_: SimpleNamespace(stderr=counts[argv[-1]]))
    args = SimpleNamespace(shape="basic", mode="all", scale=1.0, src=None, whole=False, cache="none")
    assert bench.instructions(args, 2) - bench.instructions(args, 1) == 750_000_000
