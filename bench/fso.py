"""The file-system flows of ``om bench`` (``--profile fso``): what they measure beyond
the engine's phases, and their part of ``summary.json``.

An FSO flow runs, on one cluster: OBS key creates (``omkg``, the baseline of the same
cluster in the same run) for half the measured time, file creates (``omfc``:
CreateFile + CommitKey, one directory per client), OBS key creates again for the
other half (files are compared with the mean of the two, so a machine whose speed
drifts favours neither), a directory rename/create mix (``omdr``), then **rename
scaling**: one rename at a time, alternately of a directory holding
``files_big`` files (generated offline into the seed, ``om freon generate --layout
fso``) and of one holding ``files_small`` (created through the API), each renamed
``renames`` times; the medians say whether a directory rename is O(1). The flows
``fso`` and ``fso-bucket`` differ only in ``[fso] lock_plan`` (object ids against
Ozone mainline's bucket lock).
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.freon import FreonResult
from bench.generators import make_directories
from bench.roles import LEADER_SERVER, per_role
from bench.session import RequestCaller, RequestFailed, Session, ensure_bucket
from bench.traces import ClientTrace
from om.client import requests as build
from om.cluster import preload
from om.executor.fso.fs import FSO

VOLUME = "fsovol"
BUCKET = "fsobucket"
BIG = "big"        # the seeded directory of files_big files
SMALL = "small"    # the directory of files_small files, made through the API


def rename_namespace(files: int, user: str) -> preload.Namespace:
    """The seed of the rename measurement: ``files`` files in ``/fsovol/fsobucket/big``."""
    return preload.Namespace(keys=files, volume=VOLUME, bucket=BUCKET, prefix=BIG,
                             layout=FSO, user=user)


@dataclass
class RenameTimes:
    """Latencies (ms) of single renames of the big and the small directory."""

    files_big: int
    files_small: int
    big_ms: list[float] = field(default_factory=list)
    small_ms: list[float] = field(default_factory=list)
    failures: Counter[str] = field(default_factory=Counter)

    def summary(self) -> dict[str, Any]:
        """Medians and their ratio (big / small; 1.0 is O(1))."""
        big = statistics.median(self.big_ms) if self.big_ms else None
        small = statistics.median(self.small_ms) if self.small_ms else None
        return {"files_big": self.files_big, "files_small": self.files_small,
                "renames_each": min(len(self.big_ms), len(self.small_ms)),
                "big_median_ms": big, "small_median_ms": small,
                "big_over_small": big / small if big is not None and small else None,
                "big_ms": [round(v, 3) for v in self.big_ms],
                "small_ms": [round(v, 3) for v in self.small_ms],
                "failures": dict(self.failures)}


async def measure_renames(connect: Callable[[], RequestCaller], files_big: int,
                          files_small: int, renames: int) -> RenameTimes:
    """Makes the small directory, then renames the big and the small one in turns
    (which goes first alternates), one request in flight, ``renames`` times each."""
    times = RenameTimes(files_big, files_small)
    caller = connect()
    try:
        await ensure_bucket(caller, VOLUME, BUCKET, layout=FSO)
        await make_directories(caller, VOLUME, BUCKET, [SMALL])
        session = Session(caller, ClientTrace.off())
        for index in range(files_small):
            await session.put_file(VOLUME, BUCKET, f"{SMALL}/{index}", 0)
        names = {BIG: BIG, SMALL: SMALL}
        samples = {BIG: times.big_ms, SMALL: times.small_ms}
        for round_ in range(renames):
            for which in ((BIG, SMALL) if round_ % 2 == 0 else (SMALL, BIG)):
                target = f"{which}-r{round_ + 1}"
                started = time.perf_counter_ns()
                try:
                    await session.send(build.rename_key(VOLUME, BUCKET, names[which], target))
                except RequestFailed as failure:
                    times.failures[failure.status] += 1
                    continue
                samples[which].append((time.perf_counter_ns() - started) / 1e6)
                names[which] = target
    finally:
        await caller.close()
    return times


@dataclass
class FsoResults:
    """What an FSO flow measured beside its headline (the file creates)."""

    obs_keys: FreonResult
    obs_keys_after: FreonResult | None = None
    mix: FreonResult | None = None
    renames: RenameTimes | None = None
    # CpuMeter.stop() of each OBS phase (the files phase's is the flow's own)
    obs_cpu: list[dict[str, dict[str, float]]] = field(default_factory=list)


def _leader_us_per_write(results: list[FreonResult], cpu: list[dict[str, dict[str, float]]],
                         leader: str) -> float | None:
    """The leader server's CPU µs per acknowledged write over these phases."""
    spent = writes = 0.0
    for result, use in zip(results, cpu, strict=False):
        roles = per_role({label: u["cpu"] for label, u in use.items()}, leader,
                         result.duration_s, result.ok_writes)
        if LEADER_SERVER in roles:
            spent += roles[LEADER_SERVER] * result.ok_writes
            writes += result.ok_writes
    return spent / writes if writes else None


def _rate(result: FreonResult | None) -> float | None:
    return None if result is None else result.write_requests_per_s


def fso_summary(files: FreonResult | None, found: FsoResults,
                phase: Callable[[FreonResult], dict[str, Any]], leader: str | None,
                files_leader_us: float | None) -> dict[str, Any]:
    """The ``fso`` part of a flow's summary: each phase, and files / OBS keys (the
    mean of the OBS phases before and after the files); on a cluster, the leader
    server's CPU per write in the OBS phases and in the files phase
    (``files_leader_us``), whose inverse ratio is files / OBS keys where the leader's
    CPU is the only limit (a figure the machine's noise moves less than throughput)."""
    rates = [r for r in (_rate(found.obs_keys), _rate(found.obs_keys_after)) if r is not None]
    obs, created = statistics.mean(rates), _rate(files)
    obs_phases = [r for r in (found.obs_keys, found.obs_keys_after) if r is not None]
    obs_leader_us = (None if leader is None else
                     _leader_us_per_write(obs_phases, found.obs_cpu, leader))
    return {
        "leader_cpu_us_per_write": {"obs_keys": obs_leader_us, "files": files_leader_us},
        "files_over_obs_keys_by_leader_cpu": _ratio(obs_leader_us, files_leader_us),
        "obs_keys": phase(found.obs_keys),
        "obs_keys_after": None if found.obs_keys_after is None else phase(
            found.obs_keys_after),
        "obs_keys_write_requests_per_s": obs,
        "files_write_requests_per_s": created,
        "files_over_obs_keys": created / obs if created is not None and obs else None,
        "mix": None if found.mix is None else {
            **phase(found.mix), "requests": {f"{op} {status}": n for (op, status), n
                                             in sorted(found.mix.requests.items())}},
        "rename": None if found.renames is None else found.renames.summary(),
    }


# (object-id flow, bucket-lock flow): the ratios of --profile fso
LOCK_PAIRS: tuple[tuple[str, str], ...] = (("fso", "fso-bucket"),)


def fso_ratios(flows: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """For each FSO flow that ran: files / OBS keys and the rename medians' ratio; for
    each pair that ran: object ids / bucket lock, for the files and the mix."""
    found: dict[str, float | None] = {}
    for name, flow in flows.items():
        fso = flow.get("fso")
        if not fso:
            continue
        key = name.replace("-", "_")
        found[f"{key}_files_over_obs_keys"] = fso["files_over_obs_keys"]
        if fso.get("files_over_obs_keys_by_leader_cpu") is not None:
            found[f"{key}_files_over_obs_keys_by_leader_cpu"] = fso[
                "files_over_obs_keys_by_leader_cpu"]
        rename = fso.get("rename") or {}
        found[f"{key}_rename_big_over_small"] = rename.get("big_over_small")
    for top, bottom in LOCK_PAIRS:
        if top not in flows or bottom not in flows:
            continue
        key = f"{top}_over_{bottom}".replace("-", "_")
        found[f"{key}_files"] = _ratio(flows[top].get("write_requests_per_s"),
                                       flows[bottom].get("write_requests_per_s"))
        mixes = [(flows[n].get("fso") or {}).get("mix") or {} for n in (top, bottom)]
        found[f"{key}_mix"] = _ratio(mixes[0].get("write_requests_per_s"),
                                     mixes[1].get("write_requests_per_s"))
    return found


def _ratio(top: float | None, bottom: float | None) -> float | None:
    return top / bottom if top is not None and bottom else None


def render_fso(summary: dict[str, Any]) -> list[str]:
    """One line per FSO flow: OBS keys, files, mix, rename medians."""
    lines = []
    for name, flow in summary["flows"].items():
        fso = flow.get("fso")
        if not fso:
            continue
        mix = fso.get("mix") or {}
        rename = fso.get("rename") or {}
        leader_us = fso.get("leader_cpu_us_per_write") or {}
        lines.append(
            f"{name}: OBS keys {_n(fso.get('obs_keys_write_requests_per_s'))}, FSO files "
            f"{_n(fso['files_write_requests_per_s'])}, rename/create mix "
            f"{_n(mix.get('write_requests_per_s'))} write req/s; rename of a directory of "
            f"{rename.get('files_big', 0):,} files median {_n(rename.get('big_median_ms'), 2)}"
            f" ms, of {rename.get('files_small', 0):,} files "
            f"{_n(rename.get('small_median_ms'), 2)} ms; leader server CPU per write: OBS "
            f"keys {_n(leader_us.get('obs_keys'))} us, files {_n(leader_us.get('files'))} us")
    return lines


def _n(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"
