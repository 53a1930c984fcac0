"""The ``tracing`` section: the no-op drain with OpenTelemetry absent, idle and exporting."""

from __future__ import annotations

import os
import statistics
import tempfile
from pathlib import Path

from bench.harness import (
    ThrowawayDatabase,
    drain_one_queue,
)
from bench.report import Options, Report

# sitecustomize.py for a runworker process: what OpenTelemetry is there (the tracing section).
_NO_OTEL = """
import sys

class _NoOpenTelemetry:
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(name, name=name)
        return None

sys.meta_path.insert(0, _NoOpenTelemetry())
"""
_OTEL_EXPORTER = """
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

_provider = TracerProvider()
_provider.add_span_processor(BatchSpanProcessor(InMemorySpanExporter()))
trace.set_tracer_provider(_provider)
metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))
"""


def bench_tracing(opts: Options, db: ThrowawayDatabase, report: Report) -> None:
    """The no-op drain of one process with OpenTelemetry absent, installed with no SDK
    configured, and configured with the SDK (batch span processor, in-memory exporter)."""
    variants = (
        ("absent (import blocked)", _NO_OTEL),
        ("installed, no exporter", None),
        ("SDK + exporter", _OTEL_EXPORTER),
    )
    rates: dict[str, list[float]] = {name: [] for name, _ in variants}
    args = ["--batch", str(opts.batch), "--concurrency", str(opts.concurrency)]
    with tempfile.TemporaryDirectory() as tmp:
        envs = {}
        for name, code in variants:
            if code is None:
                envs[name] = None
                continue
            folder = Path(tmp) / str(len(envs))
            folder.mkdir()
            (folder / "sitecustomize.py").write_text(code)
            envs[name] = {"PYTHONPATH": os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))}
        for _ in range(opts.runs):  # interleaved, so a change in the machine's load hits all three
            for name, _code in variants:
                rates[name].append(drain_one_queue(db, "demo.noop", opts.drain_items, args, env=envs[name]))
    base = statistics.median(rates[variants[0][0]])
    for name, _code in variants:
        value = statistics.median(rates[name])
        report.add(
            f"tracing: drain, 1 process (no-op), OpenTelemetry {name}",
            value,
            "items/s",
            note=f"{(value / base - 1) * 100:+.1f}% vs absent",
        )
