"""The TCO planner (`hybridgpu plan`, the CapacityPlan resource): how many GPU nodes to own,
and how much to rent on demand and on spot.

- ``model``: the inputs (demand, owned node types, cloud prices) and the figures of a fleet;
- ``replay``: a job trace placed on an owned fleet the way the operator places it;
- ``cost``: what any owned fleet costs over the horizon (duration curves or job replays);
- ``optimize``: the cheapest fleet;
- ``sensitivity``: the plan again with one input changed, and where the recommendation flips;
- ``plan``: the recommendation, its capital figures, and the CapacityPlan status;
- ``io``: demand histories, traces, Prometheus and plan files (reads files and the network);
- ``cli``: ``hybridgpu plan``.

Everything but ``io`` and ``cli`` is pure (an import-linter contract in pyproject.toml).
"""
