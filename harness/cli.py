"""The `opconform` command.

Exit codes: 0 the verdict passed; 1 the verdict failed (unexpected failures, undeclared crashes,
errors, stale divergences) or `validate` found problems; 2 bad usage (malformed spec, unknown op,
unknown or unavailable backend); 130 interrupted (results so far stay on disk).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness import backends as registry
from harness.cases import TIERS

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class UsageError(Exception):
    pass


def _comma_list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _add_spec_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--specs", type=Path, help="spec directory (default: ./specs or $OPCONFORM_SPECS)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="opconform", description=__doc__.split("\n")[0].strip('"` .') or None)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("validate", help="check every spec against the schema and cross-field rules")
    _add_spec_option(p)
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("run", help="run the cases of the selected specs on the selected backends")
    _add_spec_option(p)
    p.add_argument("--ops", type=_comma_list, help="comma-separated op names or globs, e.g. 'ReluGrad,*Gelu*'")
    p.add_argument("--backends", type=_comma_list,
                   help=f"comma-separated backends (known: {', '.join(registry.FACTORIES)}; "
                        f"default: {', '.join(registry.DEFAULT)} where available)")
    p.add_argument("--tier", choices=TIERS, default="ci", help="smoke (seconds) < ci (the gate) < nightly")
    p.add_argument("--cases", help="only case ids matching this glob, e.g. 'infinities/*' or 'float16-*'")
    p.add_argument("--seed", type=int, default=0, help="global seed mixed into every case seed (default 0)")
    p.add_argument("--threads", type=int, default=1, help="threads each backend may use (default 1)")
    p.add_argument("--timeout", type=float, default=20.0, help="seconds before a backend call counts as a hang")
    p.add_argument("--out", type=Path, help="run directory (default reports/<date>-<time>-<tier>)")
    p.add_argument("--no-progress", dest="progress", action="store_false", default=None)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("run-onnx", help="run ONNX backend-test directories (model.onnx + test_data_set_N)")
    _add_spec_option(p)
    p.add_argument("dirs", nargs="+", type=Path, metavar="DIR")
    p.add_argument("--backend", required=True, help=f"one of {', '.join(registry.FACTORIES)}")
    p.add_argument("--write-outputs", type=Path, metavar="OUT", help="write the backend's outputs as output_K.pb here")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--timeout", type=float, default=20.0)
    p.set_defaults(func=cmd_run_onnx)

    p = sub.add_parser("export-onnx", help="write cases as ONNX backend-test directories with reference outputs")
    _add_spec_option(p)
    p.add_argument("out", type=Path, metavar="OUT")
    p.add_argument("--ops", type=_comma_list, help="comma-separated op names or globs")
    p.add_argument("--tier", choices=TIERS, default="smoke")
    p.add_argument("--cases", help="only case ids matching this glob")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_export_onnx)
    return parser


def load(args):
    from harness.spec.loader import load_catalog

    return load_catalog(args.specs)


def cmd_validate(args) -> int:
    from harness.spec.errors import SpecError

    try:
        catalog = load(args)
    except SpecError as e:
        for problem in e.problems:
            print(problem, file=sys.stderr)
        print(f"{len(e.problems)} problem(s) found", file=sys.stderr)
        return EXIT_FAILED
    print(f"{len(catalog.specs)} specs valid: {', '.join(s.op for s in catalog.specs)}")
    return EXIT_OK


def cmd_run(args) -> int:
    from harness.runner import RunOptions, print_summary, run

    for name in args.backends or []:
        if name not in registry.FACTORIES:
            raise UsageError(f"unknown backend '{name}'; known: {', '.join(registry.FACTORIES)}")
    catalog = load(args)
    options = RunOptions(ops=args.ops, backends=args.backends, tier=args.tier, cases=args.cases, seed=args.seed,
                         threads=args.threads, timeout=args.timeout, out=args.out, progress=args.progress)
    outcome = run(catalog, options)
    print_summary(outcome)
    return EXIT_OK if outcome.passed else EXIT_FAILED


def cmd_run_onnx(args) -> int:
    from harness.onnx_data import run_dirs

    if args.backend not in registry.FACTORIES:
        raise UsageError(f"unknown backend '{args.backend}'; known: {', '.join(registry.FACTORIES)}")
    catalog = load(args)
    return EXIT_OK if run_dirs(catalog, args.dirs, args.backend, args.write_outputs, args.threads,
                               args.timeout) else EXIT_FAILED


def cmd_export_onnx(args) -> int:
    from harness.onnx_data import export_cases
    from harness.runner import RunOptions, select_cases

    catalog = load(args)
    cases = select_cases(catalog, RunOptions(ops=args.ops, tier=args.tier, cases=args.cases))
    written = export_cases(catalog, cases, args.out, args.seed)
    print(f"wrote {written} test directories to {args.out} (valid cases only)")
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    from harness.backends import UnknownBackend
    from harness.runner import RunError
    from harness.spec.errors import SpecError
    from harness.spec.loader import UnknownOp

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except SpecError as e:
        for problem in e.problems:
            print(f"opconform: spec error: {problem}", file=sys.stderr)
        return EXIT_USAGE
    except (UsageError, UnknownOp, UnknownBackend, RunError) as e:
        print(f"opconform: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("opconform: interrupted; results written so far are kept", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
