"""Relative links in README.md, bench/README.md and docs/*.md point at files (and headings) that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", REPO / "bench" / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def anchors(md: Path) -> set[str]:
    """GitHub's heading ids: lower case, punctuation other than - and _ dropped, spaces -> -."""
    out: set[str] = set()
    in_code = False
    for line in md.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_code = not in_code
        m = None if in_code else re.match(r"#{1,6}\s+(.*)", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            base, n = slug, 1
            while slug in out:
                slug, n = f"{base}-{n}", n + 1
            out.add(slug)
    return out


def links(md: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", md.read_text(encoding="utf-8"), flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]


@pytest.mark.parametrize("md", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(md):
    bad = []
    for target in links(md):
        path, _, anchor = target.partition("#")
        dest = (md.parent / path).resolve() if path else md
        if not dest.exists():
            bad.append(f"{target}: no file {dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading #{anchor} in {dest.name}")
    assert bad == []


def test_the_link_checker_finds_broken_links(tmp_path):
    md = tmp_path / "a.md"
    md.write_text("# Top\n[ok](#top) [gone](docs/x.md) [`code`](#nope)\n```\n[in code](nowhere.md)\n```\n")
    assert links(md) == ["#top", "docs/x.md", "#nope"]
    assert anchors(md) == {"top"}


def test_commands_md_config_table_has_every_key_of_rag_init():
    """docs/commands.md's `rag init` table (README: "Every key") lists each key (`all_settings`, sub-tables as index.hnsw), and no other."""
    from rag_cli.config import all_settings

    text = (REPO / "docs" / "commands.md").read_text(encoding="utf-8")
    section = text[text.index("## `rag init [DIR]`"):]
    section = section[:section.index("\n## ")]
    section = section[section.index("| section | key |"):]  # the config table (an options table comes first)
    listed: set[tuple[str, str]] = set()
    for row in re.findall(r"^\| ([\w.]+) \| ([\w /]+) \|", section, flags=re.M):
        if row[0] != "section":
            listed |= {(row[0], key.strip()) for key in row[1].split("/")}
    assert listed == {(s.place, s.key) for s in all_settings()}
