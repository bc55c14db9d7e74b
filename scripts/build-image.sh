#!/usr/bin/env bash
# Build gpufleet's container image from the Containerfile, tag it <image>:<package version>, and write
# the SBOM of its Python packages (CycloneDX JSON, made by cyclonedx-bom inside the build) beside it.
#
#   scripts/build-image.sh [--image NAME] [--sbom FILE] [--builder buildah|podman|docker]
#
#   --image    repository part of the tag (default: gpufleet; e.g. ghcr.io/you/gpufleet to push there)
#   --sbom     where to write the SBOM (default: dist/gpufleet-<version>.cdx.json)
#   --builder  the builder to use (default: the first of buildah, podman, docker on PATH)
#
# The version is pyproject.toml's [project] version: the chart's appVersion, hence its default image tag.
# Exit status: 0 built, 1 the build failed, 2 bad arguments or no usable builder.
set -euo pipefail
caller="$PWD"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

die() { echo "build-image.sh: $1" >&2; exit "${2:-2}"; }

image=gpufleet
sbom=""
builder=""
while [ $# -gt 0 ]; do
    case "$1" in
        --image) [ $# -ge 2 ] || die "--image needs a value"; image="$2"; shift 2 ;;
        --sbom) [ $# -ge 2 ] || die "--sbom needs a value"; sbom="$2"; shift 2
                 case "$sbom" in /*) ;; *) sbom="$caller/$sbom" ;; esac ;;
        --builder) [ $# -ge 2 ] || die "--builder needs a value"; builder="$2"; shift 2 ;;
        -h|--help) sed -n '2,12s/^# \{0,1\}//p' "$0"; exit 0 ;;
        *) die "unknown argument: $1 (see --help)" ;;
    esac
done

python=${PYTHON:-python3}
command -v "$python" >/dev/null 2>&1 || die "$python (3.11 or later) is needed to read pyproject.toml's version"
version="$("$python" -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')" \
    || die "cannot read [project] version from pyproject.toml"
tag="$image:$version"
sbom=${sbom:-dist/gpufleet-$version.cdx.json}

if [ -z "$builder" ]; then
    for candidate in buildah podman docker; do
        if command -v "$candidate" >/dev/null 2>&1; then builder=$candidate; break; fi
    done
    [ -n "$builder" ] || die "no container builder found: install buildah, podman or docker"
fi
case "$builder" in
    buildah|podman|docker) ;;
    *) die "--builder: $builder is not one of buildah, podman, docker" ;;
esac
command -v "$builder" >/dev/null 2>&1 || die "$builder is not on PATH"
if [ "$builder" = docker ]; then
    docker info >/dev/null 2>&1 || die "docker is installed but its daemon is not reachable (start it, or use podman or buildah)"
fi

echo "build-image.sh: building $tag with $builder" >&2
args=(-f Containerfile --build-arg "VERSION=$version" -t "$tag" .)
if [ "$builder" = buildah ]; then
    buildah build "${args[@]}" || die "$builder build failed" 1
else
    "$builder" build "${args[@]}" || die "$builder build failed" 1
fi

# The SBOM travels in the image (/usr/share/doc/gpufleet/sbom.cdx.json); copy it out without running gpufleet.
inside=/usr/share/doc/gpufleet/sbom.cdx.json
mkdir -p "$(dirname "$sbom")"
if [ "$builder" = buildah ]; then
    ctr="$(buildah from "$tag")"
    buildah run "$ctr" -- cat "$inside" >"$sbom" || { buildah rm "$ctr" >/dev/null; die "cannot read $inside from $tag" 1; }
    buildah rm "$ctr" >/dev/null
else
    ctr="$("$builder" create "$tag")"
    "$builder" cp "$ctr:$inside" "$sbom" || { "$builder" rm "$ctr" >/dev/null; die "cannot copy $inside from $tag" 1; }
    "$builder" rm "$ctr" >/dev/null
fi
echo "build-image.sh: built $tag; SBOM (CycloneDX JSON) in $sbom" >&2
echo "$tag"
