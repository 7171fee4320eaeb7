# The JobSet controller built from its Go module (sigs.k8s.io/jobset) for the JobSet e2e tests,
# and the CRDs of the other suspendable batch kinds hybridgpu moves (KubeRay's RayJob,
# Kubeflow's PyTorchJob) for the adapter tests, all cached by version.
# Included by the main Makefile (`-include hack/*.mk`). See docs/workloads.md#batch-kinds.

JOBSET := hack/jobset.sh

.PHONY: jobset workload-crds

## make jobset: build (or reuse) the JobSet controller and fetch the workload CRDs
jobset:
	$(JOBSET) build

## make workload-crds: download (or reuse) only the RayJob and PyTorchJob CRDs
workload-crds:
	$(JOBSET) crds

TEST_PREREQS += jobset
