"""Planner test inputs shared by the procurement and replay tests: an owned node type priced
per GPU-hour, cloud rates with spot physics, and random job traces."""

from __future__ import annotations

from hypothesis import strategies as st

from hybridgpu.planner.model import CloudRates, JobDemand, OwnedNodeType

CLOUD = CloudRates(
    4.0,
    1.5,
    spot_interruptions_per_hour=0.05,
    spot_restart_overhead_hours=0.2,
    node_startup_hours=0.05,
    idle_release_hours=0.25,
)


def node_type(name: str = "n", gpus: int = 4, gpu_hour: float = 1.0) -> OwnedNodeType:
    """An owned node whose GPU-hour costs ``gpu_hour`` (half capital, straight line, half power)."""
    node_hour = gpu_hour * gpus
    return OwnedNodeType(
        name=name,
        gpus_per_node=gpus,
        capex_dollars=node_hour / 2 * 4 * 8760,
        amortization_years=4,
        power_watts=node_hour / 2 * 1000 / (1.25 * 0.1),
        pue=1.25,
        electricity_per_kwh=0.1,
        cost_of_capital_per_year=0.0,
    )


def random_jobs(max_size: int) -> st.SearchStrategy[list[JobDemand]]:
    """1 to ``max_size`` jobs over 20 h, 1 min to 8 h long, of 1-8 GPUs, firm or preemptible."""
    return st.lists(
        st.builds(
            JobDemand,
            arrival_seconds=st.integers(0, 20 * 3600).map(float),
            duration_seconds=st.integers(60, 8 * 3600).map(float),
            gpus=st.sampled_from([1, 2, 4, 8]),
            preemptible=st.booleans(),
        ),
        min_size=1,
        max_size=max_size,
    )
