"""Sliced detection served (issue 41): ``amdinfer serve MODEL --recipe yolo --tiles HxW --tile-overlap F`` (and
``recipe_options``/``models.toml``'s ``tiles``, ``tile_overlap``, ``tile_merge``) serves the
:class:`~amdinfer.pipeline.SlicedPipeline` of ``amdinfer.yolo(model, tiles=...)``.

Two truths: the recipe run in the process on the same PNG bytes (equal boxes), and the squares planted in the
images (:func:`amdinfer.testing.squares.planted_squares`: 16-pixel squares that the whole image, letterboxed to
the detector's 320 pixels, loses and the tiles find exactly). Workers are built in a fresh process, as the other
recipe serving tests.
"""

from __future__ import annotations

import importlib.util
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

if importlib.util.find_spec("kserve") is None:
    pytest.skip("needs the serve extra: run `nox -s serve`", allow_module_level=True)

from amdinfer.errors import OptionError
from amdinfer.recipes import RECIPES
from amdinfer.testing.squares import planted_squares

from .conftest import bytes_input, free_port, running_server

#: (height, width, squares, seed) of each image: larger than the detector's 320 pixels on both axes
_IMAGES = [(700, 900, 5, 1), (500, 640, 3, 2)]


def _png(image: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(image).save(buf, "PNG")
    return buf.getvalue()


PLANTED = [planted_squares(h, w, count=n, seed=s) for h, w, n, s in _IMAGES]
FILES = [_png(image) for image, _ in PLANTED]
TRUTH = [sorted(boxes.tolist()) for _, boxes in PLANTED]

_WORKERS = """if True:
    import json, sys
    import numpy as np
    import amdinfer
    from amdinfer.results import Detections
    from amdinfer.serve import load_recipe_workers
    from amdinfer.testing.squares import square_detector

    files = [open(p, "rb").read() for p in sys.argv[2:]]
    served_options, local_options = json.loads(sys.argv[1])
    model = square_detector(image_size=320)
    (worker,) = load_recipe_workers(model, "yolo", recipe_options=served_options, providers=["cpu"])
    def batch(items):
        arr = np.empty(len(items), dtype=object)
        arr[:] = items
        return {"images": arr}
    answers = worker.run([batch(files), batch(files[1:])])  # two requests in one call
    warmed = worker.warmup(2, runs=1)
    worker.pipeline.close()
    got = Detections.from_batch(answers[0], len(files)) + Detections.from_batch(answers[1], 1)
    sliced = amdinfer.yolo(model, **local_options, keep_image=False, providers=["cpu"])
    want = sliced.run_batch(files)
    sliced.close()
    whole = amdinfer.yolo(model, decoder="pillow", keep_image=False, providers=["cpu"])
    lost = [len(d) for d in whole.run_batch(files)]
    whole.close()
    want = want + want[1:]
    print(json.dumps({
        "class": type(worker.pipeline).__name__, "tensors": sorted(answers[0]), "warmed": warmed,
        "equal": [bool(np.array_equal(g.boxes, w.boxes) and np.array_equal(g.classes, w.classes)
                       and np.allclose(g.scores, w.scores)) for g, w in zip(got, want)],
        "boxes": [sorted(g.boxes.tolist()) for g in got], "whole": lost,
    }))
"""


def _run(code: str, *args: str) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    folder = tmp_path_factory.mktemp("pictures")
    paths = []
    for k, data in enumerate(FILES):
        (folder / f"p{k}.png").write_bytes(data)
        paths.append(str(folder / f"p{k}.png"))
    return paths


@pytest.mark.parametrize(
    ("served", "local"),
    [
        ({"tiles": "320x320", "decoder": "pillow"}, {"tiles": (320, 320), "decoder": "pillow"}),
        (
            {"tiles": 320, "tile_overlap": 0.25, "tile_merge": "NMS", "decoder": "pillow"},
            {"tiles": 320, "tile_overlap": 0.25, "tile_merge": "NMS", "decoder": "pillow"},
        ),
    ],
)
def test_served_sliced_boxes_equal_the_recipe_and_the_planted_squares(
    files: list[str], served: dict, local: dict
) -> None:
    (line,) = _run(_WORKERS, json.dumps([served, local]), *files)
    answer = json.loads(line)
    assert answer["class"] == "SlicedPipeline"
    assert answer["equal"] == [True, True, True], answer
    assert answer["boxes"] == [*TRUTH, TRUTH[1]]  # every planted square, its box exact
    assert answer["whole"] == [0, 0]  # the whole image alone finds none: the tiles are what finds them
    assert answer["tensors"] == ["boxes", "boxes_batch_index", "classes", "labels", "scores"]
    assert answer["warmed"] == [1, 2]


class TestOptions:
    @pytest.mark.parametrize(
        ("options", "message"),
        [
            ({"tiles": "320x"}, "recipe_options: option 'tiles' got '320x', expected an int N (N x N), 'HxW' "
             "(e.g. '640x480') or [H, W] of positive ints"),
            ({"tiles": [320, 320, 3]}, "recipe_options: option 'tiles' got [320, 320, 3], expected an int N "
             "(N x N), 'HxW' (e.g. '640x480') or [H, W] of positive ints"),
            ({"tiles": 0}, "recipe_options: option 'tiles' got 0, expected an int N (N x N), 'HxW' (e.g. "
             "'640x480') or [H, W] of positive ints"),
            ({"tiles": 1.5}, "recipe_options: option 'tiles' got 1.5, expected a str or an int or a list or a "
             "tuple"),
            ({"tile_overlap": 1.0}, "recipe_options: option 'tile_overlap' got 1.0, expected a fraction in [0, 1)"),
            ({"tile_merge": "WBF"}, "recipe_options: option 'tile_merge' got 'WBF', expected one of ['GREEDYNMM', "
             "'NMS']"),
        ],
    )  # fmt: skip
    def test_bad_options_are_one_line_option_errors(self, options: dict, message: str) -> None:
        with pytest.raises(OptionError) as info:
            RECIPES["yolo"].check_options(options, "recipe_options")
        assert str(info.value) == message

    def test_the_flags_and_a_repository_give_what_amdinfer_yolo_takes(self, tmp_path: Path) -> None:
        from amdinfer.cli import build_parser
        from amdinfer.serve._cli import _recipe_options
        from amdinfer.serve._model_folder import read_repository
        from amdinfer.testing.squares import square_detector

        argv = ["serve", "m.onnx", "--recipe", "yolo", "--tiles", "640x480", "--tile-overlap", "0.3"]
        given = _recipe_options(build_parser().parse_args(argv))
        assert RECIPES["yolo"].check_options(given, "flags") == {"tiles": (640, 480), "tile_overlap": 0.3}
        with pytest.raises(OptionError, match=r"^--tiles: not an option of --recipe classify$"):
            _recipe_options(build_parser().parse_args(["serve", "m.onnx", "--recipe", "classify", "--tiles", "64"]))
        (tmp_path / "det").mkdir()
        onnx.save(square_detector(image_size=320), tmp_path / "det" / "model.onnx")
        (tmp_path / "models.toml").write_text(
            '[models.det]\nrecipe = "yolo"\nrecipe_options = { tiles = [320, 320], tile_merge = "NMS" }\n'
        )
        config = read_repository(tmp_path)["det"]
        assert not isinstance(config, str), config
        assert config.recipe_options == {"tiles": (320, 320), "tile_merge": "NMS"}


def test_serve_recipe_yolo_tiles_answers_rest_and_grpc_like_the_local_recipe(tmp_path: Path) -> None:
    """The command line server with ``--tiles``: one request of both images over each protocol; the boxes split
    by ``boxes_batch_index`` equal the local sliced recipe's and the planted squares."""
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    import amdinfer
    from amdinfer.testing.squares import square_detector

    path = tmp_path / "det.onnx"
    onnx.save(square_detector(image_size=320), path)
    local = amdinfer.yolo(path, tiles=320, tile_overlap=0.25, decoder="pillow", keep_image=False, providers=["cpu"])
    want = local.run_batch(FILES)
    local.close()
    http, grpc = free_port(), free_port()
    argv = ["-m", "amdinfer", "serve", str(path), "--recipe", "yolo", "--tiles", "320", "--tile-overlap", "0.25"]
    argv += ["--decoder", "pillow", "--providers", "cpu", "--http-port", str(http), "--grpc-port", str(grpc)]
    with running_server(argv, http, grpc, tmp_path / "log.txt") as server:
        for client, url in ((httpclient, server.http), (grpcclient, server.grpc)):
            result = client.InferenceServerClient(url).infer("det", [bytes_input(client, FILES)])
            boxes, index = result.as_numpy("boxes"), result.as_numpy("boxes_batch_index")
            scores = result.as_numpy("scores")
            for i, w in enumerate(want):
                assert np.array_equal(boxes[index == i], w.boxes) and np.allclose(scores[index == i], w.scores)
                assert sorted(boxes[index == i].tolist()) == TRUTH[i]
        assert server.stop() == 0
