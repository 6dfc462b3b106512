"""The rendered-docs check (docsgen/rendered.py, run by make lint on the built site)."""

from __future__ import annotations

from pathlib import Path

from acceldeploy.docsgen import rendered


def test_raw_list_markers_and_fences_are_found_and_code_is_not(tmp_path: Path) -> None:
    good = "<ul><li>one</li><li>two</li></ul><pre><code>- a\n1. b\n```</code></pre>"
    bad = "<p>text\n- not a list\n</p><li>exits\n1. tune.json</li><p>```python</p>"
    (tmp_path / "good.html").write_text(good)
    (tmp_path / "bad.html").write_text(bad)
    found = rendered.check(tmp_path)
    assert len(found) == 3 and all(f.startswith("bad.html: raw Markdown") for f in found)
    assert rendered.main([str(tmp_path)]) == 1
    (tmp_path / "bad.html").unlink()
    assert rendered.main([str(tmp_path)]) == 0
