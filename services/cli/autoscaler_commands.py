"""CLI commands of the autoscaler area: ``gpuledger autoscaler`` and ``gpuledger recommend``.

``recommend WORKLOAD`` asks the running autoscaler over NATS request/reply; ``recommend --samples
FILE.jsonl --config PROFILE.yaml`` computes offline from usage samples (events.metrics schema,
one JSON object a line) and a WorkloadProfile. Exit codes: 0 ok, 2 bad input (``{"error",
"field"}`` under ``--json``), 1 anything else (e.g. no autoscaler answering).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from services.cli import endpoints
from services.cli.output import BadInput, fail

if TYPE_CHECKING:
    from events.metrics import UsageSample
    from services.autoscaler.report import ProfileSettings


def read_samples(path: Path) -> list[UsageSample]:
    """Usage samples of a JSONL file; BadInput names the line of the first bad one."""
    from events.metrics import SampleError, decode_sample

    try:
        lines = path.read_bytes().splitlines()  # each line's UTF-8 is checked by decode_sample
    except OSError as exc:
        raise BadInput(f"cannot read {path}: {exc.strerror}", field="samples") from exc
    samples = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            samples.append(decode_sample(line))
        except SampleError as exc:
            raise BadInput(f"{path}:{number}: {exc}", field="samples") from exc
    return samples


def read_profile(path: Path) -> ProfileSettings:
    """The WorkloadProfile YAML (the object or its spec); BadInput names the bad field."""
    import yaml

    from services.autoscaler import config as cfg
    from services.autoscaler.report import ProfileSettings
    from services.podspec.errors import PodSpecError

    try:
        obj = yaml.safe_load(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise BadInput(f"cannot read {path}: {exc.strerror}", field="config") from exc
    except UnicodeDecodeError as exc:
        raise BadInput(f"{path} is not UTF-8 text (byte {exc.start})", field="config") from None
    except (yaml.YAMLError, RecursionError) as exc:
        raise BadInput(f"{path} is not YAML: {exc}", field="config") from exc
    if not isinstance(obj, dict):
        raise BadInput(f"{path}: want a WorkloadProfile mapping", field="config")
    try:
        return ProfileSettings(obj)
    except PodSpecError as exc:
        raise BadInput(str(exc), field=exc.field or "config") from exc
    except cfg.ConfigError as exc:
        raise BadInput(str(exc), field="spec.autoScalingConfig") from exc


async def ask(nats_url: str, workload: str, *, namespace: str, timeout_s: float) -> dict[str, Any]:
    """Request a live report from the running autoscaler (a bounded connect: services.cli.bus)."""
    from events import subjects
    from services.cli import bus

    client = await bus.connect(nats_url, name="gpuledger-recommend")
    try:
        payload = json.dumps({"workload": workload, "namespace": namespace}).encode()
        reply = await client.request(subjects.AUTOSCALER_RECOMMEND_SUBJECT, payload, timeout=timeout_s)
    finally:
        await bus.close(client)
    result: dict[str, Any] = json.loads(reply.data)
    return result


def _print(report: dict[str, Any]) -> None:
    typer.echo(f"workload {report['namespace']}/{report['workload']}: {report.get('reason') or '-'}")
    for resource in ("tflops", "vram"):
        est = report[resource]
        typer.echo(f"  {resource:6} lower {est['lower']}  target {est['target']}  upper {est['upper']}")
    req, lim = report["request"], report["limit"]
    typer.echo(f"  request {req['tflops']} TFLOPS / {req['vram']}   limit {lim['tflops']} TFLOPS / {lim['vram']}")
    typer.echo(f"  applied: {report['applied']}   {report.get('message') or ''}")


def recommend(
    workload: str = typer.Argument("", help="Workload name (asks the running autoscaler)."),
    namespace: str = typer.Option("", "--namespace", "-n", help="Namespace of the workload."),
    samples: Path | None = typer.Option(None, "--samples", help="Offline: usage samples, JSONL."),
    config: Path | None = typer.Option(None, "--config", help="Offline: WorkloadProfile YAML."),
    timeout: float = typer.Option(5.0, "--timeout", help="Seconds to wait for the autoscaler."),
    data_dir: Path | None = typer.Option(None, "--data-dir", help="Data dir of `gpuledger up`."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Estimates and the recommended request/limit of a workload, and why."""
    from nats.errors import NoRespondersError
    from nats.errors import TimeoutError as NatsTimeout

    from services.autoscaler import cron
    from services.cli.client import StackUnreachable
    from services.shared import settings as shared_settings

    try:
        report = _recommend(workload, namespace, samples, config, timeout, data_dir)
    except (BadInput, endpoints.EndpointsError, shared_settings.SettingsError) as exc:
        fail(str(exc), field=exc.field, code=2, as_json=as_json)
    except cron.CronError as exc:
        fail(str(exc), field="spec.autoScalingConfig.cronScalingRules", code=2, as_json=as_json)
    except StackUnreachable as exc:
        fail(str(exc), field=None, code=1, as_json=as_json)
    except (NoRespondersError, NatsTimeout, OSError) as exc:
        fail(f"no autoscaler answered within {timeout} s: {exc!r}", field="autoscaler", code=1, as_json=as_json)
    if "error" in report:
        fail(report["error"], field=report.get("field", "workload"), code=2, as_json=as_json)
    print(json.dumps(report)) if as_json else _print(report)


def _recommend(workload: str, namespace: str, samples: Path | None, config: Path | None, timeout: float,
               data_dir: Path | None) -> dict[str, Any]:
    from services.autoscaler.report import offline

    if samples is not None or config is not None:
        if samples is None or config is None:
            raise BadInput("the offline form needs both --samples and --config",
                           field="samples" if samples is None else "config")
        return offline(read_samples(samples), read_profile(config), workload=workload)
    if not workload:
        raise BadInput("give a WORKLOAD, or --samples and --config", field="workload")
    found = endpoints.resolve(data_dir)
    return asyncio.run(ask(found.nats_url, workload, namespace=namespace, timeout_s=timeout))


def autoscaler(data_dir: Path | None = typer.Option(None, "--data-dir", help="Data dir of `gpuledger up`.")) -> None:
    """Run the autoscaler with settings from GPULEDGER_* variables (until SIGTERM)."""
    import msgspec

    from services.autoscaler.settings import AutoscalerSettings
    from services.autoscaler.wiring import run_autoscaler
    from services.shared import lifecycle, logs
    from services.shared import settings as shared_settings

    try:
        nats_url = endpoints.resolve(data_dir).nats_url if data_dir is not None else None
        settings = shared_settings.load(AutoscalerSettings, nats_url=nats_url)
    except (endpoints.EndpointsError, shared_settings.SettingsError, msgspec.ValidationError) as exc:
        fail(str(exc), field="settings", code=2, as_json=False)
    logs.setup(settings.log_level, json=settings.log_json)

    async def main(stop: asyncio.Event) -> None:
        await run_autoscaler(settings, stop)

    lifecycle.run_service(main)


def register(app: typer.Typer) -> None:
    """Add this area's commands to app."""
    app.command()(autoscaler)
    app.command()(recommend)
