"""The fill experiment: a hand-computed run, each baseline's choice on tiny cases, order, buckets, seeds."""

from __future__ import annotations

import numpy as np
import pytest

from gpufleet.adapters.traces.records import TraceJob, TraceNode
from gpufleet.sim.fill import (
    FillRun,
    bucket_means,
    fill_nodes,
    make_policy,
    node_ranks,
    run_fill,
    run_sequence,
    target_workload,
    task_order,
    task_pod,
)
from gpufleet.sim.fill.policies import Request
from gpufleet.sim.fill.summary import PaperResults, SeedCurves, parse_seeds, summarize, table


def job(name: str, num_gpu: int = 0, gpu_milli: int = 0, cpu: int = 1000, memory_mib: int = 1024,
        models: tuple[str, ...] = ()) -> TraceJob:
    return TraceJob(name=name, submit_s=0.0, duration_s=None, num_gpu=num_gpu, gpu_milli=gpu_milli,
                    cpu_milli=cpu, memory_mib=memory_mib, gpu_models=models)


def tnode(name: str, gpus: int, cpu: int, memory_mib: int = 65536, model: str = "T4") -> TraceNode:
    return TraceNode(name=name, cpu_milli=cpu, memory_mib=memory_mib, gpus=gpus, gpu_model=model)


# -- a run computed by hand -----------------------------------------------------------------------

HAND_NODES = [tnode("a", 2, 8000), tnode("b", 1, 4000)]
HAND_JOBS = [
    job("t1", 1, 1000, cpu=2000),
    job("t2", 1, 500),
    job("t3", 1, 600),
    job("t4", 2, 1000),
    job("t5", 0, 0, cpu=3000),
]


def hand_run(policy: str) -> FillRun:
    return run_sequence(policy, fill_nodes(HAND_NODES, [0, 1]), HAND_JOBS, [0, 1, 2, 3, 4])


def test_bestfit_hand_run() -> None:
    # BestFit score int(100 (1 - (0.5 cpu_left/128 + 0.5 gpu_left/8))) after the task:
    # t1 on a: 1 - (0.0234 + 0.0625) -> 91; on b: 1 - (0.0078 + 0) -> 99: b (its only GPU).
    # t2 and t3 fit only a: GPU 0 (best fit, first of equals) then GPU 1 (GPU 0 has 500 < 600).
    # t4 needs 2 full GPUs: a has [500, 400] free, b none: fails, 900 milli free in all: gpu_full.
    # t5 (3 CPUs): a has 6 CPUs free, b 2: a.
    run = hand_run("bestfit")
    names = run.node_names
    assert [names[n] if n >= 0 else None for n in run.node] == ["0001-b", "0000-a", "0000-a", None, "0000-a"]
    assert run.placed.tolist() == [True, True, True, False, True]
    assert run.arrived_milli.tolist() == [1000, 1500, 2100, 4100, 4100]
    assert run.allocated_milli.tolist() == [1000, 1500, 2100, 2100, 2100]
    assert run.failures == {"gpu_full": 1}
    assert run.capacity_milli == 3000
    # Fragmentation at the end, target = the 5 task shapes, one each. Node a: GPUs [50, 40] blocks
    # free, 3 CPUs: t1 (full GPU) 90, t2 (50) only the 40 of GPU 1, t3 (60) 90, t4 90, t5 (CPU-only)
    # 90: 400 blocks / 5 = 80 blocks = 800 milli-GPU; node b has nothing free.
    assert run.frag_milli[-1] == pytest.approx(800.0)
    assert run.free_milli[-1] == 900
    assert run.frag_ratio_pct()[-1] == pytest.approx(800 / 900 * 100)
    assert run.alloc_pct()[-1] == pytest.approx(70.0)


def test_every_policy_runs_the_hand_case_without_overcommitting() -> None:
    for policy in ("random", "dotprod", "clustering", "gpupacking", "bestfit", "fgd", "gpufleet", "binpack",
                   "spread"):
        run = hand_run(policy)
        # t4 (2 full GPUs) can never fit once t1, t2, t3 are placed: at most 2100 milli allocated
        assert run.allocated_milli[-1] <= 2100, policy
        assert run.placed[0] and run.placed[1], policy


# -- each baseline's choice on tiny cases -----------------------------------------------------------

def policy_on(name: str, nodes: list[TraceNode], jobs: list[TraceJob], seed: int = 0):  # type: ignore[no-untyped-def]
    pods = [task_pod(j, True) for j in jobs]
    target = target_workload(pods)
    return make_policy(name, fill_nodes(nodes, range(len(nodes))), np.random.default_rng(seed), target,
                       len(pods), target_workload(pods, memory=True)), pods


def place(policy, pod) -> tuple[str, tuple[int, ...]]:  # type: ignore[no-untyped-def]
    choice = policy.place(policy.request(pod))
    assert choice is not None
    return policy.cluster.nodes[choice.node].name.split("-", 1)[1], choice.gpus


def test_dotprod_prefers_the_smallest_dot_product() -> None:
    # A 1-GPU task (8 CPUs): the node with less free CPU and GPU has the smaller dot product.
    pol, pods = policy_on("dotprod", [tnode("big", 8, 96000), tnode("small", 2, 16000)], [job("x", 1, 1000, 8000)])
    assert place(pol, pods[0]) == ("small", (0,))


def test_bestfit_prefers_the_least_leftover() -> None:
    pol, pods = policy_on("bestfit", [tnode("big", 8, 96000), tnode("small", 2, 16000)], [job("x", 1, 1000, 8000)])
    assert place(pol, pods[0]) == ("small", (0,))


def test_gpupacking_prefers_a_partly_used_gpu() -> None:
    jobs = [job("a", 1, 300), job("b", 1, 300)]
    pol, pods = policy_on("gpupacking", [tnode("n1", 2, 32000), tnode("n2", 2, 32000)], jobs)
    # First share: both nodes idle -> max(33 - 2, 2) = 31 each: the first node, best-fit GPU 0.
    assert place(pol, pods[0]) == ("n1", (0,))
    # Second: n1 offers a shared GPU (100 - 70/10 = 93) over an idle node (31).
    assert place(pol, pods[1]) == ("n1", (0,))


def test_clustering_keeps_kinds_together() -> None:
    jobs = [job("s", 1, 300), job("w", 1, 1000), job("s2", 1, 300)]
    pol, pods = policy_on("clustering", [tnode("n1", 4, 32000), tnode("n2", 4, 32000), tnode("n3", 4, 32000)], jobs)
    assert place(pol, pods[0])[0] == "n1"  # all idle: tier 25 + 0; the first node
    # The whole-GPU task avoids n1, which holds another kind (tier 0): an idle node (tier 25).
    assert place(pol, pods[1])[0] == "n2"
    # The next share goes with its own kind: n1 (tier 75).
    assert place(pol, pods[2])[0] == "n1"


def test_random_picks_only_feasible_nodes_and_is_seeded() -> None:
    nodes = [tnode(f"n{i}", 1, 8000) for i in range(6)]
    jobs = [job(f"j{i}", 1, 1000) for i in range(6)]
    chosen = []
    for seed in (1, 1, 2):
        pol, pods = policy_on("random", nodes, jobs, seed)
        chosen.append([place(pol, p)[0] for p in pods])
    assert sorted(chosen[0]) == [f"n{i}" for i in range(6)]  # each node once: only free ones are feasible
    assert chosen[0] == chosen[1]
    assert chosen[0] != chosen[2]


def test_fgd_keeps_a_full_gpu_for_whole_gpu_tasks() -> None:
    # Target: mostly whole-GPU tasks. After a 600-milli share on GPU 0, a 300-milli share goes to GPU 0
    # too (GPU 1 stays whole) - on GPU 1 every free block would become a fragment for them.
    jobs = [job("w1", 1, 1000), job("w2", 1, 1000), job("w3", 1, 1000), job("s6", 1, 600), job("s3", 1, 300)]
    pol, pods = policy_on("fgd", [tnode("n1", 2, 32000)], jobs)
    assert place(pol, pods[3]) == ("n1", (0,))
    assert place(pol, pods[4]) == ("n1", (0,))


def test_gpu_models_are_respected() -> None:
    nodes = [tnode("t4", 2, 32000, model="T4"), tnode("v100", 2, 32000, model="V100M16")]
    jobs = [job("x", 1, 1000, models=("V100M16",))]
    for name in ("random", "dotprod", "bestfit", "fgd", "gpufleet", "gpupacking", "clustering"):
        pol, pods = policy_on(name, nodes, jobs)
        assert place(pol, pods[0])[0] == "v100", name


def test_request_of_a_task() -> None:
    pol, pods = policy_on("bestfit", [tnode("n", 2, 8000)], [job("x", 1, 250, 3000, 2048), job("y", 4, 1000)])
    req: Request = pol.request(pods[0])
    assert (req.blocks, req.whole, req.cpu, req.gpu_milli, req.fractional) == (25, 0, 3000, 250, True)
    assert pol.request(pods[1]).gpu_milli == 4000


# -- order, ranks, buckets, seeds ------------------------------------------------------------------------

def test_task_order_is_a_seeded_shuffle_then_inflation_up_to_the_target() -> None:
    jobs = [job(f"j{i:02d}", 1, 500) for i in range(10)]  # 5000 milli in all
    order = task_order(jobs, 7, 1.3, 10_000)  # target 13000: 10 + 16 copies of 500
    assert sorted(order[:10]) == list(range(10))
    assert len(order) == 26
    assert sum(jobs[i].gpu_milli for i in order) == 13_000
    assert order == task_order(jobs, 7, 1.3, 10_000)
    assert order[:10] != task_order(jobs, 8, 1.3, 10_000)[:10]
    # A list already past the target is cut down to it by removing random tasks.
    assert len(task_order(jobs, 7, 0.2, 10_000)) == 4


def test_node_ranks_are_a_seeded_permutation() -> None:
    ranks = node_ranks(50, 3)
    assert sorted(ranks) == list(range(50))
    assert ranks == node_ranks(50, 3) and ranks != node_ranks(50, 4)
    names = [n.name for n in fill_nodes([tnode("x", 1, 1), tnode("y", 1, 1)], [1, 0])]
    assert names == ["0001-x", "0000-y"]


def test_bucket_means_round_half_to_even_and_borrow_neighbours() -> None:
    arrived = np.array([0.4, 0.6, 1.5, 2.5, 5.0])
    values = np.array([1.0, 3.0, 5.0, 7.0, 9.0])
    got = bucket_means(arrived, values, top=6)
    # 0.4 -> 0; 0.6 -> 1; 1.5 -> 2; 2.5 -> 2 (half to even); 5.0 -> 5; 3 and 4 borrow neighbours
    assert got == {0: 1.0, 1: 3.0, 2: 6.0, 3: 6.0, 4: 9.0, 5: 9.0, 6: 9.0}


def test_parse_seeds() -> None:
    assert parse_seeds("42-45") == [42, 43, 44, 45]
    assert parse_seeds("42,45") == [42, 45]
    assert parse_seeds("42") == [42]
    assert parse_seeds("1-2,2,7") == [1, 2, 7]
    for bad in ("", "x", "5-3", "1,,2", "-1", "1.5"):
        with pytest.raises(ValueError):
            parse_seeds(bad)


def test_runs_are_deterministic_for_a_seed() -> None:
    nodes = [tnode(f"n{i}", g, 16000) for i, g in enumerate([1, 2, 4, 8, 2])]
    jobs = [job(f"j{i}", *spec) for i, spec in enumerate([(1, 1000), (1, 300), (2, 1000), (0, 0), (1, 650)] * 4)]
    for policy in ("random", "fgd", "gpufleet"):
        a, b = run_fill(policy, nodes, jobs, 5), run_fill(policy, nodes, jobs, 5)
        assert a.node.tolist() == b.node.tolist(), policy
        assert a.frag_milli.tolist() == b.frag_milli.tolist(), policy
        assert a.task_names == b.task_names
    assert run_fill("fgd", nodes, jobs, 5).task_names != run_fill("fgd", nodes, jobs, 6).task_names


def test_summary_and_table() -> None:
    run = hand_run("bestfit")
    curves = SeedCurves.of(run, 0.5)
    out = summarize("bestfit", [curves], 2, 5, 0.5, 1.3)
    # t4 arrives at 4100/3000 = 137 % arrived: after the 100 % point
    assert out["failed_tasks"] == {"mean": 1.0, "per_seed": {"0": 1}, "by_kind_mean": {"gpu_full": 1.0},
                                   "by_100_mean": 0.0, "by_100_by_kind_mean": {}}
    assert run.failures_until(140) == {"gpu_full": 1}
    assert run.failure_at.tolist() == [-1, -1, -1, 0 + 1, -1]  # FAILURE_KINDS[1] == "gpu_full"
    assert out["alloc_pct_at"]["70"] == pytest.approx(70.0)
    assert out["per_seed"][0]["final_alloc_pct"] == pytest.approx(70.0)
    text = table([out], "hand", PaperResults.builtin())
    assert "bestfit" in text and "GPU_FULL" in text
    failed = text.split("FAILED TASKS BY CAUSE, WHOLE RUN (mean per run)")[1].splitlines()
    assert failed[2].split() == ["bestfit", "1"]  # a count of one seed reads as an integer, not "1.0"
    paper = PaperResults.builtin()
    assert paper.alloc("openb_pod_list_default", "fgd", 100) == 95.23
    assert paper.alloc("openb_pod_list_default", "gpufleet", 100) is None
