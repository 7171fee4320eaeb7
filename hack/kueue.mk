# Kueue (sigs.k8s.io/kueue) built from its Go module, its CRDs and the ProvisioningRequest CRD,
# cached by version, for the Kueue e2e tests (tests/e2e/test_kueue_provisioning.py).
# Included by the main Makefile (`-include hack/*.mk`). See docs/workloads.md#kueue.

KUEUE := hack/kueue.sh

.PHONY: kueue

## make kueue: build (or reuse from the cache) the pinned Kueue and fetch its CRDs
kueue:
	$(KUEUE) build

TEST_PREREQS += kueue
