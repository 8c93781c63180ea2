"""Peak broker memory while many connections send huge request frames slowly (KIP-72).

    python3 bench/bench_request_memory.py                  # 50 connections x 100 MiB frames
    python3 bench/bench_request_memory.py --connections 10 --frame-mib 20 --limit-mib 32
    python3 bench/bench_request_memory.py --limit-mib -1   # no bound (Kafka's default), to compare

A real ``minikafka serve`` process with ``queued.max.request.bytes`` set to the limit. Each
connection (a thread) sends one Produce frame of the given size, 1 MiB at a time with a short
pause between pieces, to the internal topic ``__consumer_offsets``: the broker reads the whole
frame, then refuses the write (INVALID_TOPIC_EXCEPTION) without copying the records, so what is
measured is the memory of frames being read and queued, which the bound covers.

Printed: the broker's resident memory once started (base), its peak (VmHWM from
/proc/PID/status) over the run, and peak - base against the limit. Linux only.
"""

from __future__ import annotations

import argparse
import re
import socket
import struct
import threading
import time
from pathlib import Path

from minikafka.protocol.apis import ApiKey
from minikafka.protocol.framing import ClientConnection, encode_request
from minikafka.testing import MinikafkaBroker

MIB = 1 << 20


def status_kib(pid: int, field: str) -> int:
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(rf"^{field}:\s+(\d+) kB", text, re.M).group(1))


def produce_frame_parts(frame_bytes: int) -> tuple[bytes, int]:
    """The bytes of a Produce v2 request up to its records, and the records' length, such
    that the whole frame (size prefix included) is ``frame_bytes`` long."""
    def head(records_length: int) -> bytes:
        body = {"acks": 1, "timeout_ms": 30000, "topic_data": [
            {"name": "__consumer_offsets", "partition_data": [{"index": 0, "records": b""}]}]}
        frame = encode_request(ApiKey.PRODUCE, 2, 0, "bench", body)
        frame = b"".join(bytes(chunk) for chunk in frame) if isinstance(frame, list) else bytes(frame)
        # Records are the frame's last field: an int32 length (0 here) then the bytes.
        prefix = frame[:-4]
        return struct.pack(">i", len(prefix) - 4 + 4 + records_length) + prefix[4:] + struct.pack(">i", records_length)
    overhead = len(head(0))
    return head(frame_bytes - overhead), frame_bytes - overhead


def send_slowly(bootstrap: str, frame_bytes: int, pause: float, errors: list) -> None:
    try:
        host, port = bootstrap.rsplit(":", 1)
        with socket.create_connection((host, int(port))) as sock:
            head, remaining = produce_frame_parts(frame_bytes)
            sock.sendall(head)
            piece = b"\0" * MIB
            while remaining:
                n = min(remaining, MIB)
                sock.sendall(piece[:n])
                remaining -= n
                time.sleep(pause)
            client = ClientConnection("bench")
            client.send_request(ApiKey.PRODUCE, 2, {"acks": 1, "timeout_ms": 1, "topic_data": []})
            while (response := client.next_response()) is None:
                data = sock.recv(65536)
                if not data:
                    raise ConnectionError("closed by the broker")
                client.receive_data(data)
            (topic,) = response.body.responses
            assert topic.partition_responses[0].error_code != 0  # refused, as intended
    except Exception as exc:  # reported by the main thread
        errors.append(exc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--frame-mib", type=int, default=100)
    parser.add_argument("--limit-mib", type=int, default=128, help="queued.max.request.bytes in MiB; -1: none")
    parser.add_argument("--pause", type=float, default=0.005, help="seconds between 1 MiB pieces")
    args = parser.parse_args()
    frame = args.frame_mib * MIB
    limit = -1 if args.limit_mib < 0 else args.limit_mib * MIB
    overrides = {"queued.max.request.bytes": str(limit), "socket.request.max.bytes": str(frame)}
    with MinikafkaBroker(overrides=overrides) as broker:
        pid = broker.process.pid
        base = status_kib(pid, "VmRSS")
        errors: list = []
        threads = [threading.Thread(target=send_slowly, args=(broker.bootstrap, frame, args.pause, errors))
                   for _ in range(args.connections)]
        start = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - start
        peak = status_kib(pid, "VmHWM")
    if errors:
        raise SystemExit(f"{len(errors)} connection(s) failed: {errors[0]!r}")
    bound = "none" if limit < 0 else f"{limit // MIB} MiB"
    print(f"{args.connections} connections x {args.frame_mib} MiB frames in {elapsed:.1f} s, "
          f"queued.max.request.bytes {bound}")
    print(f"broker RSS: base {base / 1024:.0f} MiB, peak {peak / 1024:.0f} MiB, "
          f"peak - base {(peak - base) / 1024:.0f} MiB" + ("" if limit < 0 else
          f" ({'within' if (peak - base) * 1024 <= limit else 'ABOVE'} the limit)"))


if __name__ == "__main__":
    main()
