"""``om sh token get|renew|cancel|print``: delegation tokens, as Ozone's shell has them.

    om sh token get [-r RENEWER] -t FILE [o3://host:port]   # needs a certificate
    om sh token renew -t FILE                               # the renewer's certificate
    om sh token cancel -t FILE                              # the owner or the renewer
    om sh token print -t FILE                               # reads the file only

The flags and the lines printed are Ozone's (``GetTokenHandler``,
``RenewTokenHandler``, ``CancelTokenHandler``, ``PrintTokenHandler``); the file
holds the token as one line of base64url, mode 0600. Renew and cancel
authenticate with the certificate the shell finds (``--cert``, the cluster's);
without one they act with the token in FILE itself, as Ozone's ``TokenHandler``
does (the OM then refuses a renew: INVALID_AUTH_METHOD). A missing token file
is an execution error (exit 255) where Ozone's shell only prints it.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from om.cli.sh.options import ShellError
from om.client import OMClient
from om.protocol import om_pb2, token_format
from om.security.token_client import read_token_file, write_token_file


def register(objects: Any, command: Any) -> None:
    """Adds ``token`` and its four actions (``command`` makes an action parser)."""
    parser = objects.add_parser("token", help="delegation tokens (get, renew, cancel, print)")
    actions = parser.add_subparsers(dest="verb", required=True, metavar="ACTION")
    get = command(actions, "get", token_get, "root", "get a delegation token")
    get.add_argument("--renewer", "-r", default="",
                     help="Token renewer (default: you, the token's owner)")
    _token_option(get)
    _token_option(command(actions, "renew", token_renew, "root", "renew a delegation token"))
    _token_option(command(actions, "cancel", token_cancel, "root", "cancel a delegation token"))
    printing = actions.add_parser("print", help="print a delegation token")
    _token_option(printing)
    printing.set_defaults(offline=token_print)


def _token_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--token", "-t", dest="token_path", type=Path, required=True,
                        metavar="FILE", help="file containing encoded token")


def read_token(path: Path) -> om_pb2.TokenProto:
    """The token in ``path``, or the error Ozone's ``TokenOption`` prints."""
    if not path.exists():
        raise ShellError(f"Error: token operation failed as token file: {path} containing "
                         "encoded token doesn't exist.")
    try:
        return read_token_file(path)
    except (OSError, token_format.TokenFormatError) as error:
        raise ShellError(f"Error: token file {path}: {error}") from None


def token_get(client: OMClient, args: argparse.Namespace, at: Any) -> None:
    token = client.get_delegation_token(args.renewer).token
    print(f"Successfully get token for service {token.service}")
    print(token_format.token_string(token))
    try:
        write_token_file(args.token_path, token)
    except OSError as error:
        raise ShellError(f"cannot write the token file {args.token_path}: {error}") from None
    print(f"Token persisted to {args.token_path} successfully!")


def token_renew(client: OMClient, args: argparse.Namespace, at: Any) -> None:
    expiry = client.renew_delegation_token(read_token(args.token_path))
    print(f"Token renewed successfully, expiry time: {token_format.instant(expiry)}.")


def token_cancel(client: OMClient, args: argparse.Namespace, at: Any) -> None:
    client.cancel_delegation_token(read_token(args.token_path))
    print("Token canceled successfully.")


def token_print(args: argparse.Namespace) -> None:
    print(token_format.token_string(read_token(args.token_path)))

