"""LogSegments: a log's segments by base offset (Kafka's LogSegments), on real segment files."""

import pytest

from minikafka.storage import LogConfig
from minikafka.storage.segment import LogSegment
from minikafka.storage.segments import LogSegments


@pytest.fixture
def segments(tmp_path):
    made = [LogSegment(tmp_path, base, LogConfig(), create=True) for base in (0, 100, 250)]
    yield LogSegments(made)
    for segment in made:
        segment.close()


def bases(segments):
    return [segment.base_offset for segment in segments]


def test_the_active_segment_is_the_last_and_the_closed_ones_come_before_it(segments):
    assert segments.active.base_offset == 250 and segments.first.base_offset == 0
    assert bases(segments.closed()) == [0, 100]
    assert len(segments) == 3 and segments.active in segments


@pytest.mark.parametrize("offset,expected", [(-5, [0, 100, 250]), (0, [0, 100, 250]), (99, [0, 100, 250]),
                                             (100, [100, 250]), (249, [100, 250]), (250, [250]), (10**9, [250])])
def test_from_offset_starts_at_the_segment_holding_it(segments, offset, expected):
    assert bases(segments.from_offset(offset)) == expected


def test_at_base_finds_a_segment_by_its_name_only(segments):
    assert segments.at_base(100).base_offset == 100
    assert segments.at_base(101) is None and segments.at_base(300) is None


def test_add_takes_only_a_later_segment(segments, tmp_path):
    later = LogSegment(tmp_path, 400, LogConfig(), create=True)
    segments.add(later)
    assert segments.active is later
    with pytest.raises(ValueError):
        segments.add(later)


def test_removal_keeps_a_segment(segments):
    assert bases(segments.remove_after(120)) == [250]
    assert bases(segments) == [0, 100]
    assert bases(segments.remove_after(-1)) == [100]
    assert bases(segments.remove_oldest(5)) == []
    assert bases(segments) == [0]
    with pytest.raises(ValueError):
        LogSegments([])
