"""The documentation site (mkdocs.yml, docs/) builds without a warning, and its generated pages are
what the code gives.

* `mkdocs build --strict`: every page in the nav and every page in the nav's files, no broken link or
  anchor (mkdocs.yml's `validation` turns those into warnings, and --strict into failures), Mermaid
  fences rendered for mkdocs-material.
* docs/reference/crd.md and docs/reference/configuration.md equal what `python tools/gen_docs.py`
  writes from operator/model.py and runtime/config.py (as tests/test_crd.py does for crds/).

The shell blocks of docs/ are checked by tests/test_readme.py, the runbooks by tests/test_alerts.py,
the table of unsupported PyFlink names by tests/test_pyflink_names.py.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))

import gen_docs  # noqa: E402

from streamjob.runtime import config  # noqa: E402

HAS_MKDOCS = importlib.util.find_spec("mkdocs") is not None and importlib.util.find_spec("material") is not None


@pytest.mark.skipif(not HAS_MKDOCS, reason="mkdocs and mkdocs-material are not installed (pip install -e '.[test]')")
def test_the_site_builds_strictly(tmp_path):
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-f", str(REPO / "mkdocs.yml"),
                           "-d", str(tmp_path / "site")], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env=env)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    # The Mermaid diagrams reach the page as mkdocs-material renders them.
    page = (tmp_path / "site" / "concepts" / "checkpoints" / "index.html").read_text()
    assert '<pre class="mermaid"><code>sequenceDiagram' in page


def test_every_page_is_in_the_nav():
    nav = (REPO / "mkdocs.yml").read_text()
    pages = {str(p.relative_to(REPO / "docs")) for p in (REPO / "docs").rglob("*.md")}
    missing = sorted(p for p in pages if not re.search(rf":\s*{re.escape(p)}\s*$", nav, re.M))
    assert not missing, f"pages not in mkdocs.yml's nav: {missing}"


@pytest.mark.parametrize("page", sorted(gen_docs.PAGES, key=str), ids=lambda p: p.name)
def test_generated_pages_are_what_the_code_gives(page):
    expected = gen_docs.PAGES[page]()
    assert page.read_text(encoding="utf-8") == expected, \
        f"{page.relative_to(REPO)} is stale: run python tools/gen_docs.py"


def test_every_option_has_a_description():
    keys = {v for k, v in vars(config.Options).items() if k.isupper() and isinstance(v, str)}
    assert sorted(keys - set(config.DESCRIPTIONS)) == [], "add them to DESCRIPTIONS in runtime/config.py"
    assert sorted(set(config.DESCRIPTIONS) - keys) == []


def test_the_configuration_page_has_every_option_and_its_default():
    page = gen_docs.config_page()
    for name, key in vars(config.Options).items():
        if name.isupper() and isinstance(key, str):
            assert f"| `{key}` |" in page, key
    assert "| `execution.checkpointing.timeout` | `600000` (10 min, as Flink) |" in page
    assert "one of `EXACTLY_ONCE`, `AT_LEAST_ONCE`" in page


def test_the_crd_page_has_every_spec_field_and_rule():
    from streamjob.operator import model

    page = gen_docs.crd_page()
    for field in model.StreamJobSpec.model_fields.values():
        assert f"`{field.alias}`" in page, field.alias
    assert "upgradeMode savepoint needs savepointDir" in page
    assert "`last-state` (cancel, redeploy from the latest retained checkpoint)" in page
