"""Reading user files: one clear line naming the file and the field, never a traceback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from hybridgpu.errors import UserError


def read_yaml_documents(path: str | Path, what: str) -> list[Any]:
    """Every non-empty document of a YAML file; ``what`` names the file in errors
    (e.g. "cluster file")."""
    import yaml

    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise UserError(f"{path}: cannot read {what}: {err.strerror}") from None
    try:
        return [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}:" if mark is not None else ""
        problem = getattr(err, "problem", None) or "syntax error"
        raise UserError(f"{path}:{where} not valid YAML ({problem})") from None


def describe_validation_error(err: ValidationError, prefix: str = "") -> str:
    """The first problem of a pydantic error as ``field.path: message``."""
    first = err.errors()[0]
    loc = prefix + ".".join(str(p) for p in first["loc"])
    msg = str(first["msg"]).removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        msg = "unknown field"
    elif first["type"] == "missing":
        msg = "required field is missing"
    return f"{loc.rstrip('.') or '(top level)'}: {msg}"
