"""The pod-grouper keeps an operator's priority class on the PodGroup it made (`gpufleet admin priority`
writes it with the annotation gpufleet.dev/operator-priority-class); without the annotation, a class
written on its PodGroup is brought back to the owner's, as before."""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from click.testing import CliRunner, Result

from gpufleet.cli import main
from gpufleet.commands import cluster_tools
from gpufleet.kube.client.lightkube_api import connect
from gpufleet.kube.client.port import Kind
from gpufleet.testing.emulator import ApiServerEmulator

from .controller_objects import bound_pods, eventually, node, priority_class, queue, running_over_http
from .test_grouper_http import groups_of, job, member

pytestmark = pytest.mark.asyncio


@pytest_asyncio.fixture
async def emulator(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[ApiServerEmulator]:
    async with ApiServerEmulator() as server:
        monkeypatch.setattr(cluster_tools, "api_factory", lambda kubeconfig, context: connect(server=server.url_text))
        yield server


async def admin(*args: str) -> Result:
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return await asyncio.get_running_loop().run_in_executor(pool, CliRunner().invoke, main, ["admin", *args])


@pytest.mark.parametrize("operator", [True, False])
async def test_the_grouper_keeps_the_operators_class(emulator: ApiServerEmulator, operator: bool) -> None:
    store = emulator.store
    store.put(Kind.NODE, node("n0", 8))
    store.put(Kind.QUEUE, queue("team-a", 16))
    store.put(Kind.PRIORITY_CLASS, priority_class("high", 50))
    async with running_over_http(emulator):
        owner = store.put(Kind.JOB, job("train", parallelism=2))
        for i in range(2):
            store.put(Kind.POD, member(f"train-{i}", owner))
        await eventually(lambda: len(bound_pods(store)) == 2, what="gang bound")
        (group,) = groups_of(store)
        name = group["metadata"]["name"]
        if operator:
            result = await admin("priority", "ml/train", "high")
            assert result.exit_code == 0, result.output
        else:  # the class alone, as a tenant could write it
            changed = copy.deepcopy(group)
            changed["spec"]["priorityClassName"] = "high"
            store.put(Kind.POD_GROUP, changed)
        bigger = copy.deepcopy(store.object(Kind.JOB, "ml", "train"))
        assert bigger is not None
        bigger["spec"]["parallelism"] = bigger["spec"]["completions"] = 3
        store.put(Kind.JOB, bigger)  # the grouper derives the PodGroup again: minMember 3
        await eventually(lambda: (store.object(Kind.POD_GROUP, "ml", name) or {"spec": {}})["spec"].get(
            "minMember") == 3, what="the PodGroup derived again")
        stored = store.object(Kind.POD_GROUP, "ml", name)
        assert stored is not None
        assert stored["spec"].get("priorityClassName") == ("high" if operator else None)
