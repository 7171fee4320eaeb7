"""The one way the operator finds its Kubernetes API client, for the operator's own calls
(``hybridgpu.kube``) and for the providers that act through Kubernetes objects
(``hybridgpu.cloud``): the same configuration, and the same ``User-Agent`` in the apiserver's
audit log."""

from __future__ import annotations

import os
from typing import Any

from kubernetes import client, config

from hybridgpu import USER_AGENT

CONNECTIONS = 32
"""Connections kept open to the apiserver. The client's default is 5 per CPU the machine has
(10 on a 2-CPU node), fewer than the watch streams the operator holds open at once (one per
kind, a dozen with every workload CRD installed) plus its calls: each connection beyond the
pool was closed after use ("Connection pool is full, discarding connection") and the next
call paid a new TLS handshake."""
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
        api = config.new_client_from_config(config_file=path, client_configuration=_pooled())
    else:
        try:
            configuration = _pooled()
            config.load_incluster_config(client_configuration=configuration)
            api = client.ApiClient(configuration=configuration)
        except config.ConfigException:
            api = config.new_client_from_config(client_configuration=_pooled())
    api.user_agent = USER_AGENT
    _bound_every_call(api)
    return api


def _pooled() -> client.Configuration:
    """A fresh client configuration (not the process-wide default) with CONNECTIONS."""
    configuration: client.Configuration = type.__call__(client.Configuration)
    configuration.connection_pool_maxsize = CONNECTIONS
    return configuration


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
