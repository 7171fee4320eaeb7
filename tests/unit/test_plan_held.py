"""currentNodes read from the GPUPools a CapacityPlan names (candidates[].pool,
committed[].pool): owned nodes counted by the pool's selector, a committed pool's commitment
and term start; explicit spec values override; bad references are one line."""

from __future__ import annotations

import re
from typing import Any

import pytest

from hybridgpu.models.capacityplan import CapacityPlanSpec
from hybridgpu.planner.held import (
    SECONDS_PER_MONTH,
    months_into_term,
    parse_time_seconds,
    pool_holdings,
    with_held_capacity,
)

pytestmark = pytest.mark.unit

NOW = parse_time_seconds("2026-12-01T00:00:00Z")


def pool(name: str, tier: str, *, committed: dict[str, Any] | None = None, **spec: Any) -> Any:
    body: dict[str, Any] = {
        "tier": tier,
        "gpu": {"model": "H100", "perNode": 8},
        "maxNodes": 10,
        "pricing": {"capexPerNode": 280000} if tier == "core" else {"perNodeHour": 55.0},
    }
    if tier != "core":
        body["provider"] = {"type": "kwok"}
    if committed is not None:
        body["committed"] = committed
        body["maxNodes"] = committed["nodes"]
    return {
        "metadata": {"name": name, "creationTimestamp": "2026-02-10T00:00:00Z"},
        "spec": body | spec,
    }


def node(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}}


def spec_body(**extra: Any) -> dict[str, Any]:
    """A CapacityPlan spec as the apiserver stores it (only the fields given)."""
    candidate = {"name": "8xH100", "gpusPerNode": 8, "capexPerNode": 280000}
    candidate |= {"powerWattsPerNode": 10200} | extra.pop("candidate", {})
    return {
        "history": {"trace": {"path": "x.csv", "format": "csv"}},
        "candidates": [candidate],
        "cloud": {"onDemandPerGpuHour": 6.88, "spotPerGpuHour": 2.75},
        "committed": extra.pop("committed", []),
    }


def plan_spec(**extra: Any) -> CapacityPlanSpec:
    return CapacityPlanSpec.model_validate(spec_body(**extra))


POOLS = [
    pool("core", "core"),
    pool("reserved", "elastic", committed={"nodes": 3, "termYears": 1, "perNodeHour": 30.0}),
    pool(
        "lease",
        "elastic",
        committed={"nodes": 2, "termYears": 3, "perNodeHour": 25.0, "termStart": "2025-03-01"},
    ),
    pool("picky", "core", nodeSelector={"rack": "r7"}),
]
NODES = [
    node("a", {"hybridgpu.io/pool": "core"}),
    node("b", {"hybridgpu.io/pool": "core"}),
    node("c", {"hybridgpu.io/pool": "core", "rack": "r7"}),
    node("d", {"rack": "r7"}),
    node("e", {"hybridgpu.io/pool": "reserved"}),
    node("cpu", {}),
]


def test_pools_count_their_nodes_by_selector_and_carry_their_commitment():
    held = pool_holdings(POOLS, NODES)
    # "c" carries both labels: the first pool by name whose selector matches takes it, as
    # the operator assigns nodes ("core" before "picky").
    assert held["core"].nodes == 3 and held["picky"].nodes == 1
    assert held["reserved"].committed_nodes == 3 and held["reserved"].committed_term_years == 1
    # No termStart: the pool's creation; with one: that date (UTC).
    assert held["reserved"].term_start_seconds == parse_time_seconds("2026-02-10T00:00:00Z")
    assert held["lease"].term_start_seconds == parse_time_seconds("2025-03-01T00:00:00+00:00")
    assert held["core"].committed_nodes is None


def test_current_nodes_and_term_start_come_from_the_pools():
    spec = plan_spec(
        candidate={"pool": "core"},
        committed=[
            {"name": "1y", "termYears": 1, "discountPercent": 37, "pool": "reserved"},
            {"name": "3y", "termYears": 3, "discountPercent": 55, "pool": "lease"},
        ],
    )
    out, held = with_held_capacity(spec, pool_holdings(POOLS, NODES), NOW)
    assert out.candidates[0].current_nodes == 3
    one, three = out.committed
    assert one.current_nodes == 3
    # 2026-02-10 to 2026-12-01: 9 whole months (of 30.44 days) into the 1-year term.
    assert one.term_started_months_ago == 9
    # 2025-03-01 to 2026-12-01: 21 months into the 3-year term.
    assert (three.current_nodes, three.term_started_months_ago) == (2, 21)
    assert [(h.name, h.kind, h.nodes, h.source) for h in held] == [
        ("8xH100", "owned", 3, "GPUPool core"),
        ("1y", "committed", 3, "GPUPool reserved"),
        ("3y", "committed", 2, "GPUPool lease"),
    ]


def test_explicit_values_override_the_pools():
    spec = plan_spec(
        candidate={"pool": "core", "currentNodes": 0},
        committed=[
            {
                "name": "1y",
                "termYears": 1,
                "discountPercent": 37,
                "pool": "reserved",
                "termStartedMonthsAgo": 2,
            }
        ],
    )
    out, held = with_held_capacity(spec, pool_holdings(POOLS, NODES), NOW)
    assert out.candidates[0].current_nodes == 0
    assert (out.committed[0].current_nodes, out.committed[0].term_started_months_ago) == (3, 2)
    assert held[0].source == "spec"


def test_a_term_that_ended_renewed():
    start = NOW - 14.5 * SECONDS_PER_MONTH
    assert months_into_term(start, NOW, 1) == 2
    assert months_into_term(start, NOW, 3) == 14
    assert months_into_term(NOW + 86400, NOW, 1) == 0


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"candidate": {"pool": "nope"}}, "candidates[0].pool: no valid GPUPool named nope"),
        ({"candidate": {"pool": "reserved"}}, "GPUPool reserved is tier elastic, not core"),
        (
            {"committed": [{"name": "x", "termYears": 1, "discountPercent": 9, "pool": "core"}]},
            "committed[0].pool: GPUPool core has no spec.committed",
        ),
        (
            {
                "committed": [
                    {"name": "x", "termYears": 3, "discountPercent": 9, "pool": "reserved"}
                ]
            },
            "committed for 1 year(s), the offer's term is 3",
        ),
        (
            {
                "committed": [
                    {
                        "name": "x",
                        "termYears": 1,
                        "discountPercent": 9,
                        "gpusPerNode": 4,
                        "pool": "reserved",
                    }
                ]
            },
            "has 8 GPUs per node, the offer commits nodes of 4",
        ),
    ],
)
def test_bad_pool_references_are_one_line(extra, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        with_held_capacity(plan_spec(**extra), pool_holdings(POOLS, NODES), NOW)


def test_the_capacityplan_status_starts_from_the_pools(tmp_path):
    """compute_status with the pools read: status.held says what was read and from where,
    the saving versus today's fleet is against the 3 owned nodes counted, and the held
    commitment is in the plan (paid until its term ends); without a way to read the pools
    the plan is not computed and a condition says why."""
    from hybridgpu.handlers.capacityplan import compute_status

    trace = tmp_path / "demand.csv"
    trace.write_text("time,standard\n" + "".join(f"{h * 3600},40\n" for h in range(48)))
    spec = spec_body(
        candidate={"pool": "core"},
        committed=[{"name": "1y", "termYears": 1, "discountPercent": 37, "pool": "reserved"}],
    ) | {"history": {"trace": {"path": str(trace), "format": "demand"}}}
    holdings = pool_holdings(POOLS, NODES)
    status = compute_status(spec, {}, 1, NOW, lambda: holdings)
    assert {c["type"]: c["status"] for c in status["conditions"]}["Ready"] == "True", status
    assert status["held"] == [
        {"name": "8xH100", "kind": "owned", "nodes": 3, "source": "GPUPool core"},
        {
            "name": "1y",
            "kind": "committed",
            "nodes": 3,
            "termStartedMonthsAgo": 9,
            "source": "GPUPool reserved",
        },
    ]
    assert [c["offer"] for c in status["procurement"]["commitments"]] == ["1y"]
    blind = compute_status(spec, {}, 1, NOW, None)
    ready = {c["type"]: c for c in blind["conditions"]}["Ready"]
    assert ready["status"] == "False" and ready["reason"] == "PoolsUnavailable"
    wrong = spec | {"candidates": [spec["candidates"][0] | {"pool": "gone"}]}
    ready = {
        c["type"]: c for c in compute_status(wrong, {}, 1, NOW, lambda: holdings)["conditions"]
    }
    assert ready["Ready"]["reason"] == "InvalidSpec"
    assert "no valid GPUPool named gone" in ready["Ready"]["message"]
