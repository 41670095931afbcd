"""The SLS wire protocol, shared by the client (consumer daemon) and the server (`loghubd serve`).

Nothing in here performs I/O: messages, compression, cursors, signatures and error codes.
"""
