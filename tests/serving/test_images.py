"""Encoded images (OIP v2 ``BYTES``: JPEG/PNG files) served by fused and stage-by-stage recipes.

The truth is the same recipe run in this process on the image decoded by Pillow (``pipe(array)``); the server
gets the file's bytes from tritonclient over REST (binary tensor extension) and gRPC (``raw_input_contents``
and ``bytes_contents``).
"""

from __future__ import annotations

import base64
import importlib.util
import io
import json
import re
import struct
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest

# KServe is not imported here: its gRPC protos and tritonclient's share protobuf names (see test_serve.py).
if importlib.util.find_spec("kserve") is None:
    pytest.skip("needs the serve extra: run `nox -s serve`", allow_module_level=True)
grpcclient = pytest.importorskip("tritonclient.grpc", reason="needs tritonclient[grpc]: run `nox -s serve`")
httpclient = pytest.importorskip("tritonclient.http", reason="needs tritonclient[http]: run `nox -s serve`")
Image = pytest.importorskip("PIL.Image", reason="needs Pillow to encode the test images")

from tritonclient.utils import InferenceServerException  # noqa: E402

from .conftest import bytes_input, free_port, running_server  # noqa: E402

# Built the same way in the server and here (seeded models, Pillow as the decoder on both sides).
RECIPES = textwrap.dedent(
    """
    import amdinfer
    from amdinfer.testing.models import tiny_cnn, yolov8

    NAMES = ["cat", "dog", "café", "owl"]  # one non-ASCII name: labels travel as UTF-8 BYTES
    CPU = {"providers": ["CPUExecutionProvider"], "decoder": "pillow", "keep_image": False}

    def detector(fuse):
        model = yolov8(seed=3, image_size=64, num_classes=4)
        model.metadata_props.add(key="names", value=repr(dict(enumerate(NAMES))))
        return amdinfer.yolo(model, conf=0.03, imgsz=64, fuse=fuse, **CPU)

    def classifier():
        labels = [f"class {i}" for i in range(10)]
        return amdinfer.classify(tiny_cnn(seed=4), size=32, crop=32, topk=3, labels=labels, fuse=True, **CPU)
    """
)

SERVER = RECIPES + textwrap.dedent(
    """
    import sys
    from amdinfer.serve import PipelineWorker, Server, build_model
    from amdinfer.serve._cli import configure_logging
    from tests.serving.pipelines import classify as raw_pipeline

    configure_logging("info")  # the start line, as `amdinfer serve` logs it

    http, grpc = int(sys.argv[1]), int(sys.argv[2])
    models = [
        build_model("det", PipelineWorker(detector(True)), max_batch_size=8, max_delay_ms=20),
        build_model("det_plain", PipelineWorker(detector(False)), max_batch_size=8, max_delay_ms=20),
        build_model("cls", PipelineWorker(classifier()), max_batch_size=8, max_delay_ms=5),
        build_model("raw", raw_pipeline(), max_batch_size=8, max_delay_ms=5),
    ]
    Server(http_port=http, grpc_port=grpc).start(models)
    """
)


def _recipes() -> dict[str, Any]:
    space: dict[str, Any] = {}
    exec(RECIPES, space)
    return space


@pytest.fixture(scope="module")
def recipes():
    space = _recipes()
    pipes = {"det": space["detector"](True), "det_plain": space["detector"](False), "cls": space["classifier"]()}
    yield pipes
    for p in pipes.values():
        p.close()


@pytest.fixture(scope="module")
def image_server(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("images")
    script = folder / "serve_images.py"
    script.write_text(SERVER)
    http, grpc = free_port(), free_port()
    root = Path(__file__).resolve().parents[2]
    argv = ["-c", f"import sys; sys.path.insert(0, {str(root)!r}); exec(open({str(script)!r}).read())"]
    with running_server([*argv, str(http), str(grpc)], http, grpc, folder / "log.txt") as s:
        yield s
        assert s.stop() == 0


def _picture(seed: int, shape: tuple[int, int]) -> np.ndarray:
    """A smooth picture with a few bright rectangles (scores well apart, unlike noise)."""
    rng = np.random.default_rng(seed)
    h, w = shape
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([x * 255 // w, y * 255 // h, (x + y) * 127 // (h + w)], -1).astype(np.uint8)
    for _ in range(3):
        y0, x0 = int(rng.integers(0, h - 8)), int(rng.integers(0, w - 8))
        img[y0 : y0 + int(rng.integers(6, h // 2)), x0 : x0 + int(rng.integers(6, w // 2))] = rng.integers(0, 255, 3)
    return img


def _encode(img: np.ndarray, fmt: str) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    return buf.getvalue()


def _decode(data: bytes) -> np.ndarray:
    """Pillow, as a peer of the server's LoadImage."""
    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(im.convert("RGB"))


FILES = [
    _encode(_picture(0, (48, 80)), "JPEG"),
    _encode(_picture(1, (70, 50)), "PNG"),
    _encode(_picture(2, (64, 64)), "JPEG"),
]


def _http(items: list[bytes], name: str = "images", column: bool = False):
    return bytes_input(httpclient, items, name, column)


def _grpc(items: list[bytes], name: str = "images", column: bool = False):
    return bytes_input(grpcclient, items, name, column)


def _check_detections(result: Any, pipe: Any, files: list[bytes]) -> None:
    want = [pipe(_decode(f)) for f in files]
    assert sum(len(d) for d in want) > len(files), "the test pictures should give boxes"
    index = result.as_numpy("boxes_batch_index")
    assert index.dtype == np.int64 and index.tolist() == [i for i, d in enumerate(want) for _ in range(len(d))]
    boxes, scores = result.as_numpy("boxes"), result.as_numpy("scores")
    assert boxes.dtype == np.float32 and boxes.shape == (len(index), 4) and scores.dtype == np.float32
    np.testing.assert_allclose(boxes, np.concatenate([d.boxes for d in want]), atol=1e-3)
    np.testing.assert_allclose(scores, np.concatenate([d.scores for d in want]), atol=1e-5)
    classes = result.as_numpy("classes")
    assert classes.dtype == np.int64
    np.testing.assert_array_equal(classes, np.concatenate([d.classes for d in want]))
    # binary outputs: bytes; JSON outputs: strings (what tritonclient gives for each)
    labels = [b.decode("utf-8") if isinstance(b, bytes) else b for b in result.as_numpy("labels").ravel()]
    assert labels == [name for d in want for name in d.labels]
    assert labels == [["cat", "dog", "café", "owl"][c] for c in classes]  # the names, by class, independently


class TestDetections:
    @pytest.mark.parametrize("model", ["det", "det_plain"])
    def test_http_binary_bytes_equal_the_local_recipe(self, image_server, recipes, model):
        result = httpclient.InferenceServerClient(image_server.http).infer(model, [_http(FILES)])
        _check_detections(result, recipes[model], FILES)

    @pytest.mark.parametrize("model", ["det", "det_plain"])
    def test_grpc_raw_contents_n_by_1_equal_the_local_recipe(self, image_server, recipes, model):
        result = grpcclient.InferenceServerClient(image_server.grpc).infer(model, [_grpc(FILES, column=True)])
        _check_detections(result, recipes[model], FILES)

    def test_grpc_bytes_contents_equal_the_local_recipe(self, image_server, recipes):
        inp = grpcclient.InferInput("images", [2], "BYTES")
        inp._input.contents.bytes_contents.extend(FILES[:2])  # one element each, no length prefixes
        result = grpcclient.InferenceServerClient(image_server.grpc).infer("det", [inp])
        _check_detections(result, recipes["det"], FILES[:2])

    def test_http_json_outputs_carry_labels_as_strings(self, image_server, recipes):
        names = ["boxes", "scores", "classes", "labels", "boxes_batch_index"]
        outputs = [httpclient.InferRequestedOutput(n, binary_data=False) for n in names]
        result = httpclient.InferenceServerClient(image_server.http).infer("det", [_http(FILES)], outputs=outputs)
        assert [o["name"] for o in result.get_response()["outputs"]] == names
        assert all("data" in o for o in result.get_response()["outputs"])  # JSON, not binary
        _check_detections(result, recipes["det"], FILES)

    def test_metadata_says_bytes(self, image_server):
        meta = httpclient.InferenceServerClient(image_server.http).get_model_metadata("det")
        assert meta["inputs"] == [{"name": "images", "datatype": "BYTES", "shape": [-1]}]


class TestClassification:
    def test_http_and_grpc_topk_equal_the_local_recipe(self, image_server, recipes):
        want = [recipes["cls"](_decode(f)) for f in FILES]
        for result in (
            httpclient.InferenceServerClient(image_server.http).infer("cls", [_http(FILES)]),
            grpcclient.InferenceServerClient(image_server.grpc).infer("cls", [_grpc(FILES)]),
        ):
            indices, scores = result.as_numpy("indices"), result.as_numpy("scores")
            assert indices.dtype == np.int64 and indices.shape == (3, 3) and scores.dtype == np.float32
            np.testing.assert_array_equal(indices, [w.indices for w in want])
            np.testing.assert_allclose(scores, [w.scores for w in want], rtol=1e-5, atol=1e-6)
            labels = result.as_numpy("labels")
            assert labels.shape == (3, 3)
            assert [[b.decode() for b in row] for row in labels] == [[f"class {i}" for i in row] for row in indices]


def _spy(pipe: Any) -> tuple[list[list[Any]], list[int]]:
    """Record the items each ``run_batch`` gets and the rows of each engine call."""
    items: list[list[Any]] = []
    rows: list[int] = []
    run_batch, run = pipe.run_batch, pipe.engine.run

    def spy_run_batch(images: Any) -> list[Any]:
        items.append(list(images))
        return run_batch(items[-1])

    def spy_run(feeds: dict[str, np.ndarray], *args: Any, **kwargs: Any) -> Any:
        rows.append(int(feeds[pipe.engine.inputs[0].name].shape[0]))
        return run(feeds, *args, **kwargs)

    pipe.run_batch, pipe.engine.run = spy_run_batch, spy_run
    return items, rows


class TestWarmup:
    """``PipelineWorker.warmup``: PNG files through decode, geometry and the engine, at the batcher's sizes."""

    @pytest.mark.parametrize("fuse", [True, False])
    def test_recipe_worker_runs_the_engine_at_1_and_max_rows_on_png_files(self, fuse):
        from amdinfer.serve import PipelineWorker

        pipe = _recipes()["detector"](fuse)
        try:
            items, rows = _spy(pipe)
            assert PipelineWorker(pipe).warmup(8, runs=2) == [1, 8]
            assert rows == [1, 1, 8, 8]  # one engine call per run_batch, of as many rows as items
            assert [len(batch) for batch in items] == rows
            for item in {x for batch in items for x in batch}:  # one file, encoded once
                assert isinstance(item, bytes) and item.startswith(b"\x89PNG")
                assert _decode(item).shape == (64, 64, 3)  # Pillow reads it: the model's input size
        finally:
            pipe.close()

    def test_batch_buckets_are_the_sizes_warmed(self):
        import amdinfer
        from amdinfer.serve import PipelineWorker
        from amdinfer.testing.models import tiny_cnn

        pipe = amdinfer.classify(tiny_cnn(seed=4), size=32, crop=32, fuse=True, batch_buckets=[2, 4, 16],
                                 providers=["CPUExecutionProvider"], decoder="pillow")  # fmt: skip
        try:
            _, rows = _spy(pipe)
            # batches of 1..8 rows are padded to 2, 4 or 16: those, and not 1 or 8, are what the engine sees
            assert PipelineWorker(pipe).warmup(8, runs=1) == [2, 4, 16]
            assert rows == [2, 4, 16]
        finally:
            pipe.close()

    def test_pipeline_without_load_image_is_not_warmed_up(self):
        from amdinfer.serve import PipelineWorker

        from .pipelines import classify as raw_pipeline

        pipe = raw_pipeline()
        try:
            _, rows = _spy(pipe)
            assert PipelineWorker(pipe).warmup(8) == [] and rows == []
        finally:
            pipe.close()

    def test_start_line_lists_the_warmed_sizes(self, image_server):
        (line,) = [ln for ln in image_server.log.read_text().splitlines() if "serving pipeline" in ln]
        described = dict(re.findall(r"pipeline '(\w+)' on [^;]*; batches of up to 8 rows within \d+ ms([^;]*)", line))
        # the LoadImage-first recipes are warmed up at 1 and max_batch_size; the raw pipeline takes no images
        assert described == {"det": ", warmed up at [1, 8]", "det_plain": ", warmed up at [1, 8]",
                             "cls": ", warmed up at [1, 8]", "raw": ""}, line  # fmt: skip


def _http_error(server: Any, model: str, inputs: list[Any]) -> str:
    with pytest.raises(InferenceServerException) as info:
        httpclient.InferenceServerClient(server.http).infer(model, inputs)
    assert info.value.status() == "400", info.value.message()
    return str(info.value.message())


def _grpc_error(server: Any, model: str, inputs: list[Any]) -> str:
    with pytest.raises(InferenceServerException) as info:
        grpcclient.InferenceServerClient(server.grpc).infer(model, inputs)
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT", info.value.message()
    return str(info.value.message())


BAD = {
    "not an image": (b"GIF? no, plain text", r"input 'images': item 1: .*not a decodable image"),
    "truncated JPEG": (FILES[0][: len(FILES[0]) // 2], r"input 'images': item 1: .*not a decodable image"),
    "truncated PNG": (FILES[1][:200], r"input 'images': item 1: .*not a decodable image"),
    "empty": (b"", r"input 'images': item 1 is empty, expected an encoded image"),
}


class TestBadImages:
    @pytest.mark.parametrize("what", sorted(BAD))
    @pytest.mark.parametrize("model", ["det", "det_plain"])
    def test_http_400_names_tensor_and_item(self, image_server, what, model):
        bad, pattern = BAD[what]
        assert re.search(pattern, _http_error(image_server, model, [_http([FILES[0], bad, FILES[2]])]))

    @pytest.mark.parametrize("what", sorted(BAD))
    def test_grpc_invalid_argument_names_tensor_and_item(self, image_server, what):
        bad, pattern = BAD[what]
        assert re.search(pattern, _grpc_error(image_server, "det", [_grpc([FILES[0], bad, FILES[2]], column=True)]))

    def test_bytes_to_a_pipeline_without_load_image(self, image_server):
        message = _http_error(image_server, "raw", [_http(FILES[:1], name="input")])
        assert "input 'input': got dtype object" in message and "does not start with LoadImage" in message

    def test_numbers_that_are_not_an_image(self, image_server):
        x = np.zeros((1, 8, 8, 3), np.float32)
        inp = grpcclient.InferInput("images", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        assert "uint8" in _grpc_error(image_server, "det", [inp])

    def test_wrong_shape(self, image_server):
        message = _http_error(image_server, "det", [_shaped([2, 2])])
        assert "input 'images': got BYTES of shape [2, 2], expected [N] or [N, 1]" in message

    def test_json_strings_are_text_not_images(self, image_server):
        body = {"inputs": [{"name": "images", "shape": [1], "datatype": "BYTES", "data": ["not a picture"]}]}
        status, answer = _post(image_server.http, "det", json.dumps(body).encode())
        assert status == 400 and "input 'images': item 0" in answer["error"], answer

    @pytest.mark.parametrize("how", ["json", "binary"])
    def test_base64_text_is_named_with_the_way_to_send_bytes(self, image_server, how):
        text = base64.b64encode(FILES[0]).decode()
        if how == "json":
            body = {"inputs": [{"name": "images", "shape": [1], "datatype": "BYTES", "data": [text]}]}
            status, answer = _post(image_server.http, "det", json.dumps(body).encode())
            assert status == 400, answer
            message = answer["error"]
        else:
            message = _http_error(image_server, "det", [_http([FILES[0], text.encode()])])
        item = 0 if how == "json" else 1
        assert f"input 'images': item {item}: got base64 text of a JPEG file ({len(text)} characters)" in message
        assert "expected the image file's own bytes" in message  # what was expected
        assert "binary_data=True" in message and "--data-binary" in message  # the way forward: tritonclient, curl

    def test_json_text_is_named(self, image_server):
        message = _http_error(image_server, "det", [_http([FILES[0], b'{"image": "..."}'])])
        assert "input 'images': item 1: got JSON text (16 characters)" in message and "binary_data=True" in message

    @pytest.mark.parametrize(
        "raw, message",
        [
            (struct.pack("<I", 1000) + b"abc", "input 'images': item 0 declares 1000 bytes, but only 3 follow"),
            (struct.pack("<I", 3) + b"abc" + b"xy", "input 'images': item 1: got 2 bytes where a 4-byte length"),
            (struct.pack("<I", 3) + b"abc", "input 'images': got 1 BYTES elements, expected 2"),
        ],
    )
    def test_length_prefixes_that_do_not_add_up(self, image_server, raw, message):
        head = json.dumps(
            {
                "inputs": [
                    {"name": "images", "shape": [2], "datatype": "BYTES", "parameters": {"binary_data_size": len(raw)}}
                ]
            }
        ).encode()
        status, answer = _post(
            image_server.http, "det", head + raw, {"Inference-Header-Content-Length": str(len(head))}
        )
        assert status == 400 and message in answer["error"], answer

    def test_one_bad_image_fails_only_its_request(self, image_server, recipes):
        """Requests batched together (20 ms window, sent at once): the bad one gets 400, the others answers."""
        client = httpclient.InferenceServerClient(image_server.http, concurrency=8)
        bad = [FILES[0], FILES[1][:100]]
        handles = [client.async_infer("det", [_http(bad if i == 3 else FILES)]) for i in range(8)]
        for i, handle in enumerate(handles):
            if i == 3:
                with pytest.raises(InferenceServerException) as info:
                    handle.get_result()
                assert info.value.status() == "400" and "input 'images': item 1" in info.value.message()
            else:
                _check_detections(handle.get_result(), recipes["det"], FILES)
        client.close()


# ---------------------------------------------------------------------------------------------- the pixel limit
def _png_bomb(size: int = 20000) -> bytes:
    """A real PNG: grey 8-bit, ``size x size`` zeros, deflated (about 400 kB for 20000)."""
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    packer, row = zlib.compressobj(9), b"\x00" * (size + 1)
    idat = b"".join([packer.compress(row * 100) for _ in range(size // 100)] + [packer.flush()])
    ihdr = struct.pack(">IIBBBBB", size, size, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def _jpeg_bomb(size: int = 30000) -> bytes:
    """A real 16 x 16 JPEG (Pillow's) whose SOF0 is rewritten to declare ``size x size``."""
    raw = bytearray(_encode(np.full((16, 16, 3), 128, np.uint8), "JPEG"))
    at = raw.index(b"\xff\xc0")
    raw[at + 5 : at + 9] = size.to_bytes(2, "big") * 2  # height, width
    return bytes(raw)


def _peak_mib(server: Any) -> int:
    """The server process's peak resident memory (``VmHWM``), MiB."""
    status = Path(f"/proc/{server.process.pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) >> 10


def _refusal(n: int, fmt: str, limit: str = "89,478,485") -> str:
    return (
        rf"input 'images': item {{}}: refused as a decompression bomb: its {fmt} header declares {n} x {n} \(width x "
        rf"height\) = {n * n:,} pixels, above the limit of {limit} pixels"
    )


LARGER = _encode(_picture(3, (80, 100)), "JPEG")  # 100 x 80 = 8000 pixels


@pytest.fixture(scope="module")
def bombs() -> dict[str, bytes]:
    return {"png": _png_bomb(), "jpeg": _jpeg_bomb()}


class TestPixelLimit:
    """Issue 35: a PNG of 20000 x 20000 and a JPEG whose SOF0 says 30000 x 30000 were decoded (+2.3 / +2.9 GB)."""

    def test_png_bomb_over_rest_to_the_classifier_is_400_naming_the_item(self, image_server, bombs):
        before = _peak_mib(image_server)
        message = _http_error(image_server, "cls", [_http([FILES[1], bombs["png"], FILES[0]])])
        assert re.search(_refusal(20000, "PNG").format(1), message), message
        assert _peak_mib(image_server) - before < 100  # a decode would have taken 400 MB at least

    def test_jpeg_sof0_bomb_over_grpc_to_the_detector_is_invalid_argument(self, image_server, bombs):
        before = _peak_mib(image_server)
        message = _grpc_error(image_server, "det", [_grpc([FILES[0], FILES[2], bombs["jpeg"]])])
        assert re.search(_refusal(30000, "JPEG").format(2), message), message
        message = _grpc_error(image_server, "det_plain", [_grpc([bombs["jpeg"]], column=True)])
        assert re.search(_refusal(30000, "JPEG").format(0), message), message
        assert _peak_mib(image_server) - before < 100

    def test_a_lower_limit_refuses_what_the_default_answers(self, tmp_path, detector_path, bombs):
        # at least the model's 64 x 64: the warm-up decodes a picture of the engine's input size
        http, grpc = free_port(), free_port()
        argv = ["-m", "amdinfer", "serve", str(detector_path), "--recipe", "yolo", "--imgsz", "64", "--providers",
                "cpu", "--http-port", str(http), "--grpc-port", str(grpc), "--max-image-pixels", "5000"]  # fmt: skip
        with running_server(argv, http, grpc, tmp_path / "log.txt") as server:
            client = httpclient.InferenceServerClient(server.http)
            assert client.infer("det", [_http(FILES[:1])]).as_numpy("boxes").shape[1] == 4  # 80 x 48 = 3840 pixels
            message = _http_error(server, "det", [_http([FILES[0], LARGER])])
            assert re.search(
                r"input 'images': item 1: refused as a decompression bomb: its JPEG header declares 100 x 80 "
                r"\(width x height\) = 8,000 pixels, above the limit of 5,000 pixels", message
            ), message  # fmt: skip
            message = _grpc_error(server, "det", [_grpc([bombs["png"]])])  # the default decoder here: OpenCV
            assert re.search(_refusal(20000, "PNG", "5,000").format(0), message), message
            assert server.stop() == 0

    def test_default_answers_the_image_a_lower_limit_refuses(self, image_server, recipes):
        result = httpclient.InferenceServerClient(image_server.http).infer("det", [_http([LARGER])])
        _check_detections(result, recipes["det"], [LARGER])

    @pytest.mark.parametrize("bad", ["0", "-5", "1.5", "1e6", "many", str(2**30 + 1)])
    def test_bad_values_are_usage_errors(self, bad):
        from amdinfer.cli import build_parser
        from amdinfer.cli._main import _UsageError

        expected = r"argument --max-image-pixels: got '.*', expected an int in 1\.\.1073741824 \(pixels per image\)"
        with pytest.raises(_UsageError, match=expected):
            build_parser().parse_args(["serve", "m.onnx", "--recipe", "yolo", "--max-image-pixels", bad])
        assert build_parser().parse_args(["serve", "m.onnx", "--max-image-pixels", "1073741824"]).max_image_pixels

    def test_recipe_option_checks_and_sets_the_limit(self):
        # in a fresh process: KServe's protos cannot load beside tritonclient's (this module's clients)
        code = """if True:
            from amdinfer.errors import OptionError
            from amdinfer.serve import load_recipe_workers
            from amdinfer.testing.models import yolov8
            model = yolov8(image_size=64)
            options = {"imgsz": 64, "max_image_pixels": 1234}
            (w,) = load_recipe_workers(model, "yolo", recipe_options=options, providers=["CPUExecutionProvider"])
            print("set", w._load_image.max_pixels, w.pipeline.preprocess[0].max_pixels)
            w.pipeline.close()
            for bad in (0, True, 1.5, 2**30 + 1):
                try:
                    load_recipe_workers(model, "yolo", recipe_options={"max_image_pixels": bad})
                except OptionError as exc:
                    print("refused", exc)
        """
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
        assert proc.returncode == 0, proc.stderr[-2000:]
        lines = proc.stdout.strip().splitlines()
        assert lines[0] == "set 1234 1234"
        assert [line.partition(" got ")[2] for line in lines[1:]] == [
            f"{bad}, expected an int in 1..1073741824 (pixels per image)" for bad in (0, True, 1.5, 2**30 + 1)
        ]
        assert all(line.startswith("refused recipe_options: option 'max_image_pixels' got") for line in lines[1:])


def _shaped(shape: list[int]) -> Any:
    items = [FILES[0]] * int(np.prod(shape))
    arr = np.empty(len(items), dtype=object)
    arr[:] = items
    arr = arr.reshape(shape)
    inp = httpclient.InferInput("images", shape, "BYTES")
    inp.set_data_from_numpy(arr, binary_data=True)
    return inp


def _post(address: str, model: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"http://{address}/v2/models/{model}/infer", data=body, headers=headers or {}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


# `amdinfer serve MODEL --recipe ...`: the command line, as a user runs it.
CLI_DETECTOR = ["--recipe", "yolo", "--conf", "0.03", "--imgsz", "64", "--decoder", "pillow", "--providers", "cpu"]


@pytest.fixture(scope="module")
def detector_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import onnx

    from amdinfer.testing.models import yolov8

    model = yolov8(seed=3, image_size=64, num_classes=4)
    model.metadata_props.add(key="names", value=repr(dict(enumerate(["cat", "dog", "café", "owl"]))))
    path = tmp_path_factory.mktemp("cli") / "det.onnx"
    onnx.save(model, path)
    return path


class TestCommandLine:
    def test_serve_recipe_yolo_answers_jpeg_like_the_local_recipe(self, tmp_path, detector_path):
        import amdinfer

        http, grpc = free_port(), free_port()
        argv = ["-m", "amdinfer", "serve", str(detector_path), *CLI_DETECTOR]
        argv += ["--http-port", str(http), "--grpc-port", str(grpc), "--max-delay-ms", "20", "--max-batch-size", "4"]
        local = amdinfer.yolo(detector_path, conf=0.03, imgsz=64, decoder="pillow", keep_image=False,
                              providers=["CPUExecutionProvider"])  # fmt: skip
        jpegs = [FILES[0], FILES[2]]
        try:
            with running_server(argv, http, grpc, tmp_path / "log.txt") as server:
                meta = httpclient.InferenceServerClient(server.http).get_model_metadata("det")
                assert meta["inputs"] == [{"name": "images", "datatype": "BYTES", "shape": [-1]}]
                by_rest = httpclient.InferenceServerClient(server.http).infer("det", [_http(jpegs)])
                _check_detections(by_rest, local, jpegs)
                by_grpc = grpcclient.InferenceServerClient(server.grpc).infer("det", [_grpc(jpegs)])
                _check_detections(by_grpc, local, jpegs)
                assert server.stop() == 0
        finally:
            local.close()
        log = (tmp_path / "log.txt").read_text()
        # warmed up before it reported ready, at the sizes the batcher forms (1 and --max-batch-size)
        assert re.search(r"pipeline 'det' on .*; batches of up to 4 rows .*, warmed up at \[1, 4\]", log), log

    def test_bombs_to_a_two_process_server_fail_alone(self, tmp_path, detector_path, bombs):
        """``--workers-per-device 2`` under a stream of bombs beside good images from four clients: every bomb is a
        400 / INVALID_ARGUMENT naming its item, every good answer equals the local recipe's, and both server processes
        live to the end with their memory bounded."""
        import threading

        import psutil

        import amdinfer

        http, grpc = free_port(), free_port()
        argv = ["-m", "amdinfer", "serve", str(detector_path), *CLI_DETECTOR, "--workers-per-device", "2"]
        argv += ["--http-port", str(http), "--grpc-port", str(grpc), "--max-delay-ms", "5", "--max-batch-size", "4"]
        local = amdinfer.yolo(detector_path, conf=0.03, imgsz=64, decoder="pillow", keep_image=False,
                              providers=["CPUExecutionProvider"])  # fmt: skip
        failures: list[str] = []

        def client(k: int, server: Any) -> None:
            try:
                for i in range(6):  # bounded: 24 bombs and 24 good requests in all
                    bomb, fmt, n = (bombs["png"], "PNG", 20000) if (i + k) % 2 else (bombs["jpeg"], "JPEG", 30000)
                    if k % 2:
                        message = _http_error(server, "det", [_http([FILES[0], bomb])])
                        good = httpclient.InferenceServerClient(server.http).infer("det", [_http(FILES[1:])])
                    else:
                        message = _grpc_error(server, "det", [_grpc([FILES[2], FILES[0], bomb])])
                        good = grpcclient.InferenceServerClient(server.grpc).infer("det", [_grpc(FILES[1:])])
                    index = 1 if k % 2 else 2
                    assert re.search(_refusal(n, fmt).format(index), message), message
                    _check_detections(good, local, FILES[1:])
            except BaseException as exc:  # collected: an assertion in a thread would be lost
                failures.append(f"client {k}: {type(exc).__name__}: {exc}")

        try:
            with running_server(argv, http, grpc, tmp_path / "log.txt") as server:
                supervisor = psutil.Process(server.process.pid)
                pids = sorted(c.pid for c in supervisor.children())
                assert len(pids) == 2, pids
                threads = [threading.Thread(target=client, args=(k, server)) for k in range(4)]
                [t.start() for t in threads]
                [t.join(timeout=240) for t in threads]
                assert not any(t.is_alive() for t in threads), "a client did not finish in 240 s"
                assert not failures, failures
                children = supervisor.children()
                assert sorted(c.pid for c in children) == pids  # neither server process died
                assert max(c.memory_info().rss for c in children) < 2 << 30  # no bomb was decoded
                assert server.stop() == 0
        finally:
            local.close()

    def test_serve_recipe_no_warmup_skips_it(self, tmp_path, detector_path):
        http, grpc = free_port(), free_port()
        argv = ["-m", "amdinfer", "serve", str(detector_path), *CLI_DETECTOR, "--no-warmup"]
        argv += ["--http-port", str(http), "--grpc-port", str(grpc), "--max-batch-size", "4"]
        with running_server(argv, http, grpc, tmp_path / "log.txt") as server:
            assert server.stop() == 0
        log = (tmp_path / "log.txt").read_text()
        assert re.search(r"pipeline 'det' on .*; batches of up to 4 rows", log), log
        assert "warmed up" not in log

    @pytest.mark.parametrize(
        ("flags", "message"),
        [
            (["--conf", "0.5"], r"--conf: not an option of a bare model \(no --recipe\); add --recipe yolo"),
            (["--topk", "3", "--imgsz", "64"], r"--imgsz, --topk: not an option of a bare model \(no --recipe\)"),
            (["--recipe", "classify", "--iou", "0.5"], r"--iou: not an option of --recipe classify"),
            (
                ["--max-image-pixels", "1000"],
                r"--max-image-pixels: not an option of a bare model \(no --recipe\); add --recipe classify or "
                r"--recipe ocr or --recipe segment or --recipe yolo",
            ),
        ],
    )
    def test_a_recipe_flag_out_of_place_is_a_one_line_error(self, detector_path, flags, message):
        import subprocess
        import sys

        proc = subprocess.run(
            [sys.executable, "-m", "amdinfer", "serve", str(detector_path), "--http-port", "0", *flags],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode != 0
        assert "Traceback" not in proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1, proc.stderr
        assert re.fullmatch(r"amdinfer serve: OptionError: " + message, lines[0]), lines[0]

    def test_pipeline_threads_set_the_decode_pool_and_bad_ones_are_refused(self):
        # in a fresh process: KServe's protos cannot load beside tritonclient's (this module's clients)
        code = """if True:
            from amdinfer.errors import OptionError
            from amdinfer.serve import load_recipe_workers
            from amdinfer.testing.models import yolov8
            model = yolov8(image_size=64)
            options = {"imgsz": 64, "pipeline_threads": 3, "fuse": True}  # a fused pipeline has the pool
            (w,) = load_recipe_workers(model, "yolo", recipe_options=options, providers=["CPUExecutionProvider"])
            print("threads", w.pipeline.threads)
            w.pipeline.close()
            for bad in (0, 2.5, True):
                try:
                    load_recipe_workers(model, "yolo", recipe_options={"pipeline_threads": bad})
                except OptionError as exc:
                    print("refused", exc)
            from amdinfer.serve._serve_api import _target
            try:
                import cv2
                cv2.setNumThreads(2)
            except ImportError:
                cv2 = None
            workers, _ = _target(model, "yolo", {"imgsz": 64}, 0.0, None, providers=["CPUExecutionProvider"])
            print("opencv threads", cv2.getNumThreads() if cv2 else "(no OpenCV)")
            for w in workers:
                w.pipeline.close()
        """
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
        assert proc.returncode == 0, proc.stderr[-2000:]
        lines = proc.stdout.strip().splitlines()
        assert lines[0] == "threads 3"
        assert len(lines) == 5 and all(
            re.fullmatch(
                r"refused recipe_options: option 'pipeline_threads' got .*, expected an int in 1\.\.256 \(threads per "
                r"server process\)",
                line,
            )
            for line in lines[1:4]
        ), lines
        # a server process serving a recipe turns OpenCV's own pool off (checked where OpenCV is installed)
        has_cv2 = importlib.util.find_spec("cv2") is not None
        assert lines[4] == ("opencv threads 1" if has_cv2 else "opencv threads (no OpenCV)")

    def test_per_gpu_processes_get_the_recipe_and_its_options(self):
        from amdinfer.cli import build_parser
        from amdinfer.pipeline._executor import default_threads
        from amdinfer.serve._cli import _child_argv, _recipe_options

        parser = build_parser()
        args_list = ["serve", "m.onnx", "--devices", "0,1", *CLI_DETECTOR, "--max-det", "7"]
        args = parser.parse_args(args_list)
        child = parser.parse_args(_child_argv(args, 1, 4))
        assert child.devices == [1] and child.recipe == "yolo"
        threads = max(2, default_threads() // 4)  # the cores shared out over the host's 4 server processes
        assert _recipe_options(child) == {
            "conf": 0.03, "imgsz": 64, "max_det": 7, "decoder": "pillow", "pipeline_threads": threads
        }  # fmt: skip
        given = parser.parse_args([*args_list, "--pipeline-threads", "3"])
        assert _recipe_options(parser.parse_args(_child_argv(given, 0, 4)))["pipeline_threads"] == 3
        bare = parser.parse_args(_child_argv(parser.parse_args(["serve", "m.onnx", "--devices", "0,1"]), 0))
        assert bare.recipe is None and _recipe_options(bare) == {} and bare.max_image_pixels is None
        limited = parser.parse_args([*args_list, "--max-image-pixels", "5000"])
        assert parser.parse_args(_child_argv(limited, 1, 4)).max_image_pixels == 5000
