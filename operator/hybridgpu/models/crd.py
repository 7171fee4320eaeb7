"""CustomResourceDefinitions generated from the pydantic models (pure: dicts in, dicts out).

The CRD YAML in ``crds/`` is this module's output; a test fails when they drift.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from hybridgpu.models.base import DURATION_DIGITS_TEXT, SpecModel
from hybridgpu.models.limits import LIMITS_TEXT
from hybridgpu.models.resources import RESOURCES, Resource

GROUP = "hybridgpu.io"
VERSION = "v1alpha1"
CATEGORY = "hybridgpu"

# Keywords of JSON Schema that Kubernetes' structural schemas accept and we pass through.
_PASSTHROUGH = (
    "type",
    "description",
    "enum",
    "pattern",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "format",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
)


def _rules_by_title(models: list[type[BaseModel]]) -> dict[str, type[SpecModel]]:
    """Every SpecModel reachable from ``models``, by the title pydantic gives its schema."""
    seen: dict[str, type[SpecModel]] = {}
    stack = list(models)
    while stack:
        model = stack.pop()
        if not isinstance(model, type) or not issubclass(model, BaseModel):
            continue
        title = model.model_config.get("title") or model.__name__
        if title in seen:
            continue
        if issubclass(model, SpecModel):
            seen[title] = model
        for info in model.model_fields.values():
            stack.extend(_model_types(info.annotation))
    return seen


def _model_types(annotation: Any) -> list[type[BaseModel]]:
    found: list[type[BaseModel]] = []
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        found.append(annotation)
    for arg in getattr(annotation, "__args__", ()) or ():
        found.extend(_model_types(arg))
    return found


class _Converter:
    """Turns pydantic's JSON schema into a Kubernetes structural OpenAPI v3 schema."""

    def __init__(self, root: dict[str, Any], models: dict[str, type[SpecModel]]) -> None:
        self.defs: dict[str, Any] = root.get("$defs", {})
        self.models = models

    def convert(self, schema: dict[str, Any], title: str | None = None) -> dict[str, Any]:
        if "$ref" in schema:
            name = schema["$ref"].rsplit("/", 1)[-1]
            merged = dict(self.defs[name])
            if "description" in schema:
                merged["description"] = schema["description"]
            return self.convert(merged, title=name)
        if "anyOf" in schema:
            options = [s for s in schema["anyOf"] if s.get("type") != "null"]
            if len(options) != 1:
                raise ValueError(f"cannot express a union in a structural schema: {schema}")
            inner = dict(options[0])
            if "description" in schema:
                inner["description"] = schema["description"]
            if "default" in schema:
                inner.setdefault("default", schema["default"])
            return self.convert(inner, title=title)
        out: dict[str, Any] = {}
        for key in _PASSTHROUGH:
            if key in schema:
                out[key] = schema[key]
        if "const" in schema:
            out["enum"] = [schema["const"]]
        if "exclusiveMinimum" in schema:
            out["minimum"] = schema["exclusiveMinimum"]
            out["exclusiveMinimum"] = True
        if "exclusiveMaximum" in schema:
            out["maximum"] = schema["exclusiveMaximum"]
            out["exclusiveMaximum"] = True
        if "enum" in out and "type" not in out:
            out["type"] = "string"
        default = schema.get("default")
        if default is not None and not isinstance(default, dict | list):
            shown = str(default).lower() if isinstance(default, bool) else str(default)
            note = f"Default: {shown}."
            text = out.get("description", "")
            if "default" not in text.lower():
                out["description"] = f"{text} {note}".strip()
        kind = schema.get("type")
        if kind == "object" or "properties" in schema:
            out["type"] = "object"
            props = schema.get("properties")
            if props is not None:
                out["properties"] = {k: self.convert(v) for k, v in props.items()}
                required = [k for k in schema.get("required", []) if k in props]
                if required:
                    out["required"] = required
            extra = schema.get("additionalProperties")
            if isinstance(extra, dict):
                out["additionalProperties"] = self.convert(extra)
            model = self.models.get(title or schema.get("title", ""))
            if model is not None and model.rules:
                out["x-kubernetes-validations"] = [
                    {"rule": r.cel, "message": r.message}
                    | ({"fieldPath": r.field_path} if r.field_path else {})
                    for r in model.rules
                ]
        elif kind == "array":
            out["items"] = self.convert(schema.get("items", {}))
        if "description" not in out and title:
            doc = (self.models[title].__doc__ or "") if title in self.models else ""
            if doc:
                out["description"] = doc.strip().splitlines()[0]
        return out


def _section(model: type[BaseModel]) -> dict[str, Any]:
    root = model.model_json_schema(by_alias=True, mode="validation")
    converter = _Converter(root, _rules_by_title([model]))
    return converter.convert(root, title=root.get("title"))


def crd_for(resource: type[Resource]) -> dict[str, Any]:
    """The CustomResourceDefinition of one resource class."""
    kind = resource.model_fields["kind"].annotation.__args__[0]  # type: ignore[union-attr]
    spec_model = _annotation_model(resource, "spec")
    status_model = _annotation_model(resource, "status")
    spec_required = resource.model_fields["spec"].is_required()
    properties: dict[str, Any] = {
        "apiVersion": {"type": "string", "description": "hybridgpu.io/v1alpha1"},
        "kind": {"type": "string", "description": kind},
        "metadata": {"type": "object"},
        "spec": _section(spec_model),
        "status": _section(status_model),
    }
    schema: dict[str, Any] = {
        "type": "object",
        "description": resource.description,
        "properties": properties,
    }
    if spec_required:
        schema["required"] = ["spec"]
    columns = [
        {
            "name": c.name,
            "type": c.type,
            "jsonPath": c.json_path,
            "description": c.description,
        }
        | ({"priority": c.priority} if c.priority else {})
        for c in resource.printer_columns
    ]
    columns.append({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"})
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{resource.plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Cluster",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": resource.plural,
                "singular": kind.lower(),
                "shortNames": list(resource.short_names),
                "categories": [CATEGORY],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                }
            ],
        },
    }


def _annotation_model(resource: type[Resource], field: str) -> type[BaseModel]:
    models = _model_types(resource.model_fields[field].annotation)
    if not models:
        raise TypeError(f"{resource.__name__}.{field} is not a model")
    return models[0]


def all_crds() -> dict[str, dict[str, Any]]:
    """File name -> CRD, for every resource."""
    return {f"{r.plural}.{GROUP}.yaml": crd_for(r) for r in RESOURCES}


def _reference_rows(schema: dict[str, Any], path: str, rows: list[str]) -> None:
    for name, sub in schema.get("properties", {}).items():
        here = f"{path}.{name}" if path else name
        kind = sub.get("type", "")
        if kind == "array":
            kind = f"[]{sub.get('items', {}).get('type', '')}"
        elif kind == "object" and isinstance(sub.get("additionalProperties"), dict):
            kind = f"map[string]{sub['additionalProperties'].get('type', '')}"
        limits = []
        if "enum" in sub:
            limits.append(" \\| ".join(str(v) for v in sub["enum"]))
        if "minimum" in sub:
            limits.append((">" if sub.get("exclusiveMinimum") else ">=") + f" {sub['minimum']:g}")
        if "maximum" in sub:
            limits.append(f"<= {sub['maximum']:g}")
        if "pattern" in sub:
            limits.append("duration, e.g. 5m" if "ms|s|m|h|d" in sub["pattern"] else "pattern")
        required = name in schema.get("required", [])
        text = sub.get("description", "").replace("|", "\\|").replace("\n", " ")
        rows.append(
            f"| `{here}` | {kind}{' (required)' if required else ''} | {text} | "
            f"{', '.join(limits)} |"
        )
        if sub.get("type") == "object":
            _reference_rows(sub, here, rows)
        elif sub.get("type") == "array" and sub.get("items", {}).get("type") == "object":
            _reference_rows(sub["items"], f"{here}[]", rows)


def reference_markdown() -> str:
    """docs/crd-reference.md: every field of every CRD, its type, meaning and limits, and
    the cross-field rules, generated from the same schemas as the CRDs."""
    out = [
        "# CRD reference",
        "",
        "Generated by `hybridgpu crds --reference docs/crd-reference.md` (`make crds`) from the",
        "models; a test fails when it drifts. `kubectl explain <kind>.spec` shows the same text.",
        "",
        LIMITS_TEXT,
        "",
        f"Durations are a number and a unit (ms, s, m, h, d), repeated (1h30m), with "
        f"{DURATION_DIGITS_TEXT}.",
    ]
    for crd in all_crds().values():
        names = crd["spec"]["names"]
        version = crd["spec"]["versions"][0]
        root = version["schema"]["openAPIV3Schema"]
        out += [
            "",
            f"## {names['kind']} (`{crd['metadata']['name']}`, short name "
            f"`{', '.join(names['shortNames'])}`, cluster-scoped)",
            "",
            root["description"],
        ]
        for section in ("spec", "status"):
            schema = root["properties"][section]
            rows: list[str] = []
            _reference_rows(schema, section, rows)
            out += [
                "",
                f"### {section}",
                "",
                "| field | type | meaning | limits |",
                "|---|---|---|---|",
            ]
            out += rows
            rules = _collect_rules(schema, section)
            if rules:
                out += [
                    "",
                    f"Rules on {section} (CEL, checked by the apiserver and in Python):",
                    "",
                ]
                out += [f"- `{where}`: {message}" for where, message in rules]
        columns = ", ".join(c["name"] for c in version["additionalPrinterColumns"])
        out += ["", f"`kubectl get {names['plural']}` columns: {columns}."]
    return "\n".join(out) + "\n"


def _collect_rules(schema: dict[str, Any], path: str) -> list[tuple[str, str]]:
    found = [(path, r["message"]) for r in schema.get("x-kubernetes-validations", [])]
    for name, sub in schema.get("properties", {}).items():
        found += _collect_rules(sub, f"{path}.{name}")
    return found


def _field_paths(schema: dict[str, Any], path: str, out: set[str]) -> None:
    for name, child in (schema.get("properties") or {}).items():
        here = f"{path}.{name}" if path else name
        out.add(here)
        _field_paths(child, here, out)
    items = schema.get("items")
    if isinstance(items, dict):
        _field_paths(items, f"{path}[]", out)


def crd_drift(installed: dict[str, Any], expected: dict[str, Any]) -> str | None:
    """Why an installed CRD cannot serve this operator's models, in one line; None when it
    can. An older CRD lacks fields the models have: the apiserver would prune them from
    every object the operator writes or reads."""
    name = expected["metadata"]["name"]
    versions = {v.get("name"): v for v in (installed.get("spec") or {}).get("versions") or []}
    ours = versions.get(VERSION)
    if ours is None or not ours.get("served"):
        served = sorted(str(v) for v, spec in versions.items() if spec.get("served"))
        return f"CRD {name} does not serve {VERSION} (serves: {', '.join(served) or 'nothing'})"
    have: set[str] = set()
    want: set[str] = set()
    _field_paths((ours.get("schema") or {}).get("openAPIV3Schema") or {}, "", have)
    (wanted_version,) = expected["spec"]["versions"]
    _field_paths(wanted_version["schema"]["openAPIV3Schema"], "", want)
    missing = sorted(want - have)
    if not missing:
        return None
    shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
    return f"CRD {name} is older than this operator: it has no {shown}"
