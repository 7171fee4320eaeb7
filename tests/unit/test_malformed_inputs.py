"""Bad input across every command keeps the README's promise: one line on stderr naming the
file, the field and what is expected, exit code 2, no traceback, no hang. Legitimate inputs
that used to be mistaken for bad ones (a byte-order mark, epoch seconds with --epoch) give a
correct result.

Cases run in-process through ``hybridgpu.cli.main`` where that is safe, and as a subprocess
with a time limit where a regression would hang (unbounded simulated time) or where the
command touches process-wide state (``run``/``explain`` set $KUBECONFIG).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from tests.support.kubeconfig import KUBECONFIG

from hybridgpu.cli import main

pytestmark = pytest.mark.unit

CASE_TIMEOUT_SECONDS = 10

CLUSTER = """\
apiVersion: hybridgpu.io/v1alpha1
kind: GPUPool
metadata: {name: core}
spec:
  tier: core
  gpu: {model: A100, perNode: 8}
  maxNodes: 1
  pricing: {capexPerNode: 100000, powerWattsPerNode: 4000}
---
apiVersion: hybridgpu.io/v1alpha1
kind: GPUPool
metadata: {name: elastic}
spec:
  tier: elastic
  gpu: {model: A100, perNode: 8}
  maxNodes: 2
  provider: {type: fake}
  pricing: {perNodeHour: 32}
---
apiVersion: hybridgpu.io/v1alpha1
kind: ScalingPolicy
metadata: {name: default}
spec: {interval: 30s}
"""
HEADER = "name,arrival_seconds,duration_seconds,gpus,criticality\n"
TRACE = HEADER + "a,0,3600,2,standard\nb,600,1800,1,preemptible\n"
OPENB_HEADER = "name,num_gpu,qos,creation_time,scheduled_time,deletion_time\n"
OPENB = OPENB_HEADER + "p1,1,LS,0,10,3610\np2,2,BE,100,100,1900\n"
PLAN = """\
horizonMonths: 12
candidates:
  - name: 8x
    gpusPerNode: 8
    capexPerNode: 280000
    powerWattsPerNode: 1000
    currentNodes: 1
cloud:
  onDemandPerGpuHour: 3.0
  spotPerGpuHour: 1.0
"""
DEMAND = "time,critical,standard,preemptible\n0,8,0,0\n3600,16,0,4\n7200,8,0,0\n"
LATIN1 = "name: caf\xe9\n".encode("latin-1")
UTF16 = CLUSTER.encode("utf-16")
JUNK = bytes(range(256)) * 4


def _files(root: Path) -> dict[str, Path]:
    """Every input file a case names, written once: ``{name}`` in a case's argv."""
    texts: dict[str, str | bytes] = {
        "cluster": CLUSTER,
        "latin1": LATIN1,
        "utf16": UTF16,
        "junk": JUNK,
        "empty": "",
        "metadata_list": CLUSTER.replace("metadata: {name: core}", "metadata: [x]", 1),
        "interval0": CLUSTER.replace("interval: 30s", "interval: 0s"),
        "price_inf": CLUSTER.replace("perNodeHour: 32", "perNodeHour: .inf"),
        "price_nan": CLUSTER.replace("perNodeHour: 32", "perNodeHour: .nan"),
        "capex_inf": CLUSTER.replace("capexPerNode: 100000", "capexPerNode: .inf"),
        "price_1e308": CLUSTER.replace("perNodeHour: 32", "perNodeHour: 1e308"),
        "price_1e300": CLUSTER.replace("perNodeHour: 32", "perNodeHour: 1.0e+300"),
        "price_at_limit": CLUSTER.replace("perNodeHour: 32", "perNodeHour: 1000000000"),
        "capex_1e300": CLUSTER.replace("capexPerNode: 100000", "capexPerNode: 1e300"),
        "watts_1e300": CLUSTER.replace("powerWattsPerNode: 4000", "powerWattsPerNode: 1e300"),
        "kwh_1e300": CLUSTER.replace("powerWattsPerNode: 4000", "electricityPerKWh: 1e300"),
        "budget_1e300": CLUSTER.replace(
            "interval: 30s", "interval: 30s, budget: {maxHourlyCost: 1, monthlyLimit: 1e300}"
        ),
        "savings_1e300": CLUSTER.replace(
            "interval: 30s", "interval: 30s, consolidation: {minSavingsPerHour: 1e300}"
        ),
        "idle_400_digits": CLUSTER.replace(
            "pricing: {perNodeHour: 32}",
            "pricing: {perNodeHour: 32}\n  scaleDown: {idleFor: 1" + "0" * 400 + "s}",
        ),
        "list_doc": "- a\n- b\n",
        "bad_yaml": "kind: GPUPool\nspec: [unclosed\n",
        "kind_unknown": CLUSTER.replace("kind: GPUPool", "kind: GPUPol", 1),
        "per_node_word": CLUSTER.replace("perNode: 8}", "perNode: eight}", 1),
        "dup_key": CLUSTER.replace("maxNodes: 2\n", "maxNodes: 2\n  maxNodes: 20\n", 1),
        "dup_pools": CLUSTER.replace("metadata: {name: elastic}", "metadata: {name: core}"),
        "dup_policies": CLUSTER
        + "---\n"
        + CLUSTER[
            CLUSTER.index("apiVersion: hybridgpu.io/v1alpha1\nkind: ScalingPolicy") :
        ].replace("30s", "1m"),
        "no_elastic": CLUSTER.split("---")[0],
        "grace_word": CLUSTER.replace("interval: 30s", "interval: soon"),
        "trace": TRACE,
        "trace_bom": "\ufeff" + TRACE,
        "trace_latin1": TRACE.replace("a,0", "caf\xe9,0").encode("latin-1"),
        "trace_utf16": TRACE.encode("utf-16"),
        "trace_junk": JUNK,
        "trace_dur_inf": TRACE + "c,900,inf,1,standard\n",
        "trace_arr_nan": TRACE + "c,nan,60,1,standard\n",
        "trace_gpus_inf": TRACE + "c,900,60,inf,standard\n",
        "trace_gpus_1e300": TRACE + "c,900,60,1e300,standard\n",
        "trace_gpus_frac": TRACE + "c,900,60,1.5,standard\n",
        "trace_arr_neg": TRACE + "c,-5,60,1,standard\n",
        "trace_header": "job,start,end\nx,0,1\n",
        "trace_empty": "",
        "trace_no_jobs": HEADER,
        "trace_zero_durations": HEADER + "a,0,0,1,standard\nb,0,0,2,preemptible\n",
        "trace_a_zero_duration": TRACE + "c,900,0,1,standard\n",
        "trace_epoch": HEADER + "a,1700000000,3600,1,standard\nb,1700000600,60,2,critical\n",
        "trace_huge_job": TRACE + "giant,900,3600,1000,standard\n",
        "trace_crit": TRACE + "c,900,60,1,urgent\n",
        "trace_long": TRACE + "c,900,100000000,1,standard\n",
        "trace_1e300_long": TRACE + "c,900,1e300,1,standard\n",
        "openb": OPENB,
        "openb_inf": OPENB + "p3,inf,LS,0,10,20\n",
        "openb_bom": "\ufeff" + OPENB,
        "spot_not_json": "{gap_seconds: 3",
        "spot_nan": '{"metadata": {"gap_seconds": NaN}, "data": [0, 1]}',
        "spot_data2": '{"metadata": {"gap_seconds": 60}, "data": [0, 2]}',
        "spot_utf16": '{"metadata": {"gap_seconds": 60}, "data": [0, 1]}'.encode("utf-16"),
        "spot_list": "[1, 2]",
        "spot_gap_tiny": '{"metadata": {"gap_seconds": 1e-320}, "data": [0, 1, 0]}',
        "spot_gap_1e300": '{"metadata": {"gap_seconds": 1e300}, "data": [0, 1, 0]}',
        "spot_prices_1e300": "seconds,pool,price_per_node_hour\n0,spot-8g,1e300\n",
        "spot_prices_late": "seconds,pool,price_per_node_hour\n0,spot-8g,1\n1e300,spot-8g,2\n",
        "plan": PLAN,
        "plan_latin1": PLAN.replace("name: 8x", "name: 8x-caf\xe9").encode("latin-1"),
        "plan_dup": PLAN.replace(
            "cloud:", PLAN[PLAN.index("  - name") : PLAN.index("cloud:")] + "cloud:"
        ),
        "plan_spec_list": "apiVersion: hybridgpu.io/v1alpha1\nkind: CapacityPlan\nspec: [x]\n",
        "plan_schedule0": PLAN + "schedule: 0s\n",
        "plan_capex_inf": PLAN.replace("capexPerNode: 280000", "capexPerNode: .inf"),
        "plan_price_nan": PLAN.replace("spotPerGpuHour: 1.0", "spotPerGpuHour: .nan"),
        "plan_dup_key": PLAN + "horizonMonths: 24\n",
        "plan_spot_1e300": PLAN.replace("spotPerGpuHour: 1.0", "spotPerGpuHour: 1e300"),
        "plan_watts_1e305": PLAN.replace("powerWattsPerNode: 1000", "powerWattsPerNode: 1e305"),
        "plan_nodes_1e300": PLAN.replace("currentNodes: 1", "currentNodes: 1" + "0" * 300),
        "plan_offer_1e300": PLAN
        + "committed:\n  - {name: 1y, termYears: 1, perGpuHour: 1, upfrontPerGpu: 1e300}\n",
        "plan_tokens_tiny": PLAN + "tokensPerGpuHour: 1e-320\n",
        "plan_mfu_inf": PLAN.replace(
            "spotPerGpuHour: 1.0", "spotPerGpuHour: 1.0\n  peakTflopsPerGpu: 989"
        )
        + "tokensPerGpuHour: 1e300\nmodelFlopsPerToken: 1e300\n",
        "plan_startup_400_digits": PLAN.replace(
            "spotPerGpuHour: 1.0", "spotPerGpuHour: 1.0\n  nodeStartup: 1" + "0" * 400 + "s"
        ),
        "plan_at_limits": PLAN.replace("onDemandPerGpuHour: 3.0", "onDemandPerGpuHour: 1000000000")
        .replace("spotPerGpuHour: 1.0", "spotPerGpuHour: 1000000000")
        .replace("capexPerNode: 280000", "capexPerNode: 1000000000000")
        .replace("currentNodes: 1", "currentNodes: 100000")
        .replace("horizonMonths: 12", "horizonMonths: 120"),
        "plan_kind": "kind: GPUPool\nspec: {}\n",
        "dlrm": "instance_sn,role,app_name,gpu_request,creation_time,scheduled_time,"
        "deletion_time\ni1,HN,app,1,0,0,3600\n",
        "plan_two_docs": PLAN + "---\n" + PLAN.replace("horizonMonths: 12", "horizonMonths: 36"),
        "demand": DEMAND,
        "demand_bom": "\ufeff" + DEMAND,
        "demand_1e300": DEMAND + "9000,1e300,0,0\n",
        "demand_time_nan": DEMAND + "nan,1,0,0\n",
        "demand_time_inf": DEMAND + "inf,1,0,0\n",
        "demand_utf16": DEMAND.encode("utf-16"),
        "demand_header": "when,gpus\n0,1\n",
        "kubeconfig": KUBECONFIG,
        "kube_garbage": "clusters: [unclosed\n",
        "kube_latin1": KUBECONFIG.replace("name: u,", "name: caf\xe9,").encode("latin-1"),
        "kube_no_context": KUBECONFIG.replace("current-context: ctx\n", ""),
        "a_file": "not a directory\n",
    }
    paths: dict[str, Path] = {}
    for name, content in texts.items():
        path = root / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        paths[name] = path
    (root / "a_dir").mkdir()
    paths["a_dir"] = root / "a_dir"
    (root / "chart.png").mkdir()
    paths["png_dir"] = root / "chart.png"
    (root / "emptyhome").mkdir()
    paths["emptyhome"] = root / "emptyhome"
    return paths


@dataclass(frozen=True)
class Case:
    """One command line; ``{name}`` stands for a file of ``_files``."""

    argv: tuple[str, ...]
    message: str
    """Expected in the one stderr line (exit 2), or in stdout when ``code`` is 0."""
    code: int = 2
    subprocess: bool = False
    env: dict[str, str] = field(default_factory=dict)


def sim(*args: str, **kw: object) -> Case:
    message = str(kw.pop("message"))
    return Case(("simulate", "--no-png", *args), message, **kw)  # type: ignore[arg-type]


def plan(*args: str, **kw: object) -> Case:
    message = str(kw.pop("message"))
    return Case(("plan", *args), message, **kw)  # type: ignore[arg-type]


def kube(*args: str, message: str, env: dict[str, str] | None = None) -> Case:
    return Case(tuple(args), message, subprocess=True, env=env or {})


CASES: dict[str, Case] = {
    # --- simulate: the cluster file
    "cluster Latin-1": sim("--cluster", "{latin1}", message="not UTF-8 text"),
    "cluster UTF-16": sim("--cluster", "{utf16}", message="UTF-16"),
    "cluster binary junk": sim("--cluster", "{junk}", message="expected UTF-8 text"),
    "cluster is a directory": sim("--cluster", "{a_dir}", message="is a directory"),
    "cluster missing": sim("--cluster", "/nonexistent.yaml", message="cannot read cluster file"),
    "cluster empty": sim("--cluster", "{empty}", message="no GPUPool found"),
    "cluster metadata a list": sim(
        "--cluster", "{metadata_list}", message="field 'metadata' is ['x']"
    ),
    "policy interval 0s": sim(
        "--cluster", "{interval0}", message="spec.interval: '0s' is not a duration > 0"
    ),
    "policy interval a word": sim("--cluster", "{grace_word}", message="is not a duration"),
    "price .inf": sim("--cluster", "{price_inf}", message="perNodeHour: inf is not a finite"),
    "price .nan": sim("--cluster", "{price_nan}", message="perNodeHour: nan is not a finite"),
    "capex .inf": sim("--cluster", "{capex_inf}", message="capexPerNode"),
    # --- money beyond its unit's limit (hybridgpu.models.limits): inf and 300-digit figures
    "price 1e308": sim(
        "--cluster",
        "{price_1e308}",
        message="spec.pricing.perNodeHour: 1e308 is above the limit of 1,000,000,000",
    ),
    "price 1e300": sim("--cluster", "{price_1e300}", message="perNodeHour: 1e+300 is above"),
    "capex 1e300": sim(
        "--cluster", "{capex_1e300}", message="capexPerNode: 1e300 is above the limit of 1,000,0"
    ),
    "power 1e300 watts": sim(
        "--cluster", "{watts_1e300}", message="powerWattsPerNode: 1e300 is above the limit"
    ),
    "electricity 1e300": sim(
        "--cluster", "{kwh_1e300}", message="electricityPerKWh: 1e300 is above the limit of 1,000"
    ),
    "monthly budget 1e300": sim(
        "--cluster", "{budget_1e300}", message="spec.budget.monthlyLimit: 1e300 is above"
    ),
    "min savings 1e300": sim(
        "--cluster", "{savings_1e300}", message="consolidation.minSavingsPerHour: 1e300 is above"
    ),
    "idleFor of 400 digits": sim(
        "--cluster", "{idle_400_digits}", message="too long a duration: at most 9 digits"
    ),
    "cluster a YAML list": sim("--cluster", "{list_doc}", message="expected a Kubernetes object"),
    "cluster not YAML": sim("--cluster", "{bad_yaml}", message="not valid YAML"),
    "cluster unknown kind": sim("--cluster", "{kind_unknown}", message="is not GPUPool"),
    "perNode a word": sim("--cluster", "{per_node_word}", message="spec.gpu.perNode"),
    "a key twice in one mapping": sim(
        "--cluster", "{dup_key}", message="line 17: not valid YAML (key 'maxNodes' twice"
    ),
    "plan key twice": plan(
        "--config",
        "{plan_dup_key}",
        "--history",
        "{demand}",
        message="not valid YAML (key 'horizonMonths' twice in one mapping)",
    ),
    "pool named twice": sim("--cluster", "{dup_pools}", message="used twice"),
    "policy named twice": sim(
        "--cluster", "{dup_policies}", message="ScalingPolicy name(s) used twice: default"
    ),
    "no elastic pool": sim("--cluster", "{no_elastic}", message="needs an elastic pool"),
    # --- simulate: the trace
    "trace Latin-1": sim("--trace", "{trace_latin1}", message="not UTF-8 text"),
    "trace UTF-16": sim("--trace", "{trace_utf16}", message="UTF-16"),
    "trace binary junk": sim("--trace", "{trace_junk}", message="expected UTF-8 text"),
    "trace missing": sim("--trace", "/nonexistent.csv", message="cannot read trace"),
    "trace is a directory": sim("--trace", "{a_dir}", message="is a directory"),
    "duration inf": sim(
        "--trace", "{trace_dur_inf}", message="'duration_seconds' is 'inf'", subprocess=True
    ),
    "arrival nan": sim("--trace", "{trace_arr_nan}", message="'arrival_seconds' is 'nan'"),
    "gpus inf": sim("--trace", "{trace_gpus_inf}", message="'gpus' is 'inf'"),
    "gpus 1e300": sim(
        "--trace", "{trace_gpus_1e300}", message="expected a whole number from 1 to 100,000"
    ),
    "gpus fractional": sim("--trace", "{trace_gpus_frac}", message="expected a whole number"),
    "arrival negative": sim("--trace", "{trace_arr_neg}", message="expected a finite number >= 0"),
    "trace header unknown": sim("--trace", "{trace_header}", message="cannot tell the trace"),
    "trace empty": sim("--trace", "{trace_empty}", message="cannot tell the trace format"),
    "trace without jobs": sim("--trace", "{trace_no_jobs}", message="no GPU jobs"),
    "trace of zero durations": sim(
        "--trace",
        "{trace_zero_durations}",
        message="no GPU jobs to simulate (skipped: 2 zero duration)",
    ),
    "criticality unknown": sim("--trace", "{trace_crit}", message="'criticality' is 'urgent'"),
    "epoch seconds": sim(
        "--trace", "{trace_epoch}", message="looks like Unix epoch seconds", subprocess=True
    ),
    "job runs for years": sim("--trace", "{trace_long}", message="runs 1,157 days"),
    "job runs 1e300 s": sim(
        "--trace", "{trace_1e300_long}", message="spans 1.16e+295 days from time 0"
    ),
    "job larger than every node": sim(
        "--trace", "{trace_huge_job}", message="job 'giant' needs 1000 GPUs on one node"
    ),
    "time scale 1e-6": sim(
        "--trace", "{trace}", "--time-scale", "1e-6", message="at most 366 days", subprocess=True
    ),
    "openb num_gpu inf": sim("--trace", "{openb_inf}", message="'num_gpu' is 'inf'"),
    "openb qos map for csv": sim(
        "--trace", "{trace}", "--qos-map", "LS=standard", message="--qos-map maps openb"
    ),
    "openb qos map bad value": sim("--trace", "{openb}", "--qos-map", "LS=vip", message="LS=vip"),
    "wrong explicit format": sim(
        "--trace", "{trace}", "--trace-format", "openb", message="missing column(s)"
    ),
    # --- simulate: flags
    "time scale 0": sim("--trace", "{trace}", "--time-scale", "0", message="--time-scale"),
    "time scale nan": sim("--trace", "{trace}", "--time-scale", "nan", message="got 'nan'"),
    "time scale without trace": sim("--time-scale", "2", message="applies to --trace"),
    "trace format without trace": sim("--trace-format", "csv", message="applies to --trace"),
    "epoch without trace": sim("--epoch", message="applies to --trace"),
    "hours nan": sim("--hours", "nan", message="--hours", subprocess=True),
    "hours inf": sim("--hours", "inf", message="--hours"),
    "hours a billion": sim("--hours", "1e9", message="at most 8784 hours"),
    "hours with a trace": sim("--trace", "{trace}", "--hours", "5", message="--hours"),
    "spot hazard nan": sim("--spot-hazard", "nan", message="--spot-hazard"),
    "spot hazard negative": sim("--spot-hazard", "-1", message="--spot-hazard"),
    "spot hazard and spot trace": sim(
        "--spot-hazard", "0.1", "--spot-trace", "{spot_data2}", message="pass one of them"
    ),
    "restart overhead nan": sim("--restart-overhead", "nan", message="--restart-overhead"),
    "provisioning delay inf": sim("--provisioning-delay", "inf", message="--provisioning-delay"),
    "seed a word": sim("--seed", "x", message="--seed"),
    "unknown flag": sim("--bogus", message="unrecognized arguments: --bogus"),
    "spot trace not JSON": sim("--spot-trace", "{spot_not_json}", message="not JSON"),
    "spot trace gap NaN": sim("--spot-trace", "{spot_nan}", message="gap_seconds"),
    "spot trace data 2": sim("--spot-trace", "{spot_data2}", message="only 0"),
    "spot trace UTF-16": sim("--spot-trace", "{spot_utf16}", message="UTF-16"),
    "spot trace a list": sim("--spot-trace", "{spot_list}", message="expected {"),
    "spot availability gap 1e-320 s": sim(
        "--spot-availability", "{spot_gap_tiny}", message="'metadata.gap_seconds' must be"
    ),
    "spot correlated gap 1e-320 s": sim(
        "--spot-correlated", "{spot_gap_tiny}", message="from 1 to 31,622,400"
    ),
    "spot trace gap 1e300 s": sim("--spot-trace", "{spot_gap_1e300}", message="got 1e+300"),
    "spot price 1e300": sim(
        "--spot-prices",
        "{spot_prices_1e300}",
        message="row 2: field 'price_per_node_hour' is '1e300'; expected dollars per node-hour, "
        "a finite number >= 0 and <= 1,000,000,000",
    ),
    "spot price at 1e300 s": sim(
        "--spot-prices", "{spot_prices_late}", message="row 3: field 'seconds' is '1e300'"
    ),
    "billing minimum 1e300 s": sim(
        "--billing-minimum", "1e300", message="--billing-minimum: expected a finite number >= 0"
    ),
    "provisioning delay 1e300 s": sim(
        "--provisioning-delay", "1e300", message="<= 31,622,400 seconds (the simulator's 366"
    ),
    "restart overhead 1e300 s": sim("--restart-overhead", "1e300", message="got '1e300'"),
    "checkpoint interval 1e300 s": sim("--checkpoint-interval", "1e300", message="got '1e300'"),
    "png not a png": Case(("simulate", "--png", "{a_dir}/chart.jpg"), "ending in .png"),
    "png under a file": Case(("simulate", "--png", "{a_file}/chart.png"), "cannot create"),
    "png is a directory": Case(("simulate", "--png", "{png_dir}"), "is a directory"),
    "png and no-png": sim("--png", "x.png", message="contradict"),
    # --- simulate: legitimate inputs, right results
    "price at its limit": sim(
        "--cluster", "{price_at_limit}", message="hybridgpu: total $", code=0
    ),
    "trace with a BOM": sim("--trace", "{trace_bom}", message="2 jobs", code=0),
    "openb detected": sim("--trace", "{openb_bom}", message="(openb, time scale 1)", code=0),
    "epoch seconds with --epoch": sim(
        "--trace", "{trace_epoch}", "--epoch", message="2 jobs", code=0
    ),
    "skip a zero-duration job": sim(
        "--trace", "{trace_a_zero_duration}", message="skipped: 1 zero duration", code=0
    ),
    "skip an infeasible job": sim(
        "--trace", "{trace_huge_job}", "--skip-infeasible", message="skipped 1 job(s)", code=0
    ),
    # --- plan
    "plan config Latin-1": plan(
        "--config", "{plan_latin1}", "--history", "{demand}", message="not UTF-8"
    ),
    "plan spec a list": plan("--config", "{plan_spec_list}", message="field 'spec'"),
    "plan candidate named twice": plan(
        "--config", "{plan_dup}", "--history", "{demand}", message="name '8x' is used twice"
    ),
    "plan schedule 0s": plan(
        "--config", "{plan_schedule0}", "--history", "{demand}", message="duration > 0"
    ),
    "plan capex .inf": plan(
        "--config", "{plan_capex_inf}", "--history", "{demand}", message="not a finite number"
    ),
    "plan price .nan": plan(
        "--config", "{plan_price_nan}", "--history", "{demand}", message="not a finite number"
    ),
    "plan wrong kind": plan("--config", "{plan_kind}", message="expected CapacityPlan"),
    "plan spot price 1e300": plan(
        "--config",
        "{plan_spot_1e300}",
        "--history",
        "{demand}",
        message="field 'cloud.spotPerGpuHour': 1e300 is above the limit of 1,000,000,000",
    ),
    "plan power 1e305 watts": plan(
        "--config", "{plan_watts_1e305}", "--history", "{demand}", message="limit of 10,000,000"
    ),
    "plan 1e300 current nodes": plan(
        "--config",
        "{plan_nodes_1e300}",
        "--history",
        "{demand}",
        message="'candidates.0.currentNodes': 1000000000000000... (301 characters) is above the "
        "limit of 100,000",
    ),
    "plan offer upfront 1e300": plan(
        "--config",
        "{plan_offer_1e300}",
        "--history",
        "{demand}",
        message="upfrontPerGpu': 1e300 is above",
    ),
    "plan tokens per GPU-hour 1e-320": plan(
        "--config", "{plan_tokens_tiny}", "--history", "{demand}", message="tokensPerGpuHour"
    ),
    "plan MFU above 100%": plan(
        "--config", "{plan_mfu_inf}", "--history", "{demand}", message="MFU cannot exceed 100%"
    ),
    "plan node startup of 400 digits": plan(
        "--config",
        "{plan_startup_400_digits}",
        "--trace",
        "{trace}",
        message="field 'cloud.nodeStartup': '100000000000000... (402 characters) is too long a d",
    ),
    "plan trace of zero durations": plan(
        "--config",
        "{plan}",
        "--trace",
        "{trace_zero_durations}",
        message="no GPU jobs in the trace (skipped: 2 zero duration)",
    ),
    "plan a DLRM trace": plan(
        "--config", "{plan}", "--trace", "{dlrm}", message="dlrm: trace format 'alibaba-dlrm'"
    ),
    "plan two documents": plan(
        "--config", "{plan_two_docs}", "--history", "{demand}", message="2 YAML documents"
    ),
    "plan demand 1e300": plan(
        "--config", "{plan}", "--history", "{demand_1e300}", message="is '1e300'"
    ),
    "plan demand time nan": plan(
        "--config", "{plan}", "--history", "{demand_time_nan}", message="'time' is 'nan'"
    ),
    "plan demand time inf": plan(
        "--config", "{plan}", "--history", "{demand_time_inf}", message="'time' is 'inf'"
    ),
    "plan demand UTF-16": plan(
        "--config", "{plan}", "--history", "{demand_utf16}", message="UTF-16"
    ),
    "plan demand header": plan(
        "--config", "{plan}", "--history", "{demand_header}", message="header is when,gpus"
    ),
    "plan job larger than every node": plan(
        "--config", "{plan}", "--trace", "{trace_huge_job}", message="largest candidate node (8x)"
    ),
    "plan search with a demand history": plan(
        "--config", "{plan}", "--history", "{demand}", "--search", "fast", message="--search choos"
    ),
    "plan time scale without trace": plan(
        "--config", "{plan}", "--history", "{demand}", "--time-scale", "2", message="--trace"
    ),
    "plan trace in epoch seconds": plan(
        "--config",
        "{plan}",
        "--trace",
        "{trace_epoch}",
        message="looks like Unix epoch seconds",
        subprocess=True,
    ),
    "plan time scale that stretches the trace": plan(
        "--config",
        "{plan}",
        "--trace",
        "{trace}",
        "--time-scale",
        "1e-6",
        message="the simulator covers at most 366 days",
        subprocess=True,
    ),
    "plan time scale inf": plan(
        "--config", "{plan}", "--trace", "{trace}", "--time-scale", "inf", message="got 'inf'"
    ),
    "plan png not a png": plan(
        "--config", "{plan}", "--history", "{demand}", "--png", "x.svg", message="ending in .png"
    ),
    "plan history missing": plan(
        "--config", "{plan}", "--history", "/nonexistent.csv", message="cannot read demand"
    ),
    "plan demand with a BOM": plan(
        "--config", "{plan}", "--history", "{demand_bom}", message="saving vs", code=0
    ),
    "plan at every limit": plan(
        "--config", "{plan_at_limits}", "--history", "{demand}", message="saving vs", code=0
    ),
    "plan skip infeasible": plan(
        "--config",
        "{plan}",
        "--trace",
        "{trace_huge_job}",
        "--skip-infeasible",
        message="skipped 1 job(s) larger than any candidate node",
        code=0,
    ),
    # --- crds
    "crds onto a file": Case(("crds", "-o", "{a_file}"), "is a file"),
    "crds under a file": Case(("crds", "-o", "{a_file}/crds"), "cannot create the directory"),
    "crds reference in a missing directory": Case(
        ("crds", "-o", "{a_dir}/crds-new", "--reference", "{a_dir}/missing/crd-reference.md"),
        "missing/crd-reference.md: no directory",
    ),
    "crds reference a directory": Case(
        ("crds", "-o", "{a_dir}/crds", "--reference", "{a_dir}"), "is a directory"
    ),
    # --- run and explain: all fail before connecting
    "run without any config": kube("run", message="no Kubernetes configuration: tried"),
    "run kubeconfig missing": kube("run", "--kubeconfig", "/nope/kc", message="no such file"),
    "run kubeconfig a directory": kube(
        "run", "--kubeconfig", "{a_dir}", message="is a directory; expected a kubeconfig file"
    ),
    "run kubeconfig garbage": kube(
        "run", "--kubeconfig", "{kube_garbage}", message="not a usable kubeconfig"
    ),
    "run kubeconfig binary": kube("run", "--kubeconfig", "{junk}", message="expected UTF-8"),
    "run unknown context": kube(
        "run", "--kubeconfig", "{kubeconfig}", "--context", "nope", message="nope"
    ),
    "run lease seconds nan": kube("run", "--lease-seconds", "nan", message="--lease-seconds"),
    "run metrics port a word": kube("run", "--metrics-port", "x", message="--metrics-port"),
    "run metrics port 99999": kube(
        "run", "--metrics-port", "99999", message="--metrics-port: expected a port from 0 to 65535"
    ),
    "run webhook port 70000": kube(
        "run", "--webhook-port", "70000", message="--webhook-port: expected a port from 0"
    ),
    "run webhook cert dir without certificates": kube(
        "run", "--webhook-cert-dir", "{a_dir}", message="no tls.crt, tls.key, ca.crt"
    ),
    "run liveness not a URL": kube(
        "run", "--liveness", "healthz", message="--liveness: expected http://HOST:PORT/PATH"
    ),
    "run liveness https": kube(
        "run", "--liveness", "https://0.0.0.0:8080/healthz", message="--liveness: expected http"
    ),
    "explain without any config": kube("explain", message="no Kubernetes configuration"),
    "explain $KUBECONFIG missing": kube(
        "explain", message="$KUBECONFIG (/nope/config)", env={"KUBECONFIG": "/nope/config"}
    ),
    "explain kubeconfig Latin-1": kube(
        "explain", "--kubeconfig", "{kube_latin1}", message="not UTF-8 text"
    ),
    "explain kubeconfig without context": kube(
        "explain", "--kubeconfig", "{kube_no_context}", message="not a usable kubeconfig"
    ),
    # --- an empty file name (an unset shell variable) is an error, never the flag's default
    "simulate empty --trace": sim("--trace", "", message="argument --trace: expected a file"),
    "simulate empty --cluster": sim("--cluster", "", message="argument --cluster: expected"),
    "simulate empty --spot-prices": sim("--spot-prices", "", message="--spot-prices: expected"),
    "simulate empty --png": Case(("simulate", "--png", ""), "argument --png: expected a file"),
    "plan empty --history": plan(
        "--config", "{plan}", "--history", "", message="argument --history: expected a file"
    ),
    "plan empty --config": plan("--config", "", message="argument --config/-c: expected"),
    "crds empty --output": Case(("crds", "-o", ""), "argument --output/-o: expected a file"),
    "explain empty --kubeconfig": kube(
        "explain", "--kubeconfig", "", message="argument --kubeconfig: expected a file"
    ),
    # --- the command line itself
    "no command": Case((), "required: command"),
    "unknown command": Case(("simulat",), "invalid choice"),
}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return _files(tmp_path_factory.mktemp("inputs"))


def _argv(case: Case, files: dict[str, Path]) -> list[str]:
    out = []
    for arg in case.argv:
        for name, path in files.items():
            arg = arg.replace("{" + name + "}", str(path))
        out.append(arg)
    return out


def _subprocess_env(files: dict[str, Path], extra: dict[str, str]) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")
    }
    env["HOME"] = str(files["emptyhome"])  # no ~/.kube/config to fall back on
    env.update(extra)
    return env


def _run(case: Case, files: dict[str, Path], capsys: pytest.CaptureFixture[str], cwd: Path):
    argv = _argv(case, files)
    if case.subprocess:
        done = subprocess.run(
            [sys.executable, "-m", "hybridgpu.cli", *argv],
            capture_output=True,
            text=True,
            timeout=CASE_TIMEOUT_SECONDS,
            env=_subprocess_env(files, case.env),
            cwd=cwd,
            check=False,
        )
        return done.returncode, done.stdout, done.stderr
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_malformed_input_is_one_line_and_exit_2(
    case: Case,
    files: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)  # a default out/simulation.png lands here
    code, out, err = _run(case, files, capsys, tmp_path)
    assert "Traceback" not in err
    if case.code == 0:
        assert code == 0, err
        assert case.message in out
        assert err == ""
        return
    assert code == case.code, (out, err)
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert case.message in lines[0]
    assert not (tmp_path / "out" / "simulation.png").exists()  # nothing ran before the error


def test_the_table_covers_every_command_with_60_cases() -> None:
    commands = {case.argv[0] for case in CASES.values() if case.argv}
    assert commands >= {"simulate", "plan", "crds", "run", "explain"}
    assert sum(1 for c in CASES.values() if c.code == 2) >= 60


def test_crds_into_a_new_directory_writes_every_file(tmp_path: Path, capsys) -> None:
    assert main(["crds", "-o", str(tmp_path / "crds")]) == 0
    assert len(list((tmp_path / "crds").glob("*.yaml"))) == 3
    assert capsys.readouterr().err == ""


def test_an_unexpected_error_is_one_line_and_exit_1(monkeypatch, capsys) -> None:
    import hybridgpu.planner.cli

    def broken(args: object) -> int:
        raise RuntimeError("boom")

    monkeypatch.setattr(hybridgpu.planner.cli, "run", broken)
    assert main(["plan", "--config", "x"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1
    assert "RuntimeError: boom" in err[0] and "run with --debug for the traceback" in err[0]
    with pytest.raises(RuntimeError):
        main(["plan", "--config", "x", "--debug"])


def test_version(capsys) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("hybridgpu ")


def test_json_into_a_closed_pipe_exits_quietly(files: dict[str, Path], tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "hybridgpu.cli", "simulate", "--no-png", "--json", "--hours", "6"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # `| head -c 0`: the reader is gone before the JSON is written
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141
    assert err == ""


def test_skip_infeasible_reports_in_json(files: dict[str, Path], capsys) -> None:
    argv = ["simulate", "--no-png", "--json", "--trace", str(files["trace_huge_job"])]
    assert main([*argv, "--skip-infeasible"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["jobs"] == 2  # the 1000-GPU job is not simulated


def test_long_runs_print_progress_lines_when_stderr_is_not_a_terminal(capsys) -> None:
    from hybridgpu.sim.cli import _ProgressLines

    quiet = _ProgressLines(quiet_seconds=3600, every_seconds=3600)
    quiet("hybridgpu", 0.5)
    assert capsys.readouterr().err == ""  # a short run stays silent
    chatty = _ProgressLines(quiet_seconds=0, every_seconds=0)
    chatty("hybridgpu", 0.25)
    chatty("hybridgpu", 1.0)  # finished: no line, and no longer named
    chatty("on_demand", 0.5)
    chatty("reactive", 0.125)  # --workers: runs side by side are named together
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("hybridgpu simulate: hybridgpu 25% of the trace simulated")
    assert lines[1].startswith("hybridgpu simulate: on_demand 50% of the trace simulated")
    assert lines[2].startswith("hybridgpu simulate: on_demand 50%, reactive 12% of the trace")


def test_bad_input_is_reported_before_the_heavy_imports(files: dict[str, Path]) -> None:
    """Each case must answer within CASE_TIMEOUT_SECONDS on a loaded machine: the CLI's
    parser and a missing kubeconfig are answered without pydantic's models or the kubernetes
    client (together about 0.7 CPU seconds, over 5 s of wall time at load 25 on 2 cores;
    the parser imported every model through sim.traces, explain the client first, a
    malformed trace was read after the cluster file's models were built, and a kubeconfig
    that is not YAML or names no context was checked by the client)."""
    probe = (
        "import sys\n"
        "from hybridgpu.cli import main\n"
        "code = main(sys.argv[1:])\n"
        "heavy = sorted(m for m in ('pydantic', 'kubernetes', 'kopf') if m in sys.modules)\n"
        "print(code, ','.join(heavy) or '-')\n"
    )
    bad_trace = ["simulate", "--no-png", "--trace", str(files["trace_dur_inf"])]
    epoch = ["simulate", "--no-png", "--trace", str(files["trace_epoch"])]
    plan_epoch = ["plan", "--config", str(files["plan"]), "--trace", str(files["trace_epoch"])]
    for argv in (
        ["--version"],
        ["explain"],
        ["run"],
        ["simulate", "--hours", "nan"],
        bad_trace,
        epoch,
        plan_epoch,
        ["run", "--kubeconfig", str(files["kube_garbage"])],
        ["explain", "--kubeconfig", str(files["kube_no_context"])],
        ["run", "--kubeconfig", str(files["kubeconfig"]), "--context", "nope"],
    ):
        done = subprocess.run(
            [sys.executable, "-c", probe, *argv],
            capture_output=True,
            text=True,
            timeout=60,
            env=_subprocess_env(files, {}),
            check=False,
        )
        assert done.stdout.split()[-2:] in (["0", "-"], ["2", "-"]), (argv, done.stdout)


@pytest.mark.parametrize(
    "name",
    [
        "HYBRIDGPU_METRICS_PORT",
        "HYBRIDGPU_WEBHOOK_PORT",
        "HYBRIDGPU_WATCH_SECONDS",
        "HYBRIDGPU_LEASE_SECONDS",
        "HYBRIDGPU_DEBOUNCE_SECONDS",
    ],
)
def test_a_bad_number_in_the_environment_names_the_variable(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hybridgpu.errors import UserError
    from hybridgpu.handlers.options import OperatorOptions

    monkeypatch.setenv(name, "abc")
    with pytest.raises(UserError, match=rf"^\${name}: expected .*, got 'abc'$"):
        OperatorOptions.from_env()


def test_a_merge_key_may_be_overridden(tmp_path: Path) -> None:
    from hybridgpu.inputs import read_yaml_documents

    path = tmp_path / "anchors.yaml"
    path.write_text("base: &b {maxNodes: 2, minNodes: 0}\npool: {<<: *b, maxNodes: 4}\n")
    (doc,) = read_yaml_documents(path, "cluster file")
    assert doc["pool"] == {"maxNodes": 4, "minNodes": 0}


def test_crds_with_a_reference_in_a_missing_directory_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "crds"
    assert main(["crds", "-o", str(out), "--reference", str(tmp_path / "no" / "ref.md")]) == 2
    assert not out.exists()


# --- a figure that is not a number is never printed as a result (inputs are bounded so that
# none can be: one that is, is a bug, said on one line naming it, exit 1)


def _on_demand_bill_is(value: float, monkeypatch: pytest.MonkeyPatch) -> None:
    import hybridgpu.sim.compare

    real = hybridgpu.sim.compare._run

    def run(name: str, *args: object) -> object:
        result = real(name, *args)  # type: ignore[arg-type]
        if name == "on_demand":
            result.cost_by_tier_dollars["elastic"] = value
            result.total_cost_dollars = value
        return result

    monkeypatch.setattr(hybridgpu.sim.compare, "_run", run)


@pytest.mark.parametrize("value", [math.inf, math.nan])
@pytest.mark.parametrize("json_flag", [[], ["--json"]], ids=["table", "json"])
def test_simulate_says_which_figure_is_not_a_number_instead_of_printing_it(
    value: float, json_flag: list[str], monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    _on_demand_bill_is(value, monkeypatch)
    argv = ["simulate", "--no-png", "--hours", "6", "--workers", "1", *json_flag]
    assert main(argv) == 1
    out, err = capsys.readouterr()
    assert out == ""  # no table, no JSON with Infinity or NaN in it
    (line,) = err.splitlines()
    assert line.startswith(
        "hybridgpu: internal error: FigureNotFinite: simulate: "
        f"on_demand.total_cost_dollars is {value}"
    )


def test_the_report_itself_refuses_to_format_a_figure_that_is_not_a_number() -> None:
    from hybridgpu.errors import FigureNotFinite
    from hybridgpu.sim.engine import PolicyResult
    from hybridgpu.sim.report import _ratio, headline, table

    def result(name: str, dollars: float) -> PolicyResult:
        waits = {c: {"p50": 0.0, "p95": math.inf} for c in ("critical", "standard", "preemptible")}
        return PolicyResult(name, dollars, {"elastic": dollars}, {}, waits, 0, 0, 0, 1)

    fine = {n: result(n, 10.0) for n in ("hybridgpu", "autoscaler_spot", "fluid_bound")}
    assert "never" in table(fine)  # a wait that never ended is a result, not a bug
    assert "1.00x autoscaler_spot" in headline(fine)
    broken = {**fine, "autoscaler_spot": result("autoscaler_spot", math.nan)}
    for report in (table, headline):
        with pytest.raises(FigureNotFinite, match=r"autoscaler_spot\.total_cost_dollars is nan"):
            report(broken)
    with pytest.raises(FigureNotFinite, match="ratio"):
        _ratio(1e10, 1e-310)  # finite figures whose ratio is not: never "infx"


PLAN_WITH_TOKENS = PLAN + "tokensPerGpuHour: 1000000\n"


def test_plan_says_which_status_figure_is_not_a_number(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    import hybridgpu.planner.plan

    monkeypatch.setattr(hybridgpu.planner.plan, "cost_per_million_tokens", lambda *a: math.inf)
    config = tmp_path / "plan.yaml"
    config.write_text(PLAN_WITH_TOKENS)
    history = tmp_path / "demand.csv"
    history.write_text(DEMAND)
    for json_flag in ([], ["--json"]):
        assert main(["plan", "-c", str(config), "--history", str(history), *json_flag]) == 1
        out, err = capsys.readouterr()
        assert out == ""
        (line,) = err.splitlines()
        assert line.startswith(
            "hybridgpu: internal error: FigureNotFinite: plan: status.cost_per_million_tokens: "
            "inf is not a finite number"
        )


def test_plan_says_which_other_figure_is_not_a_number(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    import hybridgpu.planner.cli

    monkeypatch.setattr(
        hybridgpu.planner.cli, "_runner_ups", lambda result: [{"monthlyCost": math.nan}]
    )
    config = tmp_path / "plan.yaml"
    config.write_text(PLAN)
    history = tmp_path / "demand.csv"
    history.write_text(DEMAND)
    assert main(["plan", "-c", str(config), "--history", str(history)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    (line,) = err.splitlines()
    assert "FigureNotFinite: plan.nextBest[0].monthlyCost is nan" in line
