"""Hardware generations by cost per unit of work: relative throughput per GPU model and
workload class (defaults from public MLPerf results, sources in docs/tco.md), and the
comparison of candidates in dollars and watts per unit of work."""

from __future__ import annotations

from dataclasses import dataclass

# Throughput of one GPU relative to one H100 SXM, per workload class, from public MLPerf
# results (docs/tco.md, "Throughput defaults"). A class without a published figure is absent.
MLPERF_RELATIVE_THROUGHPUT: dict[str, dict[str, float]] = {
    # MLPerf Training v3.0 (2023), Dell 8-GPU systems, DLRM: H100 2.0x A100.
    "A100": {"training": 0.5},
    "H100": {"training": 1.0, "inference": 1.0},
    # MLPerf Inference v4.1 (2024), Llama 2 70B offline, tokens/s per GPU: H200 4,488 (1 GPU)
    # vs H100 2,675 (10,700 on 4 GPUs).
    "H200": {"inference": 1.68},
    # MLPerf Training v4.1 (2024): B200 about 2x H100 per GPU (GPT-3 175B, Llama 2 70B LoRA);
    # MLPerf Inference v4.1, Llama 2 70B offline: 11,264 tokens/s on one B200 (FP4) vs 2,675.
    "B200": {"training": 2.0, "inference": 4.21},
}


# Peak dense BF16 tensor throughput of one GPU, TFLOPS, from NVIDIA's datasheets (the
# figures "with sparsity" halved; docs/tco.md, "MFU"). Keys are upper case without spaces
# or dashes; the longest key contained in a model name wins.
PEAK_DENSE_BF16_TFLOPS: dict[str, float] = {
    "A10": 125.0,  # NVIDIA A10 datasheet: BF16 125 TFLOPS (250 with sparsity)
    "L4": 121.0,  # NVIDIA L4 datasheet: BF16 242 TFLOPS with sparsity
    "A100": 312.0,  # NVIDIA A100 datasheet: BF16 312 TFLOPS (624 with sparsity)
    "H100": 989.0,  # NVIDIA H100 datasheet, SXM: BF16 1,979 TFLOPS with sparsity
    "H100PCIE": 756.0,  # NVIDIA H100 datasheet, PCIe: BF16 1,513 TFLOPS with sparsity
    "H200": 989.0,  # NVIDIA H200 datasheet, SXM: BF16 1,979 TFLOPS with sparsity
    "B200": 2250.0,  # NVIDIA HGX B200: BF16 36 PFLOPS with sparsity for 8 GPUs
}


def default_peak_tflops(gpu_model: str | None) -> float | None:
    """Datasheet peak dense BF16 TFLOPS of ``gpu_model``, or None when unknown."""
    if not gpu_model:
        return None
    name = gpu_model.upper().replace(" ", "").replace("-", "")
    for key in sorted(PEAK_DENSE_BF16_TFLOPS, key=len, reverse=True):
        if key in name:
            return PEAK_DENSE_BF16_TFLOPS[key]
    return None


def default_throughput(gpu_model: str | None, workload_class: str) -> float | None:
    """MLPerf-based throughput of ``gpu_model`` relative to an H100, or None when unknown."""
    if not gpu_model:
        return None
    name = gpu_model.upper()
    # Longest key first: a model name may contain a shorter one.
    for key in sorted(MLPERF_RELATIVE_THROUGHPUT, key=len, reverse=True):
        if key in name:
            return MLPERF_RELATIVE_THROUGHPUT[key].get(workload_class)
    return None


def relative_throughput(
    explicit: float | None,
    gpu_model: str | None,
    reference_model: str | None,
    workload_class: str,
) -> tuple[float, str]:
    """A candidate's throughput relative to the demand's GPU class, and where it came from:
    the spec's figure, the MLPerf defaults of both models, or 1 (same class assumed)."""
    if explicit is not None:
        return explicit, "spec"
    mine = default_throughput(gpu_model, workload_class)
    reference = default_throughput(reference_model, workload_class)
    if mine is not None and reference is not None:
        return mine / reference, "MLPerf default"
    return 1.0, "assumed equal to the demand's GPUs"


@dataclass(frozen=True, slots=True)
class WorkCost:
    """One way to get capacity, per unit of work (one demand-class GPU busy for an hour)."""

    name: str
    kind: str
    """owned, committed or onDemand."""
    throughput: float
    dollars_per_work_hour: float
    """At full use: owned and committed are paid whether used or not."""
    watts_per_work_unit: float | None
    paid_when_idle: bool

    def at_utilization(self, utilization: float) -> float:
        """Dollars per unit of work done at this utilization (0..1]."""
        if not self.paid_when_idle:
            return self.dollars_per_work_hour
        return self.dollars_per_work_hour / max(utilization, 1e-9)


@dataclass(frozen=True, slots=True)
class GenerationComparison:
    """Which way of getting capacity is cheapest per unit of work, and where that flips."""

    options: tuple[WorkCost, ...]
    winner: str
    """Cheapest per unit of work at full use among what is paid whether used or not."""
    flip_utilization: float
    """Below this utilization, on demand is cheaper per unit of work than the winner."""
    runner_up: str | None
    runner_up_margin: float
    """How much dearer per unit of work the runner-up is, 0..; both paid whether used or not,
    so the order holds at any utilization."""


def compare(options: list[WorkCost]) -> GenerationComparison:
    """Rank the options paid whether used or not by dollars per unit of work; the flip is
    where the winner meets on demand (the cheapest option paid per use)."""
    fixed = sorted(
        (o for o in options if o.paid_when_idle), key=lambda o: (o.dollars_per_work_hour, o.name)
    )
    per_use = [o for o in options if not o.paid_when_idle]
    rent = min((o.dollars_per_work_hour for o in per_use), default=float("inf"))
    if not fixed:
        return GenerationComparison(tuple(options), "onDemand", 1.0, None, 0.0)
    winner = fixed[0]
    runner = fixed[1] if len(fixed) > 1 else None
    return GenerationComparison(
        options=tuple(options),
        winner=winner.name,
        flip_utilization=min(winner.dollars_per_work_hour / rent, 1.0),
        runner_up=runner.name if runner is not None else None,
        runner_up_margin=(
            runner.dollars_per_work_hour / winner.dollars_per_work_hour - 1.0
            if runner is not None
            else 0.0
        ),
    )
