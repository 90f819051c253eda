"""Delegation tokens and user certificates: one module per request type, and the
rules of their rows.

Modules:

* ``add_user_certificate.py``
* ``cancel_delegation_token.py``
* ``get_delegation_token.py``
* ``list_user_certificates.py``
* ``renew_delegation_token.py``
* ``revoke_user_certificates.py``
* ``tokens.py``
* ``user_certificates.py``
"""
