# CRDs of the capacity providers hybridgpu steers (Karpenter NodePool/NodeClaim, Cluster API
# MachineDeployment/MachineSet/Machine), from their Go modules, cached by version.
# Included by the main Makefile (`-include hack/*.mk`). See docs/providers.md.

PROVIDER_CRDS := hack/provider-crds.sh

.PHONY: provider-crds

## make provider-crds: download (or reuse) the Karpenter and Cluster API CRDs the tests install
provider-crds:
	$(PROVIDER_CRDS) fetch

TEST_PREREQS += provider-crds
