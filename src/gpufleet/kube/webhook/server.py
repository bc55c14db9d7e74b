"""The webhook's HTTPS server: ``POST /mutate`` (AdmissionReview), ``POST /validate`` (the same checks
on the final object, no patch), ``GET /healthz`` (alive) and ``GET /readyz`` (with tenancy: 503
until the cluster's Projects have been read).

With a :class:`~gpufleet.kube.webhook.service.TenancyService`, ``/mutate`` also applies the Project
rules to pods of gpufleet's and PodGroups (see :mod:`gpufleet.kube.webhook.review`); the service's
watches run while the application runs.

aiohttp rather than the standard library's ``http.server``: the Python documentation itself warns
that ``http.server`` is not meant for production (it implements only basic security checks), while
aiohttp is a maintained server with request size limits, keep-alive (the API server reuses its
connections), graceful shutdown on SIGTERM and TLS through a stdlib :class:`ssl.SSLContext`.

Certificates rotate (cert-manager renews them in place; the Helm-generated ones change on upgrade):
:class:`CertificateReloader` re-reads the files when their modification time changes, and new TLS
handshakes use the new pair without a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from gpufleet.kube.webhook.mutation import MutationSettings
from gpufleet.kube.webhook.review import ReviewError, decode, review
from gpufleet.kube.webhook.service import NotReady, TenancyService

__all__ = ["CertificateReloader", "ServerSettings", "build_app", "run_server", "tls_context"]

MAX_BODY_BYTES = 8 * 1024 * 1024  # an AdmissionReview carries the whole pod; the API server caps objects at ~3 MiB
log = logging.getLogger("gpufleet.webhook")


@dataclass(frozen=True, slots=True)
class ServerSettings:
    host: str = "0.0.0.0"  # a webhook listens on the pod's address
    port: int = 8443
    cert_file: str | None = None
    key_file: str | None = None
    reload_interval_s: float = 60.0


def tls_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """A server context with TLS 1.2 or newer; raises OSError/ssl.SSLError for unusable files."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    return context


class CertificateReloader:
    """Reloads the key pair into ``context`` when either file changes (checked by :meth:`check`)."""

    def __init__(self, context: ssl.SSLContext, cert_file: str, key_file: str) -> None:
        self.context = context
        self.cert_file = cert_file
        self.key_file = key_file
        self._seen = self._stamp()

    def _stamp(self) -> tuple[float, float] | None:
        try:
            return (os.stat(self.cert_file).st_mtime, os.stat(self.key_file).st_mtime)
        except OSError:
            return None

    def check(self) -> bool:
        """Reload if the files changed since the last look; True when a new pair was loaded.

        A half-written pair (cert-manager writes the two files one after the other) fails to load;
        the old pair stays in use and the next check tries again."""
        stamp = self._stamp()
        if stamp is None or stamp == self._seen:
            return False
        try:
            self.context.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as err:
            log.warning("certificate reload failed, keeping the previous pair: %s", err)
            return False
        self._seen = stamp
        log.info("reloaded the TLS certificate from %s", self.cert_file)
        return True


async def _healthz(_: web.Request) -> web.Response:
    return web.Response(text="ok\n")


def _mutate_handler(settings: MutationSettings, tenancy: TenancyService | None,
                    validate: bool = False) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def mutate(request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            if tenancy is None:
                answer = review(decode(raw), settings, validate=validate)
            else:
                answer = await tenancy.answer(decode(raw), settings, validate=validate)
        except ReviewError as err:
            log.warning("bad admission request from %s: %s", request.remote, err)
            return web.Response(status=400, text=f"{err}\n")
        except NotReady as err:
            return web.Response(status=503, text=f"{err}\n")
        return web.json_response(answer)

    return mutate


def _readyz_handler(tenancy: TenancyService | None) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def readyz(_: web.Request) -> web.StreamResponse:
        if tenancy is not None and not tenancy.ready:
            return web.Response(status=503, text="reading the cluster\n")
        return web.Response(text="ok\n")

    return readyz


def build_app(settings: MutationSettings, reloader: CertificateReloader | None = None,
              reload_interval_s: float = 60.0, tenancy: TenancyService | None = None) -> web.Application:
    """The aiohttp application (tests run it on a random local port)."""
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz_handler(tenancy))
    app.router.add_post("/mutate", _mutate_handler(settings, tenancy))
    app.router.add_post("/validate", _mutate_handler(settings, tenancy, validate=True))
    if tenancy is not None:

        async def run_tenancy(_: web.Application) -> AsyncIterator[None]:
            await tenancy.start()
            yield
            await tenancy.stop()

        app.cleanup_ctx.append(run_tenancy)
    if reloader is not None:

        async def watch_certificates(_: web.Application) -> AsyncIterator[None]:
            async def loop() -> None:
                while True:
                    await asyncio.sleep(reload_interval_s)
                    reloader.check()

            task = asyncio.create_task(loop())
            yield
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

        app.cleanup_ctx.append(watch_certificates)
    return app


def run_server(server: ServerSettings, settings: MutationSettings, tenancy: TenancyService | None = None) -> None:
    """Serve until SIGTERM/SIGINT. HTTPS when a key pair is given, else plain HTTP (local tests)."""
    context: ssl.SSLContext | None = None
    reloader: CertificateReloader | None = None
    if server.cert_file and server.key_file:
        context = tls_context(server.cert_file, server.key_file)
        reloader = CertificateReloader(context, server.cert_file, server.key_file)
    app = build_app(settings, reloader, server.reload_interval_s, tenancy)

    async def freeze(_: web.Application) -> None:
        # Everything loaded so far lives as long as the process: keep it out of the collector's
        # full passes, which otherwise stop every request for ~15 ms now and then (p99 latency).
        gc.collect()
        gc.freeze()

    app.on_startup.append(freeze)
    log.info("serving on %s://%s:%d", "https" if context else "http", server.host, server.port)
    web.run_app(app, host=server.host, port=server.port, ssl_context=context, print=None, access_log=None)
