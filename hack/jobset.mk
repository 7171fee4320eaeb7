# The CRDs of the suspendable batch kinds hybridgpu moves beyond batch/v1 Job (KubeRay's
# RayJob, Kubeflow's PyTorchJob), from their Go modules, cached by version, for the adapter
# tests (tests/adapters/test_apiserver_workload_kinds.py).
# Included by the main Makefile (`-include hack/*.mk`). See docs/workloads.md#batch-kinds.

JOBSET := hack/jobset.sh

.PHONY: workload-crds

## make workload-crds: download (or reuse) the RayJob and PyTorchJob CRDs the tests install
workload-crds:
	$(JOBSET) crds

TEST_PREREQS += workload-crds
