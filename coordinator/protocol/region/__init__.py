"""The region's wire: what a member sends the region controller (``messages``), the
commands the controller pushes back (``commands``), the settings a join carries
(``config``) and the Kafka group report of a heartbeat (``kafka_report``).
"""
