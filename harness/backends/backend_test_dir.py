"""One case as an ONNX backend-test directory, the layout of onnx's own backend tests:

    <case>/model.onnx                    the one-node model (harness.backends.onnx_model, bfloat16 native)
    <case>/test_data_set_0/input_K.pb    a TensorProto per graph input, K = its position
    <case>/test_data_set_0/output_K.pb   a TensorProto per graph output (expected, or written by a backend)

`opconform export-onnx` writes cases in it with the reference outputs; the command backend writes the
inputs and reads back the outputs its command wrote.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from harness.backends.base import Request
from harness.backends.onnx_model import build
from harness.core import dtypes, sequences
from harness.core.sequences import Value

DATASET = "test_data_set_0"


class MalformedOutput(ValueError):
    """An output file that is missing or is not a TensorProto."""


def to_tensor_proto(array: np.ndarray, name: str = "") -> onnx.TensorProto:
    """A TensorProto of the array; bfloat16 (ml_dtypes) as raw little-endian bits, which onnx before 1.19
    cannot convert (its own bfloat16 type is not ml_dtypes')."""
    if array.dtype != dtypes.NUMPY["bfloat16"]:
        return numpy_helper.from_array(array, name)
    tensor = onnx.TensorProto(name=name, data_type=onnx.TensorProto.BFLOAT16, dims=array.shape)
    tensor.raw_data = np.ascontiguousarray(array).view(np.uint16).astype("<u2").tobytes()
    return tensor


def from_tensor_proto(tensor: onnx.TensorProto) -> np.ndarray:
    """The tensor as a NumPy array, bfloat16 as ml_dtypes.bfloat16 whichever onnx release is installed
    (before 1.19 numpy_helper gives its own bfloat16 type, and reads int32_data only)."""
    if tensor.data_type != onnx.TensorProto.BFLOAT16:
        return numpy_helper.to_array(tensor)
    shape = tuple(tensor.dims)
    if tensor.HasField("raw_data"):
        bits = np.frombuffer(tensor.raw_data, dtype="<u2")
    else:  # one value per int32, its low 16 bits
        bits = np.array(tensor.int32_data, dtype=np.int64).astype(np.uint16)
    if bits.size != int(np.prod(shape)):
        raise ValueError(f"bfloat16 tensor {tensor.name!r} holds {bits.size} values for dims {list(shape)}")
    return bits.astype(np.uint16).view(dtypes.NUMPY["bfloat16"]).reshape(shape)


def numpy_dtype(elem_type: int) -> np.dtype:
    """The NumPy dtype of an ONNX element type, bfloat16 as ml_dtypes.bfloat16."""
    for name, code in dtypes.ONNX.items():
        if code == elem_type:
            return dtypes.NUMPY[name]
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))


def write_tensor(path: Path, array: np.ndarray | list, name: str) -> None:
    """A TensorProto file, or a SequenceProto of tensors for a sequence (a list, harness.core.sequences)."""
    if isinstance(array, list):  # a sequence
        proto = onnx.SequenceProto(name=name, elem_type=onnx.SequenceProto.TENSOR)
        proto.tensor_values.extend(to_tensor_proto(t) for t in array)
        path.write_bytes(proto.SerializeToString())
        return
    path.write_bytes(to_tensor_proto(array, name).SerializeToString())


def read_value(path: Path, sequence: bool) -> np.ndarray | list[np.ndarray]:
    """A TensorProto file as an array, or a SequenceProto file as a list of arrays."""
    if sequence:
        proto = onnx.SequenceProto()
        proto.ParseFromString(path.read_bytes())
        return [from_tensor_proto(t) for t in proto.tensor_values]
    tensor = onnx.TensorProto()
    tensor.ParseFromString(path.read_bytes())
    return from_tensor_proto(tensor)


def write_case(request: Request, directory: Path) -> onnx.ModelProto:
    """model.onnx and test_data_set_0/input_K.pb for the request; returns the model written."""
    model = onnx.load_from_string(build(request, bfloat16_as_float32=False).model)
    dataset = directory / DATASET
    dataset.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(directory / "model.onnx"))
    by_name = request.named_inputs()
    for k, graph_input in enumerate(model.graph.input):
        value = by_name[graph_input.name]
        if value is None:  # the model builder makes graph inputs of the given inputs only
            raise ValueError(f"graph input {graph_input.name} is an input the request leaves out")
        write_tensor(dataset / f"input_{k}.pb", value, graph_input.name)
    return model


def write_outputs(request: Request, model: onnx.ModelProto, directory: Path, values: dict[str, np.ndarray]) -> None:
    """test_data_set_0/output_K.pb from values by spec output name, in the output dtypes the spec declares."""
    spec = request.spec
    for k, graph_output in enumerate(model.graph.output):
        dtype = dtypes.NUMPY[spec.dtype_of(spec.output(graph_output.name), request.dtype)]
        with np.errstate(over="ignore"):  # a float64 reference beyond float16's range is inf there, as expected
            expected = sequences.astype(values[graph_output.name], dtype)
        write_tensor(directory / DATASET / f"output_{k}.pb", expected, graph_output.name)


def read_outputs(request: Request, model: onnx.ModelProto, directory: Path) -> list[Value | None]:
    """The outputs a backend wrote, in the spec's output order (None where not requested); MalformedOutput
    names the first file missing or unreadable."""
    found = {}
    for k, graph_output in enumerate(model.graph.output):
        path = directory / DATASET / f"output_{k}.pb"
        if not path.is_file():
            raise MalformedOutput(f"output_{k}.pb ({graph_output.name}) was not written")
        sequence = graph_output.type.HasField("sequence_type")
        try:
            found[graph_output.name] = read_value(path, sequence)
        except Exception as e:  # noqa: BLE001 - protobuf's DecodeError, or data that does not fit the dims
            raise MalformedOutput(f"output_{k}.pb is not a {'SequenceProto' if sequence else 'TensorProto'} ({type(e).__name__}: "
                                  f"{' '.join(str(e).split())[:200]})") from None
    return [found.get(out.name) if wanted else None for out, wanted in zip(request.spec.outputs, request.outputs)]
