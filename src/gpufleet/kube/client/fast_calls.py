"""The controller's hot-path writes sent straight through aiohttp: the same requests lightkube sends.

Binding a pod takes two calls (patch its annotations, then POST its Binding), and lightkube spends
about as much CPU building each request and decoding its answer (httpx2's URL and request models
above all) as the rest of the client together. For the calls made once per pod (a JSON merge
patch of an object, a POST to ``pods/binding`` or ``pods/eviction``) :class:`FastCalls` writes the
request lightkube would have written (same URL and ``fieldManager`` parameter, headers, body bytes
from the same JSON encoder, timeouts) onto the aiohttp session of
:class:`~gpufleet.kube.client.aiohttp_transport.AiohttpTransport`, and reads the answer as lightkube
reads it: a non-2xx answer with ``Content-Type: application/json`` is a ``Status`` (its code,
reason, message and causes), any other a bare HTTP status. No answer is ``ApiError(0)``.

Credentials are lightkube's: the headers its ``httpx2.Auth`` puts on a request (a bearer token, a
token file, an exec plugin's token, basic auth) are taken once and reused; client certificates and
the CA are in the transport's TLS context. A 401 raises :class:`Unauthorized`, on which the caller
sends that call through lightkube instead (whose auth flow re-reads a rotated token) and
:meth:`FastCalls.forget_credentials` makes the next call take the headers again.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any
from urllib.parse import quote, urlencode

import aiohttp
import httpx2
import msgspec

from gpufleet.kube.client.http1 import Http1Pool, NoAnswer
from gpufleet.kube.client.port import ApiError

__all__ = ["FastCalls", "Unauthorized", "error_from_answer"]

JsonDict = dict[str, Any]

_encode = msgspec.json.encode
_decode = msgspec.json.decode
MERGE_PATCH = "application/merge-patch+json"
JSON = "application/json"
# Headers of httpx2's client that aiohttp writes itself (as AiohttpTransport drops them).
_OWN_HEADERS = frozenset({"host", "content-length", "connection", "transfer-encoding"})

# Characters httpx (so lightkube) leaves unquoted in a query value: a field selector's "!=" and ","
# go as lightkube sends them.
_QUERY_SAFE = "!,"


class Unauthorized(Exception):
    """The API server answered 401: send the call through lightkube, whose auth flow refreshes."""


def error_from_answer(status: int, content_type: str | None, body: bytes) -> ApiError:
    """The :class:`ApiError` lightkube's path gives for a non-2xx answer (see ``lightkube_api``):
    a JSON answer is a ``Status``; anything else keeps the HTTP status (see :func:`body_message`)."""
    if content_type == JSON:
        try:
            answer = _decode(body)
        except msgspec.DecodeError:
            answer = None
        if isinstance(answer, dict):
            message = str(answer.get("message") or "")
            details = answer.get("details")
            causes = (details.get("causes") if isinstance(details, dict) else None) or []
            extra = " ".join(str(c["message"]) for c in causes if isinstance(c, dict) and c.get("message"))
            return ApiError(int(answer.get("code") or 0), str(answer.get("reason") or ""), f"{message} {extra}".strip())
    return ApiError(status, httpx2.codes.get_reason_phrase(status), body_message(body))


def body_message(body: bytes) -> str:
    """What a non-Status answer says: the ``message`` of a JSON body (a Status sent with a charset in
    its Content-Type, which lightkube does not read as one), else the start of the body."""
    try:
        answer = _decode(body)
    except msgspec.DecodeError:
        answer = None
    if isinstance(answer, dict) and answer.get("message"):
        return str(answer["message"])
    return body.decode("utf-8", errors="replace")[:200]


_PLAIN = re.compile(r"[A-Za-z0-9._~-]*\Z").match  # what quote() leaves as it is


def _quoted(part: str) -> str:
    """``part`` percent-encoded as a path segment (Kubernetes names need none: kept as they are)."""
    return part if _PLAIN(part) else quote(part, safe="")


class _WatchLine(msgspec.Struct):
    type: str
    object: msgspec.Raw


class _ListMeta(msgspec.Struct):
    resourceVersion: str | None = None
    continue_: str | None = msgspec.field(name="continue", default=None)


class _ListPage(msgspec.Struct):
    items: list[dict[str, Any]] | None = None
    metadata: _ListMeta | None = None


_decode_line = msgspec.json.Decoder(_WatchLine).decode
_decode_page = msgspec.json.Decoder(_ListPage).decode
_decode_object = msgspec.json.Decoder(dict[str, Any]).decode


def _event(line: bytes) -> tuple[str, JsonDict]:
    """One line of a watch: (type, object); an ERROR event's Status raised (as lightkube raises it)."""
    try:
        event = _decode_line(line)
        if event.type == "ERROR":
            raise error_from_answer(0, JSON, bytes(event.object))
        return event.type, _decode_object(event.object)
    except msgspec.DecodeError as err:
        raise ApiError(0, "DecodeError", f"a watch line that is not an event: {err}") from None


class FastCalls:
    """JSON writes over ``session()`` to ``base_url``, with the headers of lightkube's httpx2 client."""

    def __init__(
        self,
        session: Callable[[], aiohttp.ClientSession],
        base_url: str,
        headers: Mapping[str, str],
        auth: httpx2.Auth | None,
        field_manager: str | None,
        timeout: httpx2.Timeout,
        pool: Http1Pool | None = None,
    ) -> None:
        self._session = session
        self._pool = pool  # the writes go through it when given (else through the aiohttp session)
        # content type -> the headers of a write, credentials included
        self._heads: dict[str, list[tuple[bytes, bytes]]] = {}
        self._base = base_url.rstrip("/") + "/"
        self._headers = {k: v for k, v in headers.items() if k.lower() not in _OWN_HEADERS}
        self._auth = auth
        self._query = "?" + urlencode({"fieldManager": field_manager}) if field_manager is not None else ""
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=timeout.connect, sock_read=timeout.read)
        self._watch_timeout = aiohttp.ClientTimeout(total=None, sock_connect=timeout.connect, sock_read=None)
        self._credentials: dict[str, str] | None = None

    @classmethod
    def of_client(cls, client: Any, session: Callable[[], aiohttp.ClientSession],
                  ssl_context: ssl.SSLContext | bool | None = None, limit: int = 64) -> FastCalls | None:
        """For a lightkube ``AsyncClient`` whose bytes go through ``session``; None when its
        inner httpx2 client is not where lightkube 1.x keeps it (then everything goes through lightkube).
        With ``ssl_context`` (the transport's), the writes go through an :class:`Http1Pool` of
        ``limit`` connections of their own."""
        generic = getattr(client, "_client", None)
        inner = getattr(generic, "_client", None)
        if not isinstance(inner, httpx2.AsyncClient):
            return None
        base, timeout = str(inner.base_url), inner.timeout
        pool = None if ssl_context is None else Http1Pool(base, ssl_context, limit, timeout.connect, timeout.read)
        return cls(session, base, dict(inner.headers), inner.auth, getattr(generic, "_field_manager", None),
                   timeout, pool)

    # ------------------------------------------------------------------------- requests

    def url(self, group: str, version: str, plural: str, namespace: str | None, name: str, action: str = "") -> str:
        """The URL lightkube builds: /api/v1 or /apis/<group>/<version>, the namespace, the name,
        the subresource, and the ``fieldManager`` parameter of writes."""
        parts = ["api", version] if not group else ["apis", group, version]
        if namespace:
            parts += ["namespaces", _quoted(namespace)]
        parts += [plural, _quoted(name)] if name else [plural]  # no name: the collection
        if action:
            parts.append(action)
        return self._base + "/".join(parts) + self._query

    async def headers(self, content_type: str) -> dict[str, str]:
        if self._credentials is None:
            self._credentials = await self._take_credentials()
        if not content_type:
            return {**self._headers, **self._credentials}
        return {**self._headers, "Content-Type": content_type, **self._credentials}

    async def _take_credentials(self) -> dict[str, str]:
        """The headers lightkube's auth flow adds to a request (Authorization, usually)."""
        if self._auth is None:
            return {}
        request = httpx2.Request("GET", self._base)
        before = dict(request.headers)
        flow = self._auth.async_auth_flow(request)
        try:
            prepared = await flow.__anext__()
        finally:
            await flow.aclose()
        return {k: v for k, v in prepared.headers.items() if before.get(k) != v and k.lower() not in _OWN_HEADERS}

    def watch_url(self, group: str, version: str, plural: str, resource_version: str,
                  field_selector: str = "") -> str:
        """The URL of lightkube's watch of every object of a kind (all namespaces), or of those
        ``field_selector`` (its text) matches."""
        parts = ["api", version] if not group else ["apis", group, version]
        params = {"resourceVersion": resource_version} if resource_version else {}
        if field_selector:
            params["fieldSelector"] = field_selector
        query = urlencode({**params, "watch": "true"}, safe=_QUERY_SAFE)
        return self._base + "/".join([*parts, plural]) + "?" + query

    async def watch(self, url: str) -> AsyncIterator[tuple[str, JsonDict]]:
        """The events of the watch at ``url`` as (type, object), read as lightkube reads them (an
        ``ERROR`` event is its Status raised as an ApiError), until the server ends the stream.
        Raises :class:`Unauthorized` on 401, before any event.

        Asked without ``Accept-Encoding``, so that the stream comes as it is (the API server
        compresses no watch anyway)."""
        headers = await self.headers("")
        headers = {k: v for k, v in headers.items() if k.lower() not in ("accept-encoding", "content-type")}
        stage = "ConnectError"
        try:
            async with self._session().get(
                url, headers=headers, allow_redirects=False, timeout=self._watch_timeout
            ) as response:
                stage = "ReadError"
                if response.status != 200:
                    answer = await response.read()
                    if response.status == 401:
                        raise Unauthorized()
                    raise error_from_answer(response.status, response.headers.get("Content-Type"), answer)
                rest = b""
                async for chunk in response.content.iter_any():
                    lines = (rest + chunk).split(b"\n") if rest else chunk.split(b"\n")
                    rest = lines.pop()
                    for line in lines:
                        if line.strip():
                            yield _event(line)
                if rest.strip():
                    yield _event(rest)
        except (TimeoutError, aiohttp.ClientError, ConnectionError) as err:
            raise ApiError(0, stage, f"{type(err).__name__}: {err}") from None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()

    def forget_credentials(self) -> None:
        self._credentials = None
        self._heads.clear()

    async def _head(self, content_type: str) -> list[tuple[bytes, bytes]]:
        head = self._heads.get(content_type)
        if head is None:
            headers = await self.headers(content_type)
            head = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
            self._heads[content_type] = head
        return head

    async def _send_http1(self, pool: Http1Pool, method: str, url: str, data: bytes | None, content_type: str,
                          decode: Callable[[bytes], Any] = _decode) -> Any:
        """One request over ``pool`` (``data`` None: no body, as a GET); the answer of a 2xx read
        with ``decode`` (None when empty)."""
        path = url[len(pool.origin):] if url.startswith(pool.origin) else url
        if not path.isascii():
            path = quote(path, safe="/?&=%:@!$'()*+,;~")
        try:
            head = await self._head(content_type)
            answer = await pool.request(method.encode("ascii"), path.encode("ascii"), head, data)
        except NoAnswer as err:
            raise ApiError(0, err.stage, str(err)) from None
        status, body = answer.status, answer.body
        encoding = answer.headers.get("content-encoding")
        if encoding and encoding.lower() != "identity":  # decoded as httpx2 decodes it
            body = httpx2.Response(status, headers=list(answer.headers.items()), content=body).content
        if 200 <= status < 300:
            return decode(body) if body else None
        if status == 401:
            raise Unauthorized()
        raise error_from_answer(status, answer.headers.get("content-type"), body)

    @property
    def can_list(self) -> bool:
        """Whether lists go this way (over the HTTP/1.1 pool)."""
        return self._pool is not None

    async def list(self, group: str, version: str, plural: str, chunk_size: int | None,
                   field_selector: str = "") -> tuple[list[JsonDict], str]:
        """Every object of a kind (all namespaces; those ``field_selector`` matches, when given) and
        the list's resourceVersion, asked page by page as lightkube asks (``limit``, then
        ``continue``); the pages decoded straight into dicts."""
        assert self._pool is not None
        parts = ["api", version] if not group else ["apis", group, version]
        url = self._base + "/".join([*parts, plural])
        items: list[JsonDict] = []
        version_seen = ""
        token: str | None = None
        while True:
            params: dict[str, Any] = {"limit": chunk_size} if chunk_size else {}
            if field_selector:
                params["fieldSelector"] = field_selector
            if token:
                params["continue"] = token
            page = await self._send_http1(self._pool, "GET", url + ("?" + urlencode(params, safe=_QUERY_SAFE)
                                                                  if params else ""),
                                          None, "", _decode_page)
            meta = page.metadata if page is not None else None
            items.extend(page.items or () if page is not None else ())
            version_seen = (meta.resourceVersion if meta is not None else None) or ""
            token = meta.continue_ if meta is not None else None
            if not token:
                return items, version_seen

    async def send(self, method: str, url: str, body: JsonDict, content_type: str) -> Any:
        """Send ``body`` as JSON; the decoded answer of a 2xx (None when empty). Raises ApiError,
        or :class:`Unauthorized` on 401."""
        data = _encode(body)
        if self._pool is not None:
            return await self._send_http1(self._pool, method, url, data, content_type)
        headers = await self.headers(content_type)
        # Failures without an answer, as lightkube's path reports them: httpx2's ConnectError while
        # sending (AiohttpTransport), ReadError while reading the body.
        stage = "ConnectError"
        try:
            async with self._session().request(
                method, url, data=data, headers=headers, allow_redirects=False, timeout=self._timeout
            ) as response:
                stage = "ReadError"
                status = response.status
                answer = await response.read()
                encoding = response.headers.get("Content-Encoding")
                if encoding and encoding.lower() != "identity":  # decoded as httpx2 decodes it
                    answer = httpx2.Response(status, headers=list(response.raw_headers), content=answer).content
                content_type_answer = response.headers.get("Content-Type")
        except (TimeoutError, aiohttp.ClientError, ConnectionError) as err:
            raise ApiError(0, stage, f"{type(err).__name__}: {err}") from None
        if 200 <= status < 300:
            return _decode(answer) if answer else None
        if status == 401:
            raise Unauthorized()
        raise error_from_answer(status, content_type_answer, answer)
