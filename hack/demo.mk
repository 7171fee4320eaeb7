# The local demo (hack/demo.sh): control plane, CRDs, owned kwok GPU nodes, the pools of
# examples/demo.yaml (cloud capacity as kwok nodes), the operator in the background and a mixed
# workload. Included by the main Makefile (`-include hack/*.mk`). See docs/development.md.

DEMO := hack/demo.sh

.PHONY: demo demo-down demo-status

## make demo: the whole story on this machine within two minutes; prints how to watch it
demo: $(STAMP) control-plane tools
	$(DEMO) up

## make demo-down: stop the demo's operator and control plane; no process is left behind
demo-down:
	$(DEMO) down

demo-status:
	$(DEMO) status
