"""``nms_mode="dense"``: the batch's greedy NMS as tensor ops, against the NumPy reference NMS and the stages."""

from __future__ import annotations

import logging

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from test_fuse import CPU, _images, _same_detections, _yolo_head

import amdinfer
from amdinfer.pipeline.fuse._dense_nms import dense_nms
from amdinfer.pipeline.fuse._graph import _Graph
from amdinfer.pipeline.fuse._options import _auto_nms_mode
from amdinfer.postprocess import Nms, ScaleBoxes, YoloDecode
from amdinfer.preprocess import BgrToRgb, HwcToChw, Letterbox, Normalize
from amdinfer.reference import batched_nms, nms

CONF = 0.25


def _dense_model(stage: Nms, max_candidates: int) -> onnx.ModelProto:
    """A graph of just the dense NMS over given scores, classes and boxes."""
    g = _Graph(17)
    outs = dense_nms(g, "score", "best", "boxes", "passed", stage, max_candidates)
    for name, value in zip(("batch_index", "scores", "boxes_out", "classes", "candidates"), outs):
        g.op("Identity", value, out=name)
    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    graph = helper.make_graph(
        g.nodes,
        "dense_nms",
        [
            helper.make_tensor_value_info("score", f, ["N", "A"]),
            helper.make_tensor_value_info("best", i64, ["N", "A", 1]),
            helper.make_tensor_value_info("boxes", f, ["N", "A", 4]),
            helper.make_tensor_value_info("passed", TensorProto.BOOL, ["N", "A"]),
        ],
        [
            helper.make_tensor_value_info("batch_index", i64, ["K"]),
            helper.make_tensor_value_info("scores", f, ["K"]),
            helper.make_tensor_value_info("boxes_out", f, ["K", 4]),
            helper.make_tensor_value_info("classes", i64, ["K"]),
            helper.make_tensor_value_info("candidates", i64, ["N"]),
        ],
        initializer=g.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    return model


def _expected(score, cls, boxes, stage: Nms, max_candidates: int) -> list[np.ndarray]:
    """Per image, the anchors kept, in output order, by the NumPy reference NMS (the ``Nms`` stage's steps)."""
    kept = []
    for s, c, b in zip(score, cls, boxes):
        idx = np.nonzero(s > CONF)[0]  # anchor order, as YoloDecode gives them
        idx = idx[np.argsort(-s[idx], kind="stable")[: min(stage.max_nms, max_candidates)]]
        if stage.agnostic:
            keep = nms(b[idx], s[idx], stage.iou_threshold)
        elif stage.class_offset is not None:
            shift = (c[idx].astype(np.float32) * np.float32(stage.class_offset))[:, None]
            keep = nms(b[idx] + shift, s[idx], stage.iou_threshold)
        else:
            keep = batched_nms(b[idx], s[idx], c[idx], stage.iou_threshold)
        kept.append(idx[keep[: stage.max_det]])
    return kept


def _case(seed: int, n: int = 3, a: int = 300, classes: int = 3):
    """Crowded boxes (many overlaps near typical thresholds), scores with ties, a few classes."""
    rng = np.random.default_rng(seed)
    centre = rng.uniform(0, 60, (n, a, 2)).astype(np.float32)
    size = rng.uniform(4, 30, (n, a, 2)).astype(np.float32)
    boxes = np.concatenate([centre - size / 2, centre + size / 2], axis=2)
    score = np.round(rng.uniform(0, 1, (n, a)), 2).astype(np.float32)  # rounded: many exact ties
    cls = rng.integers(0, classes, (n, a)).astype(np.int64)
    return score, cls, boxes


def _run(model, score, cls, boxes):
    engine = amdinfer.load(model, **CPU)
    out = engine.run({"score": score, "best": cls[..., None], "boxes": boxes, "passed": score > CONF})
    engine.close()
    return out


@pytest.mark.parametrize(
    "stage",
    [
        Nms(iou_threshold=0.5),
        Nms(iou_threshold=0.3, max_det=7),
        Nms(iou_threshold=0.45, agnostic=True),
        Nms(iou_threshold=0.7, class_offset=7680),
        Nms(iou_threshold=0.5, max_nms=40),
    ],
    ids=["per-class", "max_det", "agnostic", "offset", "max_nms"],
)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_reference_nms(stage: Nms, seed: int) -> None:
    score, cls, boxes = _case(seed)
    out = _run(_dense_model(stage, 2048), score, cls, boxes)
    want = _expected(score, cls, boxes, stage, 2048)
    np.testing.assert_array_equal(out["candidates"], (score > CONF).sum(axis=1))
    for i, anchors in enumerate(want):
        mine = out["batch_index"] == i
        np.testing.assert_array_equal(out["scores"][mine], score[i, anchors])
        np.testing.assert_array_equal(out["boxes_out"][mine], boxes[i, anchors])
        np.testing.assert_array_equal(out["classes"][mine], cls[i, anchors])
    assert np.all(np.diff(out["batch_index"]) >= 0)  # image by image


def test_long_suppression_chain() -> None:
    # Boxes 1 px apart, scores falling along the row: box i overlaps i+1 (IoU 0.82) but not i+2 (0.67) above 0.75, so
    # greedy keeps every other box and each decision depends on the one before: the fixed point needs ~a rounds.
    a = 60
    x = np.arange(a, dtype=np.float32)
    boxes = np.stack([x, np.zeros(a, np.float32), x + 10, np.full(a, 10, np.float32)], axis=1)[None] * 1.0
    score = np.linspace(0.9, 0.3, a, dtype=np.float32)[None]
    cls = np.zeros((1, a), np.int64)
    stage = Nms(iou_threshold=0.75)
    out = _run(_dense_model(stage, 2048), score, cls, boxes)
    (want,) = _expected(score, cls, boxes, stage, 2048)
    assert len(want) == a // 2
    np.testing.assert_array_equal(out["boxes_out"], boxes[0, want])


def test_no_candidates_and_empty_images() -> None:
    score, cls, boxes = _case(4, n=2)
    score[0] = 0.0  # image 0 has no candidate
    out = _run(_dense_model(Nms(), 2048), score, cls, boxes)
    assert out["candidates"][0] == 0 and not np.any(out["batch_index"] == 0) and np.any(out["batch_index"] == 1)
    score[:] = 0.0
    out = _run(_dense_model(Nms(), 2048), score, cls, boxes)
    assert out["boxes_out"].shape == (0, 4) and out["candidates"].tolist() == [0, 0]


class TestPipeline:
    def _pipe(self, **nms):
        return amdinfer.Pipeline(
            preprocess=[Letterbox(64, backend="numpy"), BgrToRgb(), Normalize(scale=1 / 255), HwcToChw()],
            engine=_yolo_head(64),
            postprocess=[YoloDecode(conf_threshold=CONF), Nms(iou_threshold=0.5, **nms), ScaleBoxes()],
            **CPU,
        )

    @pytest.mark.parametrize(
        "nms",
        [{"max_det": 300}, {"max_det": 5}, {"agnostic": True}, {"classes": [1, 3]}, {"class_offset": 7680}],
    )
    def test_same_as_stages(self, nms) -> None:
        pipe = self._pipe(**nms)
        images = _images([(48, 80), (90, 40), (64, 64)])
        with pipe.fuse(nms_mode="dense") as fused:
            assert not any(n.op_type == "NonMaxSuppression" for n in fused.model.graph.node)
            assert any(n.op_type == "Loop" for n in fused.model.graph.node)
            got = fused.run_batch(images)
        want = pipe.run_batch(images)
        assert sum(len(d) for d in want) > 10
        _same_detections(got, want)
        pipe.close()

    def test_reference_engine_and_graph_geometry(self) -> None:
        pipe = self._pipe(max_det=7)
        images = _images([(48, 80), (48, 80)], seed=5)
        with pipe.fuse(image_size=(48, 80), nms_mode="dense", backend="reference") as fused:
            got = fused.run_batch(images)
        _same_detections(got, pipe.run_batch(images))
        pipe.close()

    def test_cap_is_max_nms_and_logged(self, caplog) -> None:
        images = _images([(48, 80), (90, 40)], seed=2)
        pipe = self._pipe()
        with pipe.fuse(nms_mode="dense") as fused:
            counts = fused.engine.run(fused.feeds(images)[0])["candidates"]
        cap = int(counts.min()) - 3
        assert cap >= 1
        capped = self._pipe(max_nms=cap)  # the cap keeps the best `cap` candidates: Nms(max_nms=cap) exactly
        with pipe.fuse(nms_mode="dense", max_candidates=cap) as fused, caplog.at_level(logging.WARNING, "amdinfer"):
            got = fused.run_batch(images)
            fused.run_batch(images)
        _same_detections(got, capped.run_batch(images))
        warnings = [r for r in caplog.records if "entered NMS" in r.getMessage()]
        assert len(warnings) == 1 and f"{int(counts.max())} candidates" in warnings[0].getMessage()
        pipe.close()
        capped.close()

    def test_bad_max_candidates(self) -> None:
        pipe = self._pipe()
        with pytest.raises(amdinfer.errors.OptionError, match="max_candidates: got 0"):
            pipe.fuse(nms_mode="dense", max_candidates=0)
        pipe.close()


@pytest.mark.parametrize(
    ("options", "mode"),
    [
        ({"backend": "ort", "providers": ["CUDAExecutionProvider", "CPUExecutionProvider"]}, "dense"),
        ({"backend": "ort", "providers": ["ROCMExecutionProvider"]}, "dense"),
        ({"backend": "ort", "providers": ["MIGraphXExecutionProvider"]}, "host"),
        ({"backend": "migraphx"}, "host"),
        ({"backend": "ort", "providers": ["CPUExecutionProvider"]}, "per-class"),
        ({"backend": "reference"}, "per-class"),
    ],
)
def test_auto_mode(options, mode) -> None:
    assert _auto_nms_mode(options, [YoloDecode(), Nms()]) == mode


@pytest.mark.parametrize("mode", ["per-class", "offset", "dense", "host"])
def test_opset_12_model_fuses(mode) -> None:
    # Ultralytics' default export is opset 12: the fused graph converts it to 13 and must not use newer forms
    # (Shape's start/end are opset 15).
    model = _yolo_head(64)
    model.opset_import[0].version = 12  # its ops (ReduceMean with axes, Reshape, Mul, Add, Clip) mean the same at 12
    onnx.checker.check_model(model)
    pipe = amdinfer.Pipeline(
        preprocess=[Letterbox(64, backend="numpy"), Normalize(scale=1 / 255), HwcToChw()],
        engine=model,
        postprocess=[YoloDecode(conf_threshold=CONF), Nms(iou_threshold=0.5, class_offset=7680), ScaleBoxes()],
        **CPU,
    )
    images = _images([(48, 80), (48, 80)], seed=1)
    with pipe.fuse(image_size=(48, 80), nms_mode=mode) as fused:
        assert max(o.version for o in fused.model.opset_import if o.domain == "") == 13
        got = fused.run_batch(images)
    _same_detections(got, pipe.run_batch(images))
    pipe.close()
