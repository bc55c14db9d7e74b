"""The small HTTP/1.1 client (answers read by httptools) of the controller's writes (:mod:`gpufleet.kube.client.http1`) against
a raw TCP server that answers exactly as told: framing by Content-Length, chunks and the end of
the connection, kept-alive connections reused (and not after ``Connection: close``), at most
``limit`` connections, the request as written, and every way of not answering (closed, cut short,
too slow, unreadable)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import pytest_asyncio

from gpufleet.kube.client.http1 import Answer, Http1Pool, NoAnswer

pytestmark = pytest.mark.asyncio


def ask(pool: Http1Pool) -> Awaitable[Answer]:
    """A small POST, as the controller's writes are."""
    return pool.request(b"POST", b"/x", [(b"Content-Type", b"application/json")], b"{}")


# An answer as the server writes it for each request it reads; None: close without answering.
Script = Callable[[int], bytes | None]


class RawServer:
    def __init__(self) -> None:
        self.script: Script = lambda n: b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
        self.requests = 0
        self.heads: list[bytes] = []  # every request's head, as read
        self.connections = 0
        self.open = 0
        self.most_open = 0
        self.delay = 0.0
        self.hang_up = False  # close the connection after every answer

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open += 1
        self.most_open = max(self.most_open, self.open)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length")), 0)
                await reader.readexactly(length)
                self.heads.append(head)
                self.requests += 1
                answer = self.script(self.requests)
                if self.delay:
                    await asyncio.sleep(self.delay)
                if answer is None:
                    return
                writer.write(answer)
                await writer.drain()
                framed = b"Content-Length" in answer or b"chunked" in answer or b" 204 " in answer
                if b"Connection: close" in answer or not framed or self.hang_up:
                    return
        finally:
            self.open -= 1
            writer.close()


@pytest_asyncio.fixture
async def server() -> AsyncIterator[tuple[RawServer, str]]:
    raw = RawServer()
    srv = await asyncio.start_server(raw.handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    try:
        yield raw, f"http://127.0.0.1:{port}"
    finally:
        srv.close()


async def test_content_length_answers_reuse_one_connection(server: tuple[RawServer, str]) -> None:
    raw, url = server
    pool = Http1Pool(url, limit=4)
    answers = [await ask(pool) for _ in range(5)]
    assert [(a.status, a.body) for a in answers] == [(200, b"{}")] * 5
    assert raw.connections == 1 and raw.requests == 5
    pool.close()


async def test_chunked_answers_with_extensions_and_trailers(server: tuple[RawServer, str]) -> None:
    raw, url = server
    raw.script = lambda n: (b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n"
                            b"5;x=y\r\n{\"a\":\r\n2\r\n1}\r\n0\r\nX-Trailer: t\r\n\r\n")
    pool = Http1Pool(url)
    for _ in range(2):
        answer = await ask(pool)
        assert (answer.status, answer.body, answer.headers["content-type"]) == (201, b'{"a":1}', "application/json")
    assert raw.connections == 1
    pool.close()


async def test_an_answer_ended_by_the_connection_and_connection_close(server: tuple[RawServer, str]) -> None:
    raw, url = server
    raw.script = lambda n: (b"HTTP/1.1 200 OK\r\n\r\nuntil the end" if n == 1
                            else b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\nx")
    pool = Http1Pool(url)
    assert (await ask(pool)).body == b"until the end"
    assert (await ask(pool)).body == b"x"
    assert (await ask(pool)).body == b"x"
    assert raw.connections == 3  # none of them kept
    pool.close()


async def test_204_has_no_body(server: tuple[RawServer, str]) -> None:
    raw, url = server
    raw.script = lambda n: b"HTTP/1.1 204 No Content\r\n\r\n"
    pool = Http1Pool(url)
    assert [(a.status, a.body) for a in [await ask(pool) for _ in range(2)]] == [(204, b"")] * 2
    assert raw.connections == 1
    pool.close()


async def test_no_answer_before_the_head_is_a_connect_error_after_it_a_read_error(
        server: tuple[RawServer, str]) -> None:
    raw, url = server
    raw.script = lambda n: None if n == 1 else b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort"
    raw.hang_up = True
    pool = Http1Pool(url)
    with pytest.raises(NoAnswer) as closed:
        await ask(pool)
    assert closed.value.stage == "ConnectError"
    with pytest.raises(NoAnswer) as cut:
        await ask(pool)  # the server closes after 5 of 10 bytes (no Content-Length match)
    assert cut.value.stage == "ReadError"
    raw.script = lambda n: b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    raw.hang_up = False
    assert (await ask(pool)).body == b"ok"  # a fresh connection
    pool.close()


async def test_a_server_that_is_not_there_is_a_connect_error() -> None:
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()
    pool = Http1Pool(f"http://127.0.0.1:{port}")
    with pytest.raises(NoAnswer) as err:
        await ask(pool)
    assert err.value.stage == "ConnectError"


async def test_a_slow_answer_times_out_and_its_connection_is_dropped(server: tuple[RawServer, str]) -> None:
    raw, url = server
    raw.delay = 2.0
    pool = Http1Pool(url, read_timeout=0.2)
    with pytest.raises(NoAnswer) as err:
        await ask(pool)
    assert err.value.stage == "ConnectError" and "TimeoutError" in str(err.value)
    raw.delay = 0.0
    assert (await ask(pool)).status == 200
    assert raw.connections == 2
    pool.close()


async def test_at_most_limit_connections(server: tuple[RawServer, str]) -> None:
    raw, url = server
    raw.delay = 0.02
    pool = Http1Pool(url, limit=3)
    answers = await asyncio.gather(*(ask(pool) for _ in range(20)))
    assert all(a.status == 200 for a in answers)
    assert raw.most_open <= 3 and raw.connections == 3 and raw.requests == 20
    pool.close()


async def test_a_cancelled_request_does_not_leave_its_connection_for_the_next(server: tuple[RawServer, str]) -> None:
    raw, url = server
    raw.delay = 0.3
    pool = Http1Pool(url, limit=1)
    task = asyncio.create_task(ask(pool))
    await asyncio.sleep(0.05)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    raw.delay = 0.0
    raw.script = lambda n: b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nmine"
    assert (await ask(pool)).body == b"mine"  # not the late answer of the cancelled one
    pool.close()


async def test_the_request_is_written_host_first_then_the_headers_in_order_then_the_length(
        server: tuple[RawServer, str]) -> None:
    raw, url = server
    pool = Http1Pool(url)
    await ask(pool)
    await pool.request(b"GET", b"/api/v1/pods?limit=500", [(b"Accept", b"application/json")], None)
    netloc = url.removeprefix("http://").encode()
    assert raw.heads == [
        b"POST /x HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n" % netloc,
        b"GET /api/v1/pods?limit=500 HTTP/1.1\r\nHost: %s\r\nAccept: application/json\r\n\r\n" % netloc,
    ]
    pool.close()


async def test_a_header_http_cannot_carry_is_a_connect_error_before_any_connection(
        server: tuple[RawServer, str]) -> None:
    raw, url = server
    pool = Http1Pool(url)
    with pytest.raises(NoAnswer) as err:
        await pool.request(b"POST", b"/x", [(b"Authorization", b"Bearer a\r\nX-Injected: 1")], b"{}")
    assert err.value.stage == "ConnectError" and "LocalProtocolError" in str(err.value)
    assert raw.connections == 0
    assert (await ask(pool)).status == 200
    pool.close()


@pytest.mark.parametrize("answer", [
    b"HTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}",  # not a status line
    b"HTTP/1.1 200 OK\r\nContent-Length: two\r\n\r\n{}",  # a bad length
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",  # a bad chunk size
    b"HTTP/1.1 200 OK\r\nBad Header\r\nContent-Length: 2\r\n\r\n{}",  # a header line without a colon
])
async def test_an_unreadable_answer_is_one_read_error_and_its_connection_is_dropped(
        server: tuple[RawServer, str], answer: bytes) -> None:
    raw, url = server
    raw.script = lambda n: answer if n == 1 else b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    pool = Http1Pool(url)
    with pytest.raises(NoAnswer) as err:
        await ask(pool)
    assert err.value.stage == "ReadError" and str(err.value).startswith("HttpParser")
    assert "\n" not in str(err.value)
    assert (await ask(pool)).body == b"ok"
    assert raw.connections == 2
    pool.close()


async def test_bytes_beyond_the_answer_keep_its_connection_from_being_used_again(
        server: tuple[RawServer, str]) -> None:
    raw, url = server
    raw.script = lambda n: (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirstHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstale"
                            if n == 1 else b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfresh")
    pool = Http1Pool(url)
    assert (await ask(pool)).body == b"first"
    assert (await ask(pool)).body == b"fresh"
    assert raw.connections == 2
    pool.close()


async def test_bytes_on_an_idle_connection_close_it(server: tuple[RawServer, str]) -> None:
    raw, url = server
    pool = Http1Pool(url)
    assert (await ask(pool)).status == 200
    (idle,) = pool._idle
    idle.data_received(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstale")  # as the loop would hand them over
    raw.script = lambda n: b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfresh"
    assert (await ask(pool)).body == b"fresh"
    assert raw.connections == 2
    pool.close()


async def test_an_informational_answer_is_followed_by_the_answer(server: tuple[RawServer, str]) -> None:
    raw, url = server
    raw.script = lambda n: b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}"
    pool = Http1Pool(url)
    for _ in range(2):
        answer = await ask(pool)
        assert (answer.status, answer.body) == (201, b"{}")
    assert raw.connections == 1
    pool.close()


@pytest.mark.parametrize(("method", "target", "headers"), [
    (b"HEAD", b"/x", []),  # its answer's length says nothing of a body: not this client's
    (b"GE T", b"/x", []),
    (b"GET", b"/x y", []),
    (b"GET", b"/x", [(b"Bad Name", b"v")]),
    (b"GET", b"/x", [(b"X", b"a\x00b")]),
])
async def test_what_http_cannot_carry_is_refused_before_any_connection(
        server: tuple[RawServer, str], method: bytes, target: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    raw, url = server
    pool = Http1Pool(url)
    with pytest.raises(NoAnswer) as err:
        await pool.request(method, target, headers, None)
    assert err.value.stage == "ConnectError" and str(err.value).startswith("LocalProtocolError: ")
    assert raw.connections == 0
    pool.close()


async def test_an_http_1_0_answer_is_not_kept_and_a_cut_chunked_one_is_a_read_error(
        server: tuple[RawServer, str]) -> None:
    raw, url = server
    raw.script = lambda n: (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok" if n == 1
                            else b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab")
    raw.hang_up = True
    pool = Http1Pool(url)
    assert (await ask(pool)).body == b"ok"
    with pytest.raises(NoAnswer) as err:
        await ask(pool)  # a new connection; the server closes it inside the first chunk
    assert err.value.stage == "ReadError"
    assert raw.connections == 2
    pool.close()
