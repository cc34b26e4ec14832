"""`kvtui serve`: the UI in a real headless browser (Debian's chromium through selenium and chromium-driver).

The page is textual-serve's xterm.js terminal; the test reads what the browser received over the websocket
(a hook installed before the page's scripts run), presses keys in the terminal, and saves a screenshot.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvtui.cli import main

ROOT = Path(__file__).resolve().parents[3]
TRACE = ROOT / "tests" / "kvtui" / "data" / "hybrid_tiny.jsonl"
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
# without the networking flags this sandbox refuses chromium's connections
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,800",
)

# Keep every text frame the page's websocket receives (terminal output, escape codes included).
HOOK = """
window.__kvtui_received = [];
const NativeWebSocket = window.WebSocket;
window.WebSocket = function (url, protocols) {
  const ws = protocols === undefined ? new NativeWebSocket(url) : new NativeWebSocket(url, protocols);
  ws.addEventListener("message", (e) => {
    if (typeof e.data !== "string") window.__kvtui_received.push(new TextDecoder().decode(new Uint8Array(e.data)));
  });
  return ws;
};
window.WebSocket.prototype = NativeWebSocket.prototype;
"""
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Z0-9]|\x1b[=>]")


def test_serve_refuses_what_it_cannot_serve(tmp_path):
    runner = CliRunner()
    result = runner.invoke(main, ["serve", "stats", str(TRACE)])
    assert result.exit_code == 2 and "'live' or 'replay TRACE', not 'stats'" in result.output
    result = runner.invoke(main, ["serve", "replay", str(tmp_path / "missing.jsonl")])
    assert result.exit_code == 2 and "no such trace file" in result.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "header"}\n')
    result = runner.invoke(main, ["serve", "replay", str(bad)])
    assert result.exit_code == 1 and "line 1" in result.output and "Traceback" not in result.output


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"kvtui serve exited: {proc.stdout.read()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"kvtui serve did not listen on {port} within {timeout} s")


def _screen_text(driver) -> str:
    return ANSI.sub("", "".join(driver.execute_script("return window.__kvtui_received || [];")))


def _wait_for_text(driver, needle: str, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = _screen_text(driver)
        if needle in text:
            return text
        time.sleep(0.25)
    raise AssertionError(
        f"{needle!r} never reached the browser; it received {len(text)} characters: {text[-600:]!r}"
    )


@pytest.mark.skipif(
    not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)),
    reason=f"{CHROMIUM} or {CHROMEDRIVER} is absent: install Debian's chromium and chromium-driver "
    "(apt-get install -y chromium chromium-driver) to run the browser test",
)
def test_the_ui_in_a_headless_browser(tmp_path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "kvtui", "serve", "--port", str(port), "replay", str(TRACE)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    driver = None
    try:
        _wait_for_port(port, server)
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for flag in FLAGS:
            options.add_argument(flag)
        options.add_argument(f"--user-data-dir={tmp_path / 'profile'}")
        driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
        driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": HOOK})
        driver.get(f"http://127.0.0.1:{port}/")
        assert "kvtui replay" in driver.title or "kvtui" in driver.page_source

        # the pool tab: its tab label, the legend and the block details of the replayed trace
        text = _wait_for_text(driver, "1 Pool")
        _wait_for_text(driver, "block")
        assert "hybrid_tiny.jsonl" in text

        # a key pressed in the browser reaches the app: 2 opens the requests tab and its latency summary
        terminal = driver.find_element(By.CSS_SELECTOR, ".xterm-screen")
        terminal.click()
        before = len(_screen_text(driver))
        ActionChains(driver).send_keys("2").perform()
        deadline = time.monotonic() + 30
        while "TTFT" not in _screen_text(driver)[before:] and time.monotonic() < deadline:
            time.sleep(0.25)
        assert "TTFT" in _screen_text(driver)[before:], "the requests tab never appeared after pressing 2"
        # and the mask panel
        ActionChains(driver).send_keys("k").perform()
        _wait_for_text(driver, "attention masks of engine step")
        # let xterm.js paint the last frame
        time.sleep(1)
        shot = tmp_path / "kvtui_serve.png"
        assert driver.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
        keep = os.environ.get("KVTUI_SCREENSHOT")
        if keep:
            Path(keep).write_bytes(shot.read_bytes())
    finally:
        if driver is not None:
            driver.quit()
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
