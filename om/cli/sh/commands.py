"""The ``om sh`` commands, one function each, behaving as Ozone's shell handlers do.

Each takes the client, the parsed arguments and the checked address. What
they print follows Ozone: info and list commands print JSON (om.cli.sh.ozone_json);
create, setquota, clrquota, put, rename and key delete print nothing (create
prints the new info with ``--verbose``); volume and bucket delete print
"Volume X is deleted" / "Bucket X is deleted"; ``volume update`` prints the
updated volume. Commands that need data blocks (get, cat, cp, checksum,
rewrite, a put with content) refuse with "not supported: metadata only".
The ACL commands print what Ozone's ``AclOption`` prints, one line per ACL
("ACL USER:bob:rw[ACCESS] added successfully."); ``getacl`` prints the entries
as JSON (or, with ``--no-json``, as ``type:name:rights`` joined by commas).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from om.cli.sh import listing as sh_list
from om.cli.sh.address import Address
from om.cli.sh.options import (
    NotSupported,
    ShellError,
    UsageError,
    list_limit,
    metadata_only,
    parse_namespace_quota,
    parse_size,
    parse_space_quota,
)
from om.cli.sh.ozone_json import acl_json, bucket_json, key_json, pretty, volume_json
from om.client import OMClient
from om.client import requests as build
from om.protocol import acls, om_pb2

CLEAR = -1  # a quota of -1 clears it (Ozone's QUOTA_RESET)
_FACTORS = {"ONE": 1, "1": 1, "THREE": 3, "3": 3}
_BUCKET_PROMPT = ("This command will delete bucket recursively.\nThere is no recovery option "
                  "after using this command, and deleted keys won't move to trash.\n"
                  "Enter 'yes' to proceed': ")
_VOLUME_PROMPT = ("This command will delete volume recursively.\nThere is no recovery option "
                  "after using this command, and no trash for FSO buckets.\n"
                  "Delay is expected running this command.\nEnter 'yes' to proceed': ")


def _show(value: Any) -> None:
    print(pretty(value))


def _quotas(args: argparse.Namespace) -> tuple[int, int]:
    """(space, namespace) from --space-quota/--namespace-quota; 0 for the ones not given."""
    space = parse_space_quota(args.space_quota) if args.space_quota is not None else 0
    namespace = (parse_namespace_quota(args.namespace_quota)
                 if args.namespace_quota is not None else 0)
    return space, namespace


def _set_quotas(args: argparse.Namespace) -> tuple[int, int]:
    space, namespace = _quotas(args)
    if not space and not namespace:
        raise ShellError("At least one of the quota set flag is required.")
    return space, namespace


def _cleared_quotas(args: argparse.Namespace) -> tuple[int, int]:
    """(space, namespace) for clrquota: -1 clears, 0 leaves alone."""
    if not args.space_quota and not args.namespace_quota:
        raise ShellError("At least one of the quota clear flag is required.")
    return (CLEAR if args.space_quota else 0), (CLEAR if args.namespace_quota else 0)


def _confirmed(args: argparse.Namespace, prompt: str) -> bool:
    """True with --yes; else asks on stdin, as Ozone does, and only 'yes' goes on."""
    if args.yes:
        return True
    print(prompt, end="", flush=True)
    if sys.stdin.readline().strip().lower() == "yes":
        return True
    print("Operation cancelled.")
    return False


# ------------------------------------------------------------------ volumes ---

def volume_create(client: OMClient, args: argparse.Namespace, at: Address) -> None:
    """``volume create /vol [--user OWNER] [--space-quota Q] [--namespace-quota N]``."""
    space, namespace = _quotas(args)
    client.call(build.create_volume(at.volume, space, namespace, args.owner or ""))
    if args.verbose:
        _show(volume_json(client.info_volume(at.volume)))


def volume_info(client: OMClient, args: argparse.Namespace, at: Address) -> None:
    """``volume info /vol``."""
    _show(volume_json(client.info_volume(at.volume)))


def volume_list(client: OMClient, args: argparse.Namespace, at: Address) -> None:
    """``volume list [/]``: the user's volumes, or every volume with ``--all``."""
    limit = list_limit(args.length, args.all)
    owner = None if args.all else (args.list_user or client.user)
    items, _ = sh_list.collect(sh_list.volumes(client, args.prefix, owner), args.start, limit)
    _show([volume_json(v) for v in items])


def volume_update(client: OMClient, args: argparse.Namespace, at: Address) -> None:
    """``volume update /vol --user OWNER``: prints the volume afterwards."""
    if args.owner:
        client.call(build.set_volume_property(at.volume, owner=args.owner))
    _show(volume_json(client.info_volume(at.volume)))


def volume_setquota(client: OMClient, args: argparse.Namespace, at: Address) -> None:
    """``volume setquota /vol [--space-quota Q] [--namespace-quota N]``."""
    client.set_volume_quota(at.volume, *_set_quotas(args))


def volume_clrquota(client: OMClient, args: argparse.Namespace, at: Address) -> None:
    """``volume clrquota /vol [--space-quota] [--namespace-quota]``."""
    client.set_volume_quota(at.volume, *_cleared_quotas(args))


def volume_delete(client: OMClient, args: argparse.Namespace, at: Address) -> None:
    """``volume delete /vol [-r [--yes]]``: -r deletes its buckets and keys first."""
    if args.recursive:
        if not _confirmed(args, _VOLUME_PROMPT):
            return
        infos, _ = sh_list.collect(sh_list.buckets(client, at.volume, ""), "", None)
        for info in infos:
            _delete_keys(client, at.volume, info.bucket_name)
            client.delete_bucket(at.volume, info.bucket_name)
    client.delete_volume(at.volume)
    print(f"Volume {at.volume} is deleted")


# ------------------------------------------------------------------ buckets ---

def bucket_create(client: OMClient, args: argparse.Namespace, at: Address) -> None:
    """``bucket create /vol/bucket [--user OWNER] [--layout obs|fso] [quotas]``."""
    if args.layout == "LEGACY":
        raise NotSupported("LEGACY buckets: om serves OBJECT_STORE and FILE_SYSTEM_OPTIMIZED")
    space, namespace = _quotas(args)
    client.call(build.create_bucket(at.volume, at.bucket, space, namespace, args.owner or "",
                                    layout=args.layout or ""))
    if args.verbose:
        _show(bucket_json(client.info_bucket(at.volume, at.bucket)))


def bucket_info(client: OMClient, args: argparse.Namespace, at: Address) -> None:
    """``bucket info /vol/bucket``."""
    _show(bucket_json(client.info_bucket(at.volume, at.bucket)))


def bucket_list(client: OMClient, args: argparse.Namespace, at: Address) -> None:
    """``bucket list /vol``."""
    limit = list_limit(args.length, args.all)
    items, _ = sh_list.collect(sh_list.buckets(client, at.volume, args.prefix), args.start,
                               limit)
    _show([bucket_json(b) for b in items])


def bucket_setquota(client: OMClient, args: argparse.Namespace, at: Address) -> None:
    """``bucket setquota /vol/bucket [--space-quota Q] [--namespace-quota N]``."""
    client.set_bucket_quota(at.volume, at.bucket, *_set_quotas(args))


def bucket_clrquota(client: OMClient, args: argparse.Namespace, at: Address) -> None:
    """``bucket clrquota /vol/bucket [--space-quota] [--namespace-quota]``."""
    client.set_bucket_quota(at.volume, at.bucket, *_cleared_quotas(args))


def bucket_delete(client: OMClient, args: argparse.Namespace, at: Address) -> None:
    """``bucket delete /vol/bucket [-r [--yes]]``: -r deletes its keys first."""
    if args.recursive:
        if not _confirmed(args, _BUCKET_PROMPT):
            return
        _delete_keys(client, at.volume, at.bucket)
    client.delete_bucket(at.volume, at.bucket)
    print(f"Bucket {at.bucket} is deleted")


def _delete_keys(client: OMClient, volume: str, bucket: str) -> None:
    infos, _ = sh_list.collect(sh_list.keys(client, volume, bucket, ""), "", None)
    for info in infos:
        client.delete_key(volume, bucket, info.key_name)


# --------------------------------------------------------------------- keys ---

def key_put(client: OMClient, args: argparse.Namespace, at: Address) -> None:
    """``key put /vol/bucket/key FILE`` (FILE empty) or ``--size N``: records metadata only."""
    size = _put_size(args)
    factor = _replication_factor(args.type, args.replication)
    opened = client.call(build.create_key(at.volume, at.bucket, at.key, size, factor))
    client.commit_key(at.volume, at.bucket, at.key, opened.create_key.client_session_id, size)


def _put_size(args: argparse.Namespace) -> int:
    """The size to record: --size, or an empty FILE's 0; a FILE with content is refused."""
    if args.size is not None:
        if args.file is not None:
            raise UsageError("give either a FILE or --size, not both")
        return parse_size(args.size)
    if args.file is None:
        raise UsageError("key put needs a FILE (an empty one: om stores no data) or --size N")
    try:
        size = os.path.getsize(args.file)
    except FileNotFoundError:
        raise ShellError(f"Error: File not found: {args.file}") from None
    except OSError as error:
        raise ShellError(f"Error: {args.file}: {error.strerror}") from None
    if size:
        raise NotSupported(f"metadata only: 'key put' would upload the {size} bytes of "
                           f"{args.file}, and om stores no data; record the key's metadata "
                           f"with --size {size}")
    return 0


def _replication_factor(kind: str | None, replication: str | None) -> int:
    """The RATIS factor from -t/-r (0: the server's default, THREE)."""
    if kind is not None and kind.upper() != "RATIS":
        raise NotSupported(f"replication type {kind}: om records keys as RATIS only")
    if replication is None:
        return 0
    factor = _FACTORS.get(replication.upper())
    if factor is None:
        raise ShellError(f"Invalid replication '{replication}' for RATIS: use ONE or THREE")
    return factor


def key_info(client: OMClient, args: argparse.Namespace, at: Address) -> None:
    """``key info /vol/bucket/key``."""
    _show(key_json(client.lookup_key(at.volume, at.bucket, at.key), details=True))


def key_list(client: OMClient, args: argparse.Namespace, at: Address) -> None:
    """``key list /vol/bucket`` or ``key list /vol`` (one JSON array per bucket)."""
    limit = list_limit(args.length, args.all)
    if at.bucket:
        items, more = sh_list.collect(
            sh_list.keys(client, at.volume, at.bucket, args.prefix), args.start, limit)
        _show([key_json(k) for k in items])
        if more:
            _listing_first(len(items))
    else:
        _list_volume_keys(client, args, at.volume, limit)


def _list_volume_keys(client: OMClient, args: argparse.Namespace, volume: str,
                      limit: int | None) -> None:
    """Ozone's listKeysInsideVolume: bucket by bucket, the limit shared across them."""
    infos, _ = sh_list.collect(sh_list.buckets(client, volume, ""), "", None)
    total = 0
    for n, info in enumerate(infos, start=1):
        remaining = None if limit is None else limit - total
        items, more = sh_list.collect(
            sh_list.keys(client, volume, info.bucket_name, args.prefix), args.start, remaining)
        _show([key_json(k) for k in items])
        total += len(items)
        if more or (n < len(infos) and limit is not None and total >= limit):
            _listing_first(total)
            return


def _listing_first(count: int) -> None:
    print(f"Listing first {count} entries of the result. Use --length (-l) to override max "
          "returned keys.", file=sys.stderr)


def key_delete(client: OMClient, args: argparse.Namespace, at: Address) -> None:
    """``key delete /vol/bucket/key``."""
    client.delete_key(at.volume, at.bucket, at.key)


def key_rename(client: OMClient, args: argparse.Namespace, at: Address) -> None:
    """``key rename /vol/bucket FROM TO`` (Ozone's form) or ``/vol/bucket/FROM TO``."""
    source, target = args.names if len(args.names) == 2 else (at.key, args.names[0])
    client.rename_key(at.volume, at.bucket, source, target)
    if args.verbose:
        print(f"Renamed Key : {source} to {target}")


def rename_kind(args: argparse.Namespace) -> str:
    """The address a rename needs: a bucket with FROM and TO, a key with only TO."""
    if len(args.names) not in (1, 2):
        raise UsageError("key rename takes /vol/bucket FROM TO (or /vol/bucket/FROM TO)")
    return "bucket" if len(args.names) == 2 else "key"


def needs_data(command: str) -> Callable[[OMClient, argparse.Namespace, Address], None]:
    """A command function that refuses: ``command`` reads or writes data blocks."""
    def refuse(client: OMClient, args: argparse.Namespace, at: Address) -> None:
        raise metadata_only(command)
    refuse.__doc__ = f"``{command}``: not supported, it needs data blocks."
    return refuse


# --------------------------------------------------------------------- ACLs ---

def _acl_object(args: argparse.Namespace, at: Address) -> om_pb2.OzoneObj:
    """The object an ACL command names: the address's volume, bucket or key."""
    if args.store.upper() == "S3":
        raise NotSupported("--store S3: om has no S3 gateway; use the OZONE store")
    if args.object == "volume":
        return build.acl_object(at.volume)
    if args.object == "bucket":
        return build.acl_object(at.volume, at.bucket)
    return build.acl_object(at.volume, at.bucket, at.key)


def acl_add(client: OMClient, args: argparse.Namespace, at: Address) -> None:
    """``{volume|bucket|key} addacl ADDRESS -a type:name:rights[SCOPE][,...]``."""
    obj = _acl_object(args, at)
    for acl in args.acls:
        added = client.add_acl(obj, acl.to_proto())
        print(f"ACL {acl} added successfully." if added else f"ACL {acl} already exists.")


def acl_remove(client: OMClient, args: argparse.Namespace, at: Address) -> None:
    """``{volume|bucket|key} removeacl ADDRESS -a ...``."""
    obj = _acl_object(args, at)
    for acl in args.acls:
        removed = client.remove_acl(obj, acl.to_proto())
        print(f"ACL {acl} removed successfully." if removed else f"ACL {acl} doesn't exist.")


def acl_set(client: OMClient, args: argparse.Namespace, at: Address) -> None:
    """``{volume|bucket|key} setacl ADDRESS -a ...``: replaces every entry."""
    client.set_acl(_acl_object(args, at), acls.to_protos(args.acls))
    print("ACLs set successfully.")


def acl_get(client: OMClient, args: argparse.Namespace, at: Address) -> None:
    """``{volume|bucket|key} getacl ADDRESS [--json|--no-json]``."""
    entries = client.get_acl(_acl_object(args, at))
    if args.json:
        _show([acl_json(entry) for entry in entries])
        return
    texts = [str(acls.from_proto(entry)) for entry in entries]
    print(",".join(text.removesuffix("[ACCESS]") for text in texts))


def prefix_acl(client: OMClient, args: argparse.Namespace, at: Address) -> None:
    """``prefix {addacl|removeacl|setacl|getacl}``: refused, om keeps no prefix ACLs."""
    raise NotSupported("prefix ACLs: om keeps no prefix table; set DEFAULT ACLs on the "
                       "bucket (inherited by new keys) or ACLs on the keys")
