import pytest

from minikafka.storage import FakeClock, InvalidTopicName, LogConfig, LogManager, validate_topic_name
from minikafka.storage.names import parse_partition_dir_name


@pytest.mark.parametrize("name", ["orders", "a", "x" * 249, "__consumer_offsets", "a.b_c-D9", ".hidden", "..x"])
def test_legal_names(name):
    validate_topic_name(name)


@pytest.mark.parametrize("name", [
    "", ".", "..", "../x", "..\\x", "a/b", "/abs", "x" * 250, "tab\tname", "sp ace", "nul\x00",
    "ümlaut", "a\nb", "../../etc/passwd",
])
def test_illegal_names_are_refused(name):
    with pytest.raises(InvalidTopicName):
        validate_topic_name(name)


def test_non_string_is_refused():
    with pytest.raises(InvalidTopicName):
        validate_topic_name(None)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["../x", "a/b", "..", ".", "x" * 250, "../../outside"])
def test_manager_refuses_traversal_before_touching_disk(tmp_path, name):
    log_dir = tmp_path / "logs"
    manager = LogManager([log_dir], LogConfig(), FakeClock())
    manager.startup()
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    with pytest.raises(InvalidTopicName):
        manager.create_topic(name, 1, {})
    with pytest.raises(InvalidTopicName):
        manager.delete_topic(name)
    assert manager.get_log(name, 0) is None
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_partition_dir_names():
    assert parse_partition_dir_name("orders-0") == ("orders", 0)
    assert parse_partition_dir_name("my-topic-12") == ("my-topic", 12)
    for foreign in ["orders", "orders-", "orders-01", "orders-x", "orders-0.abc-delete", "-1",
                    "lost+found", "orders-0.deleted", "orders-²"]:
        assert parse_partition_dir_name(foreign) is None, foreign
