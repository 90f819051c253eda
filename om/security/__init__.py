"""Security: TLS certificates and contexts for the client RPC port, and delegation tokens."""
