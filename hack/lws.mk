# The LeaderWorkerSet controller built from its Go module (sigs.k8s.io/lws), its CRD and webhook
# manifests, cached by version, for the LeaderWorkerSet e2e tests (tests/e2e/test_lws_serving.py).
# Included by the main Makefile (`-include hack/*.mk`). See docs/workloads.md#leaderworkerset.

LWS := hack/lws.sh

.PHONY: lws

## make lws: build (or reuse from the cache) the pinned LeaderWorkerSet controller
lws:
	$(LWS) build

TEST_PREREQS += lws
