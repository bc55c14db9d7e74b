"""A real HTTPS round trip: the webhook server on localhost with a freshly made CA and certificate
(as the Helm chart's genCA/genSignedCert make them), a client that trusts only that CA."""

from __future__ import annotations

import asyncio
import base64
import datetime
import ipaddress
import json
import os
import ssl
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from click.testing import CliRunner, Result
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gpufleet.cli import main
from gpufleet.kube.webhook.mutation import MutationSettings
from gpufleet.kube.webhook.server import CertificateReloader, build_app, tls_context

from .test_webhook_review import admission, pod

NOW = datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def make_pair(directory: Path, tag: str) -> tuple[Path, Path, Path]:
    """(CA certificate, server certificate, server key) PEM files for localhost."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder().subject_name(_name(f"ca-{tag}")).issuer_name(_name(f"ca-{tag}"))
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(NOW).not_valid_after(NOW + datetime.timedelta(days=36500))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                     crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder().subject_name(_name("gpufleet-webhook")).issuer_name(ca.subject)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(NOW).not_valid_after(NOW + datetime.timedelta(days=36500))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                    x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                       critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    ca_file, cert_file, key_file = directory / f"ca-{tag}.crt", directory / "tls.crt", directory / "tls.key"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return ca_file, cert_file, key_file


async def _serving(app: web.Application, context: ssl.SSLContext,
                   body: Callable[[str], Awaitable[None]]) -> None:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        await body(f"https://localhost:{port}")
    finally:
        await runner.cleanup()


def _client_context(ca_file: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca_file))


def test_https_round_trip(tmp_path: Path) -> None:
    ca_file, cert_file, key_file = make_pair(tmp_path, "one")
    results: dict[str, Any] = {}

    async def body(url: str) -> None:
        timeout = aiohttp.ClientTimeout(total=10)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            async with session.get(f"{url}/healthz", ssl=_client_context(ca_file)) as reply:
                results["health"] = (reply.status, await reply.text())
            review = admission(pod({"gpufleet.dev/gpu-blocks": "25"}))
            async with session.post(f"{url}/mutate", json=review, ssl=_client_context(ca_file)) as reply:
                results["mutate"] = (reply.status, await reply.json())
            async with session.post(f"{url}/mutate", data=b"{nope", ssl=_client_context(ca_file)) as reply:
                results["garbage"] = (reply.status, await reply.text())
            # a client that does not trust the CA is refused at the handshake
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                await session.get(f"{url}/healthz", ssl=ssl.create_default_context())

    asyncio.run(_serving(build_app(MutationSettings()), tls_context(str(cert_file), str(key_file)), body))
    assert results["health"] == (200, "ok\n")
    status, answer = results["mutate"]
    assert status == 200
    assert answer["response"]["allowed"] is True and answer["response"]["uid"] == "u-1"
    operations = json.loads(base64.b64decode(answer["response"]["patch"]))
    assert any(op["path"] == "/spec/containers/0/resources" for op in operations)
    assert results["garbage"][0] == 400 and "not JSON" in results["garbage"][1]


def test_rotated_certificate_is_served_without_a_restart(tmp_path: Path) -> None:
    first_ca, cert_file, key_file = make_pair(tmp_path, "one")
    context = tls_context(str(cert_file), str(key_file))
    reloader = CertificateReloader(context, str(cert_file), str(key_file))
    assert reloader.check() is False  # nothing changed yet
    seen: list[str] = []

    async def body(url: str) -> None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
            async with session.get(f"{url}/healthz", ssl=_client_context(first_ca)) as reply:
                seen.append(await reply.text())
            second_ca, _, _ = make_pair(tmp_path, "two")  # overwrites tls.crt / tls.key
            later = os.stat(cert_file).st_mtime + 10
            os.utime(cert_file, (later, later))
            os.utime(key_file, (later, later))
            assert reloader.check() is True
        # a fresh session (no pooled connection) sees the new certificate
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
            async with session.get(f"{url}/healthz", ssl=_client_context(second_ca)) as reply:
                seen.append(await reply.text())
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                await session.get(f"{url}/healthz", ssl=_client_context(first_ca))

    asyncio.run(_serving(build_app(MutationSettings()), context, body))
    assert seen == ["ok\n", "ok\n"]


def test_half_written_pair_keeps_the_old_one(tmp_path: Path) -> None:
    _, cert_file, key_file = make_pair(tmp_path, "one")
    context = tls_context(str(cert_file), str(key_file))
    reloader = CertificateReloader(context, str(cert_file), str(key_file))
    key_file.write_text("not a key")
    later = os.stat(key_file).st_mtime + 10
    os.utime(key_file, (later, later))
    assert reloader.check() is False


def _run_cli(*args: str) -> Result:
    return CliRunner().invoke(main, ["webhook", *args])


@pytest.mark.parametrize(("args", "message"), [
    ((), "--cert-file and --key-file are required"),
    (("--cert-file", "/nonexistent/tls.crt"), "go together"),
    (("--cert-file", "/nonexistent/tls.crt", "--key-file", "/nonexistent/tls.key"), "cannot load the key pair"),
    (("--insecure-http", "--mps-host-dir", "relative/dir"), "must be an absolute path"),
    (("--insecure-http", "--node-selector", "novalue"), "expected KEY=VALUE"),
    (("--insecure-http", "--server", "http://127.0.0.1:1"), "--kubeconfig and --server go with --tenancy"),
    (("--insecure-http", "--tenancy", "--kubeconfig", "/nonexistent/kubeconfig"), "no such kubeconfig file"),
])
def test_cli_bad_input_is_one_line_and_exit_2(args: tuple[str, ...], message: str) -> None:
    result = _run_cli(*args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert isinstance(result.exception, SystemExit)  # an exit, not an error escaping


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_cli_serves_https_and_stops_on_sigterm(tmp_path: Path) -> None:
    import http.client
    import signal
    import time

    ca_file, cert_file, key_file = make_pair(tmp_path, "one")
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpufleet", "webhook", "--host", "127.0.0.1", "--port", str(port),
         "--cert-file", str(cert_file), "--key-file", str(key_file), "--log-level", "warning"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 30  # start-up of a fresh interpreter on a busy 2-core machine
        answer = None
        while time.monotonic() < deadline and answer is None:
            connection = http.client.HTTPSConnection("localhost", port, timeout=5, context=_client_context(ca_file))
            try:
                connection.request("GET", "/healthz")
                reply = connection.getresponse()
                answer = (reply.status, reply.read().decode())
            except (ConnectionRefusedError, ConnectionResetError):
                assert proc.poll() is None, proc.communicate()[1]
                time.sleep(0.1)
            finally:
                connection.close()
        assert answer == (200, "ok\n")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr
