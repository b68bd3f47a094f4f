"""The coordinator's wire format: the request/reply envelope, the messages and their
validation, and the error codes. Shared by the server, its services and the client.
"""
