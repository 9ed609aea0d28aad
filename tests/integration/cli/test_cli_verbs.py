"""Every lifecycle verb of the CLI against one real ``gpuledger up`` (small inventory): submit and
its idempotency, refusals, queue/why/quota/resize/release, pools and nodes, history filters,
``events`` (including ``--follow``), and an interrupted ``trace replay`` that releases what it held
and leaves the default pool alone."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cli.upstack import CLI, ENV, INVENTORY, POD, ROOT, UpStack, as_json, default_sigint, gpuledger

pytestmark = pytest.mark.integration



@pytest.fixture(scope="module")
def stack() -> Iterator[Path]:
    """A running ``gpuledger up --inventory`` (3 GPUs); yields its data dir."""
    root = Path(tempfile.mkdtemp(prefix="gpuledger-verbs-"))
    (root / "nodes.csv").write_text(INVENTORY)
    up = UpStack(root, "--data-dir", str(root / "stack"), "--inventory", str(root / "nodes.csv"), "--json",
                 log=root / "up.log")
    try:
        up.wait_up()
        yield root / "stack"
    finally:
        assert up.interrupt() == 0, up.log.read_text()[-4000:]
        shutil.rmtree(root, ignore_errors=True)


def cli(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return gpuledger(*args, "--data-dir", str(data_dir))


def pod(data_dir: Path, name: str, namespace: str = "team-a", tflops: str = "10") -> str:
    path = data_dir.parent / f"{namespace}-{name}.yaml"
    path.write_text(POD.format(name=name, namespace=namespace, tflops=tflops))
    return str(path)


def test_submit_is_idempotent_per_pod(stack: Path) -> None:
    first = cli(stack, "submit", pod(stack, "twice"), "--json")
    assert first.returncode == 0 and as_json(first)["type"] == "allocation_granted"
    again = cli(stack, "submit", pod(stack, "twice"), "--json")
    assert again.returncode == 0
    assert as_json(again)["allocation_id"] == as_json(first)["allocation_id"] and as_json(again)["type"] == "existing"
    live = cli(stack, "status", "--json")
    assert as_json(live)["allocations"]["granted"] == 1
    assert cli(stack, "release", "team-a/twice").returncode == 0


def test_rejected_and_bad_input_exit_codes(stack: Path) -> None:
    huge = cli(stack, "submit", pod(stack, "huge", tflops="5000"), "--json")
    assert huge.returncode == 4 and as_json(huge)["type"] == "allocation_rejected"
    assert "scaling quota" not in as_json(huge)["reason"]
    bad = cli(stack, "submit", pod(stack, "bad", tflops="two"), "--json")
    assert bad.returncode == 2 and as_json(bad)["field"] == "tensor-fusion.ai/tflops-request"
    unknown = cli(stack, "pool", "configure", "default", "--strategy", "no-such", "--json")
    assert unknown.returncode == 2 and as_json(unknown)["field"] == "strategy"
    missing = cli(stack, "release", "team-a/nobody", "--json")
    assert missing.returncode == 2 and as_json(missing)["field"] == "ALLOCATION"
    for verb in ("why", "release"):
        blank = cli(stack, verb, " ", "--json")
        assert blank.returncode == 2 and "empty value" in as_json(blank)["error"], blank.stdout


def test_quota_queue_why_resize_release(stack: Path) -> None:
    assert cli(stack, "quota", "set", "team-q", "--total-tflops", "10").returncode == 0
    quotas = as_json(cli(stack, "quota", "list", "--json"))
    assert any(q["namespace"] == "team-q" and q["quota"]["total_requests"]["tflops"] == "10" for q in quotas)
    assert cli(stack, "submit", pod(stack, "one", "team-q")).returncode == 0
    assert cli(stack, "submit", pod(stack, "two", "team-q")).returncode == 3
    listed = cli(stack, "quota", "list")  # 10 of 10 TFLOPS used: 0 % left, past the 95 % alert threshold
    assert [line.split("\t")[-1] for line in listed.stdout.splitlines() if line.startswith("team-q")] == [
        "requests.tflops"]
    queue = as_json(cli(stack, "queue", "--namespace", "team-q", "--json"))
    assert [q["pod"] for q in queue] == ["two"] and queue[0]["code"] == "quota"
    why = cli(stack, "why", "team-q/two", "--json")
    assert why.returncode == 3 and as_json(why)["explanation"]["code"] == "quota"
    text = cli(stack, "why", "team-q/two")
    assert "would_need" in text.stdout and "quota" in text.stdout
    assert cli(stack, "resize", "team-q/one", "--tflops", "500").returncode == 4
    assert cli(stack, "release", "team-q/one").returncode == 0
    granted = cli(stack, "why", "team-q/two", "--json")
    assert granted.returncode == 0 and as_json(granted)["status"] == "granted"
    resized = cli(stack, "resize", "team-q/two", "--tflops", "5", "--json")
    assert resized.returncode == 0 and as_json(resized)["type"] == "allocation_resized"
    assert cli(stack, "quota", "remove", "team-q").returncode == 0
    assert cli(stack, "release", "team-q/two").returncode == 0
    history = as_json(cli(stack, "history", "--namespace", "team-q", "--status", "released", "--json"))
    assert sorted(r["pod"] for r in history) == ["one", "two"]
    ended = cli(stack, "why", "team-q/one")  # not live: how it ended, when and why
    assert ended.returncode == 0 and "status:" in ended.stdout and "released" in ended.stdout, ended.stdout
    assert as_json(cli(stack, "why", "team-q/one", "--json"))["status"] == "released"
    again = cli(stack, "release", "team-q/one", "--json")
    assert again.returncode == 2 and "is not live: released at " in as_json(again)["error"], again.stdout
    piped = cli(stack, "history", "--namespace", "team-q")
    assert piped.stdout.splitlines()[0].split("\t")[:4] == ["namespace", "pod", "pool", "status"]


def test_pools_and_nodes(stack: Path) -> None:
    assert cli(stack, "pool", "configure", "default", "--strategy", "best-fit").returncode == 0
    pools = as_json(cli(stack, "pool", "list", "--json"))
    assert {p["name"]: p["config"]["placement"] for p in pools}["default"] == "best-fit"
    assert cli(stack, "pool", "configure", "default", "--strategy", "node-compact-gpu-low-load").returncode == 0
    assert cli(stack, "pool", "configure", "default", "--isolation-policy", "dynamic", "--topology", "hard",
               "--max-topology-tier", "1").returncode == 0
    config = {p["name"]: p["config"] for p in as_json(cli(stack, "pool", "list", "--json"))}["default"]
    assert (config["placement"], config["isolation_policy"], config["topology"], config["max_topology_tier"]) == (
        "node-compact-gpu-low-load", "dynamic", "hard", 1)
    assert cli(stack, "pool", "configure", "default", "--isolation-policy", "static", "--topology", "soft",
               "--max-topology-tier", "3").returncode == 0  # the module's stack is shared: back to the defaults
    typo = cli(stack, "pool", "configure", "defualt", "--max-workers-per-node", "3", "--json")
    assert typo.returncode == 2 and as_json(typo)["field"] == "pool", typo.stdout
    assert "unknown pool 'defualt'; known pools: default (pass --create" in as_json(typo)["error"]
    created = cli(stack, "pool", "configure", "defualt", "--max-workers-per-node", "3", "--create")
    assert created.returncode == 0 and "pool 'defualt' has no nodes yet (pools with nodes: default)" in created.stderr
    assert "no nodes yet" not in cli(stack, "pool", "configure", "default", "--max-workers-per-node", "0").stderr
    assert cli(stack, "pool", "remove", "defualt").returncode == 0
    assert [p["name"] for p in as_json(cli(stack, "pool", "list", "--json"))] == ["default"]
    held = cli(stack, "pool", "remove", "default", "--json")
    assert held.returncode == 2 and "node-a, node-b" in as_json(held)["error"], held.stdout
    for args, field, known in ((("nodes", "--phase", "Running"), "phase", "Ready, Unschedulable, Lost"),
                               (("nodes", "--pool", "nosuch"), "pool", "known pools: default"),
                               (("queue", "--pool", "nosuch"), "pool", "known pools: default")):
        refused = cli(stack, *args, "--json")
        assert refused.returncode == 2 and as_json(refused)["field"] == field, refused.stdout
        assert known in as_json(refused)["error"]
    assert len(as_json(cli(stack, "nodes", "--phase", "Ready", "--json"))) == 2
    nodes = as_json(cli(stack, "nodes", "--json"))
    assert [n["name"] for n in nodes] == ["node-a", "node-b"]
    node = as_json(cli(stack, "nodes", "show", "node-a", "--json"))
    assert len(node["gpu_list"]) == 2
    text = cli(stack, "status")
    assert "TFLOPS" in text.stdout and "GiB" in text.stdout and "nodes: 2" in text.stdout


def test_events_last_and_follow(stack: Path) -> None:
    past = cli(stack, "events", "--last", "200", "--type", "node_registered", "--json")
    assert past.returncode == 0
    assert {json.loads(line)["node"] for line in past.stdout.splitlines()} >= {"node-a", "node-b"}
    follow = subprocess.Popen([*CLI, "events", "--follow", "--last", "0", "--pod", "watched", "--data-dir", str(stack)],
                              env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              preexec_fn=default_sigint)
    try:
        time.sleep(3)  # the subscription is in place
        assert cli(stack, "submit", pod(stack, "watched")).returncode == 0
        assert follow.stdout is not None
        line = follow.stdout.readline()
        assert "allocation_granted" in line and "team-a/watched" in line
    finally:
        follow.send_signal(signal.SIGINT)
        assert follow.wait(30) == 0
    assert cli(stack, "release", "team-a/watched").returncode == 0


def test_interrupted_trace_replay_releases_and_leaves_the_default_pool(stack: Path) -> None:
    before = as_json(cli(stack, "status", "--json"))
    nodes = stack.parent / "trace-nodes.csv"
    nodes.write_text("\n".join((ROOT / "data/openb/openb_node_list_gpu_node.csv").read_text().splitlines()[:21]))
    replay = subprocess.Popen([*CLI, "trace", "replay", "--nodes", str(nodes), "--limit", "2000", "--duration", "120",
                               "--data-dir", str(stack)], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, preexec_fn=default_sigint)
    try:
        deadline = time.monotonic() + 120
        while True:
            pools = {p["name"]: p for p in as_json(cli(stack, "status", "--json"))["pools"]}
            if pools.get("trace", {}).get("allocations", {}).get("granted", 0) > 0:
                break
            assert replay.poll() is None and time.monotonic() < deadline, "no trace allocation was granted"
            time.sleep(1)
    finally:
        replay.send_signal(signal.SIGINT)
        out, _ = replay.communicate(timeout=120)
    assert replay.returncode == 130 and "interrupted" in out and "removed its 20 nodes" in out, out
    after = as_json(cli(stack, "status", "--json"))
    pools = {p["name"]: p for p in after["pools"]}
    assert "trace" not in pools  # its nodes were removed again: the totals are what they were
    assert after["nodes_by_phase"] == before["nodes_by_phase"] and after["gpus_by_phase"] == before["gpus_by_phase"]
    default_before = next(p for p in before["pools"] if p["name"] == "default")
    assert pools["default"] == default_before
    nodes_now = as_json(cli(stack, "nodes", "--pool", "default", "--json"))
    assert [n["name"] for n in nodes_now] == ["node-a", "node-b"]


def test_sql_runs_a_query_through_the_shipped_psql(stack: Path) -> None:
    done = cli(stack, "sql", "SELECT count(*) AS gpu_rows FROM gpus WHERE pool = 'default'")
    assert done.returncode == 0, done.stderr
    assert "gpu_rows" in done.stdout and " 3" in done.stdout
    bad = cli(stack, "sql", "SELECT no_such_column FROM gpus")
    assert bad.returncode != 0 and "no_such_column" in bad.stderr


def test_a_compute_share_reads_as_percent_in_history(stack: Path) -> None:
    path = stack.parent / "share.yaml"
    path.write_text(POD.format(name="share", namespace="team-s", tflops="1").replace(
        'tensor-fusion.ai/tflops-request: "1"', 'tensor-fusion.ai/compute-percent-request: "50"'))
    assert cli(stack, "submit", str(path)).returncode == 0
    rows = as_json(cli(stack, "history", "--pod", "share", "--json"))
    assert rows[0]["request"]["compute_percent"] == "50"
    text = cli(stack, "history", "--pod", "share")
    assert "50 %, 4 GiB" in text.stdout
    assert cli(stack, "release", "team-s/share").returncode == 0


def test_pool_preemption_setting(stack: Path) -> None:
    assert cli(stack, "pool", "configure", "default", "--preemption", "namespace").returncode == 0
    pools = as_json(cli(stack, "pool", "list", "--json"))
    assert {p["name"]: p["config"].get("preemption", "cluster") for p in pools}["default"] == "namespace"
    bad = cli(stack, "pool", "configure", "default", "--preemption", "sometimes", "--json")
    assert bad.returncode == 2 and as_json(bad)["field"] == "preemption"
    assert cli(stack, "pool", "configure", "default", "--preemption", "cluster").returncode == 0
    assert cli(stack, "pool", "configure", "default", "--defrag-max-moves", "3").returncode == 2  # no schedule yet
    assert cli(stack, "pool", "configure", "default", "--defrag-schedule", "0 3 * * *", "--defrag-timezone",
               "Europe/Paris", "--defrag-max-duration", "1h").returncode == 0
    assert cli(stack, "pool", "configure", "default", "--preemption", "namespace").returncode == 0  # keeps it
    defrag = {p["name"]: p["config"] for p in as_json(cli(stack, "pool", "list", "--json"))}["default"]["defrag"]
    assert (defrag["schedule"], defrag["timezone"], defrag["max_duration"]) == ("0 3 * * *", "Europe/Paris", "3600s")
    wrong = cli(stack, "pool", "configure", "default", "--defrag-schedule", "0 3 * *", "--json")
    assert wrong.returncode == 2 and as_json(wrong)["field"] == "defrag.schedule", wrong.stdout
    assert cli(stack, "pool", "configure", "default", "--defrag-schedule", "off", "--preemption",
               "cluster").returncode == 0
    assert {p["name"]: p["config"] for p in as_json(cli(stack, "pool", "list", "--json"))}["default"]["defrag"] is None


SHARED_POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: team-p
  labels: {{tensor-fusion.ai/enabled: "true"}}
  annotations: {{tensor-fusion.ai/tflops-request: "1", tensor-fusion.ai/vram-request: 1Gi,
                 tensor-fusion.ai/isolation: shared, tensor-fusion.ai/qos: {qos}}}
spec:
  containers: [{{name: main, image: python:3.11}}]
"""


def test_simulate_and_submit_show_the_preemption(stack: Path) -> None:
    """Three low pods take the three GPUs whole; a critical one is shown its plan by simulate and
    the submit answers with its own grant naming the victim (not the victim's preemption)."""
    files = {}
    for name, qos in (("low-0", "low"), ("low-1", "low"), ("low-2", "low"), ("crit", "critical")):
        files[name] = stack.parent / f"team-p-{name}.yaml"
        files[name].write_text(SHARED_POD.format(name=name, qos=qos))
    try:
        for name in ("low-0", "low-1", "low-2"):
            assert cli(stack, "submit", str(files[name])).returncode == 0
        plan = cli(stack, "simulate", str(files["crit"]))
        assert plan.returncode == 0 and "preemption plan: node" in plan.stdout and "team-p/low-" in plan.stdout
        done = cli(stack, "submit", str(files["crit"]))
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.startswith("allocation_granted: team-p/crit") and "preempts team-p/low-" in done.stdout
    finally:
        for name in files:
            cli(stack, "release", f"team-p/{name}")


def test_up_json_prints_one_line_with_the_urls(stack: Path) -> None:
    lines = [json.loads(line) for line in (stack.parent / "up.log").read_text().splitlines()
             if line.startswith('{"status": "up"')]
    assert len(lines) == 1, lines
    (up,) = lines
    assert up["allocator"].startswith("http://127.0.0.1:") and up["endpoints"] == str(stack / "endpoints.json")
    assert ":***@" in up["nats"] or "***" in up["database"]  # passwords are redacted


def test_an_answer_into_a_closed_pipe_exits_141(stack: Path) -> None:
    """``gpuledger submit ... | head -1``: the reader left before the answer was printed."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([*CLI, "submit", pod(stack, "piped"), "--data-dir", str(stack)], stdout=write,
                              stderr=subprocess.PIPE, env=ENV, timeout=120, check=False, preexec_fn=default_sigint)
    finally:
        os.close(write)
    assert done.returncode == 141 and b"Traceback" not in done.stderr, done.stderr
    assert cli(stack, "release", "team-a/piped").returncode == 0  # it was granted all the same


def test_nodes_idle_and_idle_for(stack: Path) -> None:
    """``nodes --idle [--for D]``: the nodes with no granted allocation and since when; a grant takes
    its node off the list, its release puts it back with a later ``idle since``."""
    before = {n["name"]: n["idle_since"] for n in as_json(cli(stack, "nodes", "--json"))}
    idle = [n["name"] for n in as_json(cli(stack, "nodes", "--idle", "--json"))]
    assert idle == sorted(name for name, since in before.items() if since is not None)
    submitted = as_json(cli(stack, "submit", pod(stack, "idle-check", tflops="1"), "--json"))
    assert submitted["type"] == "allocation_granted", submitted
    assert submitted["node"] not in [n["name"] for n in as_json(cli(stack, "nodes", "--idle", "--json"))]
    assert cli(stack, "release", "team-a/idle-check").returncode == 0
    after = {n["name"]: n["idle_since"] for n in as_json(cli(stack, "nodes", "--idle", "--for", "0s", "--json"))}
    assert submitted["node"] in after and after[submitted["node"]] != before[submitted["node"]]
    assert as_json(cli(stack, "nodes", "--idle", "--for", "1000h", "--json")) == []
    table = cli(stack, "nodes", "--idle")
    assert table.returncode == 0 and "idle since" in table.stdout and submitted["node"] in table.stdout
    for args in (("--for", "30m"), ("--idle", "--for", "30"), ("--idle", "--for", "soon")):
        refused = cli(stack, "nodes", *args, "--json")
        assert refused.returncode == 2 and as_json(refused)["field"] == "for", refused.stdout


def test_defrag_plan_is_a_dry_run_with_reasons(stack: Path) -> None:
    """``defrag plan POOL``: the plan's JSON (nothing moved), its text, and bad input exiting 2 naming the field."""
    submitted = as_json(cli(stack, "submit", pod(stack, "defrag-check", tflops="1"), "--json"))
    assert submitted["type"] == "allocation_granted", submitted
    planned = as_json(cli(stack, "defrag", "plan", "default", "--max-moves", "3", "--json"))
    assert planned["dry_run"] is True and planned["pool"] == "default" and len(planned["moves"]) <= 3
    assert planned["before"]["busy_nodes"] >= 1 and all(s["code"] and s["reason"] for s in planned["skipped"])
    text = cli(stack, "defrag", "plan", "default", "--max-moves", "3")
    assert text.returncode == 0 and "nodes emptied" in text.stdout and "gpuledger defrag run" in text.stdout
    defaulted = as_json(cli(stack, "defrag", "plan", "default", "--json"))  # the API's default budget
    assert defaulted["budget"]["max_moves"] == 10 and defaulted["dry_run"] is True, defaulted
    assert as_json(cli(stack, "why", "team-a/defrag-check", "--json"))["node"] == submitted["node"]  # not moved
    for args, field in ((("nosuch", "--max-moves", "1"), "pool"), (("default", "--max-moves", "1", "--max-tflops",
                                                                     "lots"), "max_tflops")):
        refused = cli(stack, "defrag", "plan", *args, "--json")
        assert refused.returncode == 2 and as_json(refused)["field"] == field, refused.stdout
    assert cli(stack, "defrag", "plan", "default", "--max-moves", "0").returncode == 2
    unconfirmed = cli(stack, "defrag", "run", "default", "--max-moves", "3", "--json")
    assert unconfirmed.returncode == 2 and as_json(unconfirmed)["field"] == "yes", unconfirmed.stdout
    shown = cli(stack, "defrag", "run", "default", "--max-moves", "3")
    assert shown.returncode == 0 and "pass --yes to start" in shown.stdout
    too_long = cli(stack, "defrag", "run", "default", "--max-moves", "3", "--max-duration", "2d", "--yes", "--json")
    assert too_long.returncode == 2 and as_json(too_long)["field"] == "max_duration", too_long.stdout
    started = as_json(cli(stack, "defrag", "run", "default", "--max-moves", "3", "--max-duration", "5m", "--yes",
                          "--json"))
    assert started["type"] == "defrag_started" and started["pool"] == "default", started
    status = as_json(cli(stack, "defrag", "status", "default", "--json"))
    assert status["campaign_id"] == started["intent_id"] and status["budget"]["max_moves"] == 3
    assert status["state"] == "running" or status["end_code"] == "done"
    if status["state"] == "running":
        assert as_json(cli(stack, "defrag", "cancel", "default", "--json"))["type"] == "move_cancelled"
    assert "ended" in cli(stack, "defrag", "status", "default").stdout
    none = cli(stack, "defrag", "cancel", "default", "--json")
    assert none.returncode == 2 and as_json(none)["field"] == "pool", none.stdout
    assert cli(stack, "release", "team-a/defrag-check").returncode == 0


def test_shares_set_list_show_status_and_remove(stack: Path) -> None:
    """``shares``: last in the module (while a share names pool default, other namespaces borrow there)."""
    done = cli(stack, "shares", "set", "research", "-n", "team-s", "--pool", "default", "--guarantee",
               "tflops=20,gpus=1", "--borrow-limit", "gpus=1", "--weight", "2", "--json")
    assert done.returncode == 0 and as_json(done)["type"] == "share_set", done.stdout
    submitted = as_json(cli(stack, "submit", pod(stack, "fair", namespace="team-s"), "--json"))
    assert submitted["type"] == "allocation_granted"
    listed = as_json(cli(stack, "shares", "list", "--json"))
    assert [s["name"] for s in listed] == ["research"]
    assert listed[0]["pools"][0]["used"] == {"tflops": "10", "vram": "4Gi", "gpus": 1}
    shown = cli(stack, "shares", "show", "research")
    assert shown.returncode == 0 and "team-s" in shown.stdout and "fair share" in shown.stdout
    assert any("standing" in line and line.rstrip().endswith("below") for line in shown.stdout.splitlines())
    status = cli(stack, "status")
    assert "share research in default: used 10 TFLOPS of 20 TFLOPS; 4 GiB (none guaranteed); 1 of 1 GPUs; borrowed 0" \
        in status.stdout, status.stdout
    refused = cli(stack, "shares", "set", "other", "-n", "team-s", "--json")  # team-s is research's already
    assert refused.returncode == 2 and "team-s" in as_json(refused)["error"], refused.stdout
    assert cli(stack, "shares", "show", "nosuch", "--json").returncode == 2
    assert cli(stack, "release", "team-s/fair").returncode == 0
    assert cli(stack, "shares", "remove", "research").returncode == 0
    assert as_json(cli(stack, "shares", "list", "--json")) == []
