"""The watch stream's reader thread: lines split across reads arrive whole and in order, and
a stream that fails after some lines yields those lines before its error."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from hybridgpu.kube.cache import Counters, _LineReader


class Chunks:
    """A response body arriving in the given pieces, then ``error`` (if any)."""

    def __init__(self, pieces: list[bytes], error: Exception | None = None) -> None:
        self.pieces = pieces
        self.error = error

    def stream(self, amt: int, decode_content: bool = False) -> Iterator[bytes]:
        yield from self.pieces
        if self.error is not None:
            raise self.error


def read(pieces: list[bytes], error: Exception | None = None) -> tuple[list[bytes], Counters]:
    counters = Counters()
    reader = _LineReader(Chunks(pieces, error), counters)
    reader.start()
    lines: list[bytes] = []
    try:
        for line in reader.lines(threading.Event()):
            lines.append(line)
    finally:
        reader.join()
    return lines, counters


def test_lines_split_across_reads_arrive_whole_in_order() -> None:
    lines, counters = read([b'{"a":1}\n{"b', b'":2}\n\n', b'{"c":', b"3}\n", b'{"d":4}'])
    assert lines == [b'{"a":1}', b'{"b":2}', b'{"c":3}', b'{"d":4}']
    assert counters.backlog_peak_bytes > 0


def test_a_stream_that_fails_gives_its_lines_before_the_error() -> None:
    got: list[bytes] = []
    counters = Counters()
    reader = _LineReader(Chunks([b"one\ntwo\nthr"], ConnectionError("cut")), counters)
    reader.start()
    with pytest.raises(ConnectionError, match="cut"):
        for line in reader.lines(threading.Event()):
            got.append(line)
    reader.join()
    assert got == [b"one", b"two"]
