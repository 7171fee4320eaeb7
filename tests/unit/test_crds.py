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
    assert columns == [
        "Tier", "Status", "Nodes", "Max", "GPUs", "Alloc", "Util", "$/H", "Age"
    ]  # fmt: skip
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


def test_crds_replace_their_own_files_but_not_a_hand_written_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`make crds` writes docs/crd-reference.md and crds/*.yaml over the last run's; a
    --reference or --output naming a hand-written file (README.md by a slip) is refused,
    nothing written, unless --force."""
    from hybridgpu.cli import main
    from hybridgpu.models.crd import reference_markdown

    out = tmp_path / "crds"
    reference = tmp_path / "crd-reference.md"
    argv = ["crds", "-o", str(out), "--reference", str(reference)]
    assert main(argv) == 0
    reference.write_text(reference.read_text() + "\nstale row\n")  # an older generation
    assert main(argv) == 0  # regenerated: replaced without asking
    assert reference.read_text() == reference_markdown()
    capsys.readouterr()

    notes = tmp_path / "README.md"
    notes.write_text("# My notes\n\nhand-written, not generated\n")
    fresh = tmp_path / "fresh"
    assert main(["crds", "-o", str(fresh), "--reference", str(notes)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert f"--reference {notes}: exists and was not written by `hybridgpu crds`" in line
    assert "--force" in line
    assert notes.read_text() == "# My notes\n\nhand-written, not generated\n"
    assert not fresh.exists()  # nothing written, no directory made

    hand_crd = out / "gpupools.hybridgpu.io.yaml"
    hand_crd.write_text("# edited by hand\napiVersion: v1\n")
    before = {p.name: p.read_text() for p in out.iterdir()}
    assert main(argv) == 2
    assert f"--output {hand_crd}: exists and was not written" in capsys.readouterr().err
    assert {p.name: p.read_text() for p in out.iterdir()} == before

    assert main([*argv, "--force"]) == 0
    assert main(["crds", "-o", str(fresh), "--reference", str(notes), "--force"]) == 0
    assert notes.read_text() == reference_markdown()
    assert hand_crd.read_text().startswith("# Generated by `hybridgpu crds`")


def test_crds_write_into_an_empty_file(tmp_path: Path) -> None:
    from hybridgpu.cli import main

    reference = tmp_path / "ref.md"
    reference.write_text("")  # e.g. made by `touch`: nothing to lose
    assert main(["crds", "-o", str(tmp_path / "crds"), "--reference", str(reference)]) == 0
    assert reference.read_text().startswith("# CRD reference")
