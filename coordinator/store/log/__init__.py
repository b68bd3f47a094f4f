"""The durable log itself: one segment file of framed, checksummed records, and its
recovery on open (lock, leftovers, torn-tail repair).
"""
