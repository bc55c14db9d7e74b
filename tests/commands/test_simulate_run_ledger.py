"""``gpufleet simulate run --ledger``: the run's allocation intervals in a usage ledger, the output unchanged."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpufleet.cli import main
from gpufleet.ledger import open_ledger
from gpufleet.sim.ledger_export import DEFAULT_ORIGIN_S

from .test_simulate_run import CLUSTER

TRACE = "name,submit_time,duration,gpus,vc,user\n" + "".join(
    f"j{i},{i * 40},{300 + (i * 37) % 500},{[1, 2, 4, 1, 8][i % 5]},{'ab'[i % 2]},u{i % 3}\n" for i in range(40)
)
PHILLY = "timestamp,duration,num_gpus,gpu_time,cluster\n" + "".join(
    f"2017-10-0{3 + i % 2} 0{i % 10}:00:00,{600 + i},{1 + i % 4},{(600 + i) * (1 + i % 4)},vc{i % 3}\n"
    for i in range(20)
)


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    (tmp_path / "trace.csv").write_text(TRACE)
    (tmp_path / "philly.csv").write_text(PHILLY)
    (tmp_path / "iso.csv").write_text("name,submit_time,duration,gpus\nx,2026-03-02T10:00:00Z,60,1\n"
                                      "y,2026-03-02T09:00:00Z,60,1\n")
    return {k: str(tmp_path / f) for k, f in (("cluster", "cluster.yaml"), ("trace", "trace.csv"),
                                               ("philly", "philly.csv"), ("iso", "iso.csv"))}


def _invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["simulate", "run", *args])
    return result.exit_code, result.stdout, result.stderr


def _args(files: dict[str, str]) -> list[str]:
    return ["--trace", files["trace"], "--cluster", files["cluster"], "--queue-by", "vc", "--format", "json",
            "--failures", "mtbf=2h,repair=10m,spot-rate=1", "--seed", "5", "--cycle-interval", "30s"]


def test_the_ledger_holds_the_run_and_the_output_is_unchanged(files: dict[str, str], tmp_path: Path) -> None:
    ledger = str(tmp_path / "ledger.db")
    code, without, err = _invoke(*_args(files))
    assert code == 0, err
    code, with_ledger, err = _invoke(*_args(files), "--ledger", ledger)
    assert code == 0, err
    assert with_ledger == without  # byte for byte
    with open_ledger(ledger) as store:
        intervals = store.intervals()
    assert f"ledger: {len(intervals):,} allocation intervals written to sqlite+pysqlite:///{ledger}" in err
    run = json.loads(without)["runs"][0]
    end = DEFAULT_ORIGIN_S + run["end_s"]
    per_queue: Counter[str] = Counter()
    for interval in intervals:
        per_queue[interval.start.queue] += interval.gpu_seconds(DEFAULT_ORIGIN_S, end) / 3600
    for name, queue in run["queues"].items():
        assert per_queue[name] == pytest.approx(queue["gpu_hours"], abs=0.01)
    assert {i.start.submitter for i in intervals} == {"u0", "u1", "u2"}
    assert {i.start.gpu_model for i in intervals} <= {"A100", "T4"}
    assert min(i.start.bound_at for i in intervals) == DEFAULT_ORIGIN_S  # no absolute times: the fixed origin
    # the same command again into the same ledger adds nothing
    assert _invoke(*_args(files), "--ledger", ledger)[0] == 0
    with open_ledger(ledger) as store:
        assert store.intervals() == intervals


def test_uids_and_times_are_the_same_in_two_ledgers(files: dict[str, str], tmp_path: Path) -> None:
    ledgers = [str(tmp_path / "one.db"), f"sqlite:///{tmp_path / 'two.db'}"]
    read = []
    for ledger in ledgers:
        assert _invoke(*_args(files), "--ledger", ledger)[0] == 0
        with open_ledger(ledger) as store:
            read.append(store.intervals())
    assert read[0] == read[1] and read[0]


def test_the_origin_is_the_traces_own_start_or_the_option(files: dict[str, str], tmp_path: Path) -> None:
    def bound_times(*args: str) -> list[float]:
        ledger = str(tmp_path / f"l{len(list(tmp_path.iterdir()))}.db")
        code, _, err = _invoke("--cluster", files["cluster"], "--format", "json", "--ledger", ledger, *args)
        assert code == 0, err
        with open_ledger(ledger) as store:
            return sorted(i.start.bound_at for i in store.intervals())

    assert bound_times("--trace", files["philly"])[0] == 1_506_988_800.0  # 2017-10-03T00:00:00Z
    assert bound_times("--trace", files["iso"]) == [1_772_442_000.0, 1_772_445_600.0]  # 2026-03-02T09:00Z, 10:00Z
    origin = bound_times("--trace", files["philly"], "--ledger-origin", "2026-11-01T00:00:00Z")[0]
    assert origin == 1_793_491_200.0


@pytest.mark.parametrize(("extra", "message"), [
    (["--ledger", "mysql://h/db"], "--ledger 'mysql://h/db': unsupported database 'mysql'"),
    (["--ledger", "/no/such/dir/l.db"], "--ledger '/no/such/dir/l.db': the directory '/no/such/dir' does not exist"),
    (["--ledger", "sqlite+aiosqlite:///x.db"], "--ledger 'sqlite+aiosqlite:///x.db': SQLite through the driver"),
    (["--ledger", "x.db", "--compare", "seed=1"], "--ledger: one run per ledger; not with --compare"),
    (["--ledger-origin", "2026-11-01"], "--ledger-origin: only with --ledger"),
    (["--ledger", "x.db", "--ledger-origin", "soon"], '--ledger-origin: "soon": not a date (YYYY-MM-DD) or an ISO 8601 time'),
])
def test_bad_ledger_options_are_one_line_and_exit_2(files: dict[str, str], tmp_path: Path, extra: list[str],
                                                    message: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = _invoke(*_args(files), *extra)
    assert code == 2 and out == ""
    assert err.startswith(f"gpufleet simulate run: {message}") and err.count("\n") == 1, err
    assert not (tmp_path / "x.db").exists()
