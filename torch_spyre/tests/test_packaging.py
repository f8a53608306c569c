"""pip install of torch_spyre from the tree, offline, over the CMake build: the installed
package carries the native libraries and a torch.backends entry point, so a bare `import torch`
loads the backend. Built into a temporary venv (the system is not touched)."""

import os
import shutil
import subprocess
import sys

import pytest

import torch_spyre

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # torch_spyre/
# the CMake build tree the tests run from: <build>/torch_spyre/python/torch_spyre/_C*.so
BUILD = os.path.abspath(os.path.join(os.path.dirname(torch_spyre._C.__file__), *[".."] * 3))

PROBE = r"""
import torch
t = torch.ones(2, device="spyre") * 3
import sys
mod = sys.modules["torch_spyre"]
maps = open("/proc/self/maps").read().split()
libspyre = sorted({p for p in maps if "/libspyre.so" in p})
print(t.device, t.cpu().tolist(), mod.__file__, libspyre, sep="|")
"""


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    root = tmp_path_factory.mktemp("pip")
    # a copy of the project: pip builds in place and leaves build/ and *.egg-info behind
    proj = root / "torch_spyre"
    proj.mkdir()
    for f in ("pyproject.toml", "setup.py"):
        shutil.copy(os.path.join(SRC, f), proj / f)
    shutil.copytree(os.path.join(SRC, "torch_spyre"), proj / "torch_spyre",
                    ignore=shutil.ignore_patterns("__pycache__"))
    env = dict(os.environ, TORCH_SPYRE_BUILD_DIR=BUILD)
    env.pop("PYTHONPATH", None)
    # the distribution's pip (python3 -m venv installs it from its own wheel, offline)
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(root / "venv")],
                   check=True, env=env)
    py = str(root / "venv" / "bin" / "python")
    r = subprocess.run([py, "-m", "pip", "install", "--no-build-isolation", "--no-index",
                        "--no-cache-dir", "--disable-pip-version-check", "-q", str(proj)],
                       env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    return py, env


def probe(venv, **extra):
    py, env = venv
    env = dict(env, **extra)
    env.pop("TORCH_SPYRE_BUILD_DIR")
    return subprocess.run([py, "-c", PROBE], env=env, capture_output=True, text=True, cwd="/")


def test_import_torch_autoloads_the_installed_backend(venv):
    r = probe(venv)
    assert r.returncode == 0, r.stderr
    device, values, path, libspyre = r.stdout.strip().split("|")
    assert device == "spyre:0" and values == "[3.0, 3.0]"
    site = os.path.dirname(os.path.dirname(venv[0]))
    assert path.startswith(site) and "site-packages" in path  # the installed copy
    # libspyre.so.0 travels with the package (libtorch_spyre.so finds it by $ORIGIN)
    assert libspyre.startswith("['" + os.path.dirname(path)), libspyre


def test_autoload_can_be_turned_off(venv):
    r = probe(venv, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert r.returncode != 0 and "spyre" in r.stderr


def test_installed_metadata(venv):
    py, env = venv
    code = ("import importlib.metadata as m; "
            "print([e.value for e in m.entry_points(group='torch.backends') if e.name == 'spyre'])")
    r = subprocess.run([py, "-c", code], env=dict(env, TORCH_DEVICE_BACKEND_AUTOLOAD="0"),
                       capture_output=True, text=True, cwd="/")
    assert r.stdout.strip() == "['torch_spyre:_autoload']", r.stderr
