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

from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote, urlencode

import aiohttp
import httpx2
import msgspec

from gpufleet.kube.client.port import ApiError

__all__ = ["FastCalls", "Unauthorized", "error_from_answer"]

JsonDict = dict[str, Any]

_encode = msgspec.json.encode
_decode = msgspec.json.decode
MERGE_PATCH = "application/merge-patch+json"
JSON = "application/json"
# Headers of httpx2's client that aiohttp writes itself (as AiohttpTransport drops them).
_OWN_HEADERS = frozenset({"host", "content-length", "connection", "transfer-encoding"})


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
    ) -> None:
        self._session = session
        self._base = base_url.rstrip("/") + "/"
        self._headers = {k: v for k, v in headers.items() if k.lower() not in _OWN_HEADERS}
        self._auth = auth
        self._query = "?" + urlencode({"fieldManager": field_manager}) if field_manager is not None else ""
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=timeout.connect, sock_read=timeout.read)
        self._credentials: dict[str, str] | None = None

    @classmethod
    def of_client(cls, client: Any, session: Callable[[], aiohttp.ClientSession]) -> FastCalls | None:
        """For a lightkube ``AsyncClient`` whose bytes go through ``session``; None when its
        inner httpx2 client is not where lightkube 1.x keeps it (then everything goes through lightkube)."""
        generic = getattr(client, "_client", None)
        inner = getattr(generic, "_client", None)
        if not isinstance(inner, httpx2.AsyncClient):
            return None
        return cls(session, str(inner.base_url), dict(inner.headers), inner.auth,
                   getattr(generic, "_field_manager", None), inner.timeout)

    # ------------------------------------------------------------------------- requests

    def url(self, group: str, version: str, plural: str, namespace: str | None, name: str, action: str = "") -> str:
        """The URL lightkube builds: /api/v1 or /apis/<group>/<version>, the namespace, the name,
        the subresource, and the ``fieldManager`` parameter of writes."""
        parts = ["api", version] if not group else ["apis", group, version]
        if namespace:
            parts += ["namespaces", quote(namespace, safe="")]
        parts += [plural, quote(name, safe="")] if name else [plural]  # no name: the collection
        if action:
            parts.append(action)
        return self._base + "/".join(parts) + self._query

    async def headers(self, content_type: str) -> dict[str, str]:
        if self._credentials is None:
            self._credentials = await self._take_credentials()
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

    def forget_credentials(self) -> None:
        self._credentials = None

    async def send(self, method: str, url: str, body: JsonDict, content_type: str) -> Any:
        """Send ``body`` as JSON; the decoded answer of a 2xx (None when empty). Raises ApiError,
        or :class:`Unauthorized` on 401."""
        data = _encode(body)
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
