"""Outputs by descriptor (evaluate/outbox.py, handoff.py): the layout's checks, and a round trip from the
candidate's end through the judge's relay to the reference's own copy, on the CPU (a memfd; the
GPU's exported allocation is tests/gpu/test_handoff_gpu.py)."""

from __future__ import annotations

import copy
import os
import socket

import pytest
import torch

from kcoder.evaluate.candidate.outbox import Outbox, describe
from kcoder.evaluate.harness import handoff
from kcoder.evaluate.harness.handoff import HandoffError, receive_fd, receive_output, send_fd, validate


def _output():
    return (torch.randn(3, 5), [torch.arange(7, dtype=torch.int64), 2.5, None],
            torch.tensor(True), torch.randn(4, 2).t(), torch.empty(0, 3))


def _relay(out, reference_bytes: int = 1 << 20, edit=None):
    """out through the candidate's sender, the judge's relay and the reference's receiver."""
    cand_judge, cand_child = handoff.socket_pair()
    ref_judge, ref_child = handoff.socket_pair()
    try:
        sender = Outbox(os.dup(cand_child.fileno()), "cpu")
        layout = sender.send(out)
        assert layout is not None
        if edit:
            edit(layout)
        validate(layout, handoff.bytes_bound(reference_bytes))  # the judge's check
        fd = receive_fd(cand_judge, 1.0)
        send_fd(ref_judge, fd)
        os.close(fd)
        return receive_output(ref_child, layout, reference_bytes, "cpu")
    finally:
        for s in (cand_judge, cand_child, ref_judge, ref_child):
            s.close()


def test_an_output_arrives_as_sent_in_memory_of_its_own():
    out = _output()
    got = _relay(out)
    assert type(got) is tuple and type(got[1]) is list and got[1][1:] == [2.5, None]
    pairs = [(got[0], out[0]), (got[1][0], out[1][0]), (got[2], out[2]), (got[3], out[3]), (got[4], out[4])]
    for g, o in pairs:
        assert g.dtype == o.dtype and g.shape == o.shape and torch.equal(g, o)
        assert g.untyped_storage().data_ptr() != o.untyped_storage().data_ptr()


def test_a_layout_naming_more_bytes_than_were_shared_is_refused():
    def longer(layout):
        layout["tree"][1][1][1][0][2] = [100]  # 100 int64 where 7 were shared: past the memfd's end
        layout["size"] += 1024

    with pytest.raises(HandoffError, match="holds .* bytes"):
        _relay((torch.randn(2), [torch.arange(7)]), edit=longer)


def test_an_output_larger_than_the_bound_is_refused():
    with pytest.raises(HandoffError, match="buffer size"):
        _relay(torch.zeros(1 << 20), reference_bytes=1000)


def test_outputs_that_cannot_travel_by_descriptor_say_so():
    assert describe(torch.zeros(2, device="meta"), "cpu") is None
    assert describe(torch.zeros(2).to_sparse(), "cpu") is None
    assert describe([torch.zeros(2), "text"], "cpu") is None
    assert describe([1, 2.0], "cpu") is None  # nothing to share: the file carries it
    assert describe(torch.zeros(2), "cuda") is None  # a CPU tensor from a cuda candidate


GOOD = {"size": 512, "tree": ["u", [["t", "float32", [2, 3], 0], ["v", 1.5], ["t", "int64", [4], 256]]]}
BAD = [
    ([], "not {size, tree}"),
    ({"size": 512}, "not {size, tree}"),
    ({"size": True, "tree": GOOD["tree"]}, "buffer size"),
    ({"size": -1, "tree": GOOD["tree"]}, "buffer size"),
    ({"size": 1 << 40, "tree": GOOD["tree"]}, "buffer size"),
    ({"size": 512, "tree": ["t", "object", [2], 0]}, "unknown dtype"),
    ({"size": 512, "tree": ["t", "float32", [-2], 0]}, "shape"),
    ({"size": 512, "tree": ["t", "float32", [True], 0]}, "shape"),
    ({"size": 512, "tree": ["t", "float32", "2", 0]}, "shape"),
    ({"size": 512, "tree": ["t", "float32", [2], 3]}, "offset"),
    ({"size": 512, "tree": ["t", "float32", [200], 0]}, "bytes 0..800"),
    ({"size": 512, "tree": ["t", "float32", [2]]}, "tensor node"),
    ({"size": 512, "tree": ["x", []]}, "layout node"),
    ({"size": 512, "tree": ["v", "text"]}, "value node"),
    ({"size": 512, "tree": ["l", [["v", 1]]]}, "without tensors"),
    ({"size": 512, "tree": ["l", ["l"]]}, "layout node"),
]


def _deep(n):
    node = ["t", "float32", [1], 0]
    for _ in range(n):
        node = ["l", [node]]
    return {"size": 512, "tree": node}


def test_a_good_layout_names_its_tensors():
    leaves = validate(copy.deepcopy(GOOD), 4096)
    assert [(leaf.dtype, leaf.shape, leaf.offset, leaf.nbytes) for leaf in leaves] == [
        ("float32", [2, 3], 0, 24), ("int64", [4], 256, 32)]


@pytest.mark.parametrize("layout,message", BAD + [(_deep(20), "deeper"),
                                                  ({"size": 512, "tree": ["l", [["v", 1]] * 5000]}, "nodes")])
def test_a_malformed_layout_is_refused_with_its_fault(layout, message):
    with pytest.raises(HandoffError, match=message):
        validate(layout, 4096)


def test_a_message_without_exactly_one_descriptor_is_refused():
    judge, child = handoff.socket_pair()
    try:
        child.send(b"h")  # no descriptor
        with pytest.raises(HandoffError, match="0 descriptors"):
            receive_fd(judge, 1.0)
        r, w = os.pipe()
        socket.send_fds(child, [b"h"], [r, w])
        with pytest.raises(HandoffError, match="2 descriptors"):
            receive_fd(judge, 1.0)
        os.close(r)
        os.close(w)
        with pytest.raises(HandoffError, match="within"):
            receive_fd(judge, 0.05)
        send_fd(child, 0)
        send_fd(child, 0)
        assert handoff.drain(judge) == 2
    finally:
        judge.close()
        child.close()
