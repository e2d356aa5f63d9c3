"""The precision certificate: JSON round trip and checks on read, the model it travels in, engine.info, the CLI
(quantize --certificate, inspect, cache list), and a cache hit that reuses the stored verdict."""

from __future__ import annotations

import hashlib
import json
import logging

import numpy as np
import onnx
import pytest

import amdinfer
from amdinfer.cli import main
from amdinfer.errors import CertificateError
from amdinfer.quantize import (
    CERTIFICATE_KEY,
    Int8Quantizer,
    PrecisionCertificate,
    attach_certificate,
    certify,
    evaluate,
    model_sha256,
    read_certificate,
)
from amdinfer.testing.models import random_inputs, tiny_cnn


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AMDINFER_CACHE_DIR", str(tmp_path / "amdinfer-cache"))


@pytest.fixture(scope="module")
def certified():
    """(float model, int8 model carrying its certificate, the certificate, held-out feeds)."""
    model = tiny_cnn(seed=0)
    calib = [random_inputs(model, batch=4, seed=s) for s in range(4)]
    q = Int8Quantizer(calibration=calib, progress=False, cache=False)
    qmodel = q.quantize(model)
    held_out = [random_inputs(model, batch=4, seed=s) for s in range(10, 14)]
    report = evaluate(qmodel, model, held_out, task="classify")
    cert = certify(report, float_model=model, quantized_model=qmodel, data=held_out, quantizer=q)
    cert.attach(qmodel)
    return model, qmodel, cert, held_out


def _copy(proto: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    return out


# ---------------------------------------------------------------------------------------------- the record
def test_json_round_trip_keeps_every_field(certified, tmp_path) -> None:
    model, _qmodel, cert, _held_out = certified
    back = PrecisionCertificate.from_json(cert.to_json(indent=2))
    assert back == cert
    assert PrecisionCertificate.from_json(cert.save(tmp_path / "c.json").read_text()) == cert
    doc = json.loads(cert.to_json())
    assert doc["format"] == "amdinfer.precision_certificate" and doc["version"] == 1
    assert doc["speed"] == "not measured"  # nothing was timed: nothing invented
    assert set(doc["versions"]) == {"amdinfer", "onnxruntime", "onnx", "numpy"}
    assert doc["versions"]["onnx"] == onnx.__version__ and doc["versions"]["numpy"] == np.__version__
    assert doc["float_sha256"] == hashlib.sha256(model.SerializeToString()).hexdigest()
    assert doc["data"]["samples"] == 4 and doc["data"]["items"] == 16  # 4 batches of 4
    # the threshold is the report's bound, with the value the report measured
    (top1,) = [t for t in doc["thresholds"] if t["metric"] == "top1"]
    assert top1["bound"] == 0.97 and top1["value"] == cert.metrics["top1"]


def test_layers_record_what_was_quantized(certified) -> None:
    _, qmodel, cert, _ = certified
    convs = [n.name for n in qmodel.graph.node if n.op_type in ("Conv", "Gemm", "MatMul")]
    assert [layer.node for layer in cert.layers] == convs
    assert {layer.precision for layer in cert.layers} == {"int8"}


def test_the_detector_head_is_recorded_in_float(quiet_root_logger) -> None:
    from amdinfer.quantize._certify import layer_notes, layer_precisions
    from amdinfer.testing.models import yolov8

    det = yolov8(image_size=64, num_classes=2)
    q = Int8Quantizer(calibration=[random_inputs(det, seed=s) for s in range(2)], progress=False, cache=False,
                      min_cosine=None)  # fmt: skip
    qmodel = q.quantize(det)
    reasons, _ = layer_notes(q)
    layers = {layer.node: layer for layer in layer_precisions(qmodel, reasons=reasons)}
    assert q.head is not None
    for node in q.head.convs:  # the head's last convolutions stay float, and say why
        assert layers[node].precision == "fp32" and layers[node].reason == "detector head"
    others = [layer for name, layer in layers.items() if name not in q.head.float_nodes]
    assert others and all(layer.precision == "int8" for layer in others)


@pytest.mark.parametrize(
    "damage",
    [
        lambda d: d.update(format="someone.else"),
        lambda d: d.update(version=2),
        lambda d: d.pop("verdict"),
        lambda d: d.update(verdict="PROBABLY"),
        lambda d: d.update(quantized_sha256="not a hash"),
        lambda d: d["data"].update(items="many"),
        lambda d: d.update(thresholds=[{"metric": "f1", "op": "~", "bound": 1}]),
        lambda d: d.update(metrics={"f1": "high"}),
    ],
    ids=["format", "version", "missing", "verdict", "hash", "data", "op", "metric"],
)
def test_a_damaged_or_foreign_certificate_is_a_typed_error(certified, damage) -> None:
    doc = certified[2].to_dict()
    damage(doc)
    with pytest.raises(CertificateError, match="precision certificate"):
        PrecisionCertificate.from_dict(doc)


def test_truncated_json_is_a_typed_error(certified) -> None:
    with pytest.raises(CertificateError, match="not valid JSON"):
        PrecisionCertificate.from_json(certified[2].to_json()[:-10])


def test_data_hash_changes_with_the_held_out_data(certified) -> None:
    model, qmodel, cert, held_out = certified
    report = evaluate(qmodel, model, held_out, task="classify")
    again = certify(report, float_model=model, quantized_model=qmodel, data=held_out)
    assert again.data.sha256 == cert.data.sha256  # same arrays, same hash
    changed = [dict(f) for f in held_out]
    changed[2] = {k: v.copy() for k, v in changed[2].items()}
    changed[2]["input"][0, 0, 0, 0] += 1.0  # one value of one sample
    one_value = certify(report, float_model=model, quantized_model=qmodel, data=changed)
    reshaped = [{k: v.reshape(2, 2, *v.shape[1:]) for k, v in f.items()} for f in held_out]  # same bytes
    new_shape = certify(report, float_model=model, quantized_model=qmodel, data=reshaped)
    fewer = certify(report, float_model=model, quantized_model=qmodel, data=held_out[:3])
    hashes = {cert.data.sha256, one_value.data.sha256, new_shape.data.sha256, fewer.data.sha256}
    assert len(hashes) == 4 and fewer.data.samples == 3


def test_summary_and_plot(certified, tmp_path) -> None:
    pytest.importorskip("matplotlib")
    cert = certified[2]
    line = cert.summary()
    assert line.startswith(f"int8 classify {cert.verdict} (evaluate): top1 ") and "speed not measured" in line
    path = cert.plot(tmp_path / "cert.png")
    assert path is not None and (tmp_path / "cert.png").read_bytes()[:4] == b"\x89PNG"


# ---------------------------------------------------------------------------------------------- the model
def test_attach_binds_the_certificate_to_its_model(certified) -> None:
    _, qmodel, cert, _ = certified
    assert [p.key for p in qmodel.metadata_props].count(CERTIFICATE_KEY) == 1
    assert model_sha256(qmodel) == cert.quantized_sha256  # attaching did not change the hash it states
    assert read_certificate(_copy(qmodel)) == cert
    again = attach_certificate(_copy(qmodel), cert)  # replaced, not duplicated
    assert [p.key for p in again.metadata_props].count(CERTIFICATE_KEY) == 1
    with pytest.raises(CertificateError, match="attached only to the model it was made for"):
        cert.attach(tiny_cnn(seed=1))


def test_a_tampered_model_is_not_trusted(certified, caplog) -> None:
    _, qmodel, _cert, _ = certified
    tampered = _copy(qmodel)
    weight = next(t for t in tampered.graph.initializer if t.data_type == onnx.TensorProto.FLOAT)
    arr = onnx.numpy_helper.to_array(weight).copy()
    arr.flat[0] += 1.0
    weight.CopyFrom(onnx.numpy_helper.from_array(arr, weight.name))
    with caplog.at_level(logging.WARNING, logger="amdinfer.quantize"):
        assert read_certificate(tampered) is None
    assert "changed after it was certified" in caplog.text
    with pytest.raises(CertificateError, match="changed after it was certified"):
        read_certificate(tampered, strict=True)
    # a certificate that names another model's hash is refused too
    forged = _copy(qmodel)
    doc = json.loads(next(p.value for p in forged.metadata_props if p.key == CERTIFICATE_KEY))
    doc["quantized_sha256"] = "0" * 64
    next(p for p in forged.metadata_props if p.key == CERTIFICATE_KEY).value = json.dumps(doc)
    assert read_certificate(forged) is None


def test_engine_info_shows_a_loaded_models_certificate(certified, tmp_path) -> None:
    _, qmodel, cert, _ = certified
    path = tmp_path / "q.onnx"
    onnx.save(qmodel, path)
    with amdinfer.load(path, providers=["cpu"], cache=False) as engine:
        shown = engine.info.settings["precision_certificate"]
        assert shown["trusted"] is True and shown["verdict"] == cert.verdict and shown["summary"] == cert.summary()
        assert f"precision certificate: {cert.summary()}" in engine.info.notes


def test_engine_info_says_a_tampered_certificate_is_not_trusted(certified, tmp_path, caplog) -> None:
    _, qmodel, _cert, _ = certified
    tampered = _copy(qmodel)
    tampered.graph.name = "renamed after certification"
    with caplog.at_level(logging.WARNING, logger="amdinfer.quantize"):
        with amdinfer.load(tampered, providers=["cpu"], cache=False) as engine:
            shown = engine.info.settings["precision_certificate"]
            assert shown["trusted"] is False and "changed after it was certified" in shown["problem"]
            assert not any(n.startswith("precision certificate: int8") for n in engine.info.notes)
    assert "not trusted" in caplog.text


# ---------------------------------------------------------------------------------------------- the CLI
def test_inspect_shows_the_certificate(certified, tmp_path, capsys) -> None:
    _, qmodel, cert, _ = certified
    path = tmp_path / "q.onnx"
    onnx.save(qmodel, path)
    assert main(["inspect", str(path), "--no-coverage"]) == 0
    text = capsys.readouterr().out
    assert f"precision certificate: int8 classify {cert.verdict} (evaluate" in text
    assert f"sha256 {cert.data.sha256[:16]}" in text and "speed       not measured" in text
    assert main(["inspect", str(path), "--no-coverage", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)["precision_certificate"]
    assert doc["trusted"] is True and PrecisionCertificate.from_dict(doc) == cert
    plain = tmp_path / "plain.onnx"
    onnx.save(tiny_cnn(), plain)
    assert main(["inspect", str(plain), "--no-coverage", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["precision_certificate"] is None


def test_inspect_says_a_tampered_certificate_is_not_trusted(certified, tmp_path, capsys) -> None:
    tampered = _copy(certified[1])
    tampered.producer_name = "someone"
    path = tmp_path / "t.onnx"
    onnx.save(tampered, path)
    assert main(["inspect", str(path), "--no-coverage"]) == 0
    assert "precision certificate: NOT TRUSTED" in capsys.readouterr().out


def test_quantize_cli_writes_the_certificate(tmp_path, capsys, quiet_root_logger) -> None:
    path = tmp_path / "cnn.onnx"
    onnx.save(tiny_cnn(seed=0), path)
    calib, held = tmp_path / "calib.npz", tmp_path / "held.npz"
    rng = np.random.default_rng(0)
    np.savez(calib, input=rng.random((8, 3, 32, 32), dtype=np.float32))
    held_out = rng.random((12, 3, 32, 32), dtype=np.float32)
    np.savez(held, input=held_out)
    out, cert_path = tmp_path / "q8.onnx", tmp_path / "q8.certificate.json"
    argv = ["quantize", str(path), "--precision", "int8", "--calibration", str(calib), "--eval", str(held)]
    code = main([*argv, "--out", str(out), "--certificate", str(cert_path), "--json", "-q"])
    doc = json.loads(capsys.readouterr().out)
    cert = PrecisionCertificate.from_json(cert_path.read_text())
    assert code in (0, 1) and doc["verdict"] == cert.verdict and doc["certificate"] == cert.to_dict()
    stored = onnx.load(out)
    assert read_certificate(stored, strict=True) == cert  # --out carries it, and it is bound to --out
    assert cert.float_sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    # the held-out data's hash: one feed per row of --eval, as the report ran them
    rows = [{"input": held_out[i : i + 1]} for i in range(12)]
    from amdinfer.quantize._data import data_hash

    assert cert.data.sha256 == data_hash(rows) and cert.data.samples == 12
    if pytest.importorskip("matplotlib"):
        assert cert_path.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"


def test_quantize_cli_refuses_a_certificate_path_that_is_not_json(tmp_path, capsys) -> None:
    path = tmp_path / "cnn.onnx"
    onnx.save(tiny_cnn(), path)
    argv = ["quantize", str(path), "--precision", "fp16", "--out", str(tmp_path / "q.onnx")]
    assert main([*argv, "--certificate", str(tmp_path / "c.txt")]) == 1
    assert "--certificate: got" in capsys.readouterr().err and not (tmp_path / "q.onnx").exists()


def test_cache_list_shows_the_verdict(certified, tmp_path, capsys) -> None:
    from amdinfer.cache import CompiledModelCache

    cert = certified[2]
    cache = CompiledModelCache(tmp_path / "c")
    meta = {"model": "q.onnx", "precision_certificate": cert.to_dict()}
    cache.put(cache.key(x=1), lambda t: t.write_bytes(b"m"), meta, parts={"backend": "ort"}, suffix=".onnx")
    bad = dict(meta, precision_certificate={"format": "other"})
    cache.put(cache.key(x=2), lambda t: t.write_bytes(b"n"), bad, parts={"backend": "ort"}, suffix=".onnx")
    cache.put(cache.key(x=3), lambda t: t.write_bytes(b"o"), {"model": "p"}, parts={"backend": "ort"}, suffix=".onnx")
    assert main(["cache", "list", "--cache-dir", str(cache.root)]) == 0
    table = capsys.readouterr().out
    top1 = cert.metrics["top1"]
    assert f"{cert.verdict} top1 {top1:.4f}" in table and "damaged" in table and "certificate" in table.splitlines()[0]
    assert main(["cache", "list", "--cache-dir", str(cache.root), "--json"]) == 0
    entries = {e["key"]: e["certificate"] for e in json.loads(capsys.readouterr().out)["entries"]}
    assert entries[cache.key(x=1)]["verdict"] == cert.verdict and entries[cache.key(x=1)]["trusted"] is True
    assert entries[cache.key(x=2)]["trusted"] is False and entries[cache.key(x=3)] is None


# ---------------------------------------------------------------------------------------------- not recomputed
@pytest.fixture
def measured(monkeypatch) -> list[int]:
    """Counts the int8 accuracy check's runs (each one runs both models on the check's samples)."""
    from amdinfer.quantize import _int8_certificate

    runs: list[int] = []
    real = _int8_certificate.measure

    def spy(*args, **kwargs):
        runs.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(_int8_certificate, "measure", spy)
    return runs


def _int8_engine(model, cache):
    calib = [random_inputs(model, batch=2, seed=s) for s in range(4)]
    q = Int8Quantizer(calibration=calib, progress=False, cache=cache)
    return q, amdinfer.load(model, providers=["cpu"], quantizer=q, cache=False)


def test_a_cache_hit_reuses_the_stored_verdict(tmp_path, measured, capsys) -> None:
    model, cache = tiny_cnn(seed=0), tmp_path / "int8-cache"
    q1, first = _int8_engine(model, cache)
    with first:
        assert len(measured) == 1  # quantized anew: the check ran
        shown = first.info.settings["precision_certificate"]
        assert shown["trusted"] is True and shown["judged_by"] == "int8 accuracy check"
        first_notes = list(first.info.notes)
    q2, second = _int8_engine(model, cache)  # a new quantizer, the same model and data: a cache hit
    with second:
        assert len(measured) == 1  # the stored verdict was reused, the check did not run again
        assert second.info.settings["precision_certificate"] == first.info.settings["precision_certificate"]
        assert q2.agreement is not None and q2.agreement.to_dict() == q1.agreement.to_dict()
        assert q2.certificate == q1.certificate
        assert any("stored verdict, not run again" in n for n in second.info.notes)
        assert not any("not run again" in n for n in first_notes)
    # the entry's manifest holds the certificate: cache list shows its verdict
    assert main(["cache", "list", "--cache-dir", str(cache), "--json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)["entries"]
    assert entry["kind"] == "int8 quantized model" and entry["certificate"]["verdict"] == q1.certificate.verdict
    assert PrecisionCertificate.from_dict(entry["meta"]["precision_certificate"]) == q1.certificate


def test_without_the_cache_the_check_runs_at_each_quantization(measured) -> None:
    model = tiny_cnn(seed=0)
    for n in (1, 2):
        q, engine = _int8_engine(model, False)
        engine.close()
        assert len(measured) == n and q.certificate is not None and not q._reused


def test_a_cached_model_with_a_tampered_certificate_is_checked_again(tmp_path, measured, caplog) -> None:
    from amdinfer.cache import CompiledModelCache

    model, cache = tiny_cnn(seed=0), tmp_path / "int8-cache"
    q1, first = _int8_engine(model, cache)
    first.close()
    (entry,) = CompiledModelCache(cache).entries()
    stored = onnx.load(entry.path)
    prop = next(p for p in stored.metadata_props if p.key == CERTIFICATE_KEY)
    doc = json.loads(prop.value)
    doc["quantized_sha256"] = "0" * 64  # names another model: never trusted
    prop.value = json.dumps(doc)
    onnx.save(stored, entry.path)
    # a consistent entry (manifest hash and size updated) around the forged certificate: only the certificate's
    # own binding can tell
    manifest_path = entry.path.parent / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    digest = hashlib.sha256(entry.path.read_bytes()).hexdigest()
    renamed = entry.path.rename(entry.path.parent / f"{digest[:16]}.onnx")
    manifest.update(size=renamed.stat().st_size, sha256=digest, artefact=renamed.name)
    manifest_path.write_text(json.dumps(manifest))
    with caplog.at_level(logging.WARNING, logger="amdinfer.quantize"):
        q2, second = _int8_engine(model, cache)
    with second:
        assert len(measured) == 2  # the forged certificate was not reused: the check ran again
        assert second.info.settings["precision_certificate"]["trusted"] is True  # the new one, bound to the model
        assert q2.certificate is not None and q2.certificate.quantized_sha256 == q1.certificate.quantized_sha256
    assert "it is for model 000000000000" in caplog.text and "the int8 accuracy check runs again" in caplog.text


def test_a_budget_search_records_the_moved_layer_and_every_sensitivity() -> None:
    from amdinfer.quantize import AutoMixedPrecision
    from amdinfer.testing.models import tiny_cnn as cnn

    planted = cnn()  # conv2's int8 weight scale is ruined by a channel of weights 1000 that a bias keeps at 0
    init = {t.name: t for t in planted.graph.initializer}
    b1 = onnx.numpy_helper.to_array(init["conv1.bias"]).copy()
    b1[0] = -1000.0
    init["conv1.bias"].CopyFrom(onnx.numpy_helper.from_array(b1, "conv1.bias"))
    w2 = onnx.numpy_helper.to_array(init["conv2.weight"]).copy()
    w2[:, 0] = 1000.0
    init["conv2.weight"].CopyFrom(onnx.numpy_helper.from_array(w2, "conv2.weight"))
    calib = [random_inputs(planted, batch=4, seed=s) for s in range(4)]
    held_out = [random_inputs(planted, batch=8, seed=s) for s in range(10, 14)]
    q = Int8Quantizer(calibration=calib, progress=False, cache=False)
    amp = AutoMixedPrecision(q, held_out, budget="top1>=0.99", providers=["migraphx", "cpu"], progress=False)
    result = amp.search(planted)
    report = evaluate(result.model, planted, held_out, task="classify")
    cert = certify(report, float_model=planted, quantized_model=result.model, data=held_out, quantizer=q, search=result)
    layers = {layer.node: layer for layer in cert.layers}
    assert result.plan["conv2"] == "fp16"  # the GPU ladder: fp16 first
    assert layers["conv2"].precision == "fp16" and layers["conv2"].reason == "kept by the mixed-precision search"
    assert layers["conv1"].precision == "int8" and layers["fc"].precision == "int8"
    assert {n: layers[n].sensitivity for n in ("conv1", "conv2", "fc")} == {
        k.node: k.sensitivity for k in result.sensitivities
    }


def test_the_rewrite_cache_manifest_carries_a_rewrites_certificate(certified, tmp_path) -> None:
    from amdinfer.cache import CompiledModelCache
    from amdinfer.engines.ort._rewrite_cache import cached_rewrite
    from amdinfer.model import ModelSource

    model, qmodel, cert, _ = certified
    source = ModelSource(model, name="cnn.onnx")
    cache = CompiledModelCache(tmp_path / "rewrites")
    parts = {"kind": "int8 model", "model": source.sha256}
    _, key, hit = cached_rewrite(cache, parts, source, lambda: source.derived(_copy(qmodel), check=False), "m")
    assert not hit and cache.manifest(key)["meta"]["precision_certificate"] == cert.to_dict()
    again, _, hit = cached_rewrite(cache, parts, source, lambda: pytest.fail("rebuilt"), "m")
    assert hit and read_certificate(again.proto) == cert  # the stored model carries it too
    plain = CompiledModelCache(tmp_path / "plain")
    _, key, _ = cached_rewrite(plain, parts, source, lambda: source, "m")
    assert "precision_certificate" not in plain.manifest(key)["meta"]


def test_a_refused_model_stays_refused_on_a_cache_hit(tmp_path, measured) -> None:
    from amdinfer.errors import AgreementError

    planted = tiny_cnn()  # conv2's int8 weight scale ruined (see test_budget.py): int8 loses the float answers
    init = {t.name: t for t in planted.graph.initializer}
    b1 = onnx.numpy_helper.to_array(init["conv1.bias"]).copy()
    b1[0] = -1000.0
    init["conv1.bias"].CopyFrom(onnx.numpy_helper.from_array(b1, "conv1.bias"))
    w2 = onnx.numpy_helper.to_array(init["conv2.weight"]).copy()
    w2[:, 0] = 1000.0
    init["conv2.weight"].CopyFrom(onnx.numpy_helper.from_array(w2, "conv2.weight"))
    calib = [random_inputs(planted, batch=4, seed=s) for s in range(4)]
    messages = []
    for _ in range(2):
        q = Int8Quantizer(calibration=calib, progress=False, cache=tmp_path / "c")
        with pytest.raises(AgreementError, match="mean cosine") as err:
            q.quantize(planted)
        messages.append(str(err.value))
        assert q.certificate is not None and q.certificate.verdict == "FAIL"
    assert len(measured) == 1 and messages[0] == messages[1]  # the stored FAIL refuses it again, unmeasured
