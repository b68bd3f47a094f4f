"""What the coordinator process and its clients (``cr_consumer``'s members) both speak
and share: the wire format (``wire``) and the lowest layer of helpers both packages
use (``common``). Nothing here imports the server, the store, the services or the
region controller.
"""
