"""Logging of the long-running commands (``controller``, ``webhook``, ``device-plugin``).

``--log-level`` and ``--log-format text|json``. ``json`` writes one JSON object per line on stderr:
``timestamp`` (RFC 3339, UTC, milliseconds), ``level``, ``logger``, ``message``, then every extra
field the call passed (``log.info(..., extra={"pod": key})``) and ``exception`` (the traceback) when
there is one. The HTTP libraries' per-request lines (``aiohttp.access``, ``httpx``, ``httpx2``,
``httpcore``, ``lightkube``) are debug lines: shown, as ``DEBUG``, only with ``--log-level debug``.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

import click

__all__ = [
    "REQUEST_LOGGERS",
    "TEXT_FORMAT",
    "JsonFormatter",
    "configure_logging",
    "log_format_option",
    "log_level_option",
]

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# Loggers of the HTTP libraries that write a line per request (at info): demoted to debug.
REQUEST_LOGGERS = ("aiohttp.access", "httpx", "httpx2", "httpcore", "lightkube")

# Attributes every LogRecord has: anything else on a record came from ``extra=``.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}

log_level_option = click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]),
                                default="info", show_default=True)
log_format_option = click.option("--log-format", type=click.Choice(["text", "json"]), default="text",
                                 show_default=True,
                                 help="json: one JSON object per line (timestamp, level, logger, message, "
                                      "extra fields).")


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "timestamp": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in out:
                out[key] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exception"] = record.exc_text
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, default=str, ensure_ascii=False)


class _DemoteToDebug(logging.Filter):
    """Records of a per-request logger read as debug (they pass only where debug is on)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.INFO:
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


_DEMOTE = _DemoteToDebug()


class StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to the ``sys.stderr`` of the moment (not the one at start-up)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def configure_logging(level: str, log_format: str = "text") -> logging.Handler | None:
    """Log ``level`` and above to stderr as ``text`` or ``json``; returns the handler installed on
    the root logger (replacing the one an earlier call installed). Where something else already
    configured logging (a handler of its own on the root logger: an embedding program, pytest),
    nothing is changed and None returned, as ``logging.basicConfig`` does."""
    root = logging.getLogger()
    if any(not isinstance(h, StderrHandler) for h in root.handlers):
        return None
    handler = StderrHandler()
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    debug = root.level <= logging.DEBUG
    for name in REQUEST_LOGGERS:
        logger = logging.getLogger(name)
        logger.setLevel(logging.DEBUG if debug else logging.WARNING)
        if _DEMOTE not in logger.filters:
            logger.addFilter(_DEMOTE)
    return handler
