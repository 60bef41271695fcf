#!/usr/bin/env python3
"""Reads `go test -json` on stdin and prints what plain `go test` would:
one line per package, the output of failed tests (of a whole package when it
failed outside any test: a panic, a timeout, a build error). At the end it
lists the tests that skipped and why, so a test the machine could not run
(Prometheus or Docker missing, say) is not mistaken for one that passed.
The exit status is go test's, which the caller takes from the pipe."""
import json
import sys
from collections import defaultdict

out = defaultdict(list)  # (package, test) -> output lines
failed_tests = defaultdict(int)  # package -> failed tests
skipped = []  # (package, test, reason)


def say(line):
    sys.stdout.write(line)
    sys.stdout.flush()


for raw in sys.stdin:
    try:
        ev = json.loads(raw)
    except ValueError:
        say(raw)  # not an event (go vet or build output that slipped through)
        continue
    action, pkg, test = ev.get("Action"), ev.get("Package", ev.get("ImportPath", "")), ev.get("Test", "")
    if action == "build-output":
        say(ev.get("Output", ""))
    elif action == "output":
        line = ev.get("Output", "")
        if test:
            out[(pkg, test)].append(line)
        elif line != "PASS\n" and not line.startswith("=== "):
            say(line)
    elif action == "fail" and test:
        failed_tests[pkg] += 1
        say("".join(out.pop((pkg, test), [])))
    elif action == "fail":
        if failed_tests[pkg] == 0:
            # Failed outside a test's own output: show all that it printed.
            for key in [k for k in out if k[0] == pkg]:
                say("".join(out.pop(key)))
    elif action == "skip" and test:
        lines = [l.strip() for l in out.pop((pkg, test), [])
                 if l.strip() and not l.lstrip().startswith(("=== ", "--- SKIP"))]
        skipped.append((pkg, test, lines[-1] if lines else "(no reason given)"))
    elif action == "pass" and test:
        out.pop((pkg, test), None)

if skipped:
    say("\n== %d test(s) skipped; they did not run here:\n" % len(skipped))
    for pkg, test, reason in skipped:
        say("  %s %s: %s\n" % (pkg, test, reason))
