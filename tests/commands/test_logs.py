"""``--log-format text|json`` and the log levels of the long-running commands."""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from gpufleet.cli import main
from gpufleet.commands.logs import REQUEST_LOGGERS, JsonFormatter, StderrHandler, configure_logging


@contextlib.contextmanager
def bare_root() -> Iterator[None]:
    """A root logger without handlers (pytest's own set aside), as a command starts with; restored after."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    levels = {name: logging.getLogger(name).level for name in REQUEST_LOGGERS}
    for handler in handlers:
        root.removeHandler(handler)
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)
    for name, old in levels.items():
        logging.getLogger(name).setLevel(old)


def test_logging_configured_elsewhere_is_left_alone() -> None:
    root = logging.getLogger()
    foreign = logging.NullHandler()
    root.addHandler(foreign)
    before = (list(root.handlers), root.level, logging.getLogger("httpx").level)
    try:
        assert configure_logging("debug", "json") is None
        assert (list(root.handlers), root.level, logging.getLogger("httpx").level) == before
    finally:
        root.removeHandler(foreign)


def _record(**extra: object) -> logging.LogRecord:
    record = logging.LogRecord("gpufleet.kube.controller.loop", logging.INFO, "loop.py", 1,
                               "bound pod %s to node %s", ("ml/p0", "n1"), None)
    record.created = 1767225600.25  # 2026-01-01T00:00:00.250Z
    record.__dict__.update(extra)
    return record


def test_json_formatter_writes_one_object_per_line() -> None:
    line = JsonFormatter().format(_record(pod="ml/p0", gpus=[0, 1]))
    assert "\n" not in line
    assert json.loads(line) == {
        "timestamp": "2026-01-01T00:00:00.250Z", "level": "INFO", "logger": "gpufleet.kube.controller.loop",
        "message": "bound pod ml/p0 to node n1", "pod": "ml/p0", "gpus": [0, 1]}  # fmt: skip


def test_json_formatter_carries_the_traceback() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = _record()
        record.exc_info = sys.exc_info()
    out = json.loads(JsonFormatter().format(record))
    assert out["exception"].startswith("Traceback (most recent call last):")
    assert out["exception"].endswith("ValueError: boom")


def test_configure_json(capsys: pytest.CaptureFixture[str]) -> None:
    with bare_root():
        _configure_json(capsys)


def _configure_json(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("info", "json")
    configure_logging("info", "json")  # a second call replaces its handler: one line per record
    assert sum(isinstance(h, StderrHandler) for h in logging.getLogger().handlers) == 1
    logging.getLogger("gpufleet.test").info("cycle %d", 3, extra={"cycle": 3})
    logging.getLogger("gpufleet.test").debug("not shown at info")
    [line] = capsys.readouterr().err.splitlines()
    out = json.loads(line)
    assert (out["level"], out["logger"], out["message"], out["cycle"]) == ("INFO", "gpufleet.test", "cycle 3", 3)


def test_the_http_libraries_request_lines_are_debug_only(capsys: pytest.CaptureFixture[str]) -> None:
    with bare_root():
        _request_lines(capsys)


def _request_lines(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("info", "text")
    for name in ("aiohttp.access", "httpx", "httpx2"):
        logging.getLogger(name).info("GET /api/v1/pods 200")
    logging.getLogger("httpx").warning("connection reset")
    [line] = capsys.readouterr().err.splitlines()  # the request lines are not shown at info
    assert line.endswith(" WARNING httpx: connection reset")
    configure_logging("debug", "json")
    logging.getLogger("aiohttp.access").info("GET /api/v1/pods 200")
    out = json.loads(capsys.readouterr().err)
    assert (out["level"], out["logger"], out["message"]) == ("DEBUG", "aiohttp.access", "GET /api/v1/pods 200")


@pytest.mark.parametrize("command", ["controller", "webhook", "device-plugin"])
def test_every_long_running_command_takes_log_format(command: str) -> None:
    result = CliRunner().invoke(main, [command, "--help"])
    assert result.exit_code == 0
    assert "--log-format [text|json]" in result.stdout
    bad = CliRunner().invoke(main, [command, "--log-format", "xml"])
    assert bad.exit_code == 2
    assert bad.stderr == (f"gpufleet {command}: Invalid value for '--log-format': 'xml' is not one of "
                          "'text', 'json'.\n")
