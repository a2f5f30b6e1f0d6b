"""How a forward pass runs: the runtime (``--runtime``) and precision choices, the device, and threads.

Three runtimes (part of the cache key):

* ``torch``: PyTorch, in the chosen ``precision`` (fp32; bf16 by autocast on CPUs with native bf16
  or on GPUs; fp16 on GPUs).
* ``onnx``: the transformer exported once with ``torch.onnx`` and run by onnxruntime
  (``harness.encoding.onnx_export``). fp32, or int8 (quantized, ``harness.encoding.onnx_quantize``; approximate).
* ``exact`` (the default): the fastest of them (torch, onnx, onnx with onnxruntime's fused transformer
  graph) whose vectors equal torch fp32 within a tight tolerance, decided once per model by a recorded
  check on a fixed sample.

``--precision fast`` picks no runtime itself: it is the fastest setting on this machine (exact fp32,
onnx int8, bf16 where native) whose once-per-model check passes (``harness.encoding.runtime_checks``).
int8 is quantized for the CPU it runs on (``int8_cpu_class``): without a VNNI/AMX int8 dot product,
ONNX Runtime's u8 x s8 kernels sum pairs in 16 bits, which saturate unless weights keep 7 bits.

Which of them an encoder computes with is a ``RuntimeChoice``, made by ``harness.encoding.runtime_choice``.

Thread counts are process-wide settings in torch and in the tokenizers library; they are changed
only through the context managers here, which give the previous value back on the way out.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator
from typing import Any

from harness.core.errors import HarnessError
from harness.encoding.cpu import cpu_flags
from harness.encoding.onnx_export import require_onnxruntime
from harness.models.model_registry import PRECISIONS, RUNTIMES
from harness.models.resolve import ResolvedModel

DEFAULT_RUNTIME = "exact"
# ``--precision`` names -> torch dtype names (the names used in settings).
# ``int8`` is not a torch dtype: it names onnxruntime's dynamically quantized graph.
# ``fast`` is no dtype either: it names the choice among the others that the precision check makes.
FAST = "fast"
_DTYPE_OF = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "int8": "int8", FAST: FAST}
_SHORT_OF = {dtype: short for short, dtype in _DTYPE_OF.items()}
# The tokenizers library sizes its (Rayon) thread pool from this variable when the pool first starts.
TOKENIZER_THREADS_VARIABLE = "RAYON_NUM_THREADS"


# ---- device ------------------------------------------------------------------------


def pick_device(requested: str | None = None) -> str:
    """``cuda`` > ``mps`` > ``cpu``, unless a device is requested (then it must exist)."""
    import torch

    wanted = (requested or "").strip().lower()
    if wanted in ("", "auto"):
        if torch.cuda.is_available():
            return "cuda"
        mps = getattr(torch.backends, "mps", None)
        return "mps" if mps is not None and mps.is_available() else "cpu"
    if wanted == "cpu":
        return "cpu"
    if wanted == "cuda" or wanted.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise HarnessError(
                f"device {requested!r} requested but no CUDA GPU is available (use --device cpu)"
            )
        index = wanted.partition(":")[2]
        if index and (not index.isdigit() or int(index) >= torch.cuda.device_count()):
            raise HarnessError(
                f"device {requested!r}: this machine has {torch.cuda.device_count()} CUDA device(s)"
            )
        return wanted
    if wanted == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise HarnessError("device 'mps' requested but Apple MPS is not available (use --device cpu)")
        return "mps"
    raise HarnessError(f"unknown device {requested!r} (use auto, cpu, cuda, cuda:N or mps)")


# ---- threads -----------------------------------------------------------------------------------


def current_torch_threads() -> int:
    """torch's intra-op thread count now (the default an encoder records when given none)."""
    import torch

    return torch.get_num_threads()


@contextlib.contextmanager
def torch_threads(count: int) -> Iterator[int]:
    """torch computes with ``count`` threads inside the block; the previous count comes back after it."""
    import torch

    if count < 1:
        raise ValueError(f"thread count must be at least 1, not {count}")
    previous = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield count
    finally:
        torch.set_num_threads(previous)


@contextlib.contextmanager
def tokenizer_threads(count: int) -> Iterator[int]:
    """The tokenizers thread pool, if it starts inside the block, gets ``count`` threads.

    A value the user exported is respected (and yielded); the variable is restored on the way out.
    """
    previous = os.environ.get(TOKENIZER_THREADS_VARIABLE)
    if previous is None:
        os.environ[TOKENIZER_THREADS_VARIABLE] = str(count)
    try:
        yield int(previous) if previous and previous.isdigit() else count
    finally:
        if previous is None:
            os.environ.pop(TOKENIZER_THREADS_VARIABLE, None)


# ---- precision ---------------------------------------------------------------------------------


def short_precision(dtype: str) -> str:
    """``float32`` -> ``fp32`` (the ``--precision`` name of a dtype)."""
    return _SHORT_OF[dtype]


def cpu_has_native_bf16() -> bool:
    """True when this CPU computes bf16 in hardware (AVX512-BF16, AMX, or Arm's BF16 extension).

    Without it torch still runs bf16, emulated, and slower than fp32: not worth offering.
    """
    import torch

    for probe in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        check = getattr(torch.cpu, probe, None)
        if check is not None and check():
            return True
    return bool(cpu_flags() & {"avx512_bf16", "amx_bf16", "bf16"})


def precision_dtype(precision: str) -> str:
    """``fp32``/``bf16``/``fp16`` (or the torch names) -> ``float32``/``bfloat16``/``float16``."""
    value = precision.strip().lower()
    if value in _DTYPE_OF:
        return _DTYPE_OF[value]
    if value in _SHORT_OF:
        return value
    raise HarnessError(f"unknown precision {precision!r} (use {', '.join(PRECISIONS)})")


def check_precision(dtype: str, device: str) -> None:
    """One line, before any work, when the device cannot compute in ``dtype``."""
    import torch

    short = _SHORT_OF[dtype]
    if dtype in ("float32", "int8", FAST):  # int8 is onnx's, kept on the CPU; fast picks what runs here
        return
    if device.startswith("cuda"):
        if dtype == "bfloat16" and not torch.cuda.is_bf16_supported():
            raise HarnessError(f"precision bf16 is not supported on {device} (use --precision fp16 or fp32)")
        return
    if device == "mps":
        if dtype == "bfloat16":
            raise HarnessError("precision bf16 is not supported on mps (use --precision fp16 or fp32)")
        return
    if dtype == "float16":
        raise HarnessError(
            f"precision {short} runs on a GPU only; on {device} use --precision fp32"
            + (" or bf16" if cpu_has_native_bf16() else "")
        )
    if not cpu_has_native_bf16():
        raise HarnessError(
            "precision bf16 needs a CPU with native bf16 (AVX512-BF16 or AMX); this one would emulate it, "
            "slower than fp32 (use --precision fp32)"
        )


# ---- runtime -----------------------------------------------------------------------------------


def resolve_runtime(
    model: ResolvedModel, device: str, runtime: str | None, precision: str | None
) -> tuple[str, str]:
    """``(runtime, dtype)`` from the arguments, else the record's defaults, else ``exact`` fp32.

    Asking for bf16/fp16 without a runtime means torch, int8 means onnx (``exact`` is fp32 only);
    ``fast`` comes back as ``(fast, fast)``: ``harness.encoding.runtime_choice`` picks both.
    """
    record = model.record
    precision = precision or record.precision
    dtype = precision_dtype(precision) if precision else "float32"
    if dtype == FAST:
        if runtime:
            raise HarnessError(f"--precision fast chooses the runtime too; drop --runtime {runtime}")
        return FAST, FAST
    chosen = (runtime or record.runtime or "").strip().lower()
    if not chosen:
        chosen = {"float32": DEFAULT_RUNTIME, "int8": "onnx"}.get(dtype, "torch")
    if chosen not in RUNTIMES:
        raise HarnessError(f"unknown runtime {chosen!r} (use {', '.join(RUNTIMES)})")
    _check_runtime_precision(chosen, dtype)
    if chosen == "onnx":
        require_onnxruntime()
        if device != "cpu":
            raise HarnessError(f"the onnx runtime runs on the CPU only; on {device} use --runtime torch")
    check_precision(dtype, device)
    return chosen, dtype


def _check_runtime_precision(runtime: str, dtype: str) -> None:
    short = _SHORT_OF[dtype]
    if runtime == "exact" and dtype != "float32":
        owner = "onnx" if dtype == "int8" else "torch"
        raise HarnessError(
            f"--runtime exact means vectors equal to torch fp32; for {short} use --runtime {owner} --precision {short}"
        )
    if runtime == "onnx" and dtype not in ("float32", "int8"):
        raise HarnessError(
            f"--runtime onnx runs fp32 or int8; for {short} use --runtime torch --precision {short}"
        )
    if runtime == "torch" and dtype == "int8":
        raise HarnessError("--runtime torch has no int8; use --runtime onnx --precision int8")


def check_int8_option(dtype: str, int8: str | None) -> None:
    """An int8 variant is only meaningful with ``--precision int8`` (or ``fast``, which may pick int8)."""
    if int8 not in (None, "auto") and dtype not in ("int8", FAST):
        raise HarnessError(f"--int8 {int8} needs --precision int8 (this run computes {_SHORT_OF[dtype]})")


def check_encoder_options(model: ResolvedModel, device: str | None, options: dict[str, Any]) -> None:
    """Refuse a runtime/precision the device cannot run, before any work (no-op for BM25 models)."""
    if not model.record.is_lexical:
        _, dtype = resolve_runtime(
            model, pick_device(device), options.get("runtime"), options.get("precision")
        )
        check_int8_option(dtype, options.get("int8"))


# ---- the choice ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RuntimeChoice:
    """How an encoder computes its vectors, decided before it encodes (``harness.encoding.runtime_choice``).

    ``runtime`` is the one asked for (``exact``, ``torch`` or ``onnx``; for ``--precision fast``, that of
    the setting it chose) and ``active`` the one that computes (``torch``, ``onnx`` or ``onnx-fused``).
    ``active`` is None only for an ``exact`` choice whose check is neither recorded nor run yet: its key
    does not depend on the check, so a run that finds every vector cached never times one.
    The check records are the ones written to the cache, kept here for the key and provenance.
    """

    runtime: str
    dtype: str
    active: str | None = None
    quantization: dict[str, Any] | None = None  # the int8 variant's settings (``onnx_quantize``)
    exact_check: dict[str, Any] | None = None
    precision_check: dict[str, Any] | None = None  # an approximate setting's check against torch fp32
    fast: dict[str, Any] | None = None  # ``--precision fast``: the candidates it weighed, the one it chose

    @property
    def approximate(self) -> bool:
        """True for a precision whose vectors differ from fp32 (int8, bf16, fp16)."""
        return self.dtype not in ("float32", FAST)

    @property
    def settled(self) -> bool:
        """True once the runtime that computes is known (always, except a pending ``exact``)."""
        return self.active is not None

    @property
    def label(self) -> str:
        """``onnx fp32``, ``exact (onnx) fp32``, ``onnx int8 dynamic-7bit``, ``fast: torch bf16``: the
        runtime column of a result table.
        """
        runtime = f"exact ({self.active})" if self.runtime == "exact" and self.active else self.runtime
        label = f"{runtime} {short_precision(self.dtype)}"
        if self.quantization is not None:
            label += f" {self.quantization['variant']}"
        return f"fast: {label}" if self.fast is not None else label

    def check_setting(self) -> dict[str, Any]:
        """What an approximate setting's check is about (and is keyed by): runtime, precision, quantization."""
        return {"runtime": self.runtime, "precision": self.dtype, "quantization": self.quantization}

    def settings(self) -> dict[str, Any]:
        """This choice's part of the cache key: runtime and precision asked for, the int8 settings, and
        an approximate setting's verdict (``exact`` vectors equal torch fp32 whichever runtime computes).
        """
        settings: dict[str, Any] = {"runtime": self.runtime, "precision": self.dtype}
        if self.quantization is not None:
            settings["quantization"] = self.quantization
        if self.approximate:
            settings["check"] = "pass" if (self.precision_check or {}).get("passed") else "fail"
        return settings
