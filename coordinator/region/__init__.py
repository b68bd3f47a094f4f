"""The region controller: the consistent region's drain / checkpoint / reset cycle as a
state machine without I/O (``state``, ``model``), who may join under a member name
(``admission``), its reset rounds (``reset``), the pacing of checkpoints after
rebalances (``pacing``), its durable document (``document``) and the service that
drives it from the server loop (``controller``). Its wire messages, commands and config
are in :mod:`coordinator.protocol.region`.
"""
