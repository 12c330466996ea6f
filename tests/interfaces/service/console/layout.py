"""Layout checks run in the browser on the page as drawn: chart labels that overlap, a page
wider than the window, cells pushed out of sight. Selenium runs these scripts itself even
though the pages' own scripts are switched off."""

from __future__ import annotations

from typing import Any

# Every pair of texts in one chart whose boxes intersect by more than half a pixel each way
# (the chart's name, then both texts).
OVERLAPPING_LABELS = """
const found = [];
document.querySelectorAll('svg.chart').forEach((svg, index) => {
  const texts = [...svg.querySelectorAll('text')]
    .map(node => [node.lastChild ? node.lastChild.textContent : '', node.getBoundingClientRect()])
    .filter(([, box]) => box.width > 0 && box.height > 0);
  for (let i = 0; i < texts.length; i++) {
    for (let j = i + 1; j < texts.length; j++) {
      const [a, boxA] = texts[i];
      const [b, boxB] = texts[j];
      if (boxA.left < boxB.right - 0.5 && boxB.left < boxA.right - 0.5 &&
          boxA.top < boxB.bottom - 0.5 && boxB.top < boxA.bottom - 0.5) {
        const title = svg.querySelector('title');
        found.push([title ? title.textContent : String(index), a, b]);
      }
    }
  }
});
return found;
"""

PAGE_WIDTH = "return [document.documentElement.scrollWidth, window.innerWidth];"

# The boxes of the elements matching a selector, as [left, right, width, height].
BOXES = """
return [...document.querySelectorAll(arguments[0])].map(node => {
  const box = node.getBoundingClientRect();
  return [box.left, box.right, box.width, box.height];
});
"""


def overlapping_labels(driver: Any) -> list[list[str]]:
    found: list[list[str]] = driver.execute_script(OVERLAPPING_LABELS)
    return found


def overflow(driver: Any) -> int:
    """How many CSS pixels the page is wider than the window (0 when it fits)."""
    scroll_width, inner_width = driver.execute_script(PAGE_WIDTH)
    return max(0, int(scroll_width) - int(inner_width))


def boxes(driver: Any, selector: str) -> list[list[float]]:
    found: list[list[float]] = driver.execute_script(BOXES, selector)
    return found


def hidden_boxes(driver: Any, selector: str) -> list[list[float]]:
    """The boxes of ``selector`` that are empty or reach past the window's right edge."""
    width = driver.execute_script("return window.innerWidth;")
    return [
        box
        for box in boxes(driver, selector)
        if box[2] <= 0 or box[3] <= 0 or box[0] < 0 or box[1] > width + 0.5
    ]
