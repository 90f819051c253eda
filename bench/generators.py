"""Freon's generators: what one operation of ``omkg``, ``ombg``, ``ockrw``, ``omfc``
and ``omdr`` does.

Names follow ``ozone freon``: keys are ``<prefix>/<index>``, buckets
``<prefix><index>``; the file-system generators (``omfc``, ``omdr``) work in
directories ``<prefix>/d<k>`` of a FILE_SYSTEM_OPTIMIZED bucket; ``omkg`` may spread
its keys over several buckets (``bucket_names``). Every
generator's ``prepare`` creates what it needs (idempotently, untraced);
``operation(session, index)`` runs one timed operation and raises
``RequestFailed`` when a request of it fails.
"""

from __future__ import annotations

import asyncio
import random
import string
from dataclasses import dataclass, field
from typing import Protocol

from bench.session import RequestCaller, RequestFailed, Session, ensure_bucket, learn_routes
from bench.traces import ClientTrace
from om.client import requests as build
from om.cluster import preload
from om.executor.fso.fs import FSO

GENERATORS = ("omkg", "ombg", "ockrw", "omfc", "omdr")
PREPARE_IN_FLIGHT = 64   # directories a file-system generator creates at once in prepare
BUCKETS_MAX = 1024       # buckets one load spreads over (each is created in prepare)


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


def bucket_names(bucket: str, count: int) -> tuple[str, ...]:
    """The ``count`` buckets a load spreads over: ``bucket`` alone, or ``<bucket>-0`` ..
    ``<bucket>-<count - 1>``, the names the offline preload gives a namespace of
    ``count`` buckets (``om.cluster.preload.Namespace``), so a spread load writes
    into the seeded buckets."""
    assert 1 <= count <= BUCKETS_MAX
    names = preload.Namespace(bucket=bucket, buckets=count).bucket_names()
    return tuple(name for _, name in names)


@dataclass(frozen=True)
class KeyGenerator:
    """``omkg``: CreateKey + CommitKey of ``<prefix>/<index>``, no data, in bucket
    ``index mod len(buckets)`` of ``buckets``: one bucket as freon's ``omkg``, or
    several, so that with shards every shard gets a share (a bucket is one shard's)."""

    volume: str
    buckets: tuple[str, ...]
    prefix: str
    size: int
    timer: str = "key-create"

    def __post_init__(self) -> None:
        assert 1 <= len(self.buckets) <= BUCKETS_MAX
        assert len(set(self.buckets)) == len(self.buckets)

    async def prepare(self, caller: RequestCaller) -> None:
        for bucket in self.buckets:
            await ensure_bucket(caller, self.volume, bucket)
        if len(self.buckets) > 1:
            await learn_routes(caller, self.volume, self.buckets)

    async def operation(self, session: Session, index: int) -> None:
        bucket = self.buckets[index % len(self.buckets)]
        await session.put_key(self.volume, bucket, key_name(self.prefix, index), self.size)


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


async def make_directories(caller: RequestCaller, volume: str, bucket: str,
                           paths: list[str]) -> None:
    """CreateDirectory of each path (untraced), ``PREPARE_IN_FLIGHT`` at a time; one
    that exists already is fine."""
    session = Session(caller, ClientTrace.off())

    async def make(path: str) -> None:
        try:
            await session.send(build.create_directory(volume, bucket, path))
        except RequestFailed as failure:
            if failure.status != "DIRECTORY_ALREADY_EXISTS":
                raise

    for first in range(0, len(paths), PREPARE_IN_FLIGHT):
        await asyncio.gather(*(make(p) for p in paths[first:first + PREPARE_IN_FLIGHT]))


def directory_name(prefix: str, slot: int) -> str:
    """Directory ``slot`` of a file-system generator."""
    return f"{prefix}/d{slot}"


@dataclass(frozen=True)
class FileGenerator:
    """``omfc``: CreateFile + CommitKey of ``<prefix>/d<index % dirs>/<index>`` in a
    file-system bucket, no data (as ``omkg`` is for keys). ``prepare`` creates the
    bucket and the ``dirs`` directories, so the timed operations only create files;
    with ``dirs`` = the operations in flight, the files in flight at any moment are
    in (nearly always) different directories: each client in its own directory."""

    volume: str
    bucket: str
    prefix: str
    size: int
    dirs: int
    timer: str = "file-create"

    def __post_init__(self) -> None:
        assert self.dirs > 0

    async def prepare(self, caller: RequestCaller) -> None:
        await ensure_bucket(caller, self.volume, self.bucket, layout=FSO)
        await make_directories(caller, self.volume, self.bucket,
                               [directory_name(self.prefix, k) for k in range(self.dirs)])

    async def operation(self, session: Session, index: int) -> None:
        path = f"{directory_name(self.prefix, index % self.dirs)}/{index}"
        await session.put_file(self.volume, self.bucket, path, self.size)


@dataclass
class DirectoryMixGenerator:
    """``omdr``: directory renames and creates in a file-system bucket.

    Operation ``index`` works on directory slot ``index % dirs``, whose directory is
    ``<prefix>/d<slot>-<generation>``: ``percentage_rename`` per cent of operations
    rename it to the next generation (RenameKey of a directory: one row, whatever it
    holds), the rest create a subdirectory ``s<index>`` in it (CreateDirectory).
    Operations on one slot run one after the other (the generator knows each slot's
    current name, so every request names what exists); different slots run at once."""

    volume: str
    bucket: str
    prefix: str
    percentage_rename: int
    dirs: int
    seed: int | None = None
    timer: str = "directory-rename-create"
    chooser: random.Random = field(init=False, repr=False)
    generations: list[int] = field(init=False, repr=False)
    busy: list[asyncio.Lock] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        assert 0 <= self.percentage_rename <= 100
        assert self.dirs > 0
        self.chooser = random.Random(self.seed)
        self.generations = [0] * self.dirs
        self.busy = [asyncio.Lock() for _ in range(self.dirs)]

    def current(self, slot: int) -> str:
        """The name directory ``slot`` has now."""
        return f"{directory_name(self.prefix, slot)}-{self.generations[slot]}"

    async def prepare(self, caller: RequestCaller) -> None:
        await ensure_bucket(caller, self.volume, self.bucket, layout=FSO)
        await make_directories(caller, self.volume, self.bucket,
                               [self.current(k) for k in range(self.dirs)])

    async def operation(self, session: Session, index: int) -> None:
        slot = index % self.dirs
        rename = self.chooser.randrange(100) < self.percentage_rename
        async with self.busy[slot]:
            name = self.current(slot)
            if rename:
                await session.send(build.rename_key(
                    self.volume, self.bucket, name,
                    f"{directory_name(self.prefix, slot)}-{self.generations[slot] + 1}"))
                self.generations[slot] += 1
            else:
                await session.send(build.create_directory(self.volume, self.bucket,
                                                          f"{name}/s{index}"))
