"""TokenCounter: tokens per node between two reads of a counter, resets handled per series."""

from __future__ import annotations

import pytest

from hybridgpu.metrics.prometheus import PrometheusClient, Sample, TokenCounter

pytestmark = pytest.mark.unit

NODE_OF = PrometheusClient("http://prometheus.invalid").node_of


def counter(node: str | None, pod: str, value: float) -> Sample:
    labels = {"__name__": "vllm:generation_tokens_total", "pod": pod}
    if node is not None:
        labels["kubernetes_node"] = node
    return Sample(labels, value, 0.0)


CASES = {
    "the first read only sets the baseline": ([[counter("n1", "a", 500)]], {}),
    "growth between reads": (
        [[counter("n1", "a", 100)], [counter("n1", "a", 250)]],
        {"n1": 150},
    ),
    "a restarted server counts again from zero": (
        [[counter("n1", "a", 100)], [counter("n1", "a", 250)], [counter("n1", "a", 40)]],
        {"n1": 40},
    ),
    "two servers on one node add up": (
        [
            [counter("n1", "a", 10), counter("n1", "b", 20)],
            [counter("n1", "a", 15), counter("n1", "b", 30)],
        ],
        {"n1": 15},
    ),
    "a series without a node label is left out": (
        [[counter(None, "a", 10)], [counter(None, "a", 99)]],
        {},
    ),
    "a series that went away starts from a new baseline": (
        [[counter("n1", "a", 10)], [], [counter("n1", "a", 70)]],
        {},
    ),
}


@pytest.mark.parametrize(("reads", "want_last"), CASES.values(), ids=CASES.keys())
def test_tokens_per_node_of_the_last_read(
    reads: list[list[Sample]], want_last: dict[str, float]
) -> None:
    tokens = TokenCounter()
    got: dict[str, float] = {}
    for samples in reads:
        got = tokens.increase_by_node(samples, NODE_OF)
    assert got == want_last
