"""The simulator's physics and SLO defaults, apart from the engine so that building the CLI's
parser (help texts show them) imports nothing heavy. docs/concepts.md gives their sources."""

DEFAULT_BOOT_SECONDS = 300.0
"""Launch to a Ready GPU node running the pod, image pull included."""
DEFAULT_CHECKPOINT_SECONDS = 1800.0
"""Progress between a job's checkpoints."""
DEFAULT_BILLING_MINIMUM_SECONDS = 60.0
"""The least a cloud node is billed (EC2 Linux: per second, 60 s minimum)."""
DEFAULT_FIRM_SLO_SECONDS = 900.0
"""How late a critical or standard job may finish: room for a node's boot and a tick or two."""
DEFAULT_PREEMPTIBLE_SLO_SECONDS = 4 * 3600.0
"""How late a preemptible job may finish: hours, as a batch queue promises."""
MAX_SPAN_DAYS = 366.0
"""Longest simulated time: the simulator steps through every interval from time 0, so a trace
in epoch seconds (1.7e9 s = 54 years) or a tiny --time-scale would run for hours. No
duration flag (a boot, a billing minimum) may exceed it either: 1e300 seconds of billing
minimum would print as a 300-digit bill."""
MAX_SPAN_SECONDS = MAX_SPAN_DAYS * 86400
TRACE_FORMATS = ("openb", "csv", "alibaba-dlrm")
"""Trace file formats ``simulate --trace-format`` reads (sim/traces.py parses them)."""
