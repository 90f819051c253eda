"""Rendering a report, given as sections of blocks, to report.md and a standalone index.html.

The HTML needs no network: images are embedded as base64 data URIs (the PNG files stay
beside it, where report.md links them) and the style sheet is inline.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

MARKDOWN_FILE = "report.md"
HTML_FILE = "index.html"

_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 72rem; margin: 2rem auto; padding: 0 1rem;
       color: #222; line-height: 1.45; }
h2 { border-bottom: 1px solid #ddd; padding-bottom: .2rem; margin-top: 2.2rem; }
table { border-collapse: collapse; margin: .8rem 0; font-size: .9rem; }
th, td { border: 1px solid #ccc; padding: .25rem .6rem; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #f3f3f3; }
img { max-width: 100%; border: 1px solid #eee; }
pre { background: #f6f6f6; padding: .6rem; overflow-x: auto; font-size: .85rem; }
"""


@dataclass(frozen=True)
class Paragraph:
    """A line of plain text (no markup; the renderers escape it)."""

    text: str


@dataclass(frozen=True)
class Table:
    """A table of already formatted cells; every row has one cell per column."""

    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Code:
    """Preformatted text, shown verbatim."""

    text: str


@dataclass(frozen=True)
class Image:
    """A PNG file in the report directory."""

    path: Path
    alt: str


Block = Paragraph | Table | Code | Image


@dataclass(frozen=True)
class Section:
    """A titled part of the report; titles are unique within one report."""

    title: str
    blocks: tuple[Block, ...]


def _anchor(title: str) -> str:
    return "".join(char if char.isalnum() else "-" for char in title.lower()).strip("-")


def _markdown_cell(text: str) -> str:
    return text.replace("|", "\\|")


def _markdown_block(block: Block) -> str:
    if isinstance(block, Paragraph):
        return block.text
    if isinstance(block, Table):
        lines = [
            "| " + " | ".join(_markdown_cell(column) for column in block.columns) + " |",
            "|" + "|".join("---" for _ in block.columns) + "|",
        ]
        lines += [
            "| " + " | ".join(_markdown_cell(cell) for cell in row) + " |" for row in block.rows
        ]
        return "\n".join(lines)
    if isinstance(block, Code):
        return f"```\n{block.text}\n```"
    return f"![{block.alt}]({block.path.name})"


def render_markdown(title: str, sections: Sequence[Section]) -> str:
    """The report as GitHub-flavoured Markdown; images are links to the PNG files."""
    parts = [f"# {title}"]
    for section in sections:
        parts.append(f"## {section.title}")
        parts += [_markdown_block(block) for block in section.blocks]
    return "\n\n".join(parts) + "\n"


def _html_block(block: Block) -> str:
    if isinstance(block, Paragraph):
        return f"<p>{html.escape(block.text)}</p>"
    if isinstance(block, Table):
        head = "".join(f"<th>{html.escape(column)}</th>" for column in block.columns)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>"
            for row in block.rows
        )
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    if isinstance(block, Code):
        return f"<pre><code>{html.escape(block.text)}</code></pre>"
    data = base64.b64encode(block.path.read_bytes()).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(block.alt)}">'


def render_html(title: str, sections: Sequence[Section]) -> str:
    """The report as one self-contained HTML page with a table of contents."""
    contents = "".join(
        f'<li><a href="#{_anchor(section.title)}">{html.escape(section.title)}</a></li>'
        for section in sections
    )
    body = [f"<h1>{html.escape(title)}</h1>", f"<nav><ul>{contents}</ul></nav>"]
    for section in sections:
        body.append(f'<h2 id="{_anchor(section.title)}">{html.escape(section.title)}</h2>')
        body += [_html_block(block) for block in section.blocks]
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n"
        + "\n".join(body)
        + "\n</body>\n</html>\n"
    )


def write_report(title: str, sections: Sequence[Section], out_dir: Path) -> tuple[Path, Path]:
    """Write report.md and index.html into `out_dir`; return their paths in that order."""
    markdown = out_dir / MARKDOWN_FILE
    page = out_dir / HTML_FILE
    markdown.write_text(render_markdown(title, sections), encoding="utf-8")
    page.write_text(render_html(title, sections), encoding="utf-8")
    return markdown, page
