"""Shared pieces of the CRD models: camelCase aliases, strict parsing, durations, CEL rules.

Each cross-field rule is declared once as a :class:`Rule`: the CEL expression goes into the
CRD (``x-kubernetes-validations``), the Python predicate runs in pydantic, so `kubectl apply`
and `hybridgpu simulate --cluster` reject the same manifests with the same message.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

# At most 9 digits before a number's point: a 400-digit number of seconds is inf as a float,
# and a duration summed into costs must stay finite (each number < 1e9 of its unit).
DURATION_PATTERN = r"^([0-9]{1,9}(\.[0-9]+)?(ms|s|m|h|d))+$"
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_UNBOUNDED_DURATION = re.compile(r"([0-9]+(\.[0-9]+)?(ms|s|m|h|d))+")
DURATION_DIGITS_TEXT = "at most 9 digits before the point of each number"

# A duration with at least one non-zero digit: RE2 (the apiserver's regexp) has no lookahead.
_PART = r"[0-9]{1,9}(\.[0-9]+)?(ms|s|m|h|d)"
# A non-zero digit in one of the 9 places of the integer part, or in the fraction.
_NONZERO_INTEGER = "|".join(f"[0-9]{{{k}}}[1-9][0-9]{{0,{8 - k}}}" for k in range(9))
_NONZERO_PART = rf"(({_NONZERO_INTEGER})(\.[0-9]+)?|[0-9]{{1,9}}\.[0-9]*[1-9][0-9]*)(ms|s|m|h|d)"
POSITIVE_DURATION_PATTERN = f"^({_PART})*{_NONZERO_PART}({_PART})*$"

Duration = Annotated[
    str,
    Field(
        pattern=DURATION_PATTERN,
        json_schema_extra={"example": "5m"},
    ),
]
PositiveDuration = Annotated[
    str,
    Field(
        pattern=POSITIVE_DURATION_PATTERN,
        json_schema_extra={"example": "30s"},
    ),
]
"""A duration greater than zero (``0s`` is rejected), e.g. a tick interval."""


@functools.lru_cache(maxsize=1024)  # decide() parses the policy's durations on every tick
def parse_duration_seconds(text: str) -> float:
    """Seconds in a duration such as ``90s``, ``5m``, ``1h30m`` or ``30d``.

    Raises ValueError with the accepted format when ``text`` is not a duration.
    """
    if not re.fullmatch(DURATION_PATTERN, text):
        if too_many_duration_digits(text):
            raise ValueError(f"{brief(text)} is too long a duration: {DURATION_DIGITS_TEXT}")
        raise ValueError(
            f"{text!r} is not a duration: use a number and a unit, e.g. 30s, 5m, 1h30m, 7d"
        )
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in _DURATION_PART.findall(text))


def brief(value: object) -> str:
    """``value`` for an error message: its repr, or its start and length when that is long
    (a 400-digit number would fill the one error line)."""
    text = repr(value)
    return text if len(text) <= 24 else f"{text[:16]}... ({len(str(value))} characters)"


def too_many_duration_digits(text: str) -> bool:
    """Whether ``text`` would be a duration but for a number of more than 9 digits."""
    return bool(_UNBOUNDED_DURATION.fullmatch(text)) and not re.fullmatch(DURATION_PATTERN, text)


@dataclass(frozen=True)
class Rule:
    """One cross-field validation rule, written once for the apiserver (CEL) and for Python."""

    cel: str
    message: str
    check: Callable[[Any], bool]
    field_path: str | None = None


class SpecModel(BaseModel):
    """Base of every CRD model: camelCase on the wire, unknown fields rejected, immutable."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        use_enum_values=True,
        # .inf and .nan in a manifest are never a real price, count or percent.
        allow_inf_nan=False,
    )

    rules: ClassVar[tuple[Rule, ...]] = ()

    @model_validator(mode="after")
    def _check_rules(self) -> SpecModel:
        for rule in type(self).rules:
            if not rule.check(self):
                raise ValueError(rule.message)
        return self

    def to_wire(self) -> dict[str, Any]:
        """The object as Kubernetes sees it: camelCase keys, unset optional fields left out."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class Condition(SpecModel):
    """A Kubernetes-style condition on a status."""

    type: str = Field(description="Condition type, e.g. Ready, ScalingBlocked, BudgetExceeded.")
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(default="", description="One CamelCase word saying why.")
    message: str = Field(default="", description="A sentence for people.")
    last_transition_time: str | None = Field(
        default=None, description="RFC 3339 time the status last changed."
    )
    observed_generation: int | None = Field(
        default=None, description="metadata.generation this condition was computed from."
    )


class ObjectMeta(BaseModel):
    """The part of metadata the models read; everything else is kept as is."""

    model_config = ConfigDict(extra="allow", frozen=True)

    name: str = Field(min_length=1, max_length=253)
    namespace: str | None = None
    generation: int | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
