"""Dynamic batch x sequence shapes with ``shapes=`` bounds on the trained MiniLM (ORT and the reference engine).

Truth: each row run alone at its own length (a sentence's embedding must not depend on the batch or the padding
it shares a run with), and the NumPy reference engine against ONNX Runtime.
"""

from __future__ import annotations

import numpy as np
import pytest
from _minilm import POOLED_OUT, checked_model_path, needs_model

import amdinfer
from amdinfer.engines.ort._profiles import profile_options
from amdinfer.errors import InputError
from amdinfer.types import parse_shapes

pytest.importorskip("onnxruntime")

CPU = ["CPUExecutionProvider"]
BOUNDS = {"input_ids": [(1, 1), (32, 512), (8, 128)], "attention_mask": [(1, 1), (32, 512), (8, 128)]}
#: (batch, padded sequence) shapes run through one engine; the rows' true lengths are drawn below them.
SHAPES = [(1, 5), (3, 17), (8, 64), (2, 128), (5, 33)]


def _batch(batch: int, seq: int, seed: int) -> tuple[dict[str, np.ndarray], list[int]]:
    """Random token ids right-padded to ``seq``; row lengths from 1 to ``seq`` (the last row is full)."""
    rng = np.random.default_rng(seed)
    lengths = [*rng.integers(1, seq + 1, batch - 1).tolist(), seq]
    ids = np.zeros((batch, seq), np.int64)
    mask = np.zeros_like(ids)
    for row, n in enumerate(lengths):
        ids[row, :n] = rng.integers(1000, 20000, n)
        mask[row, :n] = 1
    return {"input_ids": ids, "attention_mask": mask}, lengths


@pytest.fixture(scope="module", params=[False, "auto"], ids=["unfused", "fused"])
def bounded(request):
    engine = amdinfer.load(checked_model_path(), providers=CPU, threads=2, shapes=BOUNDS,
                           transformer_fusion=request.param)  # fmt: skip
    yield engine
    engine.close()


@needs_model
class TestOrtBounds:
    def test_the_model_names_its_dynamic_axes(self, bounded) -> None:
        assert [s.shape for s in bounded.inputs] == [("batch_size", "sequence_length")] * 2
        assert bounded.shape_bounds["input_ids"].dynamic_axes == (0, 1)

    def test_several_shapes_in_one_engine_give_each_row_its_own_answer(self, bounded) -> None:
        for seed, (batch, seq) in enumerate(SHAPES):
            feeds, lengths = _batch(batch, seq, seed)
            pooled = bounded.run(feeds)[POOLED_OUT]
            assert pooled.shape == (batch, 384)
            for row, n in enumerate(lengths):
                alone = {k: v[row : row + 1, :n] for k, v in feeds.items()}
                assert np.abs(pooled[row] - bounded.run(alone)[POOLED_OUT][0]).max() < 1e-5, (batch, seq, row)

    @pytest.mark.parametrize(
        ("shape", "why"),
        [
            ((2, 513), r"got shape \(2, 513\).*: axis 1 is 513, expected 1\.\.512"),
            ((33, 8), r"got shape \(33, 8\).*: axis 0 is 33, expected 1\.\.32"),
        ],
        ids=["sequence", "batch"],
    )
    def test_shapes_outside_the_bounds_are_refused(self, bounded, shape, why) -> None:
        feeds = {"input_ids": np.ones(shape, np.int64), "attention_mask": np.ones(shape, np.int64)}
        with pytest.raises(InputError, match=r"input 'input_ids': got .*\(1, 1\) and \(32, 512\)"):
            bounded.run(feeds)
        with pytest.raises(InputError, match=rf"input 'input_ids': {why}"):
            bounded.run(feeds)

    def test_inputs_that_disagree_on_the_sequence_are_refused(self, bounded) -> None:
        feeds = {"input_ids": np.ones((2, 8), np.int64), "attention_mask": np.ones((2, 9), np.int64)}
        with pytest.raises(InputError, match=r"input 'attention_mask': axis 1 \('sequence_length'\) is 9"):
            bounded.run(feeds)

    def test_the_profile_hints_reach_tensorrt_style_providers(self, bounded) -> None:
        info = amdinfer.EngineInfo("ort")
        names, opts = bounded._provider_list([("TensorrtExecutionProvider", {})], info, bounded.model)
        trt = opts[names.index("TensorrtExecutionProvider")]
        assert trt["trt_profile_min_shapes"] == "attention_mask:1x1,input_ids:1x1"
        assert trt["trt_profile_opt_shapes"] == "attention_mask:8x128,input_ids:8x128"
        assert trt["trt_profile_max_shapes"] == "attention_mask:32x512,input_ids:32x512"
        assert not any("profile" in k for k in bounded.info.settings["provider_options"][CPU[0]])


def test_profile_options_per_provider() -> None:
    bounds = parse_shapes({"x": [(1, 3), (4, 3)]})
    assert profile_options("NvTensorRTRTXExecutionProvider", bounds) == {
        "nv_profile_min_shapes": "x:1x3",
        "nv_profile_opt_shapes": "x:4x3",
        "nv_profile_max_shapes": "x:4x3",
    }
    assert profile_options("TensorrtExecutionProvider", {}) == {}
    for provider in ("MIGraphXExecutionProvider", "CUDAExecutionProvider", "ROCMExecutionProvider"):
        assert profile_options(provider, bounds) == {}  # they take no profile: any shape, or one program per shape


@needs_model
def test_a_minimum_sequence_is_enforced_and_buckets_keep_it() -> None:
    shapes = {"input_ids": [(1, 4), (8, 64)], "attention_mask": [(1, 4), (8, 64)]}
    with amdinfer.load(checked_model_path(), providers=CPU, threads=2, shapes=shapes, batch_buckets=[1, 4]) as eng:
        short = {k: np.ones((1, 2), np.int64) for k in shapes}
        with pytest.raises(InputError, match=r"input 'input_ids': shape \(1, 2\).*outside the bounds \(1, 4\)"):
            eng.run(short)
        feeds, _ = _batch(3, 12, seed=7)  # padded to the batch bucket 4, cut back to 3
        pooled = eng.run(feeds)[POOLED_OUT]
        assert pooled.shape == (3, 384)
        for row in range(3):
            alone = {k: v[row : row + 1] for k, v in feeds.items()}
            assert np.abs(pooled[row] - eng.run(alone)[POOLED_OUT][0]).max() < 1e-5


@needs_model
def test_the_reference_engine_runs_minilm_with_bounds() -> None:
    shapes = {"input_ids": [(1, 1), (4, 16)], "attention_mask": [(1, 1), (4, 16)]}
    path = checked_model_path()
    with (
        amdinfer.load(path, backend="reference", shapes=shapes) as ref,
        amdinfer.load(path, providers=CPU, threads=2, transformer_fusion=False) as ort_engine,
    ):
        for seed, (batch, seq) in enumerate([(1, 5), (3, 9)]):
            feeds, _ = _batch(batch, seq, seed)
            want = ort_engine.run(feeds)[POOLED_OUT]
            assert np.abs(ref.run(feeds)[POOLED_OUT] - want).max() < 1e-4
        too_long = {k: np.ones((1, 17), np.int64) for k in shapes}
        with pytest.raises(InputError, match=r"input 'input_ids': got shape \(1, 17\)"):
            ref.run(too_long)
