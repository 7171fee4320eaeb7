"""core.admission: the pod changes and refusals of the admission webhook, table-driven.

Each mutation case applies the returned JSON patch to the pod (as the apiserver does) and
checks the pod that results, so an operation that does not apply fails here.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import jsonpatch
import pytest
from tests.support import builders

from hybridgpu.core.admission import (
    AdmissionRules,
    PriorityClassRef,
    mutation,
    not_admitted,
    rejection,
)
from hybridgpu.core.decide import decide
from hybridgpu.models.actions import ScaleUp
from hybridgpu.models.pool import Taint
from hybridgpu.models.snapshot import Criticality

pytestmark = pytest.mark.unit

TIER, POOL = "hybridgpu.io/tier", "hybridgpu.io/pool"
SPOT_TAINT = Taint(key="hybridgpu.io/spot", value="true", effect="NoSchedule")
SPOT_TOLERATION = {
    "key": "hybridgpu.io/spot",
    "operator": "Equal",
    "value": "true",
    "effect": "NoSchedule",
}
CLASSES = {
    Criticality.CRITICAL: PriorityClassRef("hybridgpu-critical", 100000),
    Criticality.STANDARD: PriorityClassRef("hybridgpu-standard", 0),
    Criticality.PREEMPTIBLE: PriorityClassRef("hybridgpu-preemptible", -100000, "Never"),
}
TO_CORE_OR_SPOT = {"key": TIER, "operator": "In", "values": ["core", "spot"]}


def rules(**overrides: Any) -> AdmissionRules:
    defaults: dict[str, Any] = {
        "tier_label": TIER,
        "pool_label": POOL,
        "priority_classes": CLASSES,
        "spot_pools": {"spot-a": (SPOT_TAINT,), "spot-b": (SPOT_TAINT,)},
    }
    return AdmissionRules(**(defaults | overrides))


def required_terms(*terms: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": t} for t in terms]
            }
        }
    }


def pod_spec(**spec: Any) -> dict[str, Any]:
    # What the apiserver's Priority plugin leaves before mutating webhooks: priority 0.
    return {"containers": [{"name": "train"}], "priority": 0, **spec}


def patched(spec: dict[str, Any], ops: list[Any]) -> dict[str, Any]:
    pod = {"metadata": {}, "spec": copy.deepcopy(spec)}
    return dict(jsonpatch.apply_patch(pod, ops)["spec"])


# ------------------------------------------------------------------------------ mutation


@dataclass
class MutationCase:
    criticality: Criticality | None
    spec: dict[str, Any] = field(default_factory=pod_spec)
    rules: AdmissionRules = field(default_factory=rules)
    want_class: tuple[str | None, int, str | None] | None = None
    """(priorityClassName, priority, preemptionPolicy) after the patch; None: unchanged."""
    want_affinity: dict[str, Any] | None = None
    """The pod's affinity after the patch; None: unchanged."""


MUTATION_CASES = {
    "no label: untouched": MutationCase(None),
    "critical: critical class, any tier": MutationCase(
        Criticality.CRITICAL, want_class=("hybridgpu-critical", 100000, "PreemptLowerPriority")
    ),
    "standard: standard class, any tier": MutationCase(
        Criticality.STANDARD, want_class=("hybridgpu-standard", 0, "PreemptLowerPriority")
    ),
    "preemptible: never-preempting class, core or spot only": MutationCase(
        Criticality.PREEMPTIBLE,
        want_class=("hybridgpu-preemptible", -100000, "Never"),
        want_affinity=required_terms([TO_CORE_OR_SPOT]),
    ),
    "preemptible, on-demand allowed: class only": MutationCase(
        Criticality.PREEMPTIBLE,
        rules=rules(allow_on_demand_for_preemptible=True),
        want_class=("hybridgpu-preemptible", -100000, "Never"),
    ),
    "a class the pod names itself is kept": MutationCase(
        Criticality.CRITICAL, spec=pod_spec(priorityClassName="team-gold")
    ),
    "class missing from the cluster: no class": MutationCase(
        Criticality.PREEMPTIBLE,
        rules=rules(priority_classes={}),
        want_affinity=required_terms([TO_CORE_OR_SPOT]),
    ),
    "preemptible: the tier is ANDed into every existing term": MutationCase(
        Criticality.PREEMPTIBLE,
        spec=pod_spec(
            priorityClassName="x",
            affinity={
                **required_terms(
                    [{"key": "zone", "operator": "In", "values": ["a"]}],
                    [{"key": "zone", "operator": "In", "values": ["b"]}],
                ),
                "podAntiAffinity": {"preferred": "kept"},
            },
        ),
        want_affinity={
            **required_terms(
                [{"key": "zone", "operator": "In", "values": ["a"]}, TO_CORE_OR_SPOT],
                [{"key": "zone", "operator": "In", "values": ["b"]}, TO_CORE_OR_SPOT],
            ),
            "podAntiAffinity": {"preferred": "kept"},
        },
    ),
    "preemptible already held to spot by affinity: unchanged": MutationCase(
        Criticality.PREEMPTIBLE,
        spec=pod_spec(
            priorityClassName="x",
            affinity=required_terms([{"key": TIER, "operator": "In", "values": ["spot"]}]),
        ),
    ),
    "preemptible already held to core by nodeSelector: unchanged": MutationCase(
        Criticality.PREEMPTIBLE,
        spec=pod_spec(priorityClassName="x", nodeSelector={TIER: "core"}),
    ),
    "preemptible pinned to elastic: the policy still holds it to core or spot": MutationCase(
        Criticality.PREEMPTIBLE,
        spec=pod_spec(priorityClassName="x", nodeSelector={TIER: "elastic"}),
        want_affinity=required_terms([TO_CORE_OR_SPOT]),
    ),
}


PREFER_CORE = {
    "weight": 100,
    "preference": {"matchExpressions": [{"key": TIER, "operator": "In", "values": ["core"]}]},
}
ZONE_A = {
    "weight": 10,
    "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
}


def preferred(*terms: dict[str, Any], required: dict[str, Any] | None = None) -> dict[str, Any]:
    node_affinity = dict((required or {}).get("nodeAffinity") or {})
    node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = list(terms)
    return {"nodeAffinity": node_affinity}


def owned_first(**overrides: Any) -> AdmissionRules:
    """The webhook's rules: every labelled pod prefers owned nodes."""
    return rules(preferred_tier="core", **overrides)


MUTATION_CASES |= {
    "owned first: a critical pod prefers core nodes": MutationCase(
        Criticality.CRITICAL,
        spec=pod_spec(priorityClassName="x"),
        rules=owned_first(),
        want_affinity=preferred(PREFER_CORE),
    ),
    "owned first: preemptible gets both, in one affinity": MutationCase(
        Criticality.PREEMPTIBLE,
        spec=pod_spec(priorityClassName="x"),
        rules=owned_first(),
        want_affinity=preferred(PREFER_CORE, required=required_terms([TO_CORE_OR_SPOT])),
    ),
    "owned first: the pod's own preferences are kept, the tier's added": MutationCase(
        Criticality.STANDARD,
        spec=pod_spec(priorityClassName="x", affinity=preferred(ZONE_A)),
        rules=owned_first(),
        want_affinity=preferred(ZONE_A, PREFER_CORE),
    ),
    "owned first: a pod preferring a tier itself keeps its choice": MutationCase(
        Criticality.STANDARD,
        spec=pod_spec(
            priorityClassName="x",
            affinity=preferred(
                {"weight": 5, "preference": {"matchExpressions": [TO_CORE_OR_SPOT]}}
            ),
        ),
        rules=owned_first(),
    ),
    "owned first: a pod selecting its tier is not told to prefer another": MutationCase(
        Criticality.STANDARD,
        spec=pod_spec(priorityClassName="x", nodeSelector={TIER: "elastic"}),
        rules=owned_first(),
    ),
    "owned first: a pod pinned to a pool (a move) is left as the pin says": MutationCase(
        Criticality.PREEMPTIBLE,
        spec=pod_spec(priorityClassName="x", nodeSelector={POOL: "elastic-a"}),
        rules=owned_first(),
    ),
}


@pytest.mark.parametrize("case", MUTATION_CASES.values(), ids=MUTATION_CASES.keys())
def test_mutation(case: MutationCase) -> None:
    ops = mutation(case.criticality, case.spec, case.rules)
    after = patched(case.spec, ops)
    if case.want_class is None:
        for key in ("priorityClassName", "priority", "preemptionPolicy"):
            assert after.get(key) == case.spec.get(key), key
    else:
        got = (after.get("priorityClassName"), after["priority"], after.get("preemptionPolicy"))
        assert got == case.want_class
    if case.want_affinity is None:
        assert after.get("affinity") == case.spec.get("affinity")
    else:
        assert after["affinity"] == case.want_affinity
    if case.want_class is None and case.want_affinity is None:
        assert ops == []
    assert mutation(case.criticality, after, case.rules) == [], "a second pass changes more"


# ------------------------------------------------------------------------------ rejection


def spot_only(**extra: Any) -> dict[str, Any]:
    return pod_spec(tolerations=[SPOT_TOLERATION], **extra)


REJECTION_CASES: dict[str, tuple[Criticality | None, dict[str, Any], bool]] = {
    "critical, spot toleration + tier selector": (
        Criticality.CRITICAL,
        spot_only(nodeSelector={TIER: "spot"}),
        True,
    ),
    "critical, spot toleration + spot pool selector": (
        Criticality.CRITICAL,
        spot_only(nodeSelector={POOL: "spot-a"}),
        True,
    ),
    "critical, spot toleration + affinity to spot pools": (
        Criticality.CRITICAL,
        spot_only(affinity=required_terms([{"key": POOL, "operator": "In", "values": ["spot-a"]}])),
        True,
    ),
    "critical, tolerate-everything + tier affinity": (
        Criticality.CRITICAL,
        pod_spec(
            tolerations=[{"operator": "Exists"}],
            affinity=required_terms([{"key": TIER, "operator": "In", "values": ["spot"]}]),
        ),
        True,
    ),
    "critical, spot toleration but may also run elsewhere": (
        Criticality.CRITICAL,
        spot_only(),
        False,
    ),
    "critical, one affinity term admits elastic": (
        Criticality.CRITICAL,
        spot_only(
            affinity=required_terms(
                [{"key": TIER, "operator": "In", "values": ["spot"]}],
                [{"key": TIER, "operator": "In", "values": ["elastic"]}],
            )
        ),
        False,
    ),
    "critical, spot selector without the toleration (cannot land there at all)": (
        Criticality.CRITICAL,
        pod_spec(nodeSelector={TIER: "spot"}),
        False,
    ),
    "critical, toleration of another taint": (
        Criticality.CRITICAL,
        pod_spec(
            nodeSelector={TIER: "spot"},
            tolerations=[{"key": "other", "operator": "Exists"}],
        ),
        False,
    ),
    "preemptible on spot only": (
        Criticality.PREEMPTIBLE,
        spot_only(nodeSelector={TIER: "spot"}),
        False,
    ),
    "standard on spot only": (Criticality.STANDARD, spot_only(nodeSelector={TIER: "spot"}), False),
    "no label": (None, spot_only(nodeSelector={TIER: "spot"}), False),
}


@pytest.mark.parametrize(
    ("criticality", "spec", "refused"), REJECTION_CASES.values(), ids=REJECTION_CASES.keys()
)
def test_rejection(criticality: Criticality | None, spec: dict[str, Any], refused: bool) -> None:
    reason = rejection(criticality, spec, rules())
    if refused:
        assert reason is not None and "spot" in reason
    else:
        assert reason is None


# ------------------------------------------------------------------------------ decide agrees


def _scale_ups(plan: Any) -> dict[str, int]:
    return {a.pool: a.nodes for a in plan.actions if isinstance(a, ScaleUp)}


DECIDE_CASES = {
    # (pools, allow on-demand for preemptible, want scale-ups, want blocked pools)
    "free elastic node, spot pool: scale spot, the pod may not use elastic": (
        ["elastic-free", "spot"],
        False,
        {"spot": 1},
        set(),
    ),
    "free elastic node, on-demand allowed: it lands there, nothing to buy": (
        ["elastic-free", "spot"],
        True,
        {},
        set(),
    ),
    "no spot pool: blocked rather than elastic": (["elastic"], False, {}, {"-"}),
    "no spot pool, on-demand allowed: scale elastic": (["elastic"], True, {"elastic": 1}, set()),
}


@pytest.mark.parametrize(
    ("pools", "allow", "want_scale", "want_blocked"),
    DECIDE_CASES.values(),
    ids=DECIDE_CASES.keys(),
)
def test_decide_plans_preemptible_work_where_admission_lets_it_run(
    pools: list[str], allow: bool, want_scale: dict[str, int], want_blocked: set[str]
) -> None:
    """decide() must not count on capacity the webhook keeps preemptible pods off: a pod
    planned onto a free elastic node would stay Pending with nothing bought for it."""
    states = [builders.pool("elastic", "elastic")]
    nodes = []
    if "elastic-free" in pools:
        nodes.append(builders.node("e1", "elastic"))
    if "spot" in pools:
        states.append(builders.pool("spot", "spot"))
    plan = decide(
        builders.snapshot(states, nodes, [builders.pending("sweep", 8, "preemptible")]),
        builders.policy(preemption={"allowOnDemandForPreemptible": allow}),
        builders.NOW,
    )
    assert _scale_ups(plan) == want_scale
    assert {b.pool for b in plan.blocked} == want_blocked


@pytest.mark.parametrize(
    ("criticality", "spec", "missing"),
    [
        # Created while the webhook was down: nothing of what it gives.
        (
            Criticality.PREEMPTIBLE,
            {},
            ["PriorityClass hybridgpu-preemptible", "node affinity to tiers core/spot"],
        ),
        (Criticality.CRITICAL, {}, ["PriorityClass hybridgpu-critical"]),
        # What the webhook returns, applied: nothing missing.
        (Criticality.CRITICAL, {"priorityClassName": "hybridgpu-critical"}, []),
        (
            Criticality.PREEMPTIBLE,
            {
                "priorityClassName": "hybridgpu-preemptible",
                "affinity": required_terms([TO_CORE_OR_SPOT]),
            },
            [],
        ),
        # A class the pod names itself is its own choice, not a bypass.
        (Criticality.STANDARD, {"priorityClassName": "team-own"}, []),
        (None, {}, []),
    ],
)
def test_a_pod_the_webhook_never_saw_is_told_apart_from_one_it_mutated(
    criticality: Criticality | None, spec: dict[str, Any], missing: list[str]
) -> None:
    assert not_admitted(criticality, spec, rules()) == missing


@pytest.mark.parametrize("admission", [rules(), owned_first()], ids=["as-is", "owned first"])
def test_not_admitted_is_empty_after_the_mutation_is_applied(admission: AdmissionRules) -> None:
    for criticality in Criticality:
        pod: dict[str, Any] = {"spec": {"containers": [{"name": "c"}]}}
        ops = mutation(criticality, pod["spec"], admission)
        patched = jsonpatch.apply_patch(pod, ops)
        assert not_admitted(criticality, patched["spec"], admission) == []
        assert not_admitted(criticality, pod["spec"], admission) != []


def test_a_pod_missing_only_the_preference_for_owned_nodes_is_not_called_unadmitted() -> None:
    """The preference is how free owned GPUs are taken first, not what the pod must have: a
    pod admitted with everything else is not reported as having bypassed the webhook."""
    spec = pod_spec(priorityClassName="hybridgpu-standard")
    assert mutation(Criticality.STANDARD, spec, owned_first()) != []
    assert not_admitted(Criticality.STANDARD, spec, owned_first()) == []
    held = pod_spec(priorityClassName="p", affinity=required_terms([TO_CORE_OR_SPOT]))
    assert not_admitted(Criticality.PREEMPTIBLE, held, owned_first()) == []
    assert not_admitted(
        Criticality.PREEMPTIBLE, pod_spec(priorityClassName="p"), owned_first()
    ) == ["node affinity to tiers core/spot"]
