"""A wire fuzzer for the coordinator: hostile frames against a real process over ZeroMQ.

The parts, each one concern:

* ``values``: hostile JSON values (lone surrogates, raw invalid UTF-8, control
  characters, deep nesting, non-finite and huge numbers, ...) and the encoder
  that splices raw bytes and literal tokens into a JSON text;
* ``schemas``: a valid body for every message type the coordinator registers
  (``discover_handlers`` lists them the way the server's services register
  them), as hypothesis strategies;
* ``frames``: structure-aware mutations of valid envelopes, plus raw bytes;
* ``target``: the coordinator under test (a real ``cr-coordinator`` process,
  its raw DEALER socket, liveness, RSS sampling, restart on the same state dir);
* ``model``: the acknowledged writes, checked against what a (restarted)
  coordinator answers;
* ``campaign``: batches of frames, the checks after each batch, crash
  restarts and minimisation of the crashing input to a reproducer.

Used by tests/coordinator/protocol/wire/test_fuzz_wire.py (a short budget in ``make test``), ``make fuzz``
(a long run) and bench/fuzz.py (figures).
"""
