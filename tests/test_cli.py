import json
import math
import subprocess
import sys

import pytest
import torch

from torchbayes.cli import main


def test_help_lists_the_run_command(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    assert "run" in capsys.readouterr().out


def test_list_names_the_regression_experiment(capsys):
    assert main(["list"]) == 0
    assert "regression" in capsys.readouterr().out


def test_unknown_experiment_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "no-such-thing"])
    assert exit_info.value.code == 2
    assert "no-such-thing" in capsys.readouterr().err


def test_run_regression_end_to_end_through_the_console_script(tmp_path):
    """The installed `torchbayes` entry point writes the plot, JSON and report it prints."""
    out = tmp_path / "regression"
    cmd = [
        sys.executable,
        "-m",
        "torchbayes",
        "run",
        "regression",
        "--quick",
        "--seed",
        "3",
        "--out",
        str(out),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert (out / "regression.png").stat().st_size > 10_000
    result = json.loads((out / "result.json").read_text())
    assert result["config"]["seed"] == 3
    for model in ("bbb", "plain"):
        assert 0.0 <= result["metrics"][model]["coverage_50_in_range"] <= 1.0
    plain, bbb = result["metrics"]["plain"], result["metrics"]["bbb"]
    assert plain["mean_epistemic_std_inside"] == plain["mean_epistemic_std_outside"] == 0.0
    assert bbb["mean_epistemic_std_outside"] > 1.3 * bbb["mean_epistemic_std_inside"] > 0.0
    assert "Bayes by Backprop" in (out / "report.md").read_text()
    assert str(out / "result.json") in done.stdout


def test_unwritable_output_folder_fails_before_training(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(OSError, match="not writable"):
        main(["run", "regression", "--quick", "--out", str(blocker / "sub")])


def test_full_disk_fails_before_training(tmp_path, monkeypatch):
    import errno
    import shutil

    from torchbayes.experiments import _result

    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(_result.shutil, "disk_usage", lambda path: usage._replace(free=5 * 2**20))
    with pytest.raises(OSError, match=r"5\.0 MiB free"):
        main(["run", "regression", "--quick", "--out", str(tmp_path / "a")])
    monkeypatch.undo()

    class FullDisk:  # what writing to a full file system does: ENOSPC on write
        def __init__(self, **kwargs):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(_result.tempfile, "NamedTemporaryFile", FullDisk)
    with pytest.raises(OSError, match=r"not writable: .*No space left on device"):
        main(["run", "regression", "--quick", "--out", str(tmp_path / "b")])
    assert not (tmp_path / "b" / "result.json").exists()


def test_set_overrides_typed_config_fields():
    from torchbayes.cli import config_overrides
    from torchbayes.experiments.regression import Config

    got = config_overrides(Config, ["hidden=8,4", "lr=0.5", "likelihood=homoscedastic", "steps=3"])
    assert got == {"hidden": (8, 4), "lr": 0.5, "likelihood": "homoscedastic", "steps": 3}


def test_set_merges_named_values_into_a_dict_field():
    from torchbayes.cli import config_overrides
    from torchbayes.experiments.mushroom import Config

    got = config_overrides(Config, ["lr=bbb:3e-4,plain:2e-4"])["lr"]
    assert got == {**Config().lr, "bbb": 3e-4, "plain": 2e-4}
    with pytest.raises(ValueError, match=r"unknown name\(s\) \['nosuch'\]"):
        config_overrides(Config, ["lr=nosuch:1"])
    with pytest.raises(ValueError, match="NAME:VALUE"):
        config_overrides(Config, ["lr=0.1"])


@pytest.mark.parametrize(
    ("pair", "message"),
    [
        ("nosuch=1", "unknown config field 'nosuch'"),
        ("steps=ten", "steps='ten'"),
        ("steps", "KEY=VALUE"),
    ],
)
def test_bad_set_is_a_clear_error(pair, message, capsys, tmp_path):
    assert main(["run", "regression", "--quick", "--out", str(tmp_path), "--set", pair]) == 2
    assert message in capsys.readouterr().err


def test_invalid_config_value_names_the_field(capsys, tmp_path):
    assert main(["run", "regression", "--out", str(tmp_path), "--set", "likelihood=cauchy"]) == 2
    assert "likelihood=" in capsys.readouterr().err


def test_run_mlp_sgmcmc_end_to_end(tmp_path):
    out = tmp_path / "mlp"
    assert (
        main(
            [
                "run",
                "mlp-sgmcmc",
                "--quick",
                "--out",
                str(out),
                "--set",
                "epochs=6",
                "--set",
                "burn_in_epochs=3",
                "--set",
                "hidden=32",
            ]
        )
        == 0
    )
    result = json.loads((out / "result.json").read_text())
    assert set(result["metrics"]) == {"sgd", "rmsprop", "sgld", "psgld", "sghmc", "sgnht"}
    for m in result["metrics"].values():
        assert m["samples"] == 3 == len(m["error_vs_samples"]) == len(m["nll_vs_samples"])
        assert 0.0 <= m["averaged_error"] < 0.5
    assert (out / "mlp_sgmcmc.png").stat().st_size > 10_000


def test_run_mushroom_end_to_end(tmp_path):
    out = tmp_path / "mushroom"
    args = ["run", "mushroom", "--quick", "--out", str(out), "--set", "steps=40"]
    assert main([*args, "--set", "hidden=16,16"]) == 0
    result = json.loads((out / "result.json").read_text())
    agents = result["metrics"]["agents"]
    assert set(agents) == {"bbb", "vd", "psgld", "greedy", "eps1", "eps5"}
    for a in agents.values():
        assert len(a["per_seed_regret"]) == 2 and 0.0 <= a["tail_accuracy"] <= 1.0
    assert len(result["metrics"]["curves"]["bbb"]) == len(result["metrics"]["curve_steps"]) == 40
    assert (out / "mushroom.png").stat().st_size > 10_000
    assert "cumulative regret" in (out / "report.md").read_text()


def test_mushroom_rejects_unknown_agents(capsys, tmp_path):
    assert main(["run", "mushroom", "--out", str(tmp_path), "--set", "agents=bbb,ucb"]) == 2
    assert "agents='ucb'" in capsys.readouterr().err


def test_mushroom_heteroscedastic_laplace_blundell_end_to_end(tmp_path):
    from torchbayes.experiments.mushroom import Config, make_agent
    from torchbayes.models import mlp
    from torchbayes.priors import Laplace

    args = ["run", "mushroom", "--quick", "--out", str(tmp_path), "--set", "steps=5"]
    options = ["heteroscedastic=true", "kl_schedule=blundell", "bbb_prior=laplace", "hidden=4"]
    assert main([*args, *[a for o in options for a in ("--set", o)], "--set", "agents=bbb"]) == 0
    assert json.loads((tmp_path / "result.json").read_text())["config"]["heteroscedastic"]
    config = Config(bbb_prior="laplace", prior_std=2.0, seeds=1)
    prior = make_agent("bbb", mlp(3, (4,), 1), config).population.prior
    assert isinstance(prior, Laplace) and float(prior.scale) == pytest.approx(2.0 / 2**0.5)
    assert main([*args, "--set", "kl_schedule=last"]) == 2


def test_mushroom_run_leaves_the_callers_rng_untouched(tmp_path):
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    args = ["run", "mushroom", "--quick", "--out", str(tmp_path), "--set", "steps=3"]
    assert main([*args, "--set", "hidden=4", "--set", "agents=bbb,greedy"]) == 0
    torch.testing.assert_close(torch.rand(3), expected)


def test_run_mnist_vd_end_to_end(tmp_path):
    out = tmp_path / "vd"
    args = ["run", "mnist-vd", "--quick", "--out", str(out), "--set", "hidden_sizes=16,24"]
    assert main([*args, "--set", "train_subset=1500"]) == 0
    result = json.loads((out / "result.json").read_text())
    assert result["config"]["dataset_used"] in ("mnist", "fashion-mnist")
    methods = result["metrics"]
    assert set(methods) == {"none", "binary", "gaussian-a", "gaussian-b", "vd-a", "vd-a2", "vd-b"}
    for by_width in methods.values():
        assert set(by_width) == {"16", "24"}
        for scores in by_width.values():
            assert 0.0 <= scores["mean_error"] < 0.9 and scores["mc_nll"] > 0
    alphas = methods["vd-b"]["24"]["alphas"]
    assert len(alphas) == 4 and all(0 < row["median_alpha"] <= 1.0 for row in alphas)
    assert (out / "mnist_vd.png").stat().st_size > 10_000
    assert "Learned dropout rates" in (out / "report.md").read_text()


def test_run_gradient_variance_end_to_end(tmp_path):
    out = tmp_path / "gv"
    args = ["run", "gradient-variance", "--quick", "--out", str(out), "--set", "hidden=16"]
    assert main([*args, "--set", "checkpoints=1", "--set", "train_subset=1000"]) == 0
    result = json.loads((out / "result.json").read_text())
    assert set(result["metrics"]) == {"local", "per_example", "reparameterize", "flipout", "mean"}
    for by_epoch in result["metrics"].values():
        assert set(by_epoch) == {"1"} and set(by_epoch["1"]) == {"top", "bottom"}
    assert (out / "gradient_variance.png").stat().st_size > 10_000


def test_gradient_variance_rejects_unordered_checkpoints(capsys, tmp_path):
    args = ["run", "gradient-variance", "--out", str(tmp_path), "--set", "checkpoints=5,2"]
    assert main(args) == 2
    assert "checkpoints=(5, 2)" in capsys.readouterr().err


def test_run_ood_end_to_end(tmp_path):
    out = tmp_path / "ood"
    args = ["run", "ood", "--quick", "--out", str(out), "--set", "train_subset=600"]
    assert main([*args, "--set", "test_subset=200", "--set", "epochs=3"]) == 0
    result = json.loads((out / "result.json").read_text())
    assert result["config"]["ood_dataset"] in ("notmnist", "fashion-mnist", "sklearn-digits")
    methods = result["metrics"]
    assert set(methods) == {"sgd", "mc-dropout", "sgld", "gradient-uncertainty"}
    for scores in methods.values():
        assert 0.0 <= scores["accuracy"] <= 1.0 and scores["nll"] > 0
        assert 0.0 <= scores["auroc_entropy"] <= 1.0
    assert methods["sgd"]["predictive_samples"] == 1
    assert methods["mc-dropout"]["predictive_samples"] == 8
    gu = methods["gradient-uncertainty"]
    assert 0 < gu["sampled_steps"] < gu["steps"] and gu["kept_samples"] >= 1
    for name in ("ood_predictive.png", "ood_entropy.png"):
        assert (out / name).stat().st_size > 10_000
    assert "Park et al." in (out / "report.md").read_text()


def test_ood_rejects_burn_in_past_the_end(capsys, tmp_path):
    assert main(["run", "ood", "--out", str(tmp_path), "--set", "burn_in_epochs=9"]) == 2
    assert "burn_in_epochs" in capsys.readouterr().err


def test_run_mnist_bbb_end_to_end(tmp_path):
    out = tmp_path / "bbb"
    args = ["run", "mnist-bbb", "--quick", "--out", str(out), "--set", "hidden_sizes=16"]
    assert main([*args, "--set", "train_subset=800", "--set", "epochs=2"]) == 0
    result = json.loads((out / "result.json").read_text())
    methods = result["metrics"]
    assert set(methods) == {"sgd", "dropout", "bbb-gaussian", "bbb-mixture"}
    for by_width in methods.values():
        assert len(by_width["16"]["curve"]) == 2
        assert 0.0 <= by_width["16"]["mean_error"] < 0.9
    bbb = methods["bbb-mixture"]["16"]
    assert bbb["description_length"]["compression_ratio"] > 0
    removed = [row["removed"] for row in bbb["pruning"]["fraction"]]
    assert removed == pytest.approx([0.0, 0.5, 0.75, 0.95, 0.98], abs=1e-3)
    assert bbb["pruning"]["fraction"][-1]["stored_fraction_of_dense"] < 0.1
    for row in bbb["pruning"]["fraction"] + bbb["pruning"]["threshold"]:
        assert 0.0 <= row["retrained_test_error"] <= 1.0
    assert (out / "mnist_bbb.png").stat().st_size > 20_000
    assert "Description length" in (out / "report.md").read_text()


def test_run_mnist_prune_trains_only_what_it_prunes(tmp_path, capsys):
    out = tmp_path / "prune"
    args = ["run", "mnist-prune", "--quick", "--out", str(out), "--set", "hidden_sizes=8"]
    assert main([*args, "--set", "train_subset=500", "--set", "epochs=1"]) == 0
    result = json.loads((out / "result.json").read_text())
    assert result["name"] == "mnist-prune" and set(result["metrics"]) == {"bbb-mixture"}
    assert main([*args, "--set", "methods=sgd"]) == 2
    assert "bbb method" in capsys.readouterr().err


def test_run_mnist_graves_end_to_end(tmp_path):
    out = tmp_path / "graves"
    rows = "rows=delta/uniform,fixed/gaussian,adaptive/adaptive-gaussian"
    args = ["run", "mnist-graves", "--quick", "--out", str(out), "--set", rows]
    assert main([*args, "--set", "train_subset=500", "--set", "hidden=8", "--set", "epochs=1"]) == 0
    result = json.loads((out / "result.json").read_text())
    rows = result["metrics"]
    assert set(rows) == {"delta/uniform", "fixed/gaussian", "adaptive/adaptive-gaussian"}
    assert rows["delta/uniform"]["complexity_bits"] == 0.0
    for m in rows.values():
        assert m["error_bits"] > 0 and m["compression_ratio"] != 0
    assert rows["adaptive/adaptive-gaussian"]["prior"]["std"] > 0
    assert "‡" in (out / "report.md").read_text()


def test_run_char_lm_end_to_end(tmp_path):
    out = tmp_path / "char"
    args = ["run", "char-lm", "--quick", "--out", str(out), "--set", "cells=lstm,gru"]
    assert main([*args, "--set", "train_chars=12000", "--set", "test_chars=2000"]) == 0
    result = json.loads((out / "result.json").read_text())
    assert set(result["metrics"]) == {"lstm", "gru"}
    vocab = result["config"]["vocab_size"]
    for by_method in result["metrics"].values():
        for m in by_method.values():
            assert m["samples"] >= 2
            assert 0 < m["averaged_cross_entropy"] < math.log(vocab)  # better than uniform
            for curve in m["averaged_perplexity"].values():
                assert len(curve) == m["samples"]
            assert m["averaged_perplexity"]["forward"][-1] == pytest.approx(
                m["averaged_perplexity"]["thinned"][-1]
            )  # all K samples: the three selections coincide
    assert (out / "char_lm.png").stat().st_size > 10_000
    assert "Table 3" in (out / "report.md").read_text()


def test_char_lm_rejects_a_bad_scheme(capsys, tmp_path):
    assert main(["run", "char-lm", "--out", str(tmp_path), "--set", "scheme=shuffled"]) == 2
    assert "scheme" in capsys.readouterr().err
    assert main(["run", "sentence", "--out", str(tmp_path), "--set", "temperature=-1"]) == 2
    assert "temperature=-1.0" in capsys.readouterr().err


def test_paper_noise_is_temperature_two_over_n():
    from torchbayes.experiments._optim import rmsprop_or_psgld, sampling_temperature

    assert sampling_temperature(1.0, True, 5452) == 2 / 5452
    assert sampling_temperature(0.5, False, 5452) == 0.5
    sampler = rmsprop_or_psgld(
        "psgld", [torch.nn.Parameter(torch.zeros(2))], lr=1e-3, alpha=0.99, num_data=10,
        prior_precision=1.0, temperature=0.2,
    )  # fmt: skip
    assert sampler.param_groups[0]["temperature"] == 0.2


@pytest.mark.parametrize("dataset", ["trec", "cr"])
def test_run_sentence_end_to_end(tmp_path, dataset):
    out = tmp_path / dataset
    args = ["run", "sentence", "--quick", "--out", str(out), "--set", f"dataset={dataset}"]
    methods = ("rmsprop", "rmsprop-gal-dropout", "psgld") if dataset == "trec" else ("psgld",)
    if dataset == "cr":
        args += ["--set", "paper_noise=true"]  # Gan et al.'s noise scale, T = 2/N
    assert main([*args, "--set", "train_subset=300", "--set", f"methods={','.join(methods)}"]) == 0
    result = json.loads((out / "result.json").read_text())
    runs = 1 if dataset == "trec" else 2  # quick: one seed, or 2-fold CV
    for method in methods:
        m = result["metrics"][method]
        assert len(m["runs"]) == runs and m["runs"][0]["samples"] >= 2
        assert 0.0 <= m["averaged_error_mean"] <= 1.0
        assert len(m["error_vs_samples"]) == m["runs"][0]["samples"]
    rows = result["metrics"]["most_uncertain"]
    assert rows and all(0.0 <= r["probability_mean"] <= 1.0 for r in rows)
    assert (out / "sentence.png").stat().st_size > 10_000
    assert "Tables 6–7" in (out / "report.md").read_text()


def test_run_word_lm_end_to_end_on_a_corpus_in_ptb_format(tmp_path):
    from test_data import _ptb_like

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    _ptb_like(corpus, (("train", 3000), ("valid", 20), ("test", 300)))
    out = tmp_path / "out"
    args = ["run", "word-lm", "--quick", "--out", str(out), "--set", f"data_folder={corpus}"]
    assert main([*args, "--set", "methods=sgd,sgld-dropout", "--set", "test_words=2000"]) == 0
    result = json.loads((out / "result.json").read_text())
    vocab = result["config"]["vocab_size"]
    for scheme in ("stream", "random"):
        for method in ("sgd", "sgld-dropout"):
            m = result["metrics"][scheme][method]
            assert m["samples"] >= 2 and m["averaged_perplexity"] < vocab  # it learned something
            assert len(m["averaged_perplexity_curves"]["thinned"]) == m["samples"]
    assert (out / "word_lm.png").stat().st_size > 10_000
    assert "Table 4" in (out / "report.md").read_text()


def test_run_uci_end_to_end_and_resume_skips_finished_splits(tmp_path):
    out = tmp_path / "uci"
    args = ["run", "uci", "--quick", "--out", str(out), "--set", "splits=1"]
    assert main([*args, "--set", "keep_checkpoints=true"]) == 0
    result = json.loads((out / "result.json").read_text())
    boston = result["metrics"]["bostonHousing"]
    assert list(boston) == ["plain", "mc-dropout", "bbb", "bbb-refit-noise", "psgld"]
    refit = boston["bbb-refit-noise"]
    assert refit["rmse_mean"] == boston["bbb"]["rmse_mean"]  # the same network, another σ
    assert refit["noise_std_mean"] != boston["bbb"]["noise_std_mean"]
    for m in boston.values():
        assert 0.0 < m["rmse_mean"] < 10.0 and math.isfinite(m["log_likelihood_mean"])
        assert 0.0 <= m["coverage_95_mean"] <= 1.0
    chosen = boston["mc-dropout"]["splits"][0]
    assert chosen["p"] in (0.005, 0.01, 0.05, 0.1) and chosen["tau"] in (0.1, 0.15, 0.2)
    assert boston["psgld"]["splits"][0]["samples"] == 10
    assert (out / "uci.png").stat().st_size > 10_000
    assert (
        "| bostonHousing | Gal's MC dropout, grid search (2018 readme) | 2.90 | -2.40 |"
        in (out / "report.md").read_text()
    )
    saved = out / "checkpoints" / "bostonHousing-bbb-split0.json"
    row = json.loads(saved.read_text())
    saved.write_text(json.dumps({**row, "rmse": 123.0}))
    assert main([*args, "--resume"]) == 0
    again = json.loads((out / "result.json").read_text())["metrics"]["bostonHousing"]
    assert again["bbb"]["rmse_mean"] == 123.0  # reloaded, not retrained
    assert again["plain"]["rmse_mean"] == boston["plain"]["rmse_mean"]
    assert not (out / "checkpoints").exists()


def test_uci_refits_bbb_noise_on_a_validation_fit(tmp_path, capsys):
    args = ["run", "uci", "--quick", "--out", str(tmp_path), "--set", "splits=1"]
    args += ["--set", "methods=bbb", "--set", "noise_refit=validation"]
    assert main(args) == 0
    metrics = json.loads((tmp_path / "result.json").read_text())["metrics"]["bostonHousing"]
    bbb, refit = metrics["bbb"], metrics["bbb-refit-noise"]
    assert refit["rmse_mean"] == bbb["rmse_mean"]
    assert refit["train_s_mean"] > bbb["train_s_mean"]  # the second, held-out fit counts
    assert main([*args[:-1], "noise_refit=test"]) == 2
    assert "noise_refit=" in capsys.readouterr().err


def test_uci_rejects_unknown_data_sets_and_too_many_splits(capsys, tmp_path):
    assert main(["run", "uci", "--out", str(tmp_path), "--set", "datasets=boston"]) == 2
    assert "datasets=" in capsys.readouterr().err
    args = ["run", "uci", "--quick", "--out", str(tmp_path), "--set", "splits=21"]
    with pytest.raises(ValueError, match="splits must be at most 20"):
        main(args)


def test_uci_scores_a_fixed_sample_set_with_every_sample_once():
    from torch.distributions import Normal

    from torchbayes.experiments.uci import Config, Standardized, evaluate
    from torchbayes.models import WithNoiseScale
    from torchbayes.posterior import SampleSet

    net = WithNoiseScale(torch.nn.Linear(1, 1), std=0.5)
    samples = []
    for bias in (-1.0, 1.0, 1.0, -1.0):
        sample = {k: v.detach().clone() for k, v in net.named_parameters()}
        sample["network.weight"].zero_()
        sample["network.bias"].fill_(bias)
        samples.append(sample)
    scale = Standardized.fit(torch.tensor([[0.0], [1.0]]), torch.tensor([[-1.0], [1.0]]))
    zeros = torch.zeros(3, 1)
    scores = evaluate(SampleSet(net, samples), scale, zeros, zeros, Config(), seed=0)
    assert scores["epistemic_std"] == pytest.approx(1.0)  # two at −1, two at +1
    assert scores["rmse"] == pytest.approx(0.0, abs=1e-6)
    expected = float(Normal(1.0, 0.5).log_prob(torch.tensor(0.0)))  # the mixture at 0
    assert scores["log_likelihood"] == pytest.approx(expected, rel=1e-5)
    assert scores["noise_std"] == pytest.approx(0.5, rel=1e-5) and scores["coverage_95"] == 1.0
