"""How to profile a candidate (kcoder profile, the agent's profile tool)."""

from __future__ import annotations

from dataclasses import dataclass

from kcoder.choices import PRECISIONS, check_choice


@dataclass
class ProfileOptions:
    """How to profile. Time limits are per step; `ncu` overrides the ncu binary ($KCODER_NCU)."""

    device: str = "cuda"
    full: bool = False
    precision: str = "strict"
    seed: int = 0
    prepare_timeout_s: float = 900.0  # a cold build of a torch extension can take minutes
    ncu_timeout_s: float = 300.0
    import_timeout_s: float = 120.0
    timeline_timeout_s: float = 300.0
    ptxas_timeout_s: float = 300.0
    ncu: str | None = None
    calibrate: bool = True
    save_prefix: str | None = None  # keep PREFIX.ncu-rep, PREFIX_raw.csv, PREFIX_details.csv
    sandbox: str = "auto"  # how the candidate is confined while profiled (evaluate/sandbox.py)

    def validate(self) -> None:
        if self.device != "cuda":
            raise ValueError(f"kcoder profile profiles CUDA kernels; --device {self.device!r} is not supported "
                             "(use `kcoder eval --device cpu` to time a CPU candidate)")
        check_choice("precision", self.precision, PRECISIONS)
        from kcoder.evaluate.sandbox import require_sandbox

        require_sandbox(self.sandbox)
