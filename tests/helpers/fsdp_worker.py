"""Run by tests/integration/test_fsdp.py and tests/integration/test_deepspeed.py under `accelerate launch` with 2 CPU processes (gloo);
writes one JSON per rank.

accelerate 1.15 never selects FSDP on CPU: `AcceleratorState` (accelerate/state.py, the `elif self.distributed_type
in [MULTI_GPU, MULTI_NPU, ...]` branch) turns an FSDP launch into MULTI_CPU, i.e. plain DDP, and drops the plugin.
torch 2.13's FSDP2 itself runs on CPU with gloo, so `--fsdp` switches accelerate to FSDP after that decision: from
there on the model is sharded by accelerate's own `fsdp2_prepare_model` (torch `fully_shard`), and TRL and trl_ada
run unchanged. `--ddp` runs the same training as plain DDP, for the loss comparison.

`--zero3` (DeepSpeed ZeRO-3 with DeepSpeed's CPU accelerator, `DS_ACCELERATOR=cpu`, gloo): accelerate 1.15 does start
DeepSpeed on a machine without a GPU when `use_cpu` is false, but its `PartialState` then reports one process
(`_prepare_backend` knows no CPU backend outside `cpu=True`, so the process count is never read from
torch.distributed), while DeepSpeed's world holds two: DeepSpeedConfig stops with "train_batch_size is not equal to
micro_batch_per_gpu * gradient_acc_step * world_size 8 != 8 * 1 * 2". `--zero3` corrects the count after accelerate's
decision; from there DeepSpeed partitions the model and TRL and trl_ada run unchanged. (`use_cpu: true` instead makes
accelerate drop DeepSpeed and run DDP.) `--zero2`: the same with ZeRO stage 2 (optimizer states and gradients
partitioned, parameters whole on every rank).
"""

import json
import os
import sys


def switch_accelerate_to_fsdp_on_cpu():
    from accelerate import state
    from accelerate.utils import DistributedType

    original = state.AcceleratorState.__init__

    def init(self, *args, fsdp_plugin=None, **kwargs):
        original(self, *args, fsdp_plugin=fsdp_plugin, **kwargs)
        if fsdp_plugin is not None and self.distributed_type == DistributedType.MULTI_CPU:
            self.distributed_type = DistributedType.FSDP
            self.fsdp_plugin = fsdp_plugin
            state.PartialState._shared_state["distributed_type"] = DistributedType.FSDP

    state.AcceleratorState.__init__ = init


def count_deepspeed_processes_on_cpu():
    import torch.distributed
    from accelerate import state

    original = state.PartialState.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        if torch.distributed.is_initialized() and self.num_processes != torch.distributed.get_world_size():
            self.num_processes = torch.distributed.get_world_size()
            self.process_index = torch.distributed.get_rank()
            self.local_process_index = int(os.environ.get("LOCAL_RANK", 0))

    state.PartialState.__init__ = init


if "--fsdp" in sys.argv or "--fsdp-vllm" in sys.argv:
    switch_accelerate_to_fsdp_on_cpu()
if "--zero3" in sys.argv or "--zero2" in sys.argv:
    count_deepspeed_processes_on_cpu()

import torch  # noqa: E402
from torch.distributed.tensor import DTensor  # noqa: E402

from tests.helpers.data import make_recording_reward, pass_rate_dataset  # noqa: E402
from tests.helpers.processes import exit_worker, freeze_loaded_objects  # noqa: E402
from tests.helpers.trainers import SMALL  # noqa: E402
from trl_ada import AdaGRPOConfig, AdaGRPOTrainer  # noqa: E402
from trl_ada.integration.pipelined_rank import check_reward_models_unsharded  # noqa: E402


freeze_loaded_objects()  # after the imports


class Recorder(AdaGRPOTrainer):
    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is not None:  # what this rank restored, before any new step changes it
            self.restored = {
                "memory": self.prompt_memory.table(),
                "refill": self.sampling_state.refill.state_dict(),
                "prompts_drawn": self.sampling_state.prompts_drawn,
            }


def run(name, model_path, output_dir, lora=False, resume=None, **overrides):
    args = dict(SMALL, bf16=False, shuffle_dataset=False, learning_rate=1e-2, max_steps=2)
    args.update(output_dir=os.path.join(output_dir, name), **overrides)
    peft_config = None
    if lora:
        from peft import LoraConfig

        peft_config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    reward = make_recording_reward()
    # Mixed, hard and easy prompts: some finish in round 1, some run every round; the rewards give a non-zero loss.
    dataset = pass_rate_dataset([0.5, 0.02, 1.0, 0.3], repeat=4)
    trainer = Recorder(
        model=model_path,
        reward_funcs=reward,
        args=AdaGRPOConfig(**args),
        train_dataset=dataset,
        peft_config=peft_config,
    )
    # Not sharded yet, except under ZeRO-3, whose parameters are placeholders from the start (zero.Init).
    before = sum(float(p.detach().double().abs().sum()) for p in trainer.model.parameters())
    trainer.train(resume_from_checkpoint=resume)
    params = list(trainer.model.parameters())
    zero3 = all(hasattr(p, "ds_tensor") for p in params)  # DeepSpeed's partitioned parameters
    record = {
        "distributed_type": str(trainer.accelerator.distributed_type),
        "sharded": all(isinstance(p, DTensor) for p in params) or zero3,
        # What this rank holds of the parameters against their full size: about half of it under FSDP and ZeRO-3.
        "local_numel": sum(
            p.ds_tensor.numel() if zero3 else (p.to_local() if isinstance(p, DTensor) else p).numel() for p in params
        ),
        "full_numel": sum(p.ds_numel if zero3 else p.numel() for p in params),
        "reward_calls": len(reward.log),
        "logs": [h for h in trainer.state.log_history if "loss" in h],
        "global_step": trainer.state.global_step,
    }
    if not zero3:  # the L1 norm of the full weights after training relative to before: the updates moved them
        after = sum(
            float((p.full_tensor() if isinstance(p, DTensor) else p).detach().double().abs().sum()) for p in params
        )
        record["weights_moved"] = abs(after - before) / before
    engine = getattr(trainer, "deepspeed", None)
    if engine is not None:  # what DeepSpeed runs, and what this rank holds of the fp32 optimizer state (ZeRO-1/2)
        record["zero_stage"] = engine.zero_optimization_stage()
        partitions = getattr(engine.optimizer, "single_partition_of_fp32_groups", None)
        if partitions is not None:
            record["optimizer_numel"] = sum(p.numel() for p in partitions)
    if trainer.prompt_memory is not None:
        record.update(memory=trainer.prompt_memory.table(), prompts_drawn=trainer.sampling_state.prompts_drawn)
    if trainer.sampling_state.refill is not None:
        record["refill"] = trainer.sampling_state.refill.state_dict()
    if hasattr(trainer, "restored"):
        record["restored"] = trainer.restored
    return record


def budget_and_resumed(model_path, output_dir, **overrides):
    """Budgeted sampling with prompt memory, 4 prompts revisited: a checkpoint at step 2, resumed for step 3."""
    budget = dict(sampling_budget=4.0, prompt_memory=True, **overrides)
    saved = run("budget", model_path, output_dir, save_strategy="steps", save_steps=2, **budget)
    checkpoint = os.path.join(output_dir, "budget", "checkpoint-2")
    resumed = run("budget", model_path, output_dir, max_steps=3, resume=checkpoint, **budget)
    return {"budget": saved, "resumed": resumed}


def pipelined_with_a_reward_model(model_path, output_dir, **overrides):
    """pipelined_rounds with a reward model: whether the engine shards it, and the error AdaGRPOTrainer then raises at
    construction. (The flag is set after construction here, as in tests/integration/test_pipelined_trainer.py: the config would
    otherwise start a vLLM engine, and the lean venv has none; the check is the one __init__ runs.)"""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    reward_model = AutoModelForSequenceClassification.from_pretrained(model_path, num_labels=1)
    reward_model.config.pad_token_id = AutoTokenizer.from_pretrained(model_path).pad_token_id
    args = dict(
        output_dir=os.path.join(output_dir, "reward_model"),
        num_generations=4,
        use_cpu=True,
        bf16=False,
        report_to="none",
        per_device_train_batch_size=8,
        max_steps=1,
        positive_reward_func="hash_reward",  # the reward model scores beside it: not what decides a positive
    )
    trainer = AdaGRPOTrainer(
        model=model_path,
        reward_funcs=[make_recording_reward(), reward_model],
        args=AdaGRPOConfig(**{**args, **overrides}),
        train_dataset=pass_rate_dataset([0.5]),
    )
    parameter = next(trainer.reward_funcs[1].parameters())
    record = {"sharded": isinstance(parameter, DTensor) or hasattr(parameter, "ds_tensor"), "message": None}
    try:
        check_reward_models_unsharded(True, trainer.reward_func_names, trainer.reward_funcs)
    except ValueError as error:
        record["message"] = str(error)
    return record


def main():
    model_path, output_dir, engine = sys.argv[1], sys.argv[2], sys.argv[3].removeprefix("--")
    if engine in ("zero3", "zero2"):  # use_cpu=True would make accelerate drop DeepSpeed (see the docstring)
        records = {"balanced": run("balanced", model_path, output_dir, use_cpu=False)}
        records["dynamic"] = run("dynamic", model_path, output_dir, use_cpu=False, dynamic_sampling=True)
        records.update(budget_and_resumed(model_path, output_dir, use_cpu=False))
        records["reward_model"] = pipelined_with_a_reward_model(model_path, output_dir, use_cpu=False)
    elif engine == "fsdp-vllm":  # a colocated vLLM engine per rank (TRL's external launcher), weights pushed from FSDP
        colocated = dict(
            use_vllm=True,
            vllm_mode="colocate",
            vllm_enable_sleep_mode=False,
            model_init_kwargs={"dtype": "bfloat16"},
            max_completion_length=8,
        )
        pipelined = "--pipelined" in sys.argv  # barrier-free rounds: each rank pipelines its prompts on its engine
        records = {"vllm": run("vllm", model_path, output_dir, pipelined_rounds=pipelined, **colocated)}
    else:
        records = {"balanced": run("balanced", model_path, output_dir)}
    if engine == "fsdp":
        records["reward_model"] = pipelined_with_a_reward_model(model_path, output_dir)
        records["lora"] = run("lora", model_path, output_dir, lora=True)
        records["dynamic"] = run("dynamic", model_path, output_dir, dynamic_sampling=True)
        records.update(budget_and_resumed(model_path, output_dir))
    rank = int(os.environ["RANK"])
    with open(os.path.join(output_dir, f"{engine}-rank{rank}.json"), "w") as f:
        json.dump(records, f)


if __name__ == "__main__":
    torch.manual_seed(0)
    main()
    exit_worker()
