"""The coordinator's wire format: the request/reply envelope (``envelope``), the field
checks (``fields``), the messages and their replies (``protocol``) and the
error codes (``errors``). Shared by the server, its services and the client; the
client's side of a request's journey (sockets, re-sends, failover) is ``request_transport``.
"""
