"""Retiring a committed key version to deletedTable, as Ozone does.

The version goes to deletedTable under ``/vol/bucket/key/<object id>`` with
the retiring request's index as its update id, so a purge can tell versions
apart, and its time as the deletion time, from which its retention counts
(``om.executor.keys.purge_keys``). Object ids are never reused, so a row is
written once and never appended to. A version with no data is not kept: there
is nothing to purge (Ozone skips such keys too).
"""

from __future__ import annotations

from om.executor.change_recorder import ChangeRecorder
from om.executor.context import ExecContext
from om.executor.rows import encode
from om.protocol import om_pb2
from om.schema import tables


def retire(recorder: ChangeRecorder, info: om_pb2.KeyInfo, ctx: ExecContext) -> None:
    """Records ``info`` leaving the namespace; the caller removes or replaces its keyTable row."""
    assert ctx.managed_index > 0
    if info.data_size == 0:
        return
    retired = om_pb2.KeyInfo()
    retired.CopyFrom(info)
    retired.update_id = ctx.managed_index
    retired.deletion_time = ctx.now_ms
    recorder.put(om_pb2.DELETED,
                 tables.deleted_key(info.volume_name, info.bucket_name, info.key_name,
                                    info.object_id),
                 encode(om_pb2.RepeatedKeyInfo(key_info=[retired])))
