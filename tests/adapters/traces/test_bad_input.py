"""Broken trace files: one InputError line ``FILE:LINE: field: problem``; skip_bad_rows counts them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gpufleet.adapters.errors import InputError
from gpufleet.adapters.traces import load_nodes, load_summary_table, load_trace, load_vc_gpu_counts

WriteCsv = Callable[..., Path]

OPENB_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
OPENB_OK = "p0,4000,8192,1,500,,LS,Running,0,100,10\n"
PHILLY_HEADER = "timestamp,duration,num_gpus,gpu_time,cluster\n"
PHILLY_OK = "2017-10-09 07:01:55,66.0,1,66.0,11cb48\n"
NODES_HEADER = "sn,cpu_milli,memory_mib,gpu,model\n"


def _fails(path: Path, loader: Callable[..., object], line: int, field: str, problem: str, **kwargs: object) -> None:
    with pytest.raises(InputError) as err:
        loader(path, **kwargs)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"{path}:{line}: {field}: "), message
    assert problem in message, message


@pytest.mark.parametrize(
    ("row", "field", "problem"),
    [
        ("p1,4000,8192,1,x,,LS,Running,0,100,10", "gpu_milli", 'must be an integer, got "x"'),
        ("p1,4000,8192,1,1001,,LS,Running,0,100,10", "gpu_milli", "must be <= 1000, got 1001"),
        ("p1,-5,8192,1,500,,LS,Running,0,100,10", "cpu_milli", "must not be negative, got -5"),
        ("p1,4000,8192,2,500,,LS,Running,0,100,10", "gpu_milli", "a fraction of a GPU (500) needs num_gpu 1, got 2"),
        ("p1,4000,8192,0,500,,LS,Running,0,100,10", "gpu_milli", "must be 0 when num_gpu is 0"),
        ("p1,4000,8192,1,0,,LS,Running,0,100,10", "gpu_milli", "must be 1..1000 when num_gpu is 1"),
        ("p1,4000,8192,1.5,1000,,LS,Running,0,100,10", "num_gpu", 'must be a whole number, got "1.5"'),
        ("p1,4000,8192,1,500,,LS,Running,,100,10", "creation_time", "required value missing"),
        ("p1,4000,8192,1,500,,LS,Running,nan,100,10", "creation_time", 'must be a number, got "nan"'),
        ("p1,4000,8192,1,500,,LS,Running,50,100,10", "scheduled_time", "10 is before creation_time 50"),
        ("p1,4000,8192,1,500,,LS,Running,0,5,10", "deletion_time", "5 is before scheduled_time 10"),
        ("p1,4000,8192,1,500,A||B,LS,Running,0,100,10", "gpu_spec", 'separated by "|"'),
        ("p1,4000,8192,1,500,,LS,Running,0,100", "row", "expected 11 columns, got 10"),
        (",4000,8192,1,500,,LS,Running,0,100,10", "name", "required value missing"),
        ("p0,4000,8192,1,500,,LS,Running,0,100,10", "name", '"p0" repeats the one on line 2'),
    ],
)
def test_openb_bad_rows(write_csv: WriteCsv, row: str, field: str, problem: str) -> None:
    path = write_csv(OPENB_HEADER + OPENB_OK + row + "\n")
    _fails(path, load_trace, 3, field, problem)
    jobs, report = load_trace(path, skip_bad_rows=True)
    assert [j.name for j in jobs] == ["p0"] and report.rows == 1 and report.skipped == 1
    assert report.first_errors[0].startswith(f"{path}:3: {field}: ")


def test_skip_bad_rows_counts_and_keeps_the_first_five(write_csv: WriteCsv) -> None:
    bad = [f"b{i},4000,8192,1,{1001 + i},,LS,Running,0,100,10\n" for i in range(8)]
    path = write_csv(OPENB_HEADER + OPENB_OK + "".join(bad) + "p9,1,1,0,0,,BE,Failed,5,6,5\n")
    jobs, report = load_trace(path, skip_bad_rows=True)
    assert [j.name for j in jobs] == ["p0", "p9"]
    assert (report.rows, report.skipped, len(report.first_errors)) == (2, 8, 5)
    assert report.first_errors[4] == f"{path}:7: gpu_milli: must be <= 1000, got 1005"


def test_blank_lines_are_ignored_and_line_numbers_stay_physical(write_csv: WriteCsv) -> None:
    path = write_csv(OPENB_HEADER + "\n" + OPENB_OK + "\n\n" + "p1,x,1,0,0,,BE,Failed,0,1,0\n")
    _fails(path, load_trace, 6, "cpu_milli", 'must be an integer, got "x"')


@pytest.mark.parametrize(
    ("row", "field", "problem"),
    [
        ("2017-13-09 07:01:55,66.0,1,66.0,vc", "timestamp", "ISO-8601"),
        ("2017-10-09 07:01:55,-1,1,66.0,vc", "duration", 'must not be negative, got "-1"'),
        ("2017-10-09 07:01:55,inf,1,66.0,vc", "duration", 'must be a number, got "inf"'),
        ("2017-10-09 07:01:55,66.0,two,66.0,vc", "num_gpus", 'must be an integer, got "two"'),
        ("2017-10-09 07:01:55,66.0,1,66.0,", "cluster", "required value missing"),
    ],
)
def test_philly_bad_rows(write_csv: WriteCsv, row: str, field: str, problem: str) -> None:
    path = write_csv(PHILLY_HEADER + PHILLY_OK + row + "\n")
    _fails(path, load_trace, 3, field, problem)
    assert load_trace(path, skip_bad_rows=True)[1].skipped == 1


def test_philly_submit_times_are_relative_to_the_earliest(write_csv: WriteCsv) -> None:
    path = write_csv(PHILLY_HEADER + PHILLY_OK + "2017-10-09 07:00:00,5,8,40,vcb\n")
    jobs, _ = load_trace(path)
    assert [(j.name, j.submit_s, j.num_gpu, j.attrs["vc"]) for j in jobs] == [
        ("philly-00001", 115.0, 1, "11cb48"),
        ("philly-00002", 0.0, 8, "vcb"),
    ]


@pytest.mark.parametrize(
    ("row", "field", "problem"),
    [
        ("n1,8000,1024,2,", "model", "required for a node with 2 GPUs"),
        ("n1,8000,1024,65,T4", "gpu", "must be <= 64, got 65"),
        ("n1,8000,-1,2,T4", "memory_mib", "must not be negative"),
        ("n0,8000,1024,2,T4", "sn", '"n0" repeats the one on line 2'),
    ],
)
def test_node_list_bad_rows(write_csv: WriteCsv, row: str, field: str, problem: str) -> None:
    path = write_csv(NODES_HEADER + "n0,8000,1024,0,\n" + row + "\n")
    _fails(path, load_nodes, 3, field, problem)


# --------------------------------------------------------------------------------- whole files


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"nope\.csv: no such file$"):
        load_trace(tmp_path / "nope.csv")


def test_directory(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="is a directory"):
        load_nodes(tmp_path)


@pytest.mark.parametrize("text", ["", "\n\n  \n", "\ufeff"])
def test_empty_file(write_csv: WriteCsv, text: str) -> None:
    path = write_csv(text)
    _fails(path, load_trace, 1, "header", "empty file")
    _fails(path, load_nodes, 1, "header", "empty file")


def test_header_only_is_an_empty_trace(write_csv: WriteCsv) -> None:
    jobs, report = load_trace(write_csv(PHILLY_HEADER))
    assert jobs == [] and report.rows == 0


def test_wrong_header(write_csv: WriteCsv) -> None:
    path = write_csv("foo,bar\n1,2\n")
    _fails(path, load_trace, 1, "header", 'not a job trace format gpufleet knows (openb-pods, philly, dlrm, generic); got "foo,bar"')
    _fails(path, load_nodes, 1, "header", "not a node list format gpufleet knows")


def test_missing_column_with_an_explicit_kind(write_csv: WriteCsv) -> None:
    path = write_csv("timestamp,duration,num_gpus,cluster\n" + "2017-10-09 07:01:55,66.0,1,vc\n")
    _fails(path, load_trace, 1, "header", "expected columns timestamp,duration,num_gpus,gpu_time,cluster", kind="philly")


def test_node_list_given_to_load_trace(write_csv: WriteCsv) -> None:
    path = write_csv(NODES_HEADER + "n0,8000,1024,0,\n")
    _fails(path, load_trace, 1, "header", "this is a node list (openb-nodes; read it with load_nodes), not a job trace")
    assert load_nodes(path)[1].kind == "openb-nodes"
    _fails(write_csv(PHILLY_HEADER), load_nodes, 1, "header", "this is a job trace (philly; read it with load_trace)")


def test_unknown_kind(write_csv: WriteCsv) -> None:
    with pytest.raises(InputError, match=r'unknown job trace kind "csv" \(expected one of openb-pods, philly'):
        load_trace(write_csv(PHILLY_HEADER), kind="csv")
    with pytest.raises(InputError, match="unknown node list kind"):
        load_nodes(write_csv(PHILLY_HEADER), kind="philly")


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.csv"
    path.write_bytes(PHILLY_HEADER.encode() + "2017-10-09 07:01:55,66.0,1,66.0,caf\xe9\n".encode("latin-1"))
    _fails(path, load_trace, 2, "file", "not UTF-8 text (byte 0xe9)")


def test_nul_byte(tmp_path: Path) -> None:
    path = tmp_path / "bin.csv"
    path.write_bytes(PHILLY_HEADER.encode() + PHILLY_OK.encode() + b"\x00\x01\x02\n")
    _fails(path, load_trace, 3, "file", "NUL byte")


def test_malformed_csv_quoting(write_csv: WriteCsv) -> None:
    path = write_csv(PHILLY_HEADER + 'a"b,"c' + "x" * 200_000 + "\n")  # a field over the csv module's limit
    with pytest.raises(InputError, match=r":\d+: row: malformed CSV: "):
        load_trace(path, kind="philly", skip_bad_rows=True)


def test_pai_machines_bad_row(write_csv: WriteCsv) -> None:
    path = write_csv("m0,CPU,96,512,0\nm1,T4,96,512,2\nm2,K80,96,512,8\n")
    _fails(path, load_nodes, 3, "gpu_type", "must be one of CPU, MISC, P100, T4, V100, V100M32", kind="pai-machines")
    nodes, report = load_nodes(path, skip_bad_rows=True, kind="pai-machines")
    assert [n.name for n in nodes] == ["m0", "m1"] and report.skipped == 1


def test_helios_total_is_checked(write_csv: WriteCsv) -> None:
    path = write_csv("date,vcA,vcB,total\n2020-04-01,8,16,24\n2020-04-02,8,16,25\n")
    _fails(path, load_vc_gpu_counts, 3, "total", "25 is not the sum of the VC columns (24)")
    counts, report = load_vc_gpu_counts(path, skip_bad_rows=True)
    assert counts.dates == ("2020-04-01",) and report.skipped == 1


def test_summary_table_bad_number(write_csv: WriteCsv) -> None:
    path = write_csv("id,gpu_num\nVenus,lots\n")
    _fails(path, load_summary_table, 2, "gpu_num", 'must be a number, got "lots"')


def test_philly_fast_and_row_by_row_paths_agree(write_csv: WriteCsv) -> None:
    """A clean file is converted column-wise; one unusual (but valid) cell sends it row by row."""
    rows = [f"2017-{9 + i % 3:02d}-{1 + i % 28:02d} {i % 24:02d}:{i % 60:02d}:{(7 * i) % 60:02d},{i * 37.5},{2 ** (i % 4)},{i * 37.5 * 2 ** (i % 4)},vc{i % 5}\n" for i in range(60)]
    fast, _ = load_trace(write_csv(PHILLY_HEADER + "".join(rows), "fast.csv"))
    odd = "2017-09-01T00:00:00,1e2,1,100,vcx\n"  # ISO 'T' and an exponent: valid, not the plain form
    slow, report = load_trace(write_csv(PHILLY_HEADER + "".join(rows) + odd, "slow.csv"))
    assert report.rows == 61 and slow[:60] == fast and slow[60].duration_s == 100.0
    assert [j.submit_s for j in fast] == [j.submit_s for j in slow[:60]]


def test_unusable_path() -> None:
    with pytest.raises(InputError, match=r'^"a\\x00b": cannot read: embedded null byte$'):
        load_trace("a\x00b")
