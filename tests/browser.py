"""A headless Debian chromium driven over the DevTools protocol on a pipe (no debugging port, no
Playwright): the dashboard's Bokeh pages render only after BokehJS opens its websocket, which
``chromium --dump-dom`` / ``--screenshot`` do not wait for."""
import base64
import json
import os
import select
import shutil
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SKIP_REASON_FILE = os.path.join(ROOT, ".venv", ".chromium-skip-reason")  # written by `make test`
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-debugging-pipe"]


def chromium_or_reason():
    """(path, None) or (None, why the browser test cannot run)."""
    path = shutil.which("chromium")
    if path:
        return path, None
    if os.path.exists(SKIP_REASON_FILE):
        with open(SKIP_REASON_FILE) as f:
            return None, "chromium not installed: " + f.read().strip()
    return None, "chromium not installed (run `make test` as root to apt-get install it)"


class Chromium:
    def __init__(self, path, width=1200, height=900):
        self._tmp = tempfile.TemporaryDirectory(ignore_cleanup_errors=True)
        to_child, self._out = os.pipe()
        self._in, from_child = os.pipe()

        def fds():  # the protocol's pipe is fd 3 (commands) and fd 4 (replies) in the child
            a, b = os.dup(to_child), os.dup(from_child)  # fresh numbers above 4: dup2 cannot clobber
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen([path, *FLAGS, f"--user-data-dir={self._tmp.name}",
                                      f"--window-size={width},{height}", "about:blank"],
                                     preexec_fn=fds, pass_fds=(to_child, from_child, 3, 4),
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_child)
        os.close(from_child)
        self._buf, self._id, self.errors = b"", 0, []
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.call("Runtime.enable", session=True)
        self.call("Emulation.setDeviceMetricsOverride", session=True, width=width, height=height,
                  deviceScaleFactor=1, mobile=False)

    def call(self, method, session=False, timeout=30, **params):
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = self.session
        os.write(self._out, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" in self._buf:
                raw, self._buf = self._buf.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("method") == "Runtime.exceptionThrown":
                    self.errors.append(reply["params"]["exceptionDetails"].get("text"))
                if reply.get("id") == self._id:
                    if "error" in reply:
                        raise RuntimeError(f"{method}: {reply['error']}")
                    return reply["result"]
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._in], [], [], left)[0]:
                raise TimeoutError(f"chromium did not answer {method} in {timeout} s")
            chunk = os.read(self._in, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium exited")
            self._buf += chunk

    def goto(self, url):
        self.call("Page.navigate", session=True, url=url)

    def evaluate(self, expression):
        return self.call("Runtime.evaluate", session=True, expression=expression,
                         returnByValue=True)["result"].get("value")

    def wait_for(self, expression, timeout=30):
        deadline = time.monotonic() + timeout
        while not self.evaluate(expression):
            if time.monotonic() > deadline:
                raise TimeoutError(f"page never satisfied {expression!r}")
            time.sleep(0.1)

    def screenshot(self, path):
        data = self.call("Page.captureScreenshot", session=True, format="png")["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self):
        self.proc.kill()
        self.proc.wait()
        os.close(self._in)
        os.close(self._out)
        self._tmp.cleanup()


# Bokeh 3 renders into shadow roots: collect their text and count the canvases drawn
PAGE_STATE_JS = """(() => {
  const acc = {text: [], canvases: 0};
  const walk = (n) => {
    if (n.shadowRoot) walk(n.shadowRoot);
    for (const c of n.children || []) walk(c);
    if (n.tagName === 'CANVAS') acc.canvases += 1;
    if (!['STYLE', 'SCRIPT'].includes(n.tagName))
      for (const t of n.childNodes || [])
        if (t.nodeType === 3 && t.textContent.trim()) acc.text.push(t.textContent.trim());
  };
  walk(document.documentElement);
  return {title: document.title, canvases: acc.canvases, text: acc.text.join(' | ')};
})()"""
