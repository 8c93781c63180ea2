"""The broker calls storage from worker threads: appends, reads and retention interleave."""

import threading

from minikafka.protocol.records import iter_records

from .conftest import START_MS, all_records, message_set, open_log


def test_concurrent_appends_reads_and_retention(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, segment_bytes=2000, retention_bytes=20_000, file_delete_delay_ms=0)
    errors = []
    stop = threading.Event()

    def append(worker):
        try:
            for i in range(150):
                log.append_as_leader(message_set(2, START_MS, tag=f"{worker}-{i}-"))
        except Exception as exc:  # reported below
            errors.append(exc)

    def read_and_clean():
        try:
            while not stop.is_set():
                start = log.log_start_offset
                chunk = log.read(start, 4096)
                offsets = [r.offset for r in iter_records(chunk.read_bytes())]
                assert offsets == sorted(offsets)
                log.delete_expired_segments()
        except Exception as exc:
            errors.append(exc)

    writers = [threading.Thread(target=append, args=(w,)) for w in range(4)]
    reader = threading.Thread(target=read_and_clean)
    reader.start()
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    stop.set()
    reader.join()
    assert errors == []
    assert log.log_end_offset == 4 * 150 * 2
    assert [r.offset for r in all_records(log)] == list(range(log.log_start_offset, log.log_end_offset))
    assert log.size_in_bytes <= 20_000 + 2000
