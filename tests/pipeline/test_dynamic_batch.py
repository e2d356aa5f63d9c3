"""``dynamic_batch``: a batch-1 export's batch axis made dynamic when proven (amdinfer/_support/_dynamic_batch.py,
amdinfer/recipes/_dynamic_batch.py).

Truths: the ORIGINAL model run one input at a time on ONNX Runtime's CPU EP (what a batch-1 export takes), and the
CPU recipe over the original model (kept there) for the detections; models that hold the batch elsewhere than in a
Reshape (a batch-1 constant concatenated on axis 0, a Reshape that folds the batch into another axis, a mean over
the batch) must be refused, each for its reason. The accelerator is faked as in test_fixed_batch_buckets.py: every
engine loaded reads ``info.device == "cuda:0"`` while it runs on the CPU.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import onnx
import pytest
from _trained import PAGES, model_path, needs_model, page
from onnx import TensorProto, helper, numpy_helper
from test_fixed_batch_buckets import batch1_export

import amdinfer
import amdinfer._load
from amdinfer._support import _dynamic_batch as dyn
from amdinfer.errors import ModelError, OptionError
from amdinfer.pipeline.fuse import FusedPipeline
from amdinfer.testing.models import resnet50, tiny_cnn, yolov8

CPU: dict[str, Any] = {"providers": ["CPUExecutionProvider"]}
SIZE = 64


@pytest.fixture(scope="module")
def fixed() -> onnx.ModelProto:
    return batch1_export(yolov8(seed=3, image_size=SIZE, num_classes=4))


@pytest.fixture(autouse=True)
def _fresh_memo() -> None:
    dyn._MEMO.clear()  # each test proves for itself (the cache tests count the proofs)


def _images(n: int) -> list[np.ndarray]:
    return [np.random.default_rng(i).integers(0, 256, (48 + 8 * (i % 5), 80, 3), np.uint8) for i in range(n)]


def _table(d: Any) -> np.ndarray:
    t = np.column_stack([np.asarray(d.classes, np.float64), d.scores, d.boxes]).reshape(-1, 6)
    return t[np.lexsort((t[:, 2], t[:, 1].round(3), t[:, 0]))]


def _same(got: list[Any], want: list[Any]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        a, b = _table(g), _table(w)
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-3)


def _one_by_one(model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]]) -> list[list[np.ndarray]]:
    with amdinfer.load(model, **CPU) as engine:
        return [list(engine.run(f).values()) for f in feeds]


def _check_rows(model: onnx.ModelProto, rewritten: onnx.ModelProto, name: str, rows: list[np.ndarray]) -> None:
    """The rewrite on a batch of ``len(rows)`` against the original, row by row (an independent run of the proof)."""
    want = _one_by_one(model, [{name: r[None]} for r in rows])
    with amdinfer.load(rewritten, **CPU) as engine:
        assert engine.inputs[0].shape[0] == "N"
        got = list(engine.run({name: np.stack(rows)}).values())
    for i, w in enumerate(want):
        for g, o in zip(got, w):
            np.testing.assert_allclose(g[i : i + 1], o, rtol=1e-4, atol=1e-4 * float(np.abs(o).max()))


# ------------------------------------------------------------------------------------------- the rewrite + proof
@needs_model
def test_the_trained_yolov8n_is_proven_and_its_batch_of_3_equals_each_page() -> None:
    proto = onnx.load(str(model_path()))
    verdict = dyn.prove_batch_dynamic(proto)
    assert verdict.applied, verdict.why
    rng = np.random.default_rng(7)
    _check_rows(
        proto, dyn.make_batch_dynamic(proto), "images", [rng.random((3, 1024, 1024), np.float32) for _ in range(3)]
    )


@needs_model
def test_the_trained_yolov8n_recipe_with_the_rewrite_equals_the_export_on_the_pages() -> None:
    pages = [page(n) for n in PAGES]
    path = model_path()
    with (
        amdinfer.yolo(path, dynamic_batch=False, **CPU) as kept,
        amdinfer.yolo(path, dynamic_batch=True, **CPU) as dyn_,
    ):
        assert kept.engine.inputs[0].shape[0] == 1 and dyn_.engine.inputs[0].shape[0] == "N"
        assert dyn_.engine.info.settings["dynamic_batch"]["applied"] is True
        _same(dyn_.run_batch(pages), [kept(p) for p in pages])


def test_builder_yolov8_at_batch_1_is_proven(fixed: onnx.ModelProto) -> None:
    verdict = dyn.prove_batch_dynamic(fixed)
    assert verdict.applied and verdict.cacheable, verdict.why
    rewritten = dyn.make_batch_dynamic(fixed)
    shapes = [numpy_helper.to_array(t) for t in rewritten.graph.initializer if t.name.endswith(("shape", "_0"))]
    assert not any(s.ndim == 1 and s.size > 1 and s[0] == 1 for s in shapes)  # no Reshape holds the 1 any more
    rng = np.random.default_rng(1)
    _check_rows(fixed, rewritten, "images", [rng.random((3, SIZE, SIZE), np.float32) for _ in range(4)])


def _resnet_batch1() -> onnx.ModelProto:
    """ResNet-50 (64 px, 10 classes) as a batch-1 export whose flatten is ``x.view(1, -1)``: Reshape ``[1, -1]``."""
    m = resnet50(seed=2, image_size=SIZE, num_classes=10)
    for vi in list(m.graph.input) + list(m.graph.output):
        vi.type.tensor_type.shape.dim[0].dim_value = 1
    (flat,) = [n for n in m.graph.node if n.op_type == "Flatten"]
    flat.op_type, flat.input[:] = "Reshape", [flat.input[0], "flat_shape"]
    del flat.attribute[:]
    m.graph.initializer.append(numpy_helper.from_array(np.array([1, -1], np.int64), "flat_shape"))
    return m


def test_a_resnet_like_classifier_at_batch_1_is_proven_and_classify_agrees() -> None:
    m = _resnet_batch1()
    verdict = dyn.prove_batch_dynamic(m)
    assert verdict.applied, verdict.why
    rng = np.random.default_rng(3)
    _check_rows(m, dyn.make_batch_dynamic(m), "input", [rng.random((3, SIZE, SIZE), np.float32) for _ in range(3)])
    images = _images(6)
    with amdinfer.classify(m, dynamic_batch=False, **CPU) as kept, amdinfer.classify(m, dynamic_batch=True, **CPU) as d:
        assert d.engine.inputs[0].shape[0] == "N"
        for g, w in zip(d.run_batch(images), [kept(x) for x in images]):
            assert g.indices.tolist() == w.indices.tolist()
            np.testing.assert_allclose(g.scores, w.scores, rtol=1e-4, atol=1e-6)


def test_constant_nodes_and_shared_shapes_are_rewritten_without_leftovers() -> None:
    """A shape from a ``Constant`` node and one initializer read by two Reshapes: both rewritten, the replaced
    constants removed (ONNX Runtime would warn about unused ones), the batch of 3 equal to each row."""
    shape = numpy_helper.from_array(np.array([1, 32], np.int64))
    model = _model(
        [
            helper.make_node("Constant", [], ["c"], value=shape),
            helper.make_node("Reshape", ["x", "c"], ["a"]),
            helper.make_node("Reshape", ["x", "s"], ["b"]),
            helper.make_node("Relu", ["x"], ["r"]),
            helper.make_node("Reshape", ["r", "s"], ["d"]),
            helper.make_node("Sum", ["a", "b", "d"], ["y"]),
        ],
        [1, 32],
        [_i64("s", [1, 32])],
    )
    assert dyn.prove_batch_dynamic(model).applied
    rewritten = dyn.make_batch_dynamic(model)
    names = {t.name for t in rewritten.graph.initializer}
    assert names == {"c__batch0", "s__batch0"} and not any(n.op_type == "Constant" for n in rewritten.graph.node)
    assert all(numpy_helper.to_array(t).tolist() == [0, 32] for t in rewritten.graph.initializer)
    rng = np.random.default_rng(5)
    _check_rows(model, rewritten, "x", [rng.standard_normal((4, 8)).astype(np.float32) for _ in range(3)])


# ------------------------------------------------------------------------------------------------ refusals
def _model(nodes: list[Any], out_shape: list[int], inits: list[Any] | None = None, x: list[int] | None = None) -> Any:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x or [1, 4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
        inits or [],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _i64(name: str, values: list[int]) -> Any:
    return numpy_helper.from_array(np.array(values, np.int64), name)


REFUSED = {
    # a batch-1 constant concatenated on axis 0 (a "row" of the batch), then summed over it: (1, 4, 8) at batch 1
    "concat_on_axis_0": (
        _model(
            [
                helper.make_node("Concat", ["x", "c"], ["cat"], axis=0),
                helper.make_node("ReduceSum", ["cat", "axes"], ["y"], keepdims=1),
            ],
            [1, 4, 8],
            [numpy_helper.from_array(np.ones((1, 4, 8), np.float32), "c"), _i64("axes", [0])],
        ),
        "axis 0 is not the batch",
    ),
    # the batch folded into the rows: [-1, 8] then back to [1, -1]; at a batch of 2 the output has 8 rows
    "reshape_folds_the_batch": (
        _model(
            [
                helper.make_node("Reshape", ["x", "s1"], ["r"]),
                helper.make_node("Relu", ["r"], ["a"]),
                helper.make_node("Reshape", ["a", "s2"], ["y"]),
            ],
            [1, 32],
            [_i64("s1", [-1, 8]), _i64("s2", [1, -1])],
        ),
        "axis 0 is not the batch",
    ),
    # the batch folded into a fixed shape: [4, 8] takes 32 values, a batch of 2 has 64
    "reshape_to_a_fixed_shape": (
        _model(
            [helper.make_node("Reshape", ["x", "s1"], ["r"]), helper.make_node("Unsqueeze", ["r", "z"], ["y"])],
            [1, 4, 8],
            [_i64("s1", [4, 8]), _i64("z", [0])],
        ),
        "fails at a batch of 2",
    ),
    # a statistic over the batch (training-mode normalisation): zero at batch 1, not at 2
    "mean_over_the_batch": (
        _model(
            [
                helper.make_node("ReduceMean", ["x"], ["m"], axes=[0], keepdims=1),  # opset 17: an attribute
                helper.make_node("Sub", ["x", "m"], ["y"]),
            ],
            [1, 4, 8],
        ),
        "row 0 differs",
    ),
    "allowzero": (
        _model([helper.make_node("Reshape", ["x", "s"], ["y"], allowzero=1)], [1, 32], [_i64("s", [1, 32])]),
        "allowzero=1",
    ),
    "already_dynamic": (tiny_cnn(), "axis 0 is 'N', expected the fixed batch 1"),
    "output_not_the_batch": (
        _model([helper.make_node("Reshape", ["x", "s"], ["y"])], [4, 8], [_i64("s", [4, 8])]),
        "output 'y': axis 0 is 4, not the batch",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_models_that_hold_the_batch_elsewhere_are_refused_with_the_reason(case: str) -> None:
    model, reason = REFUSED[case]
    verdict = dyn.prove_batch_dynamic(model)
    assert not verdict.applied
    assert reason in verdict.why, verdict.why


def test_dynamic_batch_true_on_a_refused_model_raises_with_the_reason() -> None:
    model, _ = REFUSED["mean_over_the_batch"]
    from amdinfer.recipes._dynamic_batch import load_engine

    with pytest.raises(ModelError, match=r"dynamic_batch=True: cannot make the model.s batch dynamic: .*row 0 differs"):
        load_engine(model, True, "auto", dict(CPU))
    with pytest.raises(ModelError, match="fixed at 2; the rewrite takes batch 1"):
        batch2 = tiny_cnn()
        for vi in list(batch2.graph.input) + list(batch2.graph.output):
            vi.type.tensor_type.shape.dim[0].dim_value = 2
        amdinfer.classify(batch2, dynamic_batch=True, **CPU)


@pytest.mark.parametrize("value", ["yes", 1, None, "true"])
def test_invalid_values_are_an_option_error_naming_the_argument(fixed: onnx.ModelProto, value: Any) -> None:
    with pytest.raises(OptionError, match=r"dynamic_batch: got .*, expected 'auto', True or False"):
        amdinfer.yolo(fixed, imgsz=SIZE, dynamic_batch=value, **CPU)
    with pytest.raises(OptionError, match=r"dynamic_batch: got"):
        amdinfer.classify(_resnet_batch1(), dynamic_batch=value, **CPU)


# ------------------------------------------------------------------------------------------- the faked GPU
@pytest.fixture
def gpu(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``gpu()``: from now on every engine loaded reads ``cuda:0``; returns the list of the rows of every engine
    call (before it, the truths load on the CPU)."""
    rows: list[int] = []
    real = amdinfer._load.load

    def load(*args: Any, **kwargs: Any) -> Any:
        engine = real(*args, **kwargs)
        engine.info.device = "cuda:0"
        run = engine.run

        def spy(feeds: dict, **kw: Any) -> Any:
            rows.append(int(next(iter(feeds.values())).shape[0]))
            return run(feeds, **kw)

        engine.run = spy  # type: ignore[method-assign, misc, assignment]
        return engine

    def on() -> list[int]:
        monkeypatch.setattr(amdinfer._load, "load", load)
        return rows

    return on


def test_on_an_accelerator_a_batch_1_export_batches_and_answers_as_the_cpu(fixed: onnx.ModelProto, gpu: Any) -> None:
    images = _images(70)
    with amdinfer.yolo(fixed, imgsz=SIZE, conf=0.01, **CPU) as cpu:
        assert cpu.engine.inputs[0].shape[0] == 1  # kept on the CPU
        record = cpu.engine.info.settings["dynamic_batch"]
        assert record == {"applied": False, "why": "on the CPU the batch-1 model is kept (batch 1 is fastest there)"}
        want = [cpu(x) for x in images]
    gpu = gpu()
    assert sum(len(w.classes) for w in want) > 0
    with amdinfer.yolo(fixed, imgsz=SIZE, conf=0.01, geometry="host", **CPU) as det:
        assert isinstance(det, FusedPipeline) and det.fixed_batch is None
        record = det.engine.info.settings["dynamic_batch"]
        assert record["applied"] is True and "proven on ONNX Runtime's CPU EP" in record["why"]
        _same(list(det.map(iter(images))), want)
        assert max(gpu) == 64 and sum(gpu) == 70  # batches of the automatic 64 rows
        gpu.clear()
        _same(det.run_batch(images[:64]), want[:64])
        assert gpu == [64]
        assert det.engine.info.settings["map_batch_size"]["size"] == 64


def test_dynamic_batch_false_keeps_batch_1_calls_and_the_hint_says_why(
    fixed: onnx.ModelProto, gpu: Any, caplog: pytest.LogCaptureFixture
) -> None:
    gpu = gpu()
    with caplog.at_level(logging.INFO, logger="amdinfer"):
        with amdinfer.yolo(fixed, imgsz=SIZE, geometry="host", dynamic_batch=False, **CPU) as det:
            assert det.fixed_batch == 1
            assert det.engine.info.settings["dynamic_batch"] == {"applied": False, "why": "dynamic_batch=False"}
            assert len(list(det.map(iter(_images(10))))) == 10
    assert gpu and set(gpu) == {1}
    hints = [r.getMessage() for r in caplog.records if "dynamic=True" in r.getMessage()]
    assert len(hints) == 1 and "it was not made dynamic (dynamic_batch=False)" in hints[0]


def test_a_refused_rewrite_on_an_accelerator_keeps_the_model_and_says_why(gpu: Any) -> None:
    gpu()
    model, _ = REFUSED["mean_over_the_batch"]
    from amdinfer.recipes._dynamic_batch import load_engine

    with load_engine(model, "auto", "auto", dict(CPU)) as engine:
        record = engine.info.settings["dynamic_batch"]
        assert record["applied"] is False and "row 0 differs" in record["why"]
        assert engine.inputs[0].shape[0] == 1
        from amdinfer.pipeline._auto import hint_fixed

        assert hint_fixed(engine.info, 1)
        assert "row 0 differs" in engine.info.notes[-1] and "dynamic=True" in engine.info.notes[-1]


def test_buckets_on_an_accelerator_apply_to_the_rewrite(fixed: onnx.ModelProto, gpu: Any) -> None:
    """What the server does after seeing a dynamic axis: load again with buckets 8..64 (refused on the batch-1 model
    itself, test_fixed_batch_buckets.py); after the rewrite they apply (the engine pads a call of 5 rows to 8)."""
    images = _images(5)
    with amdinfer.yolo(fixed, imgsz=SIZE, conf=0.01, **CPU) as cpu:
        want = cpu.run_batch(images)
    rows = gpu()
    with amdinfer.yolo(fixed, imgsz=SIZE, conf=0.01, geometry="host", batch_buckets=(8, 16, 32, 64), **CPU) as det:
        assert det.engine.batch_buckets == (8, 16, 32, 64) and det.fixed_batch is None
        _same(det.run_batch(images), want)
    assert rows == [5]  # one call; Engine.run pads it to the bucket of 8 inside


def test_served_defaults_read_no_fixed_batch_after_the_rewrite(fixed: onnx.ModelProto, gpu: Any) -> None:
    """The server's rule (serve/_models.py ``served_defaults_for``) over the recipe on an accelerator: buckets after
    the rewrite (the pipeline's ``fixed_batch`` is None, its axis ``N``), none for the batch-1 model kept."""
    pytest.importorskip("kserve", reason="needs the serve extra (amdinfer.serve._models imports KServe): nox -s serve")
    from amdinfer.serve._models import served_defaults_for
    from amdinfer.serve._workers import PipelineWorker

    gpu()
    with amdinfer.yolo(fixed, imgsz=SIZE, geometry="host", dynamic_batch=False, **CPU) as kept:
        assert served_defaults_for([PipelineWorker(kept)], recipe="yolo").batch_buckets == ()
    with amdinfer.yolo(fixed, imgsz=SIZE, geometry="host", **CPU) as det:
        assert served_defaults_for([PipelineWorker(det)], recipe="yolo").batch_buckets == (8, 16, 32, 64)


# ---------------------------------------------------------------------------------------------- the cache
def test_the_verdict_is_cached_by_the_model_hash(
    fixed: onnx.ModelProto, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    proofs: list[int] = []
    real = dyn.prove_batch_dynamic

    def counted(model: onnx.ModelProto, **kw: Any) -> Any:
        proofs.append(1)
        return real(model, **kw)

    monkeypatch.setattr(dyn, "prove_batch_dynamic", counted)
    monkeypatch.setenv("AMDINFER_CACHE_DIR", str(tmp_path))
    for _ in range(2):
        with amdinfer.yolo(fixed, imgsz=SIZE, dynamic_batch=True, **CPU) as det:
            assert det.engine.inputs[0].shape[0] == "N"
    assert len(proofs) == 1  # the second load: from this process's memo
    dyn._MEMO.clear()  # as a new process: from the cache folder
    with amdinfer.yolo(fixed, imgsz=SIZE, dynamic_batch=True, **CPU):
        pass
    assert len(proofs) == 1
    assert any(p.suffix == ".json" for p in tmp_path.rglob("*"))
    dyn._MEMO.clear()
    with amdinfer.yolo(fixed, imgsz=SIZE, dynamic_batch=True, cache=False, **CPU):
        pass
    assert len(proofs) == 2  # cache=False: proven again
    other = batch1_export(yolov8(seed=4, image_size=SIZE, num_classes=4))  # another hash: its own proof
    with amdinfer.yolo(other, imgsz=SIZE, dynamic_batch=True, **CPU):
        pass
    assert len(proofs) == 3
