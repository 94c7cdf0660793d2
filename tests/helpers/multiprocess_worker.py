"""Run by tests/integration/test_multiprocess.py under torchrun with 2 CPU processes (gloo); writes one JSON per rank."""

import json
import os
import sys

from tests.helpers.data import extra_column_mismatches, make_recording_reward, pass_rate_dataset  # noqa: E402
from tests.helpers.processes import exit_worker, freeze_loaded_objects  # noqa: E402
from tests.helpers.trainers import OFFLINE  # noqa: E402
from trl_ada import AdaGRPOConfig, AdaGRPOTrainer  # noqa: E402


freeze_loaded_objects()  # after the imports


class Recorder(AdaGRPOTrainer):
    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        tok = self.processing_class
        self.groups = getattr(self, "groups", []) + [
            [
                tok.decode(output["prompt_ids"][i][output["prompt_mask"][i].bool()]).split("<|im_start|>user\n")[1][
                    :12
                ]
                for i in range(output["prompt_ids"].shape[0])
            ]
        ]
        self.inputs_seen = getattr(self, "inputs_seen", []) + [[row["prompt"][-1]["content"][:12] for row in inputs]]
        self.advantages = getattr(self, "advantages", []) + [output["advantages"].tolist()]
        return output


class RankDependent:
    """A user sampler with the bug the trainer must catch: its choice depends on the rank (a global random state)."""

    def __init__(self, args):
        self.rank = int(os.environ["RANK"])

    def sample(self, context, target):
        from trl_ada.core.sampling import PromptResult
        from trl_ada.samplers import Selection

        prompts = list(range(target))
        pools = context.sample(prompts, context.num_generations)
        results = {p: PromptResult(pool, list(range(len(pool))), 1, True) for p, pool in zip(prompts, pools)}
        return Selection(results=results, chosen=prompts[::-1] if self.rank else prompts)


def main():
    model_path, output_dir, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    common = dict(OFFLINE, output_dir=output_dir, num_generations=4, max_completion_length=10, shuffle_dataset=False)
    if mode == "straddle":  # 2 rows per process with groups of 4: must be refused, naming the fix
        try:
            AdaGRPOConfig(per_device_train_batch_size=2, **common)
        except ValueError as error:
            message = str(error)
        else:
            message = "no error"
        rank = int(os.environ["RANK"])
        with open(os.path.join(output_dir, f"rank{rank}.json"), "w") as f:
            json.dump({"message": message}, f)
        return

    if mode == "rank_dependent":  # each rank's choice is valid alone; together they would train other rows
        args = AdaGRPOConfig(per_device_train_batch_size=8, max_steps=1, sampler=f"{__name__}.RankDependent", **common)
        trainer = AdaGRPOTrainer(
            model=model_path, reward_funcs=make_recording_reward(), args=args, train_dataset=pass_rate_dataset([0.5])
        )
        try:
            trainer.train()
        except RuntimeError as error:
            message = str(error)
        else:
            message = "no error"
        with open(os.path.join(output_dir, f"rank{os.environ['RANK']}.json"), "w") as f:
            json.dump({"message": message}, f)
        return

    if mode == "agents":
        agents(model_path, output_dir, common)
        return
    reward = make_recording_reward()
    if mode.startswith("pipelined"):  # barrier-free rounds on a stand-in engine; rank 1's is far slower than rank 0's
        from tests.helpers.standin_engine import install

        class Pipelined(Recorder):
            def _collect_selected(self, step, local):
                self.results = getattr(self, "results", []) + [
                    [(r.pool_rewards, r.selected, r.rounds, r.finished) for _, r in sorted(step.results.items())]
                ]
                return super()._collect_selected(step, local)

        rank = int(os.environ["RANK"])
        args = AdaGRPOConfig(
            per_device_train_batch_size=8, max_steps=3, learning_rate=1e-2, pool_selection="random", **common
        )
        trainer = Pipelined(
            model=model_path,
            reward_funcs=reward,
            args=args,
            train_dataset=pass_rate_dataset([0.02, 0.0, 1.0, 0.5], repeat=4),
        )
        speculative = mode == "pipelined_speculative"  # room for a speculative round beside the certain ones
        llm = install(trainer, seed=rank, pace=0.9 if rank == 0 else 0.1, capacity=32 if speculative else 12)
        trainer.args.pipelined_rounds = True  # after construction: use_vllm=True would start a real engine
        trainer.args.pipelined_speculation = speculative
        trainer.train()
        with open(os.path.join(output_dir, f"rank{rank}.json"), "w") as f:
            json.dump(
                {
                    "reward_calls": len(reward.log),
                    "results": trainer.results,
                    "advantages": trainer.advantages,
                    "groups": trainer.groups,
                    "polls": [s.polls for s in llm.streams],
                    "left_running": sum(len(s.running) for s in llm.streams),
                    "aborted": sum(len(s.aborted) for s in llm.streams),
                    "logs": [h for h in trainer.state.log_history if "loss" in h],
                },
                f,
            )
        return
    if mode in ("est", "knapsack"):  # Est or Knapsack: each rank allocates its own generation batch over its prompts
        sampler = dict(reinforce_ada_est=True) if mode == "est" else dict(sampler="knapsack")
        args = AdaGRPOConfig(per_device_train_batch_size=8, max_steps=4, learning_rate=1e-2, **sampler, **common)
        trainer = Recorder(
            model=model_path,
            reward_funcs=reward,
            args=args,
            train_dataset=pass_rate_dataset([0.0, 1.0, 1.0, 0.5], repeat=2),
        )
        trainer.train()
        params = float(sum(p.detach().double().sum() for p in trainer.model.parameters()))
        write_rank(output_dir, trainer, reward, inputs=trainer.inputs_seen, params=params)
        return
    if mode == "open_r1":  # summed rewards, positives by accuracy: both ranks judge every pool by correctness
        from tests.helpers import open_r1
        from tests.helpers.tool_policy import install

        class Judged(AdaGRPOTrainer):
            def _replace_advantages(self, output, results):
                if results is not None:
                    step, accuracy = self._step_sampling, self.reward_func_names.index("accuracy_reward")
                    self.judged = getattr(self, "judged", []) + [
                        [
                            (list(r.pool_rewards), [row[accuracy].item() for row in step.pool_rewards_per_func[p]])
                            for p, r in zip(step.chosen, results)
                        ]
                    ]
                return super()._replace_advantages(output, results)

        args = AdaGRPOConfig(
            **{**common, "max_completion_length": 48},
            per_device_train_batch_size=8,
            max_steps=2,
            learning_rate=1e-2,
            round_repeat=4,
            max_rounds=2,
            positive_reward_func="accuracy_reward",
        )
        trainer = Judged(model=model_path, reward_funcs=open_r1.REWARDS, args=args, train_dataset=open_r1.dataset())
        install(trainer, open_r1.OpenR1Policy(trainer.processing_class))
        trainer.train()
        write_trained(output_dir, trainer, judged=trainer.judged)
        return
    if mode == "retire_solved":  # a question solved on one rank's visit is retired on both, and skipped by both
        from datasets import Dataset

        from tests.helpers.data import make_prompt

        rates = [1.0, 0.5, 0.0, 0.3]  # each question 4 times in the data: it comes back
        dataset = Dataset.from_list(
            [{"prompt": make_prompt(f"q{i % 4} r{rates[i % 4]}"), "pass_rate": rates[i % 4]} for i in range(16)]
        )
        args = AdaGRPOConfig(
            per_device_train_batch_size=8, max_steps=4, learning_rate=1e-2, sampler="retire_solved", **common
        )
        trainer = Recorder(model=model_path, reward_funcs=reward, args=args, train_dataset=dataset)
        trainer.train()
        write_trained(output_dir, trainer, retired=sorted(trainer._sampler.retired), groups=trainer.groups)
        return
    if mode in ("dynamic", "budget"):  # refills (and, for the budget, screening): the same on both ranks
        if mode == "dynamic":  # DAPO: plain sampling, uniform groups dropped and refilled
            extra = dict(dynamic_sampling=True, multiround_adaptive_downsampling=False, max_steps=2)
            rates, repeat = [1.0, 0.0, 0.5, 0.3], 4
        else:  # 4 prompts per step, 3 distinct hard/easy prompts and a mixed one: revisited, screened, topped up
            extra = dict(sampling_budget=5.0, budget_top_up=3, max_steps=4)  # odd top-ups: padded rounds
            rates, repeat = [1.0, 0.0, 0.5, 0.02], 1
        args = AdaGRPOConfig(per_device_train_batch_size=8, learning_rate=1e-2, prompt_memory=True, **extra, **common)
        trainer = Recorder(
            model=model_path, reward_funcs=reward, args=args, train_dataset=pass_rate_dataset(rates, repeat=repeat)
        )
        trainer.train()
        write_rank(output_dir, trainer, reward, refill=trainer.sampling_state.refill.state_dict())
        return
    # Global batch of 4 prompts per step, 2 per process: the first process gets both hard prompts (pass rate 0.02
    # and 0.0: they run all 4 rounds), the second gets an easy and a mixed one (done in round 1).
    dataset = pass_rate_dataset([0.02, 0.0, 1.0, 0.5], repeat=4)
    # round_repeat=5: an odd number of active prompts gives an odd round, which must be padded to split evenly.
    args = AdaGRPOConfig(per_device_train_batch_size=8, max_steps=2, learning_rate=1e-2, round_repeat=5, **common)
    trainer = Recorder(model=model_path, reward_funcs=reward, args=args, train_dataset=dataset)
    from tests.integration.test_generation_count import (
        GenerateCounter,  # this rank's rows and tokens, counted below trl-ada
    )

    counter = GenerateCounter(trainer)
    trainer.train()
    rank = trainer.accelerator.process_index
    logs = [h for h in trainer.state.log_history if "loss" in h]
    with open(os.path.join(output_dir, f"rank{rank}.json"), "w") as f:
        json.dump(
            {
                "reward_calls": len(reward.log),
                "logs": logs,
                "groups": trainer.groups,
                "generated": [counter.rows, counter.tokens],
                "inputs": trainer.inputs_seen,
                "advantages": trainer.advantages,
                "table_rows": len(trainer._logs["completion"]),
                "extra_mismatches": extra_column_mismatches(trainer),
                "params": float(sum(p.detach().double().sum() for p in trainer.model.parameters())),
            },
            f,
        )


def write_trained(output_dir, trainer, **more):
    """This rank's record of a run without prompt memory: its weights' sum, its logs, and `more`."""
    params = float(sum(p.detach().double().sum() for p in trainer.model.parameters()))
    record = {"params": params, "logs": [h for h in trainer.state.log_history if "loss" in h], **more}
    with open(os.path.join(output_dir, f"rank{trainer.accelerator.process_index}.json"), "w") as f:
        json.dump(record, f)


def write_rank(output_dir, trainer, reward, **more):
    """This rank's record of a run with prompt memory: what it scored, trained on and remembered, and the logs."""
    record = {
        "reward_calls": len(reward.log),
        "groups": trainer.groups,
        "memory": trainer.prompt_memory.table(),
        "advantages": trainer.advantages,
        "logs": [h for h in trainer.state.log_history if "loss" in h],
    }
    with open(os.path.join(output_dir, f"rank{trainer.accelerator.process_index}.json"), "w") as f:
        json.dump({**record, **more}, f)


def agents(model_paths, output_dir, common):
    """Tools, an environment, rollout_func and image prompts with adaptive rounds on 2 processes."""
    import torch

    from tests.helpers.tool_policy import install
    from tests.integration import test_rollouts as t

    tool_model, plain_model, vlm = model_paths.split(",")
    common = dict(common, per_device_train_batch_size=8, max_steps=2, learning_rate=1e-3, max_completion_length=96)
    common.pop("output_dir")
    report = {}

    def record(name, trainer, **more):
        logs = [h for h in trainer.state.log_history if "loss" in h]
        params = float(sum(p.detach().double().sum() for p in trainer.model.parameters()))
        report[name] = {"logs": logs, "params": params, **more}

    trainer = t.Keeper(
        model=tool_model,
        reward_funcs=t.product_reward,
        tools=[t.multiply],
        args=AdaGRPOConfig(**common, output_dir=f"{output_dir}/tools"),
        train_dataset=t.calculator_dataset(),
    )
    policy = t.CountingPolicy(trainer.processing_class)
    install(trainer, policy)
    trainer.train()
    masks = [[s.tool_mask for s in kept] for kept in trainer.kept]
    same = all(
        torch.equal(
            out["tool_mask"][row, : len(s.completion_ids)], torch.tensor(s.tool_mask or [1] * len(s.completion_ids))
        )
        for kept, out in zip(trainer.kept, trainer.outputs)
        for row, s in enumerate(kept)
    )
    record("tools", trainer, tool_calls=policy.tool_calls, malformed=policy.malformed, masks_match=same, masks=masks)

    if t.ENVIRONMENTS:  # TRL's environment_factory needs transformers >= 5.2 (the oldest set has 5.0)
        environment(t, tool_model, output_dir, common, record)
    rollout_func_and_images(t, plain_model, vlm, output_dir, common, record)
    rank = int(os.environ["RANK"])
    with open(os.path.join(output_dir, f"rank{rank}.json"), "w") as f:
        json.dump(report, f)


def environment(t, tool_model, output_dir, common, record):
    from tests.helpers.tool_policy import install

    t.CalculatorEnv.resets = 0
    trainer = t.Keeper(
        model=tool_model,
        reward_funcs=None,
        environment_factory=t.CalculatorEnv,
        args=AdaGRPOConfig(**common, output_dir=f"{output_dir}/env"),
        train_dataset=t.calculator_dataset(),
    )
    install(trainer, t.ScriptedPolicy(trainer.processing_class, malformed_rate=0.0))
    trainer.train()
    record("environment", trainer, resets=t.CalculatorEnv.resets, pool=len(trainer._environment_pool[None]))

    # A routing dataset without prompts: each rollout's environment supplies its prompt from reset()
    trainer = t.Keeper(
        model=tool_model,
        reward_funcs=t.answer_format_reward,
        environment_factory=t.ROUTED,
        args=AdaGRPOConfig(
            **common, positive_threshold=1.5, positive_reward_func="weighted_sum", output_dir=f"{output_dir}/routed"
        ),
        train_dataset=t.routing_dataset(),
    )
    install(trainer, t.ScriptedPolicy(trainer.processing_class, malformed_rate=0.0))
    trainer.train()
    record("environment_routed", trainer, prompts=sorted({str(s.prompt) for kept in trainer.kept for s in kept}))


def rollout_func_and_images(t, plain_model, vlm, output_dir, common, record):
    from transformers import AutoTokenizer

    calls = []
    tokenizer = AutoTokenizer.from_pretrained(plain_model)
    trainer = t.Keeper(
        model=plain_model,
        reward_funcs=t.trace_reward,
        rollout_func=t.make_rollout_func(tokenizer, calls),
        args=AdaGRPOConfig(**common, output_dir=f"{output_dir}/rollout_func"),
        train_dataset=t.calculator_dataset(),
    )
    trainer.train()
    record("rollout_func", trainer, calls=calls)

    trainer = t.Keeper(
        model=vlm,
        reward_funcs=t.color_reward,
        train_dataset=t.color_dataset(),
        args=AdaGRPOConfig(
            **dict(common, max_completion_length=8), prompt_memory=True, output_dir=f"{output_dir}/images"
        ),
    )
    trainer.train()
    record("images", trainer, memory=sorted(trainer.prompt_memory.table()["prompt_hash"]))

    # TRL's VLM example form: the placeholder in the message, an `images` column; dynamic sampling refills
    trainer = t.Keeper(
        model=vlm,
        reward_funcs=t.color_reward,
        train_dataset=t.placeholder_color_dataset(),
        args=AdaGRPOConfig(
            **dict(common, max_completion_length=8),
            prompt_memory=True,
            dynamic_sampling=True,
            output_dir=f"{output_dir}/images_placeholder",
        ),
    )
    trainer.train()
    record("images_placeholder", trainer, memory=sorted(trainer.prompt_memory.table()["prompt_hash"]))


if __name__ == "__main__":
    main()
    exit_worker()
