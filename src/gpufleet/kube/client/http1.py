"""A small HTTP/1.1 client for the controller's hot-path writes: kept-alive connections, one
request at a time on each, nothing else.

:class:`~gpufleet.kube.client.fast_calls.FastCalls` sends one merge patch and one Binding per pod.
Through aiohttp's client each costs about as much CPU again as the rest of the controller's work
for that pod (its request and response objects, URL handling, cookie jar, timers, connector; see
BENCHMARKS.md, "Issue 13: the controller through the HTTP emulator"). Those requests are all
alike: a method, a path, a few headers fixed for the client's life, a small JSON body, a small
answer. :class:`Http1Pool` writes such a request as bytes on a pooled connection
(:class:`asyncio.Protocol`, TLS through the same :class:`ssl.SSLContext` as the rest of the client)
and reads the answer: the status line, the headers, a body framed by ``Content-Length``,
``Transfer-Encoding: chunked`` or the end of the connection. A connection the server closes, or
an answer that says ``Connection: close``, is not reused.

Failures without an answer are raised as :class:`NoAnswer` with the stage they happened in
(``ConnectError`` until the answer's head has arrived, ``ReadError`` after), the words the
callers' errors use.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from urllib.parse import urlsplit

__all__ = ["Answer", "Http1Pool", "NoAnswer"]


class NoAnswer(Exception):
    """No (complete) answer: the connection failed, closed or timed out."""

    def __init__(self, stage: str, message: str) -> None:
        super().__init__(message)
        self.stage = stage  # ConnectError (before the answer's head) or ReadError (while reading it)


class Answer:
    """A complete answer: status, headers (names in lower case), body."""

    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body


class _Connection(asyncio.Protocol):
    """One kept-alive connection; :meth:`exchange` sends a request and reads its answer."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._buffer = bytearray()
        self._waiter: asyncio.Future[None] | None = None
        self._error: BaseException | None = None
        self.deadline: float | None = None  # when the wait in progress times out

    # ------------------------------------------------------------------- protocol side

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def eof_received(self) -> bool:
        return False  # close the transport: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._error = exc or ConnectionResetError("the server closed the connection")
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    # --------------------------------------------------------------------- client side

    def _lost(self, stage: str) -> NoAnswer:
        return NoAnswer(stage, f"{type(self._error).__name__}: {self._error}")

    async def _wait(self, stage: str, timeout: float | None) -> None:
        """Wait until more bytes arrive or the connection ends; NoAnswer when ``timeout`` passes
        first (checked by the pool's watchdog: a timer per wait costs more than the rest of it)."""
        if self.closed:
            return
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        self.deadline = loop.time() + timeout if timeout is not None else None
        try:
            await waiter
        except TimeoutError:
            self.close()
            raise NoAnswer(stage, "TimeoutError: no answer in time") from None
        finally:
            self._waiter = None
            self.deadline = None

    def expire(self, now: float) -> None:
        """Fail the wait whose deadline has passed."""
        waiter = self._waiter
        if self.deadline is not None and now >= self.deadline and waiter is not None and not waiter.done():
            waiter.set_exception(TimeoutError())

    async def _at_least(self, size: int, stage: str, timeout: float | None) -> None:
        while len(self._buffer) < size:
            if self.closed:
                raise self._lost(stage)
            await self._wait(stage, timeout)

    async def _line(self, timeout: float | None) -> int:
        """The position of the next CRLF in the buffer (waiting for it)."""
        while (eol := self._buffer.find(b"\r\n")) < 0:
            if self.closed:
                raise self._lost("ReadError")
            await self._wait("ReadError", timeout)
        return eol

    async def exchange(self, request: bytes, timeout: float | None) -> tuple[Answer, bool]:
        """Send ``request``; the answer and whether the connection may be used again."""
        assert self.transport is not None
        buffer = self._buffer
        buffer.clear()
        self.transport.write(request)
        while (end := buffer.find(b"\r\n\r\n")) < 0:
            if self.closed:
                raise self._lost("ConnectError")
            await self._wait("ConnectError", timeout)
        head = bytes(buffer[:end]).decode("latin-1").split("\r\n")
        del buffer[: end + 4]
        try:
            status = int(head[0].split(" ", 2)[1])
        except (IndexError, ValueError):
            self.close()
            raise NoAnswer("ReadError", f"ProtocolError: not an HTTP status line: {head[0][:80]!r}") from None
        headers: dict[str, str] = {}
        for line in head[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        reusable = headers.get("connection", "").lower() != "close"
        if status in (204, 304) or 100 <= status < 200:
            body = b""
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            body = await self._chunked(timeout)
        elif "content-length" in headers:
            try:
                length = int(headers["content-length"])
            except ValueError:
                self.close()
                raise NoAnswer("ReadError", "ProtocolError: bad Content-Length") from None
            await self._at_least(length, "ReadError", timeout)
            body = bytes(buffer[:length])
            del buffer[:length]
        else:  # delimited by the end of the connection
            while not self.closed:
                await self._wait("ReadError", timeout)
            body, reusable = bytes(buffer), False
            buffer.clear()
        return Answer(status, headers, body), reusable and not buffer and not self.closed

    async def _chunked(self, timeout: float | None) -> bytes:
        buffer = self._buffer
        body = bytearray()
        while True:
            eol = await self._line(timeout)
            try:
                size = int(bytes(buffer[:eol]).split(b";", 1)[0].strip() or b"x", 16)
            except ValueError:
                self.close()
                raise NoAnswer("ReadError", "ProtocolError: bad chunk size") from None
            del buffer[: eol + 2]
            if size == 0:  # the last chunk, then trailers up to an empty line
                while (eol := await self._line(timeout)) > 0:
                    del buffer[: eol + 2]
                del buffer[:2]
                return bytes(body)
            await self._at_least(size + 2, "ReadError", timeout)
            body += buffer[:size]
            del buffer[: size + 2]


class Http1Pool:
    """At most ``limit`` kept-alive connections to the origin of ``base_url``."""

    def __init__(self, base_url: str, ssl_context: ssl.SSLContext | bool = True, limit: int = 64,
                 connect_timeout: float | None = 30.0, read_timeout: float | None = 30.0) -> None:
        parts = urlsplit(base_url)
        self.secure = parts.scheme == "https"
        self.host = parts.hostname or "localhost"
        self.port = parts.port or (443 if self.secure else 80)
        self.origin = f"{parts.scheme}://{parts.netloc}"  # what a full URL starts with
        self.netloc = parts.netloc  # the Host header, as httpx2 and aiohttp write it
        if self.secure:
            self._ssl: ssl.SSLContext | None = (ssl_context if isinstance(ssl_context, ssl.SSLContext)
                                                else ssl.create_default_context())
        else:
            self._ssl = None
        self.limit = limit
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self._idle: list[_Connection] = []
        self._open = 0  # connections made and not closed (idle or in use)
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._busy: set[_Connection] = set()  # exchanging
        self._watchdog: asyncio.TimerHandle | None = None

    def _check_deadlines(self) -> None:
        """Every half second while requests are in flight: time out the waits past their deadline."""
        self._watchdog = None
        if not self._busy:
            return
        now = asyncio.get_running_loop().time()
        for conn in list(self._busy):
            conn.expire(now)
        self._watchdog = asyncio.get_running_loop().call_later(0.5, self._check_deadlines)

    async def _acquire(self) -> _Connection:
        while True:
            while self._idle:
                conn = self._idle.pop()
                if not conn.closed:
                    return conn
                self._open -= 1
            if self._open < self.limit:
                self._open += 1
                try:
                    return await self._connect()
                except BaseException:
                    self._open -= 1
                    self._wake()
                    raise
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except BaseException:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
                raise

    def _wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _release(self, conn: _Connection, reusable: bool) -> None:
        if reusable and not conn.closed:
            self._idle.append(conn)
        else:
            conn.close()
            self._open -= 1
        self._wake()

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            made = loop.create_connection(_Connection, self.host, self.port, ssl=self._ssl,
                                          server_hostname=self.host if self._ssl is not None else None)
            _, conn = await asyncio.wait_for(made, self.connect_timeout)
        except (OSError, TimeoutError, ssl.SSLError) as err:
            raise NoAnswer("ConnectError", f"{type(err).__name__}: {err}") from None
        return conn

    async def request(self, request: bytes) -> Answer:
        """Send one complete request (head and body) and return its answer."""
        conn = await self._acquire()
        reusable = False
        self._busy.add(conn)
        if self._watchdog is None and self.read_timeout is not None:
            self._watchdog = asyncio.get_running_loop().call_later(0.5, self._check_deadlines)
        try:
            answer, reusable = await conn.exchange(request, self.read_timeout)
        finally:
            self._busy.discard(conn)
            self._release(conn, reusable)
        return answer

    def close(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        for conn in self._idle:
            conn.close()
        self._open -= len(self._idle)
        self._idle.clear()
