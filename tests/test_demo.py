"""The demo: runs end to end on a tiny configuration, losses agree across policies, and bad
flags exit with status 2 and a message listing the valid choices."""

import pytest

from remat import demo


@pytest.fixture
def tiny(monkeypatch):
    monkeypatch.setitem(demo.CONFIG, "d_model", 16)
    monkeypatch.setitem(demo.CONFIG, "n_heads", 2)
    monkeypatch.setitem(demo.CONFIG, "n_layers", 2)
    monkeypatch.setitem(demo.CONFIG, "seq_len", 16)
    monkeypatch.setitem(demo.CONFIG, "batch", 4)


def test_demo_runs_and_losses_agree(tiny, tmp_path, capsys):
    assert demo.main(["--steps", "3", "--policy", "none", "checkpoint",
                      "save_attention_outputs", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines()
            if line.split() and line.split()[0] in demo.POLICIES]
    assert [r[0] for r in rows][:3] == ["none", "checkpoint", "save_attention_outputs"]
    losses = [float(r[-1]) for r in rows[:3]]
    assert max(losses) - min(losses) < 1e-4
    peaks = [float(r[1]) for r in rows[:3]]
    assert peaks[1] < peaks[0]  # a checkpoint per block lowers the measured peak
    assert "named 'attention_out'" in out
    assert "Sampled text" in out


def test_unknown_policy_exits_2_listing_valid_ones(capsys):
    with pytest.raises(SystemExit) as e:
        demo.parse_args(["--policy", "bogus"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "bogus" in err and all(name in err for name in demo.POLICIES)


def test_invalid_steps_exit_2(capsys):
    with pytest.raises(SystemExit) as e:
        demo.parse_args(["--steps", "0"])
    assert e.value.code == 2
    assert "--steps" in capsys.readouterr().err
