"""The ledger's face: every name resolves; the records alone do not import SQLAlchemy; the migrations ship."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import gpufleet.ledger
from gpufleet.ledger import EndReason, IntervalEnd, IntervalStart, UtilisationSample, gpu_amount


def test_every_name_resolves() -> None:
    for name in gpufleet.ledger.__all__:
        assert getattr(gpufleet.ledger, name) is not None, name
    with pytest.raises(AttributeError):
        _ = gpufleet.ledger.no_such_name  # type: ignore[attr-defined]


def test_the_records_do_not_import_the_database_clients() -> None:
    code = ("import sys; from gpufleet.ledger import IntervalStart, IntervalEnd, reconcile, BufferedWriter; "
            "print(sorted(m for m in ('sqlalchemy', 'alembic', 'psycopg') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_migrations_are_in_the_package() -> None:
    folder = Path(gpufleet.ledger.__file__).parent / "migrations"
    assert (folder / "env.py").is_file() and (folder / "versions" / "r0001_intervals.py").is_file()


def test_gpu_amounts_and_record_checks() -> None:
    assert gpu_amount(4) == 4.0 and gpu_amount(1, blocks=30) == 0.3
    with pytest.raises(ValueError, match="gpu_blocks"):
        IntervalStart("u", 1.0, "ns", "p", "q", "n", 1.01, gpu_blocks=101)
    with pytest.raises(ValueError, match="before bound_at"):
        IntervalEnd("u", 10.0, 5.0, EndReason.DELETED)
    with pytest.raises(ValueError, match="NUL"):
        IntervalStart("u", 1.0, "ns", "p\x00", "q", "n", 1.0)
    with pytest.raises(ValueError, match="gpu_util"):
        UtilisationSample("u", 1.0, 2.0, gpu_util=float("nan"))
    assert IntervalEnd("u", 1.0, 2.0, "idle").reason is EndReason.IDLE  # type: ignore[arg-type]
    assert hash(IntervalStart("u", 1.0, "ns", "p", "q", "n", 1.0, labels={"a": "b"})) is not None
