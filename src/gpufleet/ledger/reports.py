"""Reports over the usage ledger: GPU-hours allocated and used, cost, preemption losses and waits per
group, the worst idle allocations, and the time series the HTML report draws.

Everything is aggregated in the database, in SQLAlchemy Core expressions that both dialects (SQLite
and PostgreSQL) run: one ``GROUP BY`` query for the sums, one for the wait percentiles (window
functions: ``ROW_NUMBER`` and ``COUNT`` over each group, the nearest-rank rows picked in SQL, so that
no per-row data comes back), one ``ORDER BY .. LIMIT`` for the idle list. Python sees one row per group.

Counting (docs/semantics-notes.md, "Usage ledger (accounting)"): an interval is charged for its part
inside [since, until), times its GPU amount; an open interval counts up to ``until``, which is never
later than the report's ``now``. Used GPU-hours are allocated GPU-hours times the interval's mean GPU
utilisation where the ledger has one; intervals without telemetry are counted as *unmeasured*, never
guessed, and efficiency is used over measured GPU-hours.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Float,
    String,
    and_,
    case,
    column,
    func,
    literal,
    or_,
    select,
    union_all,
    values,
)
from sqlalchemy.sql import FromClause

from gpufleet.adapters.errors import InputError, describe
from gpufleet.adapters.prices import PriceList
from gpufleet.adapters.times import parse_when
from gpufleet.ledger._schema import intervals, labels
from gpufleet.ledger.model import EndReason, to_micros
from gpufleet.ledger.store import LedgerStore

__all__ = [
    "GROUP_KEYS",
    "IdleAllocation",
    "IdleReport",
    "UsageReport",
    "UsageRow",
    "UsageSeries",
    "WaitCdf",
    "idle_report",
    "parse_group_by",
    "parse_when",
    "usage_report",
    "usage_series",
    "wait_cdfs",
]

_IC = intervals.c
_MICROS = 1_000_000
_US_PER_HOUR = 3_600_000_000.0
_BYTES_PER_GIB = 2.0**30
PREEMPTION_REASONS = (EndReason.EVICTED_PREEMPTION.value, EndReason.EVICTED_RECLAIM.value)
PERCENTILES = (50, 95, 99)

GROUP_KEYS: Mapping[str, ColumnElement[Any]] = MappingProxyType({
    "project": _IC.project,
    "queue": _IC.queue,
    "user": _IC.submitter,
    "namespace": _IC.namespace,
    "gpu-model": _IC.gpu_model,
    "node": _IC.node,
    "priority-class": _IC.priority_class,
    "pod-group": _IC.pod_group,
    "capacity-type": func.coalesce(_IC.capacity_type, "on-demand"),
})
LABEL_PREFIX = "label:"
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


# ------------------------------------------------------------------------------------------ input


def parse_group_by(text: str, option: str = "--group-by") -> tuple[str, ...]:
    """The group keys of ``project,queue,label:cost-center`` (:data:`GROUP_KEYS` or ``label:KEY``, each
    once); :class:`InputError` naming the option and the key for anything else."""
    keys: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if part.startswith(LABEL_PREFIX):
            label = part.removeprefix(LABEL_PREFIX)
            if len(label) > 317 or not _LABEL_KEY.match(label):
                raise InputError(f"{option}: {describe(part)}: not a label key (label:KEY, e.g. label:cost-center)")
        elif part not in GROUP_KEYS:
            raise InputError(f"{option}: unknown key {describe(part)}; use {', '.join(GROUP_KEYS)} or label:KEY")
        if part in keys:
            raise InputError(f"{option}: {describe(part)} given twice")
        keys.append(part)
    return tuple(keys)




# ------------------------------------------------------------------------------------------ results


@dataclass(frozen=True, slots=True)
class UsageRow:
    """One group's figures (``group`` holds its key values in the order of the report's keys; None: the
    interval has no value for that key). Hours are GPU-hours; waits are seconds (None: no wait known)."""

    group: tuple[str | None, ...]
    intervals: int
    gpu_hours: float
    measured_gpu_hours: float
    used_gpu_hours: float
    preempted_gpu_hours: float
    cost: float | None = None
    gpu_cost: float | None = None
    preempted_cost: float | None = None
    waits: int = 0
    wait_p50_s: float | None = None
    wait_p95_s: float | None = None
    wait_p99_s: float | None = None

    @property
    def unmeasured_gpu_hours(self) -> float:
        """Allocated GPU-hours of intervals without utilisation samples (not counted as used, nor idle)."""
        return max(0.0, self.gpu_hours - self.measured_gpu_hours)

    @property
    def efficiency(self) -> float | None:
        """Used over measured GPU-hours (0..1, or above when DCGM reports over 100%); None: none measured."""
        return self.used_gpu_hours / self.measured_gpu_hours if self.measured_gpu_hours > 0 else None


@dataclass(frozen=True, slots=True)
class UsageReport:
    since: float
    until: float
    group_by: tuple[str, ...]
    rows: tuple[UsageRow, ...]
    total: UsageRow
    currency: str | None = None


@dataclass(frozen=True, slots=True)
class IdleAllocation:
    """An interval whose mean GPU utilisation is under the threshold. ``idle_gpu_hours`` is its GPU-hours
    in the window times (1 - mean utilisation): the allocation nobody used."""

    pod_uid: str
    namespace: str
    pod_name: str
    project: str | None
    submitter: str | None
    queue: str
    node: str
    gpu_model: str | None
    gpus: float
    bound_at: float
    ended_at: float | None
    gpu_hours: float
    gpu_util_mean: float
    idle_gpu_hours: float


@dataclass(frozen=True, slots=True)
class IdleReport:
    since: float
    until: float
    threshold: float
    min_hours: float
    rows: tuple[IdleAllocation, ...]


@dataclass(frozen=True, slots=True)
class UsageSeries:
    """Per time bucket (``starts``, each ``width_s`` long, the last one cut at ``until``): mean GPUs
    allocated, measured and used, and cost (or GPU-hours without prices) per project."""

    starts: tuple[float, ...]
    width_s: float
    allocated_gpus: tuple[float, ...]
    measured_gpus: tuple[float, ...]
    used_gpus: tuple[float, ...]
    per_project: Mapping[str | None, tuple[float, ...]] = field(default_factory=dict)
    priced: bool = False


@dataclass(frozen=True, slots=True)
class WaitCdf:
    """Nearest-rank points of one group's waits: (fraction of waits, seconds), at most ~200 of them."""

    group: str | None
    count: int
    points: tuple[tuple[float, float], ...]


# ------------------------------------------------------------------------------------- expressions


@dataclass(frozen=True, slots=True)
class _Window:
    since_us: int
    until_us: int

    @property
    def since(self) -> ColumnElement[int]:
        return literal(self.since_us, BigInteger)

    @property
    def until(self) -> ColumnElement[int]:
        return literal(self.until_us, BigInteger)


def _window(since: float, until: float | None, now: float) -> _Window:
    end = now if until is None else min(until, now)
    return _Window(to_micros(since), max(to_micros(end), to_micros(since)))


def _overlaps(lo: ColumnElement[int], hi: ColumnElement[int]) -> ColumnElement[bool]:
    return and_(_IC.bound_us < hi, or_(_IC.ended_us.is_(None), _IC.ended_us > lo))


def _clipped_us(lo: ColumnElement[int], hi: ColumnElement[int]) -> ColumnElement[Any]:
    """Microseconds of an interval inside [lo, hi) (for intervals that overlap it)."""
    start = case((_IC.bound_us > lo, _IC.bound_us), else_=lo)
    end = case((or_(_IC.ended_us.is_(None), _IC.ended_us > hi), hi), else_=_IC.ended_us)
    return end - start


def _gpu_rate(prices: PriceList, model: ColumnElement[Any], capacity: ColumnElement[Any]) -> ColumnElement[Any]:
    """The GPU-hour rate of a GPU model and capacity type (columns), as one CASE."""

    def by_capacity(on_demand: float, spot: float, reserved: float) -> ColumnElement[Any]:
        if on_demand == spot == reserved:
            return literal(on_demand, Float(53))
        return case((capacity == "spot", literal(spot, Float(53))),
                    (capacity == "reserved", literal(reserved, Float(53))), else_=literal(on_demand, Float(53)))

    default = prices.default
    otherwise = by_capacity(default.on_demand, default.spot, default.reserved)
    models = [(name, rates) for name, rates in sorted(prices.gpus.items()) if rates != default]
    if not models:
        return otherwise
    return case(*((model == name, by_capacity(r.on_demand, r.spot, r.reserved)) for name, r in models),
                else_=otherwise)


def _cost(prices: PriceList, gpu_hours: ColumnElement[Any], core_milli_hours: ColumnElement[Any],
          byte_hours: ColumnElement[Any], model: ColumnElement[Any], capacity: ColumnElement[Any],
          ) -> tuple[ColumnElement[Any], ColumnElement[Any]]:
    """(all, GPUs only): the cost of these GPU-hours, CPU millicore-hours and memory byte-hours."""
    gpu = gpu_hours * _gpu_rate(prices, model, capacity)
    other = (core_milli_hours * literal(prices.cpu_per_core_hour / 1000.0, Float(53))
             + byte_hours * literal(prices.memory_per_gib_hour / _BYTES_PER_GIB, Float(53)))
    return gpu + other, gpu


def _group_columns(group_by: Sequence[str]) -> tuple[FromClause, list[ColumnElement[Any]]]:
    """The FROM (intervals, outer-joined with one alias of the labels per label key) and the key columns."""
    source: FromClause = intervals
    columns: list[ColumnElement[Any]] = []
    for index, key in enumerate(group_by):
        if key.startswith(LABEL_PREFIX):
            alias = labels.alias(f"label_{index}")
            source = source.outerjoin(alias, and_(alias.c.pod_uid == _IC.pod_uid, alias.c.bound_us == _IC.bound_us,
                                                  alias.c.key == key.removeprefix(LABEL_PREFIX)))
            columns.append(alias.c.value.label(f"g{index}"))
        else:
            columns.append(GROUP_KEYS[key].label(f"g{index}"))
    return source, columns


def _sum(value: ColumnElement[Any]) -> ColumnElement[Any]:
    return func.coalesce(func.sum(value), 0.0)


# ------------------------------------------------------------------------------------------ reports


def usage_report(
    store: LedgerStore,
    *,
    since: float,
    until: float | None,
    now: float,
    group_by: Sequence[str] = (),
    prices: PriceList | None = None,
) -> UsageReport:
    """GPU-hours allocated, measured and used, cost, preemption losses and wait percentiles per group of
    ``group_by`` (keys as :func:`parse_group_by` returns), and the same over everything (``total``).
    Rows come largest allocation first (then by key, a missing value first).

    Two statements, each one pass over the intervals: the sums (:func:`_sums_statement`), which count
    each group's waits too, and the waits at the percentile ranks those counts give
    (:func:`_percentiles_statement`); each returns a few rows per group."""
    window = _window(since, until, now)
    keys = tuple(group_by)
    width = len(keys)
    priced = prices is not None
    with store.reading() as conn:
        sums = conn.execute(_sums_statement(window, keys, prices)).all()
        counts = {(None if row[0] else tuple(row[1:1 + width])): int(row[-1]) for row in sums}
        statement = _percentiles_statement(window, keys, counts)
        picked = [] if statement is None else conn.execute(statement).all()
    waits = _picks(picked, width, counts)
    rows, total = [], _empty()
    for row in sums:
        figures = _row(() if row[0] else tuple(row[1:1 + width]), row[1 + width:], priced, waits)
        if row[0]:
            total = figures
        else:
            rows.append(figures)
    rows.sort(key=lambda r: (-r.gpu_hours, tuple((v is not None, v or "") for v in r.group)))
    if not keys:
        rows = [total]
    return UsageReport(
        since=window.since_us / _MICROS, until=window.until_us / _MICROS, group_by=keys, rows=tuple(rows),
        total=total, currency=None if prices is None else prices.currency,
    )


def _empty() -> UsageRow:
    return UsageRow((), 0, 0.0, 0.0, 0.0, 0.0)


def _sums_statement(window: _Window, keys: Sequence[str], prices: PriceList | None) -> Any:
    """The sums per group and in total, in one statement: ``(is_total, g0.., intervals, gpu_hours,
    measured, used, preempted[, cost, gpu_cost, preempted_cost], waits)``.

    Two levels: one pass sums the intervals per group and per what prices them (GPU model, capacity
    type) and classifies them (measured, preempted), as a CTE; its few rows are then priced and summed
    per group, and again over all (the total). Each interval's clipped hours are computed once per sum,
    its rate once per class."""
    source, columns = _group_columns(keys)
    hours = _clipped_us(window.since, window.until) * literal(1.0 / _US_PER_HOUR, Float(53))
    classes: list[ColumnElement[Any]] = [(_IC.util_n > 0).label("measured"),
                                         _IC.end_reason.in_(PREEMPTION_REASONS).label("preempted")]
    sums: list[ColumnElement[Any]] = [
        func.count().label("n"),
        func.sum(hours * _IC.gpus).label("gpu_h"),
        func.sum(hours * _IC.gpus * _IC.util_sum / func.nullif(_IC.util_n, 0)).label("util_gpu_h"),
        func.sum(case((and_(_IC.bound_us >= window.since, _IC.created_us.is_not(None)), 1), else_=0)).label("w"),
    ]
    if prices is not None:
        classes += [_IC.gpu_model.label("model"), _IC.capacity_type.label("capacity")]
        sums.append(func.sum(hours * (_IC.cpu_milli * literal(prices.cpu_per_core_hour / 1000.0, Float(53))
                                      + _IC.memory_bytes * literal(prices.memory_per_gib_hour / _BYTES_PER_GIB,
                                                                   Float(53)))).label("other_cost"))
    per_class = (select(*columns, *classes, *sums).select_from(source).where(_overlaps(window.since, window.until))
                 .group_by(*columns, *classes).cte("per_class"))
    c = per_class.c
    figures: list[ColumnElement[Any]] = [
        func.coalesce(func.sum(c.n), 0).label("intervals"),
        _sum(c.gpu_h).label("gpu_hours"),
        _sum(case((c.measured, c.gpu_h), else_=0.0)).label("measured"),
        (_sum(c.util_gpu_h) / 100.0).label("used"),
        _sum(case((c.preempted, c.gpu_h), else_=0.0)).label("preempted"),
    ]
    if prices is not None:
        gpu_cost = c.gpu_h * _gpu_rate(prices, c.model, c.capacity)
        cost = gpu_cost + func.coalesce(c.other_cost, 0.0)
        figures += [_sum(cost).label("cost"), _sum(gpu_cost).label("gpu_cost"),
                    _sum(case((c.preempted, cost), else_=0.0)).label("preempted_cost")]
    figures.append(func.coalesce(func.sum(c.w), 0).label("waits"))  # bound in the window, created known
    keys_out = [c[f"g{i}"] for i in range(len(keys))]
    total = select(literal(1).label("is_total"), *(literal(None, String).label(f"g{i}") for i in range(len(keys))),
                   *figures)
    if not keys_out:
        return total
    grouped = select(literal(0).label("is_total"), *keys_out, *figures).group_by(*keys_out)
    return union_all(grouped, total)


MAX_PICK_PARAMETERS = 30_000  # bound parameters of the picks' VALUES (SQLite allows 32,766 in all)

# Group keys whose waits an index of the ledger holds in order (migration 0003: the report's usual
# grouping, a bill per project priced per GPU model); the waits over all have their own index.
ORDERED_WAITS: frozenset[tuple[str, ...]] = frozenset({(), ("project", "gpu-model")})


def _waits_bound_in(window: _Window, ordered: bool) -> ColumnElement[bool]:
    """The intervals whose waits a report counts: bound in the window, creation time known.

    ``ordered``: an index holds these waits in the order the window function numbers them (bound time
    as its last column), so the bound time is compared as ``bound_us + 0``: without statistics SQLite
    would take the range on ``ix_ledger_intervals_bound`` for a selective one and sort every wait it
    finds; this way it walks the waits' index in order, no sort (``EXPLAIN QUERY PLAN``: ``SCAN ..
    USING INDEX ix_ledger_intervals_waits``)."""
    bound: ColumnElement[int] = _IC.bound_us + 0 if ordered else _IC.bound_us
    return and_(bound >= window.since, bound < window.until, _IC.created_us.is_not(None))


def _wait() -> ColumnElement[int]:
    """An interval's wait, written as the waits' indexes are (``bound_us - created_us``)."""
    return (_IC.bound_us - _IC.created_us).label("wait_us")


def _percentiles_statement(
    window: _Window, keys: Sequence[str], counts: Mapping[tuple[str | None, ...] | None, int]
) -> Any | None:
    """The waits (bound - created, of the intervals bound in the window) at the nearest ranks,
    ceil(p * n / 100), over all and per group, in one statement: ``(is_total, g0.., wait_us, rank)``;
    None when there is no wait.

    Both dialects have window functions (SQLite since 3.25) but only PostgreSQL has ``percentile_disc``.
    So the waits are numbered in SQL (``ROW_NUMBER``) and only the rows at a wanted rank come back, at
    most 3 per group and 3 more. The numbering over all and the one per group are two SELECTs under a
    UNION ALL, one window each: one SELECT with both windows sorts its rows twice, while each SELECT
    alone walks an index in order where one holds its waits (:data:`ORDERED_WAITS`) and sorts once
    otherwise. The group ranks follow from the counts the sums gave, joined in as a VALUES list
    (numbering by count windows instead costs another sort; that is the fallback when the list would
    pass the dialects' limit on bound parameters)."""
    total = counts.get(None, 0)
    if not total:
        return None
    width = len(keys)
    over_all = (select(_wait(), func.row_number().over(order_by=_wait()).label("rank"))
                .where(_waits_bound_in(window, ordered=True)).subquery("over_all"))
    totals = select(literal(1).label("is_total"), *(literal(None, String).label(f"g{i}") for i in range(width)),
                    over_all.c.wait_us, over_all.c.rank).where(
        over_all.c.rank.in_(sorted({_rank(total, p) for p in PERCENTILES})))
    if not keys:
        return totals
    source, columns = _group_columns(keys)
    numbered: list[ColumnElement[Any]] = [func.row_number().over(partition_by=columns, order_by=_wait()).label("rank")]
    picks = sorted({(*group, _rank(n, p)) for group, n in counts.items() if group is not None and n
                    for p in PERCENTILES}, key=repr)
    by_count = len(picks) * (width + 1) > MAX_PICK_PARAMETERS
    if by_count:
        numbered.append(func.count().over(partition_by=columns).label("n_g"))
    ranked = (select(*columns, _wait(), *numbered).select_from(source)
              .where(_waits_bound_in(window, ordered=tuple(keys) in ORDERED_WAITS)).subquery("ranked"))
    r = ranked.c
    group_out: list[Any] = [r[f"g{i}"] for i in range(width)]
    head = [literal(0).label("is_total"), *group_out, r.wait_us, r.rank]
    if by_count:
        grouped = select(*head).where(or_(*(r.rank == (r.n_g * p + 99) // 100 for p in PERCENTILES)))
    else:
        wanted = values(*(column(f"g{i}", String) for i in range(width)), column("k", BigInteger),
                        name="picks").data(picks).cte("picks")
        match = and_(wanted.c.k == r.rank,
                     *(wanted.c[f"g{i}"].is_not_distinct_from(g) for i, g in enumerate(group_out)))
        # an outer join whose WHERE a NULL passes as far as SQLite's planner can tell: the numbered
        # waits stay the outer loop (one pass), the picks an index looked up (an inner join
        # materialises the waits instead)
        grouped = select(*head).select_from(ranked.outerjoin(wanted, match)).where(func.coalesce(wanted.c.k, 0) > 0)
    return union_all(grouped, totals)


_Picks = dict[tuple[str | None, ...] | None, dict[int, int]]  # group (None: all) -> {p: wait_us}


def _rank(count: int, p: int) -> int:
    return (count * p + 99) // 100


def _picks(rows: Sequence[Any], width: int, counts: Mapping[tuple[str | None, ...] | None, int]) -> _Picks:
    """The waits at the percentile ranks per group (and under None, over all) from the picked rows."""
    out: _Picks = {}
    for row in rows:
        group = None if row[0] else tuple(row[1:1 + width])
        wait_us, rank = int(row[1 + width]), int(row[2 + width])
        count = counts.get(group, 0)
        for p in PERCENTILES:
            if rank == _rank(count, p):
                out.setdefault(group, {})[p] = wait_us
    return out


def _seconds(micros: Any) -> float | None:
    return None if micros is None else float(micros) / _MICROS


def _row(group: tuple[str | None, ...], figures: Sequence[Any], priced: bool, waits: _Picks) -> UsageRow:
    count, gpu_hours, measured, used, preempted = figures[:5]
    cost = tuple(figures[5:8]) if priced else (None, None, None)
    at = waits.get(group if group else None, {})
    return UsageRow(
        group=group, intervals=int(count), gpu_hours=float(gpu_hours), measured_gpu_hours=float(measured),
        used_gpu_hours=float(used), preempted_gpu_hours=float(preempted),
        cost=None if cost[0] is None else float(cost[0]),
        gpu_cost=None if cost[1] is None else float(cost[1]),
        preempted_cost=None if cost[2] is None else float(cost[2]),
        waits=int(figures[-1]), wait_p50_s=_seconds(at.get(50)), wait_p95_s=_seconds(at.get(95)),
        wait_p99_s=_seconds(at.get(99)),
    )


def _ranked_waits(window: _Window, keys: Sequence[str]) -> Any:
    """(group keys g0.., wait_us, rn, n) of the intervals bound in the window with a creation time: each
    group's waits numbered in order (``rn``, from 1) and counted (``n``)."""
    source, columns = _group_columns(keys)
    wait = (_IC.bound_us - _IC.created_us).label("wait_us")
    partition = columns or None
    return (
        select(
            *columns,
            wait,
            func.row_number().over(partition_by=partition, order_by=wait).label("rn"),
            func.count().over(partition_by=partition).label("n"),
        )
        .select_from(source)
        .where(_IC.bound_us >= window.since, _IC.bound_us < window.until, _IC.created_us.is_not(None))
        .subquery("ranked")
    )


def idle_report(
    store: LedgerStore,
    *,
    since: float | None,
    until: float | None,
    now: float,
    threshold: float = 5.0,
    min_hours: float = 0.5,
    limit: int = 20,
) -> IdleReport:
    """The ``limit`` allocations with the most idle GPU-hours in the window among those whose mean GPU
    utilisation is under ``threshold`` percent and that held at least ``min_hours`` GPU-hours in it.
    Intervals without utilisation samples are not listed (their use is not known)."""
    window = _window(0.0 if since is None else since, until, now)
    gpu_hours = (_clipped_us(window.since, window.until) * _IC.gpus * literal(1.0 / _US_PER_HOUR, Float(53)))
    mean = _IC.util_sum / _IC.util_n
    idle = gpu_hours * (1.0 - mean / 100.0)
    query = (
        select(_IC.pod_uid, _IC.namespace, _IC.pod_name, _IC.project, _IC.submitter, _IC.queue, _IC.node,
               _IC.gpu_model, _IC.gpus, _IC.bound_us, _IC.ended_us, gpu_hours.label("gpu_hours"), mean.label("util"),
               idle.label("idle"))
        .where(_overlaps(window.since, window.until), _IC.util_n > 0, mean < threshold, gpu_hours >= min_hours)
        .order_by(idle.desc(), _IC.bound_us, _IC.pod_uid)
        .limit(limit)
    )
    with store.reading() as conn:
        rows = conn.execute(query).all()
    return IdleReport(
        since=window.since_us / _MICROS, until=window.until_us / _MICROS, threshold=threshold, min_hours=min_hours,
        rows=tuple(
            IdleAllocation(
                pod_uid=r.pod_uid, namespace=r.namespace, pod_name=r.pod_name, project=r.project,
                submitter=r.submitter, queue=r.queue, node=r.node, gpu_model=r.gpu_model, gpus=float(r.gpus),
                bound_at=r.bound_us / _MICROS, ended_at=_seconds(r.ended_us), gpu_hours=float(r.gpu_hours),
                gpu_util_mean=float(r.util), idle_gpu_hours=float(r.idle),
            )
            for r in rows
        ),
    )


# ------------------------------------------------------------------------------- the HTML's series

_BUCKETS = (3600, 6 * 3600, 86400, 7 * 86400, 30 * 86400)
MAX_BUCKETS = 200


def bucket_width(since: float, until: float) -> int:
    """Seconds per bucket: the first of 1 h, 6 h, 1 d, 7 d, 30 d that gives at most 200 buckets."""
    span = max(until - since, 1.0)
    for width in _BUCKETS:
        if span / width <= MAX_BUCKETS:
            return width
    return math.ceil(span / MAX_BUCKETS)


def usage_series(
    store: LedgerStore, *, since: float, until: float | None, now: float, prices: PriceList | None = None
) -> UsageSeries:
    """Mean GPUs allocated, measured and used per time bucket, and cost (GPU-hours without ``prices``)
    per project and bucket.

    Each interval is a step: it adds its rate (GPUs, GPUs with telemetry, GPUs used, cost per hour) at
    its start and takes it away at its end (both clipped to the window). SQL sums, per project and per
    bucket of the step's time, the rates (S0) and the rates times the time into the window (S1), starts
    and ends apart: two passes, a few rows per bucket. A bucket [lo, hi) then holds level x (hi - lo) +
    hi x S0 - S1, the level being what the earlier buckets' steps add up to: arithmetic per bucket,
    exact, in any number of buckets (a join of the intervals with the buckets would cost a pass per
    bucket)."""
    window = _window(since, until, now)
    width_us = bucket_width(window.since_us / _MICROS, window.until_us / _MICROS) * _MICROS
    edges = list(range(window.since_us, window.until_us, width_us)) or [window.since_us]
    n = len(edges)
    measured = _IC.util_n > 0
    rates: list[ColumnElement[Any]] = [
        _IC.gpus,
        case((measured, _IC.gpus), else_=0.0),
        func.coalesce(_IC.gpus * _IC.util_sum / (func.nullif(_IC.util_n, 0) * 100.0), 0.0),
    ]
    if prices is None:
        rates.append(_IC.gpus * literal(1.0, Float(53)))
    else:
        per_hour, _ = _cost(prices, _IC.gpus, _IC.cpu_milli, _IC.memory_bytes, _IC.gpu_model, _IC.capacity_type)
        rates.append(per_hour)
    since_us = window.since
    start_at = case((_IC.bound_us > since_us, _IC.bound_us), else_=since_us) - since_us
    end_at = _IC.ended_us - since_us

    def steps(sign: float, at: ColumnElement[Any], where: ColumnElement[bool]) -> Any:
        bucket = (at // literal(width_us, BigInteger)).label("bucket")
        sums = [func.sum(rate * sign) for rate in rates] + [func.sum(rate * at * sign) for rate in rates]
        return (select(bucket, _IC.project.label("project"), *sums).where(_overlaps(window.since, window.until), where)
                .group_by(bucket, _IC.project))

    query = union_all(
        steps(1.0, start_at, literal(True)),
        steps(-1.0, end_at, and_(_IC.ended_us.is_not(None), _IC.ended_us < window.until)),
    )
    with store.reading() as conn:
        rows = conn.execute(query).all()
    k = len(rates)
    by_project: dict[str | None, list[list[float]]] = {}  # project -> per bucket [S0 per rate.., S1 per rate..]
    for bucket, project, *sums in rows:  # a few rows per bucket and project
        cells = by_project.setdefault(project, [[0.0] * (2 * k) for _ in range(n)])
        cells[min(int(bucket), n - 1)] = [x + float(y or 0.0) for x, y in zip(cells[min(int(bucket), n - 1)], sums,
                                                                               strict=True)]
    spans = [min(lo + width_us, window.until_us) - lo for lo in edges]
    totals = [[0.0] * n for _ in range(k)]  # rate x microseconds per bucket, all projects
    per_project: dict[str | None, tuple[float, ...]] = {}
    for project, cells in by_project.items():
        level = [0.0] * k
        charged = []
        for i, cell in enumerate(cells):
            hi = (i * width_us) + spans[i]
            for r in range(k):
                inside = level[r] * spans[i] + hi * cell[r] - cell[k + r]
                totals[r][i] += inside
                level[r] += cell[r]
                if r == k - 1:
                    charged.append(inside / _US_PER_HOUR)
        per_project[project] = tuple(charged)
    mean = [[total / (spans[i] or 1) for i, total in enumerate(row)] for row in totals]
    return UsageSeries(
        starts=tuple(lo / _MICROS for lo in edges), width_s=width_us / _MICROS, allocated_gpus=tuple(mean[0]),
        measured_gpus=tuple(mean[1]), used_gpus=tuple(mean[2]), per_project=per_project, priced=prices is not None,
    )


CDF_POINTS = 200


def wait_cdfs(store: LedgerStore, *, since: float, until: float | None, now: float, key: str | None) -> list[WaitCdf]:
    """The waits of the intervals bound in the window as CDF points per value of ``key`` (a group key, or
    None: all together): every ceil(n/200)-th wait in order and the largest, picked in SQL."""
    window = _window(since, until, now)
    keys = () if key is None else (key,)
    ranked = _ranked_waits(window, keys)
    rc = ranked.c
    step = (rc.n + CDF_POINTS - 1) // CDF_POINTS
    group = rc.g0 if keys else literal(None).label("g0")
    query = (select(group, rc.n, rc.rn, rc.wait_us)
             .where(or_(rc.rn % step == 0, rc.rn == rc.n))
             .order_by(group, rc.rn))
    with store.reading() as conn:
        rows = conn.execute(query).all()
    points: dict[str | None, list[tuple[float, float]]] = {}
    counts: dict[str | None, int] = {}
    for value, count, rank, wait_us in rows:  # at most ~200 rows per group
        points.setdefault(value, []).append((rank / count, wait_us / _MICROS))
        counts[value] = int(count)
    cdfs = [WaitCdf(value, counts[value], tuple(p)) for value, p in points.items()]
    return sorted(cdfs, key=lambda c: -c.count)
