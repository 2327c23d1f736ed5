"""The trusted builder: one candidate's load_inline request, built into the shared cache.

    python -m kcoder.build.builder REQUEST.json RESULT.json

kcoder's build service (evaluate/buildservice.py) starts it in a sandbox of its own for each
request a candidate's process makes (requests.py). It never imports the extension it builds
and never loads a candidate's Python: it checks the arguments again, runs kcoder's load_inline
wrapper on them (content-keyed folder, the fast build forms, the object cache, the precompiled
header) and writes what happened to RESULT.json. Since nothing of the candidate's ran in it,
what it writes into `build/`, `objects/`, `pch/` and `light/` may be shared with later
evaluations. Background jobs it started (a precompiled header's first build) are waited for
after the result is written, so the candidate goes on meanwhile.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from kcoder.build import detached, fastbuild, inline, requests


def build(request: dict[str, Any]) -> dict[str, Any]:
    """Build one request; the result names the finished folder or carries the build's failure."""
    params = requests.check_params(request.get("params") or {})
    fast = bool(request.get("fast", True))
    arch = str(request.get("arch", ""))
    if not requests.ARCH_LIST.match(arch):
        raise requests.Refused("TORCH_CUDA_ARCH_LIST: not a list of architectures")
    os.environ.pop(requests.PRIVATE_ROOT_ENV, None)
    if arch:
        os.environ["TORCH_CUDA_ARCH_LIST"] = arch
    else:
        os.environ.pop("TORCH_CUDA_ARCH_LIST", None)
    inline.prepare_environment("cuda" if params.get("cuda_sources") else "cpu")
    import torch.utils.cpp_extension as cpp_extension

    # Built, never imported: importing would run the extension's initialisers in this process.
    cpp_extension._import_module_from_library = lambda *args, **kwargs: None
    load_inline = inline.make_load_inline(cpp_extension.load_inline, fast)
    try:
        load_inline(**params)
    except inline.BuildError as exc:
        return {"error": str(exc), "log": exc.log, "record": _record()}
    record = _record()
    return {"dir": record.get("dir", ""), "record": record, "background": detached.pending() > 0}


def _record() -> dict[str, Any]:
    return dict(inline.BUILD_RECORDS[-1]) if inline.BUILD_RECORDS else {}


def main() -> None:
    request_path, result_path = Path(sys.argv[1]), Path(sys.argv[2])
    try:
        result = build(json.loads(request_path.read_text()))
    except requests.Refused as exc:
        result = {"refused": str(exc)}
    except Exception as exc:  # kcoder's own failure: the candidate then builds by itself
        result = {"refused": f"kcoder's builder failed: {exc}", "log": traceback.format_exc()[-3000:]}
    tmp = result_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, default=str))
    os.replace(tmp, result_path)
    detached.wait_spawned(fastbuild.PCH_TIMEOUT_S)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
