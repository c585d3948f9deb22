"""JUnit XML for CI dashboards: one <testcase> per record of results.jsonl.gz, one <testsuite> per op.

The exit code and verdict of `opconform run` stay the authority; junit.xml mirrors them so that a CI
dashboard counts what the verdict counts:

  pass         passed
  fail         <failure type="<failure kind>">  wrong_values, wrong_shape, rejects_valid, accepts_invalid
  crashed      <failure type="crash"|"hang">   an undeclared crash or hang of the backend under test
  error        <error type="harness_error">    the harness or the spec could not build or check the case
  unsupported  <skipped type="unsupported">    the backend has no kernel for this dtype or feature
  divergent    <skipped type="divergent" message="known divergence <id>: ...">. Skipped, not passed with a
               property: a divergence is never a pass (a dashboard must not show it green) and it does
               not fail the verdict (so not a failure); the message names the divergence.
  waived       <skipped type="waived" message="waived by <id>: ...">, for the same reason.
  any other    <failure type="<status>">: a status this writer does not know is not assumed harmless.

Names: classname "opconform.<op>.<backend>", name "<dtype>-<case id>", plus " [<check>]" for a
self-consistency check, so op, backend, dtype and case are all in the test id. A result that is neither
passed nor unsupported also carries them as <properties>, with the status, seed, failure kind, divergence
or waiver id and the tolerance used; failure texts end with the command that reruns the case.

Sized for a full ci run (14,000 results): a passed or unsupported result is its name alone (its
properties would only repeat the name), and a skipped result's message is the first SKIP_CHARS of its
reason (an unsupported dtype's reason is the same for every case; results.jsonl.gz and the report keep
the whole text). About 150 bytes a result instead of 530.
"""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path

from harness.core.spec_loader import default_root
from harness.core.status import Status
from harness.report import repro
from harness.report.data import Rec, to_rec

# XML 1.0 cannot hold most control characters; a crashed worker's stderr tail may contain them.
_NOT_XML = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
MESSAGE_CHARS = 300
SKIP_CHARS = 100
QUIET = (Status.PASS, Status.UNSUPPORTED)  # statuses whose testcase carries no properties


def clean(text: str) -> str:
    if text.isascii() and text.isprintable():  # the common case, 10x faster than the regex
        return text
    return _NOT_XML.sub("\ufffd", text)


def _message(text: str, limit: int = MESSAGE_CHARS) -> str:
    first = text.splitlines()[0] if text else ""
    return clean(first[:limit] + ("…" if len(first) > limit else ""))


def outcome(status: str) -> tuple[str | None, str | None]:
    """(element, type) for a status: ("failure", kind), ("error", ...), ("skipped", ...) or (None, None) = passed."""
    if status == Status.PASS:
        return None, None
    if status in (Status.FAIL, Status.CRASHED):
        return "failure", None
    if status == Status.ERROR:
        return "error", "harness_error"
    if status in (Status.UNSUPPORTED, Status.DIVERGENT, Status.WAIVED):
        return "skipped", status
    return "failure", status


def write_junit(records: Sequence[dict | Rec], path: Path, summary: dict | None = None) -> Path:
    """records: results.jsonl.gz records (or the report's Rec of them)."""
    summary = summary or {}

    flags = repro.run_flags(summary, default_root())
    suites: dict[str, list] = defaultdict(list)
    for raw in records:
        r = raw if isinstance(raw, Rec) else to_rec(raw)
        suites[r.op].append(r)
    root = ET.Element("testsuites", name="opconform")
    grand: Counter = Counter()
    for op in sorted(suites):
        suite = ET.SubElement(root, "testsuite", name=f"opconform.{op}")
        counts: Counter = Counter()
        for r in suites[op]:
            name = f"{r.dtype}-{r.case}" + (f" [{r.check}]" if r.check != "reference" else "")
            case = ET.SubElement(suite, "testcase", classname=f"opconform.{r.op}.{r.backend}", name=clean(name), time="0")
            if r.status not in QUIET:
                props = ET.SubElement(case, "properties")
                for key, value in (("op", r.op), ("backend", r.backend), ("dtype", r.dtype), ("case", r.case),
                                   ("check", r.check), ("status", r.status), ("seed", r.seed), ("failure", r.failure),
                                   ("divergence", r.divergence), ("waiver", r.waiver),
                                   ("tolerance_used", None if r.budget is None else f"{r.budget:.4g}")):
                    if value is not None:
                        ET.SubElement(props, "property", name=key, value=clean(str(value)))
            element, kind = outcome(r.status)
            counts["tests"] += 1
            if element is None:
                continue
            counts[{"failure": "failures", "error": "errors", "skipped": "skipped"}[element]] += 1
            node = ET.SubElement(case, element, message=_message(r.detail or r.status,
                                                                 SKIP_CHARS if element == "skipped" else MESSAGE_CHARS),
                                 type=kind or r.failure or r.status)
            if element != "skipped":
                node.text = clean(r.detail + "\nrerun: " + repro.command(r.op, r.backend, r.dtype, r.case, r.tier, flags))
        for key in ("tests", "failures", "errors", "skipped"):
            suite.set(key, str(counts[key]))
        suite.set("time", "0")
        if summary.get("started"):
            suite.set("timestamp", str(summary["started"]))
        grand.update(counts)
    for key in ("tests", "failures", "errors", "skipped"):
        root.set(key, str(grand[key]))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)
    return path
