"""The user guide's code blocks run, in order, in one namespace (documentation that works)."""

import os
import re

import pytest

GUIDE = os.path.join(os.path.dirname(__file__), "..", "docs", "guide.md")


def _python_blocks(path):
    with open(path) as fh:
        text = fh.read()
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_guide_has_code():
    assert len(_python_blocks(GUIDE)) >= 10


def test_guide_code_blocks_run(capsys):
    namespace = {"__name__": "guide"}
    for i, block in enumerate(_python_blocks(GUIDE)):
        try:
            exec(compile(block, f"guide.md block {i}", "exec"), namespace)
        except Exception as e:  # noqa: BLE001 - report which block failed
            pytest.fail(f"docs/guide.md python block {i} failed: {type(e).__name__}: {e}\n"
                        f"{block}")
    out = capsys.readouterr().out
    assert "output of cos" in out and "named 'a'" in out
    assert "8 4\n16 5\n64 7" in out


README = os.path.join(os.path.dirname(__file__), "..", "README.md")


def test_readme_code_blocks_run(capsys):
    namespace = {"__name__": "readme"}
    blocks = _python_blocks(README)
    assert len(blocks) >= 4
    for i, block in enumerate(blocks):
        try:
            exec(compile(block, f"README.md block {i}", "exec"), namespace)
        except Exception as e:  # noqa: BLE001 - report which block failed
            pytest.fail(f"README.md python block {i} failed: {type(e).__name__}: {e}\n{block}")
    out = capsys.readouterr().out
    assert "output of dot_general" in out and "bytes at the peak" in out
