"""The operator's HYBRIDGPU_* variables are checked as their `hybridgpu run` flags are: one
check each (a port above 65535, a lease of 0 s, a webhook certificate directory without its
files are refused by the flag and the variable alike), one line naming the variable, exit 2;
and a variable is used when its flag is not given."""

from __future__ import annotations

import argparse
import faulthandler
import logging
from pathlib import Path
from typing import Any

import pytest
from tests.support.kubeconfig import KUBECONFIG

from hybridgpu.cli import main
from hybridgpu.errors import UserError
from hybridgpu.handlers.options import OperatorOptions
from hybridgpu.inputs import (
    non_negative_number,
    non_negative_whole_number,
    port_number,
    positive_number,
    switch,
)

# Each variable and the argparse type of its flag (or of the flags of its kind).
CHECKS = {
    "HYBRIDGPU_METRICS_PORT": port_number,
    "HYBRIDGPU_WEBHOOK_PORT": port_number,
    "HYBRIDGPU_LEASE_SECONDS": positive_number,
    "HYBRIDGPU_DEBOUNCE_SECONDS": non_negative_number,
    "HYBRIDGPU_WATCH_SECONDS": non_negative_whole_number,
    "HYBRIDGPU_FREEZE_HEAP": switch,
}
VALUES = [
    "0", "1", "8080", "65535", "65536", "70000", "99999", "-1", "0.5", "1e3", "nan", "inf",
    "abc", " 9 ", "true", "off", "yes",
]  # fmt: skip


def _env_error(name: str, value: str) -> str | None:
    try:
        OperatorOptions._from({name: value})
    except UserError as err:
        return str(err)
    return None


@pytest.mark.parametrize("name", CHECKS)
def test_a_variable_refuses_what_its_flag_refuses_in_the_same_words(name: str) -> None:
    for value in VALUES:
        try:
            CHECKS[name](value)
            flag_error = None
        except argparse.ArgumentTypeError as err:
            flag_error = str(err)
        env_error = _env_error(name, value)
        if flag_error is None:
            assert env_error is None, (name, value, env_error)
        else:
            assert env_error == f"${name}: {flag_error}", (name, value)


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("HYBRIDGPU_METRICS_PORT", "70000", "a port from 0 to 65535, got '70000'"),
        ("HYBRIDGPU_WEBHOOK_PORT", "65536", "a port from 0 to 65535, got '65536'"),
        ("HYBRIDGPU_LEASE_SECONDS", "0", "a finite number > 0, got '0'"),
        ("HYBRIDGPU_FREEZE_HEAP", "maybe", "1 or 0 (true/false, yes/no, on/off), got 'maybe'"),
    ],
)
def test_out_of_range_values_are_refused(name: str, value: str, expected: str) -> None:
    assert _env_error(name, value) == f"${name}: expected {expected}"


def test_freeze_heap_reads_the_usual_words_for_off() -> None:
    for word in ("0", "false", "False", "no", "off"):
        assert OperatorOptions._from({"HYBRIDGPU_FREEZE_HEAP": word}).freeze_heap is False
    for word in ("1", "true", "yes", "on"):
        assert OperatorOptions._from({"HYBRIDGPU_FREEZE_HEAP": word}).freeze_heap is True
    assert OperatorOptions._from({}).freeze_heap is True


def test_a_webhook_cert_dir_without_its_files_is_refused(tmp_path: Path) -> None:
    env = {"HYBRIDGPU_WEBHOOK_CERT_DIR": str(tmp_path), "HYBRIDGPU_WEBHOOK_PORT": "9443"}
    with pytest.raises(UserError, match=r"^\$HYBRIDGPU_WEBHOOK_CERT_DIR .*: no tls.crt, tls.key"):
        OperatorOptions._from(env)
    for name in ("tls.crt", "tls.key", "ca.crt"):
        (tmp_path / name).write_text("x")
    assert OperatorOptions._from(env).webhook_cert_dir


def test_the_cert_dir_of_a_webhook_not_served_is_not_asked_for(tmp_path: Path) -> None:
    """No $HYBRIDGPU_WEBHOOK_PORT: nothing reads the directory, so a Deployment that keeps
    the variable with the webhook off still starts."""
    env = {"HYBRIDGPU_WEBHOOK_CERT_DIR": str(tmp_path)}
    assert OperatorOptions._from(env).webhook_cert_dir == str(tmp_path)


@pytest.fixture
def started(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], dict[str, Any]]:
    """`hybridgpu run` argv with a kubeconfig, and what kopf.run would have been given (kopf
    is not started: no cluster is reached)."""
    import kopf

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    from kubernetes.config import kube_config

    # `run` points $KUBECONFIG and the client's default at the file: undone after the test.
    monkeypatch.setenv("KUBECONFIG", "")
    default = kube_config.KUBE_CONFIG_DEFAULT_LOCATION
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", default)
    for name in [*CHECKS, "HYBRIDGPU_METRICS_ADDRESS", "HYBRIDGPU_WEBHOOK_CERT_DIR", "KUBECONFIG"]:
        monkeypatch.delenv(name, raising=False)
    seen: dict[str, Any] = {}
    monkeypatch.setattr(kopf, "run", lambda **kw: seen.update(kw))
    # No log handler or signal handler left behind.
    monkeypatch.setattr(logging, "basicConfig", lambda **kw: None)
    monkeypatch.setattr(faulthandler, "register", lambda *a, **kw: None)
    return ["run", "--kubeconfig", str(kubeconfig)], seen


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("HYBRIDGPU_METRICS_PORT", "70000", "expected a port from 0 to 65535, got '70000'"),
        ("HYBRIDGPU_LEASE_SECONDS", "0", "expected a finite number > 0, got '0'"),
    ],
)
def test_run_with_a_bad_variable_is_one_line_and_exit_2(
    started: tuple[list[str], dict[str, Any]],
    name: str,
    value: str,
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv, seen = started
    monkeypatch.setenv(name, value.replace("{tmp}", str(tmp_path)))
    assert main(argv) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"hybridgpu: error: ${name}") and message in line
    assert not seen  # kopf was never started


def test_run_uses_the_variables_its_flags_do_not_override(
    started: tuple[list[str], dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    argv, seen = started
    monkeypatch.setenv("HYBRIDGPU_LEASE_SECONDS", "40")
    monkeypatch.setenv("HYBRIDGPU_METRICS_ADDRESS", "0.0.0.0")
    monkeypatch.setenv("HYBRIDGPU_METRICS_PORT", "9100")
    assert main(argv) == 0
    options = seen["memo"].options
    assert (options.lease_seconds, options.metrics_address, options.metrics_port) == (
        40.0,
        "0.0.0.0",
        9100,
    )
    seen.clear()
    assert main([*argv, "--lease-seconds", "9", "--metrics-address", "10.0.0.1"]) == 0
    options = seen["memo"].options
    assert (options.lease_seconds, options.metrics_address) == (9.0, "10.0.0.1")


def test_run_asks_for_the_cert_dir_files_only_of_a_webhook_it_serves(
    started: tuple[list[str], dict[str, Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """$HYBRIDGPU_WEBHOOK_CERT_DIR without its files: refused (one line, exit 2) when the
    webhook is served, from the variable's port or the flag's; `--no-webhook` starts."""
    argv, seen = started
    monkeypatch.setenv("HYBRIDGPU_WEBHOOK_CERT_DIR", str(tmp_path))
    for extra in ([], ["--webhook-port", "9443"]):
        if not extra:
            monkeypatch.setenv("HYBRIDGPU_WEBHOOK_PORT", "9443")
        assert main([*argv, *extra]) == 2
        (line,) = capsys.readouterr().err.splitlines()
        assert line.startswith("hybridgpu: error: $HYBRIDGPU_WEBHOOK_CERT_DIR")
        assert "no tls.crt, tls.key, ca.crt" in line
        monkeypatch.delenv("HYBRIDGPU_WEBHOOK_PORT", raising=False)
    assert not seen
    monkeypatch.setenv("HYBRIDGPU_WEBHOOK_PORT", "9443")
    assert main([*argv, "--no-webhook"]) == 0
    assert seen["memo"].options.webhook_port is None
