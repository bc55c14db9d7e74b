"""``gpufleet admin``: an operator's actions on the cluster, through the Kubernetes API (docs/admin.md).

- ``gpufleet admin reclaim QUEUE``: evict the gangs that make QUEUE borrow, whole, newest first, until
  it is within its quota (the rule: :func:`gpufleet.commands.admin_plan.reclaim_plan`);
- ``gpufleet admin priority JOB CLASS``: set the priority class of JOB's PodGroup(s);
- ``gpufleet admin drain NODE``: cordon NODE and mark it ``gpufleet.dev/drain: "true"``, so that the
  controller drains it gang by gang, each gang requeued at its place (docs/semantics-notes.md,
  "Draining nodes and failed GPUs"); ``NODE/GPU[,GPU]``: evict the gangs on those GPUs now.

Every write goes through the API server as the caller (RBAC and the audit log apply; evictions are
Eviction API calls, so PodDisruptionBudgets hold), leaves an Event (``OperatorReclaim``,
``OperatorPriority``, ``OperatorDrain``) and, for an eviction, the annotation that makes the usage
ledger end the pod's interval ``operator``. ``--dry-run`` prints what would be done and writes nothing.

Exit status: 0 done; 2 bad input (an unknown queue or class, a malformed or unknown NODE, JOB or GPU);
1 the cluster could not be reached, or a PodDisruptionBudget refused an eviction.
"""

from __future__ import annotations

import getpass
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import click

from gpufleet.commands import subcommands
from gpufleet.commands.admin_plan import GangAction
from gpufleet.commands.base import Command, CommandError, LazyGroup
from gpufleet.commands.cluster_tools import context_option, kubeconfig_option, with_api
from gpufleet.domain import GPU, MILLI
from gpufleet.kube import ApiError, ClusterAccessError, ClusterApi, Kind

__all__ = ["admin", "drain", "priority", "reclaim"]

_NAME = r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?"
_JOB = re.compile(rf"({_NAME})/({_NAME})")
_NODE = re.compile(_NAME)
REPORTER = "gpufleet.dev/admin"  # the Events' reportingController

dry_run_option = click.option("--dry-run", is_flag=True, default=False,
                              help="Print what would be done (which gangs and pods, and why); write nothing.")


@click.group(cls=LazyGroup, lazy_commands=subcommands("admin"))
def admin() -> None:
    """An operator's actions: reclaim a queue's borrowed GPUs, change a job's priority, drain a node."""


def _actor() -> str:
    """Who runs the command, as this machine knows them (the API server's audit log has the
    authenticated identity)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no user name for this uid (a bare container)
        return "unknown"


@dataclass
class _Cluster:
    """What one read of the cluster gives: the snapshot as the controller builds it, and the raw
    pods and PodGroups (their uids and annotations) by key."""

    view: Any  # gpufleet.kube.controller.convert.SnapshotView
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name')}"


async def _read(api: ClusterApi) -> _Cluster:
    """The cluster as the controller's conversion reads it (objects it cannot read are left out)."""
    from gpufleet.kube.controller.convert import CONVERTED_KINDS, ConversionError, build_snapshot, convert_object
    from gpufleet.kube.inspect.snapshot import list_kinds

    listed = await list_kinds(api, CONVERTED_KINDS)
    objects: dict[Kind, list[Any]] = {}
    problems: list[str] = []
    for kind, items in listed.items():
        converted: list[Any] = []
        for raw in items or ():
            try:
                converted.append(convert_object(kind, raw))
            except ConversionError as err:
                problems.append(str(err))
        objects[kind] = converted
    for problem in problems:  # left out, as the controller leaves them out
        click.echo(f"warning: {problem}", err=True)
    cluster = _Cluster(build_snapshot(objects, problems=problems))
    cluster.pods = {_key(p): p for p in listed.get(Kind.POD) or ()}
    cluster.groups = {_key(g): g for g in listed.get(Kind.POD_GROUP) or ()}
    return cluster


def _uid(obj: Mapping[str, Any] | None) -> str:
    return str(((obj or {}).get("metadata") or {}).get("uid") or "")


async def _event(api: ClusterApi, reason: str, note: str, *, kind: str, namespace: str, name: str,
                 uid: str, api_version: str = "v1") -> None:
    from gpufleet.kube import RealClock
    from gpufleet.kube.controller.events import EventRecorder, PodEvent

    recorder = EventRecorder(api, RealClock(), identity=_actor(), reporting_controller=REPORTER)
    await recorder.emit(PodEvent(namespace, name, uid, reason, note, action="Operator", kind=kind,
                                 api_version=api_version), force=True)


def _fail(err: Exception) -> CommandError:
    if isinstance(err, ClusterAccessError):
        return CommandError(str(err), exit_code=err.exit_code)
    return CommandError(str(err), exit_code=1)


def _run(kubeconfig: str | None, context: str | None, work: Any) -> Any:
    try:
        return with_api(kubeconfig, context, work)
    except (ClusterAccessError, OSError) as err:
        raise _fail(err) from None


def _describe(action: GangAction) -> str:
    gang = action.gang
    pods = ", ".join(gang.pods)
    noun = "pod" if len(gang.pods) == 1 else "pods"
    return f"gang {gang.name} of queue {gang.queue} ({len(gang.pods)} {noun}: {pods}): {action.why}"


async def _evict(api: ClusterApi, cluster: _Cluster, actions: Iterable[GangAction], reason: str) -> list[str]:
    """Evict every pod of each gang, gang after gang, through the Eviction API, each after marking it
    for the ledger (``operator``); an Event on each pod and on the gang's PodGroup. Returns the pods a
    PodDisruptionBudget kept."""
    from gpufleet.ledger import ANNOTATION_EVICTED_BY, EndReason

    actor = _actor()
    blocked: list[str] = []
    for action in actions:
        gang = action.gang
        note = f"evicted by operator {actor} (gpufleet admin): {action.why}"
        for key in gang.pods:
            namespace, _, name = key.partition("/")
            try:
                await api.patch(Kind.POD, namespace, name,
                                {"metadata": {"annotations": {ANNOTATION_EVICTED_BY: EndReason.OPERATOR.value}}})
                await api.evict(namespace, name)
            except ApiError as err:
                if err.status == 404:
                    continue  # gone meanwhile
                if err.status == 429:  # the pod stays: so does its interval, not the operator's mark
                    blocked.append(key)
                    await _unmark(api, namespace, name)
                    click.echo(f"pod {key}: eviction refused by a PodDisruptionBudget: {err}", err=True)
                    continue
                raise ClusterAccessError(f"{api.server}: evict pod {key}: {err}") from None
            await _event(api, reason, f"gang {gang.name}: {note}", kind="Pod", namespace=namespace, name=name,
                         uid=_uid(cluster.pods.get(key)))
        if gang.group is not None:
            namespace, _, name = gang.group.partition("/")
            await _event(api, reason, note, kind=Kind.POD_GROUP.kind, namespace=namespace, name=name,
                         uid=_uid(cluster.groups.get(gang.group)), api_version=Kind.POD_GROUP.api_version)
        click.echo(f"evicted {_describe(action)}")
    return blocked


async def _unmark(api: ClusterApi, namespace: str, name: str) -> None:
    from gpufleet.ledger import ANNOTATION_EVICTED_BY

    try:
        await api.patch(Kind.POD, namespace, name, {"metadata": {"annotations": {ANNOTATION_EVICTED_BY: None}}})
    except ApiError as err:
        click.echo(f"pod {namespace}/{name}: annotation {ANNOTATION_EVICTED_BY} not removed: {err}", err=True)


def _blocked(blocked: list[str]) -> None:
    if blocked:
        raise CommandError(f"{len(blocked)} pod(s) kept by a PodDisruptionBudget: {', '.join(blocked)}; "
                           "run the command again once the budget allows", exit_code=1)


# ------------------------------------------------------------------------------------ reclaim


@click.command(cls=Command)
@click.argument("queue")
@dry_run_option
@kubeconfig_option
@context_option
def reclaim(queue: str, dry_run: bool, kubeconfig: str | None, context: str | None) -> None:
    """Evict QUEUE's borrowers now: whole gangs of QUEUE (or below it), newest first, until QUEUE is
    within its quota (docs/semantics.md, "Operator actions")."""
    from gpufleet.commands.admin_plan import ReclaimPlan, amounts, reclaim_plan

    async def work(api: ClusterApi) -> tuple[ReclaimPlan, list[str]]:
        cluster = await _read(api)
        if queue not in {str(q.name) for q in cluster.view.snapshot.queues}:
            raise ClusterAccessError(f"queue {queue!r} does not exist", exit_code=2)
        plan = reclaim_plan(cluster.view, queue)
        if not plan.borrowing or dry_run:
            return plan, []
        return plan, await _evict(api, cluster, plan.actions, "OperatorReclaim")

    plan, blocked = _run(kubeconfig, context, work)
    used = f"queue {queue} uses {amounts(plan.before)} of its quota of {amounts(plan.quota)}"
    if not plan.borrowing:
        click.echo(f"{used}: nothing to reclaim")
        return
    if dry_run:
        for action in plan.actions:
            click.echo(f"would evict {_describe(action)}")
    if dry_run:
        click.echo(f"{used}; it would use {amounts(plan.after)} once {len(plan.actions)} gang(s) are evicted")
    else:
        click.echo(f"{used.replace(' uses ', ' used ', 1)}; it uses {amounts(plan.after)} now that "
                   f"{len(plan.actions)} gang(s) were evicted")
    _blocked(blocked)


# ----------------------------------------------------------------------------------- priority


async def _groups_of(api: ClusterApi, namespace: str, name: str) -> list[dict[str, Any]]:
    """The PodGroup namespace/name, else the PodGroups the pod-grouper made for an owner of that name."""
    from gpufleet.kube.controller.grouper import MANAGED_BY

    group = await api.get(Kind.POD_GROUP, namespace, name)
    if group is not None:
        return [group]
    found = []
    for item in (await api.list(Kind.POD_GROUP)).items:
        meta = item.get("metadata") or {}
        if meta.get("namespace") != namespace or (meta.get("labels") or {}).get(MANAGED_BY[0]) != MANAGED_BY[1]:
            continue
        if any(isinstance(ref, Mapping) and ref.get("controller") and ref.get("name") == name
               for ref in meta.get("ownerReferences") or ()):
            found.append(item)
    return sorted(found, key=_key)


@click.command(cls=Command)
@click.argument("job", metavar="JOB")
@click.argument("priority_class", metavar="CLASS")
@dry_run_option
@kubeconfig_option
@context_option
def priority(job: str, priority_class: str, dry_run: bool, kubeconfig: str | None, context: str | None) -> None:
    """Set the priority class of JOB (NAMESPACE/NAME of a PodGroup, or of a workload whose PodGroups
    the pod-grouper made) to CLASS, an existing PriorityClass."""
    from gpufleet.kube.controller.grouper import ANNOTATION_OPERATOR_PRIORITY, MANAGED_BY

    match = _JOB.fullmatch(job.strip())
    if match is None:
        raise CommandError(f"JOB: expected NAMESPACE/NAME of a PodGroup or of a workload, got {job!r}")
    namespace, name = match.group(1), match.group(3)

    async def work(api: ClusterApi) -> list[tuple[str, str | None]]:
        try:
            if await api.get(Kind.PRIORITY_CLASS, "", priority_class) is None:
                raise ClusterAccessError(f"CLASS: priority class {priority_class!r} does not exist", exit_code=2)
            groups = await _groups_of(api, namespace, name)
        except ApiError as err:
            raise ClusterAccessError(f"{api.server}: read {job}: {err}") from None
        if not groups:
            raise ClusterAccessError(f"JOB: no PodGroup {job}, and none the pod-grouper made for a workload "
                                     f"named {name} in namespace {namespace}", exit_code=2)
        done: list[tuple[str, str | None]] = []
        for group in groups:
            key = _key(group)
            meta = group.get("metadata") or {}
            was = (group.get("spec") or {}).get("priorityClassName")
            done.append((key, was))
            if dry_run or was == priority_class:
                continue
            patch: dict[str, Any] = {"spec": {"priorityClassName": priority_class}}
            if (meta.get("labels") or {}).get(MANAGED_BY[0]) == MANAGED_BY[1]:  # the grouper keeps it
                patch["metadata"] = {"annotations": {ANNOTATION_OPERATOR_PRIORITY: priority_class}}
            try:
                await api.patch(Kind.POD_GROUP, str(meta.get("namespace")), str(meta.get("name")), patch)
            except ApiError as err:
                raise ClusterAccessError(f"{api.server}: patch PodGroup {key}: {err}") from None
            await _event(api, "OperatorPriority",
                         f"priority class {was or '(none)'} -> {priority_class}, set by operator {_actor()} "
                         "(gpufleet admin)", kind=Kind.POD_GROUP.kind, namespace=str(meta.get("namespace")),
                         name=str(meta.get("name")), uid=_uid(group), api_version=Kind.POD_GROUP.api_version)
        return done

    for key, was in _run(kubeconfig, context, work):
        verb = "would set" if dry_run else ("keeps" if was == priority_class else "set")
        click.echo(f"PodGroup {key}: {verb} priorityClassName {priority_class} (was {was or 'none'})")


# -------------------------------------------------------------------------------------- drain


def parse_drain_target(text: str) -> tuple[str, frozenset[int]]:
    """"node-1" -> ("node-1", {}); "node-1/3" or "node-1/1,3" -> GPUs too; CommandError otherwise."""
    from gpufleet.commands.gpu import parse_target

    text = text.strip()
    if "/" not in text:
        if _NODE.fullmatch(text) is None:
            raise CommandError(f'NODE[/GPU]: expected a node name such as "gpu-node-1", or a node and GPU '
                               f'indices such as "gpu-node-1/3", got {text!r}')
        return text, frozenset()
    try:
        return parse_target(text)
    except CommandError:
        raise CommandError(f'NODE[/GPU]: expected a node name such as "gpu-node-1", or a node and GPU '
                           f'indices such as "gpu-node-1/3", got {text!r}') from None


def _gpu_count(node: Mapping[str, Any]) -> int:
    """The whole GPUs a Node object's allocatable lists (the engine's reading of it)."""
    from gpufleet.kube.controller.convert import ConversionError, convert_object

    try:
        return int(convert_object(Kind.NODE, node).allocatable.get(GPU, 0)) // MILLI
    except ConversionError:
        return 0


@click.command(cls=Command)
@click.argument("target", metavar="NODE[/GPU]")
@dry_run_option
@kubeconfig_option
@context_option
def drain(target: str, dry_run: bool, kubeconfig: str | None, context: str | None) -> None:
    """Drain NODE gang by gang: cordon it and mark it gpufleet.dev/drain, and the controller evicts
    every gang on it whole, each requeued at its place. NODE/GPU[,GPU]: evict the gangs on those GPUs now."""
    from gpufleet.commands.admin_plan import drain_gangs
    from gpufleet.domain import ANNOTATION_DRAIN

    node, gpus = parse_drain_target(target)

    async def work(api: ClusterApi) -> tuple[list[GangAction], list[str]]:
        try:
            raw = await api.get(Kind.NODE, "", node)
        except ApiError as err:
            raise ClusterAccessError(f"{api.server}: read node {node}: {err}") from None
        if raw is None:
            raise ClusterAccessError(f"NODE: node {node} does not exist", exit_code=2)
        count = _gpu_count(raw)
        if gpus and max(gpus) >= count:
            raise ClusterAccessError(f"GPU: node {node} has {count} GPU(s) (indices 0 to {count - 1}), "
                                     f"not GPU {max(gpus)}", exit_code=2)
        cluster = await _read(api)
        actions = drain_gangs(cluster.view, node, gpus)
        if dry_run:
            return actions, []
        what = f"GPU {','.join(map(str, sorted(gpus)))} of node {node}" if gpus else f"node {node}"
        note = f"{what} drained by operator {_actor()} (gpufleet admin): {len(actions)} gang(s)"
        if gpus:
            blocked = await _evict(api, cluster, actions, "OperatorDrain")
        else:
            blocked = []
            try:
                await api.patch(Kind.NODE, "", node, {"spec": {"unschedulable": True},
                                                      "metadata": {"annotations": {ANNOTATION_DRAIN: "true"}}})
            except ApiError as err:
                raise ClusterAccessError(f"{api.server}: patch node {node}: {err}") from None
        await _event(api, "OperatorDrain", note, kind="Node", namespace="", name=node, uid=_uid(raw))
        return actions, blocked

    actions, blocked = _run(kubeconfig, context, work)
    if gpus:
        if dry_run:
            for action in actions:
                click.echo(f"would evict {_describe(action)}")
        click.echo(f"GPU {','.join(map(str, sorted(gpus)))} of node {node}: {len(actions)} gang(s) "
                   f"{'would be' if dry_run else 'were'} evicted")
        _blocked(blocked)
        return
    lead = "would cordon" if dry_run else "cordoned"
    click.echo(f"{lead} node {node} with {ANNOTATION_DRAIN}=true: the controller drains it gang by gang, "
               "each gang requeued at its place")
    for action in actions:
        click.echo(f"{'would drain' if dry_run else 'drains'} {_describe(action)}")
