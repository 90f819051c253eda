"""Connection bursts for tests and measurements: many clients that each open a
connection and send one request, at once or spread over an interval.

``python -m tests.bursts ADDRESS COUNT SPREAD_S [CERT KEY CA]`` runs one burst in a
process of its own (on uvloop, so its handshakes do not share the caller's GIL) and
prints one JSON line: the seconds each connection took from its start to its answer
(``null``: none within the timeout).
"""

from __future__ import annotations

import asyncio
import json
import ssl
import sys
import time
import uuid
from pathlib import Path

import uvloop

from om.protocol import om_pb2
from om.protocol.client_version import CURRENT_VERSION
from om.protocol.framing import FrameDecoder, encode_frame
from om.security.tls import ClientTls

ANSWER_TIMEOUT_S = 30.0


def create_volume_frame(volume: str, client_id: str, call_id: int,
                        user: str = "bursts") -> bytes:
    """A framed CreateVolume, stamped as a client would stamp it."""
    request = om_pb2.OMRequest(
        cmd_type=om_pb2.CreateVolume, client_id=client_id, client_version=CURRENT_VERSION,
        call_id=call_id, user=user,
        create_volume=om_pb2.CreateVolumeRequest(volume=volume, owner=user))
    return encode_frame(request.SerializeToString())


async def _one(host: str, port: int, frame: bytes, start: float,
               context: ssl.SSLContext | None) -> float | None:
    """Opens a connection at ``start`` (loop time), sends ``frame``, reads one answer:
    the seconds from ``start`` to the answer, None without one in time."""
    loop = asyncio.get_running_loop()
    await asyncio.sleep(max(0.0, start - loop.time()))
    begun = loop.time()
    writer = None
    try:
        async with asyncio.timeout(ANSWER_TIMEOUT_S):
            reader, writer = await asyncio.open_connection(host, port, ssl=context)
            writer.write(frame)
            decoder = FrameDecoder()
            while True:
                data = await reader.read(65536)
                if not data:
                    return None
                frames = decoder.feed(data)
                if frames:
                    answer = om_pb2.OMResponse.FromString(frames[0])
                    return loop.time() - begun if answer.status == om_pb2.OK else None
    except (OSError, TimeoutError, ssl.SSLError):
        return None
    finally:
        if writer is not None:
            writer.close()


async def burst(address: str, count: int, spread_s: float,
                context: ssl.SSLContext | None = None) -> list[float | None]:
    """``count`` connections, the i-th opened ``i * spread_s / count`` s after the start
    (all at once with 0), each creating a volume of its own: each one's seconds to
    its answer."""
    host, port = address.rsplit(":", 1)
    client_id = str(uuid.uuid4())
    run = uuid.uuid4().hex[:8]
    start = asyncio.get_running_loop().time() + 0.05
    return list(await asyncio.gather(*(
        _one(host, int(port), create_volume_frame(f"burst-{run}-{i}", client_id, i + 1),
             start + i * spread_s / count, context)
        for i in range(count))))


def main(argv: list[str]) -> int:
    address, count, spread_s = argv[0], int(argv[1]), float(argv[2])
    context = None
    if len(argv) > 3:
        context = ClientTls(Path(argv[3]), Path(argv[4]), Path(argv[5])).context()
    started = time.monotonic()
    times = uvloop.run(burst(address, count, spread_s, context))
    print(json.dumps({"times": times, "wall_s": time.monotonic() - started}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
