"""A URL's credentials given to an experiment (a judge's base URL in a parameter, a step option or
``--set``) are never written to ``experiment.yaml`` nor printed by ``--dry-run``."""

from __future__ import annotations

from pathlib import Path

import yaml

from harness.api.commands import STEP_KINDS
from harness.core.credentials import redact_credentials, redacted_url
from harness.experiments.document import load_experiment
from harness.experiments.runner import plan

PASSWORD = "s3cret-pw@x"


def test_credentials_are_redacted_in_free_text_and_urls():
    assert redact_credentials(f"see http://user:{PASSWORD}/v1 and https://h/v1") == (
        "see http://***@x/v1 and https://h/v1"
    )
    assert redacted_url(f"http://user:{PASSWORD}/v1") == "http://***@x/v1"
    assert redact_credentials("mail me: a@b.org") == "mail me: a@b.org"


def test_an_experiment_never_writes_or_prints_url_credentials(tmp_path: Path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"question": "q", "answer": "a", "contexts": ["c"]}\n', encoding="utf-8")
    document = {
        "name": "secrets",
        "output": str(tmp_path / "out"),
        "params": {"judge": f"http://user:{PASSWORD}/v1"},
        "steps": [{"kind": "rag-eval", "id": "rag", "data": str(rows), "judge_base_url": "${judge}"}],
    }
    path = tmp_path / "experiment.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    experiment = load_experiment(path, [f"rag.judge_base_url=http://other:{PASSWORD}/v1"], STEP_KINDS)
    shown = yaml.safe_dump(experiment.resolved()) + "\n".join(plan(experiment))
    assert "s3cret" not in shown
    assert "***@x/v1" in shown
    # The step still talks to the URL it was given.
    assert experiment.steps[0].options.judge_base_url == f"http://other:{PASSWORD}/v1"
