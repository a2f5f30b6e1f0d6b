"""The ``exact`` runtime choice that noise cannot flip: interleaved rounds, the margin rule, reuse by
architecture, and nothing kept that the chosen runtime does not compute with.

The timings here come from a fake clock that each runner advances by its pretend duration, so the
rule is tested on known numbers, not on this machine's load.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from tiny_bert import build_tiny_bert, tiny_record

from harness.encoding import exact_runtime, runtime_checks
from harness.encoding.onnx_export import export_folder
from harness.encoding.runtime_choice import build_encoder
from harness.models.resolve import resolve_record

VECTORS = np.eye(4, dtype=np.float32)
TEXTS = ["what is the role of the immune cells in cancer ?", "dna", "gene and virus"]
RUN_EXACT_CHECK = exact_runtime.run_exact_check  # the real one, whatever a test patches in its place


class FakeClock:
    """A clock that only moves when a runner says how long it took; it records the order of the runs."""

    def __init__(self) -> None:
        self.now = 0.0
        self.calls: list[str] = []

    def __call__(self) -> float:
        return self.now

    def runner(self, name: str, seconds, vectors: np.ndarray = VECTORS):
        """A runner returning ``vectors`` and taking ``seconds`` (a number, or a function of the call count)."""
        count = iter(range(10**6))

        def run() -> np.ndarray:
            self.calls.append(name)
            self.now += seconds(next(count)) if callable(seconds) else seconds
            return vectors

        return run


def _check(timings: dict, clock: FakeClock | None = None, **kwargs) -> dict:
    clock = clock or FakeClock()
    return exact_runtime.run_exact_check(
        {name: clock.runner(name, seconds) for name, seconds in timings.items()}, clock=clock, **kwargs
    )


def _rounds(values: list[float]):
    """Seconds per call: the warm-up call first (untimed), then one value per timed round, cycling."""
    return lambda call: 1.0 if call == 0 else values[(call - 1) % len(values)]


def test_a_win_inside_its_spread_keeps_torch():
    # onnx saves 20% in the median round, but from -20% to +30%: its spread (IQR 26%) eats the win.
    noisy = _rounds([0.7, 1.2, 0.8, 1.1, 0.75, 0.8])
    outcome = _check({"torch": 1.0, "onnx": noisy})
    gain = outcome["candidates"]["onnx"]["gain"]
    assert gain["median"] == pytest.approx(0.2) and gain["spread"] == pytest.approx(0.2625)
    assert outcome["runtime"] == "torch"


def test_a_win_beyond_its_spread_is_taken():
    steady = _rounds([0.8, 0.82, 0.79, 0.81, 0.8, 0.8])
    outcome = _check({"torch": 1.0, "onnx": steady})
    assert outcome["runtime"] == "onnx"
    assert outcome["candidates"]["onnx"]["gain"]["median"] == pytest.approx(0.2)


def test_a_steady_win_smaller_than_the_least_win_keeps_torch():
    small = 1.0 - exact_runtime.MIN_WIN * 0.6  # 6% faster every single round: no spread, still no switch
    assert _check({"torch": 1.0, "onnx": small})["runtime"] == "torch"


def test_a_later_candidate_must_beat_the_simpler_one_chosen_so_far():
    # Both beat torch; onnx-fused saves only 2% more than onnx: the simpler onnx stays.
    outcome = _check({"torch": 1.0, "onnx": 0.70, "onnx-fused": 0.686})
    assert outcome["runtime"] == "onnx"
    # Clearly faster than onnx too: onnx-fused.
    assert _check({"torch": 1.0, "onnx": 0.70, "onnx-fused": 0.5})["runtime"] == "onnx-fused"
    # onnx loses to torch, onnx-fused wins against torch: onnx-fused.
    assert _check({"torch": 1.0, "onnx": 1.2, "onnx-fused": 0.6})["runtime"] == "onnx-fused"


def test_a_faster_runtime_whose_vectors_differ_is_never_chosen_nor_timed():
    clock = FakeClock()
    runners = {
        "torch": clock.runner("torch", 1.0),
        "onnx": clock.runner("onnx", 0.1, VECTORS + 1e-2),  # ten times faster, not exact
    }
    dropped: list[str] = []
    outcome = exact_runtime.run_exact_check(runners, clock=clock, on_drop=dropped.append)
    assert outcome["runtime"] == "torch" and dropped == ["onnx"]
    assert clock.calls.count("onnx") == 1  # the warm-up compared its vectors; no round timed it
    assert outcome["rounds"] == 0  # torch alone: nothing to time


def test_rounds_are_interleaved_and_a_loser_stops_after_the_drop_round():
    clock = FakeClock()
    dropped: list[str] = []
    outcome = _check({"torch": 1.0, "onnx": 0.7, "onnx-fused": 1.3}, clock, on_drop=dropped.append)
    warm_up, timed = clock.calls[:3], clock.calls[3:]
    assert warm_up == ["torch", "onnx", "onnx-fused"]
    # The first three rounds rotate the order, so no candidate always runs first.
    assert timed[:9] == [
        "torch",
        "onnx",
        "onnx-fused",
        "onnx",
        "onnx-fused",
        "torch",
        "onnx-fused",
        "torch",
        "onnx",
    ]
    assert (
        dropped == ["onnx-fused"]
        and outcome["candidates"]["onnx-fused"]["dropped_after"] == exact_runtime.DROP_AFTER
    )
    assert timed[9:].count("onnx-fused") == 0 and len(outcome["candidates"]["onnx-fused"]["rounds"]) == 3
    assert outcome["runtime"] == "onnx"


def test_enough_work_decides_not_one_short_timing():
    # One second a round: the minimum rounds already give every candidate 3 s of timed work.
    assert _check({"torch": 1.0, "onnx": 0.7})["rounds"] == exact_runtime.MIN_ROUNDS
    # A tenth of a second: more rounds, up to the maximum, until each has its share of work.
    assert _check({"torch": 0.1, "onnx": 0.07})["rounds"] == exact_runtime.MAX_ROUNDS
    assert exact_runtime.MIN_ROUNDS * 1.0 >= exact_runtime.MIN_SECONDS


@pytest.mark.parametrize(
    "gain, noise, expected",
    [(0.0, 0.05, "torch"), (0.0, 0.15, "torch"), (0.2, 0.05, "onnx"), (0.4, 0.15, "onnx")],
)
def test_the_same_machine_checked_again_gives_the_same_choice(gain: float, noise: float, expected: str):
    """A tie or a win, checked 30 times with every single run off by up to ``noise``: one answer."""
    choices = set()
    for seed in range(30):
        draw = random.Random(seed)

        def timing(base: float, draw=draw):
            return lambda call: base * (1 + draw.uniform(-noise, noise))

        choices.add(_check({"torch": timing(1.0), "onnx": timing(1.0 - gain)})["runtime"])
    assert choices == {expected}


# ---- reuse by architecture, and what the check leaves behind ---------------------------------------


def _forced(winner: str):
    """``run_exact_check`` on the real runners (real vectors), timed by a fake clock on which ``winner``
    is twice as fast as every other candidate.
    """

    def run(runners, **kwargs):
        clock = FakeClock()
        timed = {}
        for name, runner in runners.items():
            pretend = clock.runner(name, 0.5 if name == winner else 1.0)

            def both(runner=runner, pretend=pretend):
                pretend()
                return runner()

            timed[name] = both
        return RUN_EXACT_CHECK(timed, clock=clock, **kwargs)

    return run


@pytest.fixture
def checkpoints(tmp_path: Path):
    """Two checkpoints of one architecture (different weights) and one of another shape."""
    return {
        name: resolve_record(
            tiny_record(build_tiny_bert(tmp_path / name, seed=seed, max_positions=positions))
        )
        for name, seed, positions in [("first", 0, 64), ("second", 1, 64), ("longer", 0, 32)]
    }


def _encoder(model, cache: Path):
    return build_encoder(model, device="cpu", batch_size=2, cache_dir=cache)


def test_torch_chosen_leaves_no_onnx_on_disk_and_no_session(checkpoints, tmp_path: Path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setattr(exact_runtime, "run_exact_check", _forced("torch"))
    encoder = _encoder(checkpoints["first"], cache)
    encoder.encode_queries(TEXTS)
    assert encoder.choice.active == "torch" and encoder.loaded.sessions == []
    assert not export_folder(cache, checkpoints["first"])[0].exists()  # exported and fused, then removed
    assert [path.name for path in (cache / "onnx").iterdir()] == [
        exact_runtime.choice_path(cache, checkpoints["first"], "cpu").parent.name
    ]


def test_a_checkpoint_of_the_same_architecture_reuses_the_choice(checkpoints, tmp_path: Path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setattr(exact_runtime, "run_exact_check", _forced("onnx"))
    first = _encoder(checkpoints["first"], cache)
    first.encode_queries(TEXTS)
    assert first.choice.active == "onnx" and first.loaded.sessions == ["onnx"]  # the fused one freed
    assert not list(export_folder(cache, checkpoints["first"])[0].glob("*fused*"))

    def refuse(*args, **kwargs):
        raise AssertionError("timed again for the same architecture")

    monkeypatch.setattr(exact_runtime, "run_exact_check", refuse)
    second = _encoder(checkpoints["second"], cache)
    assert not second.choice.settled  # its own vectors are compared first, on the first batch
    vectors = second.encode_queries(TEXTS)
    assert second.choice.active == "onnx"
    verified = second.choice.exact_check["verified"]
    assert verified["equal"] and verified["relative_error"] <= exact_runtime.TOLERANCE
    torch_vectors = build_encoder(checkpoints["second"], device="cpu", runtime="torch").encode_queries(TEXTS)
    np.testing.assert_allclose(vectors, torch_vectors, atol=1e-6)
    again = _encoder(checkpoints["second"], cache)  # recorded: settled at build time, nothing loaded
    assert again.choice.active == "onnx" and again.loaded.weights.st_model is None

    checked: list[str] = []
    torch_wins = _forced("torch")

    def counted(runners, **kwargs):
        checked.append(sorted(runners))
        return torch_wins(runners, **kwargs)

    monkeypatch.setattr(exact_runtime, "run_exact_check", counted)
    longer = _encoder(checkpoints["longer"], cache)
    longer.encode_queries(TEXTS)  # another shape (max positions): checked again, its own choice
    assert checked == [["onnx", "onnx-fused", "torch"]] and longer.choice.active == "torch"
    assert _encoder(checkpoints["first"], cache).choice.active == "onnx"  # the first choice still holds


def test_a_checkpoint_whose_vectors_differ_under_the_reused_choice_computes_with_torch(
    checkpoints, tmp_path: Path, monkeypatch
):
    cache = tmp_path / "cache"
    monkeypatch.setattr(exact_runtime, "run_exact_check", _forced("onnx"))
    _encoder(checkpoints["first"], cache).encode_queries(TEXTS)
    monkeypatch.setattr(runtime_checks, "relative_error", lambda candidate, reference: 1.0)  # far apart
    second = _encoder(checkpoints["second"], cache)
    second.encode_queries(TEXTS)
    assert second.choice.active == "torch" and not second.choice.exact_check["verified"]["equal"]
    assert second.loaded.sessions == []
    assert not list(export_folder(cache, checkpoints["second"])[0].glob("*.onnx"))
