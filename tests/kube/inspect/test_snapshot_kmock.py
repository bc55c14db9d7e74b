"""Contract test: snapshot and explain over HTTP, with the real lightkube client, against kmock's
in-process Kubernetes API emulator serving the cluster of :mod:`.cluster_objects`: the lightkube
adapter of the one API port reads what the in-memory fake of that port reads."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import aiohttp.web
import kmock
import pytest
import yaml
from click.testing import CliRunner, Result

from gpufleet.adapters.k8s_yaml import load_snapshot_text
from gpufleet.adapters.output import decisions_to_dict
from gpufleet.cli import main
from gpufleet.engine import schedule
from gpufleet.kube.client.lightkube_api import connect
from gpufleet.kube.client.port import ClusterAccessError, Kind
from gpufleet.kube.inspect.snapshot import SNAPSHOT_KINDS, ClusterSnapshot, read_cluster
from gpufleet.testing.emulator import NAMESPACES_ALIAS, namespaces_rewritten

from .cluster_objects import client, cluster_objects, snapshot_yaml
from .test_snapshot import EXPECTED_DECISIONS

T = TypeVar("T")


def write_kubeconfig(path: Path, server: str, namespace: str = "team-a") -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "emulator", "cluster": {"server": server}}],
        "users": [{"name": "tester", "user": {"token": "not-a-secret"}}],
        "contexts": [{"name": "emulator", "context": {"cluster": "emulator", "user": "tester",
                                                      "namespace": namespace}}],
        "current-context": "emulator",
    }))
    return path


class _Emulator(kmock.KubernetesEmulator):
    """kmock's emulator, serving the Namespace kind too (kmock cannot parse its paths)."""

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        response: aiohttp.web.StreamResponse = await super().__call__(namespaces_rewritten(raw_request))
        return response


def against_emulator(tmp_path: Path, work: Callable[[Path], T],
                     objects: dict[Kind, list[dict[str, Any]]] | None = None,
                     served: tuple[Kind, ...] = SNAPSHOT_KINDS) -> T:
    """Run the blocking ``work(kubeconfig)`` in a thread while kmock serves ``objects`` over HTTP."""

    async def serve() -> T:
        async with _Emulator() as emulator, kmock.Server(emulator) as server:
            contents = objects if objects is not None else cluster_objects()
            for kind in served:
                group, _, version = kind.api_version.rpartition("/")
                plural = NAMESPACES_ALIAS if kind is Kind.NAMESPACE else kind.plural
                resource = kmock.resource(group, version, plural)
                emulator.resources[resource] = {"kind": kind.kind, "namespaced": kind.namespaced}
                for obj in contents.get(kind, []):
                    emulator.objects[resource, obj["metadata"].get("namespace"), obj["metadata"]["name"]] = obj
            kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", str(server.url).rstrip("/"))
            return await asyncio.to_thread(work, kubeconfig)

    return asyncio.run(serve())


def read_over_http(kubeconfig: Path) -> ClusterSnapshot:
    """The snapshot read through the lightkube adapter of the port (connected, read, closed)."""

    async def read() -> ClusterSnapshot:
        api = connect(str(kubeconfig), timeout=10.0)
        try:
            return await read_cluster(api)
        finally:
            await api.close()

    return asyncio.run(read())


def test_snapshot_over_http_equals_the_in_memory_one_and_replays_as_expected(tmp_path: Path) -> None:
    def work(kubeconfig: Path) -> str:
        return read_over_http(kubeconfig).to_yaml()

    text = against_emulator(tmp_path, work)
    assert text == snapshot_yaml(client())
    decisions = decisions_to_dict(schedule(load_snapshot_text(text, "snap")))
    assert decisions["bindings"] == EXPECTED_DECISIONS["bindings"]
    assert decisions["evictions"] == EXPECTED_DECISIONS["evictions"]
    assert [p["pod"] for p in decisions["pending"]] == ["team-a/a-huge"]


def test_cli_snapshot_and_explain_over_http(tmp_path: Path) -> None:
    out = tmp_path / "snap.yaml"

    def work(kubeconfig: Path) -> list[Result]:
        runner = CliRunner()
        return [
            runner.invoke(main, ["snapshot", "--kubeconfig", str(kubeconfig), "-o", str(out)]),
            runner.invoke(main, ["replay", str(out)]),
            runner.invoke(main, ["explain", "a-train", "--kubeconfig", str(kubeconfig)]),  # namespace from context
            runner.invoke(main, ["explain", "team-b/b-run-1", "--kubeconfig", str(kubeconfig)]),
            runner.invoke(main, ["explain", "ghost", "-n", "team-a", "--kubeconfig", str(kubeconfig)]),
        ]

    snap, replay, train, victim, ghost = against_emulator(tmp_path, work)
    assert snap.exit_code == 0, snap.output
    assert replay.exit_code == 0, replay.output
    assert json.loads(replay.stdout)["evictions"] == EXPECTED_DECISIONS["evictions"]
    assert train.exit_code == 0, train.output
    assert train.stdout.splitlines()[1] == "gpufleet would bind it to node n2 (GPUs 0,1,2,3,4,5,6,7)."
    assert victim.stdout.splitlines()[1].startswith("gpufleet would evict it to make room for team-a/a-train")
    assert (ghost.exit_code, ghost.stderr) == (2, "gpufleet explain: pod team-a/ghost not found\n")


def test_context_option(tmp_path: Path) -> None:
    def work(kubeconfig: Path) -> list[Result]:
        runner = CliRunner()
        return [runner.invoke(main, ["explain", "team-a/a-nb", "--kubeconfig", str(kubeconfig), "--context", name])
                for name in ("emulator", "elsewhere")]

    good, bad = against_emulator(tmp_path, work)
    assert good.exit_code == 0 and "25/100 of GPU 0" in good.stdout
    assert bad.exit_code == 2 and bad.stderr.endswith("kubeconfig: defines no context elsewhere\n")


def test_crds_not_installed_over_http(tmp_path: Path) -> None:
    objects = {Kind.NODE: cluster_objects()[Kind.NODE]}

    def work(kubeconfig: Path) -> tuple[int, tuple[str, ...]]:
        snap = read_over_http(kubeconfig)
        return len(snap.documents), snap.warnings

    count, warnings = against_emulator(tmp_path, work, objects=objects,
                                       served=(Kind.NODE, Kind.POD, Kind.PRIORITY_CLASS, Kind.STORAGE_CLASS,
                                               Kind.PERSISTENT_VOLUME, Kind.PERSISTENT_VOLUME_CLAIM, Kind.NAMESPACE))
    assert count == 3
    assert [w.split(" (")[0] for w in warnings] == [
        "the API server does not serve gpufleet.dev/v1alpha1 SchedulerConfig",
        "the API server does not serve gpufleet.dev/v1alpha1 Queue",
        "the API server does not serve gpufleet.dev/v1alpha1 PodGroup",
        "the API server does not serve gpufleet.dev/v1alpha1 Project",
        "the API server does not serve gpufleet.dev/v1alpha1 ResourceFlavor",
    ]


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port  # closed again: nothing listens there


def test_unreachable_api_server_is_one_line_exit_1(tmp_path: Path) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{_closed_port()}")
    for args in (["snapshot"], ["explain", "a-train"]):
        result = CliRunner().invoke(main, [*args, "--kubeconfig", str(kubeconfig)])
        assert result.exit_code == 1, result.output
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and "cannot reach the API server" in lines[0]
        assert result.exception is None or isinstance(result.exception, SystemExit)


@pytest.mark.parametrize(("content", "message"), [
    (None, "no such kubeconfig file"),
    ("clusters: [unclosed\n", "not YAML at line 2, column 1: expected ',' or ']', but got '<stream end>'"),
    ("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n", "defines no clusters"),
])
def test_bad_kubeconfig_is_one_line_exit_2(tmp_path: Path, content: str | None, message: str) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    if content is not None:
        kubeconfig.write_text(content)
    for args in (["snapshot"], ["explain", "a-train"]):
        result = CliRunner().invoke(main, [*args, "--kubeconfig", str(kubeconfig)])
        assert result.exit_code == 2, result.output
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and message in lines[0], lines
        assert lines[0].startswith(f"gpufleet {args[0]}: {kubeconfig}")


def test_api_errors_are_one_line(tmp_path: Path) -> None:
    """A 403 (no RBAC to list nodes) is reported with the server's message, exit 1."""

    async def serve() -> ClusterAccessError:
        async with kmock.KubernetesEmulator() as emulator, kmock.Server(emulator) as server:
            for kind in SNAPSHOT_KINDS:  # served, with no objects
                group, _, version = kind.api_version.rpartition("/")
                emulator.resources[kmock.resource(group, version, kind.plural)] = {"kind": kind.kind}
            emulator["list", kmock.resource("", "v1", "nodes")] << kmock.KubernetesError(
                status=403, reason="Forbidden", message='nodes is forbidden: User "tester" cannot list resource')
            kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", str(server.url).rstrip("/"))

            def work() -> ClusterAccessError:
                with pytest.raises(ClusterAccessError) as caught:
                    read_over_http(kubeconfig)
                return caught.value

            return await asyncio.to_thread(work)

    error = asyncio.run(serve())
    assert error.exit_code == 1
    assert str(error).endswith('listing Node objects: HTTP 403: nodes is forbidden: User "tester" cannot list resource')
