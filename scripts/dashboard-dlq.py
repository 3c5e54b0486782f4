#!/usr/bin/env python3
"""The dashboard's dead-letter buttons, clicked in a real browser.

Drives headless Chromium over the DevTools protocol on a pipe (`--remote-debugging-pipe`: fd 3
carries commands to the browser, fd 4 its answers, each message ended by a NUL byte), so it
needs nothing beyond the standard library: no chromedriver, no WebSocket client.

Given a running server with a queue SOURCE whose dead-letter queue DLQ holds the messages
IDS (comma-separated; the first dead-lettered by its receive count after one lease that ran
out, the others failed at once with a reason), it
  1. opens the dashboard and clicks "peek" on the DLQ's row: every id must appear, and the
     DLQ must still hold them all, none in flight (a peek leases nothing);
  2. clicks the first id: the history panel must show the message (ready, one receive, from
     SOURCE) and one row per receive: attempt 1, expired, by curl (the client the test script
     used); then the second id: attempt 1, failed, with the failure reason. Closes the panel;
  3. types a rate of 1 message/s and clicks "redrive", accepting the confirm() dialog (whose
     text must name the source queue): a running task with a cancel button must appear;
  4. clicks "cancel": the task must show as cancelled;
  5. clears the rate and clicks "redrive" again (automatic rate): the task must complete and
     every message be back in SOURCE, counted through the JSON API;
  6. saves a screenshot.

Usage: dashboard-dlq.py SCRATCH_DIR ENDPOINT SOURCE DLQ IDS SCREENSHOT.png
Prints one line per check and "dashboard-dlq: N passed, N failed"; exits 1 on a failure.
"""

import base64
import json
import os
import subprocess
import sys
import time
import urllib.request

STEP_TIMEOUT_S = 20


class Browser:
    """Headless Chromium and one page of it, driven over the DevTools pipe."""

    def __init__(self, scratch_dir):
        # The child reads commands on fd 3 and writes answers on fd 4. The pipe ends are first
        # moved to 20 and up, so that making them 3 and 4 in the child cannot clobber one another.
        ends = []
        for i, fd in enumerate(os.pipe() + os.pipe()):
            ends.append(os.dup2(fd, 20 + i, inheritable=False))
            os.close(fd)
        to_browser_r, to_browser_w, from_browser_r, from_browser_w = ends

        def wire_fds():
            os.dup2(to_browser_r, 3)
            os.dup2(from_browser_w, 4)

        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--window-size=1400,1400",
                 "--user-data-dir=" + os.path.join(scratch_dir, "profile-dlq"),
                 "--remote-debugging-pipe", "about:blank"]
        self.log = open(os.path.join(scratch_dir, "chromium-dlq.log"), "wb")
        self.process = subprocess.Popen(["chromium"] + flags, preexec_fn=wire_fds,
                                        pass_fds=(3, 4), stdin=subprocess.DEVNULL,
                                        stdout=self.log, stderr=self.log)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self.writer = os.fdopen(to_browser_w, "wb")
        self.reader = os.fdopen(from_browser_r, "rb")
        self.next_id = 0
        self.buffer = b""
        self.dialogs = []  # the text of every dialog the page opened (each one accepted)
        self.session = None
        page = next(t for t in self.call("Target.getTargets")["targetInfos"] if t["type"] == "page")
        self.session = self.call("Target.attachToTarget",
                                 {"targetId": page["targetId"], "flatten": True})["sessionId"]
        self.call("Page.enable")
        self.call("Runtime.enable")

    def _read(self):
        while b"\0" not in self.buffer:
            chunk = os.read(self.reader.fileno(), 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method, params=None):
        """Sends a command and waits for its answer, accepting any dialog meanwhile (a click
        that opens confirm() answers only once the dialog is closed)."""
        self.next_id += 1
        command = {"id": self.next_id, "method": method, "params": params or {}}
        if self.session and not method.startswith("Target."):
            command["sessionId"] = self.session
        self.writer.write(json.dumps(command).encode() + b"\0")
        self.writer.flush()
        waiting_for = self.next_id
        while True:
            message = self._read()
            if message.get("method") == "Page.javascriptDialogOpening":
                self.dialogs.append(message["params"]["message"])
                self.next_id += 1
                accept = {"id": self.next_id, "method": "Page.handleJavaScriptDialog",
                          "params": {"accept": True}, "sessionId": self.session}
                self.writer.write(json.dumps(accept).encode() + b"\0")
                self.writer.flush()
            elif message.get("id") == waiting_for:
                if "error" in message:
                    raise RuntimeError("%s: %s" % (method, message["error"]))
                return message["result"]

    def evaluate(self, expression):
        result = self.call("Runtime.evaluate", {"expression": expression,
                                                "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in result:
            raise RuntimeError("%s: %s" % (expression, result["exceptionDetails"]))
        return result["result"].get("value")

    def wait_for(self, expression, timeout_s=STEP_TIMEOUT_S):
        """The value of `expression` once it is truthy, or None after the timeout."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.1)
        return None

    def click(self, selector):
        """A real mouse click in the middle of the element (so it must be visible)."""
        box = self.wait_for("(() => { const e = document.querySelector(%s); if (!e) return null;"
                            " e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect();"
                            " return {x: r.x + r.width / 2, y: r.y + r.height / 2}; })()"
                            % json.dumps(selector))
        if not box:
            raise RuntimeError("nothing to click at %s" % selector)
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", {"type": kind, "x": box["x"], "y": box["y"],
                                                   "button": "left", "clickCount": 1})

    def type_into(self, selector, text):
        self.click(selector)
        self.evaluate("document.querySelector(%s).select()" % json.dumps(selector))
        self.call("Input.insertText", {"text": text})

    def screenshot(self, path):
        data = self.call("Page.captureScreenshot", {"format": "png"})["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self):
        try:
            self.call("Browser.close")
        except RuntimeError:
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def queue_counts(endpoint, name):
    with urllib.request.urlopen(endpoint + "/api/queues", timeout=10) as response:
        queues = json.load(response)["queues"]
    queue = next(q for q in queues if q["name"] == name)
    return queue["visible"], queue["in_flight"]


def wait_counts(endpoint, name, want, timeout_s=STEP_TIMEOUT_S):
    deadline = time.monotonic() + timeout_s
    while True:
        counts = queue_counts(endpoint, name)
        if counts == want or time.monotonic() >= deadline:
            return counts
        time.sleep(0.1)


# The history panel as data: the message id, the summary's fields and each attempt row's cells.
HISTORY_SHOWN = """(() => {
  const panel = document.querySelector('#history');
  if (!panel || panel.hidden) return null;
  const fields = {};
  for (const dd of panel.querySelectorAll('#history-summary dd')) fields[dd.dataset.field] = dd.textContent;
  const attempts = [...panel.querySelectorAll('#history-attempts tbody tr[data-attempt]')].map((row) => {
    const cells = {};
    for (const td of row.querySelectorAll('td')) cells[td.classList[0]] = td.textContent;
    return cells;
  });
  return {id: document.querySelector('#history-id').textContent, fields, attempts};
})()"""


def open_history(browser, message_id):
    """Clicks the peeked message's id; the panel once it shows that message's attempts."""
    browser.click('#peek tr[data-message-id="%s"] button.history-link' % message_id)
    return browser.wait_for("(() => { const h = %s; return h && h.id === %s && h.attempts.length"
                            " ? h : null; })()" % (HISTORY_SHOWN, json.dumps(message_id)))


def check_history(browser, check, ids, source, screenshot_path):
    """Step 2: the history panel of two dead letters, one that expired and one that failed."""
    shown = open_history(browser, ids[0])
    check("a click on a peeked id opens its history (%r)" % shown, shown)
    if not shown:
        return
    fields, attempts = shown["fields"], shown["attempts"]
    check("the history shows the message ready, 1 receive, from %s (%r)" % (source, fields),
          fields.get("state") == "ready" and fields.get("receives") == "1"
          and fields.get("dead-lettered from") == source and fields.get("dead-lettered at"))
    check("one attempt row per receive: attempt 1, expired (%r)" % attempts,
          [(a.get("attempt"), a.get("outcome")) for a in attempts] == [("1", "expired")])
    check("the attempt names its client, 127.0.0.1 and curl (%r)" % attempts[0].get("client"),
          "127.0.0.1:" in attempts[0].get("client", "") and "curl/" in attempts[0].get("client", ""))
    browser.screenshot(screenshot_path.replace(".png", "-history.png"))

    shown = open_history(browser, ids[1])
    fields, attempts = (shown or {}).get("fields", {}), (shown or {}).get("attempts", [])
    check("the second id's history: attempt 1 failed, with the reason (%r, %r)"
          % (fields, attempts),
          [(a.get("attempt"), a.get("outcome")) for a in attempts] == [("1", "failed")]
          and fields.get("failure reason") == "dashboard test failure")
    browser.click("#history button.close")
    check("close hides the panel",
          browser.wait_for("document.querySelector('#history').hidden"))


def main():
    scratch_dir, endpoint, source, dlq, ids, screenshot_path = sys.argv[1:]
    ids = ids.split(",")
    checks = []

    def check(name, ok):
        checks.append((name, bool(ok)))
        print("%s: %s" % ("ok  " if ok else "FAIL", name), flush=True)
        return ok

    row = '#dlqs tr[data-queue="%s"]' % dlq
    newest_task = "#redrives tbody tr[data-task]"
    browser = Browser(scratch_dir)
    try:
        browser.call("Page.navigate", {"url": endpoint + "/"})
        check("the dead-letter table has a row for %s" % dlq,
              browser.wait_for("!!document.querySelector(%s)" % json.dumps(row + " button.peek")))
        check("the row names the source queue",
              browser.wait_for("document.querySelector(%s).textContent === %s"
                               % (json.dumps(row + " td.sources"), json.dumps(source))))

        browser.click(row + " button.peek")
        shown = browser.wait_for(
            "(() => { const ids = [...document.querySelectorAll('#peek td.message-id')]"
            ".map((td) => td.textContent); return ids.length >= %d ? ids : null; })()" % len(ids))
        check("peek shows every dead-lettered message id (it shows %r)" % shown,
              shown and sorted(shown) == sorted(ids))
        reasons = browser.evaluate("[...document.querySelectorAll('#peek td.reason')]"
                                   ".map((td) => td.textContent)")
        check("peek shows the failure reason (it shows %r)" % reasons,
              "dashboard test failure" in (reasons or []))
        bodies = browser.evaluate("[...document.querySelectorAll('#peek td.body')]"
                                  ".map((td) => td.textContent)")
        check("bodies show as text, not markup (%r)" % bodies,
              "<b>order-2</b>" in (bodies or [])
              and browser.evaluate("!document.querySelector('#peek b')"))
        browser.screenshot(screenshot_path.replace(".png", "-peek.png"))
        counts = queue_counts(endpoint, dlq)
        check("after the peek the DLQ holds all %d, none in flight (it holds %r)"
              % (len(ids), counts), counts == (len(ids), 0))

        check_history(browser, check, ids, source, screenshot_path)
        counts = queue_counts(endpoint, dlq)
        check("after the history lookups the DLQ still holds all %d, none in flight (%r)"
              % (len(ids), counts), counts == (len(ids), 0))

        browser.type_into(row + " input.rate", "1")
        browser.click(row + " button.redrive")
        check("redrive asked for confirmation naming the source (dialogs: %r)" % browser.dialogs,
              len(browser.dialogs) == 1 and source in browser.dialogs[0]
              and "1 per second" in browser.dialogs[0])
        running = browser.wait_for("(() => { const row = document.querySelector(%s);"
                                   " return row && row.querySelector('button.cancel') &&"
                                   " row.querySelector('td.status').textContent; })()"
                                   % json.dumps(newest_task))
        check("a running task with a cancel button appears (status %r)" % running,
              running == "running")
        browser.click(newest_task + " button.cancel")
        cancelled = browser.wait_for("(() => { const s = document.querySelector(%s);"
                                     " return s && s.textContent === 'cancelled'"
                                     " && !document.querySelector('#redrives button.cancel'); })()"
                                     % json.dumps(newest_task + " td.status"))
        check("cancel stops the task and its button goes", cancelled)

        browser.evaluate("document.querySelector(%s).value = ''" % json.dumps(row + " input.rate"))
        browser.click(row + " button.redrive")
        check("the second redrive asked for confirmation at the automatic rate",
              len(browser.dialogs) == 2 and "automatic" in browser.dialogs[1])
        completed = browser.wait_for("(() => { const s = document.querySelector(%s);"
                                     " return s && s.textContent === 'completed'; })()"
                                     % json.dumps(newest_task + " td.status"))
        check("the second redrive completes", completed)
        counts = wait_counts(endpoint, source, (len(ids), 0))
        check("every message is back in %s (visible, in flight: %r)" % (source, counts),
              counts == (len(ids), 0))
        counts = queue_counts(endpoint, dlq)
        check("the DLQ is empty (%r)" % (counts,), counts == (0, 0))
        emptied = browser.wait_for("!!document.querySelector('#peek tbody td.muted')")
        check("the peek refreshed after the redrive and shows no messages", emptied)
        browser.screenshot(screenshot_path)
        with open(screenshot_path, "rb") as f:
            check("the screenshot is a PNG", f.read(8) == b"\x89PNG\r\n\x1a\n")
    finally:
        browser.close()

    failed = [name for name, ok in checks if not ok]
    print("dashboard-dlq: %d passed, %d failed" % (len(checks) - len(failed), len(failed)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
