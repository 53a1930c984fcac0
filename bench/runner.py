"""Run the benchmark sections and print one table (figures, and each one's ratio to raw SQL).

Each section is a module of ``bench.sections`` with one entry point; they share the harness
(``bench.harness``) and report rows (``bench.report``), never each other.
"""

from __future__ import annotations

import os
import sys

from django.db import connection

from bench.harness import ThrowawayDatabase
from bench.report import Options, Report
from bench.sections.admin import bench_admin
from bench.sections.drain import bench_drain
from bench.sections.enqueue import bench_enqueue
from bench.sections.history import bench_history
from bench.sections.indexes import bench_indexes
from bench.sections.io import bench_io
from bench.sections.latency import bench_latency
from bench.sections.lives import bench_batch, bench_operations, bench_tasks, bench_workflows
from bench.sections.pool import bench_pool
from bench.sections.rss import bench_rss
from bench.sections.schedules import bench_schedules
from bench.sections.tracing import bench_tracing
from bench.sections.wire import bench_wire

__all__ = ["SECTIONS", "Options", "Report", "run"]


SECTIONS = {
    "enqueue": bench_enqueue,
    "drain": bench_drain,
    "latency": bench_latency,
    "operations": bench_operations,
    "batch": bench_batch,
    "workflows": bench_workflows,
    "tasks": bench_tasks,
    "wire": bench_wire,
    "schedules": bench_schedules,
    "pool": bench_pool,
    "rss": bench_rss,
    "io": bench_io,
    "tracing": bench_tracing,
    "history": bench_history,
    "indexes": bench_indexes,
    # Not in Options.sections (the default run): loading ten million rows takes minutes.
    "admin": bench_admin,
}


def run(opts: Options) -> Report:
    from django.conf import settings

    # DEBUG logs every statement (and formats its parameters): not what production runs.
    settings.DEBUG = False
    report = Report(
        meta={
            "quick": opts.quick,
            "runs": opts.runs,
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
        }
    )
    with ThrowawayDatabase() as db:
        with connection.cursor() as cur:
            cur.execute("SHOW server_version")
            report.meta["postgres"] = cur.fetchone()[0]
        for name in opts.sections:
            opts.log(f"… {name}")
            SECTIONS[name](opts, db, report)
    return report
