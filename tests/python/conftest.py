"""Fixtures for the mtpspec Python tests. They run inside the virtual environment that
scripts/test_python.sh creates (build/pyenv) with the package installed by `pip install ./python`."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

import mtpspec

ROOT = Path(__file__).resolve().parents[2]
GLM_A = ROOT / "tests" / "golden" / "glm_a"
THREADS = 2


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def model() -> mtpspec.Model:
    """The bundled tiny glm_moe_dsa model with an MTP layer (vocab 256, 128 positions)."""
    return mtpspec.Model.load(GLM_A, threads=THREADS)


@pytest.fixture(scope="session")
def long_model(tmp_path_factory: pytest.TempPathFactory, model: mtpspec.Model) -> mtpspec.Model:
    """glm_a with max_position_embeddings raised to 8192 (plain RoPE, so the weights are unchanged),
    for generations long enough to interrupt and to overlap with other threads."""
    d = tmp_path_factory.mktemp("glm_a_long")
    config = json.loads((GLM_A / "config.json").read_text())
    config["max_position_embeddings"] = 8192
    (d / "config.json").write_text(json.dumps(config))
    os.symlink(GLM_A / "model.safetensors", d / "model.safetensors")
    return mtpspec.Model.load(d)


@pytest.fixture(scope="session")
def cli() -> Path:
    """The C++ command-line tool: $MTPSPEC_CLI, else build/release/cli/mtpspec, else built here
    from the CMake tree that pip used (build/pybuild) or a fresh one."""
    if os.environ.get("MTPSPEC_CLI"):
        return Path(os.environ["MTPSPEC_CLI"])
    release = ROOT / "build" / "release" / "cli" / "mtpspec"
    if release.exists():
        return release
    tree = ROOT / "build" / "pybuild"
    if not (tree / "CMakeCache.txt").exists():
        tree = ROOT / "build" / "pytest-cli"
        subprocess.run(["cmake", "-S", str(ROOT), "-B", str(tree), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                        "-DMTPSPEC_BUILD_TESTS=OFF", "-DMTPSPEC_BUILD_BENCH=OFF"], check=True)
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", "2")
    subprocess.run(["cmake", "--build", str(tree), "--target", "mtpspec", "-j", jobs], check=True)
    return tree / "cli" / "mtpspec"
