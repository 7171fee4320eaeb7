"""How far the fast search of `hybridgpu plan` is from the exact one, where the exact one
finishes: the recommended fleet and its dollars, the procurement mix and its dollars, and the
CPU seconds of each (docs/benchmarks.md, "TCO planner: the fast search").

    .venv/bin/python bench/plan_fast_gap.py                       # every trace below
    .venv/bin/python bench/plan_fast_gap.py --trace synthetic-1000 --trace bundled
    .venv/bin/python bench/plan_fast_gap.py --owned-max-nodes 3   # room for 3 owned nodes

Traces: ``synthetic-N`` (N = 1000, 4000, 8000: the first N jobs of `simulate_scale.py`'s
synthetic process, the ones `simulate_scale.py plan --jobs N` plans), ``bundled`` (the
simulator's bundled scenario: `synthetic()`, 72 h) and ``openb`` (../shared/traces/
alibaba-openb). Each is planned with `--config examples/plan.yaml --search exact` and
`--search fast`; both plans' every dollar figure is a replay of their fleet, so the gap is
what the fast search's choice costs more. ``--owned-max-nodes N`` caps every candidate at N
nodes (maxNodes), so that committed offers are worth signing.

Prints one JSON object, a row per trace.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))
sys.path.insert(0, str(ROOT / "bench"))

from hybridgpu.cli import main as cli  # noqa: E402
from hybridgpu.sim.traces import TraceJob, synthetic  # noqa: E402
from simulate_scale import _synthetic_jobs  # noqa: E402

OPENB = ROOT.parent / "shared" / "traces" / "alibaba-openb" / "openb_pod_list_default.csv"
TRACES = ("synthetic-1000", "synthetic-4000", "synthetic-8000", "bundled", "openb")


def _write(jobs: list[TraceJob], path: Path) -> None:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(("name", "arrival_seconds", "duration_seconds", "gpus", "criticality"))
        for j in jobs:
            writer.writerow(
                (j.name, j.arrival_seconds, j.duration_seconds, j.gpus, j.criticality.value)
            )


def _trace(name: str, tmp: Path) -> Path:
    if name == "openb":
        return OPENB
    path = tmp / f"{name}.csv"
    if name == "bundled":
        _write(synthetic(), path)
    else:
        _write(_synthetic_jobs(int(name.split("-")[1]))[0], path)
    return path


def _config(tmp: Path, owned_max_nodes: int | None) -> Path:
    """examples/plan.yaml, with every candidate capped at ``owned_max_nodes``."""
    base = ROOT / "examples" / "plan.yaml"
    if owned_max_nodes is None:
        return base
    import yaml

    doc = yaml.safe_load(base.read_text())
    for candidate in doc["spec"]["candidates"]:
        candidate["maxNodes"] = owned_max_nodes
        candidate["currentNodes"] = min(candidate.get("currentNodes", 0), owned_max_nodes)
    path = tmp / "plan.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _plan(trace: Path, search: str, config: Path) -> tuple[dict[str, Any], float]:
    argv = ["plan", "--config", str(config), "--trace", str(trace)]
    stdout = io.StringIO()
    cpu = time.process_time()
    with contextlib.redirect_stdout(stdout):
        code = cli([*argv, "--json", "--search", search])
    cpu = time.process_time() - cpu
    if code != 0:
        raise SystemExit(f"plan --search {search} on {trace} exited {code}")
    return json.loads(stdout.getvalue()), cpu


def _row(name: str, trace: Path, config: Path) -> dict[str, Any]:
    exact, exact_cpu = _plan(trace, "exact", config)
    fast, fast_cpu = _plan(trace, "fast", config)

    def fleet(out: dict[str, Any]) -> str:
        return " + ".join(f"{r['nodes']} {r['name']}" for r in out["status"]["recommendations"])

    def procurement(out: dict[str, Any]) -> str:
        p = out["status"]["procurement"]
        signed = ", ".join(f"{c['nodes']} {c['offer']}" for c in p["commitments"] if c["nodes"])
        return f"{p['ownedNodes']} owned" + (f" + {signed}" if signed else "")

    def gap(a: float, b: float) -> float:
        return round(100 * (a / b - 1), 3)

    e_total = exact["status"]["monthlyCost"]["total"]
    f_total = fast["status"]["monthlyCost"]["total"]
    e_proc = exact["procurement"]["monthlyCost"]
    f_proc = fast["procurement"]["monthlyCost"]
    return {
        "trace": name,
        "exact_fleet": fleet(exact),
        "fast_fleet": fleet(fast),
        "exact_monthly": e_total,
        "fast_monthly": f_total,
        "fleet_gap_percent": gap(f_total, e_total),
        "exact_procurement": procurement(exact),
        "fast_procurement": procurement(fast),
        "exact_procurement_monthly": e_proc,
        "fast_procurement_monthly": f_proc,
        "procurement_gap_percent": gap(f_proc, e_proc),
        "exact_cpu_seconds": round(exact_cpu, 1),
        "fast_cpu_seconds": round(fast_cpu, 1),
        "fast_search": fast["search"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", action="append", choices=TRACES, help="default: every one")
    parser.add_argument("--owned-max-nodes", type=int, default=None, help="cap every candidate")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.trace or TRACES:
            config = _config(Path(tmp), args.owned_max_nodes)
            rows.append(_row(name, _trace(name, Path(tmp)), config))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
