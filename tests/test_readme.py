"""The README's API example runs as written (with a tiny stand-in loader)."""

import re
from pathlib import Path

import torch

README = Path(__file__).resolve().parents[1] / "README.md"


def test_api_example_runs():
    code = re.search(r"## The API in ten lines\n\n```python\n(.*?)```", README.read_text(), re.S)
    assert code, "README lost its API example"
    loader = [(torch.randn(16, 784), torch.randint(0, 10, (16,))) for _ in range(2)]
    namespace = {"loader": loader, "x_test": torch.randn(3, 784)}
    exec(code.group(1), namespace)
    pred = namespace["pred"]
    torch.testing.assert_close(pred.probs.sum(-1), torch.ones(3))
    assert pred.epistemic.shape == (3,)


def test_sgmcmc_example_runs():
    text = README.read_text()
    code = re.search(r"## SG-MCMC: samplers as optimizers\n\n```python\n(.*?)```", text, re.S)
    assert code, "README lost its SG-MCMC example"
    x_train, y_train = torch.rand(128, 64), torch.randint(0, 10, (128,))
    batches = [(x_train[i : i + 64], y_train[i : i + 64]) for _ in range(1100) for i in (0, 64)]
    namespace = {"x_train": x_train, "x_test": torch.rand(5, 64), "batches": batches}
    exec(code.group(1), namespace)
    assert len(namespace["collector"]) > 1
    torch.testing.assert_close(namespace["pred"].probs.sum(-1), torch.ones(5))


def test_bandit_example_runs():
    text = README.read_text()
    code = re.search(
        r"## Bandits: Thompson sampling with any posterior\n\n```python\n(.*?)```", text, re.S
    )
    assert code, "README lost its bandit example"
    namespace = {"steps": 5}
    exec(
        code.group(1).replace("updates_per_step=16", "updates_per_step=1, progress=False"),
        namespace,
    )
    assert namespace["history"].regret.shape == (5, 2, 3)
    assert namespace["actions"].shape == (5,)


def test_dropout_example_runs():
    text = README.read_text()
    title = "## Dropout as a posterior: Gaussian, binary and variational dropout"
    code = re.search(re.escape(title) + r"\n\n```python\n(.*?)```", text, re.S)
    assert code, "README lost its dropout example"
    loader = [(torch.randn(16, 784), torch.randint(0, 10, (16,))) for _ in range(2)]
    namespace = {"loader": loader, "x_test": torch.randn(3, 784)}
    exec(code.group(1), namespace)
    torch.testing.assert_close(namespace["pred"].probs.sum(-1), torch.ones(3))
    assert namespace["alphas"].shape == (400, 784) and float(namespace["alphas"].max()) <= 1.0


def test_gradient_uncertainty_example_runs():
    text = README.read_text()
    title = "## Gradient-uncertainty sampling and out-of-distribution scores"
    code = re.search(re.escape(title) + r"\n\n```python\n(.*?)```", text, re.S)
    assert code, "README lost its gradient-uncertainty example"
    batches = [(torch.rand(8, 1, 28, 28), torch.randint(0, 10, (8,))) for _ in range(60)]
    namespace = {
        "batches": batches,
        "x_test": torch.rand(5, 1, 28, 28),
        "y_test": torch.randint(0, 10, (5,)),
        "x_ood": torch.rand(4, 1, 28, 28),
    }
    source = (
        code.group(1)
        .replace("burn_in=1200", "burn_in=20")
        .replace("quantile=0.1,", "quantile=0.3, window=10,")
    )
    exec(source, namespace)
    assert len(namespace["collector"]) >= 2
    assert 0.0 <= namespace["scores"]["auroc_entropy"] <= 1.0


def test_description_length_and_pruning_example_runs():
    text = README.read_text()
    title = "## Description length, adaptive priors and pruning (Graves 2011; Blundell et al. 2015)"
    code = re.search(re.escape(title) + r"\n\n```python\n(.*?)```", text, re.S)
    assert code, "README lost its description-length example"
    loader = [(torch.randn(16, 784), torch.randint(0, 10, (16,))) for _ in range(2)]
    namespace = {"loader": loader, "x_test": torch.randn(3, 784)}
    exec(code.group(1), namespace)
    assert namespace["mdl"].compression_ratio > 0
    assert namespace["left"]["kept"] == round(0.05 * (784 * 400 + 400 + 400 * 10 + 10))
    torch.testing.assert_close(namespace["pred"].probs.sum(-1), torch.ones(3))
    assert namespace["small"](torch.randn(2, 784)).shape == (2, 10)


def test_recurrent_example_runs():
    text = README.read_text()
    title = "## Recurrent networks (Gan et al. 2017)"
    code = re.search(re.escape(title) + r"\n\n```python\n(.*?)```", text, re.S)
    assert code, "README lost its recurrent-network example"
    namespace: dict = {}
    exec(code.group(1), namespace)
    assert len(namespace["collector"]) >= 2
    assert namespace["loss"].requires_grad and torch.isfinite(namespace["loss"])
