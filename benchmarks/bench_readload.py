"""Read load against the writer: readers must not slow or depose the allocator (issue 27, item 3).

Runs a real nats-server and a durable PostgreSQL from the wheels, the allocator (the writer) as its
own process (``python -m services.allocator``, lease TTL 1.5 s) and one reader (``python -m
services.allocator.reader``), the openb inventory (1,213 nodes), then twice the same intent stream
(RequestAllocation of openb pods at ``--rate``/s, each released ``--live`` intents later, so the
cluster stays part-full), ``--seconds`` each:

1. without read load;
2. with ``--clients`` concurrent HTTP clients on the reader (a separate process at ``--load-nice``,
   as clients run on other machines in production): dashboard pages
   (cluster, queue, placement quality), simulate (a small Pod), why (an allocation's explanation),
   the queue, and every fifth client posting a 1 MiB YAML Pod to simulate.

Prints per phase: intent -> outcome p50/p99 (decided, committed, relayed, received), the writer's
own fetch-to-commit p99 (from its ``gpuledger_decision_latency_seconds`` histogram, read as
``histogram_quantile`` does), the writer's epoch changes and non-leader samples of ``/readyz`` (polled every 0.2 s), and
the reader's answers by status. Targets (BENCHMARKS.md): zero epoch changes, phase-2 p99 within
1.2x of phase 1.

Usage: ``python3 benchmarks/bench_readload.py [--seconds 60] [--rate 200] [--clients 50] [--rounds 1]
[--warmup 5] [--think-ms 0] [--split-cpus]`` (``--think-ms``: each client's pause between its
requests; 0 is the harshest load, every client asking again as soon as it is answered.
``--split-cpus``: the read side, the reader with its parse workers and the clients, on the last
CPU, everything else (writer, PostgreSQL, nats-server, this driver) on the others, as when the
reader Deployment's pods get their own cores; needs two CPUs; ``--split-cpus reader+db`` moves the
reader's PostgreSQL backends there too, as when the database server has cores to spare.
``--read-quota C``: the read side in a cgroup with a CFS quota of C CPUs, the kernel's cap of a
pod's CPU limit; needs root).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import msgspec
import psutil

from benchmarks import openb
from benchmarks.bench_pipeline import Watch, percentile
from events import intents
from services.shared import messaging
from services.shared.natsserver import NatsServer, free_port
from services.shared.pgserver import PgServer

SMALL_POD = """apiVersion: v1
kind: Pod
metadata: {name: sim, namespace: team-a, annotations: {tensor-fusion.ai/tflops-request: "10",
  tensor-fusion.ai/vram-request: 1Gi}}
spec: {containers: [{name: main}]}
"""


def big_yaml(size: int = 1_040_000, *, under: str = "labels", entry: str = "k{i}: v{i}") -> bytes:
    """A YAML Pod of about ``size`` bytes, its metadata's ``under`` map filled with ``entry``
    (formatted with ``i``); by default 1 MiB of short labels, as the issue's trial sent (more than
    100,000 values: refused after the parse)."""
    lines = ["apiVersion: v1", "kind: Pod", "metadata:", "  name: big", "  namespace: team-a", f"  {under}:"]
    total, i = sum(len(line) + 1 for line in lines), 0
    while total < size:
        lines.append("    " + entry.format(i=i))
        total += len(lines[-1]) + 1
        i += 1
    return "\n".join(lines).encode()


def spawn(module: str, name: str, env: dict[str, str], log_dir: Path) -> subprocess.Popen[bytes]:
    out = (log_dir / f"{name}.log").open("ab")
    return subprocess.Popen([sys.executable, "-m", module], env={**os.environ, **env}, stdout=out, stderr=out)


def get_json(url: str) -> dict[str, object]:
    with urllib.request.urlopen(url, timeout=5) as response:
        body: dict[str, object] = json.loads(response.read())
        return body


def decision_p99_s(metrics_url: str) -> dict[float, float]:
    """Cumulative ``gpuledger_decision_latency_seconds`` buckets (upper bound -> count) of the writer."""
    with urllib.request.urlopen(metrics_url, timeout=5) as response:
        text = response.read().decode()
    buckets: dict[float, float] = {}
    for line in text.splitlines():
        if line.startswith("gpuledger_decision_latency_seconds_bucket"):
            bound = line.split('le="', 1)[1].split('"', 1)[0]
            buckets[float("inf") if bound == "+Inf" else float(bound)] = float(line.rsplit(" ", 1)[1])
    return buckets


def bucket_delta(before: dict[float, float], after: dict[float, float]) -> dict[float, float]:
    """The cumulative bucket counts of the observations between two scrapes."""
    return {b: after.get(b, 0) - before.get(b, 0) for b in sorted(after)}


def histogram_p99(delta: dict[float, float]) -> float:
    """The 99th percentile of cumulative buckets (upper bound -> count) as Prometheus'
    ``histogram_quantile`` reads it: linear within the bucket that holds it (NaN: no observation)."""
    total = delta.get(float("inf"), 0)
    lower, below = 0.0, 0.0
    for bound, count in sorted(delta.items()):
        if total and count >= 0.99 * total:
            if bound == float("inf"):
                return lower
            return lower + (bound - lower) * (0.99 * total - below) / max(count - below, 1e-9)
        lower, below = bound, count
    return float("nan")


async def watch_writer(url: str, stop: asyncio.Event, seen: list[tuple[str, int]]) -> None:
    while not stop.is_set():
        try:
            doc = await asyncio.to_thread(get_json, url)
            seen.append((str(doc["role"]), int(doc["epoch"])))  # type: ignore[call-overload]
        except OSError:
            seen.append(("unanswered", -1))
        await asyncio.sleep(0.2)


async def stream(js: object, watch: Watch, *, prefix: str, rate: float, seconds: float, live: int) -> list[str]:
    """Requests at ``rate``/s, each released ``live`` requests later; returns the request intent ids."""
    pods = openb.pods()
    sent: list[intents.RequestAllocation] = []
    start = time.perf_counter()
    n = 0
    while time.perf_counter() - start < seconds:
        delay = start + n / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        if n % 2 == 0 or len(sent) <= live:
            name = f"{prefix}-{n}"
            spec = msgspec.structs.replace(pods[n % len(pods)], allocation_id=name, pod=name)
            request = intents.RequestAllocation(intent_id=name, spec=spec)
            sent.append(request)
            intent: intents.AnyIntent = request
        else:
            old = sent[len(sent) - live - 1].spec
            intent = intents.ReleaseAllocation(intent_id=f"rel-{old.allocation_id}", allocation_id=old.allocation_id)
        watch.sent[intent.intent_id] = time.perf_counter()
        await messaging.publish_intent(js, intent)  # type: ignore[arg-type]
        n += 1
    return [i.intent_id for i in sent]


async def release_all(js: object, watch: Watch, ids: list[str]) -> None:
    """Release every allocation of ``ids`` (a phase's requests) and wait for the outcomes, so that
    each phase starts from the same pool (a release of one already released is rejected: harmless)."""
    releases = [intents.ReleaseAllocation(intent_id=f"end-{i}", allocation_id=i) for i in ids]
    for intent in releases:
        watch.sent[intent.intent_id] = time.perf_counter()
        await messaging.publish_intent(js, intent)  # type: ignore[arg-type]
    await watch.wait_all([r.intent_id for r in releases])


def cpu_s(pids: dict[str, int]) -> dict[str, float]:
    """CPU seconds (user + system) so far of the writer, the reader (with its parse workers) and
    PostgreSQL (every process of the server), by those names: each process's own, its live
    descendants', and those of its children that have exited (a backend that ended within a phase
    still counts, so a phase's difference is never negative)."""
    out: dict[str, float] = {}
    for name, pid in pids.items():
        try:
            proc = psutil.Process(pid)
            family = [proc, *proc.children(recursive=True)]
            root = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total = root.children_user + root.children_system
        for member in family:
            with contextlib.suppress(psutil.NoSuchProcess):
                times = member.cpu_times()
                total += times.user + times.system
        out[name] = total
    return out


async def phase(name: str, js: object, watch: Watch, args: argparse.Namespace, writer: str, reader: str,
                label: str, pids: dict[str, int], buckets: dict[float, float],
                cgroup: ReadCgroup | None = None) -> list[float]:
    """One phase (``name``: "without readers" or "with readers"); returns its intent -> outcome
    latencies (ms) after printing its line, and adds the writer's fetch-to-commit observations of
    the phase to ``buckets`` (cumulative counts by upper bound). ``label`` names its intents."""
    stop = asyncio.Event()
    samples: list[tuple[str, int]] = []
    watcher = asyncio.create_task(watch_writer(f"{writer}/readyz", stop, samples))
    before = await asyncio.to_thread(decision_p99_s, f"{writer}/metrics")
    cpu_before = cpu_s(pids)
    load = None
    if name == "with readers":
        load = subprocess.Popen(["nice", "-n", str(args.load_nice), sys.executable, __file__, "--load", reader,
                                 "--seconds", str(args.seconds), "--clients", str(args.clients),
                                 "--why", f"{label}-10", "--think-ms", str(args.think_ms)],
                                stdout=subprocess.PIPE)
        if args.split_cpus:
            backends = backends_of(pids["reader"], pids["PostgreSQL"]) if args.split_cpus == "reader+db" else []
            split_cpus(read=[load.pid, pids["reader"], *backends], write=[])
        if cgroup is not None:
            cgroup.add(load.pid)
    ids = await stream(js, watch, prefix=label, rate=args.rate, seconds=args.seconds, live=args.live)
    await watch.wait_all(ids)
    stop.set()
    await watcher
    after = await asyncio.to_thread(decision_p99_s, f"{writer}/metrics")
    delta = bucket_delta(before, after)
    for bound, count in delta.items():
        buckets[bound] = buckets.get(bound, 0.0) + count
    cpu = {k: v - cpu_before.get(k, 0.0) for k, v in cpu_s(pids).items()}
    lat = [(watch.done[i] - watch.sent[i]) * 1000 for i in ids]
    epochs = sorted({e for _, e in samples})
    roles = Counter(r for r, _ in samples)
    print(f"{label}: {len(ids)} requests at {args.rate:g} intents/s for {args.seconds:g} s: intent->outcome "
          f"p50 {percentile(lat, 0.5):.1f} ms, p99 {percentile(lat, 0.99):.1f} ms, max {max(lat):.1f} ms; "
          f"writer fetch-to-commit p99 {histogram_p99(delta) * 1000:.1f} ms; writer epochs {epochs}, "
          f"/readyz samples {dict(roles)}; CPU s " + ", ".join(f"{k} {v:.1f}" for k, v in cpu.items()))
    if load is not None:
        out, _ = load.communicate(timeout=args.seconds + 120)
        print(f"  reader answers: {out.decode().strip()}")
    await release_all(js, watch, ids)
    return lat


class ReadCgroup:
    """A CPU cgroup for the read side (``--read-quota``): a CFS quota of ``cores`` CPUs, the
    kernel's cap (Kubernetes ``resources.limits.cpu``, systemd ``CPUQuota=``); cgroup v2
    (``cpu.max``) or v1 (``cpu.cfs_quota_us``). Needs root; removed by :meth:`close`."""

    PERIOD_US = 100_000

    def __init__(self, cores: float) -> None:
        quota = int(cores * self.PERIOD_US)
        if Path("/sys/fs/cgroup/cgroup.controllers").exists():
            self.path = Path(f"/sys/fs/cgroup/gpuledger-readers-{os.getpid()}")
            self.path.mkdir()
            (self.path / "cpu.max").write_text(f"{quota} {self.PERIOD_US}")
        else:
            self.path = Path(f"/sys/fs/cgroup/cpu/gpuledger-readers-{os.getpid()}")
            self.path.mkdir()
            (self.path / "cpu.cfs_period_us").write_text(str(self.PERIOD_US))
            (self.path / "cpu.cfs_quota_us").write_text(str(quota))

    def add(self, pid: int) -> None:
        """Move ``pid`` and its children into the cgroup (children started later inherit it)."""
        proc = psutil.Process(pid)
        for each in (proc, *proc.children(recursive=True)):
            with contextlib.suppress(psutil.NoSuchProcess, ProcessLookupError):
                (self.path / "cgroup.procs").write_text(str(each.pid))

    def close(self) -> None:
        """Move what is left back to the root cgroup and remove this one."""
        with contextlib.suppress(OSError):
            for pid in (self.path / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):
                    (self.path.parent / "cgroup.procs").write_text(pid)
            self.path.rmdir()


CPUS = sorted(os.sched_getaffinity(0))
"""The CPUs this benchmark may use (read before any pinning)."""


def backends_of(pid: int, postmaster: int) -> list[int]:
    """The PostgreSQL backends (children of ``postmaster``) serving the connections of process ``pid``."""
    ports = {c.laddr.port for c in psutil.Process(pid).net_connections(kind="tcp") if c.raddr}
    found = []
    for child in psutil.Process(postmaster).children():
        with contextlib.suppress(psutil.Error):
            if any(c.raddr and c.raddr.port in ports for c in child.net_connections(kind="tcp")):
                found.append(child.pid)
    return found


def split_cpus(*, read: list[int], write: list[int]) -> None:
    """Pin the processes of ``read`` and their children to the last of :data:`CPUS` and those of
    ``write`` and their children to the others (children started later inherit their parent's set)."""
    cpus = CPUS
    if len(cpus) < 2:
        raise SystemExit("--split-cpus needs two CPUs")
    for pids, where in ((read, cpus[-1:]), (write, cpus[:-1])):
        for pid in pids:
            proc = psutil.Process(pid)
            for each in (proc, *proc.children(recursive=True)):
                with contextlib.suppress(psutil.NoSuchProcess):
                    each.cpu_affinity(where)


async def run(args: argparse.Namespace, root: Path) -> None:
    nats_server = NatsServer(root / "nats")
    nats_server.start()
    pg = PgServer(root / "pg").start()
    db_url = pg.create_database("bench")
    from services.allocator.adapters import database

    database.upgrade(db_url)
    writer_port, reader_port = free_port(), free_port()
    common = {"GPULEDGER_NATS_URL": nats_server.url, "GPULEDGER_DATABASE_URL": db_url, "GPULEDGER_LOG_LEVEL": "warning"}
    procs = [spawn("services.allocator", "writer", {**common, "GPULEDGER_HTTP_PORT": str(writer_port),
                                                    "GPULEDGER_HEARTBEAT_CHECK_S": "0", "GPULEDGER_HOLDER": "w"}, root),
             spawn("services.allocator.reader", "reader", {**common, "GPULEDGER_HTTP_PORT": str(reader_port),
                                                           "GPULEDGER_NICE": str(args.reader_nice)}, root)]
    writer, reader = f"http://127.0.0.1:{writer_port}", f"http://127.0.0.1:{reader_port}"
    postmaster = int((pg.data_dir / "postmaster.pid").read_text().split()[0])
    pids = {"writer": procs[0].pid, "reader": procs[1].pid, "PostgreSQL": postmaster}
    if args.split_cpus:
        nats_pid = int(nats_server.pid_path.read_text())
        split_cpus(read=[procs[1].pid], write=[procs[0].pid, postmaster, nats_pid, os.getpid()])
    cgroup = ReadCgroup(args.read_quota) if args.read_quota else None
    if cgroup is not None:
        cgroup.add(procs[1].pid)
    client = await messaging.connect(nats_server.url)
    js = client.jetstream()
    await messaging.ensure_streams(js)
    watch = Watch()
    await client.subscribe("gpuledger.event.>", cb=watch.on_event)
    try:
        nodes = openb.nodes()
        for node in nodes:
            watch.sent[node.intent_id] = time.perf_counter()
            await messaging.publish_intent(js, node)
        await watch.wait_all([n.intent_id for n in nodes])
        print(f"inventory: {len(nodes)} nodes; writer {writer}, reader {reader} (nice +{args.reader_nice}); "
              f"load average {os.getloadavg()[0]:.2f}")
        if args.warmup > 0:  # the first seconds after the inventory are slower (caches, the first snapshot)
            warm = await stream(js, watch, prefix="warmup", rate=args.rate, seconds=args.warmup, live=args.live)
            await watch.wait_all(warm)
            await release_all(js, watch, warm)
        pooled: dict[str, list[float]] = {"without readers": [], "with readers": []}
        batches: dict[str, dict[float, float]] = {name: {} for name in pooled}
        for n in range(args.rounds):
            order = list(pooled) if n % 2 == 0 else list(pooled)[::-1]  # ABBA: a drift favours neither
            for name in order:
                label = name.replace(" ", "") + (str(n) if args.rounds > 1 else "")
                pooled[name] += await phase(name, js, watch, args, writer, reader, label, pids, batches[name],
                                            cgroup)
        if args.rounds > 1:
            base, loaded = (percentile(pooled[k], 0.99) for k in pooled)
            print(f"pooled over {args.rounds} rounds: p99 without readers {base:.1f} ms, with readers "
                  f"{loaded:.1f} ms ({loaded / base:.2f}x); p50 {percentile(pooled['without readers'], 0.5):.1f} / "
                  f"{percentile(pooled['with readers'], 0.5):.1f} ms")
            base, loaded = (histogram_p99(batches[k]) * 1000 for k in batches)
            print(f"  the writer's fetch-to-commit p99 (its histogram): without readers {base:.2f} ms, with readers "
                  f"{loaded:.2f} ms ({loaded / base:.2f}x)")
        print(f"load average after: {os.getloadavg()[0]:.2f} (1 min)")
    finally:
        await client.close()
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(30)
        pg.stop()
        nats_server.stop()
        if cgroup is not None:
            cgroup.close()


async def load(base: str, seconds: float, clients: int, why: str, think_s: float = 0.0) -> Counter[str]:
    """``clients`` concurrent clients for ``seconds`` (module docstring); answers by route and status."""
    import aiohttp

    end = time.monotonic() + seconds
    answers: Counter[str] = Counter()
    big = big_yaml()
    routes = [("GET", "/ui/"), ("GET", "/ui/queue"), ("GET", "/ui/quality"), ("POST", "/api/v1/simulate"),
              ("GET", f"/api/v1/allocations/{why}"), ("GET", "/api/v1/queue")]

    async def client(n: int, session: aiohttp.ClientSession) -> None:
        method, path = ("POST", "/api/v1/simulate") if n % 5 == 4 else routes[n % len(routes)]
        body = big if n % 5 == 4 else SMALL_POD.encode() if method == "POST" else None
        label = "simulate 1MiB" if n % 5 == 4 else f"{method} {path}"
        headers = {"Content-Type": "application/yaml"} if method == "POST" else {}  # the Pod routes' YAML type
        while time.monotonic() < end:
            try:
                async with session.request(method, base + path, data=body, headers=headers) as response:
                    await response.read()
                    answers[f"{label} {response.status}"] += 1
            except (aiohttp.ClientError, TimeoutError) as exc:
                answers[f"{label} {type(exc).__name__}"] += 1
            if think_s:
                await asyncio.sleep(think_s)

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        await asyncio.gather(*(client(n, session) for n in range(clients)))
    return answers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="seconds per phase")
    parser.add_argument("--rate", type=float, default=200.0, help="intents/s offered (requests and releases)")
    parser.add_argument("--live", type=int, default=500, help="requests live before the oldest is released")
    parser.add_argument("--clients", type=int, default=50, help="concurrent HTTP clients on the reader")
    parser.add_argument("--reader-nice", type=int, default=5,
                        help="the reader's added niceness (GPULEDGER_NICE; default 5 as the reader's, 0: none)")
    parser.add_argument("--load-nice", type=int, default=10,
                        help="niceness of the HTTP clients' process (in production they run elsewhere)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="phase pairs, alternated ABBA, each phase's requests released after it; "
                        ">1 also prints the figures pooled by phase")
    parser.add_argument("--think-ms", type=float, default=0.0,
                        help="pause of each client between its requests (0: each sends its next request as soon "
                        "as the last is answered, the harshest load; a dashboard tab polls every 2,000)")
    parser.add_argument("--warmup", type=float, default=5.0,
                        help="seconds of the stream before the phases, not measured")
    parser.add_argument("--split-cpus", nargs="?", const="reader", choices=("reader", "reader+db"), default="",
                        help="the reader, its parse workers and the clients on the last CPU, the rest on the others "
                        "(reader+db: the reader's PostgreSQL backends too, as a database server with cores to spare)")
    parser.add_argument("--read-quota", type=float, default=0.0,
                        help="CPUs of a CFS quota (a cgroup, as a pod's CPU limit) for the reader, its parse "
                        "workers and the clients (0: none; needs root)")
    parser.add_argument("--load", default="", help=argparse.SUPPRESS)  # the load process: the reader's URL
    parser.add_argument("--why", default="withreaders-10", help=argparse.SUPPRESS)  # the load's why id
    args = parser.parse_args()
    if args.load:
        answers = asyncio.run(load(args.load, args.seconds, args.clients, args.why, args.think_ms / 1000))
        print(json.dumps(dict(sorted(answers.items()))))
        return
    root = Path(tempfile.mkdtemp(prefix="gpuledger-readload-"))
    try:
        asyncio.run(run(args, root))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
