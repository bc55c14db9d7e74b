"""A Kubernetes API server emulator over real HTTP, for the controller's contract tests and benchmark.

kmock (``kmock.KubernetesScaffold``) is the HTTP side: the aiohttp server, request parsing into
Kubernetes terms (resource, namespace, name, subresource), ``Status`` error bodies, discovery.
What kmock 0.8 cannot express is written here, on top of it, by serving requests from
:class:`gpufleet.testing.fake_cluster.FakeCluster` (the store the unit tests use), so unit and contract tests
share one set of API semantics:

- kmock's own ``KubernetesEmulator`` has no resourceVersions (its lists say ``"..."``), no watch
  resumption or 410 Gone, no optimistic concurrency, no pods/binding or pods/eviction semantics,
  no PodDisruptionBudgets; and its DSL matches every request against every earlier one (the cost of
  a request grows with the number served: about 0.1 s per request after 200 requests, measured),
  which rules it out for thousands of bindings. Requests for the resources below are therefore
  routed straight to the store in :meth:`ApiServerEmulator._handle`; anything else (discovery,
  unknown URLs) goes to kmock as usual.
- Watches stream JSON lines; a too-old resourceVersion gets a 200 with one ``ERROR`` event holding a
  410 ``Status``, as kube-apiserver's watch cache answers.
- Faults injected with status 0 close the connection without an answer.
- :meth:`ApiServerEmulator.stop` then :meth:`~ApiServerEmulator.start` restart the HTTP server on the
  same port with the same store (every connection and watch is dropped), as an API server restart
  over an etcd that keeps the data; ``store.compact()`` in between makes resumed watches get 410.

The caller of each request (its ``fieldManager`` parameter, else "anonymous") is recorded in the
store's call log.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp.web
import attrs
import kmock
import msgspec

from gpufleet.kube import ApiError, FieldSelector, Kind
from gpufleet.testing.fake_cluster import PDB_MESSAGE, FakeCluster

_BY_PATH: dict[tuple[str | None, str | None, str | None], Kind] = {(k.group, k.version, k.plural): k for k in Kind}
# kmock reads /api/v1/namespaces[/NAME] as a namespace prefix with no resource: such requests are
# served under this plural instead (rewritten by ``namespaces_rewritten`` before kmock parses them).
NAMESPACES_ALIAS = "gpufleet-emulator-namespaces"
_BY_PATH[("", "v1", NAMESPACES_ALIAS)] = Kind.NAMESPACE


def namespaces_rewritten(raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.BaseRequest:
    """``raw_request`` with a path on the Namespace kind itself (``/api/v1/namespaces[/NAME]``)
    moved to :data:`NAMESPACES_ALIAS`, which kmock parses as a resource; other requests as they are."""
    parts = raw_request.path.strip("/").split("/")
    if parts[:3] != ["api", "v1", "namespaces"] or len(parts) not in (3, 4):
        return raw_request
    path = "/".join(["", "api", "v1", NAMESPACES_ALIAS, *parts[3:]])
    return raw_request.clone(rel_url=raw_request.rel_url.with_path(path).with_query(raw_request.query))
_encode = msgspec.json.encode
_decode = msgspec.json.decode


@attrs.frozen
class _Call:
    """One request for a resource of the store, as :meth:`ApiServerEmulator._serve` reads it."""

    kind: Kind
    method: str  # upper case
    namespace: str  # "" when none
    name: str | None
    subresource: str | None
    params: dict[str, str]
    data: Any  # the JSON body, None when there is none (or it is not JSON)
    raw: aiohttp.web.BaseRequest


async def _direct_call(raw: aiohttp.web.BaseRequest) -> _Call | None:
    """The request when its path names a resource of the store, read as kmock reads it (path parts,
    query, JSON body) without kmock's request model, whose parsing cost more than serving the request;
    None for anything else (discovery, unknown URLs: kmock's)."""
    parts = raw.path.strip("/").split("/")
    if parts[0] == "api" and len(parts) >= 3:
        group, version, rest = "", parts[1], parts[2:]
    elif parts[0] == "apis" and len(parts) >= 4:
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespace = ""
    if rest[0] == "namespaces":
        if len(rest) <= 2:  # the Namespace kind itself (see namespaces_rewritten)
            if group or version != "v1":
                return None
            rest = [NAMESPACES_ALIAS, *rest[1:]]
        else:
            namespace, rest = rest[1], rest[2:]
    kind = _BY_PATH.get((group, version, rest[0]))
    if kind is None or not all(rest):
        return None
    body = await raw.read()
    try:
        data = _decode(body) if body else None
    except msgspec.DecodeError:
        data = None
    return _Call(kind, raw.method.upper(), namespace, rest[1] if len(rest) > 1 else None,
                 "/".join(rest[2:]) or None, dict(raw.query), data, raw)


def _field_selector(kind: Kind, text: object) -> FieldSelector | None:
    """The ``fieldSelector`` query as the API server reads it (400 on a bad one or a field it
    cannot select on). Applied to each object and each watch event's object, as the API server
    does for objects that match now (a pod's ``spec.nodeName`` is set once, at binding)."""
    if not isinstance(text, str) or not text:
        return None
    try:
        selector = FieldSelector.parse(text)
        selector.check(kind.kind)
    except ValueError as err:
        raise ApiError(400, "BadRequest", str(err)) from None
    return selector


def _json(body: Any, status: int = 200) -> aiohttp.web.Response:
    return aiohttp.web.Response(body=_encode(body), status=status, content_type="application/json")


def _status(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {},
                            "status": "Success" if code < 400 else "Failure", "code": code}
    if code >= 400:
        body.update(reason=reason, message=message, details=details or {})
    return body


@attrs.define(kw_only=True)
class ApiServerEmulator(kmock.KubernetesScaffold):
    store: FakeCluster = attrs.field(factory=FakeCluster)
    port: int | None = None
    _server: kmock.Server | None = attrs.field(default=None, init=False)

    # --------------------------------------------------------------------------- serving

    async def start(self) -> str:
        """Serve on ``port`` (a free one the first time); returns the base URL."""
        self._server = kmock.Server(self, port=self.port)
        await self._server.__aenter__()
        self.port = self._server.port
        return self.url_text

    async def stop(self) -> None:
        if self._server is not None:
            self.store.drop_watches()
            server, self._server = self._server, None
            await server.__aexit__(None, None, None)

    @property
    def url_text(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> ApiServerEmulator:
        await super().__aenter__()
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()
        await super().__aexit__(*exc)

    # --------------------------------------------------------------------------- routing

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        call = await _direct_call(raw_request)
        if call is not None:  # the store's resources, without kmock's parsing (see _direct_call)
            try:
                return await self._route(call)
            except Exception as err:  # as kmock answers a failure of its own handlers
                if not self._errors:
                    raise
                self._errors[-1].append(err)
                return await self._render_error(err)
        response: aiohttp.web.StreamResponse = await super().__call__(namespaces_rewritten(raw_request))
        return response

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        resource = request.resource
        kind = _BY_PATH.get((resource.group, resource.version, resource.plural)) if resource is not None else None
        if kind is None:
            return await super()._handle(request)
        raw = request._raw_request
        assert raw is not None
        return await self._route(_Call(kind, str(request.method.value).upper(), request.namespace or "",
                                       request.name, request.subresource, dict(request.params), request.data, raw))

    async def _route(self, call: _Call) -> aiohttp.web.StreamResponse:
        kind = call.kind
        caller = call.params.get("fieldManager") or "anonymous"
        try:
            return await self._serve(kind, call, caller)
        except ApiError as err:
            if err.status == 0:  # an injected "no answer": drop the connection
                if call.raw.transport is not None:
                    call.raw.transport.close()
                return aiohttp.web.Response(status=500)
            details: dict[str, Any] = {"name": call.name or "", "kind": kind.plural}
            if err.status == 429 and err.message.startswith(PDB_MESSAGE):
                details["causes"] = [{"reason": "DisruptionBudget", "message": err.message[len(PDB_MESSAGE):].strip()}]
                return _json(_status(429, "TooManyRequests", PDB_MESSAGE, details), 429)
            return _json(_status(err.status, err.reason, err.message, details), err.status)

    async def _serve(self, kind: Kind, request: _Call, caller: str) -> aiohttp.web.StreamResponse:
        store = self.store
        method = request.method
        namespace = request.namespace
        name = request.name
        sub = request.subresource
        body = request.data if isinstance(request.data, dict) else {}

        def run(op: str, action: Any, *, who: str = name or "") -> Any:
            return store._evaluate(op, kind, namespace, who, caller, action)

        if method == "GET" and name is None:
            selector = _field_selector(kind, request.params.get("fieldSelector"))
            if request.params.get("watch") in ("true", "1"):
                run("watch", lambda: None)
                return await self._watch(kind, request, namespace, selector)
            items, rv = run("list", lambda: store._list(kind))
            if namespace:
                items = [o for o in items if (o.get("metadata") or {}).get("namespace") == namespace]
            if selector is not None:
                items = [o for o in items if selector.matches(o)]
            return _json({"kind": f"{kind.kind}List", "apiVersion": kind.api_version,
                          "metadata": {"resourceVersion": rv}, "items": items})
        if kind in (Kind.SUBJECT_ACCESS_REVIEW, Kind.TOKEN_REVIEW):
            review = store._review_access if kind is Kind.SUBJECT_ACCESS_REVIEW else store._review_token
            if method == "POST" and name is None:
                return _json(run("create", lambda: review(body)), 201)
            raise ApiError(405, "MethodNotAllowed", f"{method} {kind.plural}: only create")
        if name is None:
            if method == "POST":
                where = {"namespace": namespace} if namespace else {}
                obj = {**body, "metadata": {**(body.get("metadata") or {}), **where}}
                who = str((obj.get("metadata") or {}).get("name") or "")
                return _json(run("create", lambda: store._create(kind, obj, namespace), who=who), 201)
            raise ApiError(405, "MethodNotAllowed", f"{method} on a collection")
        if method == "GET":
            return _json(run("get", lambda: store._get(kind, namespace, name)))
        if method == "POST" and kind is Kind.POD and sub == "binding":
            node = str((body.get("target") or {}).get("name") or "")
            annotations = (body.get("metadata") or {}).get("annotations")
            run("bind", lambda: store._bind(namespace, name, node, annotations))
            return _json(_status(201, "", ""), 201)
        if method == "POST" and kind is Kind.POD and sub == "eviction":
            run("evict", lambda: store._evict(namespace, name))
            return _json(_status(201, "", ""), 201)
        if method == "PUT" and sub is None:
            return _json(run("replace", lambda: store._replace(kind, {**body, "metadata": {
                **(body.get("metadata") or {}), "name": name, **({"namespace": namespace} if namespace else {})}})))
        if method == "PATCH":
            if sub == "status":
                return _json(run("patch_status", lambda: store._patch(kind, namespace, name, body, status_only=True)))
            if sub is None:
                return _json(run("patch", lambda: store._patch(kind, namespace, name, body)))
        if method == "DELETE" and sub is None:
            run("delete", lambda: store.delete(kind, namespace, name))
            return _json(_status(200, "", ""))
        raise ApiError(405, "MethodNotAllowed", f"{method} {kind.plural}/{sub or ''}")

    async def _watch(self, kind: Kind, request: _Call, namespace: str,
                     selector: FieldSelector | None) -> aiohttp.web.StreamResponse:
        raw = request.raw
        response = aiohttp.web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        await response.prepare(raw)
        stream: AsyncIterator[tuple[str, dict[str, Any]]] = self.store._watch(
            kind, str(request.params.get("resourceVersion") or "")
        )
        try:
            async for event_type, obj in stream:
                if namespace and (obj.get("metadata") or {}).get("namespace") != namespace:
                    continue
                if selector is not None and not selector.matches(obj):
                    continue
                await response.write(_encode({"type": event_type, "object": obj}) + b"\n")
        except ApiError as err:
            if err.status == 410:
                error = _status(410, "Expired", err.message)
                await response.write(_encode({"type": "ERROR", "object": error}) + b"\n")
            # status 0: the store dropped its watches (a restart): end the stream without a word
        except (ConnectionError, RuntimeError):
            pass  # the client went away
        finally:
            with contextlib.suppress(Exception):
                await stream.aclose()  # type: ignore[attr-defined]
        with contextlib.suppress(ConnectionError, RuntimeError):
            await response.write_eof()
        return response
