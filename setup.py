"""Builds the `ferry` Python package: CMake compiles the _ferry extension and
the `ferry` CLI, setuptools packs them with the pure-Python files.

    pip install --no-build-isolation .       # offline, with the system's setuptools

CMake configures a tree of its own under setuptools' build folder (Release,
no tests) for the interpreter that runs this. FERRY_CMAKE_BUILD_DIR=DIR takes
an already configured tree instead (only its _ferry and ferry_cli targets are
built there), so a package of what `scripts/build.sh` built costs no rebuild.
(Both variables are read here only; engines do not know them.) FERRY_CMAKE_ARGS adds arguments to the configure step.
"""

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class CMakeBuild(build_ext):
    """Builds the extension and the CLI with CMake and copies both into the package."""

    def build_extension(self, ext: Extension) -> None:
        tree = self._configured_tree()
        subprocess.run(["cmake", "--build", str(tree), "--target", "_ferry", "ferry_cli",
                        "--parallel", str(os.cpu_count() or 1)], check=True)
        package = Path(self.get_ext_fullpath(ext.name)).parent
        package.mkdir(parents=True, exist_ok=True)
        module = next((tree / "python" / "ferry").glob("_ferry*.so"), None)
        if module is None:
            raise RuntimeError(f"CMake built no _ferry module in {tree}/python/ferry")
        shutil.copy2(module, self.get_ext_fullpath(ext.name))
        (package / "bin").mkdir(exist_ok=True)
        shutil.copy2(tree / "bin" / "ferry", package / "bin" / "ferry")

    def _configured_tree(self) -> Path:
        given = os.environ.get("FERRY_CMAKE_BUILD_DIR")
        if given:
            tree = Path(given).resolve()
            if not (tree / "CMakeCache.txt").exists():
                raise RuntimeError(f"FERRY_CMAKE_BUILD_DIR={given}: no configured CMake tree there (CMakeCache.txt)")
            return tree
        tree = Path(self.build_temp).resolve() / "cmake"
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        subprocess.run(["cmake", "-S", str(ROOT), "-B", str(tree), *generator,
                        "-DCMAKE_BUILD_TYPE=Release", "-DFERRY_BUILD_TESTS=OFF",
                        f"-DPython_EXECUTABLE={sys.executable}",
                        *shlex.split(os.environ.get("FERRY_CMAKE_ARGS", ""))], check=True)
        return tree


PACKAGE_SCRATCH = ROOT / "build" / "package"
PACKAGE_SCRATCH.mkdir(parents=True, exist_ok=True)

setup(
    packages=["ferry", "ferry.analysis"],
    package_dir={"": "python"},
    package_data={"ferry": ["*.pyi", "py.typed"]},
    ext_modules=[Extension("ferry._ferry", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    # setuptools' scratch space stays out of the source tree's CMake folder.
    options={"build": {"build_base": str(PACKAGE_SCRATCH)}, "egg_info": {"egg_base": str(PACKAGE_SCRATCH)}},
    zip_safe=False,
)
