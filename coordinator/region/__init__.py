"""The region controller: the consistent region's drain / checkpoint / reset cycle as a
state machine without I/O (``state``, ``model``), its reset rounds (``reset``), its wire
messages (``messages``) and the service that drives it from the server loop (``controller``).
"""
