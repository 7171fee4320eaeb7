"""The terminal table and the PNG of a comparison."""

from __future__ import annotations

from pathlib import Path

from hybridgpu.sim.engine import PolicyResult


def table(results: dict[str, PolicyResult]) -> str:
    """A fixed-width table, one row per policy, costs in dollars and waits in seconds."""
    base = results.get("on_demand")
    head = (
        f"{'policy':<12} {'total $':>11} {'vs on-dem':>9} {'core $':>10} {'elastic $':>10} "
        f"{'spot $':>9} {'work GPU-h':>10} {'crit p50/p95 s':>15} {'std p95 s':>9} "
        f"{'pre p95 s':>9} {'preempt':>7} {'spot int':>8} {'unfin':>5}"
    )
    lines = [head, "-" * len(head)]
    for name, r in results.items():
        c = r.cost_by_tier_dollars
        ratio = (
            r.total_cost_dollars / base.total_cost_dollars
            if base and base.total_cost_dollars
            else 0
        )
        work = sum(v for k, v in r.gpu_hours.items() if k != "billed")
        w = r.wait_seconds
        lines.append(
            f"{name:<12} {r.total_cost_dollars:>11,.0f} {ratio:>8.2f}x {c.get('core', 0):>10,.0f} "
            f"{c.get('elastic', 0):>10,.0f} {c.get('spot', 0):>9,.0f} {work:>10,.0f} "
            f"{w['critical']['p50']:>7,.0f}/{w['critical']['p95']:<7,.0f} "
            f"{w['standard']['p95']:>9,.0f} {w['preemptible']['p95']:>9,.0f} "
            f"{r.preemptions:>7} {r.spot_interruptions:>8} {r.unfinished_jobs:>5}"
        )
    return "\n".join(lines)


def write_png(results: dict[str, PolicyResult], path: str | Path) -> Path:
    """Capacity per tier against demand, and cost rate per tier, over time (hybridgpu), plus
    the cumulative cost of every simulated policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    hybrid = results["hybridgpu"]
    s = hybrid.series
    fig, axes = plt.subplots(3, 1, figsize=(11, 10), sharex=True)
    colors = {"core": "#4c72b0", "elastic": "#dd8452", "spot": "#55a868"}
    panels = (
        ("gpus", "GPUs", "hybridgpu: capacity per tier and GPU demand"),
        ("cost", "$ / hour", "hybridgpu: cost rate per tier"),
    )
    for ax, (key, unit, title) in zip(axes, panels, strict=False):
        ax.stackplot(
            s["t"],
            [s[f"{key}_{t}"] for t in colors],
            labels=list(colors),
            colors=list(colors.values()),
            alpha=0.8,
        )
        if key == "gpus":
            ax.plot(
                s["t"], s["demand_gpus"], color="black", lw=1, label="demand (running + pending)"
            )
        ax.set_ylabel(unit)
        ax.set_title(title)
        ax.legend(loc="upper left", fontsize=8)
    for name, r in results.items():
        if not r.series.get("t"):
            continue
        total = [sum(r.series[f"cost_{t}"][i] for t in colors) for i in range(len(r.series["t"]))]
        cumulative = []
        acc = 0.0
        for i, rate in enumerate(total):
            dt = r.series["t"][i] - r.series["t"][i - 1] if i else 0.0
            acc += rate * dt
            cumulative.append(acc)
        axes[2].plot(r.series["t"], cumulative, label=name)
    axes[2].set_ylabel("cumulative $")
    axes[2].set_xlabel("hours")
    axes[2].set_title("cumulative cost by policy")
    axes[2].legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
