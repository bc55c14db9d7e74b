"""``gpufleet dashboard``'s input checks: one line and exit 2, before any server starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from click.testing import CliRunner

from gpufleet.cli import main


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["dashboard", *args])
    return result.exit_code, result.output


def test_needs_a_snapshot_or_a_cluster() -> None:
    code, out = run("--auth", "none")
    assert code == 2 and "give --snapshot FILE or --cluster" in out
    code, out = run("--snapshot", "examples/demo.yaml", "--cluster", "--auth", "none")
    assert code == 2 and "one of the two" in out


def test_a_missing_snapshot_is_one_line(tmp_path: Path) -> None:
    code, out = run("--snapshot", str(tmp_path / "none.yaml"), "--auth", "none")
    assert code == 2 and "none.yaml" in out and "Traceback" not in out


def test_a_result_that_is_not_a_simulate_run_result(tmp_path: Path) -> None:
    bad = tmp_path / "sim.json"
    bad.write_text('{"inputs": {}}')
    code, out = run("--snapshot", "examples/demo.yaml", "--result", str(bad), "--auth", "none")
    assert code == 2 and "no runs list" in out


def test_a_missing_ledger_file(tmp_path: Path) -> None:
    code, out = run("--snapshot", "examples/demo.yaml", "--ledger", str(tmp_path / "x.db"), "--auth", "none")
    assert code == 2 and "no such ledger file" in out


def test_a_snapshot_is_served_without_auth_by_default_and_says_so(monkeypatch: Any) -> None:
    import uvicorn

    served: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: served.update(app=app, **kw))
    result = CliRunner().invoke(main, ["dashboard", "--snapshot", "examples/demo.yaml", "--port", "9999"])
    assert result.exit_code == 0, result.output
    assert "warning: --auth none" in result.output
    assert served["port"] == 9999 and served["host"] == "127.0.0.1"
    assert served["app"].state.source.describe() == "examples/demo.yaml"


def test_auth_kube_serves_behind_token_and_access_reviews(monkeypatch: Any) -> None:
    import uvicorn

    from gpufleet.web.auth import KubeAuthorizer

    served: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: served.update(app=app, **kw))
    result = CliRunner().invoke(main, ["dashboard", "--snapshot", "examples/demo.yaml", "--auth", "kube",
                                       "--trust-proxy"])
    assert result.exit_code == 0, result.output
    assert "warning" not in result.output
    authorizer = served["app"].state.auth
    assert isinstance(authorizer, KubeAuthorizer) and authorizer.trust_proxy


TRACE = "name,submit_time,duration,gpus,queue\nj1,0,600,1,team-a\nj2,60,600,2,\n"


def test_trace_files_are_read_at_start_and_offered_by_name(monkeypatch: Any, tmp_path: Path) -> None:
    import uvicorn

    trace = tmp_path / "week.csv"
    trace.write_text(TRACE)
    served: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: served.update(app=app, **kw))
    result = CliRunner().invoke(main, ["dashboard", "--snapshot", "examples/demo.yaml", "--trace", str(trace),
                                       "--auth", "none"])
    assert result.exit_code == 0, result.output
    jobs = served["app"].state.source.traces["week.csv"]
    assert [j.name for j in jobs] == ["j1", "j2"] and jobs[0].attrs["queue"] == "team-a"


def test_a_bad_trace_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    missing = tmp_path / "none.csv"
    code, out = run("--snapshot", "examples/demo.yaml", "--trace", str(missing), "--auth", "none")
    assert code == 2 and "none.csv" in out and "Traceback" not in out and out.count("\n") == 1
    malformed = tmp_path / "bad.csv"
    malformed.write_text("name,submit_time,gpus\nj1,soon,1\n")
    code, out = run("--snapshot", "examples/demo.yaml", "--trace", str(malformed), "--auth", "none")
    assert code == 2 and "bad.csv:2" in out and out.count("\n") == 1
    unknown = tmp_path / "what.csv"
    unknown.write_text("a,b\n1,2\n")
    code, out = run("--snapshot", "examples/demo.yaml", "--trace", str(unknown), "--auth", "none")
    assert code == 2 and "what.csv" in out and out.count("\n") == 1
    empty = tmp_path / "empty.csv"
    empty.write_text("name,submit_time,gpus\n")
    code, out = run("--snapshot", "examples/demo.yaml", "--trace", str(empty), "--auth", "none")
    assert code == 2 and "no jobs" in out and out.count("\n") == 1
    binary = tmp_path / "bin.csv"
    binary.write_bytes(b"\xff\xfe\x00bad")
    code, out = run("--snapshot", "examples/demo.yaml", "--trace", str(binary), "--auth", "none")
    assert code == 2 and "bin.csv:1: file: not UTF-8 text" in out and out.count("\n") == 1
    code, out = run("--snapshot", "examples/demo.yaml", "--trace", str(tmp_path), "--auth", "none")
    assert code == 2 and "is a directory" in out and out.count("\n") == 1
    taken = tmp_path / "openb"
    taken.write_text(TRACE)
    code, out = run("--snapshot", "examples/demo.yaml", "--trace", str(taken), "--auth", "none")
    assert code == 2 and "is taken" in out
