"""The spec format: one pydantic model per YAML section. Field descriptions double as the fix hints
that `opconform validate` prints, so keep them short and imperative."""
from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator

from harness.spec.vocabulary import DType, FloatDType, GroupTag, Tier

# kernel: the spec's op is one node a backend runs; training_graph: the op is the gradient ORT's gradient builder
# writes for the forward op (standard ops, no gradient kernel of its own), judged through ort-autograd.
Subject = Literal["kernel", "training_graph"]
Role = Literal["grad_output", "forward_input", "forward_output", "saved_activation"]
Identifier = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
                                  description="a name made of letters, digits and _")]
Dotted = Annotated[str, Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$",
                              description="a Python function as module.path:function")]
GroupName = Annotated[str, Field(pattern=r"^[a-z0-9_]+$", description="lower_case_with_underscores")]
# Special values are dtype-aware names or plain YAML floats (.nan, .inf, -.inf, -0.0 work too).
SpecialName = Literal["nan", "inf", "-inf", "-0.0", "max", "-max", "tiny", "-tiny", "subnormal", "-subnormal"]
Value = Union[Annotated[float, Field(allow_inf_nan=True)], SpecialName]
NonNegative = Annotated[int, Field(ge=0)]


class Section(BaseModel):
    # Non-finite numbers only where a field says so (special values): `atol: .inf` or `mean: .nan`
    # would pass every check and break the run.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, use_attribute_docstrings=True,
                              defer_build=True)


class TypeConstraint(Section):
    types: list[DType] = Field(min_length=1, description="the dtypes this type variable may take")
    sequence: bool = Field(False, description="true: its tensors are sequences of tensors of these types (ONNX's "
                           "seq(tensor(T)), e.g. AdamWOptimizer's parameter list): a value is a list of tensors, a "
                           "shape a list of shapes", examples=[True])
    description: str = ""
    """what the tensors of this type are, e.g. `description: Floating-point tensors.`"""


class Range(Section):
    min: int = Field(0, ge=0)
    """the smallest rank, e.g. `min: 1`"""
    max: int = Field(8, ge=0)
    """the largest rank, e.g. `max: 8`"""


class ValueRange(Section):
    """The values an input may hold (e.g. Dropout's ratio in [0, 1)); any element outside makes the case invalid."""
    min: float | None = Field(None, description="the smallest valid value, e.g. `min: 0`")
    max: float | None = Field(None, description="the largest valid value, e.g. `max: 1`")
    min_exclusive: bool = Field(False, description="true: min itself is invalid, e.g. `min_exclusive: true`")
    max_exclusive: bool = Field(False, description="true: max itself is invalid, e.g. `max_exclusive: true`")


class Input(Section):
    name: Identifier
    type: str = Field(description="a type variable from type_constraints, e.g. T")
    role: Role = Field(description="grad_output, forward_input, forward_output or saved_activation")
    optional: bool = False
    """true when the op accepts the input left out, e.g. `optional: true`"""
    description: str = ""
    """what the input holds, e.g. `description: Relu's input.`"""
    grad_of: str | None = Field(None, description="for a grad_output: the forward output it is the gradient of")
    forward_name: str | None = Field(None, description="the forward tensor this input holds, if named differently")
    shape_from: str | None = Field(None, description="the input whose shape this one must equal")
    shape_fn: Dotted | None = Field(None, description="module:function(shapes, params) giving the required shape")
    shape: list[NonNegative] | None = Field(None, description="a fixed shape, e.g. [] for a scalar or [2] for a "
                                            "2-element tensor", examples=[[], [2]])
    values: ValueRange | None = Field(None, description="the values the op accepts; a valid group drawing others is "
                                      "a spec error, an invalid group may plant them",
                                      examples=[{"min": 0, "max": 1, "max_exclusive": True}])
    rank: Range | None = None
    """the ranks the op accepts, e.g. `rank: {min: 1, max: 8}`"""


class Output(Section):
    name: Identifier
    type: str = Field(description="a type variable from type_constraints, e.g. T")
    optional: bool = False
    """true when the output may be left unrequested, e.g. `optional: true`"""
    description: str = ""
    """what the output holds, e.g. `description: Gradient with respect to X.`"""
    grad_of: str | None = Field(None, description="the forward input this output is the gradient of")
    shape_from: str | None = Field(None, description="the input whose shape this output has; a forward input the op "
                                   "does not take (MaxPoolGrad's X) means the model declares the output's shape: "
                                   "backends and hooks get it as `<output>_shape` beside the attributes, never on the node")


class Attribute(Section):
    type: Literal["int", "float", "string", "ints", "floats", "strings"]
    """the ONNX attribute type, e.g. `type: int`"""
    default: Any = None
    """the value when the node does not write it, e.g. `default: -1`"""
    required: bool = False
    """true when the op has no default, e.g. `required: true`"""
    min: float | None = None
    """the smallest valid value, e.g. `min: 0`"""
    max: float | None = None
    """the largest valid value, e.g. `max: 1`"""
    allowed: list[Any] | None = Field(None, min_length=1, description="the only values allowed")
    axis_of: str | None = Field(None, description="the input this attribute is an axis of: [-rank, rank)")
    copied_by_builder: bool = Field(False, description="true: ORT's gradient builder copies it onto the node from the "
                                    "forward op (MaxPoolGrad gets MaxPool's kernel_shape) and the op does not read it: "
                                    "backends take it, the reference never sees it")
    description: str = ""
    """what the attribute means, e.g. `description: The axis to normalize over.`"""


class ShapeRule(Section):
    """The shape of a forward input the gradient op does not take (e.g. LayerNormalization's bias): exactly one
    of shape_from (an op input or another forward input), shape_fn or shape."""
    shape_from: str | None = Field(None, description="the op input or forward input whose shape this one equals",
                                   examples=["dY"])
    shape_fn: Dotted | None = Field(None, description="module:function(shapes, params) giving the shape; shapes "
                                    "holds the op inputs' shapes", examples=["reference.ops.batch_norm_grad:channel_shape"])
    shape: list[NonNegative] | None = Field(None, description="a fixed shape, [] for a scalar", examples=[[]])


class Forward(Section):
    op: str = Field(description="the forward op's name, e.g. Relu")
    domain: str = Field("", description="'' for ai.onnx, or com.microsoft")
    opset: int | None = Field(None, ge=1, le=21, description="the version of the forward op's domain the spec "
                              "differentiates (Softmax before 13 normalises 2-D coerced rows, from 13 one axis); "
                              "default: the newest the oracle's model builder writes (ai.onnx 17, com.microsoft 1)",
                              examples=[13])
    reference: Dotted
    inputs: list[Identifier] = Field(min_length=1)
    """the forward op's inputs, named as its reference's parameters, e.g. `inputs: [X, Scale, B]`"""
    outputs: list[Identifier] = Field(min_length=1)
    """the forward op's outputs in the order its reference returns them, e.g. `outputs: [Y, mean, inv_std_var]`"""
    attributes: list[str] = Field([], description="the spec attributes the forward op takes too")
    own_attributes: dict[Identifier, Attribute] = Field(
        {}, description="attributes only the forward op takes (e.g. LayerNormalization's epsilon): group params "
        "may set them; they reach the forward reference and the gradient check, never the gradient node",
        examples=[{"epsilon": {"type": "float", "default": 1e-5}}])
    draws: list[Identifier] = Field(
        [], description="forward inputs that stand for the forward op's own random draw (Dropout's mask): the "
        "forward reference takes them so that cases are deterministic, but the forward node does not; ort-autograd "
        "builds the node with a seed, fetches its output of that name and judges with that draw", examples=[["mask"]])
    shapes: dict[Identifier, ShapeRule] = Field(
        {}, description="shape rules of the forward inputs the gradient op does not take (unless cases.shapes "
        "gives them)", examples=[{"X": {"shape_from": "dY"}}, {"B": {"shape_fn": "reference.ops.batch_norm_grad:channel_shape"}}])
    optional_outputs: list[Identifier] = Field(
        [], description="forward outputs an exporter may leave off the node (LayerNormalization's Mean and "
        "InvStdDev): a group's `export: {outputs: required}` builds the forward node without them",
        examples=[["mean", "inv_std_var"]])
    derivative: Dotted | None = Field(
        None, description="where the op's contract is not the forward op's derivative (groups marked "
        "derivative_differs): module:function(incoming gradients, forward inputs, attributes) -> the spec's outputs "
        "as the true vector-Jacobian product, that ort-autograd is judged by there",
        examples=["reference.ops.activations:leaky_relu_derivative"])


class Tolerance(Section):
    atol: float = Field(ge=0)
    """absolute tolerance, e.g. `atol: 1e-3`"""
    rtol: float = Field(ge=0)
    """relative tolerance, e.g. `rtol: 1e-2`"""
    reason: str = Field(min_length=10, description="why this dtype needs other tolerances than the defaults")


class Accuracy(Section):
    """Error that grows with the reduction length: allowance = factor * u(acc) * sqrt(K) * magnitude."""
    reduction_length: Dotted = Field(description="module:function(inputs..., attributes...) -> K, or a tuple with one K per output")
    magnitude: Dotted | None = Field(None, description="module:function like the reference, on |terms|; default |expected|")
    accumulate: dict[FloatDType, FloatDType] = Field({}, description="dtype a kernel may accumulate in, e.g. {float16: float32}")
    factor: float = Field(1.0, gt=0, description="multiplies the allowance; state the reason in a comment when not 1")


class Generator(Section):
    """How the values of one tensor are drawn (in float64, then rounded to the case dtype); integer and bool
    tensors take literal `values` or one of the kinds mask, labels, indices, shape_of."""
    kind: Literal["float"] = Field("float", description="float (the default) draws real numbers; see mask, labels, "
                                   "indices, shape_of for bool and integer tensors")
    distribution: Literal["normal", "uniform"] = "normal"
    """normal or uniform, e.g. `distribution: uniform`"""
    mean: float = 0.0
    """the normal distribution's mean, e.g. `mean: 0.5`"""
    std: float = Field(1.0, ge=0)
    """the normal distribution's standard deviation, e.g. `std: 3`"""
    low: float = -1.0
    """the uniform distribution's low end, e.g. `low: -8`"""
    high: float = 1.0
    """the uniform distribution's high end, e.g. `high: 8`"""
    special: list[Value] = Field([], description="values planted among the drawn ones")
    fraction: float = Field(0.25, gt=0, le=1, description="share of elements replaced by special values")
    values: list[Value] | None = Field(None, min_length=1, description="literal values, repeated to fill the tensor")


# A bound an integer generator reads: an int, a case param's name, or `input:axis` (that input's dimension; the
# input may be a forward input, the axis an int or the name of an attribute or case param, e.g. `X:axis`).
Bound = Union[int, Annotated[str, Field(pattern=r"^[A-Za-z_]\w*(:(-?\d+|[A-Za-z_]\w*))?$")]]


class MaskGenerator(Section):
    """A bool mask (e.g. Dropout's): each element is true with probability `keep`."""
    kind: Literal["mask"]
    """write mask, e.g. `{kind: mask, keep: 0.9}`"""
    keep: float = Field(0.5, ge=0, le=1, description="the probability of true (kept)", examples=[0.9])


class LabelsGenerator(Section):
    """Class labels in [0, classes), some set to ignore_index (e.g. SoftmaxCrossEntropyLoss's labels)."""
    kind: Literal["labels"]
    """write labels, e.g. `{kind: labels, classes: \"scores:1\", ignore_index: -100}`"""
    classes: Bound = Field(description="the number of classes: an int, a case param, or input:axis",
                           examples=["scores:1", "num_classes", 10])
    ignore_index: int | None = Field(None, description="a label value planted among the drawn ones", examples=[-100])
    ignore_fraction: float = Field(0.1, ge=0, le=1, description="share of elements set to ignore_index")


class IndicesGenerator(Section):
    """Indices into a dimension, in range and, on request, out of range (e.g. GatherGrad's indices)."""
    kind: Literal["indices"]
    """write indices, e.g. `{kind: indices, dim: \"X:0\", negative: true, out_of_range: 0.1}`"""
    dim: Bound | None = Field(None, description="the size indexed: an int, a case param, or input:axis (an op or "
                              "forward input; the axis an int, or an attribute or case param: `X:axis`); valid "
                              "indices are [0, dim), and [-dim, 0) too with negative", examples=["shape:0", "X:axis"])
    range: tuple[int, int] | None = Field(None, description="[low, high): the valid indices, instead of dim",
                                          examples=[[0, 10]])
    negative: bool = Field(False, description="draw valid negative indices too ([-dim, 0))")
    out_of_range: float = Field(0.0, ge=0, le=1, description="share of elements outside the valid indices")


class ShapeOfGenerator(Section):
    """The shape of another tensor as integer values (e.g. GatherGrad's `shape` input: the forward data's shape)."""
    kind: Literal["shape_of"]
    """write shape_of, e.g. `{kind: shape_of, of: X}`; the input's own shape rule must give it rank(X) elements"""
    of: Identifier = Field(description="the op input or forward input whose shape these values are", examples=["X"])


def _generator_kind(value) -> str:
    return value.get("kind", "float") if isinstance(value, dict) else getattr(value, "kind", "float")


AnyGenerator = Annotated[Union[Annotated[Generator, Tag("float")], Annotated[MaskGenerator, Tag("mask")],
                               Annotated[LabelsGenerator, Tag("labels")], Annotated[IndicesGenerator, Tag("indices")],
                               Annotated[ShapeOfGenerator, Tag("shape_of")]],
                         Discriminator(_generator_kind)]


AxisName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]


class Export(Section):
    """How ort-autograd writes the forward graph of a group's cases, as an exporter does (torch.onnx.export):
    kernel specs with a forward op and training-graph specs use it alike. Gradients asked for a subset of the
    forward inputs are the `outputs` case param; forward outputs given no incoming gradient, an `omit` of
    their optional grad_output."""
    dynamic_axes: Literal["all"] | dict[Identifier, dict[int, AxisName | None]] | None = Field(
        None, description="forward input -> {axis: name} as torch.onnx.export's dynamic_axes writes them (a null "
        "name: an unknown dimension); all: every axis of every forward input named <input>_<axis>. The incoming "
        "gradients are then declared with unknown dimensions too", examples=["all", {"X": {0: "batch", 1: "seq"}}])
    outputs: Literal["all", "required"] = Field(
        "all", description="required: the forward node writes only the outputs an exporter writes (leaving off "
        "forward.optional_outputs), as transformers' opset-17 LayerNormalization does")
    opset: int | None = Field(None, ge=1, le=21, description="the forward op's domain version of the exported model "
                              "(torch 2.13 writes ai.onnx 20 by default), instead of forward.opset: the node is the "
                              "op's version current there", examples=[20])
    constants: list[Identifier] = Field(
        [], description="forward inputs written as initializers, as exporters write the shapes, axes, pads and "
        "repeats they fold to constants: the builder sees their values (and may take static paths) and they get "
        "no gradient", examples=[["shape"]])


class Group(Section):
    name: GroupName
    description: str = ""
    """what the group covers, e.g. `description: Values near the kink at 0.`"""
    tier: Tier = Field("ci", description="the smallest tier that runs this group: smoke, ci or nightly")
    dtypes: list[DType] | None = Field(None, min_length=1, description="defaults to cases.dtypes; leave it out "
                                       "rather than write []")
    params: dict[str, Annotated[list[Any], Field(min_length=1)]] = Field(
        {}, description="each key maps to a non-empty list of values; cases are their product")
    inputs: dict[str, AnyGenerator] = Field({}, description="generators by input name, overriding cases.inputs",
                                            examples=[{"mask": {"kind": "mask", "keep": 0.9}}])
    vjp: bool | str = Field(True, description="false-like: write the reason the VJP identity does not apply")
    timeout: float | None = Field(None, gt=0, description="seconds a backend may take on one of these cases before "
                                  "it counts as a hang; shortens the run's --timeout (for inputs known to hang)")
    tags: list[GroupTag] = Field([], description="what the group is for beyond its cases: thread_split marks shapes that "
                                 "cross the C kernels' work splits (tests/openmp/test_omp_threads.py runs them at 1-4 "
                                 "threads)", examples=[["thread_split"]])
    export: Export | None = Field(None, description="ort-autograd builds these cases' forward graph as an exporter "
                                  "writes it: dynamic axes, required outputs only", examples=[{"dynamic_axes": "all"}])
    derivative_differs: str | None = Field(
        None, min_length=10, description="why the op's contract is not the forward op's derivative here (LeakyReluGrad "
        "selects on Y, which differs from d/dX for alpha < 0): ort-autograd is judged by forward.derivative instead, "
        "since a training graph must compute the derivative")


class InvalidGroup(Group):
    why: str = Field(min_length=5, description="what makes these inputs invalid")
    shapes: dict[str, list[NonNegative] | list[list[NonNegative]]] = Field(
        {}, description="input shapes that override the generated ones, lists of non-negative ints (a list of such "
        "lists for a sequence input)")
    attributes: dict[str, Any] = Field({}, description="attribute values written as-is, even out of range")
    vjp: bool | str = False
    """invalid cases have no gradient check: false"""


BenchSizeName = Annotated[str, Field(pattern=r"^(small|medium|large)(-[a-z0-9]+)?$",
                                     description="small, medium or large, a suffix naming a variant: large-3d")]


class BenchSize(Section):
    """One benchmark size: a case built from these params by the same machinery as a group's cases, so that
    its inputs pass the same valid_if and value contracts."""
    label: str = Field(min_length=1, description="the shape as the bench table shows it", examples=["64x128 axis -1"])
    params: dict[str, Any] = Field(description="one value per case param (a group's params, each without its list)",
                                   examples=[{"shape": [4096]}])
    inputs: dict[str, AnyGenerator] = Field({}, description="generators by input name, over bench.inputs and "
                                            "cases.inputs", examples=[{"ratio": {"values": [0.1]}}])


class Bench(Section):
    """What `opconform bench` times: named sizes, the bytes or floating-point operations of one call, and the
    torch peer. The hooks live at the end of the op's reference module."""
    sizes: dict[BenchSizeName, BenchSize] = Field(min_length=1, description="the sizes by name",
                                                  examples=[{"small": {"label": "4096", "params": {"shape": [4096]}}}])
    inputs: dict[str, AnyGenerator] = Field({}, description="generators by input name for every size, over "
                                            "cases.inputs", examples=[{"mask": {"kind": "mask", "keep": 0.9}}])
    bytes: Dotted | None = Field(None, description="module:function(shapes, attributes[, params]) -> the memory "
                                 "traffic of one call with float32 data (memory-bound ops; give bytes or flops)",
                                 examples=["reference.ops.activations:bench_bytes"])
    fixed_bytes: Dotted | None = Field(None, description="module:function(shapes, attributes[, params]) -> the part "
                                       "of bytes whatever the float type (indices, masks)")
    flops: Dotted | None = Field(None, description="module:function(shapes, attributes[, params]) -> the "
                                 "floating-point operations of one call (compute-bound ops; give bytes or flops)")
    torch: Dotted | None = Field(None, description="module:function(inputs, attributes[, params]) -> a zero-argument call of "
                                 "torch's kernel on the op's inputs (numpy, ONNX order); import torch inside it")


class Cases(Section):
    seed: int = 0
    """mixed into every case's seed; change it to draw other values, e.g. `seed: 0`"""
    dtypes: list[DType] = Field(min_length=1, description="the dtypes a group runs in unless it says otherwise")
    inputs: dict[str, AnyGenerator] = Field({}, description="default generators by op input or forward input name",
                                            examples=[{"X": {"distribution": "uniform", "low": -3, "high": 3}},
                                                      {"labels": {"kind": "labels", "classes": "scores:1",
                                                                  "ignore_index": -100}}])
    params: dict[str, str] = Field({}, description="extra case parameters for hooks: name -> meaning")
    shapes: Dotted | None = Field(None, description="module:function(params) -> {input: shape}")
    from_node: Dotted | None = Field(
        None, description="module:function(node) -> case params: the params that rebuild one configuration of a real "
        "graph's node (harness.model.node.NodeConfig: shapes, constant values, attributes, outputs); `opconform model` "
        "checks the rebuilt shapes against the node's. Leave it out when a `shape` param (the first grad_output's "
        "shape) or params named after the inputs rebuild every configuration", examples=["reference.ops.conv_grad:from_node"])
    groups: list[Group] = Field(min_length=1)
    """the valid groups of cases, e.g. `groups: [{name: basic, params: {shape: [[2, 3]]}}]`"""
    invalid: list[InvalidGroup] = []
    """groups of inputs every backend must reject, e.g. `invalid: [{name: bad_axis, why: axis out of range, params: {shape: [[2, 3]]}, attributes: {axis: 5}}]`"""  # noqa: E501 - one line in docs/spec-fields.md


# unsupported: the backend cannot run valid inputs it is not meant to (reported unsupported); rejects_valid: it
# refuses inputs it should run, a defect (a gradient builder refusing a valid model; reported divergent).
DivergenceResult = Literal["wrong_values", "crash", "hang", "accepts_invalid", "unsupported", "rejects_valid"]


class Intermittent(Section):
    """A divergence that shows in some runs only (ORT leaves an output buffer unwritten, so it holds whatever the
    memory held): a covered case that passes is rerun on the same backend up to `reruns` times, each rerun asking
    for its outputs in buffers filled with NaN beforehand (Request.poison_outputs); the first rerun
    that shows the divergence makes the case divergent (a failure it does not explain fails), and only a case that
    passes every run leaves the declaration unreproduced (stale when no covered case reproduced it). The outputs
    it names are not held bitwise repeatable on that backend (output_subset, thread_invariance); other backends
    are held to them as before."""
    reruns: int = Field(ge=1, le=100, description="how many more runs a passing covered case gets (at most 1 + "
                        "reruns runs): enough that the divergence shows at least once, e.g. `reruns: 10`")


class Divergence(Section):
    id: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]*$")]
    """a short lowercase id, e.g. `id: ort-float64-in-float32`"""
    backend: str
    """the backend that diverges, e.g. `backend: ort`"""
    cases: list[str] = Field(min_length=1, description="globs over case ids, e.g. 'infinities/*'")
    dtypes: list[DType] | None = Field(None, min_length=1, description="the dtypes covered; leave it out for all")
    outputs: list[str] | None = Field(None, min_length=1, description="the outputs affected; leave it out for all")
    result: DivergenceResult | list[DivergenceResult] = Field(
        description="wrong_values, crash, hang, accepts_invalid, unsupported (cannot run it, by design) or "
                    "rejects_valid (refuses it: a defect); a list when the backend's "
                    "behaviour depends on memory layout (an out-of-bounds read may crash or return garbage)")
    summary: str = Field(min_length=10, description="one line: what the backend does instead of the math")
    evidence: str = Field(min_length=10, description="what was run, what came back, which version, when")
    links: list[str] = []
    """issues or sources that show the divergence, e.g. `links: [https://github.com/microsoft/onnxruntime/issues/1]`"""
    intermittent: Intermittent | None = Field(
        None, description="the divergence shows in some runs only (an output ORT leaves uninitialised): rerun a "
        "passing covered case up to `reruns` times before calling the declaration unreproduced; leave it out for "
        "one that shows every run", examples=[{"reruns": 10}])

    @model_validator(mode="after")
    def _intermittent_shows_in_a_run(self):
        if self.intermittent is not None and self.results == ["unsupported"]:
            raise ValueError("intermittent: an unsupported dtype or feature is so in every run: leave it out")
        return self

    @property
    def results(self) -> list[DivergenceResult]:
        return self.result if isinstance(self.result, list) else [self.result]


# Tried for every op when a diagnosis runs (harness.run.diagnose), besides the spec's own alternatives.
BUILTIN_TRANSFORMS = ("output transposed", "output negated", "first two inputs swapped")


class Alternative(Section):
    """A plausible wrong semantics: a failing output is scored against it to say what the kernel computes."""
    name: str = Field(min_length=3, description="what a match means, e.g. 'legacy SoftmaxGrad axis semantics'")
    reference: Dotted = Field(description="module:function taking the reference's inputs and attributes")
    description: str = ""
    """where such semantics come from, e.g. `description: opset < 13 softmax coerces to 2-D.`"""


class OwnSavedState(Section):
    """A second check: the saved activations come from the same backend's run of the forward-with-state op
    (GRUGrad fed the HAll and ZRH of the backend's own GRUTraining), which catches a saved-state layout the
    two kernels disagree on. The other inputs and the attributes are passed by name."""
    op: Identifier = Field(description="the op (same domain) whose outputs feed the saved inputs, e.g. GRUTraining")
    outputs: dict[Identifier, Identifier] = Field(min_length=1, description="this op's input -> that op's output, e.g. {ZRH: ZRH}")
    cases: list[str] = Field(["*"], min_length=1, description="globs over the valid case ids it runs on")


class State(Section):
    """An op whose outputs feed its next call (an optimizer, an accumulator): a case with the param `steps: N` runs
    N calls, feeding each call the carried outputs of the one before (the backend its own, the reference its
    float64 ones), and judges every call against the float64 reference trajectory, call k within the one-call
    tolerances of calls 1..k summed element by element (harness.run.engine.carried_allowance)."""
    carry: dict[Identifier, Identifier] = Field(min_length=1, description="output -> the input it becomes at the "
                                                "next call, e.g. {updated_weights: weights}")
    advance: dict[Identifier, int] = Field({}, description="input -> added to it at each call (a step counter the "
                                           "training loop increments), e.g. {step: 1}")
    redraw: list[Identifier] = Field([], description="inputs drawn afresh for each call (each step's gradients), "
                                     "from the input's generator with a stream of their own per call")
    error_model: str = Field(min_length=20, description="why call k may err by the one-call tolerances of calls 1..k "
                             "summed (each call rounds once relative to its own values and carries the earlier "
                             "errors on, not amplified): say what keeps them from growing faster")


class Spec(Section):
    schema_version: Literal[1]
    """the spec format's version; write 1, e.g. `schema_version: 1`"""
    op: Identifier
    domain: str = "com.microsoft"
    """the op's domain, e.g. `domain: com.microsoft` ('' for ai.onnx)"""
    since_version: int = Field(1, ge=1)
    """the opset version of the op's schema, e.g. `since_version: 1`"""
    onnx_opset: int | None = Field(None, ge=7, le=17, description="the ai.onnx opset the one-node model of the op "
                                   "imports: a com.microsoft op ORT runs as a function body written for an older "
                                   "opset runs only there (NegativeLogLikelihoodLossInternal: Unsqueeze with an axes "
                                   "attribute, ai.onnx 12); default: 17, the newest onnxruntime-training 1.19.2 reads",
                                   examples=[12])
    subject: Subject = Field("kernel", description="kernel: one op's node, run by every backend; training_graph: the "
                             "gradient ORT's builder writes for the forward op (named <ForwardOp>Gradient), run by "
                             "reference and ort-autograd (and plugins that declare it)", examples=["training_graph"])
    summary: str = Field(min_length=10)
    """one sentence on what the op computes, e.g. `summary: Gradient of Relu with respect to its input.`"""
    description: str = ""
    """anything a reader needs beyond the summary: conventions, shapes, edge cases"""
    formula: str
    """the math, e.g. `formula: \"dX = dY * (X > 0)\"`"""
    references: list[str] = []
    """links to the schema and kernel sources, e.g. `references: [https://github.com/microsoft/onnxruntime/...]`"""
    forward: Forward | None = None
    """the forward op this op is the gradient of, e.g. `forward: {op: Relu, reference: \"reference.forward.activations:relu\", inputs: [X], outputs: [Y]}`"""  # noqa: E501 - one line in docs/spec-fields.md
    type_constraints: dict[str, TypeConstraint] = Field(min_length=1)
    """type variables and their dtypes, e.g. `type_constraints: {T: {types: [float32, float64]}, TMask: {types: [bool]}}`"""
    inputs: list[Input] = Field(min_length=1)
    """the op's inputs in schema order, e.g. `inputs: [{name: dY, type: T, role: grad_output, grad_of: Y}]`"""
    outputs: list[Output] = Field(min_length=1)
    """the op's outputs in schema order, e.g. `outputs: [{name: dX, type: T, shape_from: X, grad_of: X}]`"""
    case_type: str | None = Field(None, description="the type variable the case dtype names where the default (the first "
                                  "grad_output's, else the first input's) takes one type only: SGDOptimizer's ETA is "
                                  "float32 whatever the weights' type", examples=["T"])
    attributes: dict[Identifier, Attribute] = {}
    """the op's attributes by name, e.g. `attributes: {axis: {type: int, default: -1, axis_of: X}}`"""
    reference: Dotted = Field(description="the NumPy reference, module.path:function")
    valid_if: Dotted | None = Field(None, description="module:function(shapes, attributes) -> problem or None")
    valid_values: Dotted | None = Field(None, description="module:function(inputs, attributes) -> problem or None, "
                                        "for validity that reads input values", examples=["reference.ops.dropout:check"])
    tolerances: dict[FloatDType, Tolerance] = {}
    """per-dtype atol/rtol replacing the defaults, e.g. `tolerances: {float16: {atol: 1e-3, rtol: 1e-2, reason: ...}}`"""
    accuracy: Accuracy | None = Field(None, description="for reductions: an error term that grows with their length")
    cases: Cases
    """the inputs to test: dtypes, generators, groups of params, invalid groups"""
    known_divergences: list[Divergence] = []
    """backends' documented departures from the spec, with evidence (see Divergence)"""
    state: State | None = Field(None, description="for ops whose outputs feed their next call: what is carried, "
                                "advanced and redrawn between calls of a case with `steps: N`")
    own_saved_state: OwnSavedState | None = Field(None, description="feed saved activations from the backend's own "
                                                  "forward-with-state op as a second check")
    alternative_semantics: list[Alternative] = Field([], description="wrong semantics a failure is diagnosed "
                                                    "against (built-ins always tried: " + ", ".join(BUILTIN_TRANSFORMS) + ")")
    bench: Bench | None = Field(None, description="the sizes, cost and torch peer `opconform bench` times this op "
                                "with; leave it out for no benchmark")

    @property
    def id(self) -> str:
        return f"{self.domain}::{self.op}@{self.since_version}"

    def input(self, name: str) -> Input:
        return next(i for i in self.inputs if i.name == name)

    def output(self, name: str) -> Output:
        return next(o for o in self.outputs if o.name == name)

    @property
    def main_type(self) -> str:
        """The type variable the case dtype names: the first grad_output's (dY; GatherGrad's inputs start with
        the int64 shape), else the first input's; `case_type` when the spec names one."""
        if self.case_type:
            return self.case_type
        return next((i for i in self.inputs if i.role == "grad_output"), self.inputs[0]).type

    def declared_shapes(self) -> dict[str, str]:
        """`<output>_shape` -> forward input, for outputs the op cannot size from its inputs (shape_from names a
        forward input it does not take): the model declares their shape, as ORT's pool gradients require."""
        taken = {i.name for i in self.inputs}
        return {declared_shape_key(o.name): o.shape_from for o in self.outputs if o.shape_from and o.shape_from not in taken}

    def is_sequence(self, tensor: Input | Output) -> bool:
        """Whether the input or output is a sequence of tensors (its type variable's `sequence`)."""
        constraint = self.type_constraints.get(tensor.type)
        return constraint is not None and constraint.sequence

    def dtype_of(self, tensor: Input | Output, case_dtype: str) -> str:
        """The case dtype binds every type variable that allows it; others take their only type."""
        types = self.type_constraints[tensor.type].types
        return case_dtype if case_dtype in types else types[0]


def declared_shape_key(output: str) -> str:
    """The name under which an output's model-declared shape travels with the attributes (never written on the node)."""
    return f"{output}_shape"


class Overlay(Section):
    """A team's case groups for an op whose spec is in another directory (`<domain>/<Op>.overlay.yaml` in a
    directory given with --specs): its groups run after the spec's own, judged by the spec's contract."""
    extends: Identifier = Field(description="the op whose spec these groups extend; the file is named <Op>.overlay.yaml")
    groups: list[Group] = Field([], description="valid groups added to the spec's cases.groups")
    invalid: list[InvalidGroup] = Field([], description="invalid groups added to the spec's cases.invalid")
