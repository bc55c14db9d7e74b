#!/usr/bin/env python
"""Admission requests per second and latency of ``gpufleet webhook --tenancy``, over HTTPS.

Three processes, as in a cluster: the API server emulator (gpufleet.testing.emulator over the
in-memory store, in a child process) holding ``--projects`` Projects (each with its namespace, two
queues, image and volume rules, a pending-gang cap), a shared queue that RBAC grants to every user,
PriorityClasses and pending pods; one ``gpufleet webhook --tenancy`` process (the real command: TLS,
its cluster cache fed by list + watch, SubjectAccessReviews through the lightkube adapter); and this
script as the API server's side, sending AdmissionReview v1 requests over keep-alive HTTPS
connections (TLS 1.3, certificate checked; a minimal HTTP/1.1 client, as aiohttp's client costs
more CPU per request than the webhook itself on this 2-core machine).

The requests mix: pods of their Project's queues (60 %), pods naming the shared queue that only
RBAC grants (20 %: a SubjectAccessReview per user and namespace, then cached for its TTL), fractional
pods (10 %: their gpufleet.dev/mps-share and the stamp in one patch) and pods refused for their image (10 %). A
warm-up pass asks every (user, namespace) question once; then

- **open loop**: requests are started at a fixed ``--rate`` for ``--seconds``, each timed from the
  moment it was due (so a slow webhook cannot hide its queueing: no coordinated omission); p50,
  p99 and the achieved rate are reported;
- **closed loop**: ``--concurrency`` requests in flight for ``--seconds``: the most it answers.

The webhook's CPU seconds per request (from /proc) move much less with the machine's load than the
wall-clock figures.

    .venv/bin/python scripts/bench_webhook.py --rate 1000 --seconds 10
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import ipaddress
import json
import multiprocessing
import os
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

DIGEST = "sha256:" + "e" * 64
USERS = 10


def _project(i: int) -> dict[str, Any]:
    return {"apiVersion": "gpufleet.dev/v1alpha1", "kind": "Project", "metadata": {"name": f"team-{i}"}, "spec": {
        "namespaces": {"names": [f"ns-{i}"]}, "queues": [f"q-{i}-train", f"q-{i}-infer"],
        "defaultQueue": f"q-{i}-train",
        "priorityClasses": ["batch", "high"], "maxPendingGangsPerUser": 1000,
        "images": {"allowed": ["ghcr.io/acme/**", "docker.io/library/*"], "denied": ["ghcr.io/acme/bad*"]},
        "volumes": {"storageClasses": ["fast"], "claimNames": [f"team-{i}-*"]},
        "nodePools": [{"name": "a100", "nodeSelector": {"matchLabels": {"pool": "a100"}}}],
    }}


def _serve(projects: int, conn: Connection) -> None:
    """Child process: the API server emulator with the Projects and their kin."""
    from gpufleet.kube import Kind
    from gpufleet.testing.emulator import ApiServerEmulator
    from gpufleet.testing.fake_cluster import FakeCluster

    async def main() -> None:
        store = FakeCluster()
        store.put(Kind.PROJECT, {"apiVersion": "gpufleet.dev/v1alpha1", "kind": "Project",
                                 "metadata": {"name": "platform"}, "spec": {"queues": ["shared"]}})
        for i in range(projects):
            store.put(Kind.PROJECT, _project(i))
            store.put(Kind.NAMESPACE, {"metadata": {"name": f"ns-{i}", "labels": {"team": str(i)}}})
            for j in range(5):  # some pending pods of every Project
                store.put(Kind.POD, {"metadata": {"name": f"pending-{j}", "namespace": f"ns-{i}",
                                                  "annotations": {"gpufleet.dev/submitted-by": f"user-{j}"}},
                                     "spec": {"schedulerName": "gpufleet",
                                              "containers": [{"name": "c", "image": "x"}]}})
        for name, value in (("batch", 10), ("high", 50)):
            store.put(Kind.PRIORITY_CLASS, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                            "metadata": {"name": name}, "value": value})
        store.grant_queue("shared", group="ml-users")
        store.calls.clear()
        async with ApiServerEmulator(store=store) as emulator:
            conn.send(emulator.url_text)
            await asyncio.get_running_loop().run_in_executor(None, conn.recv)  # "stop"
            reviews = sum(1 for c in store.calls if c.kind is Kind.SUBJECT_ACCESS_REVIEW)
            conn.send({"access_reviews": reviews, "calls": len(store.calls)})

    asyncio.run(main())


def _certificates(directory: Path) -> tuple[Path, Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = directory / "tls.crt", directory / "tls.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_file, cert_file, key_file


def _review(i: int, projects: int) -> bytes:
    """The i-th AdmissionReview of the mix (see the module docstring)."""
    team, user, kind = i % projects, (i // projects) % USERS, i % 10
    labels: dict[str, str] = {"app": "train"}
    annotations: dict[str, str] = {}
    image = f"ghcr.io/acme/trainer:{i % 7}"
    if kind in (1, 2):
        labels["gpufleet.dev/queue"] = "shared"
    elif kind == 3:
        annotations["gpufleet.dev/gpu-blocks"] = "25"
    elif kind == 4:
        image = "ghcr.io/acme/bad-miner:1"
    else:
        labels["gpufleet.dev/queue"] = f"q-{team}-train"
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"generateName": "job-", "namespace": f"ns-{team}", "labels": labels,
                        "annotations": annotations},
           "spec": {"schedulerName": "gpufleet", "priorityClassName": "batch", "priority": 10,
                    "containers": [{"name": "main", "image": image, "command": ["python", "train.py"],
                                    "resources": {"limits": {"cpu": "4", "memory": "16Gi"}},
                                    "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                    "initContainers": [{"name": "fetch", "image": f"ubuntu@{DIGEST}"}],
                    "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": f"team-{team}-data"}},
                                {"name": "cfg", "configMap": {"name": "cfg"}}]}}
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": f"req-{i}", "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "namespace": f"ns-{team}",
        "operation": "CREATE", "object": pod,
        "userInfo": {"username": f"user-{user}", "uid": f"uid-{user}", "groups": ["ml-users", "system:authenticated"]},
    }}).encode()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class _Connection:
    """One keep-alive HTTPS connection speaking just enough HTTP/1.1 (a Python client costs more CPU
    per request than the webhook; this one keeps the load generator's share small)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        head = (f"{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        self.writer.write(head + body)
        headers = await self.reader.readuntil(b"\r\n\r\n")
        status = int(headers.split(b" ", 2)[1])
        length = 0
        for line in headers.split(b"\r\n"):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        return status, await self.reader.readexactly(length)


async def _drive(port: int, ca: Path, bodies: list[bytes], rate: float, seconds: float,
                 concurrency: int) -> dict[str, Any]:
    context = ssl.create_default_context(cafile=str(ca))
    outcome: dict[str, int] = {"allowed": 0, "denied": 0, "patched": 0}

    async def connect() -> _Connection:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost")
        return _Connection(reader, writer)

    for _ in range(120):  # ready: listening, and the cluster has been read
        with contextlib.suppress(OSError):
            probe = await connect()
            status, _ = await probe.request("GET", "/readyz")
            probe.writer.close()
            if status == 200:
                break
        await asyncio.sleep(0.25)
    else:
        raise RuntimeError("the webhook did not become ready")
    pool: asyncio.Queue[_Connection] = asyncio.Queue()
    for _ in range(max(concurrency, 32)):
        pool.put_nowait(await connect())

    async def send(body: bytes) -> None:
        connection = await pool.get()
        try:
            status, answer = await connection.request("POST", "/mutate", body)
        finally:
            pool.put_nowait(connection)
        if status != 200:
            raise RuntimeError(f"HTTP {status}: {answer[:200]!r}")
        response = json.loads(answer)["response"]
        outcome["allowed" if response["allowed"] else "denied"] += 1
        outcome["patched"] += "patch" in response

    await asyncio.gather(*(send(b) for b in bodies))  # warm-up: every access question once
    warm = dict(outcome)

    loop = asyncio.get_running_loop()
    latencies: list[float] = []
    total = int(rate * seconds)
    tasks: list[asyncio.Task[None]] = []

    async def timed(body: bytes, due: float) -> None:
        await send(body)
        latencies.append(loop.time() - due)

    start = loop.time()
    for i in range(total):  # open loop: each request started when due, timed from then
        due = start + i / rate
        delay = due - loop.time()
        if delay > 0.0005:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(timed(bodies[i % len(bodies)], due)))
    await asyncio.gather(*tasks)
    open_elapsed = loop.time() - start

    counter = {"n": 0}
    closed: list[float] = []
    stop_at = loop.time() + seconds

    async def worker(k: int) -> None:
        i = k
        while loop.time() < stop_at:
            t0 = loop.time()
            await send(bodies[i % len(bodies)])
            closed.append(loop.time() - t0)
            counter["n"] += 1
            i += concurrency

    t_closed = loop.time()
    await asyncio.gather(*(worker(k) for k in range(concurrency)))
    closed_elapsed = loop.time() - t_closed
    while not pool.empty():
        pool.get_nowait().writer.close()
    return {
        "warmup": warm,
        "open": {"rate": rate, "requests": total, "achieved_per_s": round(total / open_elapsed, 1),
                 "p50_ms": round(1000 * statistics.median(latencies), 2),
                 "p99_ms": round(1000 * _percentile(latencies, 0.99), 2),
                 "max_ms": round(1000 * max(latencies), 2)},
        "closed": {"concurrency": concurrency, "requests": counter["n"],
                   "per_s": round(counter["n"] / closed_elapsed, 1),
                   "p50_ms": round(1000 * statistics.median(closed), 2),
                   "p99_ms": round(1000 * _percentile(closed, 0.99), 2)},
        "outcomes": outcome,
    }


def run_once(projects: int, rate: float, seconds: float, concurrency: int) -> dict[str, Any]:
    parent, child = multiprocessing.Pipe()
    server = multiprocessing.Process(target=_serve, args=(projects, child), daemon=True)
    server.start()
    api_url = parent.recv()
    port = _free_port()
    with tempfile.TemporaryDirectory() as tmp:
        ca, cert, key = _certificates(Path(tmp))
        webhook = subprocess.Popen(
            [sys.executable, "-m", "gpufleet", "webhook", "--tenancy", "--server", api_url, "--host", "127.0.0.1",
             "--port", str(port), "--cert-file", str(cert), "--key-file", str(key), "--log-level", "warning"],
            stderr=subprocess.PIPE, text=True)
        try:
            bodies = [_review(i, projects) for i in range(projects * USERS)]
            cpu0 = None
            for _ in range(100):
                with contextlib.suppress(FileNotFoundError):
                    cpu0 = _cpu_seconds(webhook.pid)
                    break
            client0 = time.process_time()
            result = asyncio.run(_drive(port, ca, bodies, rate, seconds, concurrency))
            client_cpu = time.process_time() - client0
            cpu = _cpu_seconds(webhook.pid) - (cpu0 or 0.0)
        finally:
            webhook.send_signal(signal.SIGTERM)
            _, stderr = webhook.communicate(timeout=30)
            parent.send("stop")
            stats = parent.recv() if parent.poll(30) else {}
            server.join(10)
    if "Traceback" in stderr:
        raise RuntimeError(stderr)
    answered = sum(result["outcomes"].values())
    return {"projects": projects, **result, "webhook_cpu_s": round(cpu, 2),
            "webhook_cpu_ms_per_request": round(1000 * cpu / answered, 3),
            "client_cpu_ms_per_request": round(1000 * client_cpu / answered, 3), **stats,
            "load_average": round(os.getloadavg()[0], 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--projects", type=int, default=50)
    parser.add_argument("--rate", type=float, default=1000.0, help="requests/s of the open loop")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each loop")
    parser.add_argument("--concurrency", type=int, default=16, help="requests in flight in the closed loop")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    for _ in range(args.repeat):
        print(json.dumps(run_once(args.projects, args.rate, args.seconds, args.concurrency)), flush=True)


if __name__ == "__main__":
    main()
