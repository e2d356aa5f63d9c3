"""The trained YOLOv8n with the geometry inside the graph (``image_size=``, what a GPU stream uses), dense NMS.

Truth: the stage-by-stage ``amdinfer.yolo`` pipeline (OpenCV letterbox on the host). ``resize="exact"`` is
bit-exact with ``cv2.resize``, so it meets issue 13's bar (same kept set, boxes within 0.5 px, scores within
1e-3). ``resize="fast"`` (the GPU default for these 1024-pixel canvases) moves about 10 % of the pixel values
by one level, which moved scores by up to 1.4e-3 and boxes by up to 0.07 px on the shipped pages: it must keep
the same set with boxes within 0.5 px and scores within 5e-3.
"""

from __future__ import annotations

import pytest
import test_trained_yolo as parity
from _trained import PAGES, model_path, needs_model, page

import amdinfer

pytestmark = needs_model

CPU = {"backend": "ort", "providers": ["CPUExecutionProvider"]}


@pytest.mark.parametrize("resize", ["exact", "fast"])
@pytest.mark.parametrize("name", [PAGES[0], PAGES[3]])  # portrait letter; a 1200x900 page (downscaled more)
def test_in_graph_geometry(name: str, resize: str, monkeypatch: pytest.MonkeyPatch) -> None:
    image = page(name)
    if resize == "fast":
        monkeypatch.setattr(parity, "SCORE", 5e-3)
    with amdinfer.yolo(str(model_path()), conf=parity.CONF, iou=parity.IOU, **CPU) as pipe:
        want = parity._rows(pipe(image))
        with pipe.fuse(image_size=image.shape[:2], nms_mode="dense", resize=resize) as fused:
            assert ("Round" in {n.op_type for n in fused.model.graph.node}) is (
                resize == "fast"
            )  # the fast form rounds
            got = parity._rows(fused(image))
    parity._compare(got, want)
