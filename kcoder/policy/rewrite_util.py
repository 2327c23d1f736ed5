"""Graph surgery the rewrite rules share: who reads a value, pointing its readers elsewhere,
fresh names, and placing new nodes before the node they replace."""

from __future__ import annotations

from typing import Any

from kcoder.policy.nodes import Graph, Node, Ref

F32 = "torch.float32"
OUTPUT = "<output>"  # the reader name of a graph output


class Users(dict[str, list[str]]):
    """Each needed node's readers, and the library calls the user allows (`allow`: a rule may
    pick a library form where one is allowed)."""

    allow: frozenset[str] = frozenset()


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def users_of(g: Graph, allow: frozenset[str] = frozenset()) -> Users:
    """Each needed node's readers (distinct node names, OUTPUT for a graph output), in graph order."""
    needed = g.needed()
    users = Users({name: [] for name in needed})
    users.allow = allow
    for name in needed:
        for ref in dict.fromkeys(g.nodes[name].refs()):
            users[ref].append(name)
    for out in g.outputs:
        if isinstance(out, Ref):
            users[out.name].append(OUTPUT)
    return users


def _swap(value: Any, old: str, new: Ref) -> Any:
    if isinstance(value, Ref):
        return new if value.name == old else value
    if isinstance(value, list):
        return [_swap(v, old, new) for v in value]
    if isinstance(value, tuple):
        return tuple(_swap(v, old, new) for v in value)
    return value


def redirect(g: Graph, old: str, new: Ref) -> None:
    """Every reader of `old` (graph outputs included) reads `new` instead."""
    for node in g.nodes.values():
        node.args = _swap(node.args, old, new)
    g.outputs = _swap(g.outputs, old, new)


def fresh(g: Graph, base: str) -> str:
    """A node name not in the graph yet."""
    name, n = base, 1
    while name in g.nodes:
        n += 1
        name = f"{base}{n}"
    return name


def splice(g: Graph, nodes: dict[str, Node]) -> None:
    """Replace the graph's node table by `nodes` (same object, so holders of g see it)."""
    g.nodes.clear()
    g.nodes.update(nodes)


def replace_with(g: Graph, anchor: str, new: list[Node]) -> None:
    """Put `new` where `anchor` was, in order, the last of them taking anchor's name (so its
    readers read it). `new`'s nodes may already be in the table (reduce_node needs its input
    there): they move."""
    moved = {n.name for n in new}
    *before, last = new
    last.name = anchor
    table: dict[str, Node] = {}
    for name, node in g.nodes.items():
        if name == anchor:
            table.update((n.name, n) for n in before)
            table[anchor] = last
        elif name not in moved:
            table[name] = node
    splice(g, table)
