"""decide(): table-driven cases, one behaviour a user would notice per case."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest
from tests.support.builders import (
    NOW,
    STANDARD_POOLS,
    node,
    pending,
    plan_summary,
    policy,
    pool,
    running,
    snapshot,
)

from hybridgpu.core.decide import decide
from hybridgpu.models.actions import (
    MoveJob,
    Plan,
    ScaleUp,
)
from hybridgpu.models.snapshot import MetricsHealth

pytestmark = pytest.mark.unit

CORE_NODES = [node("c1", "core"), node("c2", "core")]


def summary(plan: Plan) -> list[tuple[object, ...]]:
    return plan_summary(plan, node_actions=True)


@dataclass
class Case:
    pools: list = field(default_factory=lambda: list(STANDARD_POOLS))
    nodes: list = field(default_factory=lambda: list(CORE_NODES))
    workloads: list = field(default_factory=list)
    policy: dict = field(default_factory=dict)
    metrics: MetricsHealth | None = None
    spent: float = 0.0
    want: list = field(default_factory=list)
    want_blocked: list = field(default_factory=list)
    moved_by_operator: set = field(default_factory=set)
    want_waiting: int = 0
    """Pods that wait for owned GPUs instead of a new cloud node."""


CASES = {
    "pending pod that fits free core needs nothing": Case(
        workloads=[pending("a", 4)],
        want=[],
    ),
    "pod pending shorter than the grace period is not demand yet": Case(
        nodes=[],
        workloads=[pending("a", 4, since=NOW - 1)],
        want=[],
    ),
    "standard work beyond core scales elastic by bin packing": Case(
        nodes=[node("c1", "core"), node("c2", "core")],
        workloads=[running("r1", "c1", 8), running("r2", "c2", 8)]
        + [pending(f"p{i}", 3) for i in range(3)]
        + [pending("big", 8)],
        # 3+3 | 3 | 8: three 8-GPU nodes
        want=[("scale_up", "elastic", 3)],
    ),
    "maxNodes caps the scale-up and the rest is reported blocked": Case(
        pools=[pool("core", "core", max_nodes=0), pool("elastic", "elastic", max_nodes=2)],
        nodes=[],
        workloads=[pending(f"p{i}", 8) for i in range(5)],
        want=[("scale_up", "elastic", 2)],
        want_blocked=[("elastic", "max_nodes", 3)],
    ),
    "maxNodesPerTick caps the scale-up": Case(
        pools=[pool("elastic", "elastic", max_nodes=50)],
        nodes=[],
        workloads=[pending(f"p{i}", 8) for i in range(5)],
        policy={"scaleUp": {"maxNodesPerTick": 2}},
        want=[("scale_up", "elastic", 2)],
        want_blocked=[("elastic", "max_per_tick", 3)],
    ),
    "nodes already provisioning absorb the demand: no second scale-up": Case(
        pools=[pool("elastic", "elastic", provisioning=2)],
        nodes=[],
        workloads=[pending(f"p{i}", 8) for i in range(2)],
        want=[],
    ),
    "preemptible work scales spot, not elastic": Case(
        nodes=[],
        pools=[pool("elastic", "elastic"), pool("spot", "spot")],
        workloads=[pending("b", 2, "preemptible"), pending("c", 2, "preemptible")],
        want=[("scale_up", "spot", 1)],
    ),
    "critical work preempts a preemptible Job on core and moves it to spot": Case(
        workloads=[
            running("batch", "c1", 8, "preemptible"),
            running("svc", "c2", 8, "critical"),
            pending("urgent", 4, "critical"),
        ],
        want=[("preempt", "team/batch", "spot"), ("scale_up", "spot", 1)],
    ),
    "critical work preempts on core before it fills a free GPU of an elastic node": Case(
        nodes=[*CORE_NODES, node("e1", "elastic")],
        workloads=[
            running("batch", "c1", 8, "preemptible"),
            running("svc", "c2", 8, "critical"),
            running("web", "e1", 4),
            pending("urgent", 4, "critical"),
        ],
        want=[("preempt", "team/batch", "spot"), ("scale_up", "spot", 1)],
    ),
    "standard work preempts on core before it fills an elastic node on its way": Case(
        pools=[STANDARD_POOLS[0], pool("elastic", "elastic", provisioning=1), STANDARD_POOLS[2]],
        workloads=[
            running("batch", "c1", 8, "preemptible"),
            running("svc", "c2", 8, "critical"),
            pending("train", 8),
        ],
        want=[("preempt", "team/batch", "spot"), ("scale_up", "spot", 1)],
    ),
    "with nothing to preempt, firm work fills a free GPU of an elastic node": Case(
        nodes=[*CORE_NODES, node("e1", "elastic")],
        workloads=[
            running("svc1", "c1", 8, "critical"),
            running("svc2", "c2", 8, "critical"),
            running("web", "e1", 4),
            pending("urgent", 4, "critical"),
        ],
        want=[],
    ),
    "the cheapest victims are chosen: the smaller Job": Case(
        workloads=[
            running("big", "c1", 6, "preemptible"),
            running("small", "c1", 2, "preemptible"),
            running("svc", "c2", 8, "critical"),
            pending("urgent", 2, "critical"),
        ],
        want=[("preempt", "team/small", "spot"), ("scale_up", "spot", 1)],
    ),
    "the victim that loses least since its last checkpoint is chosen": Case(
        workloads=[
            running("alpha", "c1", 4, "preemptible", checkpoint=0),  # never: loses its hour
            running("beta", "c1", 4, "preemptible", checkpoint=1800),  # just checkpointed
            running("svc", "c2", 8, "critical"),
            pending("urgent", 4, "critical"),
        ],
        want=[("preempt", "team/beta", "spot"), ("scale_up", "spot", 1)],
    ),
    "a Job younger than minRuntime is not preempted: elastic scales instead": Case(
        workloads=[
            running("batch", "c1", 8, "preemptible", started=NOW - 10),
            running("svc", "c2", 8, "critical"),
            pending("urgent", 4, "critical"),
        ],
        want=[("scale_up", "elastic", 1)],
    ),
    "bare pods (no Job) are never preempted": Case(
        workloads=[
            running("bare", "c1", 8, "preemptible", job=False),
            running("svc", "c2", 8, "critical"),
            pending("urgent", 4, "critical"),
        ],
        want=[("scale_up", "elastic", 1)],
    ),
    "critical work is never a victim": Case(
        workloads=[
            running("svc1", "c1", 8, "critical"),
            running("svc2", "c2", 8, "critical"),
            pending("urgent", 4, "critical"),
        ],
        want=[("scale_up", "elastic", 1)],
    ),
    "preemption off: elastic scales": Case(
        workloads=[
            running("batch", "c1", 8, "preemptible"),
            running("svc", "c2", 8, "critical"),
            pending("urgent", 4, "critical"),
        ],
        policy={"preemption": {"enabled": False}},
        want=[("scale_up", "elastic", 1)],
    ),
    "hourly budget blocks a scale-up that would exceed it": Case(
        pools=[pool("elastic", "elastic", price=24.0)],
        nodes=[node("e1", "elastic")],
        workloads=[running("r", "e1", 8), pending("p", 8)],
        policy={"budget": {"maxHourlyCost": 40}},
        want=[],
        want_blocked=[("elastic", "budget_hourly", 1)],
    ),
    "monthly limit reached blocks scale-up": Case(
        pools=[pool("elastic", "elastic")],
        nodes=[],
        workloads=[pending("p", 8)],
        policy={"budget": {"monthlyLimit": 1000}},
        spent=1000.0,
        want=[],
        want_blocked=[("elastic", "budget_monthly", 1)],
    ),
    "idle elastic node past idleFor is released": Case(
        nodes=[*CORE_NODES, node("e1", "elastic", idle_since=NOW - 3600, utilization_percent=0.0)],
        want=[("release_node", "e1")],
    ),
    "idle node younger than idleFor is kept": Case(
        nodes=[*CORE_NODES, node("e1", "elastic", idle_since=NOW - 60)],
        want=[],
    ),
    "nothing is released when utilization data is unavailable (fail static)": Case(
        nodes=[*CORE_NODES, node("e1", "elastic", idle_since=NOW - 3600)],
        metrics=MetricsHealth(available=False, reason="prometheus down"),
        want=[],
    ),
    "blind, pending work still gets capacity": Case(
        nodes=[],
        pools=[pool("elastic", "elastic")],
        workloads=[pending("p", 8)],
        metrics=MetricsHealth(available=False),
        want=[("scale_up", "elastic", 1)],
    ),
    "a node with stale utilization is not released": Case(
        nodes=[*CORE_NODES, node("e1", "elastic", idle_since=NOW - 3600, utilization_stale=True)],
        want=[],
    ),
    "minNodes holds idle nodes": Case(
        pools=[pool("elastic", "elastic", min_nodes=1)],
        nodes=[
            node("e1", "elastic", idle_since=NOW - 3600),
            node("e2", "elastic", idle_since=NOW - 3600),
        ],
        want=[("release_node", "e1")],
    ),
    "core nodes are never released": Case(
        nodes=[node("c1", "core", idle_since=NOW - 86400)],
        want=[],
    ),
    "an idle node that pending work will use is kept": Case(
        pools=[pool("elastic", "elastic")],
        nodes=[node("e1", "elastic", idle_since=NOW - 3600)],
        workloads=[pending("p", 8)],
        want=[],
    ),
    "most expensive idle node goes first within the disruption budget": Case(
        pools=[pool("cheap", "spot", price=5.0), pool("dear", "elastic", price=30.0)],
        nodes=[
            node("s1", "cheap", idle_since=NOW - 3600),
            node("e1", "dear", idle_since=NOW - 3600),
        ],
        policy={"disruption": {"maxNodesPerTick": 1}},
        want=[("release_node", "e1")],
    ),
    "an interruption notice cordons and drains; its Job requeues onto new spot": Case(
        pools=[pool("spot", "spot")],
        nodes=[node("s1", "spot", interruption_deadline=NOW + 120)],
        workloads=[running("batch", "s1", 4, "preemptible", pool_pin="spot")],
        want=[("handle_interruption", "s1"), ("scale_up", "spot", 1)],
    ),
    "GPU XID errors cordon the node": Case(
        nodes=[node("c1", "core", xid_errors=2), node("c2", "core")],
        want=[("cordon_unhealthy", "c1")],
    ),
    "preemptible work alone on an elastic node consolidates to spot": Case(
        nodes=[*CORE_NODES, node("e1", "elastic")],
        workloads=[
            running("r1", "c1", 8),
            running("r2", "c2", 8),
            running("batch", "e1", 8, "preemptible", started=NOW - 7200),
        ],
        want=[("consolidate", "team/batch", "spot"), ("scale_up", "spot", 1)],
    ),
    "a young Job is not consolidated: the restart would cost more than it saves": Case(
        nodes=[*CORE_NODES, node("e1", "elastic")],
        workloads=[
            running("r1", "c1", 8),
            running("r2", "c2", 8),
            running("batch", "e1", 8, "preemptible", started=NOW - 90),
        ],
        want=[],
    ),
    "work the operator moved to spot comes back when owned GPUs sit idle": Case(
        nodes=[node("c1", "core"), node("c2", "core", idle_since=NOW - 3600), node("s1", "spot")],
        workloads=[
            running("r1", "c1", 8),
            running("moved", "s1", 4, "preemptible", started=NOW - 7200, pool_pin="spot"),
        ],
        moved_by_operator={"team/moved"},
        want=[("consolidate", "team/moved", "core")],
    ),
    "owned GPUs freed a moment ago are kept for new work": Case(
        nodes=[node("c1", "core"), node("c2", "core", idle_since=NOW - 60), node("s1", "spot")],
        workloads=[
            running("r1", "c1", 8),
            running("moved", "s1", 4, "preemptible", started=NOW - 7200, pool_pin="spot"),
        ],
        moved_by_operator={"team/moved"},
        want=[],
    ),
    "a Job its owner pinned to spot stays there": Case(
        nodes=[node("c1", "core"), node("c2", "core", idle_since=NOW - 3600), node("s1", "spot")],
        workloads=[
            running("r1", "c1", 8),
            running("pinned", "s1", 4, "preemptible", started=NOW - 7200, pool_pin="spot"),
        ],
        want=[],
    ),
    "a pod pinned to a pool only grows that pool": Case(
        nodes=[],
        pools=[pool("elastic", "elastic"), pool("elastic-b", "elastic", price=10.0)],
        workloads=[pending("p", 8, pool_pin="elastic")],
        want=[("scale_up", "elastic", 1)],
    ),
    # Node shapes: the pending set is packed across every pool it may grow.
    "two small pods get two small nodes, not a half-empty big one": Case(
        pools=[
            pool("core", "core", max_nodes=1),
            pool("spot-1g", "spot", per_node=1, price=1.0),
            pool("spot-8g", "spot", price=7.6),
        ],
        nodes=[node("c1", "core")],
        # The 8-GPU pod takes the free owned node; the two 1-GPU pods need new nodes.
        workloads=[pending("big", 8, "preemptible")]
        + [pending(f"p{i}", 1, "preemptible") for i in range(2)],
        want=[("scale_up", "spot-1g", 2)],
    ),
    "eight small pods fill one big node when it is cheaper than eight small ones": Case(
        pools=[pool("spot-1g", "spot", per_node=1, price=1.0), pool("spot-8g", "spot", price=7.6)],
        nodes=[],
        workloads=[pending(f"p{i}", 1, "preemptible") for i in range(9)],
        want=[("scale_up", "spot-1g", 1), ("scale_up", "spot-8g", 1)],
    ),
    "two 4-GPU pods share an 8-GPU node cheaper than two 4-GPU nodes": Case(
        pools=[
            pool("elastic-4g", "elastic", per_node=4, price=12.0),
            pool("elastic-8g", "elastic", price=22.0),
        ],
        nodes=[],
        workloads=[pending("a", 4), pending("b", 4)],
        want=[("scale_up", "elastic-8g", 1)],
    ),
    "one 4-GPU pod gets a 4-GPU node, not a half-empty 8-GPU one": Case(
        pools=[
            pool("elastic-4g", "elastic", per_node=4, price=12.0),
            pool("elastic-8g", "elastic", price=22.0),
        ],
        nodes=[],
        workloads=[pending("a", 4)],
        want=[("scale_up", "elastic-4g", 1)],
    ),
    "a pod and the small ones that fill its node go together": Case(
        pools=[
            pool("elastic-1g", "elastic", per_node=1, price=3.0),
            pool("elastic-8g", "elastic", price=24.0),
        ],
        nodes=[],
        # 4+2+1+1 fill one 8-GPU node ($24/h); apart they would need it and two 1g ($30/h).
        workloads=[pending("a", 4), pending("b", 2), pending("c", 1), pending("d", 1)],
        want=[("scale_up", "elastic-8g", 1)],
    ),
    "when the cheapest shape is at maxNodes the next one takes the rest": Case(
        pools=[
            pool("elastic-4g", "elastic", per_node=4, price=12.0),
            pool("elastic-8g", "elastic", price=22.0, max_nodes=1),
        ],
        nodes=[],
        workloads=[pending(f"p{i}", 4) for i in range(4)],
        want=[("scale_up", "elastic-4g", 2), ("scale_up", "elastic-8g", 1)],
    ),
    "pods that may run only on one GPU model get only pools of that model": Case(
        pools=[
            pool("t4", "elastic", per_node=1, price=0.5, gpu={"model": "T4", "perNode": 1}),
            pool("a100", "elastic", per_node=1, price=4.0),
        ],
        nodes=[],
        workloads=[pending("any", 1), pending("needs-a100", 1, models=("A100",))],
        want=[("scale_up", "a100", 1), ("scale_up", "t4", 1)],
    ),
    # Wait versus launch: owned GPUs that free up within the wait budget.
    "critical work waits for a preemptible Job about to pass minRuntime": Case(
        workloads=[
            running("batch", "c1", 8, "preemptible", started=NOW - 30),
            running("svc", "c2", 8, "critical"),
            pending("urgent", 4, "critical", since=NOW - 10),
        ],
        want=[],
        want_waiting=1,
    ),
    "with a zero wait budget the same critical work gets a node": Case(
        workloads=[
            running("batch", "c1", 8, "preemptible", started=NOW - 30),
            running("svc", "c2", 8, "critical"),
            pending("urgent", 4, "critical", since=NOW - 10),
        ],
        policy={"waitBudget": {"critical": "0s"}},
        want=[("scale_up", "elastic", 1)],
    ),
    "standard work waits for a Job that ends within its budget": Case(
        workloads=[
            running("train", "c1", 8, started=NOW - 3480, expected=3600),
            running("svc", "c2", 8, "critical"),
            pending("next", 8),
        ],
        want=[],
        want_waiting=1,
    ),
    "standard work does not wait for a Job that ends after its budget": Case(
        workloads=[
            running("train", "c1", 8, started=NOW - 1800, expected=3600),
            running("svc", "c2", 8, "critical"),
            pending("next", 8),
        ],
        want=[("scale_up", "elastic", 1)],
    ),
    "a Job past its expected duration counts as ending now": Case(
        workloads=[
            running("train", "c1", 8, started=NOW - 7200, expected=3600),
            running("svc", "c2", 8, "critical"),
            pending("next", 8),
        ],
        want=[],
        want_waiting=1,
    ),
    "work whose end nobody states is not waited for": Case(
        workloads=[
            running("train", "c1", 8, started=NOW - 7200),
            running("svc", "c2", 8, "critical"),
            pending("next", 8),
        ],
        want=[("scale_up", "elastic", 1)],
    ),
    "two pods never count on the same freed GPUs": Case(
        workloads=[
            running("train", "c1", 8, started=NOW - 3480, expected=3600),
            running("svc", "c2", 8, "critical"),
            pending("next", 8),
            pending("other", 8),
        ],
        want=[("scale_up", "elastic", 1)],
        want_waiting=1,
    ),
    "preemptible work waits hours for owned GPUs instead of spot": Case(
        workloads=[
            running("train", "c1", 8, started=NOW - 1800, expected=3600),
            running("svc", "c2", 8, "critical"),
            pending("batch", 8, "preemptible"),
        ],
        want=[],
        want_waiting=1,
    ),
    "preemptible work waits for free owned GPUs on several nodes to come together": Case(
        workloads=[
            running("svc", "c1", 4, "critical"),
            running("svc2", "c2", 4, "critical"),
            pending("batch", 8, "preemptible"),
        ],
        want=[],
        want_waiting=1,
    ),
    "two preemptible pods never count on the same free owned GPUs": Case(
        workloads=[
            running("svc", "c1", 4, "critical"),
            running("svc2", "c2", 4, "critical"),
            pending("batch", 8, "preemptible"),
            pending("other", 8, "preemptible"),
        ],
        want=[("scale_up", "spot", 1)],
        want_waiting=1,
    ),
    "firm work does not wait for free owned GPUs split over nodes": Case(
        workloads=[
            running("svc", "c1", 4, "critical"),
            running("svc2", "c2", 4, "critical"),
            pending("next", 8),
        ],
        want=[("scale_up", "elastic", 1)],
    ),
    "preemptible work past its wait budget gets spot, owned GPUs split or not": Case(
        workloads=[
            running("svc", "c1", 4, "critical"),
            running("svc2", "c2", 4, "critical"),
            pending("batch", 8, "preemptible", created=NOW - 3 * 3600),
        ],
        want=[("scale_up", "spot", 1)],
    ),
    "the wait budget counts the Job's whole delay since its creation": Case(
        workloads=[
            running("train", "c1", 8, started=NOW - 1800, expected=3600),
            running("svc", "c2", 8, "critical"),
            pending("batch", 8, "preemptible", created=NOW - 3 * 3600),
        ],
        want=[("scale_up", "spot", 1)],
    ),
    "a preempted Job waits in the queue when other owned GPUs free up for it": Case(
        workloads=[
            running("batch", "c1", 8, "preemptible"),
            running("train", "c2", 8, started=NOW - 1800, expected=3600),
            pending("urgent", 8, "critical"),
        ],
        want=[("preempt", "team/batch", None)],
        want_waiting=1,
    ),
    # Return to core: standard Jobs that opt in (hybridgpu.io/return-to-core).
    "an opted-in standard Job alone on an elastic node returns to free owned GPUs": Case(
        nodes=[*CORE_NODES, node("e1", "elastic")],
        workloads=[
            running("svc", "c2", 8, "critical"),
            running("train", "e1", 8, started=NOW - 7200, checkpoint=1800, returns=True),
        ],
        want=[("consolidate", "team/train", "core")],
    ),
    "an opted-in standard Job returns to GPUs of preemptible work, which goes to spot": Case(
        nodes=[*CORE_NODES, node("e1", "elastic")],
        workloads=[
            running("svc", "c2", 8, "critical"),
            running("batch", "c1", 8, "preemptible", started=NOW - 600, checkpoint=1800),
            running("train", "e1", 8, started=NOW - 7200, checkpoint=1800, returns=True),
        ],
        want=[
            ("preempt", "team/batch", "spot"),
            ("consolidate", "team/train", "core"),
            ("scale_up", "spot", 1),
        ],
    ),
    "critical work on an owned node is never preempted for a returning Job": Case(
        nodes=[*CORE_NODES, node("e1", "elastic")],
        workloads=[
            running("svc", "c2", 8, "critical"),
            running("api", "c1", 1, "critical"),
            running("batch", "c1", 7, "preemptible", started=NOW - 600, checkpoint=1800),
            running("train", "e1", 8, started=NOW - 7200, checkpoint=1800, returns=True),
        ],
        want=[],
    ),
    "a returning Job does not preempt when the victims' spot nodes eat the saving": Case(
        # 1 GPU back from a $3.06/h node; the 1-GPU victim would need an 8-GPU spot node.
        pools=[
            STANDARD_POOLS[0],
            pool("elastic", "elastic", per_node=1, price=3.06),
            pool("spot", "spot", price=7.34),
        ],
        nodes=[*CORE_NODES, node("e1", "elastic", gpus=1)],
        workloads=[
            running("svc", "c2", 8, "critical"),
            *[
                running(f"b{i}", "c1", 1, "preemptible", started=NOW - 600, checkpoint=1800)
                for i in range(8)
            ],
            running("train", "e1", 1, started=NOW - 7200, checkpoint=1800, returns=True),
        ],
        want=[],
    ),
    # Return to core: preemptible Jobs that leave most of a multi-GPU cloud node empty.
    "preemptible Jobs on a mostly empty spot node return to free owned GPUs": Case(
        nodes=[*CORE_NODES, node("s1", "spot")],
        workloads=[
            running("svc", "c2", 8, "critical"),
            # Checkpoints every 30 minutes, the last one just now.
            running("batch", "s1", 2, "preemptible", started=NOW - 7200, checkpoint=1800),
            running("etl", "s1", 1, "preemptible", started=NOW - 3600, checkpoint=1800),
        ],
        want=[("consolidate", "team/batch", "core"), ("consolidate", "team/etl", "core")],
    ),
    "preemptible Jobs that use most of their spot node stay there": Case(
        nodes=[*CORE_NODES, node("s1", "spot")],
        workloads=[
            running("svc", "c2", 8, "critical"),
            running("batch", "s1", 4, "preemptible", started=NOW - 7200, checkpoint=1800),
            running("etl", "s1", 1, "preemptible", started=NOW - 3600, checkpoint=1800),
        ],
        want=[],
    ),
    "a preemptible Job alone on a 1-GPU spot node stays there": Case(
        nodes=[*CORE_NODES, node("s1", "spot", gpus=1)],
        pools=[*STANDARD_POOLS[:2], pool("spot", "spot", per_node=1, price=0.92)],
        workloads=[
            running("svc", "c2", 8, "critical"),
            running("batch", "s1", 1, "preemptible", started=NOW - 7200, checkpoint=1800),
        ],
        want=[],
    ),
    "a preemptible Job that states no checkpoint interval stays on its spot node": Case(
        nodes=[*CORE_NODES, node("s1", "spot")],
        workloads=[
            running("svc", "c2", 8, "critical"),
            running("batch", "s1", 2, "preemptible", started=NOW - 7200),
        ],
        want=[],
    ),
    "a standard Job that did not opt in stays in the cloud": Case(
        nodes=[*CORE_NODES, node("e1", "elastic")],
        workloads=[
            running("svc", "c2", 8, "critical"),
            running("train", "e1", 8, started=NOW - 7200, checkpoint=1800),
        ],
        want=[],
    ),
    "a critical Job never moves back, opted in or not": Case(
        nodes=[*CORE_NODES, node("e1", "elastic")],
        workloads=[
            running("svc", "c2", 8, "critical"),
            running("api", "e1", 8, "critical", started=NOW - 7200, returns=True),
        ],
        want=[],
    ),
    "no return while other work keeps the cloud node busy": Case(
        nodes=[*CORE_NODES, node("e1", "elastic")],
        workloads=[
            running("svc", "c2", 8, "critical"),
            running("train", "e1", 4, started=NOW - 7200, returns=True),
            running("web", "e1", 4, started=NOW - 7200),
        ],
        want=[],
    ),
    "no return without free owned GPUs": Case(
        nodes=[*CORE_NODES, node("e1", "elastic")],
        workloads=[
            running("svc", "c1", 8, "critical"),
            running("svc2", "c2", 4, "critical"),
            running("train", "e1", 8, started=NOW - 7200, returns=True),
        ],
        want=[],
    ),
    "no return when the restart throws away more than the move saves": Case(
        nodes=[*CORE_NODES, node("e1", "elastic")],
        workloads=[
            running("svc", "c2", 8, "critical"),
            # Ran 3 minutes: its estimated 3 minutes left save less than a restart loses.
            running("train", "e1", 8, started=NOW - 180, returns=True),
        ],
        want=[],
    ),
    "no return for a Job that says it is almost done": Case(
        nodes=[*CORE_NODES, node("e1", "elastic")],
        workloads=[
            running("svc", "c2", 8, "critical"),
            running("train", "e1", 8, started=NOW - 7200, expected=7500, returns=True),
        ],
        want=[],
    ),
    # Preemptible work that fills most of its cloud node comes back only to owned nodes idle
    # for their idleFor: sent back to owned GPUs free now, it was preempted again by firm
    # work (docs/benchmarks.md). Half a node or less comes back to owned GPUs free now.
    "preemptible work on a half-empty spot node returns to owned GPUs free but not idle": Case(
        nodes=[*CORE_NODES, node("s1", "spot")],
        workloads=[
            running("svc", "c1", 4, "critical"),
            running("svc2", "c2", 8, "critical"),
            running("batch", "s1", 4, "preemptible", started=NOW - 7200, checkpoint=1800),
        ],
        want=[("consolidate", "team/batch", "core")],
    ),
    "a preemptible Job already late by most of its wait budget stays on spot": Case(
        nodes=[*CORE_NODES, node("s1", "spot")],
        workloads=[
            running("svc", "c1", 4, "critical"),
            running("svc2", "c2", 8, "critical"),
            # Created 100 minutes before this run started: 100 + 10 + 30 minutes > 2 hours.
            running(
                "batch",
                "s1",
                4,
                "preemptible",
                started=NOW - 7200,
                checkpoint=1800,
                created=NOW - 7200 - 6000,
            ),
        ],
        want=[],
    ),
    "a preemptible Job its owner pinned to spot stays there": Case(
        nodes=[*CORE_NODES, node("s1", "spot")],
        workloads=[
            running("svc", "c1", 4, "critical"),
            running("svc2", "c2", 8, "critical"),
            running(
                "batch",
                "s1",
                4,
                "preemptible",
                started=NOW - 7200,
                checkpoint=1800,
                pool_pin="spot",
            ),
        ],
        want=[],
    ),
    "elastic scale-up picks the cheapest pool per GPU": Case(
        nodes=[],
        pools=[pool("dear", "elastic", price=30.0), pool("cheap", "elastic", price=20.0)],
        workloads=[pending("p", 8)],
        want=[("scale_up", "cheap", 1)],
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_decide(case: Case) -> None:
    workloads = [
        (
            pod,
            replace(job, pinned_by_operator=True)
            if job and job.key in case.moved_by_operator
            else job,
        )
        for pod, job in case.workloads
    ]
    snap = snapshot(case.pools, case.nodes, workloads, metrics=case.metrics, spent=case.spent)
    plan = decide(snap, policy(**case.policy), NOW)
    assert summary(plan) == case.want, plan.explain()
    blocked = [(b.pool, b.cause, b.nodes) for b in plan.blocked]
    assert blocked == case.want_blocked, plan.explain()
    if any(c.startswith("budget") for _, c, _ in case.want_blocked):
        assert plan.budget_exceeded
    waiting = [n for n in plan.notes if "wait for owned GPUs" in n]
    assert [int(n.split()[0]) for n in waiting] == (
        [case.want_waiting] if case.want_waiting else []
    )


def test_every_action_says_why() -> None:
    snap = snapshot(
        list(STANDARD_POOLS),
        CORE_NODES,
        [
            running("batch", "c1", 8, "preemptible"),
            running("s", "c2", 8, "critical"),
            pending("urgent", 4, "critical"),
            pending("std", 8),
        ],
    )
    plan = decide(snap, policy(), NOW)
    assert plan.actions
    for action in plan.actions:
        assert len(action.reason) > 20
    assert any("team/urgent-pod" in a.reason for a in plan.actions)


def test_a_plan_that_waits_says_when_to_look_again() -> None:
    # The victim may be preempted at NOW + 30, before the budget ends at NOW + 50.
    snap = snapshot(
        list(STANDARD_POOLS),
        CORE_NODES,
        [
            running("batch", "c1", 8, "preemptible", started=NOW - 30),
            running("svc", "c2", 8, "critical"),
            pending("urgent", 4, "critical", since=NOW - 10),
        ],
    )
    plan = decide(snap, policy(), NOW)
    assert not plan.actions, plan.explain()
    assert plan.recheck_at == NOW + 30


def test_a_wait_on_an_overdue_job_is_looked_at_again_when_its_budget_ends() -> None:
    snap = snapshot(
        list(STANDARD_POOLS),
        CORE_NODES,
        [
            running("train", "c1", 8, started=NOW - 7200, expected=3600),
            running("svc", "c2", 8, "critical"),
            pending("next", 8, since=NOW - 60),
        ],
    )
    plan = decide(snap, policy(), NOW)
    assert not plan.actions, plan.explain()
    assert plan.recheck_at == NOW - 60 + 300  # the standard budget, 5 minutes


def test_a_plan_without_waits_goes_stale_only_when_the_cluster_changes() -> None:
    snap = snapshot(list(STANDARD_POOLS), CORE_NODES, [pending("a", 4), pending("b", 8)])
    assert decide(snap, policy(), NOW).recheck_at is None


def test_a_returning_job_between_checkpoints_moves_after_its_next_one() -> None:
    snap = snapshot(
        list(STANDARD_POOLS),
        [*CORE_NODES, node("e1", "elastic")],
        [
            running("svc", "c2", 8, "critical"),
            # Checkpoints every 30 minutes; the last one was 10 minutes ago.
            running("train", "e1", 8, started=NOW - 7800, checkpoint=1800, returns=True),
        ],
    )
    plan = decide(snap, policy(), NOW)
    assert not plan.actions, plan.explain()
    assert plan.recheck_at == NOW + 1200
    later = decide(replace(snap, taken_at=NOW + 1200), policy(), NOW + 1200)
    (move,) = later.actions
    assert isinstance(move, MoveJob)
    assert (move.kind.value, move.job_key, move.to_pool) == ("consolidate", "team/train", "core")


def test_a_returning_jobs_checkpoints_count_from_its_pods_start_not_the_jobs() -> None:
    # A Kubernetes Job's status.startTime is set when it starts, before its pod has a node:
    # here the elastic node took 5 minutes to boot. Its checkpoints are its pod's (the last
    # one 10 minutes ago): counted from the Job's start it would move 5 minutes before the
    # next one and throw 25 minutes of 8 GPUs' work away.
    pod, job = running("train", "e1", 8, started=NOW - 7800, checkpoint=1800, returns=True)
    assert job is not None
    snap = snapshot(
        list(STANDARD_POOLS),
        [*CORE_NODES, node("e1", "elastic")],
        [running("svc", "c2", 8, "critical"), (pod, replace(job, started_at=NOW - 8100))],
    )
    plan = decide(snap, policy(), NOW)
    assert not plan.actions, plan.explain()
    assert plan.recheck_at == NOW + 1200


def test_a_full_cheaper_pool_does_not_hide_one_with_room() -> None:
    """Found by the flapping property: a 1-GPU pod whose cheapest pool (1-GPU nodes) is at
    maxNodes was reported blocked there, while the 4-GPU pool had room and only the per-tick
    cap held it; the next tick then grew that pool, a scale-up the plan had not announced."""
    pools = [
        pool("elastic", "elastic", per_node=4, max_nodes=2, idle_for="5m"),
        pool("elastic-small", "elastic", per_node=1, max_nodes=0, price=4.8, idle_for="5m"),
    ]
    w = [pending("p1", 4, "critical", since=NOW - 10), pending("p2", 1, "critical", since=NOW - 10)]
    spec = policy(scaleUp={"maxNodesPerTick": 1})
    plan = decide(snapshot(pools, [], w), spec, NOW)
    assert [(a.pool, a.nodes) for a in plan.actions if isinstance(a, ScaleUp)] == [("elastic", 1)]
    assert [(b.pool, b.cause) for b in plan.blocked] == [("elastic", "max_per_tick")]


def test_work_the_hourly_budget_held_back_gets_its_node_once_a_release_frees_budget() -> None:
    """The flapping property's second example: the first plan releases an idle spot node
    and says one pod waits for the hourly budget; the next plan, with that node gone, buys
    the node for that pod: its first helping, announced, not a second one."""
    from hybridgpu.core.apply import apply_plan

    pools = [
        pool("core", "core", per_node=4, max_nodes=2),
        pool("spot", "spot", per_node=4, max_nodes=4, idle_for="5m"),
        pool("elastic-small", "elastic", per_node=2, max_nodes=2, price=9.6, idle_for="5m"),
    ]
    nodes = [node("c0", "core", 4), node("c1", "core", 4)]
    for name, idle, deadline in (
        ("s0", NOW - 30, NOW + 100),
        ("s1", NOW - 30, NOW + 100),
        ("s2", NOW - 3600, None),
        ("s3", NOW - 30, NOW + 100),
    ):
        nodes.append(
            node(
                name,
                "spot",
                4,
                idle_since=idle,
                utilization_percent=0.0,
                interruption_deadline=deadline,
            )
        )
    w = [running("r1", "c0", 4, "critical"), running("r2", "c1", 3, "critical")]
    w += [pending(f"p{i}", 1, "critical", since=NOW - 10) for i in range(4)]
    spec = policy(
        budget={"maxHourlyCost": 50.0},
        scaleUp={"maxNodesPerTick": 2},
        disruption={"maxNodesPerTick": 1},
    )
    first = decide(snapshot(pools, nodes, w), spec, NOW)
    assert [(a.pool, a.nodes) for a in first.actions if isinstance(a, ScaleUp)] == [
        ("elastic-small", 1)
    ]
    assert [(b.pool, b.cause) for b in first.blocked] == [("elastic-small", "budget_hourly")]
    second = decide(apply_plan(snapshot(pools, nodes, w), first, NOW + 30), spec, NOW + 30)
    assert [(a.pool, a.nodes) for a in second.actions if isinstance(a, ScaleUp)] == [
        ("elastic-small", 1)
    ]
