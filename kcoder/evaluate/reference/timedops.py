"""The reference process's timed batches and the judge's draws of weights: a part of
ReferenceServer (server.py) kept apart. The judge's GPU batches (batchrun.py, behind a gate page),
the cpu target's arena batches (harness/arena.py, arenaprep.py: this process writes every batch's
inputs and reads the candidate's outputs), and Model's state redrawn for verification
(drawweights.py). Trusted: the candidate never runs in this process.
"""

from __future__ import annotations

import os
from typing import Any

from kcoder.trust import writing_whole


def save_new(torch: Any, value: Any, path: str) -> None:
    """torch.save into a fresh file renamed into place: nothing at `path` (a planted link) is
    followed. kcoder's hand-off folder is not the candidate's to write; this holds anyway."""
    with writing_whole(path) as fh:
        torch.save(value, fh)


class TimedOps:
    """Requests of ReferenceServer's that time or reweigh Model (it provides torch, model, link,
    share, device, inputs(), reference(), _compare())."""

    torch: Any
    model: Any
    link: Any
    share: Any
    device: str
    compiled: Any
    warmed: set[str]
    flush_buffer: Any
    flush_bytes: int
    gate: Any
    last_batch: Any
    arena: Any
    own_arena: Any
    cand_batch: dict[str, Any] | None
    cand_mapped: tuple[int, int] | None
    output_tree: Any
    initial_state: dict[str, Any] | None
    held: Any

    def op_draw_weights(self, seed: int, path: str) -> dict[str, Any]:
        """Model's parameters and buffers redrawn (drawweights.py) and loaded here; the draw saved
        at `path` for the candidate's process. `drawn`: how many tensors changed (0: nothing to draw)."""
        from kcoder.evaluate.reference.drawweights import draw_state, drawable

        torch = self.torch
        if self.initial_state is None:
            self.initial_state = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        if not drawable(torch, self.initial_state):
            return {"drawn": 0}
        state = draw_state(torch, self.initial_state, seed)
        self.model.load_state_dict(state)
        save_new(torch, state, path)
        return {"drawn": drawable(torch, state)}

    def op_restore_weights(self) -> dict[str, Any]:
        """Model's own parameters and buffers back (the baselines are timed with them)."""
        if self.initial_state is not None:
            self.model.load_state_dict(self.initial_state)
        return {"restored": True}

    def op_gate(self) -> dict[str, Any]:
        """The gate page (judgeclock.GatePage) the judge sent over the hand-off socket."""
        from kcoder.evaluate.harness.batchrun import open_gate

        self.gate = open_gate(self.torch, self.share)
        return {"gate": True}

    def _timed_model(self, impl: str, base: list[Any], calibration: bool) -> Any:
        """What a batch of `impl` calls: eager's Model, torch.compile's (compiled and warmed on
        first use, un-timed), or for a calibration a module that computes nothing and returns
        tensors of its own shaped as the output (made anew, not kept: at multi-GB outputs every
        kept copy costs memory the problem may not have)."""
        from kcoder.evaluate.harness.batchrun import calibration_module, calibration_template

        torch = self.torch
        if impl == "compile" and self.compiled is None:
            self.compiled = torch.compile(self.model)
        model = self.compiled if impl == "compile" else self.model
        with torch.no_grad():
            if impl not in self.warmed:  # un-timed calls: torch.compile compiles here
                model(*base)
                self.warmed.add(impl)
            if calibration:
                return calibration_module(torch, calibration_template(torch, model(*base)))
        return model

    def op_batch(self, seed: int, n: int, calibration: bool, generation: int = 0,
                 impl: str = "eager") -> dict[str, Any]:
        """n calls of eager or torch.compile timed by the judge's clock, exactly as the
        candidate's are (batchrun.py): the same inputs, flush, commitments and gate."""
        from kcoder.evaluate.harness.batchrun import BatchRun, serve_batch
        from kcoder.evaluate.harness.timing import flush_l2, l2_flush_buffer

        torch, base = self.torch, self.inputs(seed)
        model = self._timed_model(impl, base, calibration)
        if self.device == "cuda" and self.flush_buffer is None:
            self.flush_buffer = l2_flush_buffer(torch)
            self.flush_bytes = self.flush_buffer.nbytes
        buffer, self.last_batch = self.flush_buffer, None  # the last batch's outputs go first
        # Its outputs kept, as the candidate's are: every call writes fresh memory alike.
        run = self.last_batch = BatchRun(torch, self.device, model, base, n, keep=not calibration,
                       flush=(lambda: flush_l2(buffer)) if buffer is not None else None)
        kind = f"{impl}:{'calibration' if calibration else 'run'}"
        return {"done": True, "commitments": serve_batch(self.link, run, self.gate, generation, kind=kind)}

    # --- arena batches (the cpu target: harness/arena.py, arenaprep.py) ---------------------------
    def op_arena(self, seed: int, n: int, key: int, impl: str = "candidate", calibration: bool = False,
                 process: int = 0) -> dict[str, Any]:
        """A batch's inputs written into the arena (arenaprep.py). For the candidate (`process`: the
        judge's name for its process) the arena's two descriptors go to the judge before this
        reply when that process has not mapped this arena yet (the layout says "fresh"), and the
        batch is kept for arena_check; for `impl` (eager, compile, a calibration) this process runs
        it itself once the judge's "go" comes: mapped and run as the candidate's process does, by
        the same code."""
        from kcoder.evaluate.harness.arena import MappedArena
        from kcoder.evaluate.harness.handoff import send_fd

        self.cand_batch = None
        # Everything made for the batch but what runs is freed here, before any clock: freeing an
        # input set on the way out of this request would be timed in this process's batches only
        # (~8 ms for mse_loss's 128 MiB), and taken off the candidate's, which never pays it.
        model, layout = self._arena_batch(seed, n, key, impl, calibration)
        self.held = model  # freed at the next batch, not when this one replies (a template can be large)
        if model is None:
            layout["fresh"] = self.cand_mapped != (process, id(self.arena))
            if layout["fresh"]:
                for fd in self.arena.fds:
                    send_fd(self.share, fd)
                self.cand_mapped = (process, id(self.arena))
            self.cand_batch = {"seed": seed, "key": key, "n": n}
            return {"arena": layout}
        if self.own_arena is None:  # this process maps its own arena once, outside any clock
            self.own_arena = MappedArena(self.torch, layout, *(os.dup(fd) for fd in self.arena.fds))
        self.link.reply(arena=layout)
        go = self.link.receive()
        if not isinstance(go, dict) or go.get("op") != "go":
            raise RuntimeError("the judge's go did not come")
        self.own_arena.run(model, lambda fn: fn(), layout)
        return {"done": True}

    def _arena_batch(self, seed: int, n: int, key: int, impl: str, calibration: bool) -> tuple[Any, dict[str, Any]]:
        """The batch's inputs written into the arena (a new one when they do not fit); what this
        process runs for `impl` (None for the candidate's batch) and the batch's layout."""
        from kcoder.evaluate.harness.batchrun import Factors, cpu_key
        from kcoder.evaluate.reference.arenaprep import Arena, output_tree

        torch, base = self.torch, self.inputs(seed)
        self.held = None
        model = None if impl == "candidate" else self._timed_model(impl, base, calibration)
        if self.output_tree is None:  # the output's structure: shapes and dtypes, no tensor kept
            with torch.no_grad():
                self.output_tree = output_tree(torch, self.model(*base), [0])
        if self.arena is None or not self.arena.fits(base, n):
            self._drop_arena()
            self.arena = Arena(torch, base, n, self.output_tree)
        return model, self.arena.load(Factors(torch, cpu_key(torch, key), n, base, self.device), base, n)

    def op_arena_check(self, call: int, label: str, scan: bool = False) -> dict[str, Any]:
        """The candidate's batch after its process was frozen: with `scan`, every call's output
        slot read for elements never written; call `call`'s output (none when negative) against
        the reference's for the inputs that call saw."""
        kept, arena = self.cand_batch, self.arena
        if kept is None or arena is None:
            raise RuntimeError("no candidate batch is kept")
        n = kept["n"]
        if scan and (unwritten := arena.unwritten()):
            return {"ok": False, "reason": f"integrity: {len(unwritten)} of the {n} calls of a batch timed by the "
                                           f"judge's clock (call {unwritten[0] + 1} first) left output elements "
                                           "unwritten when the clock stopped: work not done within the call"}
        if call < 0:  # the slots scanned only (a batch that sizes the others)
            return {"ok": True}
        batch = {"key": kept["key"], "n": n, "call": int(call)}
        return self._compare(arena.output(int(call)), self.reference(kept["seed"], batch), kept["seed"], batch)

    def _drop_arena(self) -> None:
        self.cand_batch, self.cand_mapped = None, None
        if self.own_arena is not None:
            self.own_arena.close()
            self.own_arena = None
        if self.arena is not None:
            self.arena.close()
            self.arena = None

