"""How requests and objects are named: the retry key of a request, the object ids of
the rows it creates.

* A request is named by ``RetryKey`` = (client id, call id): a retry resends both, and
  the retry cache and the old flow's apply find its stored reply by them.
* Every write takes the next managed index (``om.gatekeeper.managed_index``); the
  object ids it may assign derive from it (``object_id_for``), so ids are unique and
  increasing wherever managed indexes are.
"""

from __future__ import annotations

RetryKey = tuple[str, int]

OBJECT_ID_EPOCH = 1 << 62
IDS_PER_INDEX = 256
MANAGED_INDEX_MAX = (1 << 54) - 1


def object_id_for(managed_index: int, n: int = 0) -> int:
    """The n-th object id a request with this managed index may use.

    Like Ozone's ``OmUtils.getObjectIdFromTxId``: the low 8 bits give 256 ids
    per request, so ids are unique whenever managed indexes are.
    """
    assert 0 < managed_index <= MANAGED_INDEX_MAX
    assert 0 <= n < IDS_PER_INDEX
    return OBJECT_ID_EPOCH | (managed_index << 8) | n
