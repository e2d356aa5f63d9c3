"""``transformer_fusion=``: ONNX Runtime's transformer optimizer as a preparation of the ORT engine.

Truth: the unfused graph run by ONNX Runtime (and, for the synthetic encoder, the NumPy reference engine); the
fused op counts are the ones ONNX Runtime's optimizer reports for BERT-base-like graphs (one Attention, two
SkipLayerNormalization and one BiasGelu per layer).
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from _minilm import POOLED_OUT, TOKENIZER, checked_model_path, needs_model, needs_tokenizers, sentences

import amdinfer
from amdinfer.cli import build_parser, main
from amdinfer.engines.ort import _transformer
from amdinfer.engines.ort._transformer import TransformerFusion, has_attention_pattern
from amdinfer.errors import BackendUnavailableError, ModelError, OptionError
from amdinfer.model import ModelSource
from amdinfer.testing.models import tiny_cnn, transformer_encoder

pytest.importorskip("onnxruntime")
pytest.importorskip("sympy", reason="ONNX Runtime's transformer optimizer needs sympy")

CPU = ["CPUExecutionProvider"]
#: The providers "auto" fuses for by default (the GPU ones), kept before the fixture below widens them.
AUTO_DEFAULT = _transformer.AUTO_PROVIDERS
MINILM_FUSED = {"Attention": 3, "BiasGelu": 3, "EmbedLayerNormalization": 1, "SkipLayerNormalization": 6}


def _cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


def _ops(model: onnx.ModelProto) -> set[str]:
    return {n.op_type for n in model.graph.node}


def _tokens(texts: list[str], length: int | None) -> dict[str, np.ndarray]:
    """Token ids and mask of ``texts``, right-padded to ``length`` (``None``: the longest)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(TOKENIZER))
    tok.no_padding()
    ids = [e.ids for e in tok.encode_batch(texts)]
    width = length or max(len(i) for i in ids)
    out = np.zeros((len(ids), width), np.int64)
    mask = np.zeros_like(out)
    for row, seq in enumerate(ids):
        out[row, : len(seq)] = seq
        mask[row, : len(seq)] = 1
    return {"input_ids": out, "attention_mask": mask}


@pytest.fixture(scope="module", autouse=True)
def _cpu_stands_in_for_a_gpu():
    """``"auto"`` fuses for the GPU providers only (``AUTO_PROVIDERS``); in this module the CPU EP stands in for
    one, so that auto's decisions (pattern, quantizer, missing optimizer, cache) run here."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_transformer, "AUTO_PROVIDERS", (*AUTO_DEFAULT, "CPUExecutionProvider"))
        yield


def test_auto_leaves_the_cpu_alone_by_default(encoder, monkeypatch) -> None:
    monkeypatch.setattr(_transformer, "AUTO_PROVIDERS", AUTO_DEFAULT)
    assert "CPUExecutionProvider" not in AUTO_DEFAULT and "CUDAExecutionProvider" in AUTO_DEFAULT
    with amdinfer.load(encoder, providers=CPU, cache=False) as engine:
        record = engine.info.settings["transformer_fusion"]
        assert record["applied"] is False and "measured no faster" in record["reason"]
        assert "Attention" not in _ops(engine.model.proto)
    with amdinfer.load(encoder, providers=CPU, cache=False, transformer_fusion=True) as engine:
        assert "Attention" in _ops(engine.model.proto)


# ---------------------------------------------------------------------------------------------- MiniLM
@pytest.fixture(scope="module")
def minilm(tmp_path_factory):
    """(unfused engine, fused engine, cache folder) on the trained MiniLM, 2 threads."""
    path = checked_model_path()
    cache = tmp_path_factory.mktemp("fusion-cache")
    unfused = amdinfer.load(path, providers=CPU, threads=2, transformer_fusion=False, cache=False)
    fused = amdinfer.load(path, providers=CPU, threads=2, cache_dir=cache)
    yield unfused, fused, cache
    unfused.close()
    fused.close()


@needs_model
class TestMiniLM:
    def test_auto_fuses_and_records_what(self, minilm) -> None:
        unfused, fused, _ = minilm
        record = fused.info.settings["transformer_fusion"]
        assert record["mode"] == "auto" and record["applied"] is True
        assert record["fused"] == MINILM_FUSED
        assert any(
            n.startswith("transformer fusion: Attention x3, SkipLayerNormalization x6") for n in fused.info.notes
        )
        assert {"Attention", "SkipLayerNormalization"} <= _ops(fused.model.proto)
        assert "Softmax" not in _ops(fused.model.proto)  # the attention really is the contrib op now
        assert unfused.info.settings["transformer_fusion"]["applied"] is False
        assert "Attention" not in _ops(unfused.model.proto)

    @needs_tokenizers
    @pytest.mark.parametrize(("first", "count", "length"), [(0, 1, None), (0, 4, None), (4, 8, 64), (0, 24, 128)])
    def test_fused_equals_unfused_on_the_sentences(self, minilm, first, count, length) -> None:
        unfused, fused, _ = minilm
        texts = sentences()["sentences"][first : first + count]
        feeds = _tokens(texts, length)
        want, got = unfused.run(feeds)[POOLED_OUT], fused.run(feeds)[POOLED_OUT]
        assert np.abs(got - want).max() < 1e-4
        assert _cosine(got, want).min() >= 0.99999

    def test_any_mask_is_honoured(self, minilm) -> None:
        # Left padding and a hole in the mask: the optimizer's 1-D mask index (its BERT default) would be wrong here.
        unfused, fused, _ = minilm
        rng = np.random.default_rng(0)
        ids = rng.integers(1000, 20000, (3, 24)).astype(np.int64)
        mask = np.ones_like(ids)
        mask[0, :7] = 0
        mask[1, 5:11] = 0
        mask[2, 16:] = 0
        feeds = {"input_ids": ids, "attention_mask": mask}
        assert np.abs(fused.run(feeds)[POOLED_OUT] - unfused.run(feeds)[POOLED_OUT]).max() < 1e-4

    def test_second_load_is_a_cache_hit(self, minilm) -> None:
        _, first, cache = minilm
        assert first.info.settings["transformer_fusion"]["cache"]["hit"] is False
        with amdinfer.load(checked_model_path(), providers=CPU, threads=2, cache_dir=cache) as again:
            record = again.info.settings["transformer_fusion"]
            assert record["cache"]["hit"] is True and record["cache"]["key"] == first.info.settings[
                "transformer_fusion"]["cache"]["key"]  # fmt: skip
            assert record["fused"] == MINILM_FUSED
            assert again.info.cache_hit  # the ORT-optimized session of the fused graph, too
            assert again.model.sha256 == first.model.sha256

    def test_the_given_model_is_not_modified(self, minilm) -> None:
        proto = onnx.load(str(checked_model_path()))
        before = proto.SerializeToString()
        source = ModelSource.from_any(proto)
        fused = TransformerFusion(True, cache=None).apply("CPUExecutionProvider", source, amdinfer.EngineInfo("ort"))
        assert fused is not source and "Attention" in _ops(fused.proto)
        assert source.proto.SerializeToString() == before


# ---------------------------------------------------------------------------------------------- synthetic encoder
@pytest.fixture(scope="module")
def encoder() -> onnx.ModelProto:
    return transformer_encoder(num_layers=2)


def test_the_synthetic_encoder_fuses_and_matches_the_reference(encoder) -> None:
    x = np.random.default_rng(1).standard_normal((3, 10, 64)).astype(np.float32)
    with amdinfer.load(encoder, providers=CPU) as fused, amdinfer.load(encoder, backend="reference") as ref:
        assert fused.info.settings["transformer_fusion"]["fused"] == {
            "Attention": 2,
            "BiasGelu": 2,
            "SkipLayerNormalization": 4,
        }
        assert np.abs(fused.run(x)["output"] - ref.run(x)["output"]).max() < 1e-4


def test_fp16_converts_the_fused_graph(encoder) -> None:
    x = np.random.default_rng(2).standard_normal((2, 12, 64)).astype(np.float32)
    with (
        amdinfer.load(encoder, providers=CPU, precision="fp16") as half,
        amdinfer.load(encoder, backend="reference") as ref,
    ):
        graph = half.model.proto.graph
        assert "Attention" in _ops(half.model.proto)  # fused first, then converted
        assert any(t.data_type == onnx.TensorProto.FLOAT16 for t in graph.initializer)
        got, want = half.run(x)["output"], ref.run(x)["output"]
        assert got.dtype == np.float32  # fp32 IO kept
        assert _cosine(got.reshape(-1, 64), want.reshape(-1, 64)).min() >= 0.999


def test_auto_leaves_a_cnn_alone_quietly() -> None:
    model = tiny_cnn()
    with amdinfer.load(model, providers=CPU) as engine:
        record = engine.info.settings["transformer_fusion"]
        assert record["applied"] is False and "no attention pattern" in record["reason"]
        assert not [n for n in engine.info.notes if "transformer fusion" in n]
        assert engine.model.sha256 == ModelSource.from_any(model).sha256


def test_required_fusion_that_finds_nothing_is_an_error() -> None:
    with pytest.raises(ModelError, match=r"transformer_fusion=True: model .*found no attention.*Softmax x0"):
        amdinfer.load(tiny_cnn(), providers=CPU, transformer_fusion=True)


def test_auto_that_finds_nothing_keeps_the_graph_and_says_why() -> None:
    # A Softmax between two MatMuls that is no attention block: the cheap gate passes, the optimizer finds nothing.
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.eye(4, dtype=np.float32), "w")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["a"]),
        helper.make_node("Softmax", ["a"], ["s"], axis=-1),
        helper.make_node("MatMul", ["s", "w"], ["y"]),
    ]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", 4]) for n in ("x", "y")]
    model = helper.make_model(
        helper.make_graph(nodes, "g", io[:1], io[1:], [w]), opset_imports=[helper.make_opsetid("", 17)]
    )
    assert has_attention_pattern(model)
    with amdinfer.load(model, providers=CPU) as engine:
        assert engine.info.settings["transformer_fusion"]["applied"] is False
        assert any("transformer fusion: not applied" in n and "original graph is kept" in n for n in engine.info.notes)
        x = np.ones((2, 4), np.float32)
        assert np.allclose(engine.run(x)["y"], np.full((2, 4), 0.25))
    with pytest.raises(ModelError, match="found no attention or SkipLayerNormalization pattern"):
        amdinfer.load(model, providers=CPU, transformer_fusion=True)


@pytest.mark.parametrize("value", ["on", "yes", 1, None])
def test_bad_values_are_refused(value) -> None:
    with pytest.raises(OptionError, match=r"transformer_fusion: got .*expected 'auto', True or False"):
        amdinfer.load(tiny_cnn(), providers=CPU, transformer_fusion=value)


def test_providers_that_fuse_themselves_are_skipped_or_refused(encoder) -> None:
    source = ModelSource.from_any(encoder)
    info = amdinfer.EngineInfo("ort")
    assert TransformerFusion("auto", cache=None).apply("MIGraphXExecutionProvider", source, info) is source
    assert "MIGraphXExecutionProvider does not take" in info.settings["transformer_fusion"]["reason"]
    with pytest.raises(OptionError, match="transformer_fusion=True: TensorrtExecutionProvider does not take"):
        TransformerFusion(True, cache=None).apply("TensorrtExecutionProvider", source, info)


def test_a_missing_optimizer_is_said(encoder, monkeypatch) -> None:
    def unavailable():
        raise BackendUnavailableError("transformer_fusion: ONNX Runtime's transformer optimizer cannot be imported")

    monkeypatch.setattr(_transformer, "_optimizer", unavailable)
    with amdinfer.load(encoder, providers=CPU, cache=False) as engine:  # a cached fused model needs no optimizer
        assert engine.info.settings["transformer_fusion"]["applied"] is False
        assert any("transformer fusion: not applied: transformer_fusion: ONNX" in n for n in engine.info.notes)
    with pytest.raises(BackendUnavailableError, match="cannot be imported"):
        amdinfer.load(encoder, providers=CPU, transformer_fusion=True, cache=False)


def test_the_cli_flag(encoder, tmp_path, capsys) -> None:
    from amdinfer.cli._common import engine_options

    path = tmp_path / "encoder.onnx"
    onnx.save(encoder, path)
    parse = build_parser().parse_args
    for flag, value in (("on", True), ("off", False), ("auto", "auto")):
        args = parse(["run", str(path), "--transformer-fusion", flag])
        assert engine_options(args, args.backend)["transformer_fusion"] == value
    assert "transformer_fusion" not in engine_options(parse(["run", str(path)]), "auto")
    argv = ["run", str(path), "--providers", "cpu", "--input-shapes", "input:1x4x64", "--json", "-q"]
    for flag, fused in (("on", True), ("off", False)):
        assert main([*argv, "--transformer-fusion", flag]) == 0, capsys.readouterr().err
        notes = json.loads(capsys.readouterr().out)["notes"]
        assert any(n.startswith("transformer fusion: Attention x2") for n in notes) is fused
    assert main(["run", str(path), "--transformer-fusion", "maybe"]) == 2


def test_int8_quantizers_get_the_unfused_graph_unless_fusion_is_required(encoder) -> None:
    from amdinfer.quantize import Int8Quantizer

    rng = np.random.default_rng(3)
    calibration = [rng.standard_normal((2, 8, 64)).astype(np.float32) for _ in range(2)]
    with amdinfer.load(encoder, providers=CPU, quantizer=Int8Quantizer(calibration=calibration)) as auto:
        record = auto.info.settings["transformer_fusion"]
        assert record["applied"] is False and "Int8Quantizer quantizes the unfused graph" in record["reason"]
        assert "Attention" not in _ops(auto.model.proto)
    quantizer = Int8Quantizer(calibration=calibration)
    with amdinfer.load(encoder, providers=CPU, quantizer=quantizer, transformer_fusion=True) as fused:
        assert {"Attention", "DequantizeLinear"} <= _ops(fused.model.proto)  # fused first, then quantized
