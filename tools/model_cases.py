"""Regenerate the built-in specs' real-model case groups (the marked block at the end of each spec's cases.groups).

    python tools/real_models.py /tmp/models --artifacts     # the models (needs the [torch] and [models] extras)
    python tools/model_cases.py /tmp/models [--models a,b] [--specs specs]

runs `opconform model <name>_artifacts --dim ... --name <name> --no-run --emit-cases specs --into-specs` for each
model of models.json: every configuration of a spec'd gradient op in the model becomes a group `<name>_<k>` of that
op's spec, naming the model and the nodes it came from; a model's earlier groups are replaced, others kept. The groups
are judged like any other (their tier from their size: harness.model.emit.CI_ELEMENTS); a configuration outside a
spec's contract is printed, not written.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models_dir", type=Path, help="the directory tools/real_models.py --artifacts wrote")
    ap.add_argument("--models", help="comma-separated subset (default: every model of models.json)")
    ap.add_argument("--specs", type=Path, default=Path(__file__).resolve().parents[1] / "specs",
                    help="the spec directory whose specs get the groups (default: the built-in specs)")
    args = ap.parse_args(argv)
    table = json.loads((args.models_dir / "models.json").read_text())
    names = args.models.split(",") if args.models else list(table)
    status = 0
    for name in names:
        entry = table[name]
        artifacts = args.models_dir / f"{name}_artifacts"
        dims = [f"--dim={k}={v}" for k, v in entry["dims"].items()]
        done = subprocess.run([sys.executable, "-m", "harness.cli", "model", str(artifacts), *dims, "--name", name,
                               "--no-run", "--emit-cases", str(args.specs), "--into-specs",
                               "--out", str(args.models_dir / f"{name}_census"),
                               "--no-progress"], capture_output=True, text=True)
        print(f"== {name}: exit {done.returncode}")
        print(done.stdout.strip())
        if done.returncode not in (0, 1):
            print(done.stderr.strip(), file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
