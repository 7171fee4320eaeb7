# The Kubeflow Trainer v2 controller manager built from its Go module
# (github.com/kubeflow/trainer/v2) with its CRDs, webhook manifests and torch-distributed
# runtime, cached by version, for the TrainJob e2e test (tests/e2e/test_trainjob_controller.py).
# Included by the main Makefile (`-include hack/*.mk`). See docs/workloads.md#trainjob.

TRAINER := hack/trainer.sh

.PHONY: trainer

## make trainer: build (or reuse from the cache) the pinned Trainer controller manager
trainer:
	$(TRAINER) build

TEST_PREREQS += trainer
