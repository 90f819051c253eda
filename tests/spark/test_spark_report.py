"""The report files of the bench run: every section, every plot, nothing fetched."""

from __future__ import annotations

import base64
import html
import re

import pytest

from spark_analysis import sections
from spark_analysis.report import HTML_FILE, MARKDOWN_FILE

from .conftest import Report

pytestmark = pytest.mark.spark

PLOTS = (
    "throughput.png",
    "latency.png",
    "phases.png",
    "batch_sizes.png",
    "throughput_vs_batching.png",
    "failover.png",
)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_html_has_every_section_and_embedded_plot(bench_report: Report) -> None:
    page = (bench_report.out_dir / HTML_FILE).read_text(encoding="utf-8")
    for title in sections.SECTION_TITLES:
        assert re.search(rf'<h2 id="[^"]+">{re.escape(html.escape(title))}</h2>', page), title
    images = re.findall(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(images) == len(PLOTS)
    assert all(base64.b64decode(image).startswith(PNG_MAGIC) for image in images)
    assert "http://" not in page
    assert "https://" not in page


def test_png_files_sit_beside_the_report(bench_report: Report) -> None:
    for name in PLOTS:
        assert (bench_report.out_dir / name).read_bytes().startswith(PNG_MAGIC), name


def test_markdown_report_links_the_plots(bench_report: Report) -> None:
    markdown = (bench_report.out_dir / MARKDOWN_FILE).read_text(encoding="utf-8")
    for title in sections.SECTION_TITLES:
        assert f"## {title}\n" in markdown
    for name in PLOTS:
        assert f"]({name})" in markdown
    assert "| leader-chaos | 0.4 | kill_leader | om1 | 1,710 | 1,601 |" in markdown
    ratio = (100 / 1.09) / (40 / 0.977)
    assert f"write throughput with batching is {ratio:.4g} times that without" in markdown
    assert '"git": "abc123"' in markdown
