"""Build hook: generate the kubelet device plugin API's Python modules from the vendored .proto.

Everything else about the package is in pyproject.toml. ``build_py`` (which a wheel and an editable
install, ``pip install -e .``, both run) first writes, from
``src/gpufleet/agent/deviceplugin/proto/api.proto``, the modules ``api_pb2`` and ``api_pb2_grpc``
(grpcio-tools) and their type stubs (mypy-protobuf) into the git-ignored
``src/gpufleet/agent/deviceplugin/_generated/``. They are never written by hand nor committed.
The build requirements (grpcio-tools, mypy-protobuf) are in ``[build-system]``.
"""

from __future__ import annotations

import shutil
import stat
import sys
import tempfile
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
PACKAGE = "gpufleet.agent.deviceplugin._generated"
PROTO = ROOT / "src" / "gpufleet" / "agent" / "deviceplugin" / "proto" / "api.proto"
OUT = ROOT / "src"
GENERATED = OUT.joinpath(*PACKAGE.split("."))


def _plugin(folder: Path, name: str, module: str, function: str) -> Path:
    """An executable that runs ``module.function`` in this interpreter (protoc calls plugins as programs)."""
    script = folder / name
    script.write_text(f"#!{sys.executable}\nimport sys\nfrom {module} import {function}\nsys.exit({function}())\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def generate_device_plugin_api() -> None:
    from grpc_tools import protoc  # build requirement: imported only when building

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        # The .proto is placed at the generated package's path, so that api_pb2_grpc imports api_pb2
        # by its full name (gpufleet.agent.deviceplugin._generated.api_pb2), not as a top-level module.
        tree = work / "include"
        target = tree.joinpath(*PACKAGE.split("."), "api.proto")
        target.parent.mkdir(parents=True)
        shutil.copyfile(PROTO, target)
        mypy = _plugin(work, "protoc-gen-mypy", "mypy_protobuf.main", "main")
        mypy_grpc = _plugin(work, "protoc-gen-mypy_grpc", "mypy_protobuf.main", "grpc")
        if GENERATED.exists():
            shutil.rmtree(GENERATED)
        GENERATED.mkdir(parents=True)
        well_known = Path(protoc.__file__).parent / "_proto"
        args = [
            "grpc_tools.protoc",
            f"-I{tree}",
            f"-I{well_known}",
            f"--plugin=protoc-gen-mypy={mypy}",
            f"--plugin=protoc-gen-mypy_grpc={mypy_grpc}",
            f"--python_out={OUT}",
            f"--grpc_python_out={OUT}",
            f"--mypy_out={OUT}",
            f"--mypy_grpc_out={OUT}",
            str(target.relative_to(tree)),
        ]
        if protoc.main(args) != 0:
            raise RuntimeError(f"protoc failed on {PROTO}")
    (GENERATED / "__init__.py").write_text(
        '"""Generated at build time from ../proto/api.proto by setup.py; never edit or commit."""\n'
    )
    (GENERATED / "py.typed").write_text("")


class BuildPyWithProtos(build_py):
    def run(self) -> None:
        generate_device_plugin_api()
        if self.packages is not None and PACKAGE not in self.packages:
            self.packages.append(PACKAGE)  # found after the package list was made (a fresh clone)
        super().run()


setup(cmdclass={"build_py": BuildPyWithProtos})
