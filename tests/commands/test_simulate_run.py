"""``gpufleet simulate run`` end to end on tiny files: output, determinism, compare, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpufleet.cli import main

CLUSTER = """\
apiVersion: gpufleet.dev/v1alpha1
kind: ClusterSpec
metadata: {name: tiny}
spec:
  pools:
  - {name: big, count: 2, gpusPerNode: 4, gpuModel: A100, cpu: "32", memory: 128Gi, pricePerGpuHour: 2.0}
  - {name: small, count: 2, gpusPerNode: 2, gpuModel: T4, cpu: "16", memory: 64Gi, pricePerGpuHour: 0.5,
     spot: true}
"""

TRACE = "name,submit_time,duration,gpus,vc\n" + "".join(
    f"j{i},{i * 40},{300 + (i * 37) % 500},{[1, 2, 4, 1, 8][i % 5]},{'ab'[i % 2]}\n" for i in range(40)
)


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    (tmp_path / "trace.csv").write_text(TRACE)
    (tmp_path / "queues.yaml").write_text(
        "apiVersion: gpufleet.dev/v1alpha1\nkind: Queue\nmetadata: {name: a}\n"
        "spec: {resources: {nvidia.com/gpu: {quota: '4'}}}\n---\n"
        "apiVersion: gpufleet.dev/v1alpha1\nkind: Queue\nmetadata: {name: b}\n"
        "spec: {resources: {nvidia.com/gpu: {quota: '8'}}}\n"
    )
    return {k: str(tmp_path / f) for k, f in
            (("cluster", "cluster.yaml"), ("trace", "trace.csv"), ("queues", "queues.yaml"))}


def _invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["simulate", "run", *args])
    return result.exit_code, result.stdout, result.stderr


def test_json_is_deterministic_and_complete(files: dict[str, str]) -> None:
    args = ["--trace", files["trace"], "--cluster", files["cluster"], "--queue-by", "vc", "--format", "json",
            "--failures", "mtbf=2h,repair=10m,spot-rate=1", "--seed", "5", "--cycle-interval", "30s"]
    code, out, err = _invoke(*args)
    assert code == 0, err
    again = _invoke(*args)[1]
    assert out == again
    doc = json.loads(out)
    assert doc["inputs"]["jobs"] == 40 and doc["inputs"]["gpus"] == 12
    (m,) = doc["runs"]
    assert m["jobs"]["total"] == 40
    assert m["jobs"]["completed"] + m["jobs"]["rejected"] == 40
    assert m["jobs"]["rejected"] == 0  # the 8-GPU jobs become gangs of two 4-GPU pods
    assert set(m["queues"]) == {"a", "b"}
    assert m["outages"]["node_failures"] + m["outages"]["spot_reclaims"] > 0
    assert m["cost"] > 0
    assert "peak RSS" in err


def test_table_compare_and_report(files: dict[str, str], tmp_path: Path) -> None:
    report = tmp_path / "out.html"
    code, out, err = _invoke("--trace", files["trace"], "--cluster", files["cluster"], "--queues", files["queues"],
                             "--queue-by", "vc", "--compare", "placement=binpack,placement=spread",
                             "--report", str(report))
    assert code == 0, err
    assert "placement=binpack" in out and "placement=spread" in out and "JCT p99" in out
    header = next(line for line in out.splitlines() if line.startswith("METRIC"))
    assert header.split() == ["METRIC", "BASELINE", "PLACEMENT=BINPACK", "PLACEMENT=SPREAD"]  # the run itself first
    assert "QUEUES (placement=spread)" in out and "QUEUES (baseline)" in out
    html = report.read_text()
    assert html.count('<figure id="queue-usage-') == 3 and "<svg" in html


def test_bundled_openb_defaults_run(tmp_path: Path) -> None:
    code, out, err = _invoke("--limit", "30", "--format", "json")
    assert code == 0, err
    m = json.loads(out)["runs"][0]
    assert m["jobs"]["total"] == 30 and json.loads(out)["inputs"]["gpus"] == 6212


def test_a_warning_whose_figures_follow_the_capacity_is_printed_once() -> None:
    """Outages change the cluster's capacity, and with it the figures of the over-committed-quota
    warning, cycle after cycle: one line says it, with how many more cycles it came in."""
    code, _out, err = _invoke("--limit", "300", "--failures", "mtbf=30d,repair=4h", "--queue-by", "qos")
    assert code == 0, err
    lines = [line for line in err.splitlines() if "over-committed" in line]
    assert len(lines) == 1, err
    assert lines[0].startswith("warning: top-level nvidia.com/gpu quotas add up to ")
    assert lines[0].endswith(" more cycles)")


def test_queue_by_an_attribute_the_trace_lacks_says_which_it_has() -> None:
    code, _out, err = _invoke("--limit", "50", "--queue-by", "vc")
    assert code == 0, err
    assert ("warning: --queue-by vc: no job of the trace has a vc, so every job goes to the default queue; "
            "its jobs have qos") in err.splitlines()
    code, _out, err = _invoke("--limit", "50", "--queue-by", "qos")
    assert code == 0 and "--queue-by" not in err


def test_the_bundled_small_cluster_is_sized_to_the_trace() -> None:
    """``--cluster openb-small`` (package data, no file needed) gives the trace contention."""
    from gpufleet.sim import load_cluster

    cluster = load_cluster("openb-small")
    assert len(cluster.nodes) == 6 and cluster.total_gpus == 48
    code, out, err = _invoke("--cluster", "openb-small", "--queue-by", "qos", "--limit", "400", "--format", "json")
    assert code == 0, err
    body = json.loads(out)
    assert body["inputs"]["gpus"] == 48 and body["runs"][0]["jobs"]["total"] == 400


BAD = [
    (["--cycle-interval", "soon"], "--cycle-interval"),
    (["--trace", "/no/such/trace.csv"], "/no/such/trace.csv"),
    (["--cluster", "/no/such/cluster.yaml"], "/no/such/cluster.yaml"),
    (["--queue-by", "colour"], "--queue-by"),
    (["--compare", "placement=tight"], "unknown placement"),
    (["--failures", "mtbf=soon"], "mtbf"),
    (["--limit", "0"], "--limit"),
    (["--cycle-mode", "fixed", "--cycle-interval", "0"], "--cycle-interval"),
    (["--failures", "__OUTAGES__"], "n9"),
    # malformed durations, in every place the simulator reads one (docs/semantics.md, "Durations")
    (["--checkpoint", "-5m"], "--checkpoint"),
    (["--until", "3 weeks"], "--until"),
    (["--compare", "cycle-interval=1h-5m"], "--compare cycle-interval=1h-5m: cycle-interval"),
    (["--compare", "checkpoint=nan"], "--compare checkpoint=nan: checkpoint"),
    (["--failures", "mtbf=30d,repair=4w"], "--failures: repair"),
    (["--failures", "__BAD_OUTAGE_FOR__"], "outages.0.for"),
]


@pytest.mark.parametrize(("args", "needle"), BAD, ids=[b[1] for b in BAD])
def test_bad_input_is_one_line_and_exit_2(files: dict[str, str], tmp_path: Path, args: list[str],
                                          needle: str) -> None:
    outages = tmp_path / "outages.yaml"
    outages.write_text("outages: [{node: n9, at: 10, for: 10}]\n")
    bad_for = tmp_path / "bad-for.yaml"
    bad_for.write_text("outages: [{node: n9, at: 10, for: 1h-5m}]\n")
    args = [str(outages) if a == "__OUTAGES__" else str(bad_for) if a == "__BAD_OUTAGE_FOR__" else a for a in args]
    base = ["--trace", files["trace"], "--cluster", files["cluster"]]
    code, out, err = _invoke(*base, *args)
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], err


def test_bad_trace_row_from_a_real_process(tmp_path: Path, files: dict[str, str]) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("name,submit_time,duration,gpus\nj0,0,10,1\nj1,5,ten,1\n")
    proc = subprocess.run(
        [sys.executable, "-m", "gpufleet", "simulate", "run", "--trace", str(bad), "--cluster", files["cluster"]],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "bad.csv" in proc.stderr
    skipped = subprocess.run(
        [sys.executable, "-m", "gpufleet", "simulate", "run", "--trace", str(bad), "--cluster", files["cluster"],
         "--skip-bad-rows", "--format", "json"],
        capture_output=True, text=True, timeout=120,
    )
    assert skipped.returncode == 0, skipped.stderr
    assert json.loads(skipped.stdout)["runs"][0]["jobs"]["total"] == 1


def test_progress_bar_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from gpufleet.adapters.text import progress_bar
    from gpufleet.commands.simulate_run import _finished_jobs

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Terminal()
    monkeypatch.setattr(sys, "stderr", screen)
    with progress_bar(10, "run", show_pos=True) as bar:
        update = _finished_jobs(bar)
        assert update is not None
        update(5.0, 4)
        update(9.0, 10)
    assert "10/10" in screen.getvalue()
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    with progress_bar(10, "run", show_pos=True) as bar:
        assert bar is None
        assert _finished_jobs(bar) is None


def test_the_report_records_the_version_and_command_line(tmp_path: Path) -> None:
    import importlib.metadata

    page = tmp_path / "r.html"
    code, _out, err = _invoke("--limit", "20", "--queue-by", "qos", "--cycle-interval", "2m", "--report", str(page))
    assert code == 0, err
    version = importlib.metadata.version("gpufleet")
    assert (f'<p class="made-by"><code>gpufleet {version}: gpufleet simulate run --queue-by qos '
            f"--cycle-interval 120.0 --limit 20 --report {page}</code></p>") in page.read_text(encoding="utf-8")


def test_a_line_per_finished_run_when_stderr_is_not_a_terminal() -> None:
    code, _out, err = _invoke("--limit", "20", "--queue-by", "qos", "--compare", "placement=spread")
    assert code == 0, err
    done = [line for line in err.splitlines() if " done: " in line]
    assert [line.split(" (")[0] for line in done] == ["gpufleet simulate run: run 1/2 done: baseline",
                                                      "gpufleet simulate run: run 2/2 done: placement=spread"]


def test_a_spot_notice_saves_the_work_a_reclaim_would_lose(files: dict[str, str]) -> None:
    """``spot-notice``: the reclaimed nodes' gangs are drained with their grace period and keep their work;
    reclaims without a notice (the same seed) lose it."""
    base = ["--trace", files["trace"], "--cluster", files["cluster"], "--queue-by", "vc", "--format", "json",
            "--seed", "5", "--checkpoint", "0"]

    def outages(*failures: str) -> dict[str, float]:
        code, out, err = _invoke(*base, "--failures", ",".join(("spot-rate=20,spot-down=5m", *failures)))
        assert code == 0, err
        return dict(json.loads(out)["runs"][0]["outages"])

    sudden, noticed, short = outages(), outages("spot-notice=2m"), outages("spot-notice=2m", "grace=5m")
    assert sudden["spot_reclaims"] > 0 and noticed["spot_reclaims"] > 0
    assert sudden["jobs_interrupted"] > 0 and noticed["jobs_interrupted"] > 0  # the requeues
    assert sudden["gpu_hours_lost"] > 0 and noticed["gpu_hours_lost"] == 0
    assert short["gpu_hours_lost"] > 0  # a grace longer than the notice: no checkpoint in time
