"""The README's example output is a real run: rerunning its command gives the same counts (not the same
durations), so the quick start cannot drift from what `opconform run` prints. Its links resolve too."""
import re
import shlex
import subprocess
import sys

from conftest import REPO

README = REPO / "README.md"
MARKER = "<!-- readme-example:"


def example() -> tuple[list[str], list[str]]:
    """(the command's arguments after `opconform`, the printed lines) of the block after the marker."""
    text = README.read_text(encoding="utf-8")
    block = text[text.index(MARKER):].split("```", 2)[1]
    lines = [ln for ln in block.strip("\n").splitlines()]
    command, *printed = lines
    assert command.startswith("$ opconform "), command
    return shlex.split(command[len("$ opconform "):]), printed


def counts(lines: list[str]) -> list[str]:
    """The lines that carry counts, with every duration taken out."""
    kept = []
    for line in lines:
        if line.startswith(("results:", "report:")) or not line.strip():
            continue  # where this run's files went
        kept.append(re.sub(r" in [0-9.]+ s:", " in <time>:", line.rstrip()))
    return kept


def test_the_example_output_is_what_the_command_prints(tmp_path):
    args, printed = example()
    done = subprocess.run([sys.executable, "-m", "harness.cli", *args, "--out", str(tmp_path / "run"), "--no-report"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert counts(done.stdout.splitlines()) == counts(printed)


def test_the_comparison_sees_a_changed_count():
    _, printed = example()
    changed = [re.sub(r"\b172 pass\b", "171 pass", ln) for ln in printed]
    assert changed != printed and counts(changed) != counts(printed)
    assert counts([ln.replace("1.9 s", "9.1 s") for ln in printed]) == counts(printed)  # durations are not compared


def test_every_link_of_the_readme_and_docs_resolves():
    for page in [README, *sorted((REPO / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if "://" in target:
                continue
            assert (page.parent / target).exists(), f"{page.relative_to(REPO)} links to {target}, which does not exist"
