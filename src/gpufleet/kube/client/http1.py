"""A small HTTP/1.1 client for the controller's hot-path writes and lists: kept-alive
connections, one request at a time on each, nothing else.

:class:`~gpufleet.kube.client.fast_calls.FastCalls` sends one merge patch and one Binding per pod.
Through aiohttp's client each costs about as much CPU again as the rest of the controller's work
for that pod (its request and response objects, URL handling, cookie jar, timers, connector; see
BENCHMARKS.md, "Issue 13: the controller through the HTTP emulator"). Those requests are all
alike: a method, a path, a few headers fixed for the client's life, a small JSON body, a small
answer. :class:`Http1Pool` sends such a request on a pooled connection (:class:`asyncio.Protocol`,
TLS through the same :class:`ssl.SSLContext` as the rest of the client) and reads its answer.

Answers are read by `httptools <https://github.com/MagicStack/httptools>`_ (MagicStack's binding of
llhttp, Node.js's HTTP/1.1 parser, in C): the status line, the headers, a body framed by
``Content-Length``, ``Transfer-Encoding: chunked`` (extensions, trailers) or the end of the
connection, informational (1xx) answers skipped. Requests are written as RFC 9112 writes them
(request line, ``Host`` first, the headers, ``Content-Length`` of the body); the method, target and
headers are checked against its grammar first (a header block is checked once and kept: the
callers send the same few again and again). No ``HEAD`` (llhttp would wait for its body).
A connection is used again only when the answer was read whole and allows it (not after
``Connection: close``, an HTTP/1.0 answer, an answer read to the connection's end, or an error),
nothing more has arrived and the server has not closed it; bytes that arrive on an idle
connection close it.

Failures without an answer are raised as :class:`NoAnswer` with the stage they happened in
(``ConnectError`` until the answer's head has arrived, ``ReadError`` after); an answer llhttp
cannot read is a ``ReadError`` naming httptools' error (``HttpParserInvalidStatusError: ...``).
"""

from __future__ import annotations

import asyncio
import re
import ssl
from collections import deque
from collections.abc import Sequence
from urllib.parse import urlsplit

import httptools

__all__ = ["Answer", "Http1Pool", "NoAnswer"]

Header = tuple[bytes, bytes]

# RFC 9110/9112 grammar of what is written: a token (method, header name), a request target
# (visible characters, no space), a field value (visible characters, spaces and tabs inside).
_TOKEN = re.compile(rb"[-!#$%&'*+.^_`|~0-9A-Za-z]+\Z").match
_TARGET = re.compile(rb"[\x21-\x7e\x80-\xff]+\Z").match
_VALUE = re.compile(rb"(?:[\x21-\x7e\x80-\xff](?:[ \t\x21-\x7e\x80-\xff]*[\x21-\x7e\x80-\xff])?)?\Z").match


class LocalProtocolError(Exception):
    """A method, target or header that HTTP/1.1 cannot carry."""


def _header_block(fields: Sequence[Header]) -> bytes:
    """``name: value`` lines of ``fields``, each checked against the grammar."""
    lines = []
    for name, value in fields:
        if not _TOKEN(name):
            raise LocalProtocolError(f"illegal header name {name!r}")
        if not _VALUE(value):
            raise LocalProtocolError(f"illegal header value {value!r}")
        lines.append(b"%s: %s\r\n" % (name, value))
    return b"".join(lines)


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
    """One kept-alive connection and its parser; :meth:`exchange` sends a request and reads its answer.
    httptools calls the ``on_*`` methods from :meth:`data_received` as it reads."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.parser = httptools.HttpResponseParser(self)
        self._exchanging = False
        self._waiter: asyncio.Future[None] | None = None
        self._error: BaseException | None = None  # why the connection ended
        self._unreadable: Exception | None = None  # the parser's error, during an exchange
        self.deadline: float | None = None  # when the wait in progress times out
        # the answer being read
        self._status = 0
        self._headers: dict[str, str] = {}
        self._parts: list[bytes] = []
        self._head = False  # its head is read
        self._done = False  # all of it is read
        self._again = False  # it lets the connection be used again
        self._beyond = False  # more came after it

    # ------------------------------------------------------------------- protocol side

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if not self._exchanging:  # nobody asked: the connection can't be trusted with the next answer
            self.close()
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as err:
            if self._done:
                self._beyond = True  # unreadable bytes after the answer
            else:
                self._unreadable = err
        self._wake()

    def eof_received(self) -> bool:
        return False  # close the transport: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._error = exc or ConnectionResetError("the server closed the connection")
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    # ------------------------------------------------------------- httptools' callbacks

    def on_message_begin(self) -> None:
        if self._done:
            self._beyond = True

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self._done:
            self._headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        if not self._done:
            self._status = self.parser.get_status_code()
            self._head = True

    def on_body(self, body: bytes) -> None:
        if not self._done:
            self._parts.append(body)

    def on_message_complete(self) -> None:
        if self._done:
            return
        if 100 <= self._status < 200:  # informational: the answer follows
            self._headers = {}
            self._parts = []
            self._head = False
            return
        self._done = True
        self._again = self.parser.should_keep_alive()

    def _until_closed(self) -> bool:
        """Whether the answer's body ends with the connection (neither a length nor chunks)."""
        return (self._head and "content-length" not in self._headers
                and "chunked" not in self._headers.get("transfer-encoding", "").lower())

    # --------------------------------------------------------------------- client side

    async def _wait(self, stage: str, timeout: float | None) -> None:
        """Wait until more bytes arrive or the connection ends; NoAnswer when ``timeout`` passes
        first (checked by the pool's watchdog: a timer per wait costs more than the rest of it)."""
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

    async def exchange(self, request: bytes, timeout: float | None) -> tuple[Answer, bool]:
        """Send ``request`` (head and body, written); the answer and whether the connection may be
        used again."""
        assert self.transport is not None
        self._status, self._headers, self._parts = 0, {}, []
        self._head = self._done = self._again = self._beyond = False
        self._unreadable = None
        self._exchanging = True
        try:
            self.transport.write(request)
            while not self._done:
                stage = "ReadError" if self._head else "ConnectError"
                if self._unreadable is not None:
                    self.close()  # an answer llhttp can't read
                    err = self._unreadable
                    raise NoAnswer("ReadError", f"{type(err).__name__}: {err}")
                if self.closed:
                    if self._until_closed():
                        break  # the body ran to the connection's end
                    raise NoAnswer(stage, f"{type(self._error).__name__}: {self._error}")
                await self._wait(stage, timeout)
        finally:
            self._exchanging = False
        answer = Answer(self._status, self._headers, b"".join(self._parts))
        return answer, self._done and self._again and not self._beyond and not self.closed


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
        self._host_line = b"Host: %s\r\n" % parts.netloc.encode("idna")
        self._blocks: dict[tuple[Header, ...], bytes] = {}  # header blocks checked and written
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
        key = tuple(headers)
        block = self._blocks.get(key)
        try:
            if not _TOKEN(method) or method == b"HEAD":
                raise LocalProtocolError(f"illegal method {method!r}")
            if not _TARGET(target):
                raise LocalProtocolError(f"illegal target {target!r}")
            if block is None:
                block = self._blocks[key] = _header_block(key)
        except LocalProtocolError as err:  # a method, header or target HTTP/1.1 can't carry
            raise NoAnswer("ConnectError", f"LocalProtocolError: {err}") from None
        if body is None:
            request = b"%s %s HTTP/1.1\r\n%s%s\r\n" % (method, target, self._host_line, block)
        else:
            request = b"%s %s HTTP/1.1\r\n%s%sContent-Length: %d\r\n\r\n%s" % (
                method, target, self._host_line, block, len(body), body)
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
