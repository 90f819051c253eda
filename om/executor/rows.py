"""Loading the rows handlers depend on, with Ozone's not-found statuses."""

from __future__ import annotations

from om.executor.errors import OMError
from om.protocol import om_pb2
from om.schema import tables
from om.schema.read_view import ReadView


def read_volume(view: ReadView, volume: str) -> om_pb2.VolumeInfo:
    """The volume's row, shared with other readers (``ReadView.parsed``: never change
    it; ``load_volume`` gives a copy of one's own); VOLUME_NOT_FOUND when there is none."""
    info = view.parsed(om_pb2.VOLUME, tables.volume_key(volume), om_pb2.VolumeInfo.FromString)
    if info is None:
        raise OMError(om_pb2.VOLUME_NOT_FOUND, f"Volume '{volume}' not found")
    assert info.volume == volume
    return info


def read_bucket(view: ReadView, volume: str, bucket: str) -> om_pb2.BucketInfo:
    """The bucket's row, shared with other readers (``ReadView.parsed``: never change
    it; ``load_bucket`` gives a copy of one's own); VOLUME_NOT_FOUND or BUCKET_NOT_FOUND
    when missing."""
    info = view.parsed(om_pb2.BUCKET, tables.bucket_key(volume, bucket),
                       om_pb2.BucketInfo.FromString)
    if info is None:
        read_volume(view, volume)
        raise OMError(om_pb2.BUCKET_NOT_FOUND, f"Bucket '/{volume}/{bucket}' not found")
    assert info.volume_name == volume
    assert info.bucket_name == bucket
    return info


def load_volume(view: ReadView, volume: str) -> om_pb2.VolumeInfo:
    """The volume's row, a copy the caller may change; VOLUME_NOT_FOUND when there is
    none."""
    raw = view.get(om_pb2.VOLUME, tables.volume_key(volume))
    if raw is None:
        raise OMError(om_pb2.VOLUME_NOT_FOUND, f"Volume '{volume}' not found")
    info = om_pb2.VolumeInfo.FromString(raw)
    assert info.volume == volume
    return info


def load_bucket(view: ReadView, volume: str, bucket: str) -> om_pb2.BucketInfo:
    """The bucket's row, a copy the caller may change; VOLUME_NOT_FOUND or
    BUCKET_NOT_FOUND when missing."""
    raw = view.get(om_pb2.BUCKET, tables.bucket_key(volume, bucket))
    if raw is None:
        load_volume(view, volume)
        raise OMError(om_pb2.BUCKET_NOT_FOUND, f"Bucket '/{volume}/{bucket}' not found")
    info = om_pb2.BucketInfo.FromString(raw)
    assert info.volume_name == volume
    assert info.bucket_name == bucket
    return info


def load_key(view: ReadView, volume: str, bucket: str, key: str) -> om_pb2.KeyInfo | None:
    """The committed key's row, or None."""
    raw = view.get(om_pb2.KEY, tables.key_key(volume, bucket, key))
    if raw is None:
        return None
    info = om_pb2.KeyInfo.FromString(raw)
    assert info.key_name == key
    return info


def require_key(view: ReadView, volume: str, bucket: str, key: str) -> om_pb2.KeyInfo:
    """The committed key's row; KEY_NOT_FOUND when missing."""
    info = load_key(view, volume, bucket, key)
    if info is None:
        raise OMError(om_pb2.KEY_NOT_FOUND, f"Key '/{volume}/{bucket}/{key}' not found")
    return info


def encode(message: om_pb2.VolumeInfo | om_pb2.BucketInfo | om_pb2.KeyInfo
           | om_pb2.RepeatedKeyInfo | om_pb2.MultipartKeyInfo) -> bytes:
    """A row's bytes: deterministic, so replicas and flows compare byte for byte."""
    return message.SerializeToString(deterministic=True)

