"""Freon's generators: what one operation of ``omkg``, ``ombg`` and ``ockrw`` does.

Names follow ``ozone freon``: keys are ``<prefix>/<index>``, buckets
``<prefix><index>``. Every generator's ``prepare`` creates what it needs
(idempotently, untraced); ``operation(session, index)`` runs one timed
operation and raises ``RequestFailed`` when a request of it fails.
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass, field
from typing import Protocol

from bench.session import RequestCaller, Session, ensure_bucket
from om.client import requests as build

GENERATORS = ("omkg", "ombg", "ockrw")


def random_prefix(length: int = 10) -> str:
    """Freon's default prefix: random lowercase letters and digits, starting with a letter."""
    rest = "".join(random.choices(string.ascii_lowercase + string.digits, k=length - 1))
    return random.choice(string.ascii_lowercase) + rest


def key_name(prefix: str, index: int) -> str:
    """The name of key ``index`` (freon's ``generateObjectName``)."""
    return f"{prefix}/{index}"


class Generator(Protocol):
    """One kind of freon operation."""

    @property
    def timer(self) -> str:
        """Freon's timer name, e.g. ``key-create``."""
        ...

    async def prepare(self, caller: RequestCaller) -> None:
        """Creates the volume and bucket the operations need."""
        ...

    async def operation(self, session: Session, index: int) -> None:
        """Runs operation ``index``."""
        ...


@dataclass(frozen=True)
class KeyGenerator:
    """``omkg``: CreateKey + CommitKey of ``<prefix>/<index>``, no data."""

    volume: str
    bucket: str
    prefix: str
    size: int
    timer: str = "key-create"

    async def prepare(self, caller: RequestCaller) -> None:
        await ensure_bucket(caller, self.volume, self.bucket)

    async def operation(self, session: Session, index: int) -> None:
        await session.put_key(self.volume, self.bucket, key_name(self.prefix, index), self.size)


@dataclass(frozen=True)
class BucketGenerator:
    """``ombg``: CreateBucket ``<prefix><index>`` in the volume."""

    volume: str
    prefix: str
    timer: str = "bucket-create"

    async def prepare(self, caller: RequestCaller) -> None:
        await ensure_bucket(caller, self.volume, None)

    async def operation(self, session: Session, index: int) -> None:
        await session.send(build.create_bucket(self.volume, f"{self.prefix}{index}"))


@dataclass
class ReadWriteListGenerator:
    """``ockrw``: on a random key of ``<prefix>/0 .. <prefix>/<key_range - 1>``, a
    LookupKey (``percentage_read``), a ListKeys of the prefix (``percentage_list``)
    or a CreateKey + CommitKey (the rest)."""

    volume: str
    bucket: str
    prefix: str
    size: int
    percentage_read: int
    percentage_list: int
    key_range: int
    max_list: int = 10
    seed: int | None = None
    timer: str = "key-read-write-list"
    chooser: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        assert 0 <= self.percentage_read + self.percentage_list <= 100
        assert self.key_range > 0
        self.chooser = random.Random(self.seed)

    async def prepare(self, caller: RequestCaller) -> None:
        await ensure_bucket(caller, self.volume, self.bucket)

    async def operation(self, session: Session, index: int) -> None:
        key = key_name(self.prefix, self.chooser.randrange(self.key_range))
        roll = self.chooser.randrange(100)
        if roll < self.percentage_read:
            await session.send(build.lookup_key(self.volume, self.bucket, key))
        elif roll < self.percentage_read + self.percentage_list:
            await session.send(build.list_keys(self.volume, self.bucket, self.prefix + "/",
                                               max_keys=self.max_list))
        else:
            await session.put_key(self.volume, self.bucket, key, self.size)
