"""Bundles in the server (issue 39): ``amdinfer serve BUNDLE`` and a repository holding bundles (``NAME/`` and
Triton's ``NAME/<version>/``) serve them as built, the manifest's buckets the server's; a tampered bundle stops the
server at start with one line. The truth is ``engine.run`` of the plain model in this process (ONNX Runtime's CPU
EP on the source model; the bundle holds ORT's optimized graph of it)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

if importlib.util.find_spec("kserve") is None:
    pytest.skip("needs the serve extra: run `nox -s serve`", allow_module_level=True)
httpclient = pytest.importorskip("tritonclient.http", reason="needs tritonclient[http]: run `nox -s serve`")

import amdinfer  # noqa: E402
from amdinfer.bundle import write_bundle  # noqa: E402
from amdinfer.errors import OptionError  # noqa: E402
from amdinfer.serve._model_folder import read_repository  # noqa: E402
from amdinfer.testing.models import tiny_cnn  # noqa: E402

from .conftest import free_port, running_server  # noqa: E402


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``cnn/`` a bundle (buckets 1, 4), ``tri/1/`` a bundle in Triton's layout (buckets 2), ``plain.onnx``."""
    root = tmp_path_factory.mktemp("repo")
    write_bundle(tiny_cnn(seed=3), root / "cnn", batch_buckets=[1, 4], providers=["cpu"])
    write_bundle(tiny_cnn(seed=5), root / "tri" / "1", batch_buckets=[2], providers=["cpu"], on_new_shape="error")
    onnx.save(tiny_cnn(seed=7), root / "plain.onnx")
    return root


@pytest.fixture(scope="module")
def plain() -> dict[str, amdinfer.Engine]:
    engines = {n: amdinfer.load(tiny_cnn(seed=s), providers=["cpu"]) for n, s in (("cnn", 3), ("tri", 5))}
    yield engines
    for e in engines.values():
        e.close()


def _x(rows: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random((rows, 3, 32, 32), np.float32)


def _infer(c, name: str, x: np.ndarray) -> np.ndarray:
    inp = httpclient.InferInput("input", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    return c.infer(name, [inp]).as_numpy("logits")


def test_the_repository_reads_bundles_with_their_buckets(repo: Path) -> None:
    models = read_repository(repo)
    assert sorted(models) == ["cnn", "plain", "tri"]
    assert models["cnn"].path == (repo / "cnn" / "manifest.json").resolve() and models["cnn"].max_batch_size == 4
    assert models["tri"].version == "1" and models["tri"].max_batch_size == 2
    assert models["cnn"].describe().startswith("bundle cnn: ")
    (repo / "tri" / "config.pbtxt").write_text("dynamic_batching { preferred_batch_size: [8] }")
    try:
        with pytest.raises(OptionError, match=r"batch_buckets \[8\], but the bundle .* was built for \[2\]"):
            read_repository(repo)
    finally:
        (repo / "tri" / "config.pbtxt").unlink()


def test_a_repository_serves_its_bundles_as_built(repo: Path, plain, tmp_path: Path) -> None:
    http = free_port()
    code = (
        "import sys; from amdinfer.serve import serve_repository; "
        f"serve_repository(sys.argv[1], http_port={http}, grpc_port=None, warmup=False, providers=['cpu'])"
    )
    log = tmp_path / "log.txt"
    with running_server(["-c", code, str(repo)], http, free_port(), log) as s:
        c = httpclient.InferenceServerClient(s.http)
        for name, rows in (("cnn", 3), ("cnn", 4), ("tri", 2), ("tri", 1)):
            x = _x(rows, seed=rows)
            np.testing.assert_allclose(_infer(c, name, x), plain[name].run(x)["logits"], rtol=1e-5, atol=1e-6)
        assert c.is_model_ready("plain")
        assert s.stop() == 0, log.read_text()


def test_serve_a_bundle_folder_uses_its_buckets(repo: Path, plain, tmp_path: Path) -> None:
    http = free_port()
    argv = ["-m", "amdinfer", "serve", str(repo / "cnn"), "--name", "cnn", "--http-port", str(http), "--grpc-port",
            "-1", "--workers-per-device", "1"]  # fmt: skip
    log = tmp_path / "log.txt"
    with running_server(argv, http, free_port(), log) as s:
        c = httpclient.InferenceServerClient(s.http)
        x = _x(3, seed=11)
        np.testing.assert_allclose(_infer(c, "cnn", x), plain["cnn"].run(x)["logits"], rtol=1e-5, atol=1e-6)
        assert s.stop() == 0, log.read_text()
    text = log.read_text()
    assert re.search(r"batches of up to 4 rows .*buckets 1,4 \(the engine's\)", text), text


def _serve_fails(argv: list[str]) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "amdinfer", "serve", *argv, "--http-port", str(free_port()), "--grpc-port", "-1",
         "--workers-per-device", "1", "--log-level", "error"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    return lines


def test_a_tampered_bundle_stops_the_server_at_start_with_one_line(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    folder = write_bundle(tiny_cnn(), root / "cnn", batch_buckets=[1], providers=["cpu"])
    graph = folder / "ort" / "model.optimized.onnx"
    graph.write_bytes(graph.read_bytes() + b"\0")
    (line,) = _serve_fails(["--model-repository", str(root), "--providers", "cpu"])
    assert "load 'cnn': failed to load" in line and "BundleError" in line, line
    assert "file 'ort/model.optimized.onnx' changed since the bundle was written" in line, line
    assert "amdinfer compile" in line and "--bundle" in line, line  # the rebuild command


def test_other_buckets_for_a_bundle_are_one_line(repo: Path) -> None:
    (line,) = _serve_fails([str(repo / "cnn"), "--batch-buckets", "8"])
    assert re.search(r"batch_buckets \[8\], but the bundle .*cnn was built for \[1, 4\]", line), line


def test_shape_buckets_batch_at_most_their_smallest_batch(tmp_path: Path) -> None:
    from amdinfer.serve._bundles import bundle_batching, bundle_folder

    folder = write_bundle(tiny_cnn(), tmp_path / "b", shapes=[{"input": (2, 3, 32, 32)}, {"input": (4, 3, 32, 32)}])
    assert bundle_folder(folder / "manifest.json") == folder and bundle_folder(tmp_path) is None
    assert bundle_batching(folder) == {"batch_buckets": (), "max_batch_size": 2}
