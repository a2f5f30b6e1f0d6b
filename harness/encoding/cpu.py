"""What this CPU computes fast: its feature flags, and the class that decides how int8 is quantized.

Without an int8 dot product (AVX512-VNNI, AVX-VNNI, AMX, Arm dotprod), ONNX Runtime's x86 int8
kernels multiply u8 activations by s8 weights into 16-bit pair sums, which saturate unless the weights
keep 7 bits (``reduce_range``): ONNX Runtime's own advice for such CPUs.
"""

from __future__ import annotations

import functools

# The /proc/cpuinfo flags that decide how fast, and how exactly, int8 and bf16 run here.
RELEVANT_CPU_FLAGS = (
    "avx2",
    "fma",
    "avx512f",
    "avx512bw",
    "avx512_vnni",
    "avx_vnni",
    "avx512_bf16",
    "amx_tile",
    "amx_int8",
    "amx_bf16",
    "asimddp",
    "i8mm",
    "bf16",
)
_INT8_DOT_FLAGS = {"avx512_vnni", "avx_vnni", "amx_int8", "asimddp", "i8mm"}


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (x86 ``flags`` / Arm ``Features`` lines of /proc/cpuinfo; empty elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            return frozenset(
                word.lower()
                for line in handle
                if line.lower().startswith(("flags", "features"))
                for word in line.partition(":")[2].split()
            )
    except OSError:
        return frozenset()


@functools.cache
def cpu_model() -> str:
    """The CPU's model name (``model name`` of /proc/cpuinfo, else ``platform.processor()``, else unknown)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.lower().startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "unknown CPU"


def relevant_cpu_flags(flags: frozenset[str] | None = None) -> list[str]:
    """The flags of ``RELEVANT_CPU_FLAGS`` this CPU has (printed by the bench, kept in provenance)."""
    flags = cpu_flags() if flags is None else flags
    return [flag for flag in RELEVANT_CPU_FLAGS if flag in flags]


def int8_cpu_class(flags: frozenset[str] | None = None) -> str:
    """``vnni`` when the CPU has an int8 dot product (AVX512-VNNI, AVX-VNNI, AMX, Arm dotprod), else
    ``no-vnni``: ONNX Runtime then multiplies u8 by s8 into 16-bit pair sums, which can saturate.
    """
    flags = cpu_flags() if flags is None else flags
    return "vnni" if flags & _INT8_DOT_FLAGS else "no-vnni"
