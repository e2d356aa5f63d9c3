"""Several models in one server: Triton's model-repository extension driven by tritonclient (REST and gRPC).

The truth is ``engine.run`` in this process on the same files; the servers run in subprocesses on loopback,
serving a repository folder with a ``models.toml``.
"""

from __future__ import annotations

import concurrent.futures
import importlib.util
import json
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import onnx
import pytest

if importlib.util.find_spec("kserve") is None:
    pytest.skip("needs the serve extra: run `nox -s serve`", allow_module_level=True)
grpcclient = pytest.importorskip("tritonclient.grpc", reason="needs tritonclient[grpc]: run `nox -s serve`")
httpclient = pytest.importorskip("tritonclient.http", reason="needs tritonclient[http]: run `nox -s serve`")

from tritonclient.utils import InferenceServerException  # noqa: E402

import amdinfer  # noqa: E402
from amdinfer.errors import InputError, OptionError  # noqa: E402
from amdinfer.serve._model_folder import parse_load_config, read_repository  # noqa: E402
from amdinfer.testing.models import tiny_cnn, yolov8  # noqa: E402

from .conftest import RunningServer, free_port, running_server  # noqa: E402

CLIENTS = {"http": httpclient, "grpc": grpcclient}
MODELS_TOML = """
[defaults]
max_batch_size = 8

[models.half]
path = "tiny.onnx"
precision = "fp16"

[models.lazy]
load = false

[models.det]
path = "det/model.onnx"
recipe = "yolo"
recipe_options = { imgsz = 64 }
load = false
"""


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tiny.onnx and second/model.onnx (other weights), lazy.onnx, a yolo under det/, a symlink out."""
    root = tmp_path_factory.mktemp("repo")
    onnx.save(tiny_cnn(seed=3), root / "tiny.onnx")
    (root / "second").mkdir()
    onnx.save(tiny_cnn(seed=5), root / "second" / "model.onnx")
    onnx.save(tiny_cnn(seed=7), root / "lazy.onnx")
    (root / "det").mkdir()
    onnx.save(yolov8(image_size=64), root / "det" / "model.onnx")
    outside = tmp_path_factory.mktemp("outside") / "secret.onnx"
    onnx.save(tiny_cnn(seed=9), outside)
    (root / "escape.onnx").symlink_to(outside)
    (root / "models.toml").write_text(MODELS_TOML)
    return root


@pytest.fixture(scope="module")
def engines(folder: Path) -> Iterator[dict[str, amdinfer.Engine]]:
    paths = {"tiny": folder / "tiny.onnx", "second": folder / "second" / "model.onnx", "lazy": folder / "lazy.onnx"}
    loaded = {n: amdinfer.load(p, providers=["CPUExecutionProvider"]) for n, p in paths.items()}
    yield loaded
    for e in loaded.values():
        e.close()


@contextmanager
def _start(folder: Path, log: Path, state: Path | None = None) -> Iterator[RunningServer]:
    """A server of ``folder`` (in a subprocess); ``state``: the load/unload records shared with others."""
    http, grpc = free_port(), free_port()
    code = (
        "import sys; from amdinfer.serve import serve_repository; "
        f"serve_repository(sys.argv[1], http_port={http}, grpc_port={grpc}, warmup=False, providers=['cpu'])"
    )
    with pytest.MonkeyPatch.context() as env:
        if state is not None:
            env.setenv("AMDINFER_REPOSITORY_STATE", str(state))
        server = running_server(["-c", code, str(folder)], http, grpc, log)
        started = server.__enter__()
    try:
        yield started
    finally:
        server.__exit__(None, None, None)


@pytest.fixture(scope="module")
def server(folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    log = tmp_path_factory.mktemp("repo_log") / "log.txt"
    with _start(folder, log) as s:
        yield s
        assert s.stop() == 0, log.read_text()


def client(server: RunningServer, protocol: str):
    return CLIENTS[protocol].InferenceServerClient(server.http if protocol == "http" else server.grpc)


def _index(c, protocol: str, **kw) -> dict[str, tuple[str, str]]:
    if protocol == "http":
        rows = c.get_model_repository_index(**kw) if not kw else _http_index(c, **kw)
    else:
        rows = c.get_model_repository_index(as_json=True).get("models", [])
    return {r["name"]: (r.get("state", ""), r.get("reason", "")) for r in rows}


def _http_index(c, ready: bool) -> list:
    response = c._post("v2/repository/index", json.dumps({"ready": ready}), None, None)
    assert response.status_code == 200, response.read()
    return json.loads(response.read())


def _infer(c, protocol: str, name: str, x: np.ndarray) -> np.ndarray:
    mod = CLIENTS[protocol]
    inp = mod.InferInput("input", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    return c.infer(name, [inp]).as_numpy("logits")


def _refused(call) -> str:
    with pytest.raises(InferenceServerException) as info:
        call()
    return f"{info.value.status()} {info.value.message()}"


def _x(rows: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, 3, 32, 32)).astype(np.float32)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
class TestRepository:
    def test_index_lists_every_model_with_its_state_and_reason(self, server: RunningServer, protocol: str) -> None:
        index = _index(client(server, protocol), protocol)
        assert {n: s for n, (s, _) in index.items()} == {
            "tiny": "READY", "second": "READY", "half": "READY",
            "lazy": "UNAVAILABLE", "det": "UNAVAILABLE", "escape": "UNAVAILABLE",
        }  # fmt: skip
        assert index["lazy"][1] == "not loaded"
        assert "outside the repository" in index["escape"][1]

    def test_index_ready_only(self, server: RunningServer, protocol: str) -> None:
        if protocol == "grpc":
            c = client(server, protocol)
            rows = c._client_stub.RepositoryIndex(grpcclient.service_pb2.RepositoryIndexRequest(ready=True)).models
            names = sorted(r.name for r in rows)
        else:
            names = sorted(r["name"] for r in _http_index(client(server, protocol), ready=True))
        assert names == ["half", "second", "tiny"]

    def test_two_models_in_one_server_answer_with_their_own_weights(
        self, server: RunningServer, protocol: str, engines
    ) -> None:
        c = client(server, protocol)
        x = _x(3, seed=1)
        for name in ("tiny", "second"):
            np.testing.assert_allclose(_infer(c, protocol, name, x), engines[name].run(x)["logits"], rtol=1e-5,
                                       atol=1e-6)  # fmt: skip
        assert not np.allclose(engines["tiny"].run(x)["logits"], engines["second"].run(x)["logits"], atol=1e-3)

    def test_config_file_options_are_applied(self, server: RunningServer, protocol: str, engines) -> None:
        c = client(server, protocol)
        meta = c.get_model_metadata("half", **({"as_json": True} if protocol == "grpc" else {}))
        assert meta["platform"] == "amdinfer ort (CPUExecutionProvider) fp16"
        tiny = c.get_model_metadata("tiny", **({"as_json": True} if protocol == "grpc" else {}))
        assert tiny["platform"] == "amdinfer ort (CPUExecutionProvider) fp32"
        x = _x(2, seed=2)
        got, exact = _infer(c, protocol, "half", x), engines["tiny"].run(x)["logits"]
        np.testing.assert_allclose(got, exact, atol=2e-2 * max(1.0, float(np.abs(exact).max())))
        assert not np.array_equal(got, exact)  # rounded through fp16: not the fp32 engine's bits

    def test_load_infer_unload(self, server: RunningServer, protocol: str, engines) -> None:
        c = client(server, protocol)
        assert c.is_model_ready("lazy") is False
        c.load_model("lazy")
        assert c.is_model_ready("lazy") is True
        assert _index(c, protocol)["lazy"] == ("READY", "")
        x = _x(2, seed=3)
        np.testing.assert_allclose(_infer(c, protocol, "lazy", x), engines["lazy"].run(x)["logits"], rtol=1e-5,
                                   atol=1e-6)  # fmt: skip
        c.unload_model("lazy")
        assert c.is_model_ready("lazy") is False
        assert _index(c, protocol)["lazy"] == ("UNAVAILABLE", "unloaded")
        message = _refused(lambda: _infer(c, protocol, "lazy", x))
        assert "not ready" in message and "load it with" in message, message
        # the other models are untouched
        np.testing.assert_allclose(_infer(c, protocol, "tiny", x), engines["tiny"].run(x)["logits"], rtol=1e-5,
                                   atol=1e-6)  # fmt: skip

    def test_load_with_a_config_overrides_the_files_options(self, server: RunningServer, protocol: str) -> None:
        c = client(server, protocol)
        meta = {"as_json": True} if protocol == "grpc" else {}
        c.load_model("lazy", config=json.dumps({"precision": "fp16", "max_batch_size": 4}))
        assert c.get_model_metadata("lazy", **meta)["platform"].endswith("fp16")
        c.load_model("lazy")  # a reload: the file's options again
        assert c.get_model_metadata("lazy", **meta)["platform"].endswith("fp32")
        c.unload_model("lazy")

    def test_recipe_from_the_config_file_takes_encoded_images(self, server: RunningServer, protocol: str) -> None:
        c = client(server, protocol)
        c.load_model("det")
        try:
            meta = c.get_model_metadata("det", **({"as_json": True} if protocol == "grpc" else {}))
            assert [(t["name"], t["datatype"]) for t in meta["inputs"]] == [("images", "BYTES")]
        finally:
            c.unload_model("det")

    def test_a_symlink_out_of_the_folder_is_refused(self, server: RunningServer, protocol: str) -> None:
        message = _refused(lambda: client(server, protocol).load_model("escape"))
        assert "'escape'" in message and "outside the repository" in message, message

    def test_unknown_names_and_bad_parameters_are_refused(self, server: RunningServer, protocol: str) -> None:
        c = client(server, protocol)
        bad = "400" if protocol == "http" else "INVALID_ARGUMENT"
        for call, expected in (
            (lambda: c.load_model("nope"), "not a model of the repository"),
            (lambda: c.unload_model("nope"), "not a model of the repository"),
            (lambda: c.load_model("tiny", config='{"path": "/etc/passwd"}'), "got option 'path'"),
            (lambda: c.load_model("tiny", config="{not json"), "not valid JSON"),
            (lambda: c.load_model("tiny", config="{}", files={"file:1/model.onnx": b"x"}), "model files are not"),
        ):
            message = _refused(call)
            assert bad in message and expected in message, message
        assert "NOT_FOUND" in _refused(lambda: _infer(c, "grpc", "nope", _x(1, 0))) if protocol == "grpc" else True
        assert c.is_model_ready("tiny") is True  # a refused load leaves the loaded model as it was

    @pytest.mark.parametrize(
        ("config", "match"),
        [
            ('{"max_delay_ms": Infinity}', "option 'max_delay_ms' got inf, expected a finite number in 0..60000"),
            ('{"max_delay_ms": NaN}', "option 'max_delay_ms' got nan, expected a finite number in 0..60000"),
            ('{"max_delay_ms": 1e300}', "option 'max_delay_ms' got 1e+300, expected a finite number in 0..60000"),
            ('{"batch_buckets": [1073741824]}', "option 'batch_buckets' got 1073741824 (item 0), expected an int in "
                                                "1..4096"),
            ('{"max_batch_size": 4097}', "option 'max_batch_size' got 4097, expected an int in 1..4096"),
        ],
        ids=["infinity", "nan", "1e300", "bucket_2_30", "batch_4097"],
    )  # fmt: skip
    def test_a_load_config_out_of_bounds_is_refused_and_changes_nothing(
        self, server: RunningServer, protocol: str, engines, config: str, match: str
    ) -> None:
        """Issue 35: such a config was taken (200), then the model answered nothing and its unload hung, or a
        one-row request allocated 12 TiB. Now: 400 / INVALID_ARGUMENT naming the option, and no state changes."""
        c = client(server, protocol)
        bad = "400" if protocol == "http" else "INVALID_ARGUMENT"
        x = _x(1, seed=8)
        before = _index(c, protocol)["lazy"]
        for name, ready in (("lazy", False), ("tiny", True)):  # not loaded, and loaded: each keeps its state
            message = _refused(lambda n=name: c.load_model(n, config=config))
            assert bad in message and f"load {name!r}: config: {match}" in message, message
            assert c.is_model_ready(name) is ready
        np.testing.assert_allclose(_infer(c, protocol, "tiny", x), engines["tiny"].run(x)["logits"], rtol=1e-5,
                                   atol=1e-6)  # fmt: skip
        assert _index(c, protocol)["lazy"] == before  # state and reason as they were
        c.load_model("lazy")  # the model itself still loads, answers and unloads
        np.testing.assert_allclose(_infer(c, protocol, "lazy", x), engines["lazy"].run(x)["logits"], rtol=1e-5,
                                   atol=1e-6)  # fmt: skip
        c.unload_model("lazy")
        assert c.is_model_ready("lazy") is False


def test_names_with_paths_are_refused_over_grpc(server: RunningServer) -> None:
    c = client(server, "grpc")
    for name in ("../tiny", "/etc/passwd", "second/model", ".hidden"):
        message = _refused(lambda n=name: c.load_model(n))
        assert "INVALID_ARGUMENT" in message and "model name" in message, message


def test_server_metadata_lists_the_extension(server: RunningServer) -> None:
    assert "model_repository" in client(server, "http").get_server_metadata()["extensions"]


def test_loads_and_unloads_do_not_disturb_requests_to_other_models(server: RunningServer, engines) -> None:
    """Requests to 'second' keep flowing (and stay right) while 'lazy' is loaded and unloaded; requests to
    'lazy' during an unload either finish right or are refused as not ready, never a server error."""
    x = _x(2, seed=4)
    truth = {n: engines[n].run(x)["logits"] for n in ("second", "lazy")}

    def hammer(name: str) -> list[str]:
        c = httpclient.InferenceServerClient(server.http)
        seen = []
        for _ in range(30):
            try:
                np.testing.assert_allclose(_infer(c, "http", name, x), truth[name], rtol=1e-5, atol=1e-6)
                seen.append("ok")
            except InferenceServerException as exc:
                assert "not ready" in exc.message() and exc.status() in ("503", "404"), exc.message()
                seen.append("refused")
        return seen

    admin = httpclient.InferenceServerClient(server.http)
    admin.load_model("lazy")
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        jobs = [pool.submit(hammer, n) for n in ("second", "second", "lazy", "lazy")]
        for _ in range(3):
            admin.unload_model("lazy")
            admin.load_model("lazy")
        results = [j.result() for j in jobs]
    admin.unload_model("lazy")
    assert results[0] == results[1] == ["ok"] * 30


def test_processes_sharing_a_state_folder_converge(folder: Path, tmp_path: Path, engines) -> None:
    """Two server processes of one repository (as the per-device processes are): a load through one is
    served by the other, an unload through the other is seen by the first."""
    state = tmp_path / "state"
    with _start(folder, tmp_path / "a.txt", state) as a, _start(folder, tmp_path / "b.txt", state) as b:
        ca, cb = httpclient.InferenceServerClient(a.http), grpcclient.InferenceServerClient(b.grpc)
        x = _x(2, seed=6)
        ca.load_model("lazy", config='{"precision": "fp16"}')
        assert cb.is_model_ready("lazy") is True
        assert cb.get_model_metadata("lazy", as_json=True)["platform"].endswith("fp16")
        got = _infer(cb, "grpc", "lazy", x)
        exact = engines["lazy"].run(x)["logits"]
        np.testing.assert_allclose(got, exact, atol=2e-2 * max(1.0, float(np.abs(exact).max())))
        cb.unload_model("lazy")
        assert ca.is_model_ready("lazy") is False
        assert _index(ca, "http")["lazy"] == ("UNAVAILABLE", "unloaded")
        assert a.stop() == 0 and b.stop() == 0


class TestFolder:
    def test_models_from_files_folders_and_the_config(self, folder: Path) -> None:
        models = read_repository(folder, {"providers": ["cpu"]})
        assert sorted(models) == ["det", "escape", "half", "lazy", "second", "tiny"]
        assert models["second"].path == (folder / "second" / "model.onnx").resolve()
        assert (models["half"].precision, models["half"].max_batch_size, models["half"].providers) == (
            "fp16", 8, ("cpu",),
        )  # fmt: skip
        assert (models["lazy"].load, models["det"].recipe, models["det"].recipe_options) == (
            False,
            "yolo",
            {"imgsz": 64},
        )
        assert isinstance(models["escape"], str) and "outside the repository" in models["escape"]

    @pytest.mark.parametrize(
        ("toml", "match"),
        [
            ("[models.tiny]\nprecison = 'fp16'\n", r"\[models.tiny\]: got option 'precison'"),
            ("[models.tiny]\nmax_batch_size = 0\n", r"'max_batch_size' got 0, expected an int in 1..4096"),
            ("[models.tiny]\nproviders = 3\n", r"'providers' got 3"),
            ("[models.ghost]\nprecision = 'fp16'\n", r"\[models.ghost\] has no path"),
            ("[models.tiny]\npath = '../x.onnx'\n", None),
            ("[server]\nport = 1\n", r"expected only the tables 'defaults' and 'models'"),
            ("[models.tiny\n", r"not valid TOML"),
        ],
    )
    def test_config_errors_name_the_table_and_option(self, tmp_path: Path, toml: str, match: str | None) -> None:
        onnx.save(tiny_cnn(), tmp_path / "tiny.onnx")
        (tmp_path / "models.toml").write_text(toml)
        if match is None:  # a path out of the folder: the model is listed as unavailable, with the reason
            assert (
                "does not exist" in read_repository(tmp_path)["tiny"] or "outside" in read_repository(tmp_path)["tiny"]
            )
            return
        with pytest.raises(OptionError, match=match):
            read_repository(tmp_path)

    @pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib")
    def test_both_config_files_are_ambiguous(self, tmp_path: Path) -> None:
        (tmp_path / "models.toml").write_text("")
        (tmp_path / "models.json").write_text("{}")
        with pytest.raises(OptionError, match=r"has both models\.toml and models\.json"):
            read_repository(tmp_path)

    def test_load_config_parameter(self) -> None:
        assert parse_load_config("m", '{"name": "m", "providers": "cpu,cuda"}') == {"providers": ("cpu", "cuda")}
        with pytest.raises(InputError, match="names another model"):
            parse_load_config("m", '{"name": "other"}')
        with pytest.raises(InputError, match="expected a JSON object"):
            parse_load_config("m", "[1]")


@contextmanager
def _cli_server(folder: Path, log: Path, *flags: str) -> Iterator[tuple[RunningServer, list[int]]]:
    """``amdinfer serve --model-repository folder`` as a real process (its own supervisor and children)."""
    http, grpc = free_port(), free_port()
    argv = ["-m", "amdinfer", "serve", "--model-repository", str(folder), "--providers", "cpu", "--no-warmup"]
    argv += ["--http-port", str(http), "--grpc-port", str(grpc), *flags]
    with running_server(argv, http, grpc, log) as s:
        yield s, [http, grpc]


class TestCommandLine:
    def test_serves_two_models_of_the_folder_over_both_protocols(self, folder: Path, tmp_path: Path, engines) -> None:
        log = tmp_path / "log.txt"
        with _cli_server(folder, log, "--workers-per-device", "1") as (s, _):
            for protocol in CLIENTS:
                c = client(s, protocol)
                for seed, name in enumerate(["tiny", "second"]):
                    x = _x(3, seed=20 + seed)
                    np.testing.assert_allclose(
                        _infer(c, protocol, name, x), engines[name].run(x)["logits"], rtol=1e-5, atol=1e-5
                    )
                assert c.is_model_ready("lazy") is False
            assert s.stop() == 0, log.read_text()
        assert f"model repository {folder.resolve()}" in log.read_text()

    def test_a_load_through_one_process_is_served_by_every_process(self, folder: Path, tmp_path: Path, engines) -> None:
        """Two server processes on the same ports: each fresh connection lands on either; all see the load."""
        from .test_serve import _wait_for_every_process

        log = tmp_path / "log.txt"
        with _cli_server(folder, log, "--workers-per-device", "2") as (s, ports):
            _wait_for_every_process(s, ports, processes=2)
            httpclient.InferenceServerClient(s.http).load_model("lazy")
            x = _x(2, seed=30)
            exact = engines["lazy"].run(x)["logits"]
            for i in range(12):  # a new client is a new connection: the kernel picks the process
                protocol = ("http", "grpc")[i % 2]
                c = client(s, protocol)
                assert c.is_model_ready("lazy") is True
                np.testing.assert_allclose(_infer(c, protocol, "lazy", x), exact, rtol=1e-5, atol=1e-5)
            grpcclient.InferenceServerClient(s.grpc).unload_model("lazy")
            for i in range(12):
                assert client(s, ("grpc", "http")[i % 2]).is_model_ready("lazy") is False
            assert s.stop() == 0, log.read_text()
        text = log.read_text()  # both processes served: each names itself in its start line
        assert "server process 1 of 2 on its device" in text and "server process 2 of 2 on its device" in text

    @pytest.mark.parametrize(
        ("data", "match"),
        [
            (b"[models.tiny]\nprecision = '\xff'\n", r"models\.toml: not UTF-8 text \(byte 0xff at offset 27\)"),
            (b"[models.tiny]\nmax_delay_ms = nan\n", r"models\.toml: \[models\.tiny\]: option 'max_delay_ms' got nan"),
            (b"[models.tiny\n", r"models\.toml: not valid TOML"),
        ],
        ids=["not_utf8", "nan", "malformed"],
    )
    def test_a_broken_models_toml_is_one_line_at_start(self, tmp_path: Path, data: bytes, match: str) -> None:
        import subprocess

        onnx.save(tiny_cnn(), tmp_path / "tiny.onnx")
        (tmp_path / "models.toml").write_bytes(data)
        argv = [sys.executable, "-m", "amdinfer", "serve", "--model-repository", str(tmp_path), "--http-port",
                str(free_port()), "--grpc-port", "-1", "--workers-per-device", "1", "--log-level", "error"]  # fmt: skip
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 1 and len(lines) == 1, proc.stderr
        assert re.match(rf"amdinfer serve: OptionError: {re.escape(str(tmp_path.resolve()))}/{match}", lines[0]), lines

    @pytest.mark.parametrize(
        ("argv", "match"),
        [
            (["m.onnx", "--model-repository", "models"], r"model: got 'm.onnx' and --model-repository 'models'"),
            ([], r"model: got None and --model-repository None, expected one of them"),
            (["--model-repository", "models", "--recipe", "yolo", "--conf", "0.5"], r"--recipe, --conf with --mo"),
            (["--model-repository", "models", "--verify-sample", "0.1"], r"--verify-sample with --model-repository"),
        ],
    )
    def test_one_model_flags_are_refused_with_a_repository(self, argv: list[str], match: str) -> None:
        from amdinfer.cli import build_parser
        from amdinfer.serve._cli import run

        with pytest.raises(OptionError, match=match):
            run(build_parser().parse_args(["serve", *argv]))

    def test_the_server_processes_get_the_repository(self) -> None:
        from amdinfer.cli import build_parser
        from amdinfer.serve._cli import _child_argv

        parser = build_parser()
        args = parser.parse_args(["serve", "--model-repository", "models", "--devices", "0,1", "--precision", "fp16"])
        child = parser.parse_args(_child_argv(args, 1))
        assert (child.model, child.model_repository, child.devices, child.precision) == (None, "models", [1], "fp16")
