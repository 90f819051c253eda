"""Connection bursts for tests and measurements: many clients that each open a
connection and send one request, at once or spread over an interval.

``python -m tests.bursts burst ADDRESS COUNT SPREAD_S [CERT KEY CA]`` runs one burst
in a process of its own (on uvloop, so its handshakes do not share the caller's GIL)
and prints one JSON line: the seconds each connection took from its start to its
answer (``null``: none within the timeout). ``python -m tests.bursts load ADDRESS
SECONDS WRITERS [CERT KEY CA]`` runs a write load beside it: each write's start and
latency.
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


async def _writer(host: str, port: int, context: ssl.SSLContext | None, name: str,
                  until: float, latencies: list[tuple[float, float]]) -> None:
    """Sequential CreateVolume writes on one connection until ``until``
    (``time.monotonic``, the same clock in every process): (start, seconds) of each."""
    reader, writer = await asyncio.open_connection(host, port, ssl=context)
    decoder = FrameDecoder()
    client_id = str(uuid.uuid4())
    try:
        for call_id in range(1, 1_000_000):
            begun = time.monotonic()
            if begun >= until:
                return
            writer.write(create_volume_frame(f"load-{name}-{call_id}", client_id, call_id))
            frames: list[bytes] = []
            while not frames:
                data = await asyncio.wait_for(reader.read(65536), ANSWER_TIMEOUT_S)
                if not data:
                    raise ConnectionError("the node closed a load connection")
                frames = decoder.feed(data)
            assert om_pb2.OMResponse.FromString(frames[0]).status == om_pb2.OK
            latencies.append((begun, time.monotonic() - begun))
    finally:
        writer.close()


async def write_load(address: str, seconds: float, writers: int,
                     context: ssl.SSLContext | None = None) -> list[tuple[float, float]]:
    """``writers`` connections each writing one volume after another for ``seconds``:
    (start, latency) of every write, starts on ``time.monotonic``'s clock."""
    host, port = address.rsplit(":", 1)
    start = time.monotonic()
    latencies: list[tuple[float, float]] = []
    run = uuid.uuid4().hex[:8]
    await asyncio.gather(*(_writer(host, int(port), context, f"{run}-{i}", start + seconds,
                                   latencies) for i in range(writers)))
    return sorted(latencies)


def main(argv: list[str]) -> int:
    """``burst ADDRESS COUNT SPREAD_S [CERT KEY CA]`` or ``load ADDRESS SECONDS WRITERS
    [CERT KEY CA]``: one JSON line on stdout."""
    kind, address, size, shape = argv[0], argv[1], argv[2], argv[3]
    context = None
    if len(argv) > 4:
        context = ClientTls(Path(argv[4]), Path(argv[5]), Path(argv[6])).context()
    started = time.monotonic()
    if kind == "burst":
        times = uvloop.run(burst(address, int(size), float(shape), context))
        print(json.dumps({"times": times, "began": started,
                          "wall_s": time.monotonic() - started}), flush=True)
    else:
        assert kind == "load", f"burst or load, not {kind}"
        latencies = uvloop.run(write_load(address, float(size), int(shape), context))
        print(json.dumps({"latencies": latencies}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
