"""Topic ids in ``partition.metadata`` (Kafka's KIP-516 file): written at creation, given to
directories from before topic ids at load, new for a topic created again, carried by every
SegmentInfo (broker-side and offline)."""

import base64
import os
import shutil

import pytest

from minikafka.storage import CorruptPartitionMetadata, FakeClock, LogConfig, LogManager, list_segments, read_topic_id

from .conftest import START_MS, message_set


def _manager(dirs, **kwargs):
    manager = LogManager(dirs, LogConfig(segment_bytes=300), FakeClock(START_MS), **kwargs)
    manager.startup()
    return manager


def _fill(log, batches=8):
    for i in range(batches):
        log.append_as_leader(message_set(2, START_MS + i))


def test_created_topic_has_one_kafka_format_id_in_every_partition(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    closed = []
    manager = _manager(dirs, on_segment_closed=closed.append)
    logs = manager.create_topic("orders", 3, {})
    other = manager.create_topic("other", 1, {})[0]
    topic_id = logs[0].topic_id
    assert {log.topic_id for log in logs} == {topic_id} and other.topic_id != topic_id
    assert {log.dir.parent for log in logs} == set(dirs)  # spread over both log dirs
    raw = base64.urlsafe_b64decode(topic_id + "==")
    assert len(raw) == 16 and len(topic_id) == 22 and "=" not in topic_id
    for log in logs:
        assert (log.dir / "partition.metadata").read_text() == f"version: 0\ntopic_id: {topic_id}"
    _fill(logs[0])
    assert closed and {info.topic_id for info in closed} == {topic_id}
    assert {info.topic_id for info in logs[0].segments()} == {topic_id}
    listed = [info for d in dirs for info in list_segments(d)]
    assert {(info.topic, info.topic_id) for info in listed} == {("orders", topic_id), ("other", other.topic_id)}
    manager.shutdown()
    again = _manager(dirs)
    assert {again.get_log("orders", p).topic_id for p in range(3)} == {topic_id}


def test_retention_veto_sees_the_topic_id(tmp_path):
    asked = []
    manager = _manager([tmp_path], may_delete_segment=lambda info: asked.append(info) or True)
    log = manager.create_topic("t", 1, {"retention.bytes": "1"})[0]
    _fill(log)
    assert manager.cleanup() > 0
    assert asked and {info.topic_id for info in asked} == {log.topic_id}


def test_recreated_topic_gets_a_new_id(tmp_path):
    manager = _manager([tmp_path])
    first = manager.create_topic("t", 2, {})[0].topic_id
    manager.delete_topic("t")
    second = manager.create_topic("t", 2, {})[0].topic_id
    assert second != first
    assert read_topic_id(tmp_path / "t-0") == read_topic_id(tmp_path / "t-1") == second


def test_directories_from_before_topic_ids_get_one_id_per_topic_at_load(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = _manager(dirs)
    for log in manager.create_topic("t", 4, {}) + manager.create_topic("u", 1, {}):
        _fill(log, 2)
    manager.shutdown()
    for d in dirs:
        for partition_dir in d.iterdir():
            if partition_dir.is_dir():
                (partition_dir / "partition.metadata").unlink()
    assert {info.topic_id for d in dirs for info in list_segments(d)} == {None}
    assert not any(p.name == "partition.metadata" for d in dirs for p in d.rglob("*"))  # offline writes nothing
    again = _manager(dirs)
    ids = {again.get_log("t", p).topic_id for p in range(4)}
    assert len(ids) == 1 and None not in ids and again.get_log("u", 0).topic_id not in ids
    (topic_id,) = ids
    assert {read_topic_id(again.get_log("t", p).dir) for p in range(4)} == {topic_id}
    assert again.get_log("t", 0).log_end_offset == 4  # the data is untouched
    again.shutdown()
    assert _manager(dirs).get_log("t", 3).topic_id == topic_id  # and the id stays


def test_a_partition_without_the_file_takes_its_siblings_id(tmp_path):
    manager = _manager([tmp_path])
    topic_id = manager.create_topic("t", 3, {})[0].topic_id
    manager.shutdown()
    (tmp_path / "t-1" / "partition.metadata").unlink()
    assert _manager([tmp_path]).get_log("t", 1).topic_id == topic_id


def test_reads_kafka_written_files(tmp_path):
    # Kafka writes no final newline; a hand-edited file may have one.
    for text in ("version: 0\ntopic_id: DZ-8mMdBRyCrl1tNKYmaVQ", "version: 0\ntopic_id: DZ-8mMdBRyCrl1tNKYmaVQ\n"):
        (tmp_path / "t-0").mkdir(exist_ok=True)
        (tmp_path / "t-0" / "partition.metadata").write_text(text)
        manager = _manager([tmp_path])
        assert manager.get_log("t", 0).topic_id == "DZ-8mMdBRyCrl1tNKYmaVQ"
        assert list_segments(tmp_path)[0].topic_id == "DZ-8mMdBRyCrl1tNKYmaVQ"
        manager.shutdown()
        shutil.rmtree(tmp_path / "t-0")


@pytest.mark.parametrize("text", [
    "version: 1\ntopic_id: DZ-8mMdBRyCrl1tNKYmaVQ",  # unknown version
    "version: 0\ntopic_id: DZ-8mMdBRyCrl1tN",  # too short
    "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA",  # Kafka's ZERO_UUID, never a topic's
    "version: 0\n",
    "",
])
def test_unreadable_file_stops_loading_with_a_clear_error(tmp_path, text):
    manager = _manager([tmp_path])
    manager.create_topic("t", 1, {})
    manager.shutdown()
    (tmp_path / "t-0" / "partition.metadata").write_text(text)
    with pytest.raises(CorruptPartitionMetadata, match="partition.metadata"):
        _manager([tmp_path])
    with pytest.raises(CorruptPartitionMetadata):
        list_segments(tmp_path)


def test_partitions_of_one_topic_with_different_ids_stop_loading(tmp_path):
    manager = _manager([tmp_path])
    manager.create_topic("t", 2, {})
    manager.shutdown()
    os.replace(tmp_path / "t-1", tmp_path / "keep")
    manager = _manager([tmp_path])
    manager.delete_topic("t")
    manager.create_topic("t", 1, {})
    manager.shutdown()
    os.replace(tmp_path / "keep", tmp_path / "t-1")
    with pytest.raises(CorruptPartitionMetadata, match="different topic ids"):
        _manager([tmp_path])
