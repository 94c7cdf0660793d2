"""The compute study (benchmarks/compute_study): its prompt set (prompts that come back, a mix of difficulties, and a
held-out set with no training question in it, up to commuted operands or reordered terms) and its registered
design and analysis (study.py)."""

import json
import os
import re
from collections import Counter

import pytest

from tests.helpers import ROOT, load_script
from trl_ada.cli import paired
from trl_ada.cli.records import load_results


STUDY = os.path.join(ROOT, "benchmarks", "compute_study")


def read(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def operands(problem):
    """An independent canonical form: the operator and the multiset of operands (the order kept for a difference)."""
    numbers = [int(n) for n in re.findall(r"\d+", problem)]
    operator = re.search(r" ([+x-]) ", problem).group(1)
    return (operator, *(numbers if operator == "-" else sorted(numbers)))


def test_held_out_questions_are_not_training_questions_in_any_order():
    train = read(os.path.join(STUDY, "train.jsonl"))
    seen = {operands(r["problem"]) for r in train}
    for split in ("test_hard", "test_easy"):
        held = read(os.path.join(STUDY, f"{split}.jsonl"))
        assert len(held) >= 60
        assert not {operands(r["problem"]) for r in held} & seen, split
    # the filter removed what it had to: the hard set's own held-out file does share questions with this set
    original = read(os.path.join(ROOT, "benchmarks", "hard_set", "test_hard.jsonl"))
    assert {operands(r["problem"]) for r in original} & seen


def test_training_set_mixes_difficulties_from_the_screen_and_its_rows_are_what_grpo_trainer_takes():
    train = read(os.path.join(STUDY, "train.jsonl"))
    screen = {r["problem"]: r for r in read(os.path.join(ROOT, "benchmarks", "hard_set", "screen.jsonl"))}
    assert len({r["problem"] for r in train}) == len(train) == 48
    assert Counter(r["difficulty"] for r in train) == {"hard": 32, "medium": 16}
    for row in train:
        record = screen[row["problem"]]
        assert record["split"] == "train"
        assert (
            (1 <= record["right"] <= 2 and record["drawn"] == 16)
            if row["difficulty"] == "hard"
            else record["right"] >= 3
        )
        assert row["prompt"] == [{"role": "user", "content": row["problem"]}] and row["answer"] == record["answer"]
    # 4 prompts a step: every question comes back every 12 steps, at least 4 times in 48 steps
    assert len(train) / 4 == 12


def synthetic_record(arm, seed, level, per_step=200, reward_slope=0.0, tokens_end=64_000, spread=None):
    """A compare record that generates `per_step` tokens a step until the first step at or past `tokens_end` (as
    --max_tokens stops a run), evaluated every 16 steps and at the end. From 16k tokens on, question q scores
    `level + spread[q]` on the hard set (0 before) and `level / 2` on the easy one; the training reward rises by
    `reward_slope` per 10k tokens."""
    spread = spread or [0.0] * 10
    steps = -(-tokens_end // per_step)

    def point(s):
        on = per_step * s >= 16_000
        items = [level + d if on else 0.0 for d in spread]
        return {
            "step": s,
            "tokens": per_step * s,
            "trained_tokens": per_step * s,
            "samples": 16 * s,
            "items": items,
            "greedy": sum(items) / len(items),
            "extra_items": [level / 2] * 4,
            "extra_greedy": level / 2,
        }

    reward = [0.5 + reward_slope * per_step * (s + 1) / 10_000 for s in range(steps)]
    return {
        "arm": arm,
        "seed": seed,
        "steps": steps,
        "generated_tokens": per_step * steps,
        "train_seconds": 3600.0,
        "generated_completions": 16 * steps,
        "trained_completions": 16 * steps,
        "eval_seconds": 360.0,
        "curve": [point(s) for s in list(range(0, steps, 16)) + [steps]],
        "reward": reward,
        "resumed_at": 40 if arm == "est_n8" else None,
    }


def write_results(folder, records):
    (folder / "results").mkdir(parents=True)
    for r in records:
        (folder / "results" / f"{r['arm']}-seed{r['seed']}.json").write_text(json.dumps(r))


def test_the_analysis_reads_the_registered_endpoints(tmp_path):
    """study.py analyse on records whose answers are known: the primary and secondary differences, Holm over the
    four registered secondary endpoints (one not run counts as p = 1) deciding their verdicts, the plateau rule on
    runs that end just past the budget (n=8's with half the steps), resumed runs named, exploratory arms without a
    verdict, arms not run reported as such, the plot drawn."""
    study = load_script("benchmarks/compute_study/study.py", "compute_study")
    spread = [0.3, 0.3, -0.2, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -0.4]  # question luck, mean 0
    seeds = (200, 201, 202)  # registered seeds of the confirmatory stage
    records = [synthetic_record("grpo_n4", s, 0.4, per_step=210) for s in seeds]
    records += [
        synthetic_record("budget4", s, 0.4 + 0.05 * (i + 1), per_step=190, spread=spread) for i, s in enumerate(seeds)
    ]
    records += [synthetic_record("grpo_n8", s, 0.5, per_step=410, reward_slope=0.1) for s in seeds]
    records += [synthetic_record("est_n8", s, 0.5, per_step=430) for s in seeds]  # level with its baseline
    records += [synthetic_record("dapo", s, 0.6, per_step=230) for s in (200,)]
    write_results(tmp_path / "study", records)
    report = study.main(["analyse", str(tmp_path / "study"), "--out", str(tmp_path / "out")])
    primary = report["primary"]
    assert primary["mean"] == pytest.approx(0.1) and primary["seeds"] == [200, 201, 202] and primary["short"] == []
    assert primary["per_seed"] == pytest.approx([0.05, 0.1, 0.15]) and primary["seed_sd"] == pytest.approx(0.05)
    assert 0 < primary["p"] < 1 and primary["verdict"] == ("ahead" if primary["low"] > 0 else paired.NO_DIFFERENCE)
    assert primary["equal_steps"]["mean"] == pytest.approx(0.1)
    secondary = report["secondary"]
    est = secondary["est_n8 vs grpo_n8, hard, window"]
    assert est["mean"] == 0.0 and est["p"] == 1.0 and not est["holm"]["rejected"]
    assert est["resumed"] == ["est_n8-seed200", "est_n8-seed201", "est_n8-seed202"]
    easy = secondary["budget4 vs grpo_n4, easy, window"]
    assert easy["mean"] == pytest.approx(0.05) and easy["p"] == 0.0 and easy["verdict"] == "ahead"
    point = secondary["budget4 vs grpo_n4, hard, at the budget"]
    # Holm over four: the point's p is the second smallest (after the easy slice's 0), so it is scaled by 3
    assert 0 < 3 * point["p"] < 1 and point["holm"]["adjusted"] == pytest.approx(3 * point["p"])
    assert point["verdict"] == ("ahead" if point["holm"]["rejected"] else paired.NO_DIFFERENCE)
    assert report["exploratory"]["dapo"]["verdict"] == "exploratory: no verdict"
    assert report["exploratory"]["dapo"]["mean"] == pytest.approx(0.2)
    assert report["exploratory"]["balanced"]["not_run"]
    plateau = report["plateau"]
    assert plateau["grpo_n4"]["plateaued"] and plateau["grpo_n4"]["seeds_plateaued"] == 3
    # 0.1 per 10k tokens across a 16k-token quarter: a fitted rise of 0.16, over the 0.08 tolerance
    assert plateau["grpo_n8"]["per_seed"][200]["reward"] == pytest.approx(0.16, rel=0.02)
    assert plateau["grpo_n8"]["per_seed"][200]["held_out"] == pytest.approx(0.0, abs=1e-9)
    assert not plateau["grpo_n8"]["plateaued"]
    assert report["cpu_hours"] == pytest.approx(13 * 1.1)
    assert json.loads((tmp_path / "out.json").read_text())["primary"]["mean"] == pytest.approx(0.1)
    assert (tmp_path / "out.png").stat().st_size > 0

    # a seed whose run stops short of the window (unfinished, cut) is left out and named, in the comparison and
    # in the plateau
    write_results(
        tmp_path / "short",
        records[:6]
        + [
            synthetic_record("grpo_n4", 203, 0.4, tokens_end=40_000),
            synthetic_record("budget4", 203, 0.5, tokens_end=40_000),
        ],
    )
    report = study.main(["analyse", str(tmp_path / "short"), "--out", str(tmp_path / "short_out")])
    assert report["primary"]["seeds"] == [200, 201, 202] and report["primary"]["short"] == [203]
    assert report["plateau"]["grpo_n4"]["short"] == [203]
    assert report["primary"]["missing"] == [204, 205, 206, 207]
    # the est pair is not run: its two endpoints still count in Holm's family, as p = 1
    assert report["secondary"]["est_n8 vs grpo_n8, hard, window"]["not_run"]
    point = report["secondary"]["budget4 vs grpo_n4, hard, at the budget"]
    assert point["holm"]["adjusted"] == pytest.approx(min(1.0, 3 * point["p"])) and 3 * point["p"] < 1


def test_the_analysis_reads_only_registered_seeds_and_names_what_it_lacks(tmp_path, capsys):
    """A record of a seed the stage did not register (a pilot seed, a test run) is set aside and named, not analysed;
    a registered seed without its pair is named missing; an n=8 run of few steps, with one evaluation in the last
    quarter, leaves its seed's held-out line unreadable (named) and the arm's rule still read from the others; the
    est pair's descriptive rows are kept."""
    study = load_script("benchmarks/compute_study/study.py", "compute_study")
    records = [synthetic_record("grpo_n4", s, 0.4, per_step=210) for s in (200, 201)]
    records += [synthetic_record("budget4", s, 0.45, per_step=190) for s in (200, 201, 202)]
    records += [synthetic_record(arm, 101, level, per_step=200) for arm, level in (("grpo_n4", 0.0), ("budget4", 0.9))]
    records += [synthetic_record("grpo_n8", s, 0.5, per_step=410) for s in (200, 201)]
    records += [synthetic_record("grpo_n8", 202, 0.5, per_step=1150)]  # 56 steps: one evaluation in the quarter
    records += [synthetic_record("est_n8", s, 0.55, per_step=430) for s in (200, 201, 202)]
    write_results(tmp_path / "study", records)
    report = study.main(["analyse", str(tmp_path / "study"), "--out", str(tmp_path / "out")])
    assert report["not_registered"] == ["budget4-seed101", "grpo_n4-seed101"]
    primary = report["primary"]
    assert primary["seeds"] == [200, 201] and primary["mean"] == pytest.approx(0.05)  # seed 101 would pull it up
    assert primary["missing"] == [202, 203, 204, 205, 206, 207] and primary["unpaired"] == [202]
    n8 = report["plateau"]["grpo_n8"]
    assert n8["unreadable"]["held_out"] == [202] and n8["per_seed"][202]["reward"] is not None
    assert n8["over_seeds"]["held_out"]["seeds"] == 2 and n8["plateaued"] is True
    assert n8["missing"] == [203, 204, 205, 206, 207] and report["plateau"]["grpo_n4"]["missing"][0] == 202
    est = report["secondary"]["est_n8 vs grpo_n8, hard, window"]
    assert est["descriptive"]["equal_completions"]["mean"] == pytest.approx(0.05)
    assert est["descriptive"]["equal_gpu_cost"]["seeds"] == 3
    printed = capsys.readouterr().out
    assert "missing: seeds [202, 203, 204, 205, 206, 207]" in printed
    assert "Not registered, set aside: budget4-seed101, grpo_n4-seed101" in printed
    assert "held_out line unreadable (fewer than 3 points in the quarter), left out: seeds [202]" in printed
    assert "| est_n8 vs grpo_n8 | +5.0 [" in printed


def test_status_tells_done_cut_and_missing_runs_without_reading_accuracy(tmp_path, capsys):
    """study.py status: a finished run, a cut run with its checkpoint (a rerun continues it), a cut run whose
    checkpoint is gone (a rerun trains it anew), runs not started; the CPU-hours of the records; and no accuracy."""
    study = load_script("benchmarks/compute_study/study.py", "compute_study")
    cut = [dict(synthetic_record(arm, 200, 0.437, tokens_end=40_000), cut=True) for arm in ("budget4", "grpo_n8")]
    write_results(tmp_path, [synthetic_record("grpo_n4", 200, 0.437), *cut])
    (tmp_path / "runs" / "budget4-seed200" / "checkpoint-200").mkdir(parents=True)  # 40k tokens at 200 a step
    table = study.main(["status", "confirm", "--output_dir", str(tmp_path)])
    assert table["grpo_n4"][200] == "done (step 320, 64,000 tokens)"
    assert table["budget4"][200] == "cut (step 200, 40,000 tokens; a rerun continues it)"
    assert table["grpo_n8"][200].startswith("cut (step 200") and "trains it anew" in table["grpo_n8"][200]
    assert (
        all(table[arm][s] == "to run" for arm in table for s in range(201, 208)) and table["est_n8"][200] == "to run"
    )
    printed = capsys.readouterr().out.replace(str(tmp_path), "<output_dir>")  # its path may hold any digits
    assert "1 done, 2 cut, 29 to run; 3.3 CPU-hours" in printed and "43" not in printed and "0.4" not in printed


@pytest.mark.parametrize("stage", ["pilot", "confirm", "explore"])
def test_every_registered_arm_builds_its_config_as_trl_ada_compare_would(stage, tmp_path, monkeypatch):
    """The registered command parses as trl-ada-compare's arguments, and each arm's recipe, shared overrides and own
    overrides build a valid AdaGRPOConfig through the recipe parser compare uses: a typo in a registered arm fails
    here, not hours into a study."""
    from trl_ada.cli.compare import BASE_FIELDS, Arm, build_parser
    from trl_ada.cli.train import parse_recipe

    study = load_script("benchmarks/compute_study/study.py", "compute_study")
    monkeypatch.chdir(ROOT)  # the recipe and data paths are relative to the repository, as a run's are
    args = build_parser().parse_args(study.command(stage, deadline_s=60))
    arms, seeds, output_dir = study.STAGES[stage]
    assert [Arm.parse(tokens).name for tokens in args.arm] == arms and args.seeds == seeds
    assert (args.max_tokens, args.output_dir, args.threads, args.deadline_s) == (64_000, output_dir, 1, 60.0)
    assert os.path.exists(args.eval_dataset) and os.path.exists(args.eval_extra_dataset)
    shared = Arm("set", None, args.set).argv()
    built = {}
    for tokens in args.arm:
        arm = Arm.parse(tokens)
        _, config, _ = parse_recipe(
            [
                "--config",
                args.config,
                *shared,
                *arm.argv(),
                *BASE_FIELDS,
                "--output_dir",
                str(tmp_path / arm.name),
                "--max_steps",
                "1000",
            ]
        )
        built[arm.name] = config
        assert config.use_vllm and config.vllm_mode == "colocate" and config.max_completion_length == 96
        assert config.per_device_train_batch_size == 4 * config.num_generations  # 4 prompts a step in every arm
    if stage == "confirm":
        assert built["budget4"].sampler == "budget" and built["budget4"].sampling_budget == 4
        assert built["budget4"].prompt_memory
        assert (
            built["est_n8"].sampler == "est"
            and built["est_n8"].num_generations == built["grpo_n8"].num_generations == 8
        )
        assert built["grpo_n4"].sampler == built["grpo_n8"].sampler == "grpo"
    with pytest.raises(ValueError, match="not registered for stage"):
        study.command(stage, seeds=[999])


def test_the_readme_status_table_is_what_the_committed_records_hold():
    """The study README's Status table is written by hand after each session's runs: every cell must be a committed
    record's optimizer steps, CPU-hours (training and evaluation) and resume step, a cell reading "to run" must have
    no record, and the token range and CPU total quoted beside it must be the records'. Only cost is compared here,
    never accuracy."""
    with open(os.path.join(STUDY, "README.md")) as f:
        readme = f.read()
    status = readme.split("### The runs", 1)[1]
    study = load_script("benchmarks/compute_study/study.py", "compute_study")
    registered_arms, registered_seeds, _ = study.STAGES["confirm"]
    records = {
        (arm, seed): record
        for arm, by_seed in load_results(os.path.join(STUDY, "confirm")).items()
        for seed, record in by_seed.items()
    }
    header = re.search(r"^\| seed \|(.+)\|$", status, re.M).group(1)
    arms = [cell.strip().strip("`") for cell in header.split("|")]
    assert arms == registered_arms
    shown = set()
    for row in re.findall(r"^\| (\d{3}(?:-\d{3})?) \|(.+)\|$", status, re.M):
        first, _, last = row[0].partition("-")
        seeds = range(int(first), int(last or first) + 1)
        for arm, cell in zip(arms, (c.strip() for c in row[1].split("|"))):
            for seed in seeds:
                if cell == "to run":
                    assert (arm, seed) not in records, f"{arm} seed {seed} has a record; the README says to run"
                    continue
                record = records[(arm, seed)]
                steps, hours = re.match(r"(\d+), (\d+\.\d\d?)", cell).groups()
                assert int(steps) == record["steps"], (arm, seed)
                assert float(hours) == round((record["train_seconds"] + record["eval_seconds"]) / 3600, 2), (arm, seed)
                resumed = re.search(r"\*\*resumed\*\* at (\d+)", cell)
                assert record["resumed_at"] == ([int(resumed.group(1))] if resumed else []), (arm, seed)
                assert not record["cut"] and record["stopped"] == "max_tokens", (arm, seed)
                shown.add((arm, seed))
    assert shown == set(records), f"records the table does not show: {sorted(set(records) - shown)}"
    tokens = sorted(record["generated_tokens"] for record in records.values())
    assert f"({tokens[0]:,}-{tokens[-1]:,} generated tokens)" in status
    prose = re.sub(r"\s+", " ", status)  # the README wraps its lines anywhere
    hours = sum(record["train_seconds"] + record["eval_seconds"] for record in records.values()) / 3600
    assert f"CPU so far: {hours:.1f} hours in the confirmatory records" in prose
    to_go = len(registered_arms) * len(registered_seeds) - len(records)
    assert (f"{to_go} runs to go" if to_go else f"All {len(records)} confirmatory runs are in") in prose


def test_peaks_finds_each_runs_peak_and_the_best_so_far_curve(tmp_path):
    """peaks.py on records whose curves are known: a run that rises to 0.6 at 32k tokens and falls back to 0.3 by
    the budget peaks there (before the window), one still rising peaks at its last evaluation, and the best-so-far
    curve holds each run's running maximum."""
    peaks = load_script("benchmarks/compute_study/peaks.py", "compute_study_peaks")
    falling, rising = synthetic_record("grpo_n4", 200, 0.0), synthetic_record("budget4", 200, 0.0)
    for record, shape in ((falling, lambda t: 0.6 - abs(t - 32_000) / 32_000 * 0.3), (rising, lambda t: t / 80_000)):
        for point in record["curve"]:
            point["greedy"] = shape(point["tokens"]) if point["tokens"] else 0.0
    write_results(tmp_path / "study", [falling, rising])
    report = peaks.main([str(tmp_path / "study"), "--out", str(tmp_path / "peaks")])
    down, up = report["arms"]["grpo_n4"], report["arms"]["budget4"]
    assert down["per_seed"][200]["peak_tokens"] == 32_000 and down["per_seed"][200]["peak"] == pytest.approx(0.6)
    assert down["last"]["mean"] == pytest.approx(0.3) and down["fall_from_peak"]["mean"] == pytest.approx(0.3)
    assert down["peaked_before_window"] == 1 and up["peaked_before_window"] == 0
    assert up["per_seed"][200]["peak_tokens"] == 64_000 and up["fall_from_peak"]["mean"] == 0.0
    grid = report["grid"]
    at = grid.index(48_000.0)
    assert down["best_so_far"][at] == pytest.approx(0.6) and up["best_so_far"][at] == pytest.approx(0.6)
    assert all(b >= a for a, b in zip(down["best_so_far"], down["best_so_far"][1:]))
    assert (tmp_path / "peaks.png").exists()
