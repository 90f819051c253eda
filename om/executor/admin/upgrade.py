"""Prepare and upgrade (Ozone's types 54-58): the prepared marker and the layout version.

**Prepare** (``om admin om prepare``) makes the cluster ready for its software to be
replaced: the leader's gate (``om/flows/template.py``) stops admitting writes, waits
for the ones in flight, and then this module's ``prepare`` writes the marker row
``transactionInfoTable["#PREPARED"]`` through the ordinary replicated path. Every node
applies it in the same write batch as its position, and then compacts its Raft log
(``om/node/node.py``). While the row is there, the gate refuses every write but
Prepare and CancelPrepare (NOT_SUPPORTED_OPERATION_WHEN_PREPARED, Ozone's 74), on
whichever node leads, after any restart: the state is the row, nothing in memory.
Prepare while prepared answers the marker already there (``already_prepared``);
Ozone lets a second Prepare through its gate too and ends in the same state.
``CancelPrepare`` removes the row; when there is none it answers
``was_prepared = false`` (Ozone: a no-op success).

**Layout versions** follow Ozone's OMLayoutFeature: each feature that changes what
the store may hold has a version; the software's layout version (SLV) is the newest.
The metadata layout version (MLV) is ``transactionInfoTable["#LAYOUTVERSION"]``; a
store without the row runs at the SLV (a fresh store, or one made before layout
versions existed, which had every feature of this software). A store started below
the SLV (``[upgrade] init_layout_version`` when it was created, as Ozone's
``ozone.om.init.default.layout.version``) refuses requests of the features above its
MLV (NOT_SUPPORTED_OPERATION_PRIOR_FINALIZATION, Ozone's 75) until
``FinalizeUpgrade`` (a replicated write) sets MLV := SLV. Finalizing is one row
written in one batch, so a kill at any moment leaves it either done or not done; a
repeat answers ALREADY_FINALIZED. As in recent Ozone, finalizing does not need the
cluster prepared (and a prepared cluster refuses it like any write: cancel first).

A feature may gate a log entry format rather than a request: ``MERGED_ENTRIES``. A
node of the previous release fail-stops on a tag it does not know, so until the MLV
reaches it the leader seals its batches as ``B`` entries, which every release
applies; the state machines keep the MLV of their applied state
(``layout_version``), and the leader reads it where it seals a batch
(``om/flows/batch_pipeline.py``).
"""

from __future__ import annotations

from typing import NamedTuple

from om.executor.change_recorder import ChangeRecorder
from om.executor.context import ExecContext
from om.executor.errors import OMError
from om.executor.fso.fs import FSO
from om.protocol import om_pb2
from om.schema import tables
from om.schema.read_view import ReadView

DRAIN_TIMEOUT_S = 60      # Ozone's wait for the transactions in flight to apply
DRAIN_TIMEOUT_MAX_S = 600


class Feature(NamedTuple):
    """One layout feature: what a store must be finalized to for it."""

    name: str
    version: int
    description: str


FEATURES: tuple[Feature, ...] = (
    Feature("INITIAL_VERSION", 0, "volumes, object-store buckets, keys, ACLs, tokens"),
    Feature("BUCKET_LAYOUT_SUPPORT", 1, "FILE_SYSTEM_OPTIMIZED buckets (CreateBucket)"),
    Feature("MULTIPART_UPLOAD", 2, "multipart uploads (InitiateMultiPartUpload)"),
    Feature("FILESYSTEM_SNAPSHOT", 3, "OM snapshots (CreateSnapshot)"),
    Feature("LEADER_EXECUTION", 4, "the flow switch: write types run on the leader "
            "(SetFlows, docs/FLOW_SWITCH.md)"),
    Feature("MERGED_ENTRIES", 5, "leader-flow batches travel as merged entries (M), "
            "docs/SHARDS.md"),
)
SOFTWARE_LAYOUT_VERSION = FEATURES[-1].version
assert [f.version for f in FEATURES] == list(range(len(FEATURES)))


def _feature(name: str) -> Feature:
    return next(f for f in FEATURES if f.name == name)


BUCKET_LAYOUT_SUPPORT = _feature("BUCKET_LAYOUT_SUPPORT")
MULTIPART_UPLOAD = _feature("MULTIPART_UPLOAD")
FILESYSTEM_SNAPSHOT = _feature("FILESYSTEM_SNAPSHOT")
LEADER_EXECUTION = _feature("LEADER_EXECUTION")
MERGED_ENTRIES = _feature("MERGED_ENTRIES")

# Writes allowed while prepared (Ozone's OzoneManagerPrepareState.requestAllowed).
ALLOWED_WHEN_PREPARED = frozenset({om_pb2.Prepare, om_pb2.CancelPrepare})


# ------------------------------------------------------------------ state ---

def prepared(view: ReadView) -> om_pb2.PrepareMarker | None:
    """The prepared marker, or None when the cluster is not prepared."""
    return view.parsed(om_pb2.TRANSACTION_INFO, tables.PREPARED_KEY,
                       om_pb2.PrepareMarker.FromString)


def metadata_layout_version(view: ReadView) -> int:
    """The store's MLV: its row, else the software's."""
    row = view.parsed(om_pb2.TRANSACTION_INFO, tables.LAYOUT_VERSION_KEY,
                      om_pb2.LayoutVersion.FromString)
    if row is None:
        return SOFTWARE_LAYOUT_VERSION
    version = row.version
    assert version <= SOFTWARE_LAYOUT_VERSION, \
        f"the store's layout {version} is newer than this software's {SOFTWARE_LAYOUT_VERSION}"
    return version


def layout_row(version: int) -> bytes:
    """The ``#LAYOUTVERSION`` value for ``version``."""
    assert 0 <= version <= SOFTWARE_LAYOUT_VERSION
    return om_pb2.LayoutVersion(version=version).SerializeToString(deterministic=True)


def feature_of(request: om_pb2.OMRequest) -> Feature | None:
    """The layout feature a request needs beyond the initial layout, if any."""
    if request.cmd_type == om_pb2.CreateBucket and request.create_bucket.layout == FSO:
        return BUCKET_LAYOUT_SUPPORT
    if request.cmd_type == om_pb2.InitiateMultiPartUpload:
        return MULTIPART_UPLOAD
    if request.cmd_type == om_pb2.CreateSnapshot:
        return FILESYSTEM_SNAPSHOT
    if request.cmd_type == om_pb2.SetFlows:
        return LEADER_EXECUTION
    return None


def layout_refusal(request: om_pb2.OMRequest, view: ReadView) -> OMError | None:
    """NOT_SUPPORTED_OPERATION_PRIOR_FINALIZATION for a request of a feature newer than
    the store's MLV (Ozone's request validators for the pre-finalized layout)."""
    feature = feature_of(request)
    if feature is None:
        return None
    mlv = metadata_layout_version(view)
    if feature.version <= mlv:
        return None
    return OMError(om_pb2.NOT_SUPPORTED_OPERATION_PRIOR_FINALIZATION,
                   f"{om_pb2.Type.Name(request.cmd_type)} needs layout feature "
                   f"{feature.name}({feature.version}): {feature.description}; this cluster "
                   f"runs at layout {mlv} until it is finalized (om admin om finalizeupgrade)")


def prepared_refusal(request: om_pb2.OMRequest, marker: om_pb2.PrepareMarker) -> OMError:
    """NOT_SUPPORTED_OPERATION_WHEN_PREPARED for a write while prepared."""
    return OMError(om_pb2.NOT_SUPPORTED_OPERATION_WHEN_PREPARED,
                   f"{om_pb2.Type.Name(request.cmd_type)}: the OM is prepared for an upgrade "
                   f"(at index {marker.prepare_index}) and accepts no write but "
                   "CancelPrepare; reads go on (om admin om cancelprepare)")


def finalization_state(mlv: int) -> om_pb2.FinalizationState.ValueType:
    """Ozone's status for a store at ``mlv``."""
    return om_pb2.ALREADY_FINALIZED if mlv == SOFTWARE_LAYOUT_VERSION \
        else om_pb2.FINALIZATION_REQUIRED


def feature_lines(mlv: int) -> list[str]:
    """One line per feature: whether it is finalized at ``mlv``."""
    return [f"{f.name}({f.version}): {'finalized' if f.version <= mlv else 'not finalized'}"
            for f in FEATURES]


# --------------------------------------------------------------- handlers ---

def prepare(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
            ctx: ExecContext) -> om_pb2.OMResponse:
    """Writes the prepared marker; prepared already: the marker there, written again."""
    existing = prepared(view)
    marker = existing or om_pb2.PrepareMarker(prepare_index=ctx.managed_index,
                                              prepared_at_ms=ctx.now_ms, prepared_by=ctx.user)
    recorder.put(om_pb2.TRANSACTION_INFO, tables.PREPARED_KEY,
                 marker.SerializeToString(deterministic=True))
    return om_pb2.OMResponse(prepare=om_pb2.PrepareResponse(
        prepare_index=marker.prepare_index, already_prepared=existing is not None))


def cancel_prepare(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
                   ctx: ExecContext) -> om_pb2.OMResponse:
    """Removes the prepared marker (a delete of no row when there is none)."""
    was_prepared = prepared(view) is not None
    recorder.delete(om_pb2.TRANSACTION_INFO, tables.PREPARED_KEY)
    return om_pb2.OMResponse(cancel_prepare=om_pb2.CancelPrepareResponse(
        was_prepared=was_prepared))


def prepare_status(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
                   ctx: ExecContext) -> om_pb2.OMResponse:
    """This node's applied state: prepared (at which index) or not, and its position."""
    marker = prepared(view)
    raw = view.get(om_pb2.TRANSACTION_INFO, tables.TRANSACTION_INFO_KEY)
    current = 0 if raw is None else om_pb2.TransactionInfo.FromString(raw).applied_index
    if marker is None:
        body = om_pb2.PrepareStatusResponse(status=om_pb2.NOT_PREPARED, current_index=current)
    else:
        body = om_pb2.PrepareStatusResponse(status=om_pb2.PREPARE_COMPLETED,
                                            prepare_index=marker.prepare_index,
                                            current_index=current)
    return om_pb2.OMResponse(prepare_status=body)


def finalize_upgrade(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
                     ctx: ExecContext) -> om_pb2.OMResponse:
    """Sets MLV := SLV (the row written again when it is there already)."""
    mlv = metadata_layout_version(view)
    recorder.put(om_pb2.TRANSACTION_INFO, tables.LAYOUT_VERSION_KEY,
                 layout_row(SOFTWARE_LAYOUT_VERSION))
    caller = request.finalize_upgrade.upgrade_client_id or ctx.user or "a client"
    if mlv == SOFTWARE_LAYOUT_VERSION:
        status = om_pb2.ALREADY_FINALIZED
        messages = [f"layout {mlv} is the software's already: nothing to finalize"]
    else:
        status = om_pb2.FINALIZATION_DONE
        messages = [f"finalized by {caller}: layout {mlv} -> {SOFTWARE_LAYOUT_VERSION}"]
        messages += [f"{f.name}({f.version}) turned on" for f in FEATURES if f.version > mlv]
    return om_pb2.OMResponse(finalize_upgrade=om_pb2.FinalizeUpgradeResponse(
        status=status, metadata_layout_version=SOFTWARE_LAYOUT_VERSION,
        software_layout_version=SOFTWARE_LAYOUT_VERSION, messages=messages))


def finalize_upgrade_progress(request: om_pb2.OMRequest, view: ReadView,
                              recorder: ChangeRecorder, ctx: ExecContext) -> om_pb2.OMResponse:
    """This node's MLV, the SLV, and each feature's state."""
    mlv = metadata_layout_version(view)
    return om_pb2.OMResponse(finalize_upgrade_progress=om_pb2.FinalizeUpgradeProgressResponse(
        status=finalization_state(mlv), metadata_layout_version=mlv,
        software_layout_version=SOFTWARE_LAYOUT_VERSION, features=feature_lines(mlv)))


def drain_timeout_s(request: om_pb2.PrepareRequest) -> int:
    """How long a Prepare waits for the writes in flight (0: Ozone's default)."""
    return request.drain_timeout_s or DRAIN_TIMEOUT_S
