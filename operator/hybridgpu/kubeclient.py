"""The one way the operator finds its Kubernetes API client, for the operator's own calls
(``hybridgpu.kube``) and for the providers that act through Kubernetes objects
(``hybridgpu.cloud``): the same configuration, and the same ``User-Agent`` in the apiserver's
audit log."""

from __future__ import annotations

import os
from typing import Any

from kubernetes import client, config

from hybridgpu import USER_AGENT

CONNECT_SECONDS = 5.0
READ_SECONDS = 90.0
"""The longest wait for the apiserver's next bytes on a call that sets no timeout of its own
(watches set theirs). The apiserver ends a request at 60 s (``--request-timeout``) with a 504,
so a read that waits longer waits on a connection that is gone; without a bound the call,
and the tick that made it, would wait forever (the client's default)."""


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
    _bound_every_call(api)
    return api


def _bound_every_call(api: client.ApiClient) -> None:
    """Give every request of ``api`` that names no ``_request_timeout`` (connect, read) of
    CONNECT_SECONDS and READ_SECONDS."""
    rest = api.rest_client
    unbounded = rest.request

    def request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if not kwargs.get("_request_timeout"):
            kwargs["_request_timeout"] = (CONNECT_SECONDS, READ_SECONDS)
        return unbounded(method, url, *args, **kwargs)

    rest.request = request
