"""The int8 variants' vector error on this CPU's kernels and on AVX2-only kernels, side by side.

ONNX Runtime picks its int8 kernels from the CPU's feature bits: with VNNI (AVX512-VNNI, AVX-VNNI) they
sum u8 x s8 products in 32 bits; on AVX2 alone they add pairs in 16 bits first, which can saturate on
8-bit weights (what ``reduce_range``, the ``-7bit`` variants, avoids). It has no switch to use its AVX2
kernels on a newer CPU, so the AVX2 line runs the same graphs under QEMU's user-mode emulator with a
Haswell CPU model (``apt install qemu-user``): real AVX2 kernels, emulated, so only errors, not times.

Each variant's graph is quantized from the model's ONNX export as ``--precision int8 --int8 VARIANT``
does (kept in ``--cache-dir``); the check's fixed sample is encoded by each graph, mean-pooled and
normalised as all-MiniLM-L6-v2 does, and compared with the fp32 export's vectors computed natively: the
largest relative L2 error, the statistic the precision check bounds.

Usage: ``python scripts/bench_int8_isa.py [--variants dynamic dynamic-7bit nbits8] [--cache-dir cache]``
(about 4 minutes a variant under emulation on one core; variants run two at a time).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
EMULATED_CPU = "Haswell"  # AVX2 + FMA, no AVX-512, no VNNI


def prepare(variants: list[str], cache_dir: Path, work: Path) -> dict[str, str]:
    """Export and quantize (cached), tokenize the check sample once; returns variant -> graph path."""
    from sentence_transformers import SentenceTransformer

    from harness.api.building_blocks import (
        ensure_exported,
        ensure_quantized,
        exact_sample_texts,
        int8_settings,
        resolve_model,
    )

    model = resolve_model(MODEL_ID)
    st_model = SentenceTransformer(model.source, device="cpu")
    graph, _ = ensure_exported(st_model, model, cache_dir)
    graphs = {"fp32": str(graph)}
    for variant in variants:  # the no-VNNI class's settings: what an AVX2-only CPU would be given
        graphs[variant] = str(ensure_quantized(graph, int8_settings(variant, "no-vnni"))[0])
    tokenize = getattr(st_model, "preprocess", None) or st_model.tokenize  # renamed in sentence-transformers 6
    features = tokenize(exact_sample_texts())
    arrays = {name: value.numpy() for name, value in features.items() if hasattr(value, "numpy")}
    np.savez(work / "features.npz", **arrays)
    return graphs


def vectors(graph: str, features: dict[str, np.ndarray]) -> np.ndarray:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    session = ort.InferenceSession(graph, options, providers=["CPUExecutionProvider"])
    feeds = {item.name: features[item.name].astype(np.int64) for item in session.get_inputs()}
    tokens = session.run(None, feeds)[0]
    mask = features["attention_mask"][..., None]
    pooled = (tokens * mask).sum(axis=1) / mask.sum(axis=1)
    return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


def child(graphs: dict[str, str], work: Path, output: Path, names: list[str]) -> None:
    """Runs (natively or emulated) the graphs ``names``, saving each one's vectors as ``output/NAME.npy``.

    Nothing of the harness is imported here (numpy and onnxruntime only: light to emulate); the parent
    compares the vectors with the native fp32 ones.
    """
    features = dict(np.load(work / "features.npz"))
    for name in names:
        np.save(output / f"{name}.npy", vectors(graphs[name], features))
        print(f"DONE {name}", flush=True)


def vectors_folder(work: Path, emulate: bool) -> Path:
    """Where a child saves its vectors: one folder for the native run, one for the emulated ones."""
    return work / ("avx2" if emulate else "native")


def run_child(graphs: dict[str, str], work: Path, names: list[str], emulate: bool) -> subprocess.Popen:
    output = vectors_folder(work, emulate)
    output.mkdir(exist_ok=True)
    command = [sys.executable, __file__, "--child", json.dumps(graphs), str(work), str(output), *names]
    if emulate:
        command = ["qemu-x86_64", "-cpu", EMULATED_CPU, *command]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def errors_of(process: subprocess.Popen, output: Path, reference: np.ndarray) -> dict[str, float]:
    """Each variant the child finished: its largest relative error against the native fp32 vectors."""
    from harness.api.building_blocks import relative_error  # the statistic the precision check bounds

    out, _ = process.communicate()
    names = [line[len("DONE ") :] for line in out.splitlines() if line.startswith("DONE ")]
    return {name: round(relative_error(np.load(output / f"{name}.npy"), reference), 4) for name in names}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", nargs="+", default=["dynamic", "dynamic-7bit", "nbits8", "ffn32"])
    parser.add_argument("--cache-dir", type=Path, default=Path("cache"))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args()
    if args.child:
        child(json.loads(args.child), Path(rest[0]), Path(rest[1]), rest[2:])
        return
    from harness.api.building_blocks import int8_cpu_class, relevant_cpu_flags

    print(f"this cpu: {' '.join(relevant_cpu_flags())} (int8 class {int8_cpu_class()})")
    with tempfile.TemporaryDirectory(prefix="bench-int8-isa-") as tmp:
        work = Path(tmp)
        graphs = prepare(args.variants, args.cache_dir, work)
        reference = vectors(graphs["fp32"], dict(np.load(work / "features.npz")))
        native_run = run_child(graphs, work, args.variants, emulate=False)
        native = errors_of(native_run, vectors_folder(work, False), reference)
        emulated: dict[str, float] = {}
        if shutil.which("qemu-x86_64"):
            halves = [args.variants[0::2], args.variants[1::2]]  # two emulators at once: one per core
            for process in [run_child(graphs, work, half, emulate=True) for half in halves if half]:
                emulated.update(errors_of(process, vectors_folder(work, True), reference))
        else:
            print("AVX2 column skipped: qemu-x86_64 is not installed (apt install qemu-user)")
    print(f"{'variant':14s} {'this cpu':>9s} {'avx2 (' + EMULATED_CPU + ', emulated)':>26s}")
    for variant in args.variants:
        avx2 = emulated.get(variant)
        print(f"{variant:14s} {native.get(variant, float('nan')):9.4f} {avx2 if avx2 is not None else '-':>26}")


if __name__ == "__main__":
    main()
