"""The four reports of tf_keras MobileNetV2 in mix mode, opened in headless Chromium at 1400×1000
and checked as a person would (``bench/report_screens.py`` has the checks): the graph is visible
in the first screen, the legend wraps, every cluster row says what separates it, every host
reason names the op (and function) that causes it, the tables sort."""

import os

import pytest

from bench import report_screens
from npu_adapter.report import screenshot

SLOW = os.environ.get("NPU_ADAPTER_SLOW_TESTS") == "1"
CHROMIUM = screenshot.find_chromium()


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    # 32×32 (the smallest input MobileNetV2 takes) keeps the dumps small; the graph, its 52
    # learning-phase conds and its 53 clusters are those of any input size.
    return report_screens.write_reports(str(tmp_path_factory.mktemp("screens")), image_size=32)


@pytest.mark.slow
@pytest.mark.skipif(not SLOW, reason="builds and runs MobileNetV2 four times; set "
                                     "NPU_ADAPTER_SLOW_TESTS=1")
@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install "
                                             "chromium fonts-dejavu-core)")
def test_mobilenet_v2_reports_in_headless_chromium(pages, tmp_path):
    facts, problems = report_screens.check_pages(pages)
    assert problems == [], problems
    placement = facts["placement"]
    assert len(placement["clusters"]) == 53
    blockers = dict(placement["blockers"])
    assert blockers["function_not_supported"].startswith(
        "OptionalFromValue in 52 functions: mobilenetv2_1.00_32_bn_Conv1_cond_")
    shots = report_screens.screenshots(pages, str(tmp_path))
    assert {name: problems for name, (_, problems) in shots.items()} == {
        name: [] for name in report_screens.PAGES}
