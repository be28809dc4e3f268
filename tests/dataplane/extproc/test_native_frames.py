"""The socket's frames between the native transport and the router (native_frames.py): cut at any
byte they come back whole and in order; a length out of bounds is an error, not a huge read."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dataplane.extproc import native_frames as f

frames = st.lists(
    st.tuples(st.sampled_from([f.OPEN, f.MESSAGE, f.END]), st.integers(0, 2**64 - 1), st.binary()),
    max_size=8,
)


@given(sent=frames, cuts=st.lists(st.integers(0, 400), max_size=6))
def test_frames_cut_anywhere_come_back_whole(
    sent: list[tuple[int, int, bytes]], cuts: list[int]
) -> None:
    data = b"".join(f.encode(kind, stream, payload) for kind, stream, payload in sent)
    reader = f.FrameReader(max_frame=1 << 20)
    got: list[f.Frame] = []
    start = 0
    for cut in sorted(c for c in cuts if c <= len(data)):
        got += reader.feed(data[start:cut])
        start = cut
    got += reader.feed(data[start:])
    assert got == [f.Frame(*frame) for frame in sent]


def test_a_length_out_of_bounds_is_an_error() -> None:
    with pytest.raises(f.FrameError):
        f.FrameReader(max_frame=100).feed(f.encode(f.MESSAGE, 1, b"x" * 200))
    with pytest.raises(f.FrameError):
        f.FrameReader(max_frame=100).feed(b"\x02\x00\x00\x00" + b"\x03\x00")  # shorter than a head
    abort = f.FrameReader(max_frame=100).feed(f.abort(7, 3, "bad"))
    assert abort == [f.Frame(f.ABORT, 7, b"\x03bad")]
