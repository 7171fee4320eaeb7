"""A node kept for one Job (core/reserve.py) on the cluster: a NoSchedule taint
``hybridgpu.io/reserved-for=<digest of the Job's namespace/name>`` that the Job's pods tolerate
(its move to the pool adds the toleration to its pod template, allowed on a suspended Job),
and critical pods tolerate by key (the admission webhook adds it); the annotation of the same
name says which Job in words. The executor puts them on as soon as decide() asks, which is
the first tick after the node appears: a kubelet registers its node NotReady (tainted
``node.kubernetes.io/not-ready``), and a GPU node takes GPU pods only once its device plugin
reports its GPUs, so the taint is there before any pod can land.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from hybridgpu.kube.names import RESERVED_ANNOTATION, RESERVED_TAINT

Obj = dict[str, Any]
EFFECT = "NoSchedule"


def reservation_value(job: str) -> str:
    """The taint value for the Job ``namespace/name``: a digest (a label value holds at most
    63 characters, fewer than a namespace and a Job name together)."""
    return hashlib.sha256(job.encode()).hexdigest()[:40]


def reservation_taint(job: str) -> Obj:
    return {"key": RESERVED_TAINT, "value": reservation_value(job), "effect": EFFECT}


def job_toleration(job: str) -> Obj:
    """The toleration that lets the pods of Job ``namespace/name`` onto a node kept for it."""
    return {
        "key": RESERVED_TAINT,
        "operator": "Equal",
        "value": reservation_value(job),
        "effect": EFFECT,
    }


def reserved_for(node: Mapping[str, Any]) -> str | None:
    """The Job a Node is kept for: its annotation, while the taint is on it."""
    taints = (node.get("spec") or {}).get("taints") or []
    if not any(t.get("key") == RESERVED_TAINT for t in taints):
        return None
    notes = (node.get("metadata") or {}).get("annotations") or {}
    return notes.get(RESERVED_ANNOTATION) or None


def with_reservation(taints: list[Obj], job: str | None) -> list[Obj]:
    """``taints`` with the reservation for ``job`` in place of any other (None: without)."""
    kept = [t for t in taints if t.get("key") != RESERVED_TAINT]
    return kept if job is None else [*kept, reservation_taint(job)]
