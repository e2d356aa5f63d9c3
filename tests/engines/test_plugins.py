"""Third-party backends plug in through the ``amdinfer.backends`` entry-point group, with no edit to amdinfer.

The toy backend under ``tests/engines/plugins/`` is "installed" as a distribution: a ``.dist-info`` folder with
its ``entry_points.txt`` on ``sys.path`` (what pip writes, without running pip), in a fresh interpreter.
It must then appear in ``backend_names()``, ``amdinfer doctor`` and the conformance suite, and pass the
engine contract suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent
PLUGINS = ROOT / "plugins"


@pytest.fixture
def plugin_env(tmp_path: Path) -> dict[str, str]:
    dist = tmp_path / "amdinfer_toy_backend-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: amdinfer-toy-backend\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[amdinfer.backends]\ntoy = amdinfer_toy_backend:backend\n")
    path = os.pathsep.join([str(tmp_path), str(PLUGINS), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path}


def _python(env: dict[str, str], code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_plugin_is_registered_diagnosed_and_in_the_suites(plugin_env: dict[str, str]) -> None:
    out = _python(
        plugin_env,
        "import json, numpy as np, amdinfer\n"
        "from amdinfer.doctor import diagnose\n"
        "from amdinfer.testing import conformance, models\n"
        "engine = amdinfer.load(models.tiny_cnn(), backend='toy')\n"
        "ref = amdinfer.load(models.tiny_cnn(), backend='reference')\n"
        "x = models.random_inputs(models.tiny_cnn(), batch=2, seed=0)\n"
        "err = float(np.abs(engine.run(x)['logits'] - ref.run(x)['logits']).max())\n"
        "print(json.dumps({'names': amdinfer.backend_names(), 'doctor': diagnose().backends,\n"
        "                  'kinds': list(conformance.ENGINE_KINDS), 'err': err}))\n",
    )
    found = json.loads(out.strip().splitlines()[-1])
    assert "toy" in found["names"]
    assert found["doctor"]["toy"].startswith("ready (onnx.reference")
    assert "toy" in found["kinds"]
    assert found["err"] < 1e-4  # the plugin computes what the reference engine computes
    text = subprocess.run(
        [sys.executable, "-m", "amdinfer", "doctor"], env=plugin_env, capture_output=True, text=True, timeout=300
    ).stdout
    assert "toy" in text


def test_plugin_passes_the_engine_contract_suite(plugin_env: dict[str, str]) -> None:
    env = {**plugin_env, "AMDINFER_TEST_ENGINES": "toy"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(ROOT / "test_engine_contract.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT.parents[1],
    )
    assert done.returncode == 0, done.stdout[-3000:]
    assert "passed" in done.stdout and "toy" not in done.stdout.split("short test summary")[-1]


def test_a_broken_plugin_is_reported_not_raised(tmp_path: Path) -> None:
    dist = tmp_path / "broken_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[amdinfer.backends]\nbroken = no_such_module:backend\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    out = _python(env, "import amdinfer.doctor as d; print(d.diagnose().problems)")
    assert "broken = no_such_module:backend" in out and "ModuleNotFoundError" in out
