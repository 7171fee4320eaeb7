"""Admission of workload pods: what the operator's webhook changes or refuses, decided on data.

decide() plans capacity per criticality; the kube-scheduler decides who runs on it. These two
functions make the scheduler follow the plan: a labelled pod gets its criticality's
PriorityClass (so pending pods are ordered, and preempted, as decide() orders them), and a
preemptible pod may only land on core or spot nodes unless the policy allows on-demand for
it (so elastic nodes bought for critical work are not taken by preemptible pods). A critical
pod that could only run on spot is refused: spot nodes vanish at two minutes' notice. Every
labelled pod also prefers owned (core) nodes: kube-scheduler knows no prices, and its default
score puts a pod on the emptiest node it may use, a cloud node beside free owned GPUs as
readily as an owned one; a preferred node affinity outweighs that score, so free owned GPUs
are taken first, as decide() and the simulator's scheduler take them.

Pure: a pod's spec and the rules in, RFC 6902 JSON patch operations or a reason out.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

from hybridgpu.models.pool import Taint, Tier
from hybridgpu.models.snapshot import Criticality

NODE_AFFINITY_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREEMPTIBLE_TIERS = (Tier.CORE.value, Tier.SPOT.value)
"""Where preemptible pods may run unless the policy allows on-demand (elastic) for them."""


class PatchOperation(TypedDict):
    """One RFC 6902 JSON patch operation on the pod."""

    op: Literal["add"]
    path: str
    value: Any


@dataclass(frozen=True, slots=True)
class PriorityClassRef:
    """A PriorityClass as the scheduler will use it."""

    name: str
    value: int
    preemption_policy: str = "PreemptLowerPriority"
    """``Never`` or ``PreemptLowerPriority``."""


@dataclass(frozen=True, slots=True)
class AdmissionRules:
    """What admission enforces; the webhook reads it from the cluster."""

    tier_label: str
    """Node label naming a node's tier (core, elastic, spot)."""
    pool_label: str
    """Node label naming a node's GPUPool."""
    priority_classes: Mapping[Criticality, PriorityClassRef] = field(default_factory=dict)
    """The class of each criticality that exists in the cluster (absent: pods keep theirs)."""
    allow_on_demand_for_preemptible: bool = False
    spot_pools: Mapping[str, Sequence[Taint]] = field(default_factory=dict)
    """Spot GPUPools by name, with the taints they put on their nodes."""
    reservation_taint: str | None = None
    """The key of the taint that keeps a node for one Job (core/reserve.py): critical pods
    tolerate it, so critical work comes first even on such a node. None: not added."""
    preferred_tier: str | None = None
    """The tier every labelled pod prefers (a preferred node affinity of weight
    PREFERRED_WEIGHT): the owned one, whose GPUs are paid for whether used or not. None: no
    preference added."""


PREFERRED_WEIGHT = 100
"""The preference's weight, the most allowed: kube-scheduler multiplies the NodeAffinity
score (0-100 after normalising) by its plugin weight, 2 by default, against at most 100 for
each of NodeResourcesFit and NodeResourcesBalancedAllocation (weight 1), so a node of the
preferred tier outscores any other the pod may use."""
NODE_AFFINITY_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def mutation(
    criticality: Criticality | None, pod_spec: Mapping[str, Any], rules: AdmissionRules
) -> list[PatchOperation]:
    """JSON patch operations that give a pod of ``criticality`` its priority class, when
    critical a toleration of nodes kept for a Job (``rules.reservation_taint``), when
    preemptible a required node affinity to core and spot nodes, and a preferred node
    affinity to ``rules.preferred_tier`` (neither affinity when a node selector pins it to
    one pool). No operations when the pod has no criticality or already has what it
    needs; a priority class the pod names itself is kept."""
    if criticality is None:
        return []
    ops: list[PatchOperation] = []
    priority_class = rules.priority_classes.get(criticality)
    if priority_class is not None and not pod_spec.get("priorityClassName"):
        # The apiserver's Priority plugin resolved the class before this webhook runs, so
        # the value and preemption policy are set here too, exactly as the class says.
        ops += [
            _add("/spec/priorityClassName", priority_class.name),
            _add("/spec/priority", priority_class.value),
            _add("/spec/preemptionPolicy", priority_class.preemption_policy),
        ]
    if criticality == Criticality.CRITICAL and rules.reservation_taint:
        tolerations = list(pod_spec.get("tolerations") or [])
        reservation = Taint(key=rules.reservation_taint, effect="NoSchedule")
        if not any(_tolerates(t, reservation) for t in tolerations):
            toleration = {"key": reservation.key, "operator": "Exists", "effect": "NoSchedule"}
            ops.append(
                _add("/spec/tolerations/-", toleration)
                if tolerations
                else _add("/spec/tolerations", [toleration])
            )
    affinity = _affinity(criticality, pod_spec, rules)
    if affinity is not None:
        ops.append(_add("/spec/affinity", affinity))
    return ops


def _affinity(
    criticality: Criticality, pod_spec: Mapping[str, Any], rules: AdmissionRules
) -> dict[str, Any] | None:
    """The pod's affinity after admission, or None when admission leaves it as it is."""
    affinity = _restriction(criticality, pod_spec, rules)
    if rules.preferred_tier is None or _pinned(pod_spec, rules):
        return affinity
    current = pod_spec.get("affinity") if affinity is None else affinity
    preferring = _preferring(current, pod_spec, rules.tier_label, rules.preferred_tier)
    return affinity if preferring is None else preferring


def _pinned(pod_spec: Mapping[str, Any], rules: AdmissionRules) -> bool:
    """Whether a node selector pins the pod to one pool by name (the operator's move, e.g. a
    Job whose deadline sent it to on-demand): it goes where the pin says, the pool decides
    its tier, and admission adds no affinity."""
    return bool((pod_spec.get("nodeSelector") or {}).get(rules.pool_label))


def _restriction(
    criticality: Criticality, pod_spec: Mapping[str, Any], rules: AdmissionRules
) -> dict[str, Any] | None:
    """The pod's affinity held to core and spot nodes, when the policy holds preemptible pods
    there and this one is not held yet; else None."""
    if (
        criticality != Criticality.PREEMPTIBLE
        or rules.allow_on_demand_for_preemptible
        or _pinned(pod_spec, rules)
    ):
        return None
    return _restricted_to_tiers(pod_spec, rules.tier_label, PREEMPTIBLE_TIERS)


def not_admitted(
    criticality: Criticality | None, pod_spec: Mapping[str, Any], rules: AdmissionRules
) -> list[str]:
    """What the mutating webhook would have given a pod that exists without it (admitted
    while the webhook was down: ``failurePolicy: Ignore``), in words; empty when the pod has
    what its criticality needs. Such a pod keeps default priority and may land on any tier
    until it is recreated."""
    missing = [
        f"PriorityClass {op['value']}"
        for op in mutation(criticality, pod_spec, rules)
        if op["path"] == "/spec/priorityClassName"
    ]
    # The tier preference alone is an optimisation, not what the pod must have.
    if criticality is not None and _restriction(criticality, pod_spec, rules) is not None:
        missing.append(f"node affinity to tiers {'/'.join(PREEMPTIBLE_TIERS)}")
    return missing


def rejection(
    criticality: Criticality | None, pod_spec: Mapping[str, Any], rules: AdmissionRules
) -> str | None:
    """Why a pod must be refused, or None. A critical pod is refused when it tolerates a spot
    pool's taints and its node selector or required affinity admits only spot nodes."""
    if criticality != Criticality.CRITICAL:
        return None
    spot_pools = _spot_only_pools(pod_spec, rules)
    if spot_pools is None:
        return None
    tolerations = list(pod_spec.get("tolerations") or [])
    if not any(_tolerates_all(tolerations, rules.spot_pools[p]) for p in spot_pools):
        return None  # it cannot land on spot either; the scheduler will say so
    return (
        "a critical pod may not be restricted to spot nodes (they can be reclaimed at two "
        "minutes' notice): it tolerates the spot taint and its nodeSelector/affinity admits "
        "only spot nodes; drop the spot node selector, or label the workload "
        "hybridgpu.io/criticality=preemptible"
    )


# ------------------------------------------------------------------------------ affinity


def _add(path: str, value: Any) -> PatchOperation:
    return {"op": "add", "path": path, "value": value}


def _restricted_to_tiers(
    pod_spec: Mapping[str, Any], tier_label: str, tiers: Sequence[str]
) -> dict[str, Any] | None:
    """The pod's affinity with every required node-selector term also requiring ``tiers``;
    None when the pod is already held to them."""
    selected = (pod_spec.get("nodeSelector") or {}).get(tier_label)
    if selected is not None and selected in tiers:
        return None
    affinity: dict[str, Any] = copy.deepcopy(dict(pod_spec.get("affinity") or {}))
    node_affinity = affinity.setdefault("nodeAffinity", {})
    required = node_affinity.setdefault(NODE_AFFINITY_REQUIRED, {})
    terms: list[dict[str, Any]] = required.get("nodeSelectorTerms") or [{}]
    requirement = {"key": tier_label, "operator": "In", "values": list(tiers)}
    changed = False
    for term in terms:
        expressions = term.setdefault("matchExpressions", [])
        if not any(_within(e, tier_label, tiers) for e in expressions):
            # Terms are ORed and expressions ANDed: the tier must hold in every term.
            expressions.append(dict(requirement))
            changed = True
    required["nodeSelectorTerms"] = terms
    return affinity if changed else None


def _preferring(
    affinity: Mapping[str, Any] | None, pod_spec: Mapping[str, Any], tier_label: str, tier: str
) -> dict[str, Any] | None:
    """``affinity`` with a preferred node affinity to nodes of ``tier``; None when the pod
    states its own choice of tier (a node selector or a preferred term on the tier label).
    Where its required affinity admits no node of ``tier``, the preference weighs nothing."""
    if tier_label in (pod_spec.get("nodeSelector") or {}):
        return None
    preferring: dict[str, Any] = copy.deepcopy(dict(affinity or {}))
    node_affinity = preferring.setdefault("nodeAffinity", {})
    preferred = node_affinity.setdefault(NODE_AFFINITY_PREFERRED, [])
    for term in preferred:
        expressions = (term.get("preference") or {}).get("matchExpressions") or []
        if any(e.get("key") == tier_label for e in expressions):
            return None
    preferred.append(
        {
            "weight": PREFERRED_WEIGHT,
            "preference": {
                "matchExpressions": [{"key": tier_label, "operator": "In", "values": [tier]}]
            },
        }
    )
    return preferring


def _within(expression: Mapping[str, Any], label: str, values: Sequence[str]) -> bool:
    """Whether a matchExpression admits only nodes whose ``label`` is one of ``values``."""
    return (
        expression.get("key") == label
        and expression.get("operator") == "In"
        and bool(expression.get("values"))
        and set(expression.get("values") or []) <= set(values)
    )


def _spot_only_pools(pod_spec: Mapping[str, Any], rules: AdmissionRules) -> list[str] | None:
    """The spot pools a pod may land on when its nodeSelector or every required affinity term
    admits only spot nodes; None when it may land elsewhere."""
    spot = sorted(rules.spot_pools)
    selector = pod_spec.get("nodeSelector") or {}
    if selector.get(rules.tier_label) == Tier.SPOT.value:
        return spot
    if selector.get(rules.pool_label) in rules.spot_pools:
        return [selector[rules.pool_label]]
    affinity = (pod_spec.get("affinity") or {}).get("nodeAffinity") or {}
    terms = (affinity.get(NODE_AFFINITY_REQUIRED) or {}).get("nodeSelectorTerms") or []
    if not terms:
        return None
    pools: set[str] = set()
    for term in terms:
        expressions = term.get("matchExpressions") or []
        if any(_within(e, rules.tier_label, [Tier.SPOT.value]) for e in expressions):
            pools.update(spot)
            continue
        pinned = [e for e in expressions if _within(e, rules.pool_label, spot)]
        if not pinned:
            return None  # this term admits some node that is not spot
        pools.update(pinned[0]["values"])
    return sorted(pools)


def _tolerates_all(tolerations: Sequence[Mapping[str, Any]], taints: Sequence[Taint]) -> bool:
    return all(any(_tolerates(t, taint) for t in tolerations) for taint in taints)


def _tolerates(toleration: Mapping[str, Any], taint: Taint) -> bool:
    """Kubernetes' toleration matching (an empty key with Exists tolerates every taint)."""
    effect = toleration.get("effect")
    if effect and effect != taint.effect:
        return False
    key = toleration.get("key")
    operator = toleration.get("operator") or "Equal"
    if not key:
        return operator == "Exists"
    if key != taint.key:
        return False
    return operator == "Exists" or (toleration.get("value") or "") == (taint.value or "")
