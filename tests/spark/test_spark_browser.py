"""The report's HTML page opened in headless Chromium: it renders, and so does every plot.

A copy of the page gets a small script that, once the page has loaded, writes each
image's state (complete, natural and rendered sizes) into the DOM as JSON; Chromium's
`--dump-dom` hands the DOM back. A second run takes a screenshot of the page. Chromium is
Debian's `chromium` package, which scripts/setup.sh installs; without it the tests skip.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from matplotlib import image

from spark_analysis.report import HTML_FILE

from .conftest import Report

pytestmark = pytest.mark.spark

PROBE_ID = "image-probe"
PROBE = f"""<script>
window.addEventListener("load", () => {{
  const found = Array.from(document.images, (img) => ({{
    alt: img.alt, complete: img.complete, naturalWidth: img.naturalWidth,
    naturalHeight: img.naturalHeight, width: img.width, height: img.height,
  }}));
  const out = document.createElement("pre");
  out.id = "{PROBE_ID}";
  out.textContent = JSON.stringify(found);
  document.body.appendChild(out);
}});
</script>
"""
WINDOW = (1280, 3000)
TIMEOUT_S = 120


def _chromium() -> str:
    """The Chromium binary; skips the test when none is installed."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("chromium is not installed (scripts/setup.sh installs Debian's `chromium` "
                    "package; apt-get could not here)")
    return found


def _run_chromium(profile: Path, *args: str) -> str:
    """Run headless Chromium with a throwaway profile; return its stdout."""
    command = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu",
               "--disable-dev-shm-usage", "--no-first-run", f"--user-data-dir={profile}",
               f"--window-size={WINDOW[0]},{WINDOW[1]}", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _probed_images(page: Path, tmp_path: Path) -> list[dict[str, Any]]:
    """Every image of `page` as the browser saw it after loading the page."""
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"),
                     encoding="utf-8")
    dom = _run_chromium(tmp_path / "profile", "--virtual-time-budget=10000", "--dump-dom",
                        probe.as_uri())
    match = re.search(rf'<pre id="{PROBE_ID}">(.*?)</pre>', dom, re.DOTALL)
    assert match is not None, dom[-2000:]
    found: list[dict[str, Any]] = json.loads(html.unescape(match.group(1)))
    return found


def _assert_renders(report: Report, tmp_path: Path) -> None:
    """Every image of the report's page decoded and shown; a screenshot that is not blank."""
    page = report.out_dir / HTML_FILE
    images = _probed_images(page, tmp_path)
    assert len(images) == page.read_text(encoding="utf-8").count("<img ")
    assert images, "the page has no plot"
    for found in images:
        assert found["complete"], found
        assert found["naturalWidth"] > 0, found
        assert found["naturalHeight"] > 0, found
        assert found["width"] > 0, found
        assert found["height"] > 0, found
    shot = tmp_path / "screenshot.png"
    _run_chromium(tmp_path / "profile", f"--screenshot={shot}", page.as_uri())
    pixels = image.imread(shot)
    assert pixels.shape[:2] == (WINDOW[1], WINDOW[0])
    assert pixels.std() > 0.01, "the screenshot is blank"


def test_every_plot_renders_in_chromium(bench_report: Report, tmp_path: Path) -> None:
    _assert_renders(bench_report, tmp_path)


@pytest.mark.integration
@pytest.mark.slow
def test_every_plot_of_a_real_bench_run_renders_in_chromium(smoke_report: Report,
                                                            tmp_path: Path) -> None:
    _assert_renders(smoke_report, tmp_path)
