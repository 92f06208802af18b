"""Render a report page in headless Chromium: a PNG, the DOM after its scripts ran, or the answer
of a small script run in the page (what a person would see and do).

Usage::

    python -m npu_adapter.report.screenshot OUT_DIR/report.html report.png
    python -m npu_adapter.report.screenshot report.html shot.png --expect-color "#cfe3ff"
    python -m npu_adapter.report.screenshot report.html --dump-dom --query "op=Conv2D"

Needs Chromium (Debian: ``apt-get install -y chromium``; found as ``chromium``,
``chromium-browser`` or ``google-chrome``, or give ``--chromium PATH``). No network is used: the
report is self-contained, and Chromium runs with a fresh profile in a temporary directory and
without its background services. The check decodes the PNG (8-bit RGB/RGBA, with NumPy) and fails
(exit 1) when the image has fewer than 16 colours, when less than 2% of its pixels differ from
the background, or when an ``--expect-color`` (e.g. a cluster's fill colour) is absent.
``--dump-dom`` prints the page's DOM after its script ran instead (with ``--query``, the node
table is filtered by that search first), which is how the tests check the search in a real
browser. :func:`probe` runs a script of the caller's in the page once the page's own scripts ran
(clicking, measuring) and returns what it returns, as JSON; the page is copied into a temporary
directory with the script appended, the original is not touched.
"""

import argparse
import contextlib
import html
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import urllib.parse
import zlib

__all__ = ["find_chromium", "screenshot", "dump_dom", "probe", "read_png", "check_png"]

_PROBE_ID = "npu-adapter-probe"

_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium():
    """Path of a Chromium executable, or None."""
    for name in _NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def _url(html_path, query=None):
    url = "file://" + urllib.parse.quote(os.path.abspath(html_path))
    if query:
        url += "#q=" + urllib.parse.quote(query)
    return url


def _run(chromium, args, timeout):
    with tempfile.TemporaryDirectory(prefix="npu-adapter-chromium-") as profile:
        command = [chromium, "--headless", "--no-sandbox", "--disable-gpu",
                   "--disable-dev-shm-usage", "--disable-quic", "--no-first-run",
                   "--disable-background-networking", "--disable-component-update",
                   "--disable-sync", "--hide-scrollbars", "--disable-extensions", "--mute-audio",
                   f"--user-data-dir={profile}", *args]
        return subprocess.run(command, capture_output=True, timeout=timeout, check=False)


def _chromium(chromium):
    chromium = chromium or find_chromium()
    if chromium is None:
        raise FileNotFoundError("Chromium not found (Debian: apt-get install -y chromium)")
    return chromium


@contextlib.contextmanager
def _page_with_script(html_path, script):
    """``html_path``, or a copy of it in a temporary directory with ``script`` run after the
    page's own scripts (appended at the end of its body)."""
    if not script:
        yield html_path
        return
    with open(html_path, encoding="utf-8") as f:
        text = f.read()
    tag = f"<script>{script}</script>"
    at = text.rfind("</body>")
    text = text[:at] + tag + text[at:] if at >= 0 else text + tag
    with tempfile.TemporaryDirectory(prefix="npu-adapter-page-") as directory:
        copy = os.path.join(directory, os.path.basename(html_path))
        with open(copy, "w", encoding="utf-8") as f:
            f.write(text)
        yield copy


def screenshot(html_path, png_path, width=1400, height=2400, chromium=None, query=None,
               timeout=120):
    """Write a ``width`` x ``height`` screenshot of the top of ``html_path`` to ``png_path``
    (headless Chromium paints nothing of a page scrolled by a script: a taller window shows
    more)."""
    chromium = _chromium(chromium)
    if os.path.exists(png_path):
        os.remove(png_path)
    done = _run(chromium, [f"--window-size={width},{height}",
                           f"--screenshot={os.path.abspath(png_path)}", _url(html_path, query)],
                timeout)
    if not os.path.exists(png_path):
        raise RuntimeError("Chromium wrote no screenshot: "
                           + done.stderr.decode("utf-8", "replace")[-2000:])
    return png_path


def dump_dom(html_path, query=None, chromium=None, timeout=120, width=1400, height=1000,
             script=None):
    """The DOM of the page after its scripts (and ``script``, if given) ran, as HTML text."""
    chromium = _chromium(chromium)
    with _page_with_script(html_path, script) as page:
        done = _run(chromium, [f"--window-size={width},{height}", "--dump-dom",
                               _url(page, query)], timeout)
    return done.stdout.decode("utf-8", "replace")


def probe(html_path, script, *, width=1400, height=1000, query=None, chromium=None,
          timeout=120):
    """Run ``script`` in the page once its own scripts ran and return its result.

    ``script`` is the body of a JavaScript function (``return {...};``): it may click and
    measure (layout is computed when asked for); what it returns is serialised with
    ``JSON.stringify`` and parsed back. An exception in it is raised here as RuntimeError.
    """
    wrapper = ("(function(){var out;try{out={value:(function(){" + script + "})()};}"
               "catch(e){out={error:String(e&&e.stack||e)};}"
               f"var p=document.createElement('pre');p.id='{_PROBE_ID}';"
               "p.textContent=JSON.stringify(out);document.body.appendChild(p);})();")
    dom = dump_dom(html_path, query, chromium, timeout, width, height, wrapper)
    found = re.search(f'<pre id="{_PROBE_ID}">(.*?)</pre>', dom, re.S)
    if found is None:
        raise RuntimeError(f"{html_path}: the probe left no answer in the page")
    answer = json.loads(html.unescape(found.group(1)))
    if "error" in answer:
        raise RuntimeError(f"{html_path}: the probe failed: {answer['error']}")
    return answer["value"]


def _paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def read_png(path):
    """Decode an 8-bit, non-interlaced RGB or RGBA PNG into a NumPy array (h, w, channels)."""
    import numpy as np

    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path}: not a PNG file")
    pos, idat, header = 8, [], None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        pos += 12 + length
    width, height, depth, color, _, _, interlace = header
    channels = {2: 3, 6: 4}.get(color)
    if depth != 8 or channels is None or interlace:
        raise ValueError(f"{path}: only 8-bit non-interlaced RGB/RGBA PNGs are supported")
    raw = np.frombuffer(zlib.decompress(b"".join(idat)), np.uint8)
    stride = width * channels
    rows = raw.reshape(height, stride + 1)
    out = np.zeros((height, stride), np.uint8)
    prev = np.zeros(stride, np.int32)
    for y in range(height):
        kind, line = rows[y, 0], rows[y, 1:].astype(np.int32)
        if kind == 1:  # Sub: running sum per channel
            line = np.cumsum(line.reshape(width, channels), axis=0).reshape(-1) % 256
        elif kind == 2:  # Up
            line = (line + prev) % 256
        elif kind in (3, 4):  # Avg, Paeth: each byte depends on the decoded byte to its left
            decoded = [0] * stride
            values, above = line.tolist(), prev.tolist()
            for i in range(stride):
                left = decoded[i - channels] if i >= channels else 0
                if kind == 3:
                    decoded[i] = (values[i] + (left + above[i]) // 2) % 256
                else:
                    up_left = above[i - channels] if i >= channels else 0
                    decoded[i] = (values[i] + _paeth(left, above[i], up_left)) % 256
            line = np.array(decoded, np.int32)
        out[y] = line
        prev = line
    return out.reshape(height, width, channels)


def check_png(path, expect_colors=()):
    """Statistics of the screenshot at ``path`` and the problems found (empty list: fine)."""
    import numpy as np

    pixels = read_png(path)[:, :, :3]
    flat = pixels.reshape(-1, 3).astype(np.uint32)
    packed = (flat[:, 0] << 16) | (flat[:, 1] << 8) | flat[:, 2]
    colors, counts = np.unique(packed, return_counts=True)
    background = int(colors[np.argmax(counts)])
    content = float(np.mean(packed != background))
    stats = {"width": int(pixels.shape[1]), "height": int(pixels.shape[0]),
             "colors": int(len(colors)), "background": f"#{background:06x}",
             "content_fraction": round(content, 4)}
    problems = []
    if len(colors) < 16:
        problems.append(f"only {len(colors)} colours: the page looks blank")
    if content < 0.02:
        problems.append(f"only {content:.1%} of the pixels differ from the background")
    present = {int(c) for c in colors}
    for color in expect_colors:
        if int(color.lstrip("#"), 16) not in present:
            problems.append(f"colour {color} does not appear")
    return stats, problems


def main(argv=None):
    """Command line entry point; returns the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", help="report.html written by npu-adapter inspect")
    parser.add_argument("png", nargs="?", help="PNG to write (default: next to the report)")
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("--height", type=int, default=2400)
    parser.add_argument("--query", help="search to apply to the node table first")
    parser.add_argument("--expect-color", action="append", default=[],
                        help="a #rrggbb colour that must appear (e.g. a cluster fill)")
    parser.add_argument("--dump-dom", action="store_true", help="print the DOM instead")
    parser.add_argument("--chromium", help="Chromium executable")
    args = parser.parse_args(argv)
    if args.dump_dom:
        sys.stdout.write(dump_dom(args.report, args.query, args.chromium, width=args.width,
                                  height=args.height))
        return 0
    png = args.png or os.path.splitext(args.report)[0] + ".png"
    screenshot(args.report, png, args.width, args.height, args.chromium, args.query)
    stats, problems = check_png(png, args.expect_color)
    print(f"{png}: " + ", ".join(f"{k} {v}" for k, v in stats.items()))
    for problem in problems:
        print(f"problem: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
