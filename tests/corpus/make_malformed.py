"""Writes tests/corpus/malformed.json: broken specs and waiver files, each with what it must cost.

Every variant starts from a small, valid spec tree (ReluGrad, the default tolerances, one valid ort
waiver) and replaces one file. tests/test_malformed_corpus.py materialises each variant and checks
that `validate` exits 1 and `run` exits 2 with one line naming the file and the field.

    python tests/corpus/make_malformed.py      # rewrite the JSON after changing this script
"""
from __future__ import annotations

import base64
import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SPEC = "com.microsoft/ReluGrad.yaml"
WAIVERS = "_waivers/ort.yaml"
DEFAULTS = "_defaults/tolerances.yaml"
HOOKS = "_defaults/hooks.yaml"
BASE_WAIVER = """backend: ort
waivers:
  - id: ORT-0001
    kind: xfail
    match: {op: ReluGrad, dtypes: [float32], cases: ["basic/*"]}
    failure: wrong_values
    reason: A corpus waiver that is well formed in every field.
    tracking: https://github.com/example/opconform/issues/1
    review_by: 2099-01-31
"""
DECLARE_CORPUS_HOOKS = "packages: [corpus_hooks]\n"


def spec_text() -> str:
    """ReluGrad's spec without its real-model groups (the block `opconform model --into-specs` writes): each variant
    breaks one thing, and those groups would break with it."""
    lines = (REPO / "specs" / SPEC).read_text().splitlines(keepends=True)
    begin = next((i for i, line in enumerate(lines) if line.startswith("    # real models' configurations:")), None)
    if begin is not None:
        end = next(i for i, line in enumerate(lines) if line.startswith("    # end of real models' configurations"))
        del lines[begin:end + 1]
    return "".join(lines)


def edited(old: str, new: str, base: str | None = None) -> str:
    base = spec_text() if base is None else base
    assert base.count(old) == 1, f"{old!r} must occur once"
    return base.replace(old, new)


def waiver(old: str, new: str) -> str:
    assert BASE_WAIVER.count(old) == 1, old
    return BASE_WAIVER.replace(old, new)


def alias_chain(levels: int = 9) -> str:
    lines = ["a0: &a0 [" + ", ".join(["1"] * 9) + "]"]
    lines += [f"a{k}: &a{k} [" + ", ".join([f"*a{k - 1}"] * 9) + "]" for k in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


BASIC = "params: {shape: [[7], [3, 4], [2, 3, 5]]}"
SHAPES_DTYPES = "dtypes: [float32, float16]\n      params: {shape: [[1], [1, 1]"


def variants() -> list[dict]:
    """name, files {relative path: text | {"b64": ...} | {"special": ...}}, expected file and field, and
    `says`: a word the line must hold. exit_run None: the spec tree loads (run may start)."""
    v = []

    def add(name, path, content, field, says, *, extra=None, exit_validate=1, exit_run=2, file=None):
        files = {path: content, **(extra or {})}
        v.append({"name": name, "files": files, "file": file or Path(path).name, "field": field, "says": says,
                  "exit_validate": exit_validate, "exit_run": exit_run})

    raw = spec_text().encode()
    rng = random.Random(13)
    b64 = lambda data: {"b64": base64.b64encode(data).decode()}  # noqa: E731

    # ---- the file itself ----------------------------------------------------------------------
    add("non_utf8_bytes", SPEC, b64(raw.replace(b"Passes dY", b"Passes \xe9\xff dY")), "", "UTF-8")
    add("utf16_bom", SPEC, b64(spec_text().encode("utf-16")), "", "UTF-16")
    add("binary_garbage", SPEC, b64(bytes(rng.randrange(256) for _ in range(4096))), "", "binary")
    add("latin1_no_nul", SPEC, b64(bytes(rng.randrange(0x80, 0x100) for _ in range(300))), "", "UTF-8")
    add("directory_named_yaml", "com.microsoft/TanhGrad.yaml", {"special": "directory"}, "", "regular file")
    add("dangling_symlink", "com.microsoft/TanhGrad.yaml", {"special": "dangling_symlink"}, "", "does not exist")
    add("nested_brackets", SPEC, "x: " + "[" * 5000 + "\n", "line 1", "nested")
    add("nested_mappings", SPEC, "".join("  " * k + f"k{k}:\n" for k in range(200)) + "  " * 200 + "end: 1\n",
        "line", "nested")
    add("alias_chain", SPEC, alias_chain(), "line", "aliases")
    add("alias_chain_before_spec", SPEC, alias_chain(6) + spec_text(), "line", "aliases")
    add("yaml_syntax_error", SPEC, edited("schema_version: 1\n", "schema_version: 1\n  bad: [indent\n"),
        "line", "not valid YAML")
    add("unterminated_quote", SPEC, edited('formula: "dX', 'formula: "dX = "dY'), "line", "not valid YAML")
    add("tab_indentation", SPEC, edited("cases:\n  dtypes", "cases:\n\tdtypes"), "line", "not valid YAML")
    add("duplicate_key", SPEC, edited("since_version: 1\n", "since_version: 1\nsince_version: 2\n"), "line",
        "twice")
    add("not_a_mapping", SPEC, "- op: ReluGrad\n- domain: com.microsoft\n", "", "mapping")
    add("empty_file", SPEC, "", "", "mapping")
    add("only_a_comment", SPEC, "# nothing yet\n", "", "mapping")
    add("huge_file", SPEC, {"pad": spec_text(), "bytes": (1 << 20) + 10}, "", "limit")
    add("unknown_tag", SPEC, edited("since_version: 1", "since_version: !!python/object:os.system 1"), "line",
        "not valid YAML")

    # ---- numbers that pass a naive schema and break the run ----------------------------------
    tol = "tolerances:\n  float32: {atol: %s, rtol: %s, reason: a corpus tolerance with a reason}\n"
    add("atol_inf", SPEC, edited("\ncases:\n", "\n" + tol % (".inf", "1.0e-4") + "cases:\n"),
        "tolerances.float32.atol", "finite")
    add("atol_nan", SPEC, edited("\ncases:\n", "\n" + tol % (".nan", "1.0e-4") + "cases:\n"),
        "tolerances.float32.atol", "finite")
    add("rtol_negative", SPEC, edited("\ncases:\n", "\n" + tol % ("1.0e-5", "-1.0e-4") + "cases:\n"),
        "tolerances.float32.rtol", "greater than or equal")
    add("default_atol_inf", DEFAULTS, "tolerances:\n  float32: {atol: .inf, rtol: 1.0e-4}\n"
        "  float64: {atol: 1.0e-10, rtol: 1.0e-9}\n  float16: {atol: 2.5e-3, rtol: 1.0e-3}\n"
        "  bfloat16: {atol: 2.0e-2, rtol: 1.0e-2}\n", "tolerances.float32.atol", "finite")
    add("default_rtol_string", DEFAULTS, "tolerances:\n  float32: {atol: 1.0e-5, rtol: tight}\n"
        "  float64: {atol: 1.0e-10, rtol: 1.0e-9}\n  float16: {atol: 2.5e-3, rtol: 1.0e-3}\n"
        "  bfloat16: {atol: 2.0e-2, rtol: 1.0e-2}\n", "tolerances.float32.rtol", "number")
    add("default_non_utf8", DEFAULTS, b64(b"tolerances:\n  float32: {atol: 1e-5, rtol: 1e-4} # \xff\n"), "", "UTF-8")
    add("generator_mean_nan", SPEC, edited("dY: {distribution: normal, std: 1.0}\n    X:",
                                           "dY: {distribution: normal, std: 1.0, mean: .nan}\n    X:"),
        "cases.inputs.dY.mean", "finite")
    add("generator_std_inf", SPEC, edited("X: {distribution: normal, std: 2.0}", "X: {distribution: normal, std: .inf}"),
        "cases.inputs.X.std", "finite")
    add("generator_std_negative", SPEC, edited("X: {distribution: normal, std: 2.0}",
                                               "X: {distribution: normal, std: -2.0}"), "cases.inputs.X.std", "greater")
    add("generator_low_nan", SPEC, edited("X: {distribution: normal, std: 2.0}", "X: {distribution: uniform, low: .nan}"),
        "cases.inputs.X.low", "finite")
    add("generator_values_empty", SPEC, edited("X: {values: [0.0, -0.0, nan, inf, -inf, 1.0, -1.0, tiny, subnormal, -subnormal]}",
                                               "X: {values: []}"), "cases.groups[4].inputs.X.values", "at least 1")
    add("generator_special_unknown", SPEC, edited("special: [nan, inf, -inf], fraction: 0.5",
                                                  "special: [nan, huge], fraction: 0.5"),
        "cases.groups[4].inputs.dY.special[1]", "nan")
    add("generator_fraction_zero", SPEC, edited("special: [nan, inf, -inf], fraction: 0.5", "special: [nan], fraction: 0"),
        "cases.groups[4].inputs.dY.fraction", "greater than 0")
    add("timeout_negative", SPEC, edited("      tier: smoke\n", "      tier: smoke\n      timeout: -1\n"),
        "cases.groups[0].timeout", "greater than 0")
    add("timeout_inf", SPEC, edited("      tier: smoke\n", "      tier: smoke\n      timeout: .inf\n"),
        "cases.groups[0].timeout", "finite")
    add("attribute_min_inf", SPEC, edited("reference: \"reference.ops.activations:relu_grad\"\n",
                                          "reference: \"reference.ops.activations:relu_grad\"\n"
                                          "attributes:\n  alpha: {type: float, default: 0.5, min: -.inf}\n"),
        "attributes.alpha.min", "finite")

    # ---- empty lists that would silently mean "everything" or "nothing" ----------------------
    add("group_dtypes_empty", SPEC, edited(SHAPES_DTYPES, SHAPES_DTYPES.replace("[float32, float16]", "[]")),
        "cases.groups[1].dtypes", "at least 1")
    add("cases_dtypes_empty", SPEC, edited("  dtypes: [float32, float64, float16, bfloat16]\n", "  dtypes: []\n"),
        "cases.dtypes", "at least 1")
    add("param_values_empty", SPEC, edited(BASIC, "params: {shape: []}"), "cases.groups[0].params.shape", "at least 1")
    add("divergence_dtypes_empty", SPEC, edited('cases: ["x_much_smaller/*"]', 'cases: ["x_much_smaller/*"]\n    dtypes: []'),
        "known_divergences[1].dtypes", "at least 1")
    add("divergence_outputs_empty", SPEC, edited('cases: ["x_much_smaller/*"]', 'cases: ["x_much_smaller/*"]\n    outputs: []'),
        "known_divergences[1].outputs", "at least 1")
    add("invalid_why_too_short", SPEC, edited("why: dY and X must have the same shape\n      params: {shape: [[4]",
                                              "why: bad\n      params: {shape: [[4]"), "cases.invalid[0].why", "at least 5")

    # ---- shapes ---------------------------------------------------------------------------------
    add("negative_dim", SPEC, edited(BASIC, "params: {shape: [[7], [3, -4], [2, 3, 5]]}"),
        "cases.groups[0].params.shape", "negative")
    add("shape_not_list_of_lists", SPEC, edited(BASIC, "params: {shape: [7, 3]}"), "cases.groups[0].params.shape",
        "not a shape")
    add("shape_of_strings", SPEC, edited(BASIC, "params: {shape: [[two, 3]]}"), "cases.groups[0].params.shape",
        "not a shape")
    add("shape_of_floats", SPEC, edited(BASIC, "params: {shape: [[2.5, 3]]}"), "cases.groups[0].params.shape",
        "not a shape")
    add("shape_of_bools", SPEC, edited(BASIC, "params: {shape: [[true, 3]]}"), "cases.groups[0].params.shape",
        "not a shape")
    add("shape_74_gib", SPEC, edited(BASIC, "params: {shape: [[100000, 100000]]}"), "cases.groups[0]", "budget")
    add("shape_overflows_int64", SPEC, edited(BASIC, "params: {shape: [[9223372036854775807, 9223372036854775807]]}"),
        "cases.groups[0]", "budget")
    add("rank_outside_declared_range", SPEC, edited("role: forward_input, shape_from: dY,",
                                                    "role: forward_input, shape_from: dY, rank: {min: 1, max: 4},"),
        "cases.groups[1]", "rank 5")
    add("attribute_allowed_empty", SPEC, edited("reference: \"reference.ops.activations:relu_grad\"\n",
                                                "reference: \"reference.ops.activations:relu_grad\"\n"
                                                "attributes:\n  mode: {type: string, allowed: []}\n"),
        "attributes.mode.allowed", "at least 1")
    add("invalid_shape_negative", SPEC, edited("shapes: {X: [3]}", "shapes: {X: [-3]}"),
        "cases.invalid[0].shapes.X[0]", "greater than or equal")
    add("invalid_shape_not_list", SPEC, edited("shapes: {X: [3]}", "shapes: {X: 3}"), "cases.invalid[0].shapes.X",
        "list")
    add("too_many_cases", SPEC, edited(BASIC, "params: {shape: [[2]], a: " + str(list(range(60))) + ", b: "
                                       + str(list(range(60))) + ", c: " + str(list(range(60))) + "}"),
        "cases.groups[0].params", "multiply")
    add("typo_param_key_many_combinations", SPEC,
        edited(BASIC, "params: {shape: [[7], [3, 4], [2, 3, 5]], axsi: " + str(list(range(64))) + "}"),
        "cases.groups[0].params.axsi", "unknown case parameter")

    # ---- hooks ----------------------------------------------------------------------------------
    hooks = {HOOKS: DECLARE_CORPUS_HOOKS}
    valid_if = lambda path: edited('reference: "reference.ops.activations:relu_grad"\n',  # noqa: E731
                                   f'reference: "reference.ops.activations:relu_grad"\nvalid_if: "{path}"\n')
    add("valid_if_imports_this", SPEC, valid_if("this:s"), "valid_if", "outside")
    add("reference_os_system", SPEC, edited('reference: "reference.ops.activations:relu_grad"',
                                            'reference: "os:system"'), "reference", "outside")
    add("forward_reference_subprocess", SPEC, edited('reference: "reference.forward.activations:relu"',
                                                     'reference: "subprocess:run"'), "forward.reference", "outside")
    add("valid_if_reexported_numpy", SPEC, valid_if("reference.ops.activations:normal_cdf_not_there"), "valid_if",
        "no function")
    add("valid_if_imported_builtin", SPEC, valid_if("corpus_hooks:getcwd"), "valid_if", "imported", extra=hooks)
    add("valid_if_undeclared_package", SPEC, valid_if("corpus_hooks:valid_if_ok"), "valid_if", "outside")
    add("valid_if_wrong_arity", SPEC, valid_if("corpus_hooks:valid_if_one_argument"), "valid_if", "cannot take",
        extra=hooks)
    add("valid_if_recurses", SPEC, valid_if("corpus_hooks:valid_if_recursive"), "valid_if", "recurses", extra=hooks)
    add("valid_if_loops_forever", SPEC, valid_if("corpus_hooks:valid_if_loops_forever"), "valid_if", "did not return",
        extra=hooks)
    add("valid_if_returns_number", SPEC, valid_if("corpus_hooks:valid_if_returns_number"), "valid_if", "returned",
        extra=hooks)
    add("valid_if_raises", SPEC, valid_if("corpus_hooks:valid_if_raises"), "valid_if", "raised", extra=hooks)
    add("valid_if_rejects_valid_cases", SPEC, valid_if("corpus_hooks:valid_if_rejects_length_7"),
        "cases.groups[0]", "valid_if rejects", extra=hooks)
    add("reference_missing_module", SPEC, edited('reference: "reference.ops.activations:relu_grad"',
                                                 'reference: "reference.ops.nothing_here:relu_grad"'), "reference",
        "cannot import")
    add("reference_extra_required_parameter", SPEC, edited('reference: "reference.ops.activations:relu_grad"',
                                                           'reference: "corpus_hooks:reference_wants_more"'),
        "reference", "cannot take", extra=hooks)
    add("reference_misses_an_input", SPEC, edited('reference: "reference.ops.activations:relu_grad"',
                                                  'reference: "corpus_hooks:reference_without_x"'),
        "reference", "does not take X", extra=hooks)
    add("hook_module_fails_to_import", SPEC, valid_if("corpus_hooks_broken:valid_if_ok"), "valid_if", "raised",
        extra={HOOKS: "packages: [corpus_hooks, corpus_hooks_broken]\n"})
    add("shapes_hook_wrong_arity", SPEC, edited("  groups:\n", "  shapes: \"corpus_hooks:valid_if_ok\"\n  groups:\n"),
        "cases.shapes", "cannot take", extra=hooks)
    add("shapes_hook_negative", SPEC, edited("  groups:\n", "  shapes: \"corpus_hooks:negative_shapes\"\n  groups:\n"),
        "cases.shapes", "negative", extra=hooks)
    add("shapes_hook_raises", SPEC, edited("  groups:\n", "  shapes: \"corpus_hooks:shapes_raise\"\n  groups:\n"),
        "cases.shapes", "cannot be built", extra=hooks)
    add("hooks_declares_stdlib", HOOKS, "packages: [os]\n", "packages[0]", "standard library")
    add("hooks_declares_harness", HOOKS, "packages: [harness]\n", "packages[0]", "harness")
    add("hooks_unknown_field", HOOKS, "packages: [corpus_hooks]\nmodules: [x]\n", "modules", "unknown field")

    # ---- the rest of the schema -----------------------------------------------------------------
    add("schema_version_2", SPEC, edited("schema_version: 1", "schema_version: 2"), "schema_version", "1")
    add("unknown_top_level_field", SPEC, edited("since_version: 1\n", "since_version: 1\nsince: 1\n"), "since",
        "unknown field")
    add("summary_missing", SPEC, "\n".join(line for line in spec_text().splitlines() if not line.startswith("summary:")) + "\n",
        "summary", "missing")
    add("op_name_mismatch", SPEC, edited("op: ReluGrad", "op: ReluGrads"), "op", "rename")
    add("dtype_unknown", SPEC, edited("  dtypes: [float32, float64, float16, bfloat16]\n", "  dtypes: [float8]\n"),
        "cases.dtypes[0]", "float32")
    add("tier_typo", SPEC, edited("      tier: smoke\n", "      tier: smok\n"), "cases.groups[0].tier", "smoke")
    add("divergence_backend_unknown", SPEC, edited("    backend: ort\n    cases: [\"x_much", "    backend: onnxrt\n    cases: [\"x_much"),
        "known_divergences[1].backend", "unknown backend")
    add("divergence_glob_matches_nothing", SPEC, edited('cases: ["x_much_smaller/*"]', 'cases: ["x_much_smallest/*"]'),
        "known_divergences[1].cases", "matches no case")

    # ---- waivers --------------------------------------------------------------------------------
    add("waiver_impossible_date", WAIVERS, waiver("2099-01-31", "2030-13-45"), "waivers[0].review_by", "2030-13-45")
    add("waiver_date_as_number", WAIVERS, waiver("2099-01-31", "20300101"), "waivers[0].review_by", "YYYY-MM-DD")
    add("waiver_date_words", WAIVERS, waiver("2099-01-31", "next spring"), "waivers[0].review_by", "YYYY-MM-DD")
    add("waiver_expired", WAIVERS, waiver("2099-01-31", "2020-01-31"), "review_by", "grace period", exit_run=None)
    add("waiver_reason_todo", WAIVERS, waiver("A corpus waiver that is well formed in every field.", '"TODO"'),
        "waivers[0].reason", "empty")
    add("waiver_kind_unknown", WAIVERS, waiver("kind: xfail", "kind: ignore"), "waivers[0].kind", "xfail")
    add("waiver_dtypes_empty", WAIVERS, waiver("dtypes: [float32]", "dtypes: []"), "waivers[0].match.dtypes",
        "at least 1")
    add("waiver_budget_inf", WAIVERS, waiver("kind: xfail", "kind: tolerance\n    budget_multiplier: .inf\n"
                                             "    observed_budget: 1.2").replace("    failure: wrong_values\n", ""),
        "waivers[0].budget_multiplier", "finite")
    add("waiver_backend_mismatch", WAIVERS, waiver("backend: ort", "backend: openmp"), "backend", "name it")
    add("waiver_unknown_op", WAIVERS, waiver("op: ReluGrad", "op: ReluGrd"), "waivers[0].match.op", "ReluGrad")
    add("waiver_glob_matches_nothing", WAIVERS, waiver('"basic/*"', '"basics/*"'), "waivers[0].match.cases",
        "matches no case")
    add("waiver_non_utf8", WAIVERS, b64(BASE_WAIVER.encode().replace(b"corpus waiver", b"corpus \xfe waiver")), "",
        "UTF-8")
    add("waiver_dangling_symlink", WAIVERS, {"special": "dangling_symlink"}, "", "does not exist")
    add("waiver_directory", WAIVERS, {"special": "directory"}, "", "regular file")
    add("waiver_nested", WAIVERS, "backend: ort\nwaivers: " + "[" * 3000 + "\n", "line 2", "nested")
    add("waiver_alias_bomb", WAIVERS, alias_chain(8) + "backend: ort\n", "line", "aliases")
    add("waivers_not_a_list", WAIVERS, "backend: ort\nwaivers: {id: ORT-0001}\n", "waivers", "list")
    add("waiver_id_spaces", WAIVERS, waiver("id: ORT-0001", "id: ORT 0001"), "waivers[0].id", "pattern")
    # ---- the training-op features: generators by kind, value ranges (the forward section's checks are in
    # tests/test_spec_format_features.py: their fixture's hooks take what those fields pass) ----
    add("generator_kind_unknown", SPEC, edited("dY: {distribution: normal, std: 1.0}", "dY: {kind: masks, keep: 0.5}"),
        "cases.inputs.dY", "kind")
    add("mask_keep_above_one", SPEC, edited("dY: {distribution: normal, std: 1.0}", "dY: {kind: mask, keep: 1.5}"),
        "cases.inputs.dY.mask.keep", "1")
    add("values_range_not_a_mapping", SPEC, edited("shape_from: dY, description: Relu's input",
                                                    "shape_from: dY, values: [0, 1], description: Relu's input"),
        "inputs[1].values", "valid")
    return v


def main() -> None:
    doc = {"generated_by": "tests/corpus/make_malformed.py", "base_waiver": BASE_WAIVER, "variants": variants()}
    names = [x["name"] for x in doc["variants"]]
    assert len(names) == len(set(names)), "variant names must be unique"
    (HERE / "malformed.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {len(names)} variants to {HERE / 'malformed.json'}")


if __name__ == "__main__":
    main()
