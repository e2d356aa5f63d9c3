"""``amdinfer.serve(...)`` given a pipeline built in code (issue 41): a :class:`~amdinfer.pipeline.SlicedPipeline`
(``amdinfer.yolo(model, tiles=...)``) and a :class:`~amdinfer.recipes.Segmenter` (``amdinfer.segment``) are served
like any Pipeline.

The truth is the same pipeline run in the process on the same PNG bytes (equal boxes; pixel-equal class maps), and
for the sliced detector the squares planted in the images (:func:`amdinfer.testing.squares.planted_squares`).
"""

from __future__ import annotations

import importlib.util
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

if importlib.util.find_spec("kserve") is None:
    pytest.skip("needs the serve extra: run `nox -s serve`", allow_module_level=True)

from amdinfer.testing.squares import planted_squares

from .conftest import bytes_input, free_port, running_server

_PALETTE = np.array([[0, 0, 0], [255, 255, 255], [255, 0, 0], [0, 255, 0], [0, 0, 255]], np.uint8)


def _png(image: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(image).save(buf, "PNG")
    return buf.getvalue()


def _picture(seed: int, h: int, w: int) -> np.ndarray:
    """Blocks of 8 pixels in the unet's pure colours (every class present)."""
    grid = _PALETTE[np.random.default_rng(seed).integers(0, 5, (-(-h // 8), -(-w // 8)))]
    return np.ascontiguousarray(np.kron(grid, np.ones((8, 8, 1), np.uint8))[:h, :w])


PLANTED = [planted_squares(700, 900, count=5, seed=1), planted_squares(500, 640, count=3, seed=2)]
SQUARES = [_png(image) for image, _ in PLANTED]
TRUTH = [sorted(boxes.tolist()) for _, boxes in PLANTED]
MAPS = [_png(_picture(k, h, w)) for k, (h, w) in enumerate([(30, 50), (70, 90)])]

#: a server process serving what ``sys.argv[1]`` builds, in code (no recipe)
_SERVER = """if True:
    import sys
    import amdinfer
    from amdinfer.testing.models import unet
    from amdinfer.testing.squares import square_detector

    kind, http, grpc = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    if kind == "sliced":
        built = amdinfer.yolo(square_detector(image_size=320), tiles=(320, 320), decoder="pillow",
                              keep_image=False, providers=["cpu"])
    else:
        built = amdinfer.segment(unet(), decoder="pillow", keep_image=False, providers=["cpu"])
    from amdinfer.serve import serve

    serve(built, name="m", http_port=http, grpc_port=grpc)
"""


def _serve(kind: str, tmp_path: Path) -> object:
    http, grpc = free_port(), free_port()
    return running_server(["-c", _SERVER, kind, str(http), str(grpc)], http, grpc, tmp_path / f"{kind}.log")


def test_a_sliced_pipeline_built_in_code_is_served_like_the_local_one(tmp_path: Path) -> None:
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    import amdinfer
    from amdinfer.testing.squares import square_detector

    local = amdinfer.yolo(square_detector(image_size=320), tiles=(320, 320), decoder="pillow", keep_image=False,
                          providers=["cpu"])  # fmt: skip
    assert type(local).__name__ == "SlicedPipeline"
    want = local.run_batch(SQUARES)
    local.close()
    with _serve("sliced", tmp_path) as server:
        for client, url in ((httpclient, server.http), (grpcclient, server.grpc)):
            result = client.InferenceServerClient(url).infer("m", [bytes_input(client, SQUARES)])
            boxes, index = result.as_numpy("boxes"), result.as_numpy("boxes_batch_index")
            for i, w in enumerate(want):
                assert np.array_equal(boxes[index == i], w.boxes)
                assert sorted(boxes[index == i].tolist()) == TRUTH[i]  # every planted square, exact
        assert server.stop() == 0


def test_a_segmenter_built_in_code_is_served_pixel_equal_to_the_local_one(tmp_path: Path) -> None:
    import tritonclient.http as httpclient

    import amdinfer
    from amdinfer.serve._answer_maps import maps_from_answer
    from amdinfer.testing.models import unet

    local = amdinfer.segment(unet(), decoder="pillow", keep_image=False, providers=["cpu"])
    want = local.run_batch(MAPS)
    local.close()
    with _serve("segment", tmp_path) as server:
        result = httpclient.InferenceServerClient(server.http).infer("m", [bytes_input(httpclient, MAPS)])
        names = ("classes", "image_shapes", "counts", "rle", "labels")
        got = maps_from_answer({k: result.as_numpy(k) for k in names})
        assert [g.classes.shape for g in got] == [(30, 50), (70, 90)]
        assert all(np.array_equal(g.classes, w.classes) for g, w in zip(got, want))
        assert server.stop() == 0


def test_a_recipe_with_a_ready_sliced_pipeline_is_refused_naming_its_type() -> None:
    """In a fresh process: kserve's and tritonclient's gRPC modules do not import into one process."""
    code = """if True:
        import amdinfer
        from amdinfer.serve._serve_api import _target
        from amdinfer.testing.squares import square_detector

        sliced = amdinfer.yolo(square_detector(image_size=320), tiles=320, providers=["cpu"])
        try:
            _target(sliced, "yolo", None, 0.0, "ort")  # what serve() calls before it starts the server
        except Exception as exc:
            print(type(exc).__name__, exc)
    """
    proc = subprocess.run([sys.executable, "-c", code.replace("\n    ", "\n")], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("OptionError recipe: got 'yolo' (options {}) with a ready SlicedPipeline; ")


_WARM = """if True:
    import json
    from amdinfer.serve import load_recipe_workers
    from amdinfer.serve._workers import _png
    from amdinfer.testing.models import unet

    out = {}
    for key, options, load in [
        ("max_size", {"max_size": 128}, {}),
        ("shapes", {}, {"shapes": {"images": [(1, 3, 32, 32), (8, 3, 160, 160)]}}),
        ("patch", {"patch": "96x96", "max_size": 192}, {}),
        ("none", {}, {}),
    ]:
        (worker,) = load_recipe_workers(unet(), "segment", recipe_options={"decoder": "pillow", **options},
                                        providers=["cpu"], **load)
        warmed = worker.warmup(2, runs=1)
        fed = worker.pipeline.engine.info.settings["segment"]["shapes"]
        before = sorted(fed)
        worker.pipeline.run_batch([_png(600, 500)])  # a large image after the warm-up: its patches' shape
        out[key] = {"warmed": warmed, "before": before, "after": sorted(fed), "size": worker.pipeline.image_size}
        worker.pipeline.close()
    print(json.dumps(out))
"""


def test_a_bounded_segmenter_warms_up_at_its_bound_the_shape_large_images_run_at() -> None:
    """Hand-computed truth: the bound (``max_size``, the engine's ``shapes=`` maximum) rounded down to the stride,
    or the patch, is the one engine shape a large image's patches run at; after the warm-up it is no new shape."""
    proc = subprocess.run([sys.executable, "-c", _WARM], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    for key, side in (("max_size", 128), ("shapes", 160), ("patch", 96)):
        assert got[key]["size"] == [side, side]
        assert got[key]["warmed"] == [1, 2]
        assert got[key]["before"] == got[key]["after"] == [f"{side}x{side}"], (key, got[key])
    # no bound: any size runs whole, so there is no size large images share; the worker's 64x64 picture
    assert got["none"]["size"] is None and got["none"]["before"] == ["64x64"]
    assert got["none"]["after"] == ["600x500", "64x64"]
