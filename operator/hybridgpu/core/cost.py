"""The cost model: what a node-hour costs in each tier, and cloud spend against the budget.

core node-hour    = capex / (years x 8760) + power_W x PUE x $/kWh / 1000 + ops
elastic/spot hour = the pool's price (static, or read from the provider for spot)
powered core pool = maxNodes x (capex + ops) + nodes on x power: a powered-off owned node
                    still costs its capex and ops; its electricity is the saving
committed hour    = committed.perNodeHour + committed.upfrontPerNode / (termYears x 8760), for
                    every committed node whether it runs or is used
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from hybridgpu.models.limits import usable_price_per_hour
from hybridgpu.models.pool import GPUPoolSpec, Tier

HOURS_PER_YEAR = 8760.0
DEFAULT_AMORTIZATION_YEARS = 4.0
DEFAULT_PUE = 1.4
DEFAULT_ELECTRICITY_PER_KWH = 0.12
DEFAULT_OPS_PER_NODE_HOUR = 0.0
# GPUs draw roughly three quarters of a GPU server's wall power.
SERVER_POWER_OVER_GPU_POWER = 1.3


@dataclass(frozen=True, slots=True)
class CoreNodeCost:
    """The parts of one owned node-hour, in dollars."""

    capex_per_hour: float
    power_per_hour: float
    ops_per_hour: float

    @property
    def total_per_hour(self) -> float:
        return self.capex_per_hour + self.power_per_hour + self.ops_per_hour


def core_node_cost(spec: GPUPoolSpec) -> CoreNodeCost:
    """Amortized capex, power (with PUE) and ops of one core node-hour, dollars."""
    p = spec.pricing
    years = p.amortization_years or DEFAULT_AMORTIZATION_YEARS
    capex = (p.capex_per_node or 0.0) / (years * HOURS_PER_YEAR)
    watts = p.power_watts_per_node
    if watts is None:
        gpu_watts = spec.gpu.power_watts or 0.0
        watts = gpu_watts * spec.gpu.per_node * SERVER_POWER_OVER_GPU_POWER
    pue = p.pue or DEFAULT_PUE
    per_kwh = (
        DEFAULT_ELECTRICITY_PER_KWH if p.electricity_per_kwh is None else p.electricity_per_kwh
    )
    power = watts * pue * per_kwh / 1000.0
    ops = DEFAULT_OPS_PER_NODE_HOUR if p.ops_per_node_hour is None else p.ops_per_node_hour
    return CoreNodeCost(capex_per_hour=capex, power_per_hour=power, ops_per_hour=ops)


def node_hour_dollars(spec: GPUPoolSpec, provider_price: float | None = None) -> float:
    """What one node of the pool costs per hour, dollars.

    ``provider_price`` is the spot price read from the provider; it is used when the pool
    asks for it (pricing.fromProvider) and falls back to pricing.perNodeHour.
    """
    if spec.tier == Tier.CORE:
        return core_node_cost(spec).total_per_hour
    if spec.committed is not None:
        return committed_node_hour_dollars(spec)
    if spec.pricing.from_provider and provider_price is not None:
        return provider_price
    if spec.pricing.per_node_hour is None:
        raise ValueError("elastic/spot pool without a price: set pricing.perNodeHour")
    return spec.pricing.per_node_hour


def gpu_hour_dollars(spec: GPUPoolSpec, provider_price: float | None = None) -> float:
    """What one GPU of the pool costs per hour, dollars (the node price over its GPUs)."""
    return node_hour_dollars(spec, provider_price) / spec.gpu.per_node


def marginal_gpu_hour_dollars(spec: GPUPoolSpec, provider_price: float | None = None) -> float:
    """Extra dollars per hour of using one more GPU of the pool.

    Core capacity is paid whether used or not, so its marginal cost is its share of power;
    committed capacity is paid whether used or not too, and draws no power bill: none.
    """
    if spec.tier == Tier.CORE:
        return power_node_hour_dollars(spec) / spec.gpu.per_node
    if spec.committed is not None:
        return 0.0
    return gpu_hour_dollars(spec, provider_price)


def committed_node_hour_dollars(spec: GPUPoolSpec) -> float:
    """One committed node-hour: the effective hourly price plus the upfront payment spread
    over the term's hours, dollars (0 for a pool without a commitment)."""
    c = spec.committed
    if c is None:
        return 0.0
    return c.per_node_hour + c.upfront_per_node / (c.term_years * HOURS_PER_YEAR)


def paid_whether_used(spec: GPUPoolSpec) -> bool:
    """Owned and committed capacity cost the same used or idle; on-demand and spot do not."""
    return spec.tier == Tier.CORE or spec.committed is not None


def always_on_nodes(spec: GPUPoolSpec) -> int:
    """Nodes that run from the start whatever the demand: an owned pool's maxNodes (the
    hardware bought), a committed pool's commitment; none for on-demand and spot."""
    if spec.tier == Tier.CORE:
        return spec.max_nodes
    return spec.committed.nodes if spec.committed is not None else 0


def held_nodes(spec: GPUPoolSpec) -> int:
    """Nodes the operator never releases (or powers off) below: minNodes, or the commitment
    or an owned pool's power.minPoweredOn if larger."""
    committed = spec.committed.nodes if spec.committed is not None else 0
    powered_on = spec.power.min_powered_on if spec.power is not None else 0
    return max(spec.min_nodes, committed, powered_on)


def powered(spec: GPUPoolSpec) -> bool:
    """An owned pool whose idle nodes may be powered off (spec.power)."""
    return spec.power is not None and spec.tier == Tier.CORE


def power_node_hour_dollars(spec: GPUPoolSpec) -> float:
    """Electricity of one powered-on owned node-hour, dollars: what powering it off saves and
    what powering it on costs (power.powerPerNodeHour, else the core cost model's power)."""
    if spec.power is not None and spec.power.power_per_node_hour is not None:
        return spec.power.power_per_node_hour
    return core_node_cost(spec).power_per_hour


def pool_hour_dollars(
    spec: GPUPoolSpec, billed_nodes: int, provider_price: float | None = None
) -> float:
    """What the pool costs per hour with ``billed_nodes`` nodes running or on their way,
    dollars. A commitment is paid in full whatever runs."""
    if spec.committed is not None:
        return spec.committed.nodes * committed_node_hour_dollars(spec)
    if powered(spec):
        # Every owned machine costs its capex and ops, on or off; only those on draw power.
        parts = core_node_cost(spec)
        sunk = spec.max_nodes * (parts.capex_per_hour + parts.ops_per_hour)
        return sunk + billed_nodes * power_node_hour_dollars(spec)
    return billed_nodes * node_hour_dollars(spec, provider_price)


@dataclass(frozen=True, slots=True)
class CommittedIdle:
    """The part of a commitment no pod uses now."""

    gpus: int
    idle_gpus: int
    wasted_per_hour: float


def committed_idle(spec: GPUPoolSpec, allocated_gpus: int) -> CommittedIdle | None:
    """Committed GPUs that no pod requests (including committed nodes not running) and what
    they cost per hour; None for a pool without a commitment."""
    if spec.committed is None:
        return None
    gpus = spec.committed.nodes * spec.gpu.per_node
    idle = max(gpus - max(allocated_gpus, 0), 0)
    per_gpu = committed_node_hour_dollars(spec) / spec.gpu.per_node
    return CommittedIdle(gpus=gpus, idle_gpus=idle, wasted_per_hour=idle * per_gpu)


def node_hour_from_gpu_prices(
    spec: GPUPoolSpec, gpu_hour_dollars_of_nodes: Iterable[float]
) -> float | None:
    """A node-hour of the pool priced from what one GPU-hour of each of its nodes costs (e.g.
    OpenCost's ``node_gpu_hourly_cost``), dollars: the dearest node's, so a budget computed
    from it holds whichever node is added; None without a usable price."""
    prices = [p for p in gpu_hour_dollars_of_nodes if usable_price_per_hour(p)]
    return max(prices) * spec.gpu.per_node if prices else None


def is_cloud(tier: str) -> bool:
    """Elastic and spot capacity is rented by the hour; core is owned."""
    return tier != Tier.CORE


def projected_month_dollars(spent: float, hourly: float, hours_left: float) -> float:
    """Spend this month if the current rate holds until the month ends, dollars."""
    return spent + hourly * max(hours_left, 0.0)
