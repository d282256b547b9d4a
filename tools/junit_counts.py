#!/usr/bin/env python3
"""junit_counts.py XML - pytest's JUnit report as "passed failed skipped"
(errors count as failures; "0 0 0" when the file cannot be read).
Shared by tools/test-python.sh and tools/test-clients.sh."""
import sys
import xml.etree.ElementTree as ET

try:
    root = ET.parse(sys.argv[1]).getroot()
except Exception:
    print("0 0 0")
    sys.exit()
suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
t = f = s = 0
for su in suites:
    t += int(su.get("tests", 0))
    f += int(su.get("failures", 0)) + int(su.get("errors", 0))
    s += int(su.get("skipped", 0))
print(t - f - s, f, s)
