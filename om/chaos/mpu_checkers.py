"""The multipart-upload checker: what acknowledged completes and aborts promise.

Read after the run, once healed: the keys of ``MPU_BUCKET`` (name and size) and
its open uploads (ListMultipartUploads, every page). Each upload has a key of
its own (``om.chaos.mpu_workload``), so:

* an ``ok`` complete's key exists, with the size of its parts (``lost_complete``,
  ``wrong_size``); an ``info`` complete's key, if it exists, has that size;
* a ``fail`` complete's key does not exist (``failed_complete_applied``): the
  complete was rejected or never sent;
* no key of an upload meant to be aborted exists (``aborted_key_visible``): its
  complete was never sent, so nothing may turn it into a key;
* no key exists that no complete explains (``unexplained_key``);
* no upload row is left open for an upload whose complete or abort was
  acknowledged, or whose key exists (``upload_left_open``): both end the upload.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from om.chaos.checkers import Violation
from om.chaos.history import UPLOAD_ID, F, History, Op, Outcome

MPU = "multipart"


@dataclass(frozen=True)
class MpuObservation:
    """The multipart bucket after the run: key -> size, and the open uploads."""

    keys: Mapping[str, int]
    open_uploads: frozenset[tuple[str, str]]   # (key, upload id)


def check_mpu(history: History, observed: MpuObservation | None) -> list[Violation]:
    """Every rule of the module docstring; one violation per broken promise."""
    ops = history.of(F.MPU_COMPLETE, F.MPU_ABORT)
    if observed is None:
        return [Violation(MPU, "not_observed", "the multipart bucket was not read")] \
            if ops else []
    violations: list[Violation] = []
    completes = {op.key: op for op in ops if op.f is F.MPU_COMPLETE}
    aborted = {op.key for op in ops if op.f is F.MPU_ABORT}
    for key, op in completes.items():
        violations += _check_complete(op, observed.keys.get(key))
    for key in sorted(aborted & set(observed.keys)):
        violations.append(Violation(MPU, "aborted_key_visible",
                                    f"{key} exists though its upload was to be aborted", key))
    for key in sorted(set(observed.keys) - set(completes) - aborted):
        violations.append(Violation(MPU, "unexplained_key", f"{key}: no complete made it", key))
    ended = {str(op.extra[UPLOAD_ID]) for op in ops if UPLOAD_ID in op.extra
             and (op.outcome is Outcome.OK or op.key in observed.keys)}
    for key, upload_id in sorted(observed.open_uploads):
        if upload_id in ended:
            violations.append(Violation(MPU, "upload_left_open",
                                        f"upload {upload_id} of {key} is still open though "
                                        "it was completed or aborted", key))
    return violations


def _check_complete(op: Op, size: int | None) -> list[Violation]:
    if op.outcome is Outcome.FAIL:
        if size is None:
            return []
        return [Violation(MPU, "failed_complete_applied",
                          f"{op.key} exists ({size} bytes) after {op.describe()}", op.key)]
    if size is None:
        if op.outcome is Outcome.INFO:
            return []
        return [Violation(MPU, "lost_complete", f"{op.key} is missing after {op.describe()}",
                          op.key)]
    if size != op.value:
        return [Violation(MPU, "wrong_size", f"{op.key} holds {size} bytes, its parts "
                          f"{op.value}: {op.describe()}", op.key)]
    return []
