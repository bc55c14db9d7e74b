"""An in-memory Kubernetes API for tests: :class:`FakeCluster` (the store) and :class:`VirtualClock`.

:class:`FakeCluster` keeps objects the way an API server backed by etcd does, as far as the
controller can tell: one global, increasing ``resourceVersion``; watches that resume from a version
and fail with 410 Gone once that version has been compacted away; optimistic concurrency (409) on
replace; the pods/binding subresource (409 when the pod is already bound, annotations of the
Binding copied onto the pod as the real API server does); the pods/eviction subresource checking
PodDisruptionBudgets (429); JSON merge patches; the status subresource; kinds it does not serve
(404, as for a CRD that is not installed: :attr:`FakeCluster.not_served`).

Each caller gets its own :class:`FakeClient` (``cluster.client("replica-a")``), which implements
:class:`~gpufleet.kube.client.port.ClusterApi`; every call is logged with its caller in
:attr:`FakeCluster.calls`. Faults are injected with :meth:`FakeCluster.fail`. The contract tests
put the same store behind an HTTP front, so unit and contract tests exercise one set of semantics.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpufleet.adapters import format_time
from gpufleet.kube import ApiError, ClusterApi, FieldSelector, Kind, ObjectList, WatchEvent, label_selector_matches

__all__ = ["Call", "FakeClient", "FakeCluster", "VirtualClock", "merge_patch"]

JsonDict = dict[str, Any]
Key = tuple[str, str]

_CLOSED = object()  # put on watch queues when the "server" drops every connection
PDB_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."


def copy_json(value: Any) -> Any:
    """A deep copy of JSON-like data (much cheaper than copy.deepcopy: no memo, no reflection)."""
    if isinstance(value, dict):
        return {k: copy_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [copy_json(v) for v in value]
    return value


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch of ``target`` (not modified) by ``patch``."""
    if not isinstance(patch, dict):
        return copy_json(patch)
    out: JsonDict = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


class VirtualClock:
    """A clock that only moves when a test calls :meth:`advance`; sleepers wake in deadline order."""

    def __init__(self, start: float = 1_767_225_600.0) -> None:  # 2026-01-01T00:00:00Z
        self._now = start
        self._seq = 0
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._seq += 1
        heapq.heappush(self._sleepers, (self._now + seconds, self._seq, future))
        await future

    async def advance(self, seconds: float, settle: int = 20) -> None:
        """Move time forward, waking each sleeper at its own deadline, and let woken tasks run."""
        target = self._now + seconds
        while self._sleepers and self._sleepers[0][0] <= target:
            deadline, _, future = heapq.heappop(self._sleepers)
            self._now = max(self._now, deadline)
            if not future.done():
                future.set_result(None)
                await _settle(settle)
        self._now = target
        await _settle(settle)


async def _settle(rounds: int) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)


@dataclass(frozen=True, slots=True)
class Call:
    op: str  # list | watch | get | create | replace | patch | patch_status | bind | evict | delete
    kind: Kind
    namespace: str
    name: str
    caller: str
    status: int  # HTTP-like outcome: 200/201, or the error's status


@dataclass
class _Fault:
    op: str
    status: int
    remaining: int
    after_apply: bool
    match: Callable[[str, str], bool] | None
    message: str
    kind: Kind | None = None


@dataclass
class _Store:
    objects: dict[Key, JsonDict] = field(default_factory=dict)
    history: list[tuple[int, str, JsonDict]] = field(default_factory=list)
    watchers: set[asyncio.Queue[Any]] = field(default_factory=set)


def _meta(obj: Mapping[str, Any]) -> JsonDict:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _int_or_percent(value: Any, total: int, round_up: bool) -> int:
    if isinstance(value, str) and value.endswith("%"):
        scaled = int(value[:-1]) * total
        return -(-scaled // 100) if round_up else scaled // 100
    return int(value)


class FakeCluster:
    """The store behind every :class:`FakeClient` (see the module docstring)."""

    def __init__(self, clock: Any = None, *, graceful_eviction: bool = False, history_limit: int = 1_000_000,
                 server: str = "https://fake-apiserver:6443", default_namespace: str = "default",
                 not_served: Iterable[Kind] = ()) -> None:
        self.clock = clock if clock is not None else VirtualClock()
        self.server = server  # what clients report as their API server, for messages
        self.default_namespace = default_namespace  # the namespace of the clients' "current context"
        self.not_served = set(not_served)  # every call on these kinds is a 404
        self.graceful_eviction = graceful_eviction  # evicted pods linger (deletionTimestamp) until finished
        self.history_limit = history_limit
        self._stores: dict[Kind, _Store] = {kind: _Store() for kind in Kind}
        self._rv = 0
        self._compacted = 0
        self._uid = 0
        self.calls: list[Call] = []
        self.log_calls = True
        self._faults: list[_Fault] = []
        # SubjectAccessReviews: answered by ``access_answer`` (the review's spec -> allowed) when
        # set, else by the RBAC table of :meth:`grant_queue`.
        self.access_answer: Callable[[JsonDict], bool] | None = None
        self.queue_grants: set[tuple[str, str, str]] = set()  # (subject, queue, namespace or "")
        # Other grants of the table (:meth:`grant`): (subject, verb, resource, name or "" for all, namespace or "").
        self.grants: set[tuple[str, str, str, str, str]] = set()
        # TokenReviews: the bearer tokens the fake API server knows (:meth:`add_token`), token -> userInfo.
        self.tokens: dict[str, JsonDict] = {}

    # ------------------------------------------------------------------------------ test hooks

    def client(self, caller: str = "controller") -> FakeClient:
        return FakeClient(self, caller)

    def fail(
        self,
        op: str,
        status: int,
        times: int = 1,
        *,
        after_apply: bool = False,
        match: Callable[[str, str], bool] | None = None,
        message: str = "injected fault",
        kind: Kind | None = None,
    ) -> None:
        """Make the next ``times`` calls of ``op`` (on ``kind``, when given, and whose (namespace,
        name) ``match``) fail with ``status``; ``after_apply``: the call takes effect first (a reply
        lost on the way back)."""
        self._faults.append(_Fault(op, status, times, after_apply, match, message, kind))

    def grant_queue(self, queue: str, *, user: str | None = None, group: str | None = None,
                    namespace: str | None = None) -> None:
        """What a RoleBinding (``namespace``) or ClusterRoleBinding (None) of a role with verb
        ``use`` on ``queues/<queue>`` in gpufleet.dev to ``user`` or ``group`` grants."""
        subject = f"user:{user}" if user is not None else f"group:{group}"
        self.queue_grants.add((subject, queue, namespace or ""))

    def grant(self, verb: str, resource: str, name: str | None = None, *, user: str | None = None,
              group: str | None = None, namespace: str | None = None) -> None:
        """What a RoleBinding (``namespace``) or ClusterRoleBinding (None) of a role with ``verb`` on
        ``resource`` in gpufleet.dev (only ``name`` when given, as ``resourceNames``; else every
        one) to ``user`` or ``group`` grants."""
        subject = f"user:{user}" if user is not None else f"group:{group}"
        self.grants.add((subject, verb, resource, name or "", namespace or ""))

    def add_token(self, token: str, user: str, groups: Iterable[str] = (), uid: str = "") -> None:
        """A bearer token that TokenReviews authenticate as ``user`` of ``groups``."""
        self.tokens[token] = {"username": user, "uid": uid or f"uid-{user}",
                              "groups": [*groups, "system:authenticated"]}

    def _allowed_by_table(self, spec: Mapping[str, Any]) -> bool:
        attributes = spec.get("resourceAttributes") or {}
        if attributes.get("group") != "gpufleet.dev":
            return False
        subjects = {f"user:{spec.get('user')}", *(f"group:{g}" for g in spec.get("groups") or [])}
        verb, resource = attributes.get("verb"), attributes.get("resource")
        name, namespace = attributes.get("name") or "", attributes.get("namespace") or ""
        if any(s in subjects and (v, r) == (verb, resource) and n in ("", name) and ns in ("", namespace)
               for s, v, r, n, ns in self.grants):
            return True
        if (verb, resource) != ("use", "queues"):
            return False
        return any(s in subjects and q == name and ns in ("", namespace) for s, q, ns in self.queue_grants)

    def _review_token(self, review: JsonDict) -> JsonDict:
        """The API server's answer to a TokenReview (not stored): the user of a known token, else
        ``authenticated: false`` with an error, as kube-apiserver answers an unknown token."""
        spec = review.get("spec")
        if not isinstance(spec, dict) or not isinstance(spec.get("token"), str) or not spec["token"]:
            raise ApiError(422, "Invalid", "TokenReview: spec.token: Required value")
        user = self.tokens.get(spec["token"])
        status: JsonDict = ({"authenticated": True, "user": copy_json(user)} if user is not None
                            else {"authenticated": False, "user": {}, "error": "invalid bearer token"})
        return {**copy_json(review), "status": status}

    def _review_access(self, review: JsonDict) -> JsonDict:
        """The API server's answer to a SubjectAccessReview (not stored, as the real one)."""
        spec = review.get("spec")
        if not isinstance(spec, dict) or not (spec.get("user") or spec.get("groups")):
            raise ApiError(422, "Invalid", "SubjectAccessReview: spec.user or spec.groups: Required value")
        answer = self.access_answer if self.access_answer is not None else self._allowed_by_table
        allowed = bool(answer(spec))
        return {**copy_json(review), "status": {"allowed": allowed,
                                                "reason": "granted by the fake's RBAC table" if allowed else ""}}

    def compact(self) -> None:
        """Forget the change history: watches resuming from an older version get 410 Gone."""
        self._compacted = self._rv
        for store in self._stores.values():
            store.history.clear()

    def drop_watches(self) -> None:
        """Close every open watch, as an API server restart does."""
        for store in self._stores.values():
            for queue in store.watchers:
                queue.put_nowait(_CLOSED)

    @property
    def resource_version(self) -> int:
        return self._rv

    def objects(self, kind: Kind) -> list[JsonDict]:
        return list(self._stores[kind].objects.values())

    def object(self, kind: Kind, namespace: str, name: str) -> JsonDict | None:
        return self._stores[kind].objects.get((namespace if kind.namespaced else "", name))

    def put(self, kind: Kind, obj: JsonDict) -> JsonDict:
        """Create or overwrite an object (test setup), with the usual change event."""
        namespace, name = self._key(kind, obj, "")
        if (namespace, name) in self._stores[kind].objects:
            meta = dict(_meta(obj))
            meta.pop("resourceVersion", None)
            return self._replace(kind, {**obj, "metadata": meta}, check_version=False)
        return self._create(kind, obj, "")

    def delete(self, kind: Kind, namespace: str, name: str) -> None:
        key = (namespace if kind.namespaced else "", name)
        store = self._stores[kind]
        if key not in store.objects:
            raise ApiError(404, "NotFound", f'{kind.plural} "{name}" not found')
        old = store.objects.pop(key)
        gone = merge_patch(old, {"metadata": {"resourceVersion": str(self._bump())}})
        self._emit(kind, "DELETED", gone)

    def set_pod_phase(self, namespace: str, name: str, phase: str) -> None:
        """What the kubelet does: report a pod's phase (with a start time once it runs)."""
        status: JsonDict = {"phase": phase}
        if phase == "Running":
            status["startTime"] = format_time(self.clock.now())
        self._patch(Kind.POD, namespace, name, {"status": status}, status_only=True)

    def finish_terminations(self) -> int:
        """Remove every pod that is terminating (gracefully evicted); returns how many."""
        doomed = [key for key, obj in self._stores[Kind.POD].objects.items() if _meta(obj).get("deletionTimestamp")]
        for namespace, name in doomed:
            self.delete(Kind.POD, namespace, name)
        return len(doomed)

    def count(self, op: str, *, status: int | None = None, caller: str | None = None) -> int:
        return sum(
            1 for c in self.calls
            if c.op == op and (status is None or c.status == status) and (caller is None or c.caller == caller)
        )

    # -------------------------------------------------------------------------------- internals

    def _bump(self) -> int:
        self._rv += 1
        return self._rv

    def _key(self, kind: Kind, obj: Mapping[str, Any], namespace: str) -> Key:
        meta = _meta(obj)
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            raise ApiError(422, "Invalid", f"{kind.kind}: metadata.name: Required value")
        if not kind.namespaced:
            return ("", name)
        return (str(meta.get("namespace") or namespace or "default"), name)

    def _emit(self, kind: Kind, event_type: str, obj: JsonDict) -> None:
        store = self._stores[kind]
        rv = int(_meta(obj)["resourceVersion"])
        store.history.append((rv, event_type, obj))
        if len(store.history) > self.history_limit:
            del store.history[: len(store.history) // 2]
            self._compacted = max(self._compacted, store.history[0][0] - 1)
        for queue in store.watchers:
            queue.put_nowait((rv, event_type, obj))

    def _check_fault(self, op: str, kind: Kind, namespace: str, name: str, after: bool) -> None:
        for fault in self._faults:
            if fault.op == op and fault.remaining > 0 and fault.after_apply == after and (
                fault.kind is None or fault.kind is kind
            ) and (fault.match is None or fault.match(namespace, name)):
                fault.remaining -= 1
                if fault.status == 0:
                    raise ApiError(0, "Disconnected", fault.message)
                raise ApiError(fault.status, _REASONS.get(fault.status, "Error"), fault.message)

    def _record(self, op: str, kind: Kind, namespace: str, name: str, caller: str, status: int) -> None:
        if self.log_calls:
            self.calls.append(Call(op, kind, namespace, name, caller, status))

    def _stamp(self, obj: JsonDict, key: Key, kind: Kind, old: JsonDict | None) -> JsonDict:
        meta = dict(_meta(obj))
        meta["name"] = key[1]
        if kind.namespaced:
            meta["namespace"] = key[0]
        else:
            meta.pop("namespace", None)
        meta["resourceVersion"] = str(self._bump())
        if old is None:
            self._uid += 1
            meta.setdefault("uid", f"00000000-0000-4000-8000-{self._uid:012d}")
            meta.setdefault("creationTimestamp", format_time(self.clock.now()))
            meta["generation"] = 1
        else:
            old_meta = _meta(old)
            for kept in ("uid", "creationTimestamp", "generation"):
                if kept in old_meta:
                    meta[kept] = old_meta[kept]
            if old.get("spec") != obj.get("spec"):
                meta["generation"] = int(old_meta.get("generation", 1)) + 1
        return {"apiVersion": kind.api_version, "kind": kind.kind, **obj, "metadata": meta}

    def _list(self, kind: Kind) -> tuple[list[JsonDict], str]:
        return list(self._stores[kind].objects.values()), str(self._rv)

    async def _watch(self, kind: Kind, resource_version: str) -> AsyncIterator[tuple[str, JsonDict]]:
        store = self._stores[kind]
        since = int(resource_version) if resource_version not in ("", "0") else None
        if since is not None and since < self._compacted:
            raise ApiError(410, "Expired", f"too old resource version: {since} ({self._compacted})")
        queue: asyncio.Queue[Any] = asyncio.Queue()
        store.watchers.add(queue)
        try:
            if since is None:  # no version: the current state as ADDED events, then changes
                last = self._rv
                for obj in list(store.objects.values()):
                    yield "ADDED", obj
            else:
                last = since
                for rv, event_type, obj in list(store.history):
                    if rv > last:
                        last = rv
                        yield event_type, obj
            while True:
                item = await queue.get()
                if item is _CLOSED:
                    raise ApiError(0, "Disconnected", "the API server closed the watch")
                rv, event_type, obj = item
                if rv > last:
                    last = rv
                    yield event_type, obj
        finally:
            store.watchers.discard(queue)

    def _get(self, kind: Kind, namespace: str, name: str) -> JsonDict:
        obj = self._stores[kind].objects.get((namespace if kind.namespaced else "", name))
        if obj is None:
            raise ApiError(404, "NotFound", f'{kind.plural} "{name}" not found')
        return obj

    def _create(self, kind: Kind, obj: JsonDict, namespace: str) -> JsonDict:
        key = self._key(kind, obj, namespace)
        store = self._stores[kind]
        if key in store.objects:
            raise ApiError(409, "AlreadyExists", f'{kind.plural} "{key[1]}" already exists')
        stored = self._stamp(copy_json(obj), key, kind, None)
        store.objects[key] = stored
        self._emit(kind, "ADDED", stored)
        return stored

    def _replace(self, kind: Kind, obj: JsonDict, check_version: bool = True) -> JsonDict:
        key = self._key(kind, obj, "")
        store = self._stores[kind]
        old = store.objects.get(key)
        if old is None:
            raise ApiError(404, "NotFound", f'{kind.plural} "{key[1]}" not found')
        wanted = _meta(obj).get("resourceVersion")
        if check_version and wanted is not None and wanted != _meta(old).get("resourceVersion"):
            raise ApiError(
                409, "Conflict",
                f'Operation cannot be fulfilled on {kind.plural} "{key[1]}": the object has been modified; '
                "please apply your changes to the latest version and try again",
            )
        stored = self._stamp(copy_json(obj), key, kind, old)
        store.objects[key] = stored
        self._emit(kind, "MODIFIED", stored)
        return stored

    def _patch(self, kind: Kind, namespace: str, name: str, patch: JsonDict, status_only: bool = False,
               with_status: bool = False) -> JsonDict:
        old = self._get(kind, namespace, name)
        wanted = _meta(patch).get("resourceVersion")
        if wanted is not None and wanted != _meta(old).get("resourceVersion"):
            raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {kind.plural} "{name}"')
        if status_only:
            patch = {"status": patch.get("status")} if "status" in patch else {}
        elif not with_status:
            patch = {k: v for k, v in patch.items() if k != "status"}  # status goes through /status only
        merged = merge_patch(old, patch)
        merged_meta = dict(_meta(merged))
        merged_meta.pop("resourceVersion", None)
        merged["metadata"] = merged_meta
        stored = self._stamp(merged, (namespace if kind.namespaced else "", name), kind, old)
        self._stores[kind].objects[(namespace if kind.namespaced else "", name)] = stored
        self._emit(kind, "MODIFIED", stored)
        return stored

    def _bind(self, namespace: str, name: str, node: str, annotations: Mapping[str, str] | None) -> None:
        pod = self._get(Kind.POD, namespace, name)
        bound_to = (pod.get("spec") or {}).get("nodeName")
        if bound_to:
            raise ApiError(409, "Conflict", f"pod {name} is already assigned to node \"{bound_to}\"")
        if _meta(pod).get("deletionTimestamp"):
            raise ApiError(409, "Conflict", f"pod {name} is being deleted, cannot be assigned to a host")
        patch: JsonDict = {"spec": {"nodeName": node}}
        if annotations:
            patch["metadata"] = {"annotations": dict(annotations)}
        # As kube-apiserver's BindingREST: the Binding also sets PodScheduled=True.
        conditions = [c for c in (pod.get("status") or {}).get("conditions") or []
                      if isinstance(c, dict) and c.get("type") != "PodScheduled"]
        patch["status"] = {"conditions": [*conditions, {"type": "PodScheduled", "status": "True"}]}
        self._patch(Kind.POD, namespace, name, patch, status_only=False, with_status=True)

    def pdb_blocking(self, namespace: str, pod: Mapping[str, Any]) -> str | None:
        """Why evicting ``pod`` would break a PodDisruptionBudget of its namespace, or None."""
        if not self._stores[Kind.PDB].objects:  # no budget anywhere: no walk over every pod per eviction
            return None
        labels = _meta(pod).get("labels") or {}
        pods = [p for (ns, _), p in self._stores[Kind.POD].objects.items() if ns == namespace]
        for (ns, pdb_name), pdb in sorted(self._stores[Kind.PDB].objects.items()):
            spec = pdb.get("spec") or {}
            if ns != namespace or not label_selector_matches(spec.get("selector"), labels):
                continue
            members = [
                p for p in pods
                if label_selector_matches(spec.get("selector"), _meta(p).get("labels") or {})
                and not _meta(p).get("deletionTimestamp")
            ]
            healthy = sum(1 for p in members if (p.get("status") or {}).get("phase") == "Running")
            if "minAvailable" in spec:
                needed = _int_or_percent(spec["minAvailable"], len(members), round_up=True)
                allowed = healthy - needed
            else:
                unavailable = _int_or_percent(spec.get("maxUnavailable", 0), len(members), round_up=True)
                needed = len(members) - unavailable
                allowed = unavailable - (len(members) - healthy)
            if allowed <= 0:
                return f"The disruption budget {pdb_name} needs {needed} healthy pods and has {healthy} currently"
        return None

    def _evict(self, namespace: str, name: str) -> None:
        pod = self._get(Kind.POD, namespace, name)
        if _meta(pod).get("deletionTimestamp"):
            return  # already terminating: nothing more to do
        blocked = self.pdb_blocking(namespace, pod)
        if blocked is not None:
            raise ApiError(429, "TooManyRequests", f"{PDB_MESSAGE} {blocked}")
        if self.graceful_eviction:
            # An Eviction with no DeleteOptions: the pod's own grace period, as kube-apiserver gives it
            # (deletionTimestamp is when the grace ends).
            grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
            self._patch(Kind.POD, namespace, name, {"metadata": {
                "deletionTimestamp": format_time(self.clock.now() + float(grace)),
                "deletionGracePeriodSeconds": grace}})
        else:
            self.delete(Kind.POD, namespace, name)

    def _evaluate(self, op: str, kind: Kind, namespace: str, name: str, caller: str, action: Callable[[], Any]) -> Any:
        """Run one call with fault injection and logging."""
        try:
            if kind in self.not_served:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            self._check_fault(op, kind, namespace, name, after=False)
            result = action()
            self._check_fault(op, kind, namespace, name, after=True)
        except ApiError as err:
            self._record(op, kind, namespace, name, caller, err.status)
            raise
        self._record(op, kind, namespace, name, caller, 201 if op in ("create", "bind", "evict") else 200)
        return result


_REASONS = {
    400: "BadRequest", 404: "NotFound", 409: "Conflict", 410: "Expired", 422: "Invalid",
    429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable", 504: "Timeout",
}



def _check_selector(kind: Kind, selector: FieldSelector | None) -> None:
    """The API server's 400 for a field it cannot select on."""
    if selector is not None:
        try:
            selector.check(kind.kind)
        except ValueError as err:
            raise ApiError(400, "BadRequest", str(err)) from None


class FakeClient:
    """One caller's view of a :class:`FakeCluster`: the :class:`~gpufleet.kube.client.port.ClusterApi` port.

    Objects handed out are copies, as they would be after a trip over the wire."""

    def __init__(self, cluster: FakeCluster, caller: str) -> None:
        self.cluster = cluster
        self.caller = caller

    @property
    def server(self) -> str:
        return self.cluster.server

    @property
    def default_namespace(self) -> str:
        return self.cluster.default_namespace

    async def list(self, kind: Kind, field_selector: FieldSelector | None = None) -> ObjectList:
        _check_selector(kind, field_selector)
        items, rv = self.cluster._evaluate("list", kind, "", "", self.caller, lambda: self.cluster._list(kind))
        await asyncio.sleep(0)
        return ObjectList([copy_json(i) for i in items if field_selector is None or field_selector.matches(i)], rv)

    async def watch(self, kind: Kind, resource_version: str,
                    field_selector: FieldSelector | None = None) -> AsyncIterator[WatchEvent]:
        _check_selector(kind, field_selector)
        self.cluster._evaluate("watch", kind, "", "", self.caller, lambda: None)
        async for event_type, obj in self.cluster._watch(kind, resource_version):
            if field_selector is None or field_selector.matches(obj):
                yield WatchEvent(event_type, copy_json(obj))

    async def get(self, kind: Kind, namespace: str, name: str) -> JsonDict | None:
        try:
            obj = self.cluster._evaluate(
                "get", kind, namespace, name, self.caller, lambda: self.cluster._get(kind, namespace, name)
            )
        except ApiError as err:
            if err.status == 404:
                return None
            raise
        await asyncio.sleep(0)
        return copy_json(obj)  # type: ignore[no-any-return]

    async def create(self, kind: Kind, obj: JsonDict) -> JsonDict:
        ns, name = _meta(obj).get("namespace") or "", _meta(obj).get("name") or ""
        stored = self.cluster._evaluate(
            "create", kind, ns, name, self.caller, lambda: self.cluster._create(kind, obj, "")
        )
        await asyncio.sleep(0)
        return copy_json(stored)  # type: ignore[no-any-return]

    async def replace(self, kind: Kind, obj: JsonDict) -> JsonDict:
        ns, name = _meta(obj).get("namespace") or "", _meta(obj).get("name") or ""
        stored = self.cluster._evaluate(
            "replace", kind, ns, name, self.caller, lambda: self.cluster._replace(kind, obj)
        )
        await asyncio.sleep(0)
        return copy_json(stored)  # type: ignore[no-any-return]

    async def patch(self, kind: Kind, namespace: str, name: str, patch: JsonDict) -> JsonDict:
        stored = self.cluster._evaluate(
            "patch", kind, namespace, name, self.caller, lambda: self.cluster._patch(kind, namespace, name, patch)
        )
        await asyncio.sleep(0)
        return copy_json(stored)  # type: ignore[no-any-return]

    async def patch_status(self, kind: Kind, namespace: str, name: str, status: JsonDict) -> None:
        self.cluster._evaluate(
            "patch_status", kind, namespace, name, self.caller,
            lambda: self.cluster._patch(kind, namespace, name, {"status": status}, status_only=True),
        )
        await asyncio.sleep(0)

    async def bind(self, namespace: str, name: str, node: str, annotations: Mapping[str, str] | None = None) -> None:
        self.cluster._evaluate(
            "bind", Kind.POD, namespace, name, self.caller,
            lambda: self.cluster._bind(namespace, name, node, annotations),
        )
        await asyncio.sleep(0)

    async def delete(self, kind: Kind, namespace: str, name: str) -> None:
        self.cluster._evaluate(
            "delete", kind, namespace, name, self.caller, lambda: self.cluster.delete(kind, namespace, name)
        )
        await asyncio.sleep(0)

    async def evict(self, namespace: str, name: str) -> None:
        self.cluster._evaluate(
            "evict", Kind.POD, namespace, name, self.caller, lambda: self.cluster._evict(namespace, name)
        )
        await asyncio.sleep(0)

    async def close(self) -> None:
        return None

    async def create_access_review(self, review: JsonDict) -> JsonDict:
        answer = self.cluster._evaluate("create", Kind.SUBJECT_ACCESS_REVIEW, "", "", self.caller,
                                        lambda: self.cluster._review_access(review))
        await asyncio.sleep(0)
        return answer  # type: ignore[no-any-return]

    async def create_token_review(self, review: JsonDict) -> JsonDict:
        answer = self.cluster._evaluate("create", Kind.TOKEN_REVIEW, "", "", self.caller,
                                        lambda: self.cluster._review_token(review))
        await asyncio.sleep(0)
        return answer  # type: ignore[no-any-return]


if TYPE_CHECKING:  # the fake is an adapter of the one port: mypy checks it stays one

    def _is_a_port(client: FakeClient) -> ClusterApi:
        return client
