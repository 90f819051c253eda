"""Security: TLS certificates and contexts for the client RPC port, and what a client
needs to act with a delegation token (the OM's side of tokens is
``om/executor/security/tokens.py``)."""
