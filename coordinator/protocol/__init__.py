"""What the coordinator process and its clients (``cr_consumer``'s members) both speak
and share: the wire format (``wire``), the region's messages, commands, config and
Kafka report (``region``), the CurveZMQ key files (``curve_keys``) and the lowest
layer of helpers both packages use (``common``). Nothing here imports the server,
the store, the services or the region controller.
"""
