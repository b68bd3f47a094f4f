"""The region controller: the consistent region's drain / checkpoint / reset cycle as
one state machine without I/O (``machine``: the phases, their transitions, what each
input does), the checkpoint cycle (``cycle``), the reset round (``reset``), who is in
the region (``membership``), the consistent checkpoints (``checkpoints``) and the
fence they pass (``continuity``), when the region may act (``timing``: the drain grid,
the pacing around rebalances, the backoff), its data (``model``), events (``events``), durable
document (``document``), and the service that drives it from the
server loop (``service``). Its wire messages, commands and config are in
:mod:`coordinator.protocol.region`.
"""
