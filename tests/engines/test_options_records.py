"""Typed option records: one frozen dataclass per backend, built and validated once, shown by ``info`` and the CLI.

The keyword names each backend took before the records existed are a contract (the docs teach them); the ORT
mappings are checked against the options ONNX Runtime itself reports for the session it was given.
"""

from __future__ import annotations

import argparse
import dataclasses
import pickle

import numpy as np
import pytest

import amdinfer
from amdinfer.cli._main import build_parser
from amdinfer.engines import EngineOptions
from amdinfer.engines._fusion import FusionDefaults
from amdinfer.engines.migraphx import MigraphxEngine, MigraphxOptions
from amdinfer.engines.ort import PROVIDERS, OrtEngine, OrtOptions, apply_tuning, provider_options
from amdinfer.engines.ort._options import KNOBS
from amdinfer.engines.reference import ReferenceEngine, ReferenceOptions
from amdinfer.engines.registry import get_backend
from amdinfer.testing import models

#: The keyword parameters of each engine's ``__init__`` before the records (amdinfer at 88ee97c), less ``model``.
BEFORE = {
    "ort": "providers device precision threads inter_op_threads spin_wait graph_optimization optimized_model_path "
    "exhaustive_tune tunable_ops memory_limit model_cache_dir gpu_graphs prefer_nhwc allow_cpu_nodes cache_dir "
    "cache io_binding outputs_on tuning tf32 fp16_io ep_library transformer_fusion shape_sessions warm_shapes "
    "shapes batch_buckets quantizer precision_quantizer",
    "migraphx": "target device precision shapes batch_buckets dynamic_shapes cache_dir cache fast_math "
    "exhaustive_tune offload_copy default_dim_value quantizer",
    "reference": "precision fast keep_fp64 device shapes batch_buckets quantizer",
}
#: Options every record gained since (issue 39: what a shape that was not prepared does).
ADDED = {"on_new_shape"}
RECORDS = {"ort": OrtOptions, "migraphx": MigraphxOptions, "reference": ReferenceOptions}
CPU = {"backend": "ort", "providers": ["cpu"], "threads": 1}


@pytest.fixture(scope="module")
def cnn():
    return models.tiny_cnn()


# ---------------------------------------------------------------------------------------------- the records
@pytest.mark.parametrize("backend", sorted(BEFORE))
def test_the_keywords_are_the_ones_the_engines_took(backend: str) -> None:
    assert set(RECORDS[backend].option_names()) == set(BEFORE[backend].split()) | ADDED
    assert get_backend(backend).options_type() is RECORDS[backend]


@pytest.mark.parametrize("record", list(RECORDS.values()))
def test_each_field_is_typed_defaulted_and_documented_once(record: type[EngineOptions]) -> None:
    doc = record.__doc__ or ""
    for f in dataclasses.fields(record):
        assert f.type, f.name
        assert f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING, f.name
        assert f.metadata["help"], f"{record.__name__}.{f.name} has no help"
        assert doc.count(f"\n        {f.name} (default ") == 1, f"{record.__name__}.{f.name} is not documented once"
    with pytest.raises(dataclasses.FrozenInstanceError):
        record().device = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("backend", "typo", "meant"),
    [("ort", "thread", "threads"), ("migraphx", "fastmath", "fast_math"), ("reference", "keep_fp46", "keep_fp64")],
)
def test_a_misspelt_option_names_it_the_backend_and_the_choices(cnn, backend: str, typo: str, meant: str) -> None:
    with pytest.raises(amdinfer.OptionError) as exc:
        amdinfer.load(cnn, backend=backend, **{typo: 1})
    assert isinstance(exc.value, TypeError)
    msg = str(exc.value)
    assert msg.startswith(f"backend {backend!r}: unknown option(s) [{typo!r}] (did you mean {meant!r}?); ")
    assert RECORDS[backend].__qualname__ in msg and "docs/engines.md" in msg  # where the options are documented
    assert len(msg) < 300, msg  # the closest name, not the whole list


@pytest.mark.parametrize("engine", [OrtEngine, MigraphxEngine, ReferenceEngine])
def test_an_engine_built_directly_checks_its_keywords_the_same_way(cnn, engine: type) -> None:
    with pytest.raises(
        amdinfer.OptionError, match=rf"backend '{engine.backend_name}': unknown option\(s\) \['bogus'\]"
    ):
        engine(cnn, bogus=1)


def test_a_value_out_of_range_is_refused_as_the_record_is_built() -> None:
    with pytest.raises(amdinfer.OptionError, match="graph_optimization: got 'max'"):
        OrtOptions(graph_optimization="max")
    with pytest.raises(amdinfer.OptionError, match="fp16_io=True: got precision='fp32'"):
        OrtOptions(fp16_io=True)
    with pytest.raises(amdinfer.OptionError, match="batch_buckets: got"):
        ReferenceOptions(batch_buckets=[0, 2])
    with pytest.raises(amdinfer.OptionError, match="precision: got 'fp7'"):
        MigraphxOptions(precision="fp7")


def test_values_are_normalized_once() -> None:
    opts = OrtOptions(precision="float16", providers="cuda", batch_buckets=[8, 1, 8], shapes={"x": (1, 3)})
    assert opts.precision == "fp16"
    assert opts.providers == (("CUDAExecutionProvider", {}),)
    assert opts.batch_buckets == (1, 8)
    assert opts.shapes["x"].is_static
    assert dataclasses.replace(opts) == opts  # normalizing a normalized record changes nothing


@pytest.mark.parametrize("backend", sorted(RECORDS))
def test_keywords_rebuild_the_record(backend: str) -> None:
    given = {"precision": "fp16", "batch_buckets": [4, 2], "device": 1}
    if backend == "reference":
        given = {"precision": "fp64", "keep_fp64": True, "fast": False}
    record = RECORDS[backend].from_keywords(given, backend=backend)
    assert RECORDS[backend].from_keywords(record.keywords(), backend=backend) == record
    assert set(record.keywords()) == set(given)


# ---------------------------------------------------------------------------------------------- engines get it
def test_the_engine_receives_the_record_and_info_shows_it(cnn) -> None:
    record = OrtOptions(providers=["cpu"], threads=1, spin_wait=False)
    with OrtEngine(cnn, record) as engine:
        assert engine.info.options is record
        assert engine.info.to_dict()["options"] == record.describe()
        assert engine.info.to_dict()["options"]["providers"] == ["CPUExecutionProvider"]
        assert "  options    providers=['CPUExecutionProvider'], threads=1, spin_wait=False\n" in repr(engine.info)
        copy = pickle.loads(pickle.dumps(engine))
        assert copy.info.options == record
        copy.close()


def test_load_builds_the_record_once_from_the_keywords(cnn) -> None:
    with amdinfer.load(cnn, **CPU) as engine:
        assert isinstance(engine.info.options, OrtOptions)
        assert engine.info.options.keywords() == {"providers": (("CPUExecutionProvider", {}),), "threads": 1}
    with amdinfer.load(cnn, backend="reference", precision="fp64") as engine:
        assert engine.info.options == ReferenceOptions(precision="fp64")


def test_a_record_and_keywords_together_or_the_wrong_record_are_refused(cnn) -> None:
    with pytest.raises(amdinfer.OptionError, match=r"got an options record and the keywords \['threads'\]"):
        OrtEngine(cnn, OrtOptions(providers=["cpu"]), threads=1)
    with pytest.raises(amdinfer.OptionError, match="options: got ReferenceOptions, expected OrtOptions"):
        OrtEngine(cnn, ReferenceOptions())


# ---------------------------------------------------------------------------------------------- same ORT options
@pytest.mark.parametrize(
    ("keywords", "check"),
    [
        ({"threads": 2}, lambda so: so.intra_op_num_threads == 2),
        ({"inter_op_threads": 3}, lambda so: so.inter_op_num_threads == 3),
        ({"graph_optimization": "extended"}, lambda so: so.graph_optimization_level.name == "ORT_ENABLE_EXTENDED"),
        ({"graph_optimization": "disable"}, lambda so: so.graph_optimization_level.name == "ORT_DISABLE_ALL"),
        ({"spin_wait": False}, lambda so: so.get_session_config_entry("session.intra_op.allow_spinning") == "0"),
        ({"spin_wait": True}, lambda so: so.get_session_config_entry("session.intra_op.allow_spinning") == "1"),
    ],
)
def test_session_fields_reach_the_session_options(cnn, keywords: dict, check) -> None:
    with amdinfer.load(cnn, backend="ort", providers=["cpu"], cache=False, **keywords) as engine:
        assert check(engine.session.get_session_options())


def test_the_optimized_model_path_and_raw_provider_options_reach_the_session(cnn, tmp_path) -> None:
    out = tmp_path / "opt.onnx"
    raw = ("cpu", {"arena_extend_strategy": "kSameAsRequested"})
    with amdinfer.load(cnn, backend="ort", providers=[raw], optimized_model_path=out, cache=False) as engine:
        assert engine.session.get_session_options().optimized_model_filepath == str(out)
        # what the session was given (the CPU EP reports no provider options back)
        assert engine.info.settings["provider_options"] == {"CPUExecutionProvider": raw[1]}


@pytest.mark.parametrize(
    ("keywords", "expected"),
    [
        ({"io_binding": True}, {"io_binding": True, "device_memory": "cpu", "outputs_on": "auto"}),
        ({"io_binding": True, "outputs_on": "host"}, {"io_binding": True, "outputs_on": "host"}),
        ({}, {"io_binding": False, "outputs_on": "auto", "fp16_io": False}),
    ],
)
def test_data_path_fields_reach_the_runner(cnn, keywords: dict, expected: dict) -> None:
    with amdinfer.load(cnn, backend="ort", providers=["cpu"], **keywords) as engine:
        got = engine.info.settings["data_path"]
        assert {k: got[k] for k in expected} == expected
        assert engine.run(np.ones((1, 3, 32, 32), np.float32))["logits"].shape == (1, 10)


#: Each typed knob and what ONNX Runtime's sources name it per provider (as provider_options mapped it before).
KNOB_OPTIONS = {
    "CUDAExecutionProvider": (
        {"exhaustive_tune": False, "gpu_graphs": True, "prefer_nhwc": True, "memory_limit": 7, "tunable_ops": True},
        {
            "cudnn_conv_algo_search": "HEURISTIC",
            "enable_cuda_graph": "1",
            "prefer_nhwc": "1",
            "gpu_mem_limit": "7",
            "tunable_op_enable": "1",
            "tunable_op_tuning_enable": "1",
        },
    ),
    "ROCMExecutionProvider": (
        {"exhaustive_tune": True, "gpu_graphs": True, "memory_limit": 5, "tunable_ops": False},
        {
            "miopen_conv_exhaustive_search": "1",
            "enable_hip_graph": "1",
            "gpu_mem_limit": "5",
            "tunable_op_enable": "0",
            "tunable_op_tuning_enable": "0",
        },
    ),
    "MIGraphXExecutionProvider": (
        {"exhaustive_tune": True, "memory_limit": 9, "model_cache_dir": "/tmp/mxr"},
        {"migraphx_exhaustive_tune": "1", "migraphx_mem_limit": "9", "migraphx_model_cache_dir": "/tmp/mxr"},
    ),
}


@pytest.mark.parametrize("provider", sorted(KNOB_OPTIONS))
def test_knob_fields_map_to_the_provider_options(provider: str) -> None:
    given, want = KNOB_OPTIONS[provider]
    record = OrtOptions(tuning=False, io_binding=True, **given)
    assert set(record.knobs) == set(KNOBS) and all(k in OrtOptions.option_names() for k in KNOBS)
    knobs, extra = apply_tuning(provider, record.knobs, record, {})
    assert provider_options(provider, device=1, **knobs) == {"device_id": "1", **want}
    assert extra == {}


def test_tf32_maps_to_the_cuda_option() -> None:
    record = OrtOptions(tf32=False, tuning=False)
    knobs, extra = apply_tuning("CUDAExecutionProvider", record.knobs, record, {})
    assert {**provider_options("CUDAExecutionProvider", **knobs), **extra}["use_tf32"] == "0"


# ---------------------------------------------------------------------------------------------- the command line
def _engine_flags() -> dict[str, argparse.Action]:
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {a.dest: a for a in commands.choices["run"]._actions}


def test_the_run_flags_are_the_record_fields_with_a_flag() -> None:
    actions = _engine_flags()
    flagged = {
        f.name: f
        for record in (EngineOptions, *RECORDS.values())
        for f in dataclasses.fields(record)
        if f.metadata.get("flag") is not None
    }
    assert set(flagged) == {"precision", "device", "providers", "threads", "inter_op_threads",
                            "graph_optimization", "transformer_fusion", "target", "on_new_shape"}  # fmt: skip
    for name, f in flagged.items():
        action = actions[name]
        assert action.option_strings == ["--" + name.replace("_", "-")]
        assert action.help.startswith(f.metadata["help"])
        choices = f.metadata["flag"].choices
        assert (list(choices) if choices else None) == action.choices


def test_the_flags_come_back_as_the_records_keywords(tmp_path) -> None:
    from amdinfer.cli._common import engine_options

    argv = ["run", "m.onnx", "--target", "ref", "--threads", "2", "--transformer-fusion", "off", "--device", "1",
            "--providers", "cuda,cpu", "--no-cache"]  # fmt: skip
    args = build_parser().parse_args(argv)
    options = engine_options(args, args.backend)
    assert options == {"target": "ref", "threads": 2, "transformer_fusion": False, "providers": ["cuda", "cpu"],
                       "cache": False}  # fmt: skip
    assert args.device == 1 and args.precision == "fp32"
    assert OrtOptions.from_keywords({k: v for k, v in options.items() if k != "target"}, backend="ort").threads == 2


# ---------------------------------------------------------------------------------------------- fusion policy
def test_the_fusion_policy_reads_the_provider_record(monkeypatch) -> None:
    from amdinfer.engines.ort import _providers
    from amdinfer.pipeline.fuse._options import _auto_nms_mode, _auto_resize
    from amdinfer.postprocess import Nms

    for name, record in PROVIDERS.items():
        options = {"backend": "ort", "providers": [name]}
        assert _auto_nms_mode(options, []) == record.fusion.nms
        assert _auto_resize(options) == record.fusion.resize
    # a provider whose name says nothing: only its record decides
    fake = dataclasses.replace(PROVIDERS["CPUExecutionProvider"], name="ZzzExecutionProvider", short="zzz")
    monkeypatch.setitem(_providers._DERIVED, fake.name, fake)
    options = {"backend": "ort", "providers": [fake.name]}
    assert _auto_nms_mode(options, [Nms()]) == "per-class"
    assert _auto_nms_mode(options, [Nms(class_offset=4096)]) == "offset"
    monkeypatch.setitem(
        _providers._DERIVED, fake.name, dataclasses.replace(fake, fusion=FusionDefaults("dense", "auto"))
    )
    assert (_auto_nms_mode(options, []), _auto_resize(options)) == ("dense", "auto")
    assert _auto_nms_mode({"backend": "ort", "providers": ["NoSuchExecutionProvider"]}, []) == "offset"


def test_the_fusion_policy_reads_the_backend_entry(monkeypatch) -> None:
    from amdinfer.pipeline.fuse._graph import _NMS_MODES
    from amdinfer.pipeline.fuse._options import _auto_nms_mode

    assert _auto_nms_mode({"backend": "migraphx"}, []) == get_backend("migraphx").fusion.nms == "host"
    assert _auto_nms_mode({"backend": "reference"}, []) == "per-class"
    forms = [r.fusion.nms for r in PROVIDERS.values()] + [get_backend(b).fusion.nms for b in ("migraphx", "reference")]
    assert set(forms) <= set(_NMS_MODES)
    monkeypatch.setattr(get_backend("reference"), "fusion", FusionDefaults("dense"))
    assert _auto_nms_mode({"backend": "reference"}, []) == "dense"
