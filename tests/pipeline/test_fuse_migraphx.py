"""Fused pipelines on AMD's MIGraphX (target ``ref``: runs where the real ``migraphx`` imports, e.g. a CPU-only
build; skipped elsewhere with the reason). Truth: the stage-by-stage pipeline on ONNX Runtime's CPU EP."""

from __future__ import annotations

import pytest
from test_fuse import CPU, _images, _same_detections, _yolo_head

import amdinfer
from amdinfer.engines.migraphx import probe
from amdinfer.errors import OptionError
from amdinfer.postprocess import Nms, ScaleBoxes, Softmax, TopK, YoloDecode
from amdinfer.preprocess import BgrToRgb, CenterCrop, HwcToChw, Letterbox, Normalize, Resize
from amdinfer.testing.models import tiny_cnn

PROBLEM = probe()
pytestmark = pytest.mark.skipif(PROBLEM is not None, reason=f"migraphx not importable: {PROBLEM}")
MGX = {"backend": "migraphx", "target": "ref"}


def _detector():
    return amdinfer.Pipeline(
        preprocess=[Letterbox(64, backend="numpy"), BgrToRgb(), Normalize(scale=1 / 255), HwcToChw()],
        engine=_yolo_head(64),
        postprocess=[
            YoloDecode(conf_threshold=0.25),
            Nms(iou_threshold=0.5, max_det=9, class_offset=7680),
            ScaleBoxes(),
        ],
        **CPU,
    )


@pytest.mark.parametrize(("image_size", "resize"), [((48, 80), "exact"), ((48, 80), "fast"), (None, "exact")])
def test_detector_host_nms(image_size, resize) -> None:
    pipe = _detector()
    images = _images([(48, 80)] * 3, seed=6)
    with pipe.fuse(image_size=image_size, resize=resize, **MGX) as fused:  # auto: nms_mode="host" on MIGraphX
        assert "candidate_mask" in [o.name for o in fused.model.graph.output]
        got = fused.run_batch(images)
    fast = resize == "fast"  # one ONNX Resize: pixels within 1 of cv2, so boxes and scores move a little
    _same_detections(got, pipe.run_batch(images), box_tol=2.0 if fast else 0.5, score_tol=1e-2 if fast else 1e-3)
    pipe.close()


def test_in_graph_nms_is_refused() -> None:
    # Seen on MIGraphX 2.16 (ref): NonMaxSuppression and NonZero outputs come padded to a static size with zero
    # rows, which an in-graph NMS would return as detections.
    pipe = _detector()
    for mode in ("per-class", "offset", "dense"):
        with pytest.raises(OptionError, match=rf"nms_mode='{mode}' on MIGraphX: it pads"):
            pipe.fuse(nms_mode=mode, **MGX)
    pipe.close()


@pytest.mark.parametrize("resize", ["exact", "fast"])
def test_classifier(resize) -> None:
    pipe = amdinfer.Pipeline(
        preprocess=[Resize(40), CenterCrop(32), Normalize(scale=1 / 255), HwcToChw()],
        engine=tiny_cnn(),
        postprocess=[Softmax(), TopK(3)],
        **CPU,
    )
    images = _images([(50, 70)] * 2, seed=1)
    with pipe.fuse(image_size=(50, 70), resize=resize, **MGX) as fused:
        got = fused.run_batch(images)
    for a, b in zip(got, pipe.run_batch(images)):
        assert a.indices.tolist() == b.indices.tolist()
    pipe.close()
