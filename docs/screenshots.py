"""Take the README's screenshots of a report with the Chromium the browser tests use.

    python docs/screenshots.py RESULTS_DIR [--chromium /usr/bin/chromium] [--out docs]

RESULTS_DIR is a run folder or a suite folder (its latest run); the README's come from
`gcbench run suites/nvlink100.yaml`, then `python docs/screenshots.py results/nvlink100`.
The report is written to a temporary folder, opened from file:// at 1400 pixels wide,
and shot: the suite's page (docs/report-index.png) and the top of the run page down to
its first figure (docs/report-run.png).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    args = parser.parse_args()

    from playwright.sync_api import sync_playwright

    from gcbench.report import write_report

    with tempfile.TemporaryDirectory() as tmp:
        page_path = write_report(args.results, Path(tmp) / "report")
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])
            tab = browser.new_page(viewport={"width": 1400, "height": 1000})
            tab.goto((page_path.parent.parent / "index.html").resolve().as_uri())
            height = tab.evaluate("() => document.body.scrollHeight")
            tab.set_viewport_size({"width": 1400, "height": int(min(height + 40, 1000))})
            tab.screenshot(path=str(args.out / "report-index.png"))
            tab.set_viewport_size({"width": 1400, "height": 1000})
            tab.goto(page_path.resolve().as_uri())
            tab.wait_for_function(
                "() => [...document.querySelectorAll('.plotly-graph-div')]"
                ".every(d => d._fullData)"
            )
            bottom = tab.evaluate(
                "() => { const r = document.getElementById('breakdown')"
                ".getBoundingClientRect(); return r.bottom + window.scrollY; }"
            )
            tab.set_viewport_size({"width": 1400, "height": int(min(bottom, 1500))})
            tab.screenshot(path=str(args.out / "report-run.png"))
            browser.close()
    for name in ("report-index.png", "report-run.png"):
        print(args.out / name)


if __name__ == "__main__":
    main()
