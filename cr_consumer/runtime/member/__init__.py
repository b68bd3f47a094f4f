"""One member process of a consistent region: its pipeline and Kafka source (``process``),
its control channel to the region controller (``control``), its Kafka group state, and
the fault points drills arm.
"""
