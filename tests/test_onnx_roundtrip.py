"""export-onnx -> run-onnx round trips: unsupported cases are counted apart (not failed), a node in the
default domain spelled '' (as ONNX and every training graph write it) finds its ai.onnx spec, and
`export-onnx --backend B` writes only what B runs."""
import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from harness.backends.ort import OrtBackend
from harness.cli import main

OPS = "ReluGrad,MaxPoolGrad"  # ReluGrad: four dtypes, ORT has no float64 or bfloat16 kernel; MaxPoolGrad: ai.onnx
SUMMARY = re.compile(r"^(\d+) passed, (\d+) failed(?: \(([^)]*)\))?, (\d+) unsupported$")


@pytest.fixture(scope="module")
def ort_available():
    backend = OrtBackend()
    try:
        if reason := backend.availability():
            pytest.skip(reason)
    finally:
        backend.close()


def summary(out: str) -> tuple[int, int, int]:
    match = SUMMARY.match(out.strip().splitlines()[-1])
    assert match, out.strip().splitlines()[-1]
    return int(match[1]), int(match[2]), int(match[4])


def verdicts(out: str) -> dict[str, str]:
    """directory name -> the first word of its line."""
    found = {}
    for line in out.strip().splitlines()[:-1]:
        word, rest = line.split(" ", 1)
        found[rest.split("/", 1)[0]] = word
    return found


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "all"
    assert main(["export-onnx", str(out), "--ops", OPS, "--tier", "smoke"]) == 0
    dirs = sorted(out.iterdir())
    dtypes = {d.name.split("__")[1].split("-")[0] for d in dirs}
    assert dtypes == {"float32", "float64", "float16", "bfloat16"}  # the cases the test is about are there
    assert any(d.name.startswith("MaxPoolGrad__") for d in dirs)
    return dirs


def test_round_trip_passes_on_the_reference(exported, capsys):
    capsys.readouterr()
    assert main(["run-onnx", *map(str, exported), "--backend", "reference"]) == 0
    assert summary(capsys.readouterr().out) == (len(exported), 0, 0)


def test_round_trip_exits_0_on_ort_with_its_unsupported_dtypes_apart(exported, capsys, ort_available):
    capsys.readouterr()
    assert main(["run-onnx", *map(str, exported), "--backend", "ort"]) == 0
    out = capsys.readouterr().out
    passed, failed, unsupported = summary(out)
    assert failed == 0 and passed + unsupported == len(exported) and passed > 0 and unsupported > 0
    seen = verdicts(out)
    assert set(seen) == {d.name for d in exported}
    for name, word in seen.items():
        assert word in ("PASS", "UNSUPPORTED"), (name, word)
        if name.startswith("ReluGrad__bfloat16"):  # no bfloat16 kernel (ort-facts §4): never run, never passed
            assert word == "UNSUPPORTED", name
    assert all(w == "PASS" for n, w in seen.items() if "__float32-" in n)


def test_an_unsupported_case_does_not_hide_a_failure(exported, tmp_path, capsys, ort_available):
    """One wrong stored output among unsupported cases: exit 1, the failure counted, the unsupported apart."""
    import shutil

    bad = tmp_path / exported[0].parent.name
    shutil.copytree(exported[0].parent, bad)
    target = bad / next(d.name for d in exported if d.name.startswith("ReluGrad__float32-")) / "test_data_set_0"
    value = numpy_helper.to_array(onnx.load_tensor(str(target / "output_0.pb"))).copy()
    value.flat[0] += 1.0
    (target / "output_0.pb").write_bytes(numpy_helper.from_array(value, "dX").SerializeToString())
    capsys.readouterr()
    assert main(["run-onnx", *map(str, sorted(bad.iterdir())), "--backend", "ort"]) == 1
    passed, failed, unsupported = summary(capsys.readouterr().out)
    assert failed == 1 and unsupported > 0 and passed + failed + unsupported == len(exported)


def _max_pool_grad_dir(root, domain: str):
    """MaxPoolGrad as ORT's tests and its gradient builder write it: default domain, dX's shape declared."""
    rng = np.random.default_rng(3)
    x_shape, y_shape = (1, 2, 4, 4), (1, 2, 2, 2)
    # MaxPool 2x2 stride 2: one flat row-major index per window, the window's maximum picked at random
    indices = np.empty(y_shape, np.int64)
    for c in range(2):
        for i in range(2):
            for j in range(2):
                r, s = 2 * i + rng.integers(2), 2 * j + rng.integers(2)
                indices[0, c, i, j] = (c * 4 + r) * 4 + s
    dy = rng.normal(size=y_shape).astype(np.float32)
    dx = np.zeros(x_shape, np.float32)
    dx.reshape(-1)[indices.reshape(-1)] = dy.reshape(-1)  # windows do not overlap: each index once
    node = helper.make_node("MaxPoolGrad", ["dY", "Indices"], ["dX"], domain=domain,
                            kernel_shape=[2, 2], strides=[2, 2])
    graph = helper.make_graph([node], "max_pool_grad",
                              [helper.make_tensor_value_info("dY", TensorProto.FLOAT, list(y_shape)),
                               helper.make_tensor_value_info("Indices", TensorProto.INT64, list(y_shape))],
                              [helper.make_tensor_value_info("dX", TensorProto.FLOAT, list(x_shape))])
    model = helper.make_model(graph, ir_version=9, opset_imports=[helper.make_opsetid("", 17)])
    directory = root / f"max_pool_grad_{domain or 'default'}"
    (directory / "test_data_set_0").mkdir(parents=True)
    onnx.save(model, str(directory / "model.onnx"))
    for name, value in (("input_0", dy), ("input_1", indices), ("output_0", dx)):
        (directory / "test_data_set_0" / f"{name}.pb").write_bytes(numpy_helper.from_array(value).SerializeToString())
    return directory


@pytest.mark.parametrize("backend", ["reference", "ort"])
def test_max_pool_grad_in_the_default_domain_spelled_empty(tmp_path, capsys, backend):
    if backend == "ort":
        probe = OrtBackend()
        reason = probe.availability()
        probe.close()
        if reason:
            pytest.skip(reason)
    dirs = [_max_pool_grad_dir(tmp_path, ""), _max_pool_grad_dir(tmp_path, "ai.onnx")]
    assert main(["run-onnx", *map(str, dirs), "--backend", backend]) == 0
    out = capsys.readouterr().out
    assert "PASS max_pool_grad_default/test_data_set_0: dX max abs 0" in out
    assert summary(out) == (2, 0, 0)


def test_a_com_microsoft_op_in_the_default_domain_is_an_error_naming_its_domain(tmp_path, capsys):
    directory = _max_pool_grad_dir(tmp_path, "")
    model = onnx.load(str(directory / "model.onnx"))
    model.graph.node[0].op_type = "ReluGrad"
    onnx.save(model, str(directory / "model.onnx"))
    assert main(["run-onnx", str(directory), "--backend", "reference"]) == 1
    line = capsys.readouterr().out.splitlines()[0]
    assert line.startswith("ERROR ") and "unknown op 'ReluGrad' in domain '' (ai.onnx)" in line
    assert "ReluGrad is in 'com.microsoft'" in line


def test_export_for_a_backend_writes_only_what_it_runs(exported, tmp_path, capsys, ort_available):
    out = tmp_path / "for_ort"
    capsys.readouterr()
    assert main(["export-onnx", str(out), "--ops", OPS, "--tier", "smoke", "--backend", "ort"]) == 0
    printed = capsys.readouterr().out
    kept = sorted(out.iterdir())
    left_out = sorted({d.name for d in exported} - {d.name for d in kept})
    assert {d.name for d in kept} < {d.name for d in exported} and left_out
    assert f"wrote {len(kept)} test directories" in printed and "only what ort runs" in printed
    assert "ReluGrad bfloat16:" in printed and "left out: ort no_kernel" in printed
    # what was kept, ORT runs: nothing unsupported, everything passes
    assert main(["run-onnx", *map(str, kept), "--backend", "ort"]) == 0
    assert summary(capsys.readouterr().out) == (len(kept), 0, 0)
    # and what was left out, ORT does not run
    by_name = {d.name: d for d in exported}
    assert main(["run-onnx", *(str(by_name[n]) for n in left_out), "--backend", "ort"]) == 0
    assert summary(capsys.readouterr().out) == (0, 0, len(left_out))


def test_export_for_the_reference_keeps_every_valid_case(exported, tmp_path, capsys):
    out = tmp_path / "for_reference"
    assert main(["export-onnx", str(out), "--ops", OPS, "--tier", "smoke", "--backend", "reference"]) == 0
    assert sorted(d.name for d in out.iterdir()) == sorted(d.name for d in exported)


def test_export_for_openmp_leaves_out_its_missing_max_pool_grad_float16(tmp_path, capsys):
    from harness.backends.openmp import OpenmpBackend

    backend = OpenmpBackend()
    reason = backend.availability()
    backend.close()
    if reason:
        pytest.skip(reason)
    out = tmp_path / "for_openmp"
    args = ["export-onnx", str(out), "--ops", "MaxPoolGrad", "--tier", "ci"]
    assert main([*args, "--backend", "openmp"]) == 0
    printed = capsys.readouterr().out
    assert "MaxPoolGrad float16:" in printed and "left out: openmp" in printed
    names = [d.name for d in out.iterdir()]
    assert names and not any("float16" in n for n in names)


def test_export_for_an_unknown_backend_is_a_usage_error(tmp_path, capsys):
    assert main(["export-onnx", str(tmp_path / "x"), "--ops", "ReluGrad", "--backend", "ortt"]) == 2
    assert "unknown backend 'ortt'" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_bfloat16_tensors_keep_their_bits_whichever_onnx_is_installed():
    """onnx < 1.19 cannot convert ml_dtypes.bfloat16 and reads bfloat16 from int32_data only: the harness
    writes raw little-endian bits and reads both layouts back as ml_dtypes.bfloat16."""
    import ml_dtypes

    from harness.backends.backend_test_dir import from_tensor_proto, numpy_dtype, to_tensor_proto

    bits = np.array([[0x3F80, 0xC000, 0x7F80], [0xFF80, 0x7FC1, 0x0001]], np.uint16)  # 1, -2, inf, -inf, NaN, subnormal
    value = bits.view(ml_dtypes.bfloat16)
    tensor = to_tensor_proto(value, "x")
    assert tensor.data_type == TensorProto.BFLOAT16 and list(tensor.dims) == [2, 3]
    back = from_tensor_proto(onnx.load_tensor_from_string(tensor.SerializeToString()))
    assert back.dtype == ml_dtypes.bfloat16 and back.shape == (2, 3)
    np.testing.assert_array_equal(back.view(np.uint16), bits)
    as_int32 = TensorProto(name="y", data_type=TensorProto.BFLOAT16, dims=[2, 3])
    as_int32.int32_data.extend(bits.ravel().tolist())  # the other layout ONNX allows: one value per int32
    np.testing.assert_array_equal(from_tensor_proto(as_int32).view(np.uint16), bits)
    assert numpy_dtype(TensorProto.BFLOAT16) == ml_dtypes.bfloat16 and numpy_dtype(TensorProto.FLOAT) == np.float32
    short = to_tensor_proto(value, "z")
    short.raw_data = short.raw_data[:-2]
    with pytest.raises(ValueError, match="holds 5 values for dims"):
        from_tensor_proto(short)
