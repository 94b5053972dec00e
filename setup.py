"""Builds the native parts with CMake (as pybind11's cmake_example does) so that `pip install .` and
`pip wheel .` produce xdl_ec/_core, xdl_ec/_tf_ops, libxdl_ec_core and the bundled ISA-L."""

import os
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class CMakeExtension(Extension):
    def __init__(self, name: str) -> None:
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        # Install into the directory that holds the xdl_ec package in the wheel/build tree.
        package_parent = Path(self.get_ext_fullpath(ext.name)).resolve().parent.parent
        build_dir = Path(self.build_temp).resolve() / "cmake"
        build_dir.mkdir(parents=True, exist_ok=True)
        config = [
            "cmake",
            "-S",
            str(ROOT),
            "-B",
            str(build_dir),
            f"-DPython_EXECUTABLE={sys.executable}",
            "-DCMAKE_BUILD_TYPE=Release",
            "-DXDL_EC_BUILD_TESTS=OFF",
        ]
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1))
        subprocess.run(config, check=True)
        subprocess.run(["cmake", "--build", str(build_dir), "-j", jobs], check=True)
        subprocess.run(["cmake", "--install", str(build_dir), "--prefix", str(package_parent)], check=True)


setup(ext_modules=[CMakeExtension("xdl_ec._core")], cmdclass={"build_ext": CMakeBuild})
