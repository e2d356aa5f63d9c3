"""A model exported with a fixed batch (Ultralytics' batch-1 default, whose Reshapes hold the 1 and the anchor count)
behind a recipe: the fused graph's input axis is ``N`` but the body still takes ``B`` rows only, so the engine must
never pad a chunk of ``B`` rows up to a batch bucket (before: ``batch_buckets=(8, ...)`` made ONNX Runtime's
Reshape fail with "Input shape:{1,64,8A}, requested shape:{1,4,16,A}" on every run).

Truths: the same recipe without buckets, image by image (each a batch of 1, what the export takes), and the
hand-written batch-1 export whose Reshape shapes are all literal numbers (checked to refuse 8 rows itself).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import amdinfer
from amdinfer.errors import AmdinferError, OptionError
from amdinfer.pipeline.fuse import FusedPipeline, fuse_model
from amdinfer.testing.models import yolov8

CPU = {"providers": ["CPUExecutionProvider"]}
SIZE = 64


def batch1_export(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` as Ultralytics exports it at batch 1: inputs and outputs of batch 1 and every constant Reshape
    shape written out in full (``[1, 4, 16, 84]``, not ``[0, 4, 16, -1]``), from ONNX shape inference at batch 1."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for vi in list(out.graph.input) + list(out.graph.output):
        vi.type.tensor_type.shape.dim[0].dim_value = 1
    inferred = onnx.shape_inference.infer_shapes(out, strict_mode=True)
    shapes = {
        vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
        for vi in list(inferred.graph.value_info) + list(inferred.graph.output)
    }
    inits = {t.name: t for t in out.graph.initializer}
    for node in out.graph.node:
        if node.op_type == "Reshape" and node.input[1] in inits:
            full = np.asarray(shapes[node.output[0]], np.int64)
            assert full.size and full.min() >= 1, (node.name, full)
            inits[node.input[1]].CopyFrom(numpy_helper.from_array(full, node.input[1]))
    return out


@pytest.fixture(scope="module")
def fixed() -> onnx.ModelProto:
    return batch1_export(yolov8(seed=3, image_size=SIZE, num_classes=4))


def _images(n: int) -> list[np.ndarray]:
    return [np.random.default_rng(i).integers(0, 256, (48 + 8 * i, 80, 3), np.uint8) for i in range(n)]


def _rows(d: object) -> list[tuple[int, float]]:
    return sorted((int(c), round(float(s), 4)) for c, s in zip(d.classes, d.scores))  # type: ignore[attr-defined]


def test_the_export_takes_batch_1_only(fixed: onnx.ModelProto) -> None:
    """The truth's premise: 8 rows fail inside the graph (the Reshape), 1 row runs."""
    from amdinfer.preprocess import HwcToChw, Normalize

    fused = fuse_model(fixed, [Normalize(scale=1 / 255), HwcToChw()], [], image_size=(SIZE, SIZE))
    with amdinfer.load(fused, **CPU) as f:
        assert f.inputs[0].shape[0] == "N"
        f.run({"images": np.zeros((1, SIZE, SIZE, 3), np.uint8)})
        with pytest.raises(AmdinferError, match="Reshape"):
            f.run({"images": np.zeros((8, SIZE, SIZE, 3), np.uint8)})


def test_fused_fixed_batch_comes_from_the_original_model(fixed: onnx.ModelProto) -> None:
    """fuse_model makes the graph's input axis ``N``; the batch of the model inside is what ``fixed_batch`` says."""
    with amdinfer.yolo(fixed, imgsz=SIZE, fuse=True, **CPU) as pipe:
        assert isinstance(pipe, FusedPipeline)
        assert pipe.engine.inputs[0].shape[0] == "N"
        assert pipe.fixed_batch == 1
        assert pipe.engine.batch_buckets == ()


@pytest.mark.parametrize("fuse", [True, False])
def test_buckets_on_a_fixed_batch_recipe_are_refused_at_load(fixed: onnx.ModelProto, fuse: bool) -> None:
    """``batch_buckets=(8, 16, 32, 64)`` (what the server passed on an accelerator) on a batch-1 model: an OptionError
    at load naming the fixed batch (before: accepted, and every run failed in ONNX Runtime's Reshape)."""
    with pytest.raises(OptionError, match=r"batch_buckets: got \[8, 16, 32, 64\].*fixed batch of 1"):
        amdinfer.yolo(fixed, imgsz=SIZE, fuse=fuse, batch_buckets=(8, 16, 32, 64), **CPU)


def test_a_bucket_of_the_fixed_batch_itself_is_accepted(fixed: onnx.ModelProto) -> None:
    with amdinfer.yolo(fixed, imgsz=SIZE, fuse=True, batch_buckets=(1,), **CPU) as pipe:
        assert len(pipe.run_batch(_images(3))) == 3


def test_a_fused_pipeline_over_a_bucketed_engine_of_a_fixed_batch_model_is_refused(fixed: onnx.ModelProto) -> None:
    """FusedPipeline built by hand over an engine with buckets: refused (its chunks of 1 would be padded to 8)."""
    from amdinfer.postprocess import Nms, YoloDecode
    from amdinfer.preprocess import HwcToChw, Normalize

    model = fuse_model(fixed, [Normalize(scale=1 / 255), HwcToChw()], [YoloDecode(), Nms()], image_size=(SIZE, SIZE))
    engine = amdinfer.load(model, batch_buckets=(8, 16), **CPU)
    with pytest.raises(OptionError, match=r"batch_buckets: got \[8, 16\].*fixed batch of 1"):
        FusedPipeline(model, engine, [], image_size=(SIZE, SIZE), owns_engine=False)
    engine.close()


def test_run_batch_and_map_of_many_images_equal_one_at_a_time(fixed: onnx.ModelProto) -> None:
    """64 images (the server's batch) through the fused batch-1 recipe: chunks of 1, answers of one at a time."""
    images = _images(10) * 6 + _images(4)
    with amdinfer.yolo(fixed, imgsz=SIZE, fuse=True, conf=0.01, **CPU) as pipe:
        want = [_rows(pipe.run_batch([x])[0]) for x in images[:10]]
        got = pipe.run_batch(images)
        assert len(got) == 64
        assert [_rows(g) for g in got[:10]] == want
        assert [_rows(g) for g in list(pipe.map(iter(images), batch_size=16))[:10]] == want


@pytest.mark.parametrize("n", [1, 5, 64])
def test_on_an_accelerator_every_engine_call_has_the_fixed_batch(fixed: onnx.ModelProto, n: int) -> None:
    """The accelerator's paths (sub-batches streamed, placed in parallel) on the CPU: the fused engine's
    ``info.device`` reads ``cuda:0``. Every engine call has 1 row, whatever the list's length; answers are the
    CPU pipeline's."""
    images = (_images(10) * 7)[:n]
    with amdinfer.yolo(fixed, imgsz=SIZE, fuse=True, conf=0.01, **CPU) as cpu:
        want = [_rows(r) for r in cpu.run_batch(images)]
        engine = amdinfer.load(cpu.model, **CPU)
    engine.info.device = "cuda:0"
    rows: list[int] = []
    run = engine.run  # run_many on the CPU runs each batch through run

    def spy(feeds: dict, **kw: object) -> object:
        rows.append(int(feeds["images"].shape[0]))
        return run(feeds, **kw)

    engine.run = spy  # type: ignore[method-assign]
    with FusedPipeline(cpu.model, engine, cpu._host, image_size=cpu.image_size, labels=cpu._labels) as gpu:
        assert gpu.fixed_batch == 1
        assert [_rows(r) for r in gpu.run_batch(images)] == want
        assert [_rows(r) for r in gpu.map(iter(images))] == want
    assert rows and set(rows) == {1}
