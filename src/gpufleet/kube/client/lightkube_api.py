"""The :class:`~gpufleet.kube.client.port.ClusterApi` port over HTTP, with lightkube's asyncio client.

Objects are read as plain dicts (lightkube's dict-backed generic resources), never as typed
models: the controller hands them to the same converters ``gpufleet replay`` uses. Subresources:
``pods/binding`` and ``pods/eviction`` (the API server answers both with a ``Status``; a
``Failure`` status is turned into an error like any other), and ``status`` of Queues and
PodGroups. lightkube's errors and httpx2's transport errors become :class:`~gpufleet.kube.client.port.ApiError`
(status 0 when no answer came). :func:`connect` is the one way in, for the controller and for
``gpufleet snapshot`` / ``explain``; a configuration it cannot use is a
:class:`~gpufleet.kube.client.port.ClusterAccessError` with exit code 2.

By default the bytes go through :class:`~gpufleet.kube.client.aiohttp_transport.AiohttpTransport`, and
the writes made once per pod (merge patches, status patches, Bindings, Evictions, Events), the lists and the watches
skip lightkube's request and response models: :class:`~gpufleet.kube.client.fast_calls.FastCalls`
sends the same requests over its own kept-alive connections (:mod:`gpufleet.kube.client.http1`)
and reads the watches' lines through that transport's aiohttp session (see BENCHMARKS.md).
``fast_http=False`` keeps lightkube's own httpx2 transport for everything (use it behind an HTTP proxy).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import httpx2
import yaml
from lightkube import AsyncClient, KubeConfig
from lightkube import operators as lk_operators
from lightkube.config.client_adapter import verify_cluster
from lightkube.config.kubeconfig import DEFAULT_KUBECONFIG, SingleConfig
from lightkube.core import resource as lk_resource
from lightkube.core.exceptions import ApiError as LightkubeApiError
from lightkube.core.exceptions import ConfigError
from lightkube.generic_resource import Generic
from lightkube.types import PatchType

from gpufleet.kube.client.aiohttp_transport import AiohttpTransport
from gpufleet.kube.client.fast_calls import (
    JSON,
    MERGE_PATCH,
    FastCalls,
    Unauthorized,
    body_message,
    error_from_answer,
)
from gpufleet.kube.client.port import (
    ApiError,
    ClusterAccessError,
    ClusterApi,
    FieldSelector,
    Kind,
    ObjectList,
    WatchEvent,
)

__all__ = ["LightkubeApi", "connect"]

JsonDict = dict[str, Any]
T = TypeVar("T")

_VERBS = ["get", "list", "global_list", "watch", "global_watch", "post", "put", "patch", "delete"]


def _resource_class(kind: Kind) -> Any:
    base = lk_resource.NamespacedResourceG if kind.namespaced else lk_resource.GlobalResource
    info = lk_resource.ApiInfo(
        resource=lk_resource.ResourceDef(kind.group, kind.version, kind.kind), plural=kind.plural, verbs=_VERBS
    )
    return type(f"Raw{kind.kind}", (base, Generic), {"_api_info": info})


def _subresource_class(kind: Kind, action: str, group: str, version: str, sub_kind: str, verbs: list[str]) -> Any:
    base = lk_resource.NamespacedSubResource if kind.namespaced else lk_resource.GlobalSubResource
    info = lk_resource.ApiInfo(
        resource=lk_resource.ResourceDef(group, version, sub_kind),
        parent=lk_resource.ResourceDef(kind.group, kind.version, kind.kind),
        plural=kind.plural,
        verbs=verbs,
        action=action,
    )
    return type(f"Raw{kind.kind}{action.capitalize()}", (base, Generic), {"_api_info": info})


_RESOURCES: dict[Kind, Any] = {kind: _resource_class(kind) for kind in Kind}
_STATUS: dict[Kind, Any] = {
    kind: _subresource_class(kind, "status", kind.group, kind.version, kind.kind, ["patch"])
    for kind in (Kind.QUEUE, Kind.POD_GROUP, Kind.POD, Kind.PROJECT, Kind.RESOURCE_CLAIM)
}
_BINDING = _subresource_class(Kind.POD, "binding", "", "v1", "Binding", ["post"])
_EVICTION = _subresource_class(Kind.POD, "eviction", "policy", "v1", "Eviction", ["post"])


def _api_error(err: BaseException) -> ApiError:
    if isinstance(err, LightkubeApiError):
        status = err.status
        message = status.message or ""
        causes = getattr(getattr(status, "details", None), "causes", None) or []
        extra = " ".join(c.message for c in causes if getattr(c, "message", None))
        return ApiError(int(status.code or 0), status.reason or "", f"{message} {extra}".strip())
    if isinstance(err, httpx2.HTTPStatusError):
        return ApiError(err.response.status_code, err.response.reason_phrase, body_message(err.response.content))
    return ApiError(0, type(err).__name__, str(err))


def _check_status(answer: Any) -> None:
    """Binding and Eviction answer with a Status object: a Failure is an error."""
    if isinstance(answer, dict) and answer.get("kind") == "Status" and answer.get("status") == "Failure":
        code = int(answer.get("code") or 500)
        raise ApiError(code, str(answer.get("reason") or ""), str(answer.get("message") or ""))



def _lightkube_fields(selector: FieldSelector | None) -> dict[str, Any] | None:
    """A :class:`FieldSelector` as lightkube's ``fields`` argument (it writes the same query)."""
    if selector is None:
        return None
    return {field: value if equal else lk_operators.not_equal(value) for field, value, equal in selector.terms}

class LightkubeApi:
    """:class:`~gpufleet.kube.client.port.ClusterApi` over a lightkube :class:`~lightkube.AsyncClient`."""

    def __init__(self, client: AsyncClient, list_chunk_size: int | None = 500, fast: FastCalls | None = None,
                 server: str = "") -> None:
        self.client = client
        self.server = server or str(client.config.cluster.server)
        self.list_chunk_size = list_chunk_size
        self.fast = fast  # the hot-path writes without lightkube's models; None: all through lightkube

    async def _fast_or_slow(self, fast: Callable[[FastCalls], Awaitable[Any]],
                            slow: Callable[[], Awaitable[T]], use_fast: bool = True) -> Any:
        """The call through :attr:`fast` when there is one; through lightkube without it, or when the
        credentials were refused (lightkube's auth flow re-reads a rotated token, then the fast path
        takes the new one)."""
        if self.fast is not None and use_fast:
            try:
                return await fast(self.fast)
            except Unauthorized:
                self.fast.forget_credentials()
        return await self._guard(slow)

    async def _guard(self, make: Callable[[], Awaitable[T]]) -> T:
        try:
            return await make()
        except (LightkubeApiError, httpx2.HTTPError) as err:
            raise _api_error(err) from None

    @property
    def default_namespace(self) -> str:
        return str(self.client.namespace or "default")

    async def list(self, kind: Kind, field_selector: FieldSelector | None = None) -> ObjectList:
        selector = field_selector.text() if field_selector is not None else ""
        if self.fast is not None and self.fast.can_list:
            try:
                items, version = await self.fast.list(kind.group, kind.version, kind.plural, self.list_chunk_size,
                                                      selector)
                return ObjectList(items, version)
            except Unauthorized:  # through lightkube, whose auth flow refreshes
                self.fast.forget_credentials()

        async def run() -> ObjectList:
            iterable = self.client.list(
                _RESOURCES[kind], namespace="*" if kind.namespaced else None, chunk_size=self.list_chunk_size,
                fields=_lightkube_fields(field_selector),
            )
            items = [dict(obj) async for obj in iterable]
            try:
                version = iterable.resourceVersion
            except Exception:  # an empty list never started: no version known
                version = ""
            return ObjectList(items, str(version or ""))

        return await self._guard(run)

    async def watch(self, kind: Kind, resource_version: str,
                    field_selector: FieldSelector | None = None) -> AsyncIterator[WatchEvent]:
        if self.fast is not None:
            url = self.fast.watch_url(kind.group, kind.version, kind.plural, resource_version,
                                      field_selector.text() if field_selector is not None else "")
            try:
                async for event_type, obj in self.fast.watch(url):
                    yield WatchEvent(event_type, obj)
                return  # ended by the server: the caller resumes from the last version it saw
            except Unauthorized:  # nothing was yielded: through lightkube, whose auth flow refreshes
                self.fast.forget_credentials()
        stream = self.client.watch(
            _RESOURCES[kind], namespace="*" if kind.namespaced else None, resource_version=resource_version or None,
            fields=_lightkube_fields(field_selector),
        )
        try:
            async for event_type, obj in stream:
                yield WatchEvent(str(event_type), dict(obj))
        except LightkubeApiError as err:  # an ERROR event (lightkube's ApiError is an HTTPStatusError too)
            raise _api_error(err) from None
        except httpx2.HTTPStatusError as err:  # refused (its streamed body is closed by lightkube by now)
            response = err.response
            body = b""
            with contextlib.suppress(httpx2.HTTPError, httpx2.StreamError):
                body = await response.aread()
            raise error_from_answer(response.status_code, response.headers.get("Content-Type"), body) from None
        except httpx2.HTTPError as err:
            raise _api_error(err) from None
        finally:
            close = getattr(stream, "aclose", None)
            if close is not None:
                await close()

    async def get(self, kind: Kind, namespace: str, name: str) -> JsonDict | None:
        try:
            obj = await self.client.get(_RESOURCES[kind], name, namespace=namespace or None)
        except (LightkubeApiError, httpx2.HTTPError) as err:
            error = _api_error(err)
            if error.status == 404:
                return None
            raise error from None
        return dict(obj)

    async def create(self, kind: Kind, obj: JsonDict) -> JsonDict:
        meta = obj.get("metadata")
        namespace = str(meta.get("namespace") or "") if kind.namespaced and isinstance(meta, dict) else ""

        def fast(calls: FastCalls) -> Awaitable[Any]:
            body = dict(obj)  # as lightkube completes it: apiVersion and kind when missing, at the end
            if not body.get("apiVersion"):
                body["apiVersion"] = kind.api_version
            if not body.get("kind"):
                body["kind"] = kind.kind
            url = calls.url(kind.group, kind.version, kind.plural, namespace or None, "")
            return calls.send("POST", url, body, JSON)

        answer = await self._fast_or_slow(
            fast, lambda: self.client.create(_RESOURCES[kind](obj)),
            use_fast=bool(namespace) or not kind.namespaced,  # lightkube's default namespace: left to lightkube
        )
        return dict(answer)

    async def replace(self, kind: Kind, obj: JsonDict) -> JsonDict:
        return dict(await self._guard(lambda: self.client.replace(_RESOURCES[kind](obj))))

    async def patch(self, kind: Kind, namespace: str, name: str, patch: JsonDict) -> JsonDict:
        def slow() -> Awaitable[Any]:
            return self.client.patch(
                _RESOURCES[kind], name, patch, namespace=namespace or None, patch_type=PatchType.MERGE
            )

        answer = await self._fast_or_slow(
            lambda fast: fast.send("PATCH", fast.url(kind.group, kind.version, kind.plural,
                                                     namespace if kind.namespaced else None, name), patch, MERGE_PATCH),
            slow,
            use_fast=bool(namespace) or not kind.namespaced,  # lightkube's default namespace: left to lightkube
        )
        return dict(answer)

    async def patch_status(self, kind: Kind, namespace: str, name: str, status: JsonDict) -> None:
        def slow() -> Awaitable[Any]:
            return self.client.patch(
                _STATUS[kind], name, {"status": status}, namespace=namespace or None, patch_type=PatchType.MERGE
            )

        await self._fast_or_slow(
            lambda fast: fast.send("PATCH", fast.url(kind.group, kind.version, kind.plural,
                                                     namespace if kind.namespaced else None, name, "status"),
                                   {"status": status}, MERGE_PATCH),
            slow,
            use_fast=bool(namespace) or not kind.namespaced,  # lightkube's default namespace: left to lightkube
        )

    async def bind(self, namespace: str, name: str, node: str, annotations: Mapping[str, str] | None = None) -> None:
        meta: JsonDict = {"name": name, "namespace": namespace}
        if annotations:
            meta["annotations"] = dict(annotations)
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        await self._post_subresource(name, namespace, "binding", body, _BINDING)

    async def delete(self, kind: Kind, namespace: str, name: str) -> None:
        await self._guard(lambda: self.client.delete(_RESOURCES[kind], name, namespace=namespace or None))

    async def evict(self, namespace: str, name: str) -> None:
        meta = {"name": name, "namespace": namespace}
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": meta}
        await self._post_subresource(name, namespace, "eviction", body, _EVICTION)

    async def _post_subresource(self, name: str, namespace: str, action: str, body: JsonDict, resource: Any) -> None:
        """POST to pods/<action>, whose answer is a Status (a Failure is an error)."""
        pods = Kind.POD
        answer = await self._fast_or_slow(
            lambda fast: fast.send("POST", fast.url(pods.group, pods.version, pods.plural, namespace, name, action),
                                   body, JSON),
            lambda: self.client.create(resource(body), name, namespace=namespace),
            use_fast=bool(namespace),
        )
        _check_status(answer)

    async def close(self) -> None:
        if self.fast is not None:
            self.fast.close()
        await self.client.close()

    async def create_access_review(self, review: JsonDict) -> JsonDict:
        return await self._create_review(Kind.SUBJECT_ACCESS_REVIEW, review)

    async def create_token_review(self, review: JsonDict) -> JsonDict:
        return await self._create_review(Kind.TOKEN_REVIEW, review)

    async def _create_review(self, kind: Kind, review: JsonDict) -> JsonDict:
        """POST a review (never stored: the API server answers it in its ``status``)."""
        answer = await self._fast_or_slow(
            lambda fast: fast.send("POST", fast.url(kind.group, kind.version, kind.plural, None, ""), review, JSON),
            lambda: self.client.create(_RESOURCES[kind](review)),
        )
        return dict(answer)


def _load_config(kubeconfig: str | None, context: str | None, server: str | None) -> SingleConfig | None:
    if server is not None:
        from lightkube.config.models import Cluster, User

        return KubeConfig.from_one(cluster=Cluster(server=server), user=User()).get()
    if kubeconfig is None:
        try:
            return KubeConfig.from_service_account().get(context)
        except ConfigError:  # not in a cluster: $KUBECONFIG, then ~/.kube/config, as lightkube looks
            kubeconfig = os.environ.get("KUBECONFIG") or DEFAULT_KUBECONFIG
    path = Path(kubeconfig).expanduser()
    if not path.is_file():
        raise ClusterAccessError(f"{kubeconfig}: no such kubeconfig file", exit_code=2)
    return _read_kubeconfig(path, kubeconfig, context).get(context)


def _read_kubeconfig(path: Path, label: str, context: str | None) -> KubeConfig:
    """The kubeconfig at ``path``, checked so that each thing wrong with it is one line naming the
    file (``label``) and the thing (ClusterAccessError, exit 2), not a traceback out of lightkube."""

    def wrong(what: str) -> ClusterAccessError:
        return ClusterAccessError(f"{label}: {what}", exit_code=2)

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise wrong(f"cannot be read: {err}") from None
    try:
        conf = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise wrong(f"not YAML{where}: {getattr(err, 'problem', None) or err}") from None
    if not isinstance(conf, dict):
        kind = type(conf).__name__
        raise wrong("an empty file" if conf is None else f"not a kubeconfig: a YAML {kind}, not a mapping")
    entries: dict[str, dict[str, Any]] = {}
    for section, key in (("clusters", "cluster"), ("contexts", "context"), ("users", "user")):
        items = conf.get(section)
        if items is None and section == "users":
            items = []
        if not isinstance(items, list) or (not items and section != "users"):
            raise wrong(f"defines no {section}" if not items else f"{section} is not a list")
        entries[section] = {}
        for i, item in enumerate(items):
            if not (isinstance(item, dict) and isinstance(item.get("name"), str) and isinstance(item.get(key), dict)):
                raise wrong(f"{section}[{i}] needs a name and a {key} mapping")
            entries[section][item["name"]] = item[key]
    for name, cluster in entries["clusters"].items():
        if not isinstance(cluster.get("server"), str):
            raise wrong(f"cluster {name} has no server")
    chosen = context if context is not None else conf.get("current-context")
    if not chosen:
        raise wrong("sets no current-context")
    if not isinstance(chosen, str) or chosen not in entries["contexts"]:
        raise wrong(f"defines no context {chosen}")
    ctx = entries["contexts"][chosen]
    if not isinstance(ctx.get("cluster"), str) or ctx["cluster"] not in entries["clusters"]:
        raise wrong(f"context {chosen} names cluster {ctx.get('cluster')}, which the file does not define")
    if ctx.get("user") and (not isinstance(ctx["user"], str) or ctx["user"] not in entries["users"]):
        raise wrong(f"context {chosen} names user {ctx['user']}, which the file does not define")
    try:
        return KubeConfig.from_dict(conf, fname=path)
    except (ConfigError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise wrong(f"not a usable kubeconfig: {type(err).__name__}: {err}") from None


def connect(
    kubeconfig: str | None = None,
    *,
    context: str | None = None,
    server: str | None = None,
    field_manager: str | None = "gpufleet",
    fast_http: bool = True,
    concurrency: int = 64,
    timeout: float = 30.0,
    list_chunk_size: int | None = 500,
) -> LightkubeApi:
    """A :class:`LightkubeApi` for a kubeconfig file and ``context`` (default: its current one), or
    the in-cluster service account, or ``$KUBECONFIG`` and ``~/.kube/config``, as lightkube finds
    them when ``kubeconfig`` is None; or for a plain ``server`` URL without credentials (tests, a
    local proxy). A configuration that cannot be used raises :class:`ClusterAccessError` (exit 2)."""
    where = kubeconfig or "the Kubernetes configuration"
    try:
        single = _load_config(kubeconfig, context, server)
        if single is None:  # pragma: no cover - KubeConfig.get raises instead
            raise ConfigError("no usable context in the kubeconfig")
        transport = None
        ssl_context: Any = True
        if fast_http:
            if single.cluster.server.startswith("https") and single.user is not None:
                ssl_context = verify_cluster(single.cluster, single.user, single.abs_file)
            transport = AiohttpTransport(ssl_context, limit=concurrency)
        client = AsyncClient(
            single, field_manager=field_manager, timeout=httpx2.Timeout(timeout), transport=transport,
            trust_env=not fast_http,
        )
    except ConfigError as err:
        raise ClusterAccessError(f"{where}: {err}", exit_code=2) from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise ClusterAccessError(f"{where}: not usable: {type(err).__name__}: {err}", exit_code=2) from None
    fast = (FastCalls.of_client(client, transport.session, ssl_context, limit=concurrency)
            if transport is not None else None)
    return LightkubeApi(client, list_chunk_size, fast, server=str(single.cluster.server))


if TYPE_CHECKING:  # an adapter of the one port: mypy checks it stays one

    def _is_a_port(api: LightkubeApi) -> ClusterApi:
        return api
