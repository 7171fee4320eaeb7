"""The terminal table and the PNG of a comparison."""

from __future__ import annotations

import math
from pathlib import Path

from hybridgpu.errors import FigureNotFinite
from hybridgpu.sim.compare import BOUND, HEADLINE_PEER, WaitSLO, check_figures
from hybridgpu.sim.engine import SERIES_STEP_SECONDS, PolicyResult


def _duration(seconds: float) -> str:
    """Seconds as a person reads them: 45s, 12m, 3.5h, 2.1d."""
    if math.isinf(seconds):
        return "never"
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f}m"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def _ratio(value: float, base: float | None) -> str:
    if not base:
        return "-"
    ratio = value / base
    if not math.isfinite(ratio):  # never printed as "infx" or "nanx"
        raise FigureNotFinite(f"simulate: the ratio of ${value:,.2f} to ${base:,.2f} is {ratio}")
    return f"{ratio:.2f}x"


LEGEND = (
    "cloud $ = elastic + spot spend (the part the operator controls); x peer = against "
    "autoscaler_spot (core + on-demand + spot, no moves: a Karpenter user's spot NodePool); "
    "x bound = against fluid_bound; lost GPU-h = work redone after moves and interruptions; "
    "waits p50/p95 per class (crit, std, pre); preempt = jobs moved; spot int = spot "
    "interruptions; unfin = jobs not finished; SLO = every job within the wait SLO the bound "
    "assumes."
)


def table(results: dict[str, PolicyResult], slo: WaitSLO | None = None) -> str:
    """A fixed-width table, one row per policy: spend (total and cloud) next to the headline
    peer and the bound, work, waits and disruptions."""
    check_figures(results)
    slo = slo or WaitSLO()
    peer = results.get(HEADLINE_PEER) or results.get("on_demand")
    bound = results.get(BOUND)
    head = (
        f"{'policy':<15} {'total $':>9} {'x peer':>6} {'cloud $':>9} {'x peer':>6} "
        f"{'x bound':>7} {'core $':>8} {'elastic $':>9} {'spot $':>8} {'work GPU-h':>10} "
        f"{'lost':>6} {'crit p50/p95':>13} {'std p95':>7} {'pre p95':>7} {'preempt':>7} "
        f"{'spot int':>8} {'unfin':>5} {'SLO':>3}"
    )
    lines = [head, "-" * len(head)]
    for name, r in results.items():
        c = r.cost_by_tier_dollars
        w = r.wait_seconds
        crit = f"{_duration(w['critical']['p50'])}/{_duration(w['critical']['p95'])}"
        meets = "yes" if name == BOUND or slo.met_by(r) else "no"
        lines.append(
            f"{name:<15} {r.total_cost_dollars:>9,.0f} "
            f"{_ratio(r.total_cost_dollars, peer.total_cost_dollars if peer else None):>6} "
            f"{r.cloud_cost_dollars:>9,.0f} "
            f"{_ratio(r.cloud_cost_dollars, peer.cloud_cost_dollars if peer else None):>6} "
            f"{_ratio(r.cloud_cost_dollars, bound.cloud_cost_dollars if bound else None):>7} "
            f"{c.get('core', 0):>8,.0f} {c.get('elastic', 0):>9,.0f} {c.get('spot', 0):>8,.0f} "
            f"{r.work_gpu_hours:>10,.0f} {r.gpu_hours.get('lost', 0.0):>6,.0f} {crit:>13} "
            f"{_duration(w['standard']['p95']):>7} {_duration(w['preemptible']['p95']):>7} "
            f"{r.preemptions:>7} {r.spot_interruptions:>8} {r.unfinished_jobs:>5} {meets:>3}"
        )
    return "\n".join(lines)


EXPLAIN_LABELS = {
    "provisioning": "nodes booting (launch to Ready)",
    "idle_nodes": "idle nodes (waiting out idleFor, minNodes)",
    "half_empty_nodes": "empty GPUs on busy nodes (half-empty nodes)",
    "work_while_owned_gpus_free": "work while as many owned GPUs sat free",
    "lost_work": "work lost to moves, interruptions, restarts",
    "billing_minimum": "billing minimum of short-lived nodes",
    "spot_unavailable": "preemptible on on-demand while spot had no capacity",
    "beyond_bound": "other work the bound avoids (deferred, cheaper)",
}


def explain_gap(result: PolicyResult, bound: PolicyResult) -> dict[str, float]:
    """The policy's cloud spend above the bound's, split by cause, dollars. The terms sum to
    the gap: every cloud dollar is in one term, and the bound's spend is taken off the work
    the cloud did beyond the other causes."""
    terms = dict(result.cost_terms_dollars)
    terms["beyond_bound"] = terms.pop("cloud_work", 0.0) - bound.cloud_cost_dollars
    return {k: terms.get(k, 0.0) for k in EXPLAIN_LABELS}


def explain_table(results: dict[str, PolicyResult]) -> str:
    """``simulate --explain``: the gap to the bound in cloud spend, term by term, for
    hybridgpu and the policies it is compared with."""
    check_figures(results)
    bound = results[BOUND]
    names = [n for n in ("hybridgpu", HEADLINE_PEER, "reactive") if n in results]
    gaps = {n: explain_gap(results[n], bound) for n in names}
    width = max(len(v) for v in EXPLAIN_LABELS.values())
    head = f"{'cloud $ above ' + BOUND:<{width}} " + " ".join(f"{n:>15}" for n in names)
    lines = [head, "-" * len(head)]
    for key, label in EXPLAIN_LABELS.items():
        lines.append(f"{label:<{width}} " + " ".join(f"{gaps[n][key]:>15,.2f}" for n in names))
    lines.append("-" * len(head))
    lines.append(
        f"{'gap (sum of the terms)':<{width}} "
        + " ".join(f"{sum(gaps[n].values()):>15,.2f}" for n in names)
    )
    lines.append(
        f"{'cloud $ - ' + BOUND + ' cloud $':<{width}} "
        + " ".join(
            f"{results[n].cloud_cost_dollars - bound.cloud_cost_dollars:>15,.2f}" for n in names
        )
    )
    return "\n".join(lines)


def headline(results: dict[str, PolicyResult]) -> str:
    """One sentence: hybridgpu against the peer a user would pick and against the bound,
    total and cloud spend."""
    check_figures(results)
    h = results["hybridgpu"]
    peer_name = HEADLINE_PEER if HEADLINE_PEER in results else "on_demand"
    peer = results[peer_name]
    parts = [
        f"hybridgpu: total ${h.total_cost_dollars:,.0f}, "
        f"{_ratio(h.total_cost_dollars, peer.total_cost_dollars)} {peer_name}'s "
        f"${peer.total_cost_dollars:,.0f}; cloud spend ${h.cloud_cost_dollars:,.0f}, "
        f"{_ratio(h.cloud_cost_dollars, peer.cloud_cost_dollars)} {peer_name}'s "
        f"${peer.cloud_cost_dollars:,.0f}"
    ]
    bound = results.get(BOUND)
    if bound is not None and bound.cloud_cost_dollars > 0:
        parts.append(
            f"{_ratio(h.cloud_cost_dollars, bound.cloud_cost_dollars)} the {BOUND}'s "
            f"${bound.cloud_cost_dollars:,.0f}"
        )
    elif bound is not None:
        parts.append(f"the {BOUND} needs no cloud at all (the owned GPUs can run it all)")
    return " and ".join(parts) + "."


def annotations_summary(results: dict[str, PolicyResult]) -> list[str]:
    """What hybridgpu's deadline rule and idle reclaim did, one line each (none when the
    trace has no deadlines or no workload opted in to idle reclaim)."""
    h = results["hybridgpu"]
    lines = []
    deadlines = h.deadlines
    if deadlines.jobs:
        lines.append(
            f"deadlines: {deadlines.missed} of {deadlines.jobs} job(s) missed theirs; "
            f"{deadlines.on_demand_moves} move(s) to on-demand"
            + (
                f", {deadlines.returns_to_spot} return(s) to spot"
                if deadlines.returns_to_spot
                else ""
            )
        )
    reclaim = h.idle_reclaim
    if reclaim.workloads:
        lines.append(
            f"idle reclaim: {reclaim.workloads} workload(s) reclaimed after holding "
            f"{reclaim.idle_gpu_hours:,.1f} GPU-hours idle; {reclaim.freed_gpu_hours:,.1f} "
            f"GPU-hours freed (${reclaim.freed_dollars:,.2f} at the price of the GPUs they held)"
        )
    return lines


def time_axis(end_hours: float) -> tuple[str, float]:
    """The chart's time unit and hours per unit: long runs read in days (a 149-day trace is
    3,576 h), short ones in hours."""
    return ("days", 24.0) if end_hours > 96 else ("hours", 1.0)


def write_png(results: dict[str, PolicyResult], path: str | Path) -> Path:
    """Capacity per tier against demand, and cost rate per tier, over time (hybridgpu), plus
    the cumulative cloud spend of every simulated policy against the bound's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    hybrid = results["hybridgpu"]
    s = hybrid.series
    fig, axes = plt.subplots(3, 1, figsize=(11, 10), sharex=True)
    colors = {"core": "#4c72b0", "elastic": "#dd8452", "spot": "#55a868"}
    # Policies that queue for days (owned_only) would stretch the shared axis into emptiness.
    ends = [r.end_seconds for n, r in results.items() if r.series.get("t") and n != "owned_only"]
    end_hours = max(ends, default=0.0) / 3600
    x_unit, per_unit = time_axis(end_hours)

    def x_of(r: PolicyResult) -> list[float]:
        return [t / per_unit for t in r.series["t"]]

    panels = (
        ("gpus", "GPUs", "hybridgpu: capacity per tier and GPU demand"),
        ("cost", "$ / hour", "hybridgpu: cost rate per tier"),
    )
    for ax, (key, unit, title) in zip(axes, panels, strict=False):
        ax.stackplot(
            x_of(hybrid),
            [s[f"{key}_{t}"] for t in colors],
            labels=list(colors),
            colors=list(colors.values()),
            alpha=0.8,
        )
        if key == "gpus":
            ax.plot(
                x_of(hybrid),
                s["demand_gpus"],
                color="black",
                lw=1,
                label="demand (running + pending)",
            )
        ax.set_ylabel(unit)
        ax.set_title(title)
        ax.legend(loc="upper left", fontsize=8)
    cloud = ("elastic", "spot")
    for name, r in results.items():
        if not r.series.get("t"):
            continue
        cumulative = []
        acc = 0.0
        for i in range(len(r.series["t"])):
            dt = r.series["t"][i] - r.series["t"][i - 1] if i else 0.0
            acc += sum(r.series[f"cost_{t}"][i - 1] for t in cloud) * dt if i else 0.0
            cumulative.append(acc)
        axes[2].plot(x_of(r), cumulative, label=f"{name} (${r.cloud_cost_dollars:,.0f})")
    bound = results.get(BOUND)
    if bound is not None:
        axes[2].axhline(
            bound.cloud_cost_dollars,
            color="black",
            ls="--",
            lw=1,
            label=f"{BOUND} (${bound.cloud_cost_dollars:,.0f})",
        )
    if ends:
        axes[2].set_xlim(0, end_hours / per_unit)
    core = next(iter(results.values())).cost_by_tier_dollars.get("core", 0.0)
    axes[2].set_ylabel("cumulative cloud $")
    axes[2].set_xlabel(x_unit)
    axes[2].set_title(
        f"cumulative cloud spend by policy, sampled every {SERIES_STEP_SECONDS / 60:.0f} min\n"
        f"(owned fleet: ${core:,.0f} over the trace window, the same for every policy)"
    )
    axes[2].legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
