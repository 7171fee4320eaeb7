"""`hybridgpu simulate`: argument parsing and output; the work is in ``sim.engine``."""

from __future__ import annotations

import argparse
from typing import Any


def add_parsers(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "simulate", help="compare hybridgpu against baselines on a job trace"
    )
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    raise NotImplementedError("simulate is being written")
