"""The compiled-model cache: keys, verification of entries, atomic and concurrent writes, and the ORT engine's use.

Each corruption test damages an entry the way a crash, a full disk or a stray edit would, and checks that
the cache logs it, removes it and returns a miss (so the caller rebuilds); the ORT tests check the rebuilt
engine's answers against an engine built without the cache.
"""

from __future__ import annotations

import json
import logging
import multiprocessing as mp
import os
from pathlib import Path

import numpy as np
import pytest

import amdinfer
from amdinfer import cache as cache_mod
from amdinfer.cache import CompiledModelCache, clear, list_entries
from amdinfer.testing import models

PARTS = {"backend": "demo", "model": "ab" * 32, "shapes": {"x": [[1, 3], [8, 3], None]}, "precision": "fp32"}


@pytest.fixture
def cache(tmp_path: Path) -> CompiledModelCache:
    return CompiledModelCache(tmp_path / "cache")


def stored(cache: CompiledModelCache, data: bytes = b"compiled program bytes " * 100) -> tuple[str, Path]:
    key = cache.key(**PARTS)
    path = cache.put(key, lambda tmp: tmp.write_bytes(data), {"compile_seconds": 1.5}, parts=PARTS, suffix=".mxr")
    return key, path


# ---------------------------------------------------------------------------------------------- keys
class TestKeys:
    def test_stable_and_order_free(self) -> None:
        k = CompiledModelCache.key(**PARTS)
        assert k == CompiledModelCache.key(**dict(reversed(list(PARTS.items()))))
        assert len(k) == 32 and all(c in "0123456789abcdef" for c in k)
        assert CompiledModelCache.key(a=(1, 2)) == CompiledModelCache.key(a=[1, 2])

    @pytest.mark.parametrize(
        "change",
        [
            {"model": "cd" * 32},
            {"shapes": {"x": [[1, 3], [16, 3], None]}},
            {"precision": "fp16"},
            {"backend": "other"},
            {"runtime": "2.13.0"},
            {"arch": "gfx942:304cu"},
            {"options": {"fast_math": False}},
        ],
    )
    def test_every_part_matters(self, change: dict) -> None:
        assert CompiledModelCache.key(**PARTS) != CompiledModelCache.key(**{**PARTS, **change})

    def test_bad_key_is_refused(self, cache: CompiledModelCache) -> None:
        with pytest.raises(amdinfer.CacheError, match="expected 32 lowercase hex digits"):
            cache.get("../../etc")


# ---------------------------------------------------------------------------------------------- round trip
class TestRoundTrip:
    def test_put_then_get(self, cache: CompiledModelCache) -> None:
        key, path = stored(cache)
        assert cache.get(key, parts=PARTS) == path
        manifest = cache.manifest(key)
        assert manifest["size"] == path.stat().st_size
        assert manifest["parts"]["shapes"] == {"x": [[1, 3], [8, 3], None]}
        assert manifest["meta"] == {"compile_seconds": 1.5}
        import hashlib

        assert manifest["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
        assert not [p for p in path.parent.iterdir() if p.name.startswith(".tmp-")]

    def test_miss(self, cache: CompiledModelCache) -> None:
        assert cache.get(cache.key(x=1)) is None

    def test_put_moves_an_existing_file(self, cache: CompiledModelCache, tmp_path: Path) -> None:
        src = tmp_path / "optimized.onnx"
        src.write_bytes(b"onnx bytes")
        path = cache.put(cache.key(y=2), src, suffix=".onnx")
        assert path.read_bytes() == b"onnx bytes" and path.suffix == ".onnx"

    def test_overwrite_replaces_content(self, cache: CompiledModelCache) -> None:
        key, _ = stored(cache, b"first")
        _, second = stored(cache, b"second")
        assert cache.get(key).read_bytes() == b"second" == second.read_bytes()

    def test_listing_clearing_and_size(self, cache: CompiledModelCache) -> None:
        key, path = stored(cache)
        (entry,) = cache.entries()
        assert entry.key == key and entry.path == path and entry.backend == "demo" and entry.problem is None
        assert entry.to_dict()["parts"]["model"] == "ab" * 32
        assert cache.size_bytes() >= path.stat().st_size
        assert [e.key for e in list_entries(cache.root)] == [key]
        foreign = cache.root / "my-notes.txt"
        foreign.write_text("not the cache's")
        assert clear(cache.root) == 1
        assert cache.entries() == [] and foreign.read_text() == "not the cache's"


# ---------------------------------------------------------------------------------------------- labels
class TestListingLabels:
    """``amdinfer cache list`` shows backend, precision and kind for every sound entry, old recipes included."""

    @pytest.mark.parametrize(
        ("parts", "labels"),
        [
            ({"backend": "migraphx", "precision": "fp16", "inputs": {}}, ("migraphx", "fp16", "migraphx program")),
            ({"backend": "ort", "precision": "fp32", "providers": ["X"]}, ("ort", "fp32", "ort optimized model")),
            ({"kind": "fp16 model", "backend": "ort", "precision": "fp16"}, ("ort", "fp16", "fp16 model")),
            (
                {"kind": "int8 quantized model", "backend": "ort", "precision": "int8"},
                ("ort", "int8", "int8 quantized model"),
            ),
            # Int8Quantizer entries written before entries carried their labels.
            ({"what": "int8-quantized model", "model": "ab" * 32}, ("ort", "int8", "int8 quantized model")),
        ],
    )
    def test_every_recipe_is_labelled(self, cache: CompiledModelCache, parts: dict, labels: tuple) -> None:
        cache.put(cache.key(**parts), lambda tmp: tmp.write_bytes(b"x"), parts=parts, suffix=".bin")
        (entry,) = list_entries(cache.root)
        assert (entry.backend, entry.precision, entry.kind) == labels
        d = entry.to_dict()
        assert (d["backend"], d["precision"], d["kind"]) == labels

    def test_unreadable_manifest_is_unknown_and_says_why(self, cache: CompiledModelCache) -> None:
        key, _ = stored(cache)
        (cache.root / key / "manifest.json").write_text("{")
        (entry,) = list_entries(cache.root)
        assert (entry.backend, entry.precision, entry.kind) == ("?", "?", "?") and entry.problem

    def test_engine_and_quantizer_entries(self, tmp_path: Path) -> None:
        from amdinfer.quantize import Int8Quantizer

        model = models.tiny_cnn()
        calib = [models.random_inputs(model, batch=2, seed=s) for s in range(3)]
        q = Int8Quantizer(calibration=calib, progress=False, cache=tmp_path)
        with amdinfer.load(model, providers=["cpu"], quantizer=q, cache_dir=tmp_path):
            pass
        with amdinfer.load(model, providers=["cpu"], precision="fp16", cache_dir=tmp_path):
            pass
        labels = sorted((e.backend, e.precision, e.kind) for e in list_entries(tmp_path))
        assert labels == [
            ("ort", "fp16", "fp16 model"),
            ("ort", "fp16", "ort optimized model"),
            ("ort", "int8", "int8 quantized model"),
            ("ort", "int8", "ort optimized model"),
        ]


# ---------------------------------------------------------------------------------------------- damage
class TestDamagedEntries:
    def test_truncated_artefact(self, cache: CompiledModelCache, caplog: pytest.LogCaptureFixture) -> None:
        key, path = stored(cache)
        path.write_bytes(path.read_bytes()[:10])
        with caplog.at_level(logging.WARNING, logger="amdinfer.cache"):
            assert cache.get(key) is None
        assert "truncated" in caplog.text and key in caplog.text
        assert not (cache.root / key).exists()

    def test_same_size_corruption(self, cache: CompiledModelCache, caplog: pytest.LogCaptureFixture) -> None:
        key, path = stored(cache)
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
        with caplog.at_level(logging.WARNING, logger="amdinfer.cache"):
            assert cache.get(key) is None
        assert "(corrupt)" in caplog.text

    def test_missing_artefact(self, cache: CompiledModelCache) -> None:
        key, path = stored(cache)
        path.unlink()
        assert cache.get(key) is None

    @pytest.mark.parametrize(
        ("manifest", "why"),
        [
            ('{"format": 1, "key": ', "not valid JSON"),
            ("\x00\x01garbage", "not valid JSON"),
            ("[1, 2, 3]", "holds a list"),
            ('{"format": 1}', "manifest lacks"),
            ('{"format": 99, "key": "k", "artefact": "a", "size": 1, "sha256": "x", "parts": {}}', "format 99"),
        ],
    )
    def test_garbage_manifest(self, cache: CompiledModelCache, caplog, manifest: str, why: str) -> None:
        key, _ = stored(cache)
        (cache.root / key / "manifest.json").write_text(manifest)
        with caplog.at_level(logging.WARNING, logger="amdinfer.cache"):
            assert cache.get(key) is None
        assert why in caplog.text
        assert cache.get(key) is None  # gone, not half-present

    def test_manifest_pointing_outside_its_folder(self, cache: CompiledModelCache, tmp_path: Path) -> None:
        key, _ = stored(cache)
        m = json.loads((cache.root / key / "manifest.json").read_text())
        m["artefact"] = "../../outside.mxr"
        (cache.root / key / "manifest.json").write_text(json.dumps(m))
        assert cache.get(key) is None

    def test_entry_under_the_wrong_key(self, cache: CompiledModelCache, caplog) -> None:
        key, _ = stored(cache)
        other = cache.key(**{**PARTS, "precision": "fp16"})
        os.replace(cache.root / key, cache.root / other)  # e.g. copied by hand
        with caplog.at_level(logging.WARNING, logger="amdinfer.cache"):
            assert cache.get(other) is None
        assert f"manifest is for key '{key}'" in caplog.text

    def test_parts_mismatch(self, cache: CompiledModelCache, caplog) -> None:
        key, _ = stored(cache)
        with caplog.at_level(logging.WARNING, logger="amdinfer.cache"):
            assert cache.get(key, parts={**PARTS, "precision": "int8"}) is None
        assert "key mismatch" in caplog.text

    def test_validator_rejection(self, cache: CompiledModelCache) -> None:
        key, _ = stored(cache)
        assert cache.get(key, validate=lambda p: p.read_bytes().startswith(b"MXR")) is None


# ---------------------------------------------------------------------------------------------- building
class TestGetOrBuild:
    def test_builds_once_then_loads(self, cache: CompiledModelCache) -> None:
        calls = []

        def build(tmp: Path) -> str:
            calls.append(tmp)
            tmp.write_text("42")
            return "built-42"

        key = cache.key(**PARTS)
        assert cache.get_or_build(key, parts=PARTS, build=build, load=lambda p: "loaded-" + p.read_text()) == (
            "built-42",
            False,
        )
        assert cache.get_or_build(key, parts=PARTS, build=build, load=lambda p: "loaded-" + p.read_text()) == (
            "loaded-42",
            True,
        )
        assert len(calls) == 1

    def test_artefact_the_runtime_rejects_is_rebuilt(self, cache: CompiledModelCache, caplog) -> None:
        key, _ = stored(cache, b"written by an older runtime")

        def load(path: Path) -> str:
            raise RuntimeError("unsupported program version")

        with caplog.at_level(logging.WARNING, logger="amdinfer.cache"):
            obj, hit = cache.get_or_build(
                key, parts=PARTS, build=lambda tmp: (tmp.write_text("new"), "rebuilt")[1], load=load
            )
        assert (obj, hit) == ("rebuilt", False)
        assert "could not load it (RuntimeError: unsupported program version)" in caplog.text
        assert cache.get(key).read_text() == "new"

    def test_builder_failure_leaves_no_entry(self, cache: CompiledModelCache) -> None:
        key = cache.key(**PARTS)

        def build(tmp: Path) -> str:
            tmp.write_text("half")
            raise ValueError("compile failed")

        with pytest.raises(ValueError, match="compile failed"):
            cache.get_or_build(key, parts=PARTS, build=build, load=lambda p: "x")
        assert cache.get(key) is None and cache.entries() == []

    def test_unwritable_cache_still_builds(self, tmp_path: Path, caplog) -> None:
        blocker = tmp_path / "a-file"
        blocker.write_text("x")
        cache = CompiledModelCache(blocker / "cache")  # cannot create a folder under a file
        with caplog.at_level(logging.WARNING, logger="amdinfer.cache"):
            obj, hit = cache.get_or_build(
                cache.key(a=1), parts={"a": 1}, build=lambda tmp: (tmp.write_text("v"), "built")[1], load=str
            )
        assert (obj, hit) == ("built", False)
        assert "not writable" in caplog.text or "not cached" in caplog.text

    def test_put_into_unwritable_folder_raises_cache_error(self, tmp_path: Path) -> None:
        blocker = tmp_path / "a-file"
        blocker.write_text("x")
        with pytest.raises(amdinfer.CacheError, match="cannot create entry"):
            CompiledModelCache(blocker).put(CompiledModelCache.key(a=1), lambda t: t.write_text("v"))


# ---------------------------------------------------------------------------------------------- concurrency
def _race_build(root: str, log_path: str, index: int, queue: mp.Queue) -> None:
    cache = CompiledModelCache(root)

    def build(tmp: Path) -> bytes:
        with open(log_path, "a") as f:  # one line per real build
            f.write(f"{index}\n")
        data = b"program " * 5000
        tmp.write_bytes(data)
        return data

    obj, hit = cache.get_or_build(cache.key(**PARTS), parts=PARTS, build=build, load=lambda p: p.read_bytes())
    queue.put((index, hit, len(obj)))


def _race_put(root: str, index: int, rounds: int) -> None:
    cache = CompiledModelCache(root)
    key = cache.key(**PARTS)
    for r in range(rounds):
        payload = f"writer {index} round {r} ".encode() * (1000 + 37 * index)
        cache.put(key, lambda tmp, p=payload: tmp.write_bytes(p), parts=PARTS, suffix=".bin")


class TestConcurrentProcesses:
    def test_one_process_builds_the_others_load(self, tmp_path: Path) -> None:
        ctx = mp.get_context("spawn")
        queue = ctx.Queue()
        log_path = tmp_path / "builds.log"
        procs = [ctx.Process(target=_race_build, args=(str(tmp_path / "c"), str(log_path), i, queue)) for i in range(4)]
        for p in procs:
            p.start()
        results = [queue.get(timeout=120) for _ in procs]
        for p in procs:
            p.join(timeout=60)
            assert p.exitcode == 0
        assert len(log_path.read_text().split()) == 1  # the file lock let exactly one compile
        assert sorted(hit for _, hit, _ in results) == [False, True, True, True]
        assert {n for _, _, n in results} == {len(b"program ") * 5000}

    def test_concurrent_writers_never_leave_a_torn_entry(self, tmp_path: Path, caplog) -> None:
        root = tmp_path / "c"
        ctx = mp.get_context("spawn")
        procs = [ctx.Process(target=_race_put, args=(str(root), i, 15)) for i in range(3)]
        for p in procs:
            p.start()
        cache = CompiledModelCache(root)
        key = cache.key(**PARTS)
        seen = 0
        caplog.set_level(logging.WARNING, logger="amdinfer.cache")
        while any(p.is_alive() for p in procs):
            path = cache.get(key, parts=PARTS)  # verifies size and SHA-256 of whatever it finds
            if path is not None:
                try:
                    text = path.read_bytes()[:40].decode()
                except FileNotFoundError:  # replaced between the check and this read
                    continue
                assert text.startswith("writer ")
                seen += 1
        for p in procs:
            p.join()
            assert p.exitcode == 0
        assert "unusable" not in caplog.text  # a reader never met a half-written entry
        final = cache.get(key, parts=PARTS)
        assert final is not None and final.read_bytes().startswith(b"writer ")
        assert not list((root / key).glob(".tmp-*"))


# ---------------------------------------------------------------------------------------------- folders
class TestFolders:
    def test_environment_override(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        monkeypatch.setenv("AMDINFER_CACHE_DIR", str(tmp_path / "env"))
        assert cache_mod.default_cache_dir() == tmp_path / "env"
        assert CompiledModelCache().root == tmp_path / "env"
        assert CompiledModelCache(tmp_path / "arg").root == tmp_path / "arg"

    def test_xdg_cache_home(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        monkeypatch.delenv("AMDINFER_CACHE_DIR", raising=False)
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
        assert cache_mod.default_cache_dir() == tmp_path / "xdg" / "amdinfer"

    def test_gfx_names_from_kfd_versions(self) -> None:
        # gfx_target_version = major*10000 + minor*100 + stepping; names use hex digits for minor/stepping.
        cases = {90402: "gfx942", 90010: "gfx90a", 90008: "gfx908", 110000: "gfx1100", 100300: "gfx1030"}
        for version, name in cases.items():
            assert cache_mod._gfx_from_target_version(version) == name

    def test_kfd_topology(self, tmp_path: Path) -> None:
        nodes = tmp_path / "nodes"
        for i, props in enumerate(
            [
                "cpu_cores_count 64\nsimd_count 0\ngfx_target_version 0\n",
                "simd_count 1216\nsimd_per_cu 4\ngfx_target_version 90402\n",
                "simd_count 416\nsimd_per_cu 4\ngfx_target_version 90010\n",
            ]
        ):
            (nodes / str(i)).mkdir(parents=True)
            (nodes / str(i) / "properties").write_text(props)
        archs = cache_mod.amd_gpu_archs(nodes)
        assert [(a["gfx"], a["cu"]) for a in archs] == [("gfx942", 304), ("gfx90a", 104)]
        assert cache_mod.visible_gpu_arch(1, archs, env={}) == "gfx90a:104cu"
        assert cache_mod.visible_gpu_arch(0, archs, env={"HIP_VISIBLE_DEVICES": "1"}) == "gfx90a:104cu"
        assert cache_mod.visible_gpu_arch(0, archs, env={"HIP_VISIBLE_DEVICES": "GPU-abc"}) == "unknown"
        assert cache_mod.visible_gpu_arch(5, archs, env={}) == "unknown"

    def test_cpu_signature_is_stable(self) -> None:
        assert cache_mod.cpu_signature() == cache_mod.cpu_signature()


# ---------------------------------------------------------------------------------------------- ORT engine
@pytest.fixture(scope="module")
def model():
    return models.tiny_cnn()


@pytest.fixture(scope="module")
def x(model):
    return models.random_inputs(model, batch=2, seed=5)["input"]


@pytest.fixture(scope="module")
def want(model, x):
    with amdinfer.load(model, backend="ort", providers=["cpu"], cache=False) as engine:
        return engine.run(x)["logits"]


class TestOrtEngineCache:
    def load(self, model, **kw):
        return amdinfer.load(model, backend="ort", providers=["cpu"], threads=1, **kw)

    def test_second_load_hits(self, tmp_path: Path, model, x, want) -> None:
        with self.load(model, cache_dir=tmp_path) as first:
            assert first.info.cache_hit is False
            np.testing.assert_allclose(first.run(x)["logits"], want, rtol=1e-5, atol=1e-6)
        with self.load(model, cache_dir=tmp_path) as second:
            assert second.info.cache_hit is True
            assert second.info.settings["cache"]["graph_optimization_on_load"] == "disable"
            np.testing.assert_allclose(second.run(x)["logits"], want, rtol=1e-5, atol=1e-6)
        (entry,) = list_entries(tmp_path)
        assert entry.backend == "ort" and entry.path.suffix == ".onnx"
        assert entry.parts["providers"] == ["CPUExecutionProvider"]

    def test_acceptance_call(self, tmp_path: Path) -> None:
        model = models.resnet50(image_size=224, num_classes=10)
        x = models.random_inputs(model, batch=3, seed=0)["input"]
        shapes = {"input": [(1, 3, 224, 224), (8, 3, 224, 224)]}
        with amdinfer.load(
            model, backend="ort", shapes=shapes, batch_buckets=[1, 2, 4, 8], cache_dir=tmp_path, providers=["cpu"]
        ) as cold:
            a = cold.run(x)["logits"]
            assert cold.info.cache_hit is False and cold.info.compile_seconds > 0
        with amdinfer.load(
            model, backend="ort", shapes=shapes, batch_buckets=[1, 2, 4, 8], cache_dir=tmp_path, providers=["cpu"]
        ) as warm:
            assert warm.info.cache_hit is True
            b = warm.run(x)["logits"]
        assert a.shape == (3, 10)
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)

    def test_corrupt_entry_is_rebuilt(self, tmp_path: Path, model, x, want, caplog) -> None:
        with self.load(model, cache_dir=tmp_path):
            pass
        (entry,) = list_entries(tmp_path)
        entry.path.write_bytes(entry.path.read_bytes()[:-100])
        with caplog.at_level(logging.WARNING, logger="amdinfer.cache"):
            with self.load(model, cache_dir=tmp_path) as engine:
                assert engine.info.cache_hit is False
                np.testing.assert_allclose(engine.run(x)["logits"], want, rtol=1e-5, atol=1e-6)
        assert "truncated" in caplog.text
        with self.load(model, cache_dir=tmp_path) as engine:
            assert engine.info.cache_hit is True

    def test_unloadable_onnx_in_a_sound_entry_is_rebuilt(self, tmp_path: Path, model, x, want, caplog) -> None:
        # A manifest that matches its (bad) artefact: only the runtime can tell; the load fails and is rebuilt.
        key = None
        with self.load(model, cache_dir=tmp_path) as engine:
            key = engine.info.settings["cache"]["key"]
        cache = CompiledModelCache(tmp_path)
        parts = cache.manifest(key)["parts"]
        cache.put(key, lambda tmp: tmp.write_bytes(b"not an onnx model"), parts=parts, suffix=".onnx")
        with caplog.at_level(logging.WARNING, logger="amdinfer.cache"):
            with self.load(model, cache_dir=tmp_path) as engine:
                assert engine.info.cache_hit is False
                np.testing.assert_allclose(engine.run(x)["logits"], want, rtol=1e-5, atol=1e-6)
        assert "could not load it" in caplog.text

    def test_options_change_the_key(self, tmp_path: Path, model) -> None:
        with self.load(model, cache_dir=tmp_path):
            pass
        with self.load(model, cache_dir=tmp_path, graph_optimization="basic") as other:
            assert other.info.cache_hit is False
        with self.load(model, cache_dir=tmp_path, precision="fp16") as half:
            assert half.info.cache_hit is False
        # Three ORT-optimized models, and the fp16 conversion the fp16 one was made from.
        kinds = sorted(e.kind for e in list_entries(tmp_path))
        assert kinds == ["fp16 model", "ort optimized model", "ort optimized model", "ort optimized model"]

    def test_off_by_default_on_through_the_environment(self, tmp_path: Path, model, monkeypatch) -> None:
        monkeypatch.delenv("AMDINFER_CACHE_DIR", raising=False)
        with self.load(model) as engine:
            assert "cache" not in engine.info.settings
        monkeypatch.setenv("AMDINFER_CACHE_DIR", str(tmp_path))
        with self.load(model):
            pass
        with self.load(model) as engine:
            assert engine.info.cache_hit is True

    def test_contradictions(self, tmp_path: Path, model) -> None:
        with pytest.raises(amdinfer.OptionError, match="cache=False"):
            self.load(model, cache_dir=tmp_path, cache=False)
        with pytest.raises(amdinfer.OptionError, match="optimized_model_path"):
            self.load(model, cache_dir=tmp_path, optimized_model_path=tmp_path / "o.onnx")
        with pytest.raises(amdinfer.OptionError, match="cache: got 'yes'"):
            self.load(model, cache="yes")


# ---------------------------------------------------------------------------------------------- clearing while loading
class TestClearWhileLoading:
    """Another process may clear the cache at any moment; a load never fails because of it (docs/cache.md)."""

    def load(self, model, **kw):
        return amdinfer.load(model, backend="ort", providers=["cpu"], threads=1, **kw)

    def test_entry_removed_between_check_and_load_is_rebuilt(
        self, tmp_path: Path, model, x, want, monkeypatch, caplog
    ) -> None:
        with self.load(model, cache_dir=tmp_path):
            pass
        real_get = CompiledModelCache.get

        def get_then_cleared(self, key, validate=None, *, parts=None):
            path = real_get(self, key, validate, parts=parts)
            if path is not None:
                clear(self.root)  # the other process, right after the check
            return path

        monkeypatch.setattr(CompiledModelCache, "get", get_then_cleared)
        with caplog.at_level(logging.INFO, logger="amdinfer.cache"):
            with self.load(model, cache_dir=tmp_path) as engine:
                assert engine.info.cache_hit is False
                np.testing.assert_allclose(engine.run(x)["logits"], want, rtol=1e-5, atol=1e-6)
        assert "was removed while it was loaded; rebuilding it" in caplog.text
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]  # not a damaged entry
        monkeypatch.undo()
        with self.load(model, cache_dir=tmp_path) as engine:  # the rebuilt entry is stored
            assert engine.info.cache_hit is True

    def test_clear_leaves_a_build_in_progress_alone(self, cache: CompiledModelCache) -> None:
        key = cache.key(**PARTS)
        seen = []

        def build(tmp: Path) -> str:
            assert tmp.parent == cache.root / ".building" and tmp.exists()
            seen.append(clear(cache.root))  # the other process clears while this one compiles
            assert tmp.exists() and (cache.root / ".locks" / f"{key}.lock").exists()
            with open(tmp, "wb") as f:  # how ONNX Runtime writes optimized_model_filepath: needs the folder
                f.write(b"compiled")
            return "built"

        assert cache.get_or_build(key, parts=PARTS, build=build, load=lambda p: "loaded") == ("built", False)
        assert seen == [0] and cache.get(key, parts=PARTS).read_bytes() == b"compiled"
        assert clear(cache.root) == 1 and not (cache.root / ".building").exists()
        assert not (cache.root / ".locks").exists()  # nobody holds the lock now: clear removes it

    def test_build_whose_scratch_folder_vanished_runs_again_uncached(self, cache: CompiledModelCache, caplog) -> None:
        import shutil

        key = cache.key(**PARTS)
        places = []

        def build(tmp: Path) -> str:  # a build that could not take the lock, its folder removed meanwhile
            places.append(tmp)
            if len(places) == 1:
                shutil.rmtree(tmp.parent)
            with open(tmp, "wb") as f:  # FileNotFoundError on the first call, as ONNX Runtime's "SystemError : 2"
                f.write(b"compiled")
            return "built"

        with caplog.at_level(logging.WARNING, logger="amdinfer.cache"):
            assert cache.get_or_build(key, parts=PARTS, build=build, load=lambda p: "x") == ("built", False)
        assert len(places) == 2 and cache.root not in places[1].parents and not places[1].exists()
        assert "was removed while it was built (cache cleared meanwhile?)" in caplog.text
        assert cache.get(key, parts=PARTS) is None  # not cached, and the next load builds again

    def test_a_genuine_build_failure_is_not_retried(self, cache: CompiledModelCache) -> None:
        calls = []

        def build(tmp: Path) -> str:
            calls.append(tmp)
            raise ValueError("the model does not compile")

        with pytest.raises(ValueError, match="does not compile"):
            cache.get_or_build(cache.key(**PARTS), parts=PARTS, build=build, load=str)
        assert len(calls) == 1

    def test_builder_that_writes_nothing_stores_nothing(self, cache: CompiledModelCache, caplog) -> None:
        key = cache.key(**PARTS)
        with caplog.at_level(logging.WARNING, logger="amdinfer.cache"):
            assert cache.get_or_build(key, parts=PARTS, build=lambda tmp: "obj", load=str) == ("obj", False)
        assert "wrote no artefact" in caplog.text and cache.entries() == []

    def test_clear_leaves_a_held_lock_file(self, cache: CompiledModelCache) -> None:
        from amdinfer.cache._lock import holding_if_free

        key = cache.key(**PARTS)
        lock = cache.root / ".locks" / f"{key}.lock"
        with cache.lock(key) as got:
            assert got
            with holding_if_free(lock) as free:
                assert not free
            clear(cache.root)
            assert lock.exists()
        clear(cache.root)
        assert not lock.exists()

    def test_lock_file_deleted_before_it_was_locked_is_not_shared(self, cache: CompiledModelCache, monkeypatch) -> None:
        # `clear` deletes a free lock file right after a builder opened it: the builder must lock the new file,
        # or a third process creating it would hold "the" lock at the same time.
        import fcntl

        from amdinfer.cache._lock import holding_if_free

        key = cache.key(**PARTS)
        lock = cache.root / ".locks" / f"{key}.lock"
        real_flock, calls = fcntl.flock, []

        def flock_after_clear(fd, op):
            calls.append(op)
            if len(calls) == 1:
                clear(cache.root)  # between open and flock
            return real_flock(fd, op)

        monkeypatch.setattr(fcntl, "flock", flock_after_clear)
        with cache.lock(key) as got:
            monkeypatch.setattr(fcntl, "flock", real_flock)
            assert got and lock.exists()
            with holding_if_free(lock) as free:
                assert not free  # the file now at the path is the one held
        # the builder on the deleted file, clear's own lock before deleting it, the builder on the new file
        assert [op for op in calls if op != fcntl.LOCK_UN] == [fcntl.LOCK_EX | fcntl.LOCK_NB] * 3

    def test_clearing_process_against_loads(self, tmp_path: Path, model) -> None:
        """The issue's race: a process clearing in a loop while this one loads 60 times; no load fails."""
        root = tmp_path / "c"
        with self.load(model, cache_dir=root):
            pass
        ctx = mp.get_context("spawn")
        stop = ctx.Event()
        clearer = ctx.Process(target=_clear_until, args=(str(root), stop))
        clearer.start()
        try:
            for _ in range(60):
                with self.load(model, cache_dir=root):
                    pass
        finally:
            stop.set()
            clearer.join(timeout=60)
        assert clearer.exitcode == 0


def _clear_until(root: str, stop) -> None:
    while not stop.is_set():
        clear(root)
