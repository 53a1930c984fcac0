"""What a benchmark run reports: its options, one row per figure, the table and the JSON."""

from __future__ import annotations

from dataclasses import dataclass, field

from bench import cpu


@dataclass
class Options:
    quick: bool = False
    runs: int = 3
    workers: tuple[int, ...] = (1, 2)
    batch: int = 200
    concurrency: int = 4
    drain_items: int = 50_000
    enqueue_single: int = 4_000
    enqueue_bulk: int = 100_000
    latency_items: int = 1_000
    operations: int = 3_000
    batch_children: int = 10_000
    tasks: int = 3_000
    workflows: int = 1_000  # 5-step no-op workflow runs (the workflows section)
    waiting: int = 1_000  # ... and workflows waiting on a signal, signalled at once
    wire_items: int = 2_000
    wire_clients: int = 4
    starters: int = 4  # threads starting operations / enqueuing tasks (as concurrent requests)
    rss_items: int = 200_000
    cpu_items: int = 200  # the pool section's CPU-bound items
    cpu_rounds: int = 1_000_000  # ... and the pure-Python rounds of each
    pool_noop_items: int = 10_000  # ... and its no-op drain
    schedules: int = 1_000
    io_items: int = 2_000
    io_seconds: float = 0.05
    history_stopped: int = 1_000_000  # the history section's settled rows (bench/history.py)
    history_scheduled: int = 100_000  # ... and its rows scheduled a day ahead
    admin_rows: int = 10_000_000  # the admin section's settled work items (bench/sections/admin.py)
    admin_operations: int = 1_000_000  # ... and its finished operations
    sections: tuple[str, ...] = (
        "enqueue",
        "drain",
        "latency",
        "operations",
        "batch",
        "workflows",
        "tasks",
        "wire",
        "schedules",
        "pool",
        "rss",
        "io",
        "tracing",
        "history",
        "indexes",
    )
    log: object = print

    @classmethod
    def quick_mode(cls, **kw) -> Options:
        return cls(
            quick=True,
            runs=1,
            batch=50,
            # Enough that every process's and backend's CPU spans several 10 ms ticks (the
            # suite asserts each is read as more than zero).
            drain_items=5_000,
            enqueue_single=200,
            enqueue_bulk=2_000,
            latency_items=20,
            operations=100,
            batch_children=100,
            tasks=100,
            workflows=50,
            waiting=50,
            wire_items=40,
            rss_items=2_000,
            cpu_items=20,
            cpu_rounds=100_000,
            pool_noop_items=200,
            schedules=50,
            io_items=100,
            history_stopped=5_000,
            history_scheduled=500,
            admin_rows=5_000,
            admin_operations=500,
            **kw,
        )


@dataclass
class Row:
    name: str
    value: float
    unit: str
    ceiling: float | None = None
    note: str = ""
    # CPU per item in µs (bench/cpu.py): the measured processes' and their PostgreSQL
    # backends' (None: not measured, or the server is not local), ours and the ceiling's.
    spent: cpu.Cpu | None = None
    spent_items: int = 0
    raw_spent: cpu.Cpu | None = None
    raw_spent_items: int = 0
    # Where ours and the ceiling ran in alternation, run by run: the median of each run's ratio
    # to the ceiling run beside it (a drift in the machine's speed moves both alike).
    paired_ratio: float | None = None

    def cpu_us(self, raw: bool = False) -> tuple[float | None, float | None]:
        spent, items = (self.raw_spent, self.raw_spent_items) if raw else (self.spent, self.spent_items)
        if spent is None:
            return None, None
        return spent.per_item_us(items)

    @property
    def ratio(self) -> float | None:
        if self.paired_ratio is not None:
            return self.paired_ratio
        return self.value / self.ceiling if self.ceiling else None


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)
    meta: dict = field(default_factory=dict)

    def add(self, *args, **kwargs) -> Row:
        row = Row(*args, **kwargs)
        self.rows.append(row)
        return row

    def table(self) -> str:
        head = (
            f"{'measure':<46} {'value':>12}  {'unit':<10} {'raw SQL':>12}  {'ratio':>6}  "
            f"{'CPU µs/item: client':>19} {'pg':>6} {'raw client':>10} {'raw pg':>6}  note"
        )
        lines = [head, "-" * len(head)]
        for r in self.rows:
            ceiling = f"{r.ceiling:,.0f}" if r.ceiling else ""
            ratio = f"{r.ratio:.2f}" if r.ratio is not None else ""
            value = f"{r.value:,.1f}" if r.value < 100 else f"{r.value:,.0f}"
            if r.unit == "ratio":
                value = f"{r.value:.2f}"
            cells = []
            for raw, spent in ((False, r.spent), (True, r.raw_spent)):
                client, server = r.cpu_us(raw)
                cells += ["", ""] if spent is None else [cpu.fmt_us(client), cpu.fmt_us(server)]
            lines.append(
                f"{r.name:<46} {value:>12}  {r.unit:<10} {ceiling:>12}  {ratio:>6}  "
                f"{cells[0]:>19} {cells[1]:>6} {cells[2]:>10} {cells[3]:>6}  {r.note}"
            )
        if any(r.spent is not None for r in self.rows):
            lines.append(
                "CPU µs/item: user+sys of the worker processes (client) and of their PostgreSQL backends (pg), "
                "per item, over the measured window; n/a: the server is not on this machine"
            )
        if self.meta.get("quick"):
            lines.append("(--quick: too few items for these figures to mean anything; it only proves the command runs)")
        return "\n".join(lines)

    def as_dict(self) -> dict:
        return {
            "meta": self.meta,
            "results": [
                {
                    "name": r.name,
                    "value": r.value,
                    "unit": r.unit,
                    "raw_sql": r.ceiling,
                    "ratio": r.ratio,
                    "note": r.note,
                    **_cpu_dict(r),
                }
                for r in self.rows
            ],
        }


def _cpu_dict(r: Row) -> dict:
    """The JSON's CPU fields: µs per item (null: not measured, or the server is not local)."""
    out = {}
    for prefix, raw, spent in (("cpu", False, r.spent), ("raw_sql_cpu", True, r.raw_spent)):
        if spent is not None:
            client, server = r.cpu_us(raw)
            out[f"{prefix}_client_us_per_item"] = client
            out[f"{prefix}_postgres_us_per_item"] = server
    return out
