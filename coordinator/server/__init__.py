"""The coordinator's ZeroMQ server: the loop thread, what it runs besides requests
(timers, cross-thread calls, tick hooks: ``scheduler``), request dispatch, group commit,
connection limits, resource limits, the extension API services plug into, the Prometheus
metrics (``metrics``) and the HTTP endpoints that serve them, the status and the status page.
"""
