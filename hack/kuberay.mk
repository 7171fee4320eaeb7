# The KubeRay operator built from its Go module (github.com/ray-project/kuberay/ray-operator)
# and its CRDs, cached by version, for the RayJob e2e tests (tests/e2e/test_rayjob_gang.py).
# Included by the main Makefile (`-include hack/*.mk`). See docs/workloads.md#rayjob.

KUBERAY := hack/kuberay.sh

.PHONY: kuberay

## make kuberay: build (or reuse from the cache) the pinned KubeRay operator and its CRDs
kuberay:
	$(KUBERAY) build

TEST_PREREQS += kuberay
