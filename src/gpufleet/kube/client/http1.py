"""A small HTTP/1.1 client for the controller's hot-path writes and lists: kept-alive
connections, one request at a time on each, nothing else.

:class:`~gpufleet.kube.client.fast_calls.FastCalls` sends one merge patch and one Binding per pod.
Through aiohttp's client each costs about as much CPU again as the rest of the controller's work
for that pod (its request and response objects, URL handling, cookie jar, timers, connector; see
BENCHMARKS.md, "Issue 13: the controller through the HTTP emulator"). Those requests are all
alike: a method, a path, a few headers fixed for the client's life, a small JSON body, a small
answer. :class:`Http1Pool` sends such a request on a pooled connection (:class:`asyncio.Protocol`,
TLS through the same :class:`ssl.SSLContext` as the rest of the client) and reads its answer.

The protocol is `h11 <https://h11.readthedocs.io>`_'s (python-hyper's HTTP/1.1 state machine, no
I/O of its own): it writes the request (``Host`` first, ``Content-Length`` of the body) and reads
the answer: the status line, the headers, a body framed by ``Content-Length``, ``Transfer-Encoding:
chunked`` (extensions, trailers) or the end of the connection, informational (1xx) answers skipped.
A connection is used again only when both sides are done with the exchange as h11 sees it (not
after ``Connection: close``, an answer read to the connection's end, or an error), nothing more
has arrived and the server has not closed it; bytes that arrive on an idle connection close it.

Failures without an answer are raised as :class:`NoAnswer` with the stage they happened in
(``ConnectError`` until the answer's head has arrived, ``ReadError`` after), the words the
callers' errors use; an answer h11 cannot read (``RemoteProtocolError``) is a ``ReadError``.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import Sequence
from urllib.parse import urlsplit

import h11

__all__ = ["Answer", "Http1Pool", "NoAnswer"]

Header = tuple[bytes, bytes]


class NoAnswer(Exception):
    """No (complete) answer: the connection failed, closed or timed out, or the answer was unreadable."""

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
    """One kept-alive connection and its h11 state; :meth:`exchange` sends a request and reads its answer."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.h11 = h11.Connection(h11.CLIENT)
        self._exchanging = False
        self._waiter: asyncio.Future[None] | None = None
        self._error: BaseException | None = None
        self.deadline: float | None = None  # when the wait in progress times out

    # ------------------------------------------------------------------- protocol side

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if not self._exchanging:  # nobody asked: the connection can't be trusted with the next answer
            self.close()
            return
        self.h11.receive_data(data)
        self._wake()

    def eof_received(self) -> bool:
        return False  # close the transport: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._error = exc or ConnectionResetError("the server closed the connection")
        self.h11.receive_data(b"")  # the end of the stream, as h11 is told it
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    # --------------------------------------------------------------------- client side

    async def _wait(self, stage: str, timeout: float | None) -> None:
        """Wait until more bytes arrive or the connection ends; NoAnswer when ``timeout`` passes
        first (checked by the pool's watchdog: a timer per wait costs more than the rest of it)."""
        if self.closed:
            return  # h11 has been told: its next event says how the answer ended
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

    async def exchange(self, request: h11.Request, body: bytes | None, timeout: float | None) -> tuple[Answer, bool]:
        """Send ``request`` (and ``body``); the answer and whether the connection may be used again."""
        assert self.transport is not None
        conn = self.h11
        stage = "ConnectError"
        self._exchanging = True
        try:
            try:
                data = conn.send(request)
                if body:
                    data += conn.send(h11.Data(data=body))
                data += conn.send(h11.EndOfMessage())
            except h11.LocalProtocolError as err:  # a header or target h11 will not write
                self.close()
                raise NoAnswer(stage, f"LocalProtocolError: {err}") from None
            self.transport.write(data)
            head: h11.Response | None = None
            parts: list[bytes] = []
            await self._wait(stage, timeout)  # nothing can have come yet: h11 would only say NEED_DATA
            while True:
                try:
                    event = conn.next_event()
                except h11.RemoteProtocolError as err:
                    if self.closed and head is None:  # closed before (all of) the head: no answer at all
                        raise NoAnswer(stage, f"{type(self._error).__name__}: {self._error}") from None
                    self.close()  # an answer h11 can't read, or cut short
                    raise NoAnswer("ReadError", f"RemoteProtocolError: {err}") from None
                if event is h11.NEED_DATA:
                    await self._wait(stage, timeout)
                elif isinstance(event, h11.Data):
                    parts.append(event.data)
                elif isinstance(event, h11.Response):
                    head, stage = event, "ReadError"
                elif isinstance(event, h11.EndOfMessage):
                    break
                elif isinstance(event, h11.ConnectionClosed):
                    raise NoAnswer(stage, f"{type(self._error).__name__}: {self._error}")
                # InformationalResponse (1xx): the answer follows
        finally:
            self._exchanging = False
        assert head is not None
        headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in head.headers}
        answer = Answer(head.status_code, headers, b"".join(parts))  # bytes (h11 hands out bytearrays)
        reusable = (conn.our_state is h11.DONE and conn.their_state is h11.DONE and not self.closed
                    and not conn.trailing_data[0])
        if reusable:
            conn.start_next_cycle()
        return answer, reusable


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
        self._host_header: Header = (b"Host", parts.netloc.encode("idna"))
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

    async def request(self, method: bytes, target: bytes, headers: Sequence[Header], body: bytes | None) -> Answer:
        """Send one request to the pool's origin and return its answer: ``Host`` first, then
        ``headers`` in their order, then ``Content-Length`` when there is a ``body`` (None: none,
        as a GET)."""
        fields = [self._host_header, *headers]
        if body is not None:
            fields.append((b"Content-Length", b"%d" % len(body)))
        try:
            event = h11.Request(method=method, target=target, headers=fields)
        except h11.LocalProtocolError as err:  # a header or target HTTP/1.1 can't carry
            raise NoAnswer("ConnectError", f"LocalProtocolError: {err}") from None
        conn = await self._acquire()
        reusable = False
        self._busy.add(conn)
        if self._watchdog is None and self.read_timeout is not None:
            self._watchdog = asyncio.get_running_loop().call_later(0.5, self._check_deadlines)
        try:
            answer, reusable = await conn.exchange(event, body, self.read_timeout)
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
