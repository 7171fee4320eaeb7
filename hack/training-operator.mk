# The Kubeflow training operator's PyTorchJob controller built from its Go module
# (github.com/kubeflow/training-operator) and the PyTorchJob CRD, cached by version, for the
# PyTorchJob e2e tests (tests/e2e/test_pytorchjob_controller.py).
# Included by the main Makefile (`-include hack/*.mk`). See docs/workloads.md#pytorchjob.

TRAINING_OPERATOR := hack/training-operator.sh

.PHONY: training-operator

## make training-operator: build (or reuse from the cache) the pinned PyTorchJob controller
training-operator:
	$(TRAINING_OPERATOR) build

TEST_PREREQS += training-operator
