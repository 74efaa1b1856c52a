#!/usr/bin/env python3
"""The serving choice, measured (issue 38 item 2): gunicorn's stock gevent worker with public
settings only (``benchmarks/stock_worker.py``) beside serve's own worker (``webhook.http.worker``),
in one run, on the same checks, one table.

Checks (each run for both workers, the stock one first, back to back, so that other load on the
machine hits both alike; every server is ``segment-webhook serve`` with TLS and 2 workers, as
``benchmarks/serving_faults.py`` starts it):

1. **instructions per review** of the whole worker process (``benchmarks/instructions.py
   --server``: valgrind, ``serve --workers 1``, one keep-alive TLS connection), the pod review
   (``--payload`` for others); run last, since other load does not change a count;
2. **16 heavy reviews beside small ones** (``serving_faults.py heavy 16``): the small review's p99
   on a keep-alive connection and on new connections, heavy answers past 5 s;
3. **c=512 Go clients** (``hey``, the PyTorchJob review; ``benchmarks/admission.py``'s run):
   throughput, p99, errors, the server's CPU per review; stock, custom, custom, stock;
4. **2,000 idle TLS connections** (``serving_faults.py idle``): ``GET /healthz`` and a review on
   new connections, answered and max latency;
5. **dribbling clients** (``serving_faults.py dribble``): a request head and a request body sent a
   byte every 0.5 s, seconds until the server answers or closes (at most 30 s); both servers at
   once;
6. **SIGTERM with reviews already sent** (``serving_faults.py sigterm-reviews``, ``--sigterm-runs``
   runs): reviews sent and closed without an answer, seconds to exit.

The table: each figure for stock and custom, stock / custom, and whether the stock worker holds
it within 10% (lower is better for latencies, counts, seconds and instructions; higher for
throughput; a count that is 0 for the custom worker must be 0 for the stock one). The load
average (``/proc/loadavg``) is printed at the start and the end.

    python benchmarks/serving_choice.py                 # about 10 minutes on 2 CPUs
    python benchmarks/serving_choice.py --quick         # tiny sizes, a smoke test (about 3 minutes)

Exit status 0; 2 without ``hey`` or ``valgrind``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import admission  # noqa: E402 - the benchmarks' own modules, beside this file
import instructions  # noqa: E402
import serving_faults as faults  # noqa: E402

WORKERS = ("stock", "custom")


def loadavg() -> str:
    with open("/proc/loadavg", encoding="ascii") as fh:
        return fh.read().strip()


class Row:
    """One figure of the table: ``better`` is ``"lower"`` or ``"higher"``."""

    def __init__(self, check: str, figure: str, stock: float, custom: float, better: str = "lower",
                 unit: str = ""):
        self.check, self.figure, self.stock, self.custom, self.better, self.unit = check, figure, stock, custom, better, unit

    @property
    def ratio(self) -> float:
        if self.custom == 0:
            return 1.0 if self.stock == 0 else float("inf")
        return self.stock / self.custom

    @property
    def holds(self) -> bool:
        """The stock worker within 10% of the custom one (or better)."""
        if self.stock != self.stock or self.custom != self.custom:  # nan: a figure missing
            return False
        if self.better == "lower":
            return self.stock <= self.custom * 1.1
        return self.stock >= self.custom * 0.9


def _fmt(value: float) -> str:
    if value != value:
        return "n/a"
    if value == float("inf"):
        return "inf"
    return f"{value:,.0f}" if abs(value) >= 100 or value == int(value) else f"{value:,.2f}"


# ------------------------------------------------------------------------- the checks

def check_instructions(source: str, calls: tuple[int, int], payloads: list[str]) -> list[Row]:
    figures = instructions.main_server(list(WORKERS), payloads, calls[0], calls[1], source)
    return [Row("instructions per review", f"{p} (worker process)", figures[("stock", p)], figures[("custom", p)])
            for p in payloads]


def check_heavy(source: str, senders: int, duration: float) -> list[Row]:
    out: dict[str, dict] = {}
    for worker in WORKERS:
        print(f"--- heavy {senders}, {worker} worker", flush=True)
        server = faults.Server(source, 2, [], worker=worker)
        try:
            out[worker] = faults.heavy(server, senders, duration)
        finally:
            server.stop()

    def p99(worker: str, key: str) -> float:
        return faults.percentile([v * 1000 for v in out[worker][key]], 0.99)

    def failed(worker: str, key: str) -> int:
        return len(out[worker][key + "_errors"])

    def past5(worker: str) -> int:
        return sum(1 for v in out[worker]["heavy"] if v > 5.0)

    check = f"{senders} heavy reviews beside small ones"
    return [Row(check, "small review p99, keep-alive (ms)", p99("stock", "keepalive"), p99("custom", "keepalive")),
            Row(check, "small review p99, new connections (ms)", p99("stock", "new"), p99("custom", "new")),
            Row(check, "small reviews failed", failed("stock", "keepalive") + failed("stock", "new"),
                failed("custom", "keepalive") + failed("custom", "new")),
            Row(check, "heavy answers past 5 s or failed", past5("stock") + failed("stock", "heavy"),
                past5("custom") + failed("custom", "heavy"))]


def check_go_clients(source: str, concurrency: int, duration: float, rounds: int) -> list[Row]:
    if shutil.which("hey") is None:
        raise SystemExit("needs hey (apt-get install hey)")
    tmp = tempfile.mkdtemp(prefix="serving-choice-")
    body_file = os.path.join(tmp, "pytorchjob.json")
    Path(body_file).write_text(json.dumps(admission.payloads()["pytorchjob"]))
    servers = {w: faults.Server(source, 2, [], worker=w) for w in WORKERS}
    parts: dict[str, list[dict]] = {w: [] for w in WORKERS}
    try:
        for worker in WORKERS:  # warm both: TLS session, imports on first review
            admission.run_hey(f"https://127.0.0.1:{servers[worker].port}/mutate", body_file, 8, 1.0)
        order = [w for r in range(rounds) for w in (WORKERS if r % 2 == 0 else WORKERS[::-1])]
        for worker in order:
            server = servers[worker]
            r = admission.run_hey_measured(server.proc.pid, f"https://127.0.0.1:{server.port}/mutate", body_file,
                                           concurrency, duration)
            parts[worker].append(r)
            print(f"--- go c={concurrency}, {worker}: {r['requests']} answered, {r['errors']} errors "
                  f"({r['first_error']}), {r['throughput']:.0f}/s, p50 {r['p50_ms']:.0f} ms, p99 {r['p99_ms']:.0f} ms, "
                  f"server CPU {r['server_cpu_s'] / max(1, r['requests']) * 1e6:.0f} us/review", flush=True)
    finally:
        for server in servers.values():
            server.stop()
    total = {w: admission.combine(parts[w]) for w in WORKERS}
    for w in WORKERS:  # a run too short for hey to print a p99 has none: the others' weighted mean
        timed = [p for p in parts[w] if p["requests"] and p["p99_ms"] == p["p99_ms"]]
        weight = sum(p["requests"] for p in timed)
        total[w]["p99_ms"] = sum(p["p99_ms"] * p["requests"] for p in timed) / weight if weight else float("nan")
    check = f"c={concurrency} Go clients (hey, PyTorchJob, {rounds} x {duration:g} s each)"
    return [Row(check, "reviews/s", total["stock"]["throughput"], total["custom"]["throughput"], "higher"),
            Row(check, "p99 (ms)", total["stock"]["p99_ms"], total["custom"]["p99_ms"]),
            Row(check, "errors", total["stock"]["errors"], total["custom"]["errors"]),
            Row(check, "server CPU per review (us)", total["stock"]["server_cpu_us_per_review"],
                total["custom"]["server_cpu_us_per_review"])]


def check_idle(source: str, count: int, duration: float) -> list[Row]:
    out: dict[str, dict] = {}
    for worker in WORKERS:
        print(f"--- idle {count}, {worker} worker", flush=True)
        server = faults.Server(source, 2, [], worker=worker)
        try:
            out[worker] = faults.idle(server, count, duration)
        finally:
            server.stop()

    def worst(worker: str, key: str) -> float:
        """Longest answer in ms; a probe that failed (no answer in 20 s) counts as 20,000 ms."""
        values = [v * 1000 for v in out[worker][key]]
        values += [20_000.0] * len(out[worker][key + "_errors"])
        return max(values) if values else float("nan")

    def failed(worker: str) -> int:
        return len(out[worker]["healthz_errors"]) + len(out[worker]["review_errors"])

    check = f"{count:,} idle TLS connections"
    return [Row(check, "/healthz on a new connection, max (ms)", worst("stock", "healthz"), worst("custom", "healthz")),
            Row(check, "review on a new connection, max (ms)", worst("stock", "review"), worst("custom", "review")),
            Row(check, "probes unanswered in 20 s", failed("stock"), failed("custom"))]


def check_dribble(source: str) -> list[Row]:
    out: dict[str, dict] = {}
    servers = {w: faults.Server(source, 2, [], worker=w) for w in WORKERS}

    def run(worker: str) -> None:
        out[worker] = faults.dribble(servers[worker])

    print("--- dribble, both workers at once (stock, custom)", flush=True)
    try:
        threads = [threading.Thread(target=run, args=(w,)) for w in WORKERS]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    finally:
        for server in servers.values():
            server.stop()
    check = "dribbling clients (a byte every 0.5 s; 30 s at most)"
    rows = []
    for name in ("head a byte at a time", "body a byte at a time"):
        for worker in WORKERS:
            print(f"    {worker}: {name}: {out[worker][name][1]} after {out[worker][name][0]:.1f} s")
        rows.append(Row(check, f"{name.split()[0]}: seconds until answered or closed", out["stock"][name][0],
                        out["custom"][name][0]))
    return rows


def check_sigterm(source: str, runs: int) -> list[Row]:
    totals = {w: {"unanswered": 0, "answered": 0, "exit": 0.0, "codes": []} for w in WORKERS}
    for run in range(runs):
        for worker in WORKERS:
            print(f"--- sigterm-reviews run {run + 1}, {worker} worker", flush=True)
            server = faults.Server(source, 2, [], worker=worker)
            try:
                r = faults.sigterm_reviews(server)
            finally:
                server.stop()
            t = totals[worker]
            for kind in ("new", "keepalive"):
                t["unanswered"] += r[kind]["closed_unanswered"] + r[kind]["closed_while_sending"] + r[kind]["other"]
                t["answered"] += r[kind]["answered"]
            t["exit"] = max(t["exit"], r["exit_seconds"])
            t["codes"].append(r["exit_code"])
    check = f"SIGTERM with reviews already sent ({runs} runs)"
    return [Row(check, "reviews sent and not answered", totals["stock"]["unanswered"], totals["custom"]["unanswered"]),
            Row(check, "reviews answered", totals["stock"]["answered"], totals["custom"]["answered"], "higher"),
            Row(check, "seconds from SIGTERM to exit (worst run)", totals["stock"]["exit"], totals["custom"]["exit"])]


# ------------------------------------------------------------------------- main

def table(rows: list[Row]) -> str:
    lines = [f"{'check':<52} {'figure':<44} {'stock':>12} {'custom':>12} {'stock/custom':>13}  within 10%"]
    for r in rows:
        lines.append(f"{r.check:<52} {r.figure:<44} {_fmt(r.stock):>12} {_fmt(r.custom):>12} {_fmt(r.ratio):>13}  "
                     f"{'yes' if r.holds else 'NO'} ({r.better} is better)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", default=str(HERE.parent), help="checkout whose webhook package is served")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test of the script")
    parser.add_argument("--only", action="append", default=[],
                        choices=("instructions", "heavy", "go", "idle", "dribble", "sigterm"),
                        help="run only these checks (repeatable; default all)")
    parser.add_argument("--payload", action="append", choices=("pod", "pytorchjob"),
                        help="instructions: the review(s) counted (default pod: the worker's part does not "
                             "depend on it, and the app's is the same for both workers)")
    parser.add_argument("--json", metavar="FILE", help="write the rows as JSON")
    args = parser.parse_args(argv)
    for tool in ("hey", "valgrind"):
        if shutil.which(tool) is None:
            print(f"serving_choice needs {tool} (apt-get install {tool})", file=sys.stderr)
            return 2
    quick = args.quick
    print(f"serving choice: gunicorn's stock gevent worker (public settings) beside serve's own worker; "
          f"{os.cpu_count()} CPUs; source {args.source}")
    print(f"load average at the start (/proc/loadavg): {loadavg()}", flush=True)
    started = time.monotonic()
    # the latency checks first; the instruction counts, which other load does not change, last
    selected = args.only or ["heavy", "go", "idle", "dribble", "sigterm", "instructions"]
    rows: list[Row] = []
    for name in selected:
        t0 = time.monotonic()
        if name == "instructions":
            rows += check_instructions(args.source, (5, 15) if quick else (50, 150), args.payload or ["pod"])
        elif name == "heavy":
            rows += check_heavy(args.source, 4 if quick else 16, 3.0 if quick else 10.0)
        elif name == "go":
            rows += check_go_clients(args.source, 64 if quick else 512, 2.0 if quick else 5.0, 2)
        elif name == "idle":
            rows += check_idle(args.source, 200 if quick else 2000, 3.0 if quick else 10.0)
        elif name == "dribble":
            rows += check_dribble(args.source)
        elif name == "sigterm":
            rows += check_sigterm(args.source, 1 if quick else 2)
        print(f"--- {name}: {time.monotonic() - t0:.0f} s; load average {loadavg()}", flush=True)
    print()
    print(table(rows))
    held = all(r.holds for r in rows)
    print()
    print(f"the stock worker holds every figure within 10%: {'yes' if held else 'no'}")
    for r in rows:
        if not r.holds:
            print(f"  custom wins: {r.check}: {r.figure}: stock {_fmt(r.stock)}, custom {_fmt(r.custom)} "
                  f"(stock/custom {_fmt(r.ratio)})")
    print(f"wall time {time.monotonic() - started:.0f} s")
    print(f"load average at the end (/proc/loadavg): {loadavg()}")
    if args.json:
        Path(args.json).write_text(json.dumps([{**vars(r), "ratio": r.ratio, "holds": r.holds} for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
