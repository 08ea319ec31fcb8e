"""The entropy-control methods of the mini_entropy environment (docs/mini_entropy.md).

* ``advantage_shaping`` of a run parses into a :class:`~hed.mini_rl.shaping.ShapingSpec` (bad
  values are one-line errors naming the key) and the shipped environment parses;
* :class:`~hed.mini_rl.shaped_trainer.ShapedGRPOTrainer`'s per-token advantages are those of
  :func:`hed.core.advantage_shaping.token_advantages` (hand-computed values, and on a batch the
  trainer generated itself, with entropies recomputed here independently);
* the environment's clip-higher pair trains differently: two optimizer steps of SmolLM2 in
  float32 (the CPU type on which mini_dapo's pair came out byte-identical) with the
  environment's learning rate and iterations give different ``clip_ratio/high_mean``.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, PrinterCallback, TrainerCallback

from hed.config.loader import HEDConfigLoader
from hed.core.advantage_shaping import SchemeParams, token_advantages
from hed.errors import ConfigError
from hed.mini_rl.config import training_specs
from hed.mini_rl.shaping import ShapingSpec, shaping_spec
from tests.conftest import build_tiny_model

REPO = Path(__file__).resolve().parents[2]
ENV_RUNS = (
    "mini_entropy_symmetric",
    "mini_entropy_clip_higher",
    "mini_entropy_top20",
    "mini_entropy_entropy_bonus",
    "mini_entropy_entropy_advantage",
    "mini_entropy_gtpo",
)


def _env_params() -> dict:
    return HEDConfigLoader(
        conf_source=str(REPO / "conf"), base_env="base", default_run_env="local", env="mini_entropy"
    )["parameters"]


def test_the_mini_entropy_environment_parses_into_six_runs_differing_by_one_method():
    params = _env_params()
    specs = training_specs(params["mini_rl"], params["runs"], params["prompts"])
    assert [s.run for s in specs] == list(ENV_RUNS)
    args = {s.run: dict(s.trainer_args) for s in specs}
    base = args["mini_entropy_clip_higher"]
    # what each run changes with respect to the clip-higher run
    assert {run: {k: v for k, v in a.items() if base.get(k) != v} for run, a in args.items()} == {
        "mini_entropy_symmetric": {"epsilon_high": 0.2},
        "mini_entropy_clip_higher": {},
        "mini_entropy_top20": {"top_entropy_quantile": 0.2},
        "mini_entropy_entropy_bonus": {"entropy_coef": 0.001},
        "mini_entropy_entropy_advantage": {},
        "mini_entropy_gtpo": {},
    }
    assert base["epsilon_high"] == 0.28 and base["num_iterations"] == 2
    assert base["steps_per_generation"] == 2 and base["seed"] == 0
    shaping = {s.run: s.advantage_shaping for s in specs}
    assert shaping["mini_entropy_entropy_advantage"] == ShapingSpec(
        "entropy_advantage", SchemeParams(alpha=0.4, kappa=2.0)
    )
    assert shaping["mini_entropy_gtpo"] == ShapingSpec("gtpo", SchemeParams())
    assert [run for run, spec in shaping.items() if spec is None] == list(ENV_RUNS[:4])
    assert len({s.fingerprint("d", "m") for s in specs}) == 6
    assert {s.save_steps for s in specs} == {(0, 6, 12)}
    roles = {run: cfg["role"] for run, cfg in params["runs"].items()}
    assert roles == {run: "without_clip" if run == ENV_RUNS[0] else "with_clip" for run in ENV_RUNS}


def test_mini_dapo_fingerprints_do_not_change_without_advantage_shaping():
    """A run without ``advantage_shaping`` hashes exactly what it hashed before (no retrain)."""
    params = HEDConfigLoader(
        conf_source=str(REPO / "conf"), base_env="base", default_run_env="local", env="mini_dapo"
    )["parameters"]
    spec = training_specs(
        params["mini_rl"], params["runs"], params["prompts"], check_trainer_args=False
    )[0]
    shaped = training_specs(
        {
            **params["mini_rl"],
            "runs": {spec.run: {"advantage_shaping": {"scheme": "gtpo"}}},
        },
        params["runs"],
        params["prompts"],
        check_trainer_args=False,
    )[0]
    assert spec.advantage_shaping is None
    assert shaped.fingerprint("d", "m") != spec.fingerprint("d", "m")
    # the payload of a plain run has no advantage_shaping key: its fingerprint is the old one
    assert spec.fingerprint("d", "m") == type(spec)(
        **{**spec.__dict__, "advantage_shaping": None}
    ).fingerprint("d", "m")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("gtpo", "must be a mapping"),
        ({"alpha": 0.4}, r"advantage_shaping\.scheme = None: use one of"),
        ({"scheme": "top_rho_mask"}, "top_entropy_quantile"),
        ({"scheme": "entropy_advantage", "alpha": 0}, r"shaping\.alpha must be a number > 0"),
        ({"scheme": "entropy_advantage", "kappa": 1.0}, r"shaping\.kappa must be a number > 1"),
        ({"scheme": "gtpo", "beta": 1}, r"unknown parameter mini_rl\.runs\.r\.advantage_sh"),
    ],
)
def test_bad_advantage_shaping_is_a_one_line_error_naming_the_key(value, message):
    with pytest.raises(ConfigError, match=message) as error:
        shaping_spec(value, "mini_rl.runs.r.advantage_shaping")
    assert "\n" not in str(error.value)


def test_shaped_advantages_are_the_imported_formulas_by_hand():
    """Two groups of two: (correct, incorrect) and (incorrect, incorrect); lengths 3, 2, 3, 1."""
    from hed.mini_rl.shaped_trainer import shaped_advantages

    entropy = torch.tensor([[0.5, 2.0, 1.0], [0.25, 0.5, 9.0], [1.0, 1.0, 1.0], [3.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 0, 0]])
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0])
    groups = np.array([0, 0, 1, 1])
    spec = ShapingSpec("entropy_advantage", SchemeParams(alpha=0.4, kappa=2.0))
    got = shaped_advantages(entropy, mask, rewards, groups, spec)
    a = 0.5 / (math.sqrt(0.5) + 1e-6)  # GRPO: (1 - 0.5) / (unbiased std + 1e-6)
    cap = a / 2.0  # |A| / kappa
    expected = [
        [a + 0.2, a + cap, a + cap],  # 0.4 x 0.5 = 0.2 < cap; 0.8 and 0.4 are capped
        [-a + 0.1, -a + 0.2, 0.0],  # 0.4 x H below the cap; padding 0
        [0.0, 0.0, 0.0],  # all-equal group: A = 0, the bonus min(0.4 H, 0) = 0
        [0.0, 0.0, 0.0],
    ]
    assert got.dtype == torch.float32 and got.shape == (4, 3)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-6)

    gtpo = shaped_advantages(entropy, mask, rewards, groups, ShapingSpec("gtpo", SchemeParams()))
    # one correct and one incorrect response: token rewards 1 + 1 = 2 and -1 - 1 = -2 on
    # the 3 + 2 tokens; normalised by their mean 0.4 and unbiased std sqrt(4.8)
    pos, neg = (2 - 0.4) / (math.sqrt(4.8) + 1e-6), (-2 - 0.4) / (math.sqrt(4.8) + 1e-6)
    np.testing.assert_allclose(
        gtpo.numpy(), [[pos] * 3, [neg, neg, 0.0], [0.0] * 3, [0.0] * 3], rtol=1e-6
    )


def _alternating_reward(prompts, completions, **kwargs):
    """1, 0, 1, 0, ...: every group of 2+ completions has both outcomes."""
    return [float(i % 2 == 0) for i in range(len(completions))]


@pytest.mark.parametrize("scheme", ["entropy_advantage", "gtpo", "grpo_s"])
def test_shaped_trainer_batch_carries_the_formula_of_its_own_entropies(scheme, tokenizer, tmp_path):
    """The trainer's (B, T) advantage of a batch it generated equals ``token_advantages`` of
    the entropies recomputed here (a plain forward pass), its rewards and its groups."""
    from trl import GRPOConfig

    from hed.mini_rl.shaped_trainer import ShapedGRPOTrainer

    folder = build_tiny_model(tmp_path / "policy", tokenizer, scale=20.0)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    spec = ShapingSpec(scheme, SchemeParams(alpha=0.4, kappa=2.0))
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, num_generations=4,
        max_completion_length=6, temperature=1.0, top_k=0, use_cpu=True, report_to=[],
        save_strategy="no", seed=0, num_iterations=2, beta=0.0, loss_type="dapo",
        disable_tqdm=True, bf16=False,
    )  # fmt: skip
    prompts = ["What is 1 + 2?", "What is 7 - 3?"]
    trainer = ShapedGRPOTrainer(
        model=model, reward_funcs=[_alternating_reward], args=args, processing_class=tokenizer,
        train_dataset=_dataset(prompts), shaping=spec,
    )  # fmt: skip
    trainer.model.train()
    batch = trainer._generate_and_score_completions(
        [{"prompt": p} for p in prompts for _ in range(4)]
    )
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    width = batch["completion_ids"].size(1)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=attention).logits[:, -width - 1 : -1]
    log_p = torch.log_softmax(logits.float(), dim=-1)
    entropy = -(log_p.exp() * log_p).sum(-1)
    mask = batch["completion_mask"].bool().numpy()
    own = trainer._sampling_entropies(batch)  # what the trainer fed the formulas
    np.testing.assert_allclose(own.numpy()[mask], entropy.numpy()[mask], rtol=1e-4)
    expected = token_advantages(
        own.numpy(), mask, np.array([1.0, 0.0] * 4), scheme, spec.params,
        groups=np.repeat([0, 1], 4),
    )  # fmt: skip
    assert batch["advantages"].shape == mask.shape
    np.testing.assert_allclose(batch["advantages"].numpy(), expected, rtol=1e-5, atol=1e-6)
    assert np.abs(expected[mask]).min() > 0  # every token carries a shaped advantage


def _dataset(prompts):
    from datasets import Dataset

    return Dataset.from_dict({"prompt": prompts})


class _ClipRatios(TrainerCallback):
    def __init__(self) -> None:
        self.rows: list[dict[str, float]] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "clip_ratio/high_mean" in logs:
            self.rows.append({k: v for k, v in logs.items() if k.startswith("clip_ratio/")})


@pytest.mark.slow
def test_the_clip_higher_pair_clips_differently_in_float32(smollm2_dir, tmp_path):
    """Two optimizer steps of each run of the environment's clip pair, forced to float32,
    from the same start and seed: their logged clip ratios differ. The learning rate,
    iterations, steps per generation and clip bounds are the environment's; the reward is
    the alternating one (both outcomes in every group, so step 1 updates the policy on every
    CPU type), completions are 8 tokens long and the prompts one problem, to stay under two
    minutes."""
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from hed.mini_rl.trainer import render_prompts

    params = _env_params()
    specs = {s.run: s for s in training_specs(params["mini_rl"], params["runs"], params["prompts"])}
    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    prompts = render_prompts(tokenizer, ["What is 37 + 48?"] * 8, params["prompts"])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    ratios = {}
    try:
        for run in ("mini_entropy_symmetric", "mini_entropy_clip_higher"):
            model = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32)
            trainer_args = {
                **specs[run].trainer_args,
                "bf16": False,
                "max_steps": 2,
                "max_completion_length": 8,
                "report_to": [],
            }
            log = _ClipRatios()
            with tempfile.TemporaryDirectory(dir=tmp_path) as out:
                trainer = GRPOTrainer(
                    model=model, reward_funcs=[_alternating_reward],
                    args=GRPOConfig(output_dir=out, **trainer_args),
                    train_dataset=_dataset(prompts), processing_class=tokenizer, callbacks=[log],
                )  # fmt: skip
                trainer.remove_callback(PrinterCallback)
                trainer.train()
            ratios[run] = log.rows
    finally:
        torch.set_num_threads(threads)
    symmetric, higher = ratios["mini_entropy_symmetric"], ratios["mini_entropy_clip_higher"]
    # step 1 samples and updates (ratio 1); step 2 trains on the batch's other half with the
    # moved policy, the same weights in both runs: some ratios of positive-advantage tokens
    # lie in (1.2, 1.28], clipped by the symmetric run only (measured here: 0.056 vs 0.037)
    assert symmetric[0]["clip_ratio/high_mean"] == higher[0]["clip_ratio/high_mean"] == 0.0
    assert symmetric[1]["clip_ratio/high_mean"] > higher[1]["clip_ratio/high_mean"] > 0


def test_the_mini_entropy_default_run_trains_every_run_then_analyses_each():
    """``kedro run --env mini_entropy``: six trainings, generation of every (run, step), the
    N-run comparison, Figure 2 and the advantage_shaping_by_step table."""
    from kedro.framework.project import configure_project

    from hed.config import session as hed_session
    from hed.pipeline_registry import register_pipelines

    params = _env_params()
    configure_project("hed")
    with hed_session.session_config(params):
        names = {node.name for node in register_pipelines()["__default__"].nodes}
    assert {f"{run}.train_policy" for run in ENV_RUNS} <= names
    assert {
        f"{run}.step_{step}.shard_0.generate_shard" for run in ENV_RUNS for step in (0, 6, 12)
    } <= names
    assert {
        "build_runs_comparison", "plot_figure2", "tabulate_advantage_shaping",
        "plot_advantage_shaping", "collect_training_manifests",
    } <= names  # fmt: skip


@pytest.mark.slow
def test_a_run_with_advantage_shaping_trains_with_the_shaped_trainer(tokenizer, tmp_path):
    """``train_run`` of a tiny run with ``advantage_shaping: gtpo``: the manifest names the
    scheme and the trainer log carries ``shaped_advantage/mean`` at every sampled step."""
    import pandas as pd

    from hed.mini_rl.trainer import train_run

    base = build_tiny_model(tmp_path / "base", tokenizer, scale=20.0)
    prompts = {"apply_chat_template": True, "instruction_suffix": "\nAnswer with the number."}
    mini_rl = {
        "base_model": {"embedded": False, "model_dir": str(base)},
        "wandb": {"dir": str(tmp_path / "wandb"), "project": "hed-test"},
        "validation": {"max_new_tokens": 4, "batch_size": 4},
        "torch_threads": 1,
        "training": {
            "max_steps": 2, "save_every": 2, "seed": 0, "learning_rate": 1.0e-3,
            "per_device_train_batch_size": 4, "num_generations": 4, "num_iterations": 2,
            "loss_type": "dapo", "beta": 0.0, "max_completion_length": 4, "bf16": False,
        },
        "runs": {"tiny_gtpo": {"advantage_shaping": {"scheme": "gtpo"}}},
    }  # fmt: skip
    runs = {"tiny_gtpo": {"checkpoint_root": str(tmp_path / "ckpt"), "steps": [0, 2]}}
    (spec,) = training_specs(mini_rl, runs, prompts)
    problems = pd.DataFrame(
        {"problem": [f"What is {i} + 1?" for i in range(4)], "answer": [1, 2, 3, 4]}
    )
    manifest = train_run(spec, problems, problems, fingerprint="f")
    assert manifest["advantage_shaping"]["scheme"] == "gtpo"
    assert manifest["steps"] == [0, 2]
    logged = [row for row in manifest["train_log"] if "shaped_advantage/mean" in row]
    assert [row["step"] for row in logged] == [1]  # the step that sampled the batch
