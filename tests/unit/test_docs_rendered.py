"""The rendered-docs check (docsgen/rendered.py, run by make lint on the built site)."""

from __future__ import annotations

from pathlib import Path

import pytest

from acceldeploy.docsgen import rendered

GOOD = (
    "<ul><li>one</li><li>two</li></ul><pre><code>- a\n1. b\n```</code></pre>"
    "<p>wrapped <code>make\ntest-slow</code> and <code>a | b</code></p>"
    '<div class="highlight"><pre><span></span><code>text\n```yaml\nk: v\n```\n</code></pre></div>'
)
BAD = "<p>text\n- not a list\n</p><li>exits\n1. tune.json</li><p>```python</p>"


def test_raw_list_markers_and_fences_are_found_and_code_is_not(tmp_path: Path) -> None:
    (tmp_path / "good.html").write_text(GOOD)
    (tmp_path / "bad.html").write_text(BAD)
    found = rendered.check(tmp_path)
    assert len(found) == 3 and all(f.startswith("bad.html: raw Markdown") for f in found)
    assert rendered.main([str(tmp_path)]) == 1
    (tmp_path / "bad.html").unlink()
    assert rendered.main([str(tmp_path)]) == 0


@pytest.mark.parametrize(
    ("page", "kind"),
    [
        # A list nested by two spaces where Python-Markdown wants four: its items stay text.
        (
            "<ul><li><p><strong>on every host</strong>, node exporter, with:\n"
            "- its systemd collector;\n- its textfile collector.</p></li></ul>",
            "<strong>on every host</strong>",
        ),
        # A fence indented as a code block: the fence itself is shown in the block.
        (
            '<div class="highlight"><pre><span></span><code>```python\n'
            "self.available = requested - non_kv\n```\n</code></pre></div>",
            "a fence inside a code block: ```python",
        ),
        # A fence inside a paragraph read as a code span: the language runs into the code.
        ("<p>computes: <code>python\n  x = 1\n  </code></p>", "a fence read as inline code"),
        ("<p>a span that does not close: `--kv-cache-memory</p>", "does not close"),
        ("<p>a table with no blank line before it\n| a | b |\n|---|---|</p>", "| a | b |"),
        ("<li>a heading with no blank line\n## Next</li>", "## Next"),
    ],
)
def test_each_kind_of_raw_markdown_is_named(tmp_path: Path, page: str, kind: str) -> None:
    (tmp_path / "page.html").write_text(page)
    (found,) = rendered.check(tmp_path)
    assert found.startswith("page.html: raw Markdown on the page: ") and kind in found
