"""The generic job-history CSV: the documented format, its errors, and fuzzing (only InputError escapes)."""

from __future__ import annotations

import re
import string
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.adapters.errors import InputError
from gpufleet.adapters.traces import TraceJob, dump_generic_csv, load_trace

WriteCsv = Callable[..., Path]
DOCS = Path(__file__).resolve().parents[3] / "docs" / "trace-formats.md"


def test_the_documented_example_loads(tmp_path: Path) -> None:
    text = DOCS.read_text()
    example = re.search(r"```csv\n(.*?)```", text, re.S)
    assert example is not None
    path = tmp_path / "example.csv"
    path.write_text(example.group(1))
    jobs, report = load_trace(path)
    assert report.kind == "generic" and report.rows == 2
    train, notebook = jobs
    assert (train.name, train.submit_s, train.duration_s, train.num_gpu, train.gpu_milli) == ("train-1", 0.0, 3600.0, 8, 1000)
    assert (train.cpu_milli, train.memory_mib, train.priority) == (32_000, 256 * 1024, 50)
    assert train.gpu_models == ("A100-80GB", "H100")
    assert train.attrs == {"project": "llm", "queue": "research", "user": "alice"}
    assert (notebook.submit_s, notebook.duration_s, notebook.num_gpu, notebook.gpu_milli) == (300.0, None, 1, 250)
    assert notebook.fractional and notebook.priority is None and notebook.gpu_models == ()


def test_seconds_defaults_and_milli_columns(write_csv: WriteCsv) -> None:
    path = write_csv(
        "submit_time,gpus,cpu_milli,memory_mib,checkpoint_interval,vc,group\n"
        "1700000100,0,500,1024,,vc1,\n"
        "1700000000.5,4,,,600,,g\n"
    )
    a, b = load_trace(path)[0]
    assert (a.name, a.submit_s, a.num_gpu, a.gpu_milli, a.cpu_milli, a.memory_mib) == ("job-000001", 99.5, 0, 0, 500, 1024)
    assert a.attrs == {"vc": "vc1"} and a.checkpoint_s is None and a.duration_s is None
    assert (b.name, b.submit_s, b.num_gpu, b.gpu_milli, b.checkpoint_s, b.attrs) == ("job-000002", 0.0, 4, 1000, 600.0, {"group": "g"})


def test_start_and_end_times(write_csv: WriteCsv) -> None:
    path = write_csv(
        "name,submit_time,start_time,end_time,gpus\n"
        "a,2026-03-01T08:00:00Z,2026-03-01T08:10:00Z,2026-03-01T09:10:00Z,1\n"
        "b,2026-03-01T09:00:00+01:00,,2026-03-01T08:30:00Z,2\n"  # 08:00Z; no start: end - submit
        "c,2026-03-01 07:00:00,,,1\n"  # no zone: UTC
    )
    a, b, c = load_trace(path)[0]
    assert (a.submit_s, a.duration_s, a.attrs) == (3600.0, 3600.0, {"wait_s": "600"})
    assert (b.submit_s, b.duration_s) == (3600.0, 1800.0)
    assert (c.submit_s, c.duration_s) == (0.0, None)


def test_quantities(write_csv: WriteCsv) -> None:
    path = write_csv("submit_time,gpus,cpu,memory\n0,1,500m,1Gi\n0,1,2,1\n")  # plain memory = bytes: 1 MiB rounded up
    a, b = load_trace(path)[0]
    assert (a.cpu_milli, a.memory_mib, b.cpu_milli, b.memory_mib) == (500, 1024, 2000, 1)


@pytest.mark.parametrize(
    ("header", "problem"),
    [
        ("submit_time,gpu\n", 'unknown column "gpu" (known: name, submit_time,'),
        ("submit_time,duration\n", 'required column "gpus" missing'),
        ("submit_time,gpu\n", "prefix a column with 'attr.' to keep it"),
        ("gpus,duration\n", 'required column "submit_time" missing'),
        ("submit_time,gpus,gpus\n", 'column "gpus" appears twice'),
        ("submit_time,gpus,cpu,cpu_milli\n", 'give either "cpu" or "cpu_milli", not both'),
        ("submit_time,gpus,duration,end_time\n", 'give either "duration" or "end_time", not both'),
        ("submit_time,gpus,attr.\n", 'column "attr." needs a key'),
    ],
)
def test_bad_headers(write_csv: WriteCsv, header: str, problem: str) -> None:
    path = write_csv(header + "0,1,2\n")
    with pytest.raises(InputError) as err:
        load_trace(path, kind="generic")
    assert str(err.value).startswith(f"{path}:1: header: ") and problem in str(err.value)


@pytest.mark.parametrize(
    ("row", "field", "problem"),
    [
        ("x,1,,,,,", "submit_time", "must be seconds or an ISO-8601 date-time"),
        ("2026-03-01T08:00:00,1,,,,,", "submit_time", "the file's times are seconds"),
        ("5,-1,,,,,", "gpus", "must not be negative, got -1"),
        ("5,1,1200,,,,", "gpu_milli", "must be <= 1000, got 1200"),
        ("5,2,500,,,,", "gpu_milli", "a fraction of a GPU (500) needs gpus 1, got 2"),
        ("5,1,,-3,,,", "duration", 'must not be negative, got "-3"'),
        ("5,1,,,lots,,", "cpu", 'malformed quantity "lots"'),
        ("5,1,,,,-1Gi,", "memory", "negative quantity"),
        ("5,1,,,,,high", "priority", 'must be an integer, got "high"'),
        ("5,1,,,,,9999999999", "priority", "must be <= 2147483647"),
        (",1,,,,,", "submit_time", "required value missing"),
    ],
)
def test_bad_rows(write_csv: WriteCsv, row: str, field: str, problem: str) -> None:
    path = write_csv("submit_time,gpus,gpu_milli,duration,cpu,memory,priority\n0,1,,,,,\n" + row + "\n")
    with pytest.raises(InputError) as err:
        load_trace(path)
    assert str(err.value).startswith(f"{path}:3: {field}: ") and problem in str(err.value), str(err.value)
    jobs, report = load_trace(path, skip_bad_rows=True)
    assert len(jobs) == 1 and report.skipped == 1 and report.first_errors == (str(err.value),)


def test_bad_names_and_repeats(write_csv: WriteCsv) -> None:
    path = write_csv("name,submit_time,gpus\na,0,1\nns/pod,0,1\na,0,1\n")
    jobs, report = load_trace(path, skip_bad_rows=True)
    assert [j.name for j in jobs] == ["a"] and report.skipped == 2
    assert report.first_errors[0].endswith(':3: name: must be letters, digits, \'.\', \'_\' or \'-\' (at most 253), got "ns/pod"')
    assert report.first_errors[1].endswith(':4: name: "a" repeats the one on line 2')


def test_checkpoint_interval_must_be_positive(write_csv: WriteCsv) -> None:
    with pytest.raises(InputError, match=r":2: checkpoint_interval: must be > 0 seconds"):
        load_trace(write_csv("submit_time,gpus,checkpoint_interval\n0,1,0\n"))


# ----------------------------------------------------------------------------------- properties

_text = st.text(alphabet=string.ascii_letters + string.digits + "._-", min_size=1, max_size=12)
_attr_value = st.text(alphabet=string.ascii_letters + string.digits + " ,\"'|:/", min_size=1, max_size=10).map(str.strip).filter(bool)


@st.composite
def _jobs(draw: st.DrawFn) -> list[TraceJob]:
    names = draw(st.lists(_text.filter(lambda s: s[0].isalnum()), min_size=1, max_size=8, unique=True))
    out = []
    for i, name in enumerate(names):
        num_gpu = draw(st.integers(0, 16))
        gpu_milli = 0 if num_gpu == 0 else draw(st.integers(1, 1000)) if num_gpu == 1 else 1000
        out.append(
            TraceJob(
                name=name,
                submit_s=0.0 if i == 0 else draw(st.floats(0, 1e9, allow_nan=False)),
                duration_s=draw(st.none() | st.floats(0, 1e8, allow_nan=False)),
                num_gpu=num_gpu,
                gpu_milli=gpu_milli,
                cpu_milli=draw(st.integers(0, 10**6)),
                memory_mib=draw(st.integers(0, 10**7)),
                gpu_models=tuple(draw(st.lists(_text, max_size=3, unique=True))),
                priority=draw(st.none() | st.integers(-(2**31), 2**31 - 1)),
                checkpoint_s=draw(st.none() | st.floats(0.001, 1e6, allow_nan=False)),
                attrs=draw(st.dictionaries(st.sampled_from(["queue", "user", "vc", "team", "x y"]), _attr_value, max_size=3)),
            )
        )
    return out


@given(jobs=_jobs())
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_dump_and_load_round_trip(tmp_path: Path, jobs: list[TraceJob]) -> None:
    path = tmp_path / "round.csv"
    path.write_text(dump_generic_csv(jobs))
    loaded, report = load_trace(path)
    assert report.kind == "generic" and loaded == jobs


_CELLS = st.sampled_from(["", "0", "1", "-1", "1.5", "1e400", "nan", "1000", "1001", "2026-03-01T08:00:00Z", "x", '"', "4Gi", "500m", "A|B", "||", "\t", "\x00"])
_COLUMNS = st.sampled_from(["name", "submit_time", "gpus", "gpu_milli", "duration", "cpu", "memory_mib", "priority", "end_time", "start_time", "gpu_model", "queue", "attr.k", "bogus"])


@given(
    header=st.lists(_COLUMNS, min_size=0, max_size=8),
    rows=st.lists(st.lists(_CELLS, max_size=9), max_size=6),
    skip=st.booleans(),
)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_fuzz_structured_cells(tmp_path: Path, header: list[str], rows: list[list[str]], skip: bool) -> None:
    text = ",".join(header) + "\n" + "".join(",".join(row) + "\n" for row in rows)
    path = tmp_path / "fuzz.csv"
    path.write_text(text)
    try:
        jobs, report = load_trace(path, kind="generic", skip_bad_rows=skip)
    except InputError as err:
        assert "\n" not in str(err) and str(err).startswith(str(path))
        return
    assert report.rows == len(jobs) and report.rows + report.skipped <= len(rows)
    for job in jobs:
        assert job.num_gpu >= 0 and 0 <= job.gpu_milli <= 1000 and job.submit_s >= 0
        assert job.gpu_milli == 1000 or job.num_gpu <= 1


@given(data=st.binary(max_size=300), skip=st.booleans())
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_fuzz_raw_bytes(tmp_path: Path, data: bytes, skip: bool) -> None:
    path = tmp_path / "raw.csv"
    path.write_bytes(b"submit_time,gpus,duration,gpu_milli,name\n" + data)
    try:
        load_trace(path, skip_bad_rows=skip)
    except InputError as err:
        assert "\n" not in str(err)


def test_a_missing_required_column_is_named_without_an_explicit_kind(write_csv: WriteCsv) -> None:
    path = write_csv("name,submit_time,duration\na,0,5\n")
    with pytest.raises(InputError, match=r':1: header: required column "gpus" missing$'):
        load_trace(path)
