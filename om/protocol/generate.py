"""Regenerates om_pb2.py and om_pb2.pyi from om.proto.

The generated modules are checked in; tests/test_protocol.py runs this into a
temporary directory and fails when the checked-in files drift from the .proto.
"""

from __future__ import annotations

import sys
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().parent


def generate(out_dir: Path) -> None:
    """Writes om_pb2.py and om_pb2.pyi for om.proto into out_dir."""
    from grpc_tools import protoc  # type: ignore[import-untyped]  # dev-only, imported late

    args = [
        "protoc",
        f"--proto_path={PROTO_DIR}",
        f"--python_out={out_dir}",
        f"--mypy_out={out_dir}",
        str(PROTO_DIR / "om.proto"),
    ]
    status = protoc.main(args)
    if status != 0:
        raise RuntimeError(f"protoc failed with status {status}")


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else PROTO_DIR)
