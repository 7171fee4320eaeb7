"""The Job move protocol, as pure steps: suspend -> pods gone -> repin -> resume.

The intent lives in the Job's ``hybridgpu.io/move`` annotation as JSON
``{"to": pool|null, "from": pool|null, "step": ..., "since": epoch seconds}``, written in the
same patch that suspends the Job. Each tick looks at the Job and its pods and returns the
one next step; a restarted operator reads the annotation and carries on from there, so no
Job is left suspended and none is lost:

- ``suspend``: the Job is (being) suspended; once no pod of it is left, clear
  ``status.startTime`` (the apiserver allows pod-template scheduling changes only on a
  suspended Job without a start time) and repin the template;
- ``repinned``: the template points at the target pool; resume and drop the annotation.

A move whose target pool no longer exists rolls back: the template goes back to the pool
it came from and the Job resumes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hybridgpu.kube.names import MOVE_ANNOTATION, POOL_LABEL
from hybridgpu.models.pool import GPUPoolSpec

STEP_SUSPEND = "suspend"
STEP_REPINNED = "repinned"
STEPS = (STEP_SUSPEND, STEP_REPINNED)


@dataclass(frozen=True, slots=True)
class Move:
    """A move recorded on a Job."""

    to_pool: str | None
    """Target pool; None requeues the Job where its template already points."""
    from_pool: str | None
    step: str
    since: float

    def target(self, pools: Mapping[str, Any]) -> str | None:
        """The pool the workload is pointed at: the target, or back where it came from when
        the target pool is gone."""
        return self.to_pool if self.to_pool in pools else self.from_pool

    def annotation(self) -> str:
        return json.dumps(
            {"to": self.to_pool, "from": self.from_pool, "step": self.step, "since": self.since},
            sort_keys=True,
        )


def read_move(annotations: Mapping[str, str] | None) -> Move | None:
    """The move recorded in a Job's annotations; None when there is none or it is unreadable."""
    raw = (annotations or {}).get(MOVE_ANNOTATION)
    if not raw:
        return None
    try:
        data = json.loads(raw)
        step = str(data["step"])
        if step not in STEPS:
            step = STEP_SUSPEND
        return Move(
            to_pool=data.get("to") or None,
            from_pool=data.get("from") or None,
            step=step,
            since=float(data["since"]),
        )
    except (ValueError, KeyError, TypeError):
        return None


def tolerations_for(spec: GPUPoolSpec) -> list[dict[str, str]]:
    """Tolerations that let a pod onto the pool's tainted nodes."""
    out = []
    for taint in spec.taints:
        toleration = {"key": taint.key, "effect": taint.effect}
        if taint.value is None:
            toleration["operator"] = "Exists"
        else:
            toleration |= {"operator": "Equal", "value": taint.value}
        out.append(toleration)
    return out


def repin_template(
    pod_spec: Mapping[str, Any],
    to_pool: str | None,
    pools: Mapping[str, GPUPoolSpec],
) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """The nodeSelector and tolerations of a pod template moved to ``to_pool``.

    Selector keys and tolerations of every other known pool are dropped so the Job cannot
    land back where it came from; ``to_pool`` None leaves the template as it is.
    """
    selector = dict(pod_spec.get("nodeSelector") or {})
    tolerations = [dict(t) for t in pod_spec.get("tolerations") or []]
    if to_pool is None or to_pool not in pools:
        return selector, tolerations
    target = pools[to_pool]
    foreign = {
        (t["key"], t.get("value"), t.get("effect"))
        for name, spec in pools.items()
        if name != to_pool
        for t in tolerations_for(spec)
    }
    selector.pop(POOL_LABEL, None)
    for name, spec in pools.items():
        if name != to_pool and spec.node_selector:
            for key, value in spec.node_selector.items():
                if selector.get(key) == value:
                    del selector[key]
    target_selector = dict(target.node_selector) if target.node_selector else {POOL_LABEL: to_pool}
    selector.update(target_selector)
    kept = [
        t for t in tolerations if (t.get("key"), t.get("value"), t.get("effect")) not in foreign
    ]
    for toleration in tolerations_for(target):
        if toleration not in kept:
            kept.append(toleration)
    return selector, kept


SUSPENSION_WAIT_SECONDS = 60.0
"""How long a move waits, after it began, for the controller to record the suspension
(``WorkloadKind.suspension_condition``) once the pods are gone; a controller that never
records it (another version) does not hold the move longer."""


def next_step(
    move: Move,
    *,
    suspended: bool,
    pods_left: int,
    has_start_time: bool,
    suspension_recorded: bool = True,
) -> str:
    """What to do now for a Job in the middle of ``move``.

    Returns one of ``suspend`` (make sure it is suspended and wait), ``wait`` (pods still
    ending, or the controller has not recorded the suspension yet), ``clear_start_time``,
    ``repin``, ``resume``.
    """
    if move.step == STEP_REPINNED:
        return "resume"
    if not suspended:
        return "suspend"
    if pods_left > 0 or not suspension_recorded:
        return "wait"
    if has_start_time:
        return "clear_start_time"
    return "repin"
