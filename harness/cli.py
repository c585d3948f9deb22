"""The `opconform` command.

Exit codes: 0 the verdict passed; 1 the verdict failed (unexpected failures, undeclared crashes,
errors, stale divergences) or `validate` found problems; 2 bad usage (malformed spec, unknown op,
unknown or unavailable backend); 130 interrupted, 143 terminated by SIGTERM (results so far stay on disk,
and summary.json has the totals and an interrupted verdict).

The gate (`run`, `merge`, and pytest on generated_tests/ through harness.pytest_plugin.plugin) exits 1 when its
verdict fails, listing one reason a line: unexpected failures, expected failures that passed
('remove waiver X'), undeclared crashes or hangs, harness errors, stale known divergences, stale
waivers, waivers expired past their grace period, stale generated tests, an interrupted run or a
missing shard. `gen-tests --check` exits 1 naming each stale generated file; `validate` exits 1 on
any problem, including a scaffolded spec's fields that are still TODO. `waivers propose` and
`new-op` exit 0, or 2 on bad usage. pytest keeps its own codes: 0 passed, 1 failed (tests or the
gate's verdict), 2 interrupted, 3 internal error, 4 usage error, 5 no tests collected (a
selection that matches nothing: treat it as a failure in CI).
"""
from __future__ import annotations

from harness.run import signals  # standard library only

if __name__ == "__main__" or signals.started_as_program():  # not when a test imports this module
    signals.hold()  # SIGTERM/SIGINT held from the first instant, until a run can record them (see main)

import time

STARTED = time.time()  # the printed run time counts the start-up too

import argparse  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

from harness import backends as registry  # noqa: E402 - light: backend classes load when used
from harness.backends import UnknownBackend  # noqa: E402
from harness.backends.limits import DEFAULT_TIMEOUT  # noqa: E402
from harness.core.spec_loader import SpecSources, UnknownOp, shown  # noqa: E402 - --help shows the spec directory
from harness.run import rundir  # noqa: E402
from harness.run.rundir import RunDirError, check_outside_package, default_reports, read_results, results_path, write_json  # noqa: E402
from harness.spec.errors import Problem, SpecError  # noqa: E402
from harness.spec.sources import SpecIndex, builtin_root  # noqa: E402
from harness.spec.vocabulary import FLOAT_DTYPES, TIERS  # noqa: E402 - standard library only

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
EXIT_TERMINATED = 143  # SIGTERM during `run`: 128 + 15, as a shell reports it


class UsageError(Exception):
    pass


def _comma_list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _builtin_specs() -> str:
    return shown(builtin_root())


def _add_spec_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--specs", type=Path, action="append", metavar="DIR",
                   help=f"a spec directory of your own on top of the built-in specs ({_builtin_specs()}); "
                        "repeatable, after those in $OPCONFORM_SPECS (os.pathsep-separated). It holds new ops' specs, "
                        "<domain>/<Op>.overlay.yaml files adding case groups to an op, and optionally _defaults/ "
                        "and _waivers/ (docs/team-specs.md)")
    p.add_argument("--no-builtin-specs", action="store_true",
                   help="leave the built-in specs and their waivers out: only the --specs directories (their "
                        "tolerances default to the built-in ones unless their _defaults/ says otherwise)")
    p.add_argument("--max-case-memory", type=_size, metavar="SIZE",
                   help="budget for one case's tensors, checked when the specs load (default 1GiB; e.g. 4GiB)")
    p.add_argument("--waivers", type=Path, action="append", metavar="FILE",
                   help="also load this waivers file (a team's own, for its backend; repeatable); "
                        "the _waivers/*.yaml of every spec directory always load")


BACKEND_NAMES_HELP = (f"built in: {', '.join(registry.FACTORIES)}; installed plugins (entry-point group "
                      "opconform.backends); onnx-backend:MODULE[@DEVICE] (any ONNX backend API module); "
                      "command backends defined with --command-backend")


def _add_command_backend_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--command-backend", action="append", metavar="NAME=TEMPLATE", default=[],
                   help="define a backend that runs a command per case (repeatable), e.g. "
                        "my-gelu='./gelu_grad {model} {inputs} {outputs}' (see docs/bring-your-own-backend.md)")


def _size(text: str) -> int:
    from harness.core.spec_checks import parse_size  # lazy: numpy loads only for a command that checks specs

    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="opconform", description=__doc__.split("\n")[0].strip('"` .') or None,
        epilog=f"Specs: the built-in specs ({_builtin_specs()}), then the directories in $OPCONFORM_SPECS and "
               "each --specs DIR on top (new ops, <Op>.overlay.yaml case groups); --no-builtin-specs leaves the "
               "built-in ones out. Checked specs are cached in $XDG_CACHE_HOME/opconform (OPCONFORM_NO_CACHE=1: off). "
               "docs/team-specs.md")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("validate", help="check every spec against the schema and cross-field rules")
    _add_spec_option(p)
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("run", help="run the cases of the selected specs on the selected backends")
    _add_spec_option(p)
    p.add_argument("--ops", type=_comma_list, help="comma-separated op names or globs, e.g. 'ReluGrad,*Gelu*'")
    p.add_argument("--backends", type=_comma_list,
                   help=f"comma-separated backends ({BACKEND_NAMES_HELP}; default: {', '.join(registry.DEFAULT)}, "
                        f"installed plugins and defined command backends, where available; "
                        f"{', '.join(registry.EXPECTED)} are expected: one unavailable fails the verdict; "
                        "every backend named here must be available)")
    _add_command_backend_option(p)
    p.add_argument("--allow-missing-backends", action="store_true",
                   help="an unavailable expected backend is recorded, not a failed verdict")
    p.add_argument("--tier", choices=TIERS, default="ci", help="smoke (seconds) < ci (the gate) < nightly")
    p.add_argument("--cases", help="only case ids matching this glob, e.g. 'infinities/*' or 'float16-*'")
    p.add_argument("--seed", type=int, default=0, help="global seed mixed into every case seed (default 0)")
    p.add_argument("--threads", type=int, default=1, help="threads each backend may use (default 1)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                   help=f"seconds before a backend call counts as a hang (default {DEFAULT_TIMEOUT:g}; docs/limits.md)")
    p.add_argument("--out", type=Path, help="run directory (default reports/<date>-<time>-<tier>)")
    p.add_argument("--no-progress", dest="progress", action="store_false", default=None)
    p.add_argument("--no-report", dest="report", action="store_false",
                   help="skip writing index.html and junit.xml into the run directory")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("model", help="check every gradient node of a real model's training graph at its real shapes")
    _add_spec_option(p)
    p.add_argument("path", metavar="PATH", help="a forward ONNX model (its training graph is built with "
                   "onnxruntime-training's generate_artifacts; needs the [torch] extra), a training-artifacts directory "
                   "(training_model.onnx) or a training graph file")
    p.add_argument("--dim", action="append", metavar="NAME=SIZE",
                   help="the size of a symbolic dimension in the sample batch (repeatable), e.g. --dim batch=8")
    p.add_argument("--loss", choices=["mse", "crossentropy", "bce", "l1"], default="mse",
                   help="the loss a forward model's training graph is built with (default mse)")
    p.add_argument("--frozen", type=_comma_list, metavar="GLOB[,GLOB...]",
                   help="initializers left out of training (BatchNormalization's running statistics always are)")
    p.add_argument("--name", help="the model's name in the report and in emitted group names (default: the file's)")
    p.add_argument("--backends", type=_comma_list, help=f"as for run ({BACKEND_NAMES_HELP})")
    p.add_argument("--allow-missing-backends", action="store_true")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                   help=f"seconds before a backend call counts as a hang (default {DEFAULT_TIMEOUT:g})")
    p.add_argument("--out", type=Path, help="the directory written (default reports/model-<name>-<time>)")
    p.add_argument("--emit-cases", type=Path, metavar="DIR",
                   help="also write the configurations as case groups <name>_<k> into DIR/<domain>/<Op>.overlay.yaml "
                        "(a --specs directory; the model's earlier groups there are replaced)")
    p.add_argument("--into-specs", action="store_true",
                   help="with --emit-cases: write the groups into the spec files of DIR themselves (a marked block at "
                        "the end of cases.groups; how the built-in specs hold real models' configurations)")
    p.add_argument("--no-run", action="store_true", help="the census and --emit-cases only; run nothing")
    p.add_argument("--list", action="store_true",
                   help="print every gradient-side node under its configuration (op, domain, dtypes, shapes, attributes)")
    p.add_argument("--no-progress", dest="progress", action="store_false", default=None)
    p.set_defaults(func=cmd_model)

    p = sub.add_parser("report", help="render a run directory as one self-contained HTML page")
    _add_spec_option(p)
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a directory written by `opconform run`")
    p.add_argument("--baseline", type=Path, metavar="OTHER", help="a previous run directory to compare with")
    p.add_argument("--out", type=Path, metavar="FILE", help="the HTML file (default RUN_DIR/index.html)")
    p.add_argument("--bench", type=Path, metavar="FILE", help="benchmark JSON (default RUN_DIR/bench.json if present)")
    p.add_argument("--mutate", type=Path, metavar="FILE",
                   help="`opconform mutate` figures (default RUN_DIR/mutate.json if present)")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("bench", help="time openmp, ort, torch and reference on the same inputs; ratios and GB/s, GFLOP/s")
    _add_spec_option(p)
    p.add_argument("--ops", type=_comma_list, help="comma-separated op names or globs (default: every op with a benchmark)")
    p.add_argument("--sizes", type=_comma_list, help="size labels or globs: small, medium, large, large-* (default: all)")
    p.add_argument("--backends", type=_comma_list, help="default: openmp, ort, torch, reference (those available; "
                                                          "with --model: without reference)")
    p.add_argument("--threads", type=int, default=1,
                   help="threads for every backend and the limits (default 1: on a shared machine more threads "
                        "measure the neighbours' load)")
    p.add_argument("--bandwidth", action="store_true",
                   help="also measure the machine's limits: a STREAM-like triad (GB/s) and sgemm (GFLOP/s)")
    p.add_argument("--quick", action="store_true",
                   help="a few repetitions only, to check the command works: rough figures, not for comparison")
    p.add_argument("--isa", type=_comma_list, metavar="LEVEL[,LEVEL...]",
                   help="ISA levels of the openmp kernels to measure, one after another (baseline, avx2, avx512; "
                        "default: the selected one, OPCONFORM_ISA or the best); torch is forced to the same level")
    p.add_argument("--dtype", type=_comma_list, default=["float32"], metavar="DTYPE[,DTYPE...]",
                   help=f"the float types to run each workload in ({', '.join(FLOAT_DTYPES)}; default "
                        "float32); ops whose spec lacks one skip it")
    p.add_argument("--out", type=Path, metavar="FILE",
                   help="the JSON written (default reports/bench-<date>-<time>/bench.json); "
                        "`opconform report RUN_DIR --bench FILE` shows it")
    p.add_argument("--model", metavar="NAME|PATH",
                   help="time a model's gradient-node configurations instead of the specs' sizes: a shipped workload "
                        "list (resnet18, mobilenet_v2, bert_layer, lstm_classifier), a workload list JSON, or an ONNX "
                        "model, training graph or artifacts directory as `opconform model` takes (with --dim); prints "
                        "the per-layer table and the model's total; measures the limits (as --bandwidth)")
    p.add_argument("--dim", action="append", metavar="NAME=SIZE",
                   help="with --model PATH: the size of a symbolic dimension of the graph's inputs (repeatable)")
    p.add_argument("--loss", choices=["mse", "crossentropy", "bce", "l1"], default="mse",
                   help="with --model on a forward ONNX model: the loss its training graph is built with (default mse)")
    p.add_argument("--startup", action="store_true",
                   help="time instead the start-up of `opconform run --ops ReluGrad --backends reference --tier smoke` "
                        "(CPU and wall) against the built-in specs, a one-spec directory and 200 specs, cold and warm "
                        "cache (harness/bench/startup.py); --quick: one run per row, else three")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("probe", help="print what each backend really runs per op x dtype (kernel, function body, cast, ...)")
    _add_spec_option(p)
    p.add_argument("--ops", type=_comma_list, help="comma-separated op names or globs (default: all)")
    p.add_argument("--backends", type=_comma_list,
                   help=f"comma-separated backends ({BACKEND_NAMES_HELP}; default: all built in, installed and defined)")
    _add_command_backend_option(p)
    p.add_argument("--dtypes", type=_comma_list, help=f"comma-separated dtypes (default: {','.join(FLOAT_DTYPES)})")
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the matrix as JSON rows to FILE")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                   help=f"seconds before a probe counts as a hang (default {DEFAULT_TIMEOUT:g})")
    p.set_defaults(func=cmd_probe)

    p = sub.add_parser("inventory", help="every training op of onnxruntime-training 1.19.2: runs on CPU? has a spec?")
    _add_spec_option(p)
    p.add_argument("--ops", type=_comma_list, help="comma-separated op names (default: every op in the table)")
    p.add_argument("--no-ort", action="store_true", help="skip the CPU check (table and specs only)")
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    p.add_argument("--markdown", action="store_true", help="print a Markdown table (docs/coverage.md)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                   help=f"seconds before one op's check counts as a hang (default {DEFAULT_TIMEOUT:g})")
    p.add_argument("--builder", action="store_true",
                   help="only the builder table: every forward op ORT's gradient builder differentiates, and its spec")
    p.add_argument("--no-builder", action="store_true", help="only the training-op table")
    p.set_defaults(func=cmd_inventory)

    p = sub.add_parser("run-onnx", help="run ONNX backend-test directories (model.onnx + test_data_set_N)")
    _add_spec_option(p)
    p.add_argument("dirs", nargs="+", type=Path, metavar="DIR")
    p.add_argument("--backend", required=True, help=f"a backend ({BACKEND_NAMES_HELP})")
    _add_command_backend_option(p)
    p.add_argument("--write-outputs", type=Path, metavar="OUT", help="write the backend's outputs as output_K.pb here")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                   help=f"seconds before a backend call counts as a hang (default {DEFAULT_TIMEOUT:g})")
    p.set_defaults(func=cmd_run_onnx)

    p = sub.add_parser("export-onnx", help="write cases as ONNX backend-test directories with reference outputs")
    _add_spec_option(p)
    p.add_argument("out", type=Path, metavar="OUT")
    p.add_argument("--ops", type=_comma_list, help="comma-separated op names or globs")
    p.add_argument("--tier", choices=TIERS, default="smoke")
    p.add_argument("--cases", help="only case ids matching this glob")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--backend", help=f"export only the cases this backend runs, as its capability probe says "
                   f"({BACKEND_NAMES_HELP})")
    _add_command_backend_option(p)
    p.set_defaults(func=cmd_export_onnx)

    p = sub.add_parser("gen-tests", help="write one pytest file per spec into generated_tests/")
    _add_spec_option(p)
    p.add_argument("--out", type=Path, help="directory (default: generated_tests/ beside the spec directory)")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 naming every stale file")
    p.set_defaults(func=cmd_gen_tests)

    p = sub.add_parser("gen-docs", help="write docs/spec-fields.md, every spec field, from the spec model")
    p.add_argument("--out", type=Path, help="file (default: docs/spec-fields.md in the checkout)")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if the page is stale")
    p.set_defaults(func=cmd_gen_docs)

    p = sub.add_parser("merge", help="merge run directories (CI shards) into one, with the gate's verdict")
    _add_spec_option(p)
    p.add_argument("dirs", nargs="+", type=Path, metavar="DIR",
                   help="directories holding results.jsonl.gz (or an older run's results.jsonl)")
    p.add_argument("--out", type=Path, required=True, help="the merged run directory")
    p.add_argument("--today", type=_date, help="judge waiver review dates as of YYYY-MM-DD (default: today)")
    p.set_defaults(func=cmd_merge)

    p = sub.add_parser("mutate", help="how strong is a spec: wrong reference outputs its cases must catch")
    _add_spec_option(p)
    p.add_argument("--ops", type=_comma_list, help="comma-separated op names or globs")
    p.add_argument("--tier", choices=TIERS, default="ci", help="the cases that must catch the mutants (default ci)")
    p.add_argument("--seed", type=int, default=0, help="global seed mixed into every case seed (default 0)")
    p.add_argument("--out", type=Path, metavar="FILE",
                   help="the JSON written (default reports/mutate-<date>-<time>/mutate.json); put it in a run "
                        "directory (RUN_DIR/mutate.json) or pass `opconform report --mutate FILE` to show it")
    p.set_defaults(func=cmd_mutate)

    p = sub.add_parser("waivers", help="waiver tools: `waivers propose [RUN_DIR]` prints drafts for failures")
    _add_spec_option(p)
    p.add_argument("action", choices=["propose"])
    p.add_argument("run_dir", nargs="?", type=Path, metavar="RUN_DIR", help="default: the newest run in reports/")
    p.set_defaults(func=cmd_waivers)

    p = sub.add_parser("new-op", help="scaffold a spec (fields to fill marked TODO) and a reference stub")
    _add_spec_option(p)
    p.add_argument("name", metavar="NAME", help="the op's name, e.g. SquareGrad")
    p.add_argument("--like", metavar="EXISTING", help="start from a copy of this op's spec")
    p.add_argument("--domain", default="com.microsoft")
    p.add_argument("--inputs", type=_comma_list, metavar="NAMES",
                   help="comma-separated input names, e.g. dY,X,scale (d*: grad_output, others: forward_input)")
    p.add_argument("--outputs", type=_comma_list, metavar="NAMES", help="comma-separated output names, e.g. dX,dscale")
    p.add_argument("--from-schema", action="store_true",
                   help="take inputs, outputs, attributes and types from onnxruntime-training 1.19.2's schema of NAME "
                        "(harness/data/ort_training_ops.yaml)")
    p.add_argument("--forward", action="store_true",
                   help="a computation the gradient graph runs (Scale, FusedMatMul, SplitTraining), not a gradient: "
                        "no forward: section, every input the op's own (default X -> Y; combines with --inputs/--outputs "
                        "and --from-schema)")
    p.set_defaults(func=cmd_new_op)
    return parser


def _date(text: str):
    import datetime

    try:
        return datetime.date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a date; write YYYY-MM-DD") from None


def spec_sources(args):
    """The spec directories of a command: the built-in specs (unless --no-builtin-specs), then
    $OPCONFORM_SPECS, then each --specs DIR."""
    return SpecSources.resolve(getattr(args, "specs", None) or (), getattr(args, "no_builtin_specs", False))


def load(args, ops=None, log=None, index=None):
    """The catalog of the command's spec directories with their waivers: every spec, or with `ops`
    (names or globs) only those ops' specs (unknown names fail before any spec is read)."""
    from harness.run.catalog import load as load_catalog  # lazy: pydantic and the waivers load only for a command that reads specs

    return load_catalog(sources=index.sources if index else spec_sources(args), index=index, ops=ops, log=log,
                        waiver_files=getattr(args, "waivers", None) or (),
                        max_case_bytes=getattr(args, "max_case_memory", None))


def _log(line: str) -> None:
    print(f"opconform: {line}", file=sys.stderr, flush=True)


def cmd_validate(args) -> int:
    try:
        catalog = load(args)
    except SpecError as e:
        for problem in e.problems:
            print(problem, file=sys.stderr)
        print(f"{len(e.problems)} problem(s) found", file=sys.stderr)
        return EXIT_FAILED
    # the C op table (csrc/ops.def) against the specs and the built library: harness.run.op_table
    from harness.run import op_table  # lazy: only validate checks the C op table

    problems, notes = op_table.check(catalog.root, catalog.specs, complete=catalog.complete)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if problems:
        for problem in problems:
            print(problem, file=sys.stderr)
        print(f"{len(problems)} problem(s) found", file=sys.stderr)
        return EXIT_FAILED
    print(f"{len(catalog.specs)} specs valid: {', '.join(s.op for s in catalog.specs)}")
    return EXIT_FAILED if _warn_waiver_reviews(catalog) else EXIT_OK


def _warn_waiver_reviews(catalog) -> int:
    """Waivers past review_by: the gate warns during the grace period, then fails, and so does
    `validate` (it returns how many are expired)."""
    from harness.run import waivers  # lazy: pydantic; --help never reads waivers

    today, expired = waivers.today(), 0
    for w in catalog.waivers:
        state = w.state(today)
        if state == "expired":
            expired += 1
            print(f"{w.file}: review_by: waiver {w.id}: {w.review_by} has passed and so has its "
                  f"{waivers.GRACE_DAYS}-day grace period (the gate fails): review it, then renew review_by or "
                  "remove the waiver", file=sys.stderr)
        elif state != "active":
            print(f"warning: {w.file}: waiver {w.id}: review_by {w.review_by} has passed", file=sys.stderr)
    return expired


def check_run_options(args):
    """`run`'s usage errors that the options alone show (a misspelt op, an unknown backend, a spec directory
    that is not there, a missing --waivers file, bad --threads, --timeout or --out), raised before the run
    directory is claimed or touched: an old run's directory given as --out stays as it was. Start-up grows
    with the selection, not with the spec set: the ops are found from file names, before anything heavy is
    imported. Returns the spec index, which cmd_run loads the selected specs through."""
    if args.threads < 1:
        raise UsageError(f"--threads must be >= 1, got {args.threads}")
    if not args.timeout > 0:
        raise UsageError(f"--timeout must be > 0 seconds, got {args.timeout:g}")
    if args.out is not None and Path(args.out).exists() and not Path(args.out).is_dir():
        raise UsageError(f"--out {args.out}: not a directory (a run directory is written there)")
    index = SpecIndex.scan(spec_sources(args))
    if index.problems:  # what the loader would raise, before the directory is claimed
        raise SpecError([Problem(f, name, m) for f, name, m in index.problems])
    index.select(args.ops)  # UnknownOp, with the nearest name
    missing = [Problem(shown(Path(f)), "", "no such waiver file (--waivers)") for f in args.waivers or []
               if not Path(f).exists()]
    if missing:
        raise SpecError(missing)
    for name in args.backends or []:
        registry.check(name)
    return index


def cmd_run(args) -> int:
    index = getattr(args, "spec_index", None) or check_run_options(args)
    names = index.select(args.ops)
    log = _log if args.progress is not False else None  # --no-progress: no progress lines at all
    if names and log:
        log(f"loading {len(names)} spec{'' if len(names) == 1 else 's'}"
            + (f" ({', '.join(names)})" if len(names) <= 3 else "") + "...")
    from harness.backends.worker import prestart  # lazy: the worker machinery loads only for run

    prestart(registry.worker_classes(args.backends or registry.DEFAULT))  # imports overlap the loading
    catalog = load(args, ops=args.ops or None, log=log, index=index)
    from harness.run.runner import RunOptions, print_summary, run  # lazy: numpy and the engine load only for the commands that run cases

    options = RunOptions(ops=args.ops, backends=args.backends, tier=args.tier, cases=args.cases, seed=args.seed,
                         threads=args.threads, timeout=args.timeout, out=args.out, progress=args.progress,
                         allow_missing_backends=args.allow_missing_backends, waiver_files=args.waivers or [])
    outcome = run(catalog, options)
    print_summary(outcome, started=STARTED)
    if args.report:
        _publish(outcome.run_dir, catalog)
    return EXIT_OK if outcome.passed else EXIT_FAILED


def _publish(run_dir: Path, catalog) -> None:
    """index.html and junit.xml beside the results; a report bug must not change the run's verdict."""
    from harness.report import publish  # lazy: jinja2 and the report load only when a report is written

    try:
        html, junit = publish(run_dir, catalog)
    except Exception as e:  # noqa: BLE001 - the results are on disk; say so and keep the exit code
        print(f"opconform: warning: could not write the report: {type(e).__name__}: {e}; "
              f"retry with `opconform report {run_dir}`", file=sys.stderr)
        return
    print(f"report: {html}  junit: {junit}")


def cmd_model(args) -> int:
    from harness.model.command import ModelUsageError, run_model  # lazy: onnx and the census load only for model

    if args.threads < 1:
        raise UsageError(f"--threads must be >= 1, got {args.threads}")
    for name in args.backends or []:
        registry.check(name)
    base = list(args.specs or [])

    def catalog_loader(extra):
        args.specs = [*base, *extra]
        try:
            return load(args, log=None)
        finally:
            args.specs = base

    try:
        return run_model(args, catalog_loader, _log if args.progress is not False else (lambda line: None))
    except ModelUsageError as e:
        raise UsageError(str(e)) from None


def cmd_report(args) -> int:
    from harness.report import ReportError, write_report  # lazy: jinja2 and the report load only when a report is written

    if args.baseline and results_path(args.baseline) is None:
        raise UsageError(f"--baseline {args.baseline}: no results.jsonl.gz there (nor an older run's results.jsonl); pass a "
                         "directory written by `opconform run`")
    if args.bench and not args.bench.is_file():
        raise UsageError(f"--bench {args.bench}: no such file")
    if args.mutate and not args.mutate.is_file():
        raise UsageError(f"--mutate {args.mutate}: no such file")
    try:
        # the run's own spec directories unless --specs/--no-builtin-specs/$OPCONFORM_SPECS say otherwise
        given = args.specs or args.no_builtin_specs or os.environ.get("OPCONFORM_SPECS")
        out = write_report(args.run_dir, args.out, args.baseline, args.bench, spec_sources(args) if given else None,
                           mutation=args.mutate)
    except ReportError as e:
        raise UsageError(str(e)) from None
    print(f"report: {out}")
    return EXIT_OK


def cmd_bench(args) -> int:
    import datetime

    if args.startup:
        from harness.bench import startup  # lazy: only bench --startup uses it

        return startup.run(repeats=1 if args.quick else 3, out=args.out)
    from harness.bench.runner import BACKENDS, BenchError, BenchOptions, header, main_log, run_bench, table  # lazy: bench only

    if args.threads < 1:
        raise UsageError(f"--threads must be >= 1, got {args.threads}")
    out = args.out or _default_output(f"bench-{datetime.datetime.now():%Y%m%d-%H%M%S}", "bench.json")
    default_backends = [b for b in BACKENDS if b != "reference"] if args.model else list(BACKENDS)  # --model: the peers
    options = BenchOptions(ops=args.ops, sizes=args.sizes, backends=args.backends or default_backends,
                           threads=args.threads, bandwidth=args.bandwidth or bool(args.model), quick=args.quick, out=out,
                           isa=args.isa, dtypes=args.dtype)
    main_log(header(options))
    try:
        catalog = load(args, ops=[])  # the specs of the workloads it selects, on demand
        if args.model:
            options.model = _bench_model_list(args, catalog, out)
        doc = run_bench(catalog, options, log=main_log)
    except BenchError as e:
        raise UsageError(str(e)) from None
    print(table(doc))
    for problem in doc["problems"]:
        print(f"problem: {problem}")
    print(f"bench: {out}")
    return EXIT_OK


def _bench_model_list(args, catalog, out: Path) -> Path:
    """`bench --model`: the workload list to time: a shipped one by name, a list file, or the list of an ONNX model's
    configurations (its census, as `opconform model` takes it) written beside the bench JSON."""
    from harness.bench import model as bench_model  # lazy: numpy and the bench load only for `bench`
    from harness.bench.runner import BenchError, main_log  # lazy: as above

    found = bench_model.resolve_name(args.model)
    if found is not None:
        return found
    path = Path(args.model)
    if not path.exists():
        raise BenchError(bench_model.unknown_model(args.model))
    from harness.model import workload_list  # lazy: onnx and the model census load only for `bench --model PATH`
    from harness.model.build import BuildError  # lazy: as above
    from harness.model.census import CensusError  # lazy: as above
    from harness.model.command import ModelUsageError, model_name, parse_dims  # lazy: as above

    try:
        dims = parse_dims(args.dim or [])
        return workload_list.list_from_graph(path, dims, catalog, out.parent / f"{model_name(path)}.workloads.json",
                                           log=main_log, loss=args.loss)
    except (ModelUsageError, BuildError, CensusError, bench_model.ModelListError) as e:
        raise BenchError(f"--model {args.model}: {e}") from None


def cmd_probe(args) -> int:
    import json

    from harness.core import dtypes  # lazy: numpy and onnx load only for the commands that run cases
    from harness.run import probe  # lazy: numpy and the engine load only for the commands that run cases

    names = args.backends or registry.known()
    for name in names:
        registry.check(name)
    for dtype in args.dtypes or []:
        if dtype not in dtypes.FLOATS:
            raise UsageError(f"unknown dtype '{dtype}'; known: {', '.join(dtypes.FLOATS)}")
    catalog = load(args, ops=args.ops)
    specs = catalog.select(args.ops)
    backends = [registry.create(name, timeout=args.timeout) for name in names]
    try:
        rows = probe.matrix(backends, probe.pairs(specs, args.dtypes or list(dtypes.FLOATS)))
    finally:
        for backend in backends:
            backend.close()
    print(probe.format_matrix(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return EXIT_OK


def cmd_inventory(args) -> int:
    import json

    from harness.run import builder_table, inventory  # lazy: only inventory uses them

    catalog = load(args)
    rows, builder_rows = [], []
    if not args.builder:
        backend = None if args.no_ort else registry.create("ort", timeout=args.timeout)
        try:
            rows = inventory.rows(catalog.specs, backend, only=args.ops)
        finally:
            if backend is not None:
                backend.close()
    if not args.no_builder and not args.no_ort:
        progress, prober = builder_table.StderrProgress(), builder_table.Prober(timeout=args.timeout)
        try:  # the probes' answers are cached: a second run starts no worker
            builder_rows = builder_table.rows(catalog.specs, only=args.ops, progress=progress, prober=prober)
        finally:
            prober.close()
            progress.done()
    if args.json:
        doc = {} if args.builder else json.loads(inventory.format_json(rows))
        print(json.dumps(doc | ({"builder": builder_table.as_json(builder_rows)} if builder_rows else {}), indent=1))
    else:
        fmt = (inventory.format_markdown, builder_table.format_markdown) if args.markdown else \
            (inventory.format_text, builder_table.format_text)
        parts = ([] if args.builder else [fmt[0](rows)]) + ([fmt[1](builder_rows)] if builder_rows else [])
        print(("\n\n" if args.markdown else "\n\n== gradient builder ==\n").join(parts))
    return EXIT_OK


def cmd_run_onnx(args) -> int:
    from harness.run.onnx_data import run_dirs  # lazy: onnx loads only for the ONNX data commands

    registry.check(args.backend)
    catalog = load(args)
    return EXIT_OK if run_dirs(catalog, args.dirs, args.backend, args.write_outputs, args.threads,
                               args.timeout) else EXIT_FAILED


def cmd_export_onnx(args) -> int:
    from harness.run.onnx_data import export_cases  # lazy: onnx loads only for the ONNX data commands
    from harness.run.runner import RunOptions, select_cases  # lazy: numpy and the engine load only for the commands that run cases

    if args.backend:
        registry.check(args.backend)
    catalog = load(args, ops=args.ops)
    cases = [c for c in select_cases(catalog, RunOptions(ops=args.ops, tier=args.tier, cases=args.cases)) if c.valid]
    left_out: list = []
    if args.backend:
        from harness.run.onnx_data import cases_backend_runs  # lazy: onnx loads only for the ONNX data commands

        cases, left_out = cases_backend_runs(args.backend, cases)
        for line in left_out:
            print(line)
    written = export_cases(catalog, cases, args.out, args.seed)
    runs = f"; only what {args.backend} runs" if args.backend else ""
    print(f"wrote {written} test directories to {args.out} (valid cases only{runs})")
    return EXIT_OK


def cmd_gen_tests(args) -> int:
    from harness.codegen import gen_tests  # lazy: jinja2 and the generator load only for gen-tests

    catalog = load(args)
    out = args.out or gen_tests.default_out(catalog)
    try:
        if args.check:
            stale = gen_tests.stale(catalog, out)
            for line in stale:
                print(line, file=sys.stderr)
            if stale:
                print(f"{len(stale)} generated file(s) stale: run `opconform gen-tests`", file=sys.stderr)
                return EXIT_FAILED
            print(f"generated tests in {out} are up to date ({len(catalog.specs)} specs)")
            return EXIT_OK
        changes = gen_tests.write(catalog, out)
    except gen_tests.CodegenError as e:
        raise UsageError(str(e)) from None
    for name in changes.written:
        print(f"wrote {out / name}")
    for name in changes.removed:
        print(f"removed {out / name} (its spec is gone)")
    print(f"{len(changes.written)} written, {len(changes.removed)} removed, {len(changes.unchanged)} unchanged in {out}")
    return EXIT_OK


def cmd_gen_docs(args) -> int:
    from harness.codegen import gen_docs  # lazy: pydantic and the docs generator load only for gen-docs

    out = args.out or gen_docs.DEFAULT_PATH
    if args.check:
        if gen_docs.stale(out):
            print(f"{out} is stale: run `opconform gen-docs`", file=sys.stderr)
            return EXIT_FAILED
        print(f"{out} is up to date")
        return EXIT_OK
    print(f"{'wrote' if gen_docs.write(out) else 'unchanged:'} {out}")
    return EXIT_OK


def cmd_merge(args) -> int:
    from harness.run import gate, rundir  # lazy: numpy and the gate load only for merge

    catalog = load(args)
    rundir.claim(args.out)  # one writer per directory, as for a run (RunDirBusy: exit 2)
    try:
        try:
            summary = rundir.merge(args.dirs, args.out, catalog, today=args.today)
        except rundir.MergeError as e:
            raise UsageError(str(e)) from None
        gate.print_verdict(summary, sys.stdout)
        print(f"results: {args.out}/{rundir.RESULTS}, {args.out}/{rundir.SUMMARY}")
        _publish(args.out, catalog)  # the merged shards' one report and junit.xml
    finally:
        rundir.release(args.out)
    return EXIT_OK if summary["verdict"]["passed"] else EXIT_FAILED


def cmd_mutate(args) -> int:
    import datetime

    from harness.run import mutate  # lazy: numpy and the engine load only for mutate

    out = args.out or _default_output(f"mutate-{datetime.datetime.now():%Y%m%d-%H%M%S}", "mutate.json")
    catalog = load(args, ops=args.ops)
    figures = mutate.mutate(catalog, args.ops, args.tier, args.seed,
                            log=lambda line: print(line, file=sys.stderr, flush=True))
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(out, figures)
    print(mutate.format_table(figures))
    weak = mutate.weaknesses(figures)
    print(f"\n{len(weak)} weakness(es): mutant(s) larger than x{mutate.SURVIVOR_LIMIT:g} of the tolerance that no "
          f"{args.tier} case catches" if weak else f"\nno mutant larger than x{mutate.SURVIVOR_LIMIT:g} of the "
          f"tolerance survives the {args.tier} tier")
    print(f"figures: {out}")
    return EXIT_FAILED if weak else EXIT_OK


def _default_output(folder: str, name: str) -> Path:
    """reports/<folder>/<name> under the current directory, by `run`'s rule: never inside the installed package
    (RunDirError before any work is done)."""
    check_outside_package(default_reports(), "--out FILE")
    return default_reports() / folder / name


def cmd_waivers(args) -> int:
    from harness.run import waivers  # lazy: pydantic; only waivers propose reads waivers

    catalog = load(args)
    run_dir = args.run_dir or _newest_run(default_reports())
    path = results_path(run_dir)
    if path is None:
        raise UsageError(f"{run_dir}: no results.jsonl.gz or results.jsonl; pass a run directory (opconform run --out DIR)")
    print(waivers.propose(read_results(path), catalog.waivers, source=str(path)), end="")
    return EXIT_OK


def _newest_run(reports: Path) -> Path:
    runs = sorted({p.parent for p in [*reports.glob("*/results.jsonl.gz"), *reports.glob("*/results.jsonl")]},
                  key=lambda p: p.stat().st_mtime)
    if not runs:
        raise UsageError(f"no run in {reports}/; run `opconform run` first or pass RUN_DIR")
    return runs[-1]


def cmd_new_op(args) -> int:
    from harness.codegen import scaffold  # lazy: only new-op scaffolds

    sources = spec_sources(args)
    root = sources.dirs[-1] if sources.dirs else builtin_root()  # the top directory: the last --specs DIR
    if not sources.dirs and not (root.parent / "pyproject.toml").is_file():
        raise UsageError(f"new-op: the built-in specs ({root}) are part of the installed package; "
                         "pass --specs DIR, your own spec directory")
    index = SpecIndex.scan(sources)
    elsewhere = [e.path for e in index.specs.get(args.name, []) if index.layers[e.layer][0] != root]
    if elsewhere:
        raise UsageError(f"new-op: {args.name} is already a spec in {shown(elsewhere[0])}; add case groups to it "
                         f"with {args.domain}/{args.name}.overlay.yaml in your directory instead")
    chosen = [flag for flag, on in (("--like", args.like), ("--inputs/--outputs", args.inputs or args.outputs),
                                    ("--from-schema", args.from_schema)) if on]
    if len(chosen) > 1:
        raise UsageError(f"new-op: use one of {', '.join(chosen)}")
    if args.forward and args.like:
        raise UsageError("new-op: --forward scaffolds a computation's spec; --like copies an existing spec as it is")
    try:
        signature, domain = None, args.domain
        if args.from_schema:
            from harness.data import ort_op  # lazy: the ORT schema table loads only for new-op --from-schema

            try:
                entry = ort_op(args.name)
            except KeyError as e:
                raise scaffold.ScaffoldError(f"--from-schema: {e.args[0]}") from None
            signature, domain = scaffold.Signature.from_schema(entry, computation=args.forward), entry["domain"] or "ai.onnx"
        elif args.inputs or args.outputs:
            signature = scaffold.Signature.from_names(args.inputs or [], args.outputs or [], computation=args.forward)
        elif args.forward:
            signature = scaffold.Signature.default_computation()
        made = scaffold.new_op(root, args.name, like=args.like, domain=domain, signature=signature)
    except scaffold.ScaffoldError as e:
        raise UsageError(str(e)) from None
    print(f"wrote {shown(made.spec)} ({len(made.todo)} value(s) marked TODO)")
    print(f"wrote {shown(made.reference)} (raises NotImplementedError until you write it)")
    print("next: fill in the TODOs and the reference; `opconform validate` lists what is still missing, one item a "
          "line; then `opconform gen-tests` and `pytest generated_tests -m smoke -k " + args.name + "` "
          "(docs/adding-an-op.md)")
    return EXIT_OK


def _run_error() -> type[Exception]:
    """harness.run.runner.RunError once the runner (which raises it) is imported; importing the runner
    just to name it would put its imports in front of every command's first line."""
    runner = sys.modules.get("harness.run.runner")
    return runner.RunError if runner is not None else UsageError


def _start_run(args) -> tuple[Path | None, bool]:
    """`run`: its directory, claimed and holding a provisional summary from the moment its options are parsed
    and checked (harness.run.rundir.start), so that a run stopped at any moment leaves a summary saying so; and
    whether this call created it. A usage error the options show comes first (check_run_options), so that an old
    run's directory given as --out is not cleared for a run that never starts."""
    if args.command != "run":
        return None, False

    args.spec_index = check_run_options(args)  # usage errors first: nothing on disk is touched before they are
    created = args.out is None or not Path(args.out).exists()
    out = args.out or rundir.new_run_dir(rundir.default_reports(), args.tier)
    args.out = rundir.start(out, {"tier": args.tier, "seed": args.seed, "threads": args.threads,
                                  "case_filter": args.cases, "selection": {"ops": args.ops, "backends": args.backends},
                                  "started": time.strftime("%Y-%m-%dT%H:%M:%S")})
    return args.out, created


def main(argv: list[str] | None = None) -> int:
    held = signals.hold()  # first (the console script held them on import already): see harness.run.signals
    run_dir, created = None, False
    try:
        args = build_parser().parse_args(argv)
        try:
            for definition in getattr(args, "command_backend", []):  # a bad one is a usage error, before any write
                registry.define_command(definition)
            run_dir, created = _start_run(args)
            signals.arm()  # a signal held so far interrupts now, with the run's directory there to say so
            return args.func(args)
        except SpecError as e:
            for problem in e.problems:
                print(f"opconform: spec error: {problem}", file=sys.stderr)
            _abandon(run_dir, created, str(e.problems[0]) if e.problems else "spec error")
            return EXIT_USAGE
        except (UsageError, UnknownOp, UnknownBackend, RunDirError, _run_error()) as e:
            print(f"opconform: error: {e}", file=sys.stderr)
            _abandon(run_dir, created, str(e))
            return EXIT_USAGE
        except KeyboardInterrupt as e:
            name = signals.fired() or ("SIGTERM" if isinstance(e, signals.Terminated) else "SIGINT")
            if run_dir is not None:
                with signals.critical():
                    rundir.interrupted(run_dir, name)  # when the run could not write its own final summary
            print(f"opconform: {'terminated (SIGTERM)' if name == 'SIGTERM' else 'interrupted'}; results written "
                  "so far are kept", file=sys.stderr)
            return EXIT_TERMINATED if name == "SIGTERM" else EXIT_INTERRUPTED
    finally:
        if run_dir is not None:
            rundir.release(run_dir)
        if held:
            signals.release()


def _abandon(run_dir: Path | None, created: bool, reason: str) -> None:
    if run_dir is not None:
        rundir.abandon(run_dir, created, reason)


if __name__ == "__main__":
    sys.exit(main())
