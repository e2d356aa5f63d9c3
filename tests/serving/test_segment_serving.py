"""``amdinfer serve MODEL --recipe segment`` (issue 41): the class map of each image, in its own pixels, over REST and
gRPC, pixel-equal to what ``amdinfer.segment`` answers in the process on the same files; the wire form
(:mod:`amdinfer.serve._answer_maps`: ``classes (N, H, W)`` padded, ``image_shapes``, ``counts``, ``rle`` JSON,
``labels``) decoded by a client with NumPy alone and by :func:`~amdinfer.serve._answer_maps.maps_from_answer`;
bad options refused with the registry's one-line messages.

The truth is the public recipe (``amdinfer.segment``) on the same PNG bytes, and, for the decode, each present
class's run-length mask rebuilt by hand. Workers are built in a fresh process, as the other recipe serving tests.
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

from .conftest import bytes_input, free_port, running_server

#: the unet's colours (amdinfer.testing.models.UNET_CLASSES order: dark, bright, red, green, blue)
_PALETTE = np.array([[0, 0, 0], [255, 255, 255], [255, 0, 0], [0, 255, 0], [0, 0, 255]], np.uint8)
#: images of three sizes (one larger than the 32-pixel patches in both axes)
_SIZES = [(30, 50), (45, 37), (70, 90)]


def _picture(seed: int, h: int, w: int) -> np.ndarray:
    """Blocks of 8 pixels in the unet's pure colours: every class present, with edges between them."""
    grid = _PALETTE[np.random.default_rng(seed).integers(0, 5, (-(-h // 8), -(-w // 8)))]
    return np.ascontiguousarray(np.kron(grid, np.ones((8, 8, 1), np.uint8))[:h, :w])


def _png(image: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(image).save(buf, "PNG")
    return buf.getvalue()


FILES = [_png(_picture(k, h, w)) for k, (h, w) in enumerate(_SIZES)]


def _rle_mask(rle: dict, shape: tuple[int, int]) -> np.ndarray:
    """COCO's uncompressed RLE decoded by hand: runs over the column-major pixels, the first one unset."""
    flat = np.zeros(shape[0] * shape[1], bool)
    start, value = 0, False
    for run in rle["counts"]:
        flat[start : start + run] = value
        start, value = start + run, not value
    assert start == flat.size and rle["size"] == list(shape)
    return flat.reshape(shape, order="F")


def _client_maps(classes: np.ndarray, shapes: np.ndarray, rle: np.ndarray) -> tuple[list, list]:
    """What a client does with NumPy alone: each map cut from the padded tensor, and rebuilt from its RLE JSON."""
    cut = [classes[i, :h, :w] for i, (h, w) in enumerate(shapes.tolist())]
    rebuilt = []
    for text in rle.reshape(-1).tolist():
        data = json.loads(text)
        m = np.full(tuple(data["image_shape"]), -1, np.int64)
        for key, run in data["rle"].items():
            m[_rle_mask(run, tuple(data["image_shape"]))] = int(key)
        rebuilt.append(m)
    return cut, rebuilt


_WORKERS = """if True:
    import json, sys
    import numpy as np
    import amdinfer
    from amdinfer.serve import load_recipe_workers
    from amdinfer.serve._answer_maps import maps_from_answer
    from amdinfer.testing.models import unet

    files = [open(p, "rb").read() for p in sys.argv[2:]]
    served_options, local_options = json.loads(sys.argv[1])
    model = unet()
    (worker,) = load_recipe_workers(model, "segment", recipe_options=served_options, providers=["cpu"])
    def batch(items):
        arr = np.empty(len(items), dtype=object)
        arr[:] = items
        return {"images": arr}
    # two requests in one call: all three images, then the first alone
    both = worker.run([batch(files), batch(files[:1])])
    warmed = worker.warmup(2, runs=1)
    worker.pipeline.close()
    seg = amdinfer.segment(model, **local_options, keep_image=False, providers=["cpu"])
    want = seg.run_batch(files)
    seg.close()
    first = both[0]
    same = [np.array_equal(g.classes, w.classes) for g, w in zip(maps_from_answer(first), want)]
    same_rle = [np.array_equal(g.classes, w.classes) for g, w in zip(maps_from_answer(first, from_rle=True), want)]
    print(json.dumps({
        "class": type(worker.pipeline).__name__,
        "tensors": {k: [str(v.dtype), list(v.shape)] for k, v in first.items()},
        "equal": same, "equal_rle": same_rle, "alone": np.array_equal(both[1]["classes"][0], want[0].classes),
        "counts": [w.counts.tolist() for w in want], "labels": want[0].labels, "warmed": warmed,
        "sizes": [list(w.image_shape) for w in want],
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
        ({"decoder": "pillow"}, {"decoder": "pillow"}),
        (  # patches: the flag's text, the registry parses it to what amdinfer.segment takes
            {"decoder": "pillow", "patch": "32x32", "patch_overlap": 0.5, "size_step": "32", "blend": "gaussian"},
            {"decoder": "pillow", "patch": (32, 32), "patch_overlap": 0.5, "size_step": 32, "blend": "gaussian"},
        ),
    ],
)
def test_served_class_maps_equal_the_recipe_pixel_for_pixel(files: list[str], served: dict, local: dict) -> None:
    (line,) = _run(_WORKERS, json.dumps([served, local]), *files)
    answer = json.loads(line)
    assert answer["class"] == "Segmenter"
    assert answer["sizes"] == [list(s) for s in _SIZES]
    assert answer["equal"] == [True] * 3 and answer["equal_rle"] == [True] * 3 and answer["alone"] is True, answer
    assert answer["tensors"] == {
        "classes": ["uint8", [3, 70, 90]],  # the largest image's size; the others padded
        "image_shapes": ["int64", [3, 2]],
        "counts": ["int64", [3, 5]],
        "rle": ["object", [3]],
        "labels": ["object", [3, 5]],
    }
    assert answer["labels"] == ["dark", "bright", "red", "green", "blue"]
    assert all(sum(c) == h * w for c, (h, w) in zip(answer["counts"], _SIZES))
    assert answer["warmed"] == [1, 2]


class TestOptions:
    @pytest.mark.parametrize(
        ("options", "message"),
        [
            ({"patch": "big"}, "recipe_options: option 'patch' got 'big', expected an int N (N x N), 'HxW' "
             "(e.g. '640x480') or [H, W] of positive ints"),
            ({"max_size": [64, 0]}, "recipe_options: option 'max_size' got [64, 0], expected an int N (N x N), "
             "'HxW' (e.g. '640x480') or [H, W] of positive ints"),
            ({"patch_overlap": 1.0}, "recipe_options: option 'patch_overlap' got 1.0, expected a fraction in [0, 1)"),
            ({"size_step": 0}, "recipe_options: option 'size_step' got 0, expected 'auto' or a positive int"),
            ({"blend": "cubic"}, "recipe_options: option 'blend' got 'cubic', expected one of ['linear', "
             "'gaussian', 'mean']"),
            ({"labels": ["a", 2]}, "recipe_options: option 'labels' got ['a', 2], expected a list of class names "
             "(strings)"),
            ({"probabilities": True}, "recipe_options: got option 'probabilities' for recipe 'segment', expected "
             "options among ['batch_size', 'blend', 'decoder', 'labels', 'max_image_pixels', 'max_size', "
             "'patch', 'patch_overlap', 'pipeline_threads', 'size_step', 'stride']"),
        ],
    )  # fmt: skip
    def test_bad_options_are_one_line_option_errors(self, options: dict, message: str) -> None:
        with pytest.raises(OptionError) as info:
            RECIPES["segment"].check_options(options, "recipe_options")
        assert str(info.value) == message

    def test_good_options_are_parsed_for_the_builder(self) -> None:
        got = RECIPES["segment"].check_options(
            {"patch": "64x32", "max_size": 128, "size_step": "auto", "patch_overlap": 0, "labels": ["a"]}, "w"
        )
        assert got == {"patch": (64, 32), "max_size": 128, "size_step": "auto", "patch_overlap": 0.0, "labels": ["a"]}

    def test_load_recipe_workers_refuses_before_the_model_is_read(self, tmp_path: Path) -> None:
        code = """if True:
            import sys
            from amdinfer.serve import load_recipe_workers
            try:
                load_recipe_workers(sys.argv[1], "segment", recipe_options={"patch": "0x32"})
            except Exception as exc:
                print(type(exc).__name__, exc)
        """
        (line,) = _run(code.replace("\n        ", "\n"), str(tmp_path / "never-read.onnx"))
        assert line == (
            "OptionError recipe_options: option 'patch' got '0x32', expected an int N (N x N), 'HxW' "
            "(e.g. '640x480') or [H, W] of positive ints"
        )

    def test_the_command_line_takes_the_flags_and_lists_the_recipe(self) -> None:
        from amdinfer.cli import build_parser
        from amdinfer.serve._cli import _recipe_options

        argv = ["serve", "m.onnx", "--recipe", "segment", "--patch", "64x64", "--patch-overlap", "0.5"]
        argv += ["--size-step", "64", "--max-size", "256", "--decoder", "pillow"]
        given = _recipe_options(build_parser().parse_args(argv))
        assert RECIPES["segment"].check_options(given, "flags") == {
            "patch": (64, 64), "patch_overlap": 0.5, "size_step": 64, "max_size": (256), "decoder": "pillow",
        }  # fmt: skip
        with pytest.raises(OptionError, match=r"^--patch: not an option of --recipe yolo$"):
            _recipe_options(build_parser().parse_args(["serve", "m.onnx", "--recipe", "yolo", "--patch", "64"]))

    def test_a_repository_takes_recipe_segment_with_its_options(self, tmp_path: Path) -> None:
        from amdinfer.serve._model_folder import read_repository
        from amdinfer.testing.models import unet

        (tmp_path / "seg").mkdir()
        onnx.save(unet(), tmp_path / "seg" / "model.onnx")
        (tmp_path / "models.toml").write_text(
            '[models.seg]\nrecipe = "segment"\nrecipe_options = { patch = [32, 32], patch_overlap = 0.5 }\n'
        )
        config = read_repository(tmp_path)["seg"]
        assert not isinstance(config, str), config
        assert config.recipe == "segment" and config.recipe_options == {"patch": (32, 32), "patch_overlap": 0.5}
        (tmp_path / "models.toml").write_text('[models.seg]\nrecipe = "segment"\nrecipe_options = { patch = "x" }\n')
        with pytest.raises(
            OptionError,
            match=r"models.toml: \[models.seg\]: recipe_options: option 'patch' got 'x', expected an int N ",
        ):
            read_repository(tmp_path)


def test_serve_recipe_segment_answers_rest_and_grpc_like_the_local_recipe(tmp_path: Path) -> None:
    """The command line server: both protocols, one request of three images of different sizes; the client cuts
    each map out of the padded tensor and rebuilds it from the RLE JSON, with NumPy alone."""
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    import amdinfer
    from amdinfer.testing.models import unet

    path = tmp_path / "seg.onnx"
    onnx.save(unet(), path)
    local = amdinfer.segment(path, patch=32, decoder="pillow", keep_image=False, providers=["cpu"])
    want = [m.classes for m in local.run_batch(FILES)]
    local.close()
    http, grpc = free_port(), free_port()
    argv = ["-m", "amdinfer", "serve", str(path), "--recipe", "segment", "--patch", "32", "--decoder", "pillow"]
    argv += ["--providers", "cpu", "--http-port", str(http), "--grpc-port", str(grpc), "--max-delay-ms", "20"]
    with running_server(argv, http, grpc, tmp_path / "log.txt") as server:
        meta = httpclient.InferenceServerClient(server.http).get_model_metadata("seg")
        assert meta["inputs"] == [{"name": "images", "datatype": "BYTES", "shape": [-1]}]
        for client, url in ((httpclient, server.http), (grpcclient, server.grpc)):
            result = client.InferenceServerClient(url).infer("seg", [bytes_input(client, FILES)])
            classes, shapes = result.as_numpy("classes"), result.as_numpy("image_shapes")
            assert classes.dtype == np.uint8 and shapes.tolist() == [list(s) for s in _SIZES]
            cut, rebuilt = _client_maps(classes, shapes, result.as_numpy("rle"))
            assert all(np.array_equal(c, w) and np.array_equal(r, w) for c, r, w in zip(cut, rebuilt, want))
            counts = result.as_numpy("counts")
            assert counts.tolist() == [np.bincount(w.ravel(), minlength=5).tolist() for w in want]
            assert [v.decode() for v in result.as_numpy("labels")[0]] == ["dark", "bright", "red", "green", "blue"]
        meta = httpclient.InferenceServerClient(server.http).get_model_metadata("seg")
        outputs = {o["name"]: (o["datatype"], o["shape"]) for o in meta["outputs"]}
        assert outputs["classes"] == ("UINT8", [-1, -1, -1]), outputs  # each request's images set H and W
        assert outputs["image_shapes"] == ("INT64", [-1, 2]) and outputs["rle"] == ("BYTES", [-1]), outputs
        config = httpclient.InferenceServerClient(server.http).get_model_config("seg")
        dims = {o["name"]: (o["data_type"], o["dims"]) for o in config["output"]}
        assert config["max_batch_size"] > 0 and dims["classes"] == ("TYPE_UINT8", [-1, -1]), config  # one row/image
        assert server.stop() == 0
