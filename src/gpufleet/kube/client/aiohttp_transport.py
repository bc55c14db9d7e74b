"""An httpx2 transport that sends lightkube's requests with aiohttp.

lightkube builds every request, authenticates it (tokens, exec plugins, client certificates) and
decodes every answer; only the bytes on the wire go through aiohttp instead of httpcore, whose
connection pool costs about as much CPU per request as the rest of the client together (measured
on this project's machine: about 2x fewer CPU seconds per API call; see BENCHMARKS.md). Keep-alive
connections are pooled, at most ``limit`` of them.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator

import aiohttp
import httpx2

__all__ = ["AiohttpTransport"]


# Headers aiohttp writes itself from the URL, the body and its connection pool.
_OWN_HEADERS = (b"host", b"content-length", b"connection", b"transfer-encoding")


def _timeout(request: httpx2.Request) -> aiohttp.ClientTimeout:
    raw = request.extensions.get("timeout") or {}
    return aiohttp.ClientTimeout(total=None, sock_connect=raw.get("connect"), sock_read=raw.get("read"))


class _Stream(httpx2.AsyncByteStream):
    def __init__(self, response: aiohttp.ClientResponse, request: httpx2.Request) -> None:
        self._response = response
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except (TimeoutError, aiohttp.ClientError, ConnectionError) as err:
            raise httpx2.ReadError(f"{type(err).__name__}: {err}", request=self._request) from err

    async def aclose(self) -> None:
        self._response.release()


class AiohttpTransport(httpx2.AsyncBaseTransport):
    def __init__(self, ssl_context: ssl.SSLContext | bool = True, limit: int = 64) -> None:
        self._ssl = ssl_context
        self._limit = limit
        self._session: aiohttp.ClientSession | None = None

    def session(self) -> aiohttp.ClientSession:
        """The pooled aiohttp session (made on first use; :mod:`gpufleet.kube.client.fast_calls` sends over it too)."""
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self._limit, ssl=self._ssl)
            # httpx2 decodes Content-Encoding itself from the headers it is given.
            self._session = aiohttp.ClientSession(connector=connector, auto_decompress=False)
        return self._session

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        body = await request.aread()
        try:
            response = await self.session().request(
                request.method,
                str(request.url),
                headers=[(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw
                         if k.lower() not in _OWN_HEADERS],
                data=body or None,
                allow_redirects=False,
                timeout=_timeout(request),
            )
        except (TimeoutError, aiohttp.ClientError, ConnectionError) as err:
            raise httpx2.ConnectError(f"{type(err).__name__}: {err}", request=request) from err
        return httpx2.Response(
            response.status,
            headers=list(response.raw_headers),
            stream=_Stream(response, request),
            request=request,
        )

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
