"""Triton's model configuration (REST ``/config``, gRPC ``ModelConfig``), its versioned repository layout with
``config.pbtxt``, a recipe's outputs in its metadata and one label vocabulary for the metrics.

The peers are the truth: tritonclient's ``get_model_config`` (its own ``model_config_pb2`` decodes the gRPC
answer), tritonclient's ``infer`` (what a recipe answers is what its metadata must list), ``engine.run`` on the
version folder's weights, and prometheus_client's text parser for ``/metrics``. Servers run in subprocesses on
loopback.
"""

from __future__ import annotations

import importlib.util
import io
import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest

if importlib.util.find_spec("kserve") is None:
    pytest.skip("needs the serve extra: run `nox -s serve`", allow_module_level=True)
grpcclient = pytest.importorskip("tritonclient.grpc", reason="needs tritonclient[grpc]: run `nox -s serve`")
httpclient = pytest.importorskip("tritonclient.http", reason="needs tritonclient[http]: run `nox -s serve`")

from google.protobuf import json_format  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

import amdinfer  # noqa: E402
from amdinfer.errors import OptionError  # noqa: E402
from amdinfer.serve._model_folder import read_repository  # noqa: E402
from amdinfer.testing.models import tiny_cnn, yolov8  # noqa: E402

from .conftest import RunningServer, bytes_input, free_port, running_server  # noqa: E402

CLIENTS = {"http": httpclient, "grpc": grpcclient}
PBTXT = """
name: "tiny"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "input" data_type: TYPE_FP32 dims: [ 3, 32, 32 ] } ]
output [ { name: "logits" data_type: TYPE_FP32 dims: [ 10 ] } ]
dynamic_batching { preferred_batch_size: [ 4, 8 ] max_queue_delay_microseconds: 3000 }
instance_group [ { count: 1 kind: KIND_CPU } ]
"""
# what Triton's configuration of `tiny` must say, by hand from PBTXT and the served version folder
TINY_CONFIG = {
    "name": "tiny",
    "platform": "onnxruntime_onnx",
    "backend": "onnxruntime",
    "version_policy": {"specific": {"versions": [3]}},
    "max_batch_size": 8,
    "input": [{"name": "input", "data_type": "TYPE_FP32", "dims": [3, 32, 32]}],
    "output": [{"name": "logits", "data_type": "TYPE_FP32", "dims": [10]}],
    "dynamic_batching": {"preferred_batch_size": [4, 8], "max_queue_delay_microseconds": 3000},
    "instance_group": [{"name": "tiny", "count": 1, "kind": "KIND_CPU"}],
    "default_model_filename": "model.onnx",
}


def _triton_folder(root: Path) -> Path:
    """tiny/{1,3}/model.onnx (other weights) + config.pbtxt; det/1/model.onnx (a yolo recipe by models.toml);
    flat.onnx in amdinfer's layout."""
    for version, seed in (("1", 1), ("3", 3)):
        (root / "tiny" / version).mkdir(parents=True)
        onnx.save(tiny_cnn(seed=seed), root / "tiny" / version / "model.onnx")
    (root / "tiny" / "config.pbtxt").write_text(PBTXT)
    (root / "det" / "1").mkdir(parents=True)
    onnx.save(yolov8(image_size=64), root / "det" / "1" / "model.onnx")
    onnx.save(tiny_cnn(seed=5), root / "flat.onnx")
    (root / "models.json").write_text(
        json.dumps({"models": {"det": {"recipe": "yolo", "recipe_options": {"imgsz": 64}}}})
    )
    return root


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _triton_folder(tmp_path_factory.mktemp("triton_repo"))


@pytest.fixture(scope="module")
def server(folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    http, grpc = free_port(), free_port()
    code = (
        "import sys; from amdinfer.serve import serve_repository; "
        f"serve_repository(sys.argv[1], http_port={http}, grpc_port={grpc}, warmup=False, providers=['cpu'])"
    )
    log = tmp_path_factory.mktemp("triton_log") / "log.txt"
    with running_server(["-c", code, str(folder)], http, grpc, log) as s:
        yield s
        assert s.stop() == 0, log.read_text()


def _grpc_config(server: RunningServer, name: str, version: str = "") -> dict:
    """tritonclient's gRPC answer (its own model_config_pb2) as JSON with int64 numbers as numbers."""
    response = grpcclient.InferenceServerClient(server.grpc).get_model_config(name, model_version=version)
    as_dict = json_format.MessageToDict(response.config, preserving_proto_field_name=True)

    def numbers(v):
        if isinstance(v, dict):
            return {k: numbers(x) for k, x in v.items()}
        if isinstance(v, list):
            return [numbers(x) for x in v]
        return int(v) if isinstance(v, str) and v.lstrip("-").isdigit() else v

    return numbers(as_dict)


class TestConfigRoute:
    def test_rest_and_grpc_answer_the_config_the_server_runs(self, server: RunningServer) -> None:
        rest = httpclient.InferenceServerClient(server.http).get_model_config("tiny")
        assert rest == TINY_CONFIG
        assert _grpc_config(server, "tiny") == TINY_CONFIG
        assert httpclient.InferenceServerClient(server.http).get_model_config("tiny", model_version="3") == rest

    def test_another_version_and_an_unknown_model_are_refused(self, server: RunningServer) -> None:
        for protocol in ("http", "grpc"):
            c = CLIENTS[protocol].InferenceServerClient(server.http if protocol == "http" else server.grpc)
            with pytest.raises(InferenceServerException, match="serves version 3 only"):
                c.get_model_config("tiny", model_version="1")
            with pytest.raises(InferenceServerException, match="ghost"):
                c.get_model_config("ghost")

    def test_an_unversioned_model_has_the_served_defaults(self, server: RunningServer) -> None:
        config = httpclient.InferenceServerClient(server.http).get_model_config("flat")
        assert "version_policy" not in config
        # the server's CPU defaults (serve/_defaults.py): 32 rows within 2 ms, no buckets
        assert (config["max_batch_size"], config["dynamic_batching"]) == (
            32, {"preferred_batch_size": [], "max_queue_delay_microseconds": 2000},
        )  # fmt: skip
        without_empty = {**config, "dynamic_batching": {"max_queue_delay_microseconds": 2000}}
        assert without_empty == _grpc_config(server, "flat")  # protobuf leaves an empty repeated field out

    @pytest.mark.parametrize("protocol", ["http", "grpc"])
    def test_infer_answers_the_served_version(self, server: RunningServer, protocol: str) -> None:
        x = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)
        with amdinfer.load(tiny_cnn(seed=3), providers=["cpu"]) as engine:
            want = engine.run({"input": x})["logits"]
        mod = CLIENTS[protocol]
        c = mod.InferenceServerClient(server.http if protocol == "http" else server.grpc)
        inp = mod.InferInput("input", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        for version in ("", "3"):
            np.testing.assert_allclose(c.infer("tiny", [inp], model_version=version).as_numpy("logits"), want,
                                       rtol=1e-5, atol=1e-6)  # fmt: skip
        with pytest.raises(InferenceServerException, match="serves version 3 only"):
            c.infer("tiny", [inp], model_version="1")
        as_json = {"as_json": True} if protocol == "grpc" else {}
        assert c.get_model_metadata("tiny", model_version="3", **as_json)["name"] == "tiny"
        assert c.is_model_ready("tiny", model_version="3")
        with pytest.raises(InferenceServerException, match="serves version 3 only"):
            c.get_model_metadata("tiny", model_version="1")


def _png() -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(1).integers(0, 255, (48, 80, 3), dtype=np.uint8)).save(buf, "PNG")
    return buf.getvalue()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_recipe_metadata_lists_the_outputs_it_answers_with(server: RunningServer, protocol: str) -> None:
    mod = CLIENTS[protocol]
    c = mod.InferenceServerClient(server.http if protocol == "http" else server.grpc)
    meta = c.get_model_metadata("det", **({"as_json": True} if protocol == "grpc" else {}))
    listed = {o["name"]: (o["datatype"], [int(d) for d in o["shape"]]) for o in meta["outputs"]}
    answer = c.infer("det", [bytes_input(mod, [_png(), _png()])]).get_response(
        **({"as_json": True} if protocol == "grpc" else {})
    )
    got = {o["name"]: (o["datatype"], [int(d) for d in o["shape"]]) for o in answer["outputs"]}
    assert sorted(listed) == sorted(got) and {"boxes", "scores", "classes", "boxes_batch_index"} <= set(got)
    for name, (datatype, shape) in got.items():
        assert listed[name][0] == datatype, name
        assert len(listed[name][1]) == len(shape) and all(a in (-1, b) for a, b in zip(listed[name][1], shape)), name
    config = httpclient.InferenceServerClient(server.http).get_model_config("det")
    # one row per box, not per image: no batch axis shared with the request (Triton's max_batch_size 0, full dims)
    assert config["max_batch_size"] == 0
    assert config["input"] == [{"name": "images", "data_type": "TYPE_STRING", "dims": [-1]}]
    assert {o["name"]: o["dims"] for o in config["output"]}["boxes"] == [-1, 4]


def test_metrics_use_triton_labels_model_and_version(server: RunningServer) -> None:
    x = np.zeros((1, 3, 32, 32), np.float32)
    c = httpclient.InferenceServerClient(server.http)
    inp = httpclient.InferInput("input", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    c.infer("tiny", [inp])
    c.infer("flat", [inp])
    with urllib.request.urlopen(f"http://{server.http}/metrics", timeout=10) as r:
        families = list(text_string_to_metric_families(r.read().decode()))
    samples = [s for f in families for s in f.samples if s.name.startswith(("amdinfer_", "request_"))]
    assert samples
    assert not [s for s in samples if "model_name" in s.labels]
    assert not [s for s in samples if not {"model", "version"} <= set(s.labels)]
    versions = {(s.labels["model"], s.labels["version"]) for s in samples}
    assert {("tiny", "3"), ("flat", "")} <= versions
    kserve = {s.labels["model"] for s in samples if s.name == "request_predict_seconds_count"}
    assert {"tiny", "flat"} <= kserve


class TestTritonLayout:
    def test_the_highest_version_and_the_config_options(self, tmp_path: Path) -> None:
        models = read_repository(_triton_folder(tmp_path))
        tiny = models["tiny"]
        assert tiny.path == (tmp_path / "tiny" / "3" / "model.onnx").resolve() and tiny.version == "3"
        got = (tiny.max_batch_size, tiny.batch_buckets, tiny.max_delay_ms, tiny.providers)
        assert got == (8, (4, 8), 3.0, ("cpu",))
        assert models["det"].recipe == "yolo" and models["flat"].version == ""

    def test_a_specific_version_policy(self, tmp_path: Path) -> None:
        _triton_folder(tmp_path)
        with open(tmp_path / "tiny" / "config.pbtxt", "a") as f:
            f.write("version_policy: { specific: { versions: [ 1 ] } }\n")
        assert read_repository(tmp_path)["tiny"].path.parent.name == "1"

    @pytest.mark.parametrize(
        ("extra", "match"),
        [
            ("sequence_batching { }", r"field 'sequence_batching' is not supported by amdinfer"),
            ("model_warmup [ { name: \"w\" } ]", r"field 'model_warmup' is not supported"),
            ("dynamic_batching { preserve_ordering: true }", r"field 'preserve_ordering' in ModelDynamicBatching"),
            ("instance_group [ { count: 2 kind: KIND_CPU } ]", r"instance_group count 2.*--workers-per-device 2"),
            ("version_policy: { all: { } }", r"versions \[1, 3\]; this server serves one version per name"),
            ("optimization { execution_accelerators { gpu_execution_accelerator [ { name: \"openvino\" } ] } }",
             r"gpu_execution_accelerator \['openvino'\]"),
        ],
    )  # fmt: skip
    def test_an_unsupported_field_is_refused_by_name(self, tmp_path: Path, extra: str, match: str) -> None:
        _triton_folder(tmp_path)
        pbtxt = tmp_path / "tiny" / "config.pbtxt"
        text = pbtxt.read_text().replace("dynamic_batching {", "dynamic_batching { ") if "dynamic" in extra else None
        if text is not None:  # replace the file's dynamic_batching with this one
            text = "\n".join(line for line in pbtxt.read_text().splitlines() if "dynamic_batching" not in line)
            pbtxt.write_text(text + "\n" + extra + "\n")
        elif "instance_group" in extra:
            pbtxt.write_text(pbtxt.read_text().replace("instance_group [ { count: 1 kind: KIND_CPU } ]", extra))
        else:
            pbtxt.write_text(pbtxt.read_text() + extra + "\n")
        with pytest.raises(OptionError, match=match):
            read_repository(tmp_path)

    @pytest.mark.parametrize("layout", ["no_version", "stray_onnx", "both"])
    def test_a_folder_in_neither_layout_names_both(self, tmp_path: Path, layout: str) -> None:
        onnx.save(tiny_cnn(), tmp_path / "ok.onnx")
        sub = tmp_path / "bad"
        sub.mkdir()
        if layout == "no_version":
            (sub / "config.pbtxt").write_text("max_batch_size: 4\n")
        elif layout == "stray_onnx":
            onnx.save(tiny_cnn(), sub / "resnet.onnx")
        else:
            onnx.save(tiny_cnn(), sub / "model.onnx")
            (sub / "1").mkdir()
        with pytest.raises(OptionError) as info:
            read_repository(tmp_path)
        message = str(info.value)
        assert "NAME.onnx or NAME/model.onnx" in message and "NAME/<version>/model.onnx" in message, message
        assert "config.pbtxt" in message and str(sub) in message

    def test_a_tensor_that_is_not_the_models_fails_its_load(self, tmp_path: Path) -> None:
        _triton_folder(tmp_path)
        pbtxt = tmp_path / "tiny" / "config.pbtxt"
        pbtxt.write_text(pbtxt.read_text().replace('name: "logits"', 'name: "scores"'))
        # in a subprocess: KServe's protos and tritonclient's share protobuf's default pool in this one
        code = """if True:
            import asyncio, sys
            from kserve.model_repository import ModelRepository as Registry
            from amdinfer.serve import ModelRepository
            repo = ModelRepository(sys.argv[1], defaults={"providers": ["cpu"]}, warmup=False)
            asyncio.run(repo.start(Registry()))
        """
        out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120)
        assert out.returncode != 0  # a model that fails to load at start stops the start, saying why
        assert "load 'tiny'" in out.stderr
        assert "output 'scores' is not one of the model's outputs ['logits']" in out.stderr
