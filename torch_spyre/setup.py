"""Packages torch_spyre with the native libraries CMake built (no compiler runs here).

The Python sources come from this directory; _C (the bindings), libtorch_spyre.so and
libspyre.so.0 from the CMake build tree, TORCH_SPYRE_BUILD_DIR (default: ../build/cmake, the
top-level build of the checkout). libtorch_spyre.so finds libspyre.so.0 next to itself
($ORIGIN in its run path), so the installed package does not depend on the build tree.
"""

import glob
import os
import shutil
import sysconfig

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))


def build_dir() -> str:
    d = os.environ.get("TORCH_SPYRE_BUILD_DIR") or os.path.join(HERE, "..", "build", "cmake")
    return os.path.abspath(d)


def native_files() -> list:
    """The CMake outputs the package needs; a clear error if they are missing."""
    top = build_dir()
    pkg = os.path.join(top, "torch_spyre", "python", "torch_spyre")
    ext = sysconfig.get_config_var("EXT_SUFFIX")
    wanted = [os.path.join(pkg, "_C" + ext), os.path.join(pkg, "libtorch_spyre.so")]
    spyre = sorted(glob.glob(os.path.join(top, "libspyre", "libspyre.so.0")))
    missing = [f for f in wanted if not os.path.exists(f)] + ([] if spyre else ["libspyre.so.0"])
    if missing:
        raise SystemExit(
            "torch_spyre: the CMake build is missing " + ", ".join(missing) + " (build it first: "
            "cmake -S . -B build/cmake -G Ninja && ninja -C build/cmake torch_spyre_C, or set "
            "TORCH_SPYRE_BUILD_DIR to the build tree)")
    return wanted + spyre


class BuildPyWithNative(build_py):
    """build_py, then the CMake-built libraries next to the Python sources."""

    def run(self):
        super().run()
        dest = os.path.join(self.build_lib, "torch_spyre")
        for f in native_files():
            # copy the file itself (libspyre.so.0 is a symlink in the build tree)
            shutil.copyfile(f, os.path.join(dest, os.path.basename(f)))


class BinaryDistribution(Distribution):
    """A platform wheel: it carries native libraries."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildPyWithNative}, distclass=BinaryDistribution)
