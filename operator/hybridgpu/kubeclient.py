"""The one way the operator finds its Kubernetes API client, for the operator's own calls
(``hybridgpu.kube``) and for the providers that act through Kubernetes objects
(``hybridgpu.cloud``): the same configuration, and the same ``User-Agent`` in the apiserver's
audit log."""

from __future__ import annotations

import os

from kubernetes import client, config

from hybridgpu import USER_AGENT


def api_client(kubeconfig: str | None = None) -> client.ApiClient:
    """``kubeconfig``, else $KUBECONFIG (``hybridgpu run`` sets it from --kubeconfig), else the
    in-cluster service account, else ~/.kube/config; the client says it is hybridgpu."""
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if path:
        api = config.new_client_from_config(config_file=path)
    else:
        try:
            config.load_incluster_config()
            api = client.ApiClient()
        except config.ConfigException:
            api = config.new_client_from_config()
    api.user_agent = USER_AGENT
    return api
