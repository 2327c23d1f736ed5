"""An output whose own memory cannot be read (protected pages) is the candidate's failure, never
kcoder's error (issue 40 item 7): the hand-off says UnreadableOutput, which the worker turns into
the candidate's failure (a NotPlain)."""

import mmap
import os

import pytest

torch = pytest.importorskip("torch")

from kcoder.evaluate.candidate.outbox import NotPlain, UnreadableOutput, _export_host  # noqa: E402


@pytest.mark.filterwarnings("ignore:The given buffer is not writable")
def test_protected_output_pages_are_the_candidates_failure():
    pages = mmap.mmap(-1, 1 << 16, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, prot=0)  # PROT_NONE
    try:
        flat = torch.frombuffer(pages, dtype=torch.uint8)  # no byte is touched until read
        with pytest.raises(UnreadableOutput) as raised:
            _export_host([(flat, 0)], flat.numel())
        assert isinstance(raised.value, NotPlain) and "could not be read" in str(raised.value)
    finally:
        del flat
        pages.close()


def test_readable_output_is_handed_over_whole():
    flat = torch.arange(300, dtype=torch.int32).view(torch.uint8)
    fd = _export_host([(flat, 0)], flat.numel())
    try:
        assert os.pread(fd, flat.numel(), 0) == bytes(flat.tolist())
    finally:
        os.close(fd)
