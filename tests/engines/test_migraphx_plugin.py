"""AMD's MIGraphX plugin EP (``onnxruntime-ep-migraphx``): found, preferred, its option names, nothing dropped, the
compiled-program cache hit through the plugin's own ``cache_dir``.

No plugin library offers a device on a CPU-only machine, so the plugin is played at ONNX Runtime's Python API by
``fake_migraphx_plugin.FakeOrt``, which reads only the option names of the plugin's sources and ignores the rest
silently, as the plugin does. The package itself is "installed" as a ``.dist-info`` folder and a module on the
``PYTHONPATH`` of a fresh interpreter (registration is once per process). The old code passed the built-in EP's
``migraphx_model_cache_dir``, which the plugin drops: these tests fail on it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

_PRELUDE = """
import json, sys
sys.path.insert(0, {here!r})
import numpy as np, amdinfer
import amdinfer.engines.ort.engine as ort_engine
from fake_migraphx_plugin import FakeOrt
from amdinfer.testing.models import tiny_cnn, random_inputs
fake = FakeOrt()
ort_engine.import_ort = lambda: fake
def load(**kw):
    kw.setdefault("io_binding", False)
    return amdinfer.load(tiny_cnn(), backend="ort", **kw)
"""


def _package(site: Path, version: str = "1.0.0", library: bool = True) -> None:
    info = site / f"onnxruntime_ep_migraphx-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: onnxruntime-ep-migraphx\nVersion: {version}\n")
    (info / "top_level.txt").write_text("onnxruntime_ep_migraphx\n")
    if not library:
        return
    module = site / "onnxruntime_ep_migraphx"
    module.mkdir()
    (site / "libmigraphx-ep.so").write_bytes(b"")  # FakeOrt registers it without loading it
    (module / "__init__.py").write_text(
        f"def get_library_path():\n    return {str(site / 'libmigraphx-ep.so')!r}\n"
        "def get_ep_names():\n    return ['MIGraphXExecutionProvider']\n"
    )


def _run(site: Path, code: str) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH", "")]))}
    script = _PRELUDE.format(here=str(HERE)) + code
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def site(tmp_path: Path) -> Path:
    _package(tmp_path / "site")
    return tmp_path / "site"


def test_options_go_under_the_plugins_own_names_and_none_is_dropped(site: Path) -> None:
    out = _run(
        site,
        "e = load(providers=['migraphx'], precision='fp16', batch_buckets=[1, 4])\n"
        "s = fake.sessions[-1]\n"
        "from amdinfer.engines.ort import provider_options\n"
        "graphs = provider_options('MIGraphXExecutionProvider', gpu_graphs=True)\n"
        "print(json.dumps({'providers': e.info.providers, 'read': s.read, 'dropped': s.dropped, 'graphs': graphs,\n"
        "                  'package': e.info.settings['plugin_ep']['package'], 'device': e.info.device}))\n",
    )
    assert out["providers"] == ["MIGraphXExecutionProvider", "CPUExecutionProvider"]
    assert out["package"] == "onnxruntime-ep-migraphx" and out["device"] == "migraphx:0"
    assert out["dropped"] == []
    read = out["read"]
    assert read["fp16_enable"] == "1" and read["compile_batches"] == "1,4"
    assert out["graphs"] == {"hip_graph_enable": "1"}  # graph capture (IO binding on a real GPU) under its name
    assert read["exhaustive_tune"] == "1"  # amdinfer's tuned default for MIGraphX
    assert "migraphx_fp16_enable" not in read and "device_id" not in read  # a plugin's device is chosen, not set


def test_a_dynamic_batch_range_becomes_max_dynamic_batch(site: Path) -> None:
    out = _run(
        site,
        "e = load(providers=['migraphx'], shapes={'input': [(1, 3, 32, 32), (16, 3, 32, 32)]})\n"
        "print(json.dumps(fake.sessions[-1].read))\n",
    )
    assert out["max_dynamic_batch"] == "16"


def test_the_compiled_program_cache_is_hit_through_cache_dir(site: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    out = _run(
        site,
        f"cache = {str(cache)!r}\n"
        "first = load(providers=['migraphx'], cache_dir=cache)\n"
        "second = load(providers=['migraphx'], cache_dir=cache)\n"
        "x = random_inputs(tiny_cnn(), batch=2, seed=0)\n"
        "ref = amdinfer.load(tiny_cnn(), backend='reference').run(x)['logits']\n"
        "err = float(np.abs(second.run(x)['logits'] - ref).max())\n"
        "print(json.dumps({'first': first.info.settings['cache'], 'first_hit': first.info.cache_hit,\n"
        "                  'second': second.info.settings['cache'], 'second_hit': second.info.cache_hit,\n"
        "                  'compiled': fake.compiled, 'loaded': fake.loaded, 'err': err,\n"
        "                  'read': fake.sessions[-1].read.get('cache_dir')}))\n",
    )
    folder = cache / "ort-migraphx-plugin-ep"
    assert out["read"] == str(folder)
    assert out["first_hit"] is False and out["first"]["programs_written"] == 1
    assert out["second_hit"] is True and out["second"]["programs_written"] == 0
    assert (out["compiled"], out["loaded"]) == (1, 1)
    assert len(list(folder.glob("*.mxr"))) == 1
    assert out["err"] < 1e-4
    from amdinfer.cache import clear

    clear(cache)
    assert not folder.exists()


def test_an_option_the_plugin_would_drop_is_refused_with_its_replacement(site: Path) -> None:
    out = _run(
        site,
        "from amdinfer.errors import OptionError\n"
        "said = {}\n"
        "for key in ['migraphx_model_cache_dir', 'migraphx_mem_limit', 'no_such_option']:\n"
        "    try:\n"
        "        load(providers=[('migraphx', {key: '1'})])\n"
        "    except OptionError as exc:\n"
        "        said[key] = str(exc)\n"
        "ok = load(providers=[('migraphx', {'migraphx_exhaustive_tune': '0', 'compute_mode': 'eager'})])\n"
        "said['alias'] = fake.sessions[-1].read\n"
        "print(json.dumps(said))\n",
    )
    renamed = out["migraphx_model_cache_dir"]
    assert renamed.startswith("provider option 'migraphx_model_cache_dir': MIGraphXExecutionProvider from ")
    assert "onnxruntime-ep-migraphx 1.0.0" in renamed and "use 'cache_dir'" in renamed
    assert "has no such setting" in out["migraphx_mem_limit"]
    assert "'cache_dir'" in out["no_such_option"] and "'fp16_enable'" in out["no_such_option"]
    assert out["alias"]["migraphx_exhaustive_tune"] == "0"  # one of the nine old names the plugin still reads


def test_a_knob_the_plugin_lacks_is_said_in_notes(site: Path) -> None:
    out = _run(site, "e = load(providers=['migraphx'], memory_limit=1 << 30)\nprint(json.dumps(e.info.notes))\n")
    assert any("has no equivalent for ['memory_limit']" in n for n in out)


def test_auto_takes_the_plugin_first(site: Path) -> None:
    out = _run(site, "e = load()\nprint(json.dumps(e.info.providers))\n")
    assert out[0] == "MIGraphXExecutionProvider"


def test_the_placeholder_release_says_so(tmp_path: Path) -> None:
    _package(tmp_path, "0.0.0", library=False)  # what PyPI serves as onnxruntime-ep-migraphx today
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH", "")]))}
    code = (
        "import amdinfer\nfrom amdinfer.testing.models import tiny_cnn\n"
        "try:\n    amdinfer.load(tiny_cnn(), providers=['migraphx'])\n"
        "except amdinfer.BackendUnavailableError as exc:\n    print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    said = done.stdout.strip()
    assert said.startswith(
        "provider 'MIGraphXExecutionProvider': onnxruntime-ep-migraphx 0.0.0 is a placeholder release without a plugin"
    )
    assert "onnxruntime >= 1.24" in said and "[migraphx]" in said


def test_the_plugin_record_keeps_the_cache_key_the_built_in_ep_reads_apart() -> None:
    from amdinfer.engines.ort._providers import PLUGIN_PROVIDERS, PROVIDERS

    built_in, plugin = PROVIDERS["MIGraphXExecutionProvider"], PLUGIN_PROVIDERS["MIGraphXExecutionProvider"]
    assert built_in.option_names("model_cache_dir") == ("migraphx_model_cache_dir",)
    assert plugin.option_names("model_cache_dir") == ("cache_dir",)
    assert plugin.declared is not None and "migraphx_model_cache_dir" not in plugin.declared
    assert "migraphx_model_cache_dir" not in plugin.aliases
    # every option amdinfer can set on the plugin is one it reads
    names = {o.name for opts in plugin.options.values() for o in opts}
    names |= {k for p in plugin.precision.values() for k in p}
    assert names <= plugin.declared
