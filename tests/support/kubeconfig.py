"""A kubeconfig the client accepts, pointing at a port where nothing listens: for tests that
get past the configuration check and must not reach a cluster."""

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:9"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: ctx, context: {cluster: c, user: u}}]
current-context: ctx
"""
