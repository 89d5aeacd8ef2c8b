"""README.md stays a page a newcomer reads in minutes, and the relative links of README.md and docs/*.md lead somewhere.

How README.md is measured. Everything outside the block `neuron-torch render` writes (from `<!-- BEGIN
support-matrix` to `<!-- END support-matrix -->`, the release's data) counts; HTML comments do not.
- A word is a whitespace-separated token holding a letter or a digit: `2.14-py3.14-ubuntu26.04`, `--cell` and `1.`
  are words, Markdown's `|`, `---`, `#`, `**` and `-` are not. Code blocks, inline code and table rows count.
- Sentences are looked for in prose units: a paragraph (lines up to a blank line), a list item (a line starting
  `- `, `* ` or `1. ` starts a new one), a heading, and each cell of a table row on its own. A code block's lines are
  not sentences, and a table row is never one sentence: its cells are.
- Within a unit, a sentence ends at `.`, `!` or `?` followed by whitespace, and at the unit's end. Inline code is
  one piece: its dots, and the spaces after them, end nothing. So `e.g. x` splits (a shorter sentence, never a
  longer one), and a paragraph without a full stop is one sentence.

A link is relative when its target has no scheme (`https:`, `mailto:`): its file, resolved from the linking file's
folder, must exist, and its `#anchor`, where it points into a Markdown file, must be one of that file's headings as
GitHub spells them (lower case, punctuation dropped, spaces as hyphens).
"""

from __future__ import annotations

import re
from pathlib import Path

from tests import REPO_ROOT

REPO = REPO_ROOT
MAX_WORDS = 1200
MAX_SENTENCE = 40

GENERATED = re.compile(r"<!-- BEGIN support-matrix:.*?<!-- END support-matrix -->", re.DOTALL)
COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
LIST_ITEM = re.compile(r"([-*]|\d+\.) ")
CODE_SPAN = re.compile(r"(`[^`]*`)")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
LINK = re.compile(r"!?\[[^\]]*\]\(<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\)")
REFERENCE = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)
SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")


def prose(text: str) -> str:
    """The README as a reader reads it: the generated block and the comments left out."""
    return COMMENT.sub("", GENERATED.sub("", text))


def words(text: str) -> list[str]:
    return [token for token in text.split() if re.search(r"[A-Za-z0-9]", token)]


def units(text: str) -> list[str]:
    """The prose units sentences are looked for in (see the module's docstring)."""
    found: list[str] = []
    paragraph: list[str] = []

    def flush() -> None:
        if paragraph:
            found.append(" ".join(paragraph))
            paragraph.clear()

    in_code = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            flush()
            in_code = not in_code
        elif in_code:
            continue
        elif not stripped:
            flush()
        elif stripped.startswith("|"):
            flush()
            found.extend(cell.strip() for cell in re.split(r"(?<!\\)\|", stripped) if words(cell))
        elif stripped.startswith("#"):
            flush()
            found.append(stripped)
        else:
            if LIST_ITEM.match(stripped):
                flush()
            paragraph.append(stripped)
    flush()
    return found


def sentences(unit: str) -> list[str]:
    """A unit's sentences; inline code is never split."""
    done: list[str] = []
    current = ""
    for piece in CODE_SPAN.split(unit):
        if CODE_SPAN.fullmatch(piece):
            current += piece
            continue
        first, *rest = SENTENCE_END.split(piece)
        current += first
        for part in rest:
            done.append(current)
            current = part
    done.append(current)
    return [s for s in done if words(s)]


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it."""
    text = heading.lstrip("#").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.M | re.S)
    return {slug(line) for line in text.splitlines() if re.match(r"#{1,6} ", line)}


def broken_links(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)  # a link in a code block is not followed
    broken = []
    for target in LINK.findall(text) + REFERENCE.findall(text):
        if SCHEME.match(target):
            continue
        name, _, anchor = target.partition("#")
        linked = (path.parent / name).resolve() if name else path
        if not linked.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target} (no such heading in {linked.relative_to(REPO)})")
    return [f"{path.relative_to(REPO)}: {link}" for link in broken]


def test_the_readme_is_short() -> None:
    count = len(words(prose((REPO / "README.md").read_text(encoding="utf-8"))))
    assert count <= MAX_WORDS, f"README.md has {count} words outside the generated block (at most {MAX_WORDS})"


def test_no_readme_sentence_is_long() -> None:
    text = prose((REPO / "README.md").read_text(encoding="utf-8"))
    long = [s for unit in units(text) for s in sentences(unit) if len(words(s)) > MAX_SENTENCE]
    assert not long, "\n".join(f"{len(words(s))} words: {s[:160]}..." for s in long)


def test_the_relative_links_lead_somewhere() -> None:
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    broken = [link for page in pages for link in broken_links(page)]
    assert not broken, "\n".join(broken)


def test_links_into_the_readme_name_its_headings() -> None:
    """Other READMEs may link to the root README's sections: those sections must still be there."""
    readme = REPO / "README.md"
    broken = []
    for page in REPO.rglob("*.md"):
        if any(part.startswith(".") or part in ("build", "node_modules") for part in page.relative_to(REPO).parts):
            continue  # venvs, the test bed's cache, build output: not the project's pages
        for target in LINK.findall(page.read_text(encoding="utf-8")):
            name, _, anchor = target.partition("#")
            into_readme = anchor and not SCHEME.match(name) and (page.parent / name).resolve() == readme
            if into_readme and anchor not in anchors(readme):
                broken.append(f"{page.relative_to(REPO)}: {target}")
    assert not broken, "\n".join(broken)


def test_the_rules_measure_what_they_say() -> None:
    sample = "# A title\n\nOne two. `a. b c.` three!\n- item one\n\n| a b. c | d |\n|---|---|\n```\nx. y z\n```\n"
    assert words("| --- | `--cell` 1. ** x") == ["`--cell`", "1.", "x"]
    assert [sentences(unit) for unit in units(sample)] == [
        ["# A title"],
        ["One two.", "`a. b c.` three!"],
        ["- item one"],
        ["a b.", "c"],
        ["d"],
    ]
    assert slug("## Quick start: a user's paths") == "quick-start-a-users-paths"
