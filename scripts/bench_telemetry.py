"""Benchmark: reading a 1,000-node cluster's dcgm-exporter pages (8 GPUs a node, the exporter's default
counters plus DCGM_FI_PROF_SM_ACTIVE: 26 families, 208 samples a node) into per-pod usage.

The pages are the recorded node page of tests/telemetry/data with each node's hostname, GPU UUIDs and
pod names made its own. Reported: the median of ``--repeat`` runs of parsing all pages
(``parse_exporter_text``, prometheus-client's parser), and of turning the readings into per-pod usage
(``pod_usage``), and the same for the Prometheus path (one instant-query answer for the whole
cluster, decoded with msgspec).

    .venv/bin/python scripts/bench_telemetry.py [--nodes 1000] [--repeat 5] [--profile]

Parsing the whole pages (``select=False``) and only their wanted lines (the default) are timed
interleaved, run by run. Instruction counts of one path (``--only``, minus ``--only none``):

    PYTHONHASHSEED=0 valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \\
        .venv/bin/python scripts/bench_telemetry.py --nodes 100 --only wanted
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import re
import statistics
import time
from pathlib import Path

from gpufleet.telemetry import decode_query_answer, parse_exporter_text, pod_usage, readings_from_samples

DATA = Path(__file__).resolve().parent.parent / "tests" / "telemetry" / "data"


def node_page(template: str, i: int) -> str:
    page = template.replace("gpu-node-017", f"gpu-node-{i:04d}")
    page = re.sub(r"GPU-[0-9a-f]{8}", f"GPU-{i:08x}", page)
    return re.sub(r'pod="([^"]+)"', lambda m: f'pod="{m.group(1)}-{i}"', page)


def prometheus_answer(template: bytes, nodes: int) -> bytes:
    doc = json.loads(template)
    result = []
    for i in range(nodes):
        for sample in doc["data"]["result"]:
            metric = dict(sample["metric"])
            metric["Hostname"] = f"gpu-node-{i:04d}"
            metric["UUID"] = f"GPU-{i:08x}" + metric["UUID"][12:]
            metric["pod"] = f"nvidia-dcgm-exporter-{i:05d}"  # each node's exporter pod
            if "exported_pod" in metric:
                metric["exported_pod"] += f"-{i}"
            result.append({"metric": metric, "value": sample["value"]})
    doc["data"]["result"] = result
    return json.dumps(doc).encode()


def median_seconds(fn: object, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="print the cProfile of one exporter run")
    parser.add_argument("--only", choices=["whole", "wanted", "prometheus", "none"],
                        help="run that path once and nothing else (for instruction counts under cachegrind; "
                             "'none': the set-up alone)")
    args = parser.parse_args()

    template = (DATA / "dcgm-exporter-node.txt").read_text()
    pages = [node_page(template, i) for i in range(args.nodes)]
    size = sum(len(p) for p in pages)
    lines = sum(p.count("\n") for p in pages)

    def exporter(select: bool = True) -> int:
        readings = []
        for i, page in enumerate(pages):
            readings.extend(parse_exporter_text(page, f"node-{i}", select=select))
        return len(pod_usage(readings, 0.0))

    def whole_pages() -> int:
        return exporter(select=False)

    answer = prometheus_answer((DATA / "prometheus-query-vector.json").read_bytes(), args.nodes)

    def prometheus() -> int:
        samples, _ = decode_query_answer(answer, "prometheus")
        return len(pod_usage(readings_from_samples(samples), 0.0))

    if args.only is not None:
        run = {"whole": whole_pages, "wanted": exporter, "prometheus": prometheus, "none": lambda: 0}[args.only]
        print(f"{args.only}: {run()} pods")
        return
    assert exporter() == whole_pages() == 3 * args.nodes
    assert prometheus() == 4 * args.nodes  # the three pods and each exporter's own pod (no honor_labels)
    if args.profile:
        profile = cProfile.Profile()
        profile.runcall(exporter)  # the default path (wanted lines)
        pstats.Stats(profile).sort_stats("cumulative").print_stats(15)
    whole: list[float] = []
    selected: list[float] = []
    for _ in range(args.repeat):  # interleaved, so that the machine's load weighs on both alike
        whole.append(median_seconds(whole_pages, 1))
        selected.append(median_seconds(exporter, 1))
    full, exp = statistics.median(whole), statistics.median(selected)
    prom = median_seconds(prometheus, args.repeat)
    print(f"exporter pages: {args.nodes} nodes, {lines:,} lines, {size / 2**20:.1f} MiB; median of {args.repeat}:")
    print(f"  whole pages parsed:         {full:.3f} s ({full / args.nodes * 1e3:.2f} ms a node)")
    print(f"  wanted lines parsed (default): {exp:.3f} s ({exp / args.nodes * 1e3:.2f} ms a node), "
          f"{full / exp:.1f}x faster")
    print(f"prometheus answer: {len(answer) / 2**20:.1f} MiB, {24 * args.nodes:,} samples: "
          f"{prom:.3f} s median of {args.repeat}")


if __name__ == "__main__":
    main()
