"""``gpufleet dashboard``: serve the web dashboard over a snapshot file (the default, needs nothing) or a
live cluster, with an optional usage ledger.

Exit status: 0 stopped; 2 the user's input is wrong (a snapshot, ledger or ``--trace`` file that cannot be
read, a missing web extra); every failure is one line on stderr (see ``commands.base``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from gpufleet.commands.base import Command, CommandError
from gpufleet.commands.cluster_tools import api_factory, context_option, kubeconfig_option

__all__ = ["dashboard"]


def _require_web_extra() -> None:
    try:
        import jinja2  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as err:
        raise CommandError(f"the dashboard needs the web extra (pip install 'gpufleet[web]'): {err}") from None


def _result(path: str) -> dict[str, Any]:
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise CommandError(f"--result {path}: cannot read: {err}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("runs"), list):
        raise CommandError(f"--result {path}: not a `gpufleet simulate run --format json` result (no runs list)")
    return doc


@click.command(cls=Command)
@click.option("--snapshot", "snapshot_path", type=click.Path(dir_okay=False), default=None,
              help="A snapshot file (what `gpufleet replay` reads), decided once.")
@click.option("--cluster", "live", is_flag=True,
              help="Read the live cluster (in-cluster, $KUBECONFIG or ~/.kube/config; implied by --kubeconfig or "
                   "--context), again every --refresh seconds.")
@kubeconfig_option
@context_option
@click.option("--ledger", "ledger_url", default=None, metavar="DB",
              help="A usage ledger (SQLite file or database URL): the Usage page, job history, the what-if workload.")
@click.option("--prices", "prices_file", type=click.Path(dir_okay=False), default=None,
              help="Prices YAML (as `gpufleet report usage --prices`): costs on the Usage page.")
@click.option("--result", "result_path", type=click.Path(dir_okay=False), default=None, metavar="SIM.json",
              help="A `gpufleet simulate run --format json` result, shown on the What-if page.")
@click.option("--trace", "trace_paths", multiple=True, type=click.Path(dir_okay=False), metavar="FILE",
              help="A job trace CSV (any format `gpufleet simulate run --trace` reads) offered as a What-if workload, "
                   "named by its file name; repeatable. The bundled openb trace is always offered.")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True)
@click.option("--auth", type=click.Choice(["none", "kube"]), default=None,
              help="kube (the default with a live cluster): callers' bearer tokens checked with TokenReview and "
                   "SubjectAccessReview; none (the default with --snapshot): everyone sees everything (local use).")
@click.option("--trust-proxy", is_flag=True, default=False,
              help="With --auth kube: take the caller from an authenticating proxy's X-Forwarded-User and "
                   "X-Forwarded-Groups headers when no bearer token is given (only behind such a proxy).")
@click.option("--refresh", type=click.FloatRange(min=1.0), default=30.0, show_default=True,
              help="Seconds between reads of a live cluster.")
def dashboard(snapshot_path: str | None, live: bool, kubeconfig: str | None, context: str | None,
              ledger_url: str | None, prices_file: str | None, result_path: str | None,
              trace_paths: tuple[str, ...], host: str, port: int, auth: str | None, trust_proxy: bool,
              refresh: float) -> None:
    """Serve the web dashboard: cluster, queues, jobs and why they wait, usage and cost, what-if."""
    _require_web_extra()
    live = live or kubeconfig is not None or context is not None
    if (snapshot_path is None) != live:
        raise CommandError("give --snapshot FILE or --cluster (or --kubeconfig, --context), one of the two")
    from gpufleet.web import ClusterSource, DashboardSource, SnapshotSource, create_app

    if auth is None:
        auth = "kube" if live else "none"
    prices = None
    if prices_file is not None:
        from gpufleet.adapters.prices import load_prices_file

        prices = load_prices_file(prices_file)
    ledger = None
    if ledger_url is not None:
        from gpufleet.commands.report import ledger_for_report

        ledger = ledger_for_report(ledger_url).__enter__()  # open for the server's life
    result = _result(result_path) if result_path is not None else None
    traces = _traces(trace_paths)
    source: DashboardSource
    if snapshot_path is not None:
        from gpufleet.adapters import load_objects_file, load_snapshot_file

        source = SnapshotSource(load_snapshot_file(snapshot_path), snapshot_path,
                                documents=load_objects_file(snapshot_path), ledger=ledger, prices=prices,
                                result=result, traces=traces)
    else:
        source = ClusterSource(_cluster_reader(kubeconfig, context), refresh, ledger=ledger, prices=prices,
                               result=result, traces=traces)
    authorizer = None
    if auth == "kube":
        authorizer = _kube_authorizer(kubeconfig, context, trust_proxy)
    else:
        click.echo("warning: --auth none: every visitor sees every project and queue and may run what-ifs; "
                   "use it only on a trusted machine", err=True)
    import uvicorn

    uvicorn.run(create_app(source, auth=authorizer), host=host, port=port, log_level="warning")


def _traces(paths: tuple[str, ...]) -> dict[str, Any]:
    """``--trace`` files read at start (``load_trace``, as ``simulate run`` reads them): name -> jobs.
    A file that cannot be read or parsed raises the loader's InputError (one line, exit 2)."""
    from gpufleet.adapters.traces import load_trace
    from gpufleet.web.whatif import BUNDLED_TRACES, LEDGER, SNAPSHOT

    traces: dict[str, Any] = {}
    for path in paths:
        name = Path(path).name
        if name in traces or name in (LEDGER, SNAPSHOT, *BUNDLED_TRACES):
            raise CommandError(f"--trace {path}: the name {name!r} is taken (another --trace, or a built-in "
                               "workload); rename the file")
        jobs, _report = load_trace(path)
        if not jobs:
            raise CommandError(f"--trace {path}: no jobs")
        traces[name] = jobs
    return traces


def _cluster_reader(kubeconfig: str | None, context: str | None) -> Any:
    from gpufleet.kube import read_cluster

    api: list[Any] = []

    async def read() -> tuple[list[dict[str, Any]], str]:
        if not api:
            api.append(api_factory(kubeconfig, context))  # made in the server's event loop
        snap = await read_cluster(api[0])
        return [dict(d) for d in snap.documents], str(api[0].server)

    return read


def _kube_authorizer(kubeconfig: str | None, context: str | None, trust_proxy: bool) -> Any:
    """The TokenReview/SubjectAccessReview authorizer (``gpufleet.web.auth``) of the API server of
    ``kubeconfig`` and ``context``, connected on first use."""
    from gpufleet.web.auth import kube_authorizer

    return kube_authorizer(kubeconfig, context, trust_proxy=trust_proxy)
