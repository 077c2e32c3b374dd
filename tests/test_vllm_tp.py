"""
Colocated vLLM with tensor parallelism across two real processes (`torchrun --nproc_per_node 2`, gloo on CPU): TRL's
`VLLMGeneration` builds a TP subgroup of both ranks, all-gathers their prompts, generates once and hands each rank back
its own slice. When a switch makes G span both ranks, each rank must still get its own rows' completions, and the
sampling parameters must follow the schedule on both ranks at the same round. See tests/colocate_tp_run.py (run in
the launch of tests/distributed_run.py that tests/conftest.py's `torchrun_scenarios` makes).
"""

from .conftest import assert_whole_groups
from .fake_vllm import decode_fake_completion

PER_DEVICE = 4
# (step, G, temperature) of each round: stage 0 (G 2, T 0.7) for steps 0-1, stage 1 (G 8, T 1.2) after.
EXPECTED = [(0, 2, 0.7), (1, 2, 0.7), (2, 8, 1.2), (3, 8, 1.2)]


def check_colocate_tp(ranks):
    rows = ranks[0]["rows"]

    # TRL's TP setup ran for real on the gloo group: one subgroup of both ranks, one engine per rank, same seed.
    for rank, record in enumerate(ranks):
        assert (record["rank"], record["world_size"], record["backend"]) == (rank, 2, "gloo")
        assert record["tp_group"] == {"ranks": [0, 1], "rank_in_group": rank, "backend": "gloo"}
        assert record["llm_init"] == {"tensor_parallel_size": 2, "seed": 0,
                                      "distributed_executor_backend": "external_launcher"}  # fmt: skip

    # Same setting, same round, on both ranks; one engine call per round, with n=1 and the round's temperature.
    for record in ranks:
        assert [(c["step"], c["num_generations"], c["temperature"]) for c in record["calls"]] == EXPECTED
        assert [h["curriculum/num_generations"] for h in record["history"]] == [g for _, g, _ in EXPECTED]
        assert [(g["n"], g["temperature"], g["max_tokens"]) for g in record["generate_calls"]] == [
            (1, t, 6) for _, _, t in EXPECTED
        ]
        # Rewards are the prompt index: every group TRL formed (across ranks, too) has identical rewards.
        assert all(h["frac_reward_zero_std"] == 1.0 for h in record["history"])
    assert ranks[0]["switches"] == ranks[1]["switches"] and len(ranks[0]["switches"]) == 1

    seen = []
    for round_index, (_, g, _) in enumerate(EXPECTED):
        local = [record["calls"][round_index] for record in ranks]
        global_idx = local[0]["idx"] + local[1]["idx"]  # rank 0's rows, then rank 1's
        assert [len(c["idx"]) for c in local] == [PER_DEVICE] * 2
        assert_whole_groups(global_idx, g)
        seen += global_idx[::g]
        if g == 8:
            assert len(set(global_idx)) == 1  # one group over both ranks' rows

        # Each rank's engine generated the TP group's gathered rows (rank 0's then rank 1's): the same batch on both.
        gathered = [rows[i]["prompt_ids"] for i in global_idx]
        for record in ranks:
            assert record["generate_calls"][round_index]["prompts"] == gathered, (round_index, record["rank"])

        # Each rank kept its own slice: row r of rank k holds the completion of gathered row k * 4 + r, sampled from
        # that row's own prompt (the fake encodes both); a shifted slice would show another position.
        for rank, call in enumerate(local):
            for row, (i, text) in enumerate(zip(call["idx"], call["completions"], strict=True)):
                completion = decode_fake_completion(text)
                where = (round_index, rank, row, text)
                assert completion.words == tuple(rows[i]["target"]), where
                assert completion.position == rank * PER_DEVICE + row, where
                assert completion.sample == 0, where  # n=1: one completion per gathered row
    assert len(seen) == len(set(seen))  # no prompt reused within the pass


def test_colocate_tensor_parallel_keeps_each_rank_s_rows_across_switches(torchrun_scenarios):
    check_colocate_tp(torchrun_scenarios("colocate_tp"))
