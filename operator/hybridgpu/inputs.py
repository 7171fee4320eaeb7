"""Reading user files: one clear line naming the file and the field, never a traceback."""

from __future__ import annotations

import argparse
import codecs
import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from hybridgpu.errors import UserError

if TYPE_CHECKING:  # every command's parser imports this module: no pydantic at import
    from pydantic import ValidationError

T = TypeVar("T")


def read_yaml_documents(path: str | Path, what: str) -> list[Any]:
    """Every non-empty document of a YAML file; ``what`` names the file in errors
    (e.g. "cluster file")."""
    import yaml

    path = Path(path)
    text = read_text(path, what)
    try:
        return [doc for doc in yaml.load_all(text, Loader=_unique_key_loader()) if doc is not None]
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}:" if mark is not None else ""
        problem = getattr(err, "problem", None) or "syntax error"
        raise UserError(f"{path}:{where} not valid YAML ({problem})") from None


def _unique_key_loader() -> Any:
    """PyYAML's safe loader, refusing a key twice in one mapping: kubectl refuses such a
    manifest, and PyYAML alone keeps the last value without a word."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # `<<: *defaults`: its keys may be overridden
                key = self.construct_object(key_node, deep=deep)
                try:
                    duplicate = key in seen
                    seen.add(key)
                except TypeError:  # an unhashable key: PyYAML itself refuses it below
                    continue
                if duplicate:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {key!r} twice in one mapping", key_node.start_mark
                    )
            return super().construct_mapping(node, deep)

    return UniqueKeyLoader


def describe_validation_error(err: ValidationError, prefix: str = "") -> str:
    """The first problem of a pydantic error as ``field.path: message``."""
    from hybridgpu.models.base import (
        DURATION_DIGITS_TEXT,
        DURATION_PATTERN,
        POSITIVE_DURATION_PATTERN,
        brief,
        too_many_duration_digits,
    )

    first = err.errors()[0]
    loc = prefix + ".".join(str(p) for p in first["loc"])
    msg = str(first["msg"]).removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        msg = "unknown field"
    elif first["type"] == "missing":
        msg = "required field is missing"
    elif first["type"] == "string_pattern_mismatch":
        pattern = str((first.get("ctx") or {}).get("pattern", ""))
        if pattern in (POSITIVE_DURATION_PATTERN, DURATION_PATTERN) and too_many_duration_digits(
            str(first["input"])
        ):
            msg = f"{brief(first['input'])} is too long a duration: {DURATION_DIGITS_TEXT}"
        elif pattern == POSITIVE_DURATION_PATTERN:
            msg = f"{first['input']!r} is not a duration > 0; expected e.g. 30s, 5m, 1h30m"
        elif pattern == DURATION_PATTERN:
            msg = f"{first['input']!r} is not a duration; expected e.g. 0s, 30s, 5m, 1h30m, 7d"
    elif first["type"] == "less_than_equal":
        limit = float((first.get("ctx") or {}).get("le", math.nan))
        shown = f"{limit:,.0f}" if limit.is_integer() else f"{limit:g}"
        given = str(first["input"])  # as written: 1e308 is a string to YAML 1.1
        given = given if len(given) <= 24 else brief(first["input"])
        msg = f"{given} is above the limit of {shown}"
    elif first["type"] == "finite_number":
        msg = f"{first['input']!r} is not a finite number"
    return " ".join(f"{loc.rstrip('.') or '(top level)'}: {msg}".split())


def read_text(path: str | Path, what: str) -> str:
    """The text of a user's file, decoded as UTF-8 (a byte-order mark is dropped); ``what``
    names the file in errors. Raises UserError for a missing, unreadable or non-UTF-8 file."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except IsADirectoryError:
        raise UserError(f"{path}: cannot read {what}: is a directory") from None
    except OSError as err:
        raise UserError(f"{path}: cannot read {what}: {err.strerror}") from None
    return decode_text(data, path, what)


def decode_text(data: bytes, path: str | Path, what: str) -> str:
    """``data`` as UTF-8 text; UTF-16 and binary files get a line saying what they are."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        raise UserError(f"{path}: {what} is UTF-16 text; expected UTF-8 (save it as UTF-8)")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        kind = "binary data" if b"\x00" in data[:4096] else "not UTF-8 text"
        raise UserError(
            f"{path}: {what} is {kind} (byte 0x{data[err.start]:02x} at offset {err.start}); "
            "expected UTF-8 text"
        ) from None
    if "\x00" in text:
        raise UserError(f"{path}: {what} contains NUL bytes (binary data); expected UTF-8 text")
    return text


def finite(value: float, where: str, *, minimum: float | None = None) -> float:
    """``value`` when it is a finite number (and >= ``minimum``); else UserError at ``where``."""
    if not math.isfinite(value):
        raise UserError(f"{where}: {value} is not a finite number")
    if minimum is not None and value < minimum:
        raise UserError(f"{where}: {value:g} is below the minimum of {minimum:g}")
    return value


def _flag_number(
    text: str, *, minimum: float, inclusive: bool, maximum: float = math.inf, unit: str = ""
) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
        valid = False
    else:
        valid = math.isfinite(value) and (value >= minimum if inclusive else value > minimum)
        valid = valid and value <= maximum
    if not valid:
        bound = f">= {minimum:g}" if inclusive else f"> {minimum:g}"
        if math.isfinite(maximum):
            bound += f" and <= {maximum:,.0f}{unit}"
        raise argparse.ArgumentTypeError(f"expected a finite number {bound}, got {text!r}")
    return value


def positive_number(text: str) -> float:
    """argparse type: a finite number > 0 (inf and nan are rejected)."""
    return _flag_number(text, minimum=0.0, inclusive=False)


def non_negative_number(text: str) -> float:
    """argparse type: a finite number >= 0 (inf and nan are rejected)."""
    return _flag_number(text, minimum=0.0, inclusive=True)


def seconds_up_to(limit: float, limit_text: str) -> Callable[[str], float]:
    """argparse type: seconds, a finite number from 0 to ``limit`` (``limit_text`` says what
    it is, e.g. "the simulator's 366 days")."""

    def seconds(text: str) -> float:
        return _flag_number(
            text, minimum=0.0, inclusive=True, maximum=limit, unit=f" seconds ({limit_text})"
        )

    return seconds


def file_name(text: str) -> str:
    """argparse type: a file, directory or URL the user names. An empty one (``--trace
    "$TRACE"`` with the variable unset) is an error, not the flag's default."""
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a file name, got an empty string")
    return text


def port_number(text: str) -> int:
    """argparse type: a TCP port, 0 (any free one) to 65535."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port from 0 to 65535, got {text!r}")
    return value


def _whole_number(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise argparse.ArgumentTypeError(f"expected a whole number >= {minimum}, got {text!r}")
    return value


def worker_count(text: str) -> int:
    """argparse type: a whole number of worker processes, at least 1."""
    return _whole_number(text, 1)


def non_negative_whole_number(text: str) -> int:
    """argparse type: a whole number >= 0."""
    return _whole_number(text, 0)


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def switch(text: str) -> bool:
    """argparse type: on or off, as 1/0, true/false, yes/no or on/off (any case)."""
    word = text.strip().lower()
    if word not in _TRUE + _FALSE:
        raise argparse.ArgumentTypeError(
            f"expected 1 or 0 (true/false, yes/no, on/off), got {text!r}"
        )
    return word in _TRUE


WEBHOOK_CERT_FILES = ("tls.crt", "tls.key", "ca.crt")


def check_webhook_cert_dir(path: str, where: str) -> None:
    """UserError at ``where`` (a flag or $VARIABLE) when the webhook's certificate directory
    lacks one of its files: kopf would only fail on it once its webhook server starts."""
    missing = [f for f in WEBHOOK_CERT_FILES if not os.path.isfile(os.path.join(path, f))]
    if missing:
        raise UserError(
            f"{where} {path}: no {', '.join(missing)}; expected "
            f"{', '.join(WEBHOOK_CERT_FILES)} (the chart mounts its Secret there)"
        )


def from_environment(env: Mapping[str, str], name: str, parse: Callable[[str], T]) -> T | None:
    """$``name`` read with an argparse type (the one its flag uses, so both accept the same
    values); None when unset or empty. UserError naming the variable, in the words of the
    flag's error, when the value is bad."""
    raw = env.get(name)
    if not raw:
        return None
    try:
        return parse(raw)
    except argparse.ArgumentTypeError as err:
        raise UserError(f"${name}: {err}") from None
