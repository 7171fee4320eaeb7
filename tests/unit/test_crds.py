"""The CRDs in crds/ are generated from the models and stay in sync with them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hybridgpu.models.crd import all_crds

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def test_checked_in_crds_match_the_models() -> None:
    generated = all_crds()
    on_disk = {p.name: yaml.safe_load(p.read_text()) for p in (ROOT / "crds").glob("*.yaml")}
    assert set(on_disk) == set(generated), "run `make crds`"
    for name, crd in generated.items():
        assert on_disk[name] == crd, f"crds/{name} drifted from the models: run `make crds`"


def _walk(schema: dict, path: str = ""):
    yield path, schema
    for key, sub in schema.get("properties", {}).items():
        yield from _walk(sub, f"{path}.{key}")
    if "items" in schema:
        yield from _walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _walk(schema["additionalProperties"], f"{path}{{}}")


@pytest.mark.parametrize("name", sorted(all_crds()))
def test_schemas_are_structural_and_every_field_is_described(name: str) -> None:
    version = all_crds()[name]["spec"]["versions"][0]
    root = version["schema"]["openAPIV3Schema"]
    for path, schema in _walk(root):
        assert "type" in schema, f"{name}{path}: no type (not structural)"
        for banned in ("$ref", "anyOf", "oneOf", "allOf", "const", "title", "$defs"):
            assert banned not in schema, f"{name}{path}: {banned} is not allowed"
        if path.startswith((".spec", ".status")) and not path.endswith(("[]", "{}")):
            assert schema.get("description"), f"{name}{path}: no description"
    assert version["subresources"] == {"status": {}}


def test_gpupool_crd_has_the_columns_short_name_and_rules() -> None:
    crd = all_crds()["gpupools.hybridgpu.io.yaml"]
    assert crd["spec"]["scope"] == "Cluster"
    assert crd["spec"]["names"]["shortNames"] == ["gp"]
    assert crd["spec"]["names"]["categories"] == ["hybridgpu"]
    version = crd["spec"]["versions"][0]
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert columns == ["Tier", "Nodes", "GPUs", "Alloc", "Util", "$/H", "Age"]
    rules = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"]
    messages = " ".join(r["message"] for r in rules)
    assert "minNodes must not exceed maxNodes" in messages
    assert "capexPerNode" in messages
    prices = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["pricing"]
    assert prices["properties"]["perNodeHour"]["exclusiveMinimum"] is True


def test_crd_reference_doc_is_generated_from_the_models() -> None:
    from hybridgpu.models.crd import reference_markdown

    doc = (ROOT / "docs" / "crd-reference.md").read_text()
    assert doc == reference_markdown(), "run `make crds`"
    assert "| `spec.minNodes` |" in doc
    assert "minNodes must not exceed maxNodes" in doc
