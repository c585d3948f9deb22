"""The spec format: one pydantic model per YAML section. Field descriptions double as the fix hints
that `opconform validate` prints, so keep them short and imperative."""
from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field

DType = Literal["float32", "float64", "float16", "bfloat16", "int32", "int64"]
FloatDType = Literal["float32", "float64", "float16", "bfloat16"]
Role = Literal["grad_output", "forward_input", "forward_output", "saved_activation"]
Tier = Literal["smoke", "ci", "nightly"]
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
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class TypeConstraint(Section):
    types: list[DType] = Field(min_length=1, description="the dtypes this type variable may take")
    description: str = ""


class Range(Section):
    min: int = Field(0, ge=0)
    max: int = Field(8, ge=0)


class Input(Section):
    name: Identifier
    type: str = Field(description="a type variable from type_constraints, e.g. T")
    role: Role = Field(description="grad_output, forward_input, forward_output or saved_activation")
    optional: bool = False
    description: str = ""
    grad_of: str | None = Field(None, description="for a grad_output: the forward output it is the gradient of")
    forward_name: str | None = Field(None, description="the forward tensor this input holds, if named differently")
    shape_from: str | None = Field(None, description="the input whose shape this one must equal")
    shape_fn: Dotted | None = Field(None, description="module:function(shapes, params) giving the required shape")
    rank: Range | None = None


class Output(Section):
    name: Identifier
    type: str = Field(description="a type variable from type_constraints, e.g. T")
    optional: bool = False
    description: str = ""
    grad_of: str | None = Field(None, description="the forward input this output is the gradient of")
    shape_from: str | None = Field(None, description="the input whose shape this output has")


class Attribute(Section):
    type: Literal["int", "float", "string", "ints", "floats", "strings"]
    default: Any = None
    required: bool = False
    min: float | None = None
    max: float | None = None
    allowed: list[Any] | None = Field(None, min_length=1, description="the only values allowed")
    axis_of: str | None = Field(None, description="the input this attribute is an axis of: [-rank, rank)")
    description: str = ""


class Forward(Section):
    op: str = Field(description="the forward op's name, e.g. Relu")
    domain: str = Field("", description="'' for ai.onnx, or com.microsoft")
    reference: Dotted
    inputs: list[Identifier] = Field(min_length=1)
    outputs: list[Identifier] = Field(min_length=1)
    attributes: list[str] = Field([], description="the spec attributes the forward op takes too")


class Tolerance(Section):
    atol: float = Field(ge=0)
    rtol: float = Field(ge=0)
    reason: str = Field(min_length=10, description="why this dtype needs other tolerances than the defaults")


class Accuracy(Section):
    """Error that grows with the reduction length: allowance = factor * u(acc) * sqrt(K) * magnitude."""
    reduction_length: Dotted = Field(description="module:function(inputs..., attributes...) -> K, or a tuple with one K per output")
    magnitude: Dotted | None = Field(None, description="module:function like the reference, on |terms|; default |expected|")
    accumulate: dict[FloatDType, FloatDType] = Field({}, description="dtype a kernel may accumulate in, e.g. {float16: float32}")
    factor: float = Field(1.0, gt=0, description="multiplies the allowance; state the reason in a comment when not 1")


class Generator(Section):
    """How the values of one tensor are drawn (in float64, then rounded to the case dtype)."""
    distribution: Literal["normal", "uniform"] = "normal"
    mean: float = 0.0
    std: float = Field(1.0, ge=0)
    low: float = -1.0
    high: float = 1.0
    special: list[Value] = Field([], description="values planted among the drawn ones")
    fraction: float = Field(0.25, gt=0, le=1, description="share of elements replaced by special values")
    values: list[Value] | None = Field(None, min_length=1, description="literal values, repeated to fill the tensor")


class Group(Section):
    name: GroupName
    description: str = ""
    tier: Tier = Field("ci", description="the smallest tier that runs this group: smoke, ci or nightly")
    dtypes: list[DType] | None = Field(None, min_length=1, description="defaults to cases.dtypes; leave it out "
                                       "rather than write []")
    params: dict[str, Annotated[list[Any], Field(min_length=1)]] = Field(
        {}, description="each key maps to a non-empty list of values; cases are their product")
    inputs: dict[str, Generator] = Field({}, description="generators by input name, overriding cases.inputs")
    vjp: bool | str = Field(True, description="false-like: write the reason the VJP identity does not apply")
    timeout: float | None = Field(None, gt=0, description="seconds a backend may take on one of these cases before "
                                  "it counts as a hang; shortens the run's --timeout (for inputs known to hang)")


class InvalidGroup(Group):
    why: str = Field(min_length=5, description="what makes these inputs invalid")
    shapes: dict[str, list[NonNegative]] = Field({}, description="input shapes that override the generated ones, "
                                                 "lists of non-negative ints")
    attributes: dict[str, Any] = Field({}, description="attribute values written as-is, even out of range")
    vjp: bool | str = False


class Cases(Section):
    seed: int = 0
    dtypes: list[DType] = Field(min_length=1, description="the dtypes a group runs in unless it says otherwise")
    inputs: dict[str, Generator] = Field({}, description="default generators by op input or forward input name")
    params: dict[str, str] = Field({}, description="extra case parameters for hooks: name -> meaning")
    shapes: Dotted | None = Field(None, description="module:function(params) -> {input: shape}")
    groups: list[Group] = Field(min_length=1)
    invalid: list[InvalidGroup] = []


DivergenceResult = Literal["wrong_values", "crash", "hang", "accepts_invalid", "unsupported"]


class Divergence(Section):
    id: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]*$")]
    backend: str
    cases: list[str] = Field(min_length=1, description="globs over case ids, e.g. 'infinities/*'")
    dtypes: list[DType] | None = Field(None, min_length=1, description="the dtypes covered; leave it out for all")
    outputs: list[str] | None = Field(None, min_length=1, description="the outputs affected; leave it out for all")
    result: DivergenceResult | list[DivergenceResult] = Field(
        description="wrong_values, crash, hang, accepts_invalid or unsupported; a list when the backend's "
                    "behaviour depends on memory layout (an out-of-bounds read may crash or return garbage)")
    summary: str = Field(min_length=10, description="one line: what the backend does instead of the math")
    evidence: str = Field(min_length=10, description="what was run, what came back, which version, when")
    links: list[str] = []

    @property
    def results(self) -> list[str]:
        return self.result if isinstance(self.result, list) else [self.result]


# Tried for every op when a diagnosis runs (harness.run.diagnose), besides the spec's own alternatives.
BUILTIN_TRANSFORMS = ("output transposed", "output negated", "first two inputs swapped")


class Alternative(Section):
    """A plausible wrong semantics: a failing output is scored against it to say what the kernel computes."""
    name: str = Field(min_length=3, description="what a match means, e.g. 'legacy SoftmaxGrad axis semantics'")
    reference: Dotted = Field(description="module:function taking the reference's inputs and attributes")
    description: str = ""


class OwnSavedState(Section):
    """A second check: the saved activations come from the same backend's run of the forward-with-state op
    (GRUGrad fed the HAll and ZRH of the backend's own GRUTraining), which catches a saved-state layout the
    two kernels disagree on. The other inputs and the attributes are passed by name."""
    op: Identifier = Field(description="the op (same domain) whose outputs feed the saved inputs, e.g. GRUTraining")
    outputs: dict[Identifier, Identifier] = Field(min_length=1, description="this op's input -> that op's output, e.g. {ZRH: ZRH}")
    cases: list[str] = Field(["*"], min_length=1, description="globs over the valid case ids it runs on")


class Spec(Section):
    schema_version: Literal[1]
    op: Identifier
    domain: str = "com.microsoft"
    since_version: int = Field(1, ge=1)
    summary: str = Field(min_length=10)
    description: str = ""
    formula: str
    references: list[str] = []
    forward: Forward | None = None
    type_constraints: dict[str, TypeConstraint] = Field(min_length=1)
    inputs: list[Input] = Field(min_length=1)
    outputs: list[Output] = Field(min_length=1)
    attributes: dict[Identifier, Attribute] = {}
    reference: Dotted = Field(description="the NumPy reference, module.path:function")
    valid_if: Dotted | None = Field(None, description="module:function(shapes, attributes) -> problem or None")
    tolerances: dict[FloatDType, Tolerance] = {}
    accuracy: Accuracy | None = Field(None, description="for reductions: an error term that grows with their length")
    cases: Cases
    known_divergences: list[Divergence] = []
    own_saved_state: OwnSavedState | None = Field(None, description="feed saved activations from the backend's own "
                                                  "forward-with-state op as a second check")
    alternative_semantics: list[Alternative] = Field([], description="wrong semantics a failure is diagnosed "
                                                    "against (built-ins always tried: " + ", ".join(BUILTIN_TRANSFORMS) + ")")

    @property
    def id(self) -> str:
        return f"{self.domain}::{self.op}@{self.since_version}"

    def input(self, name: str) -> Input:
        return next(i for i in self.inputs if i.name == name)

    def output(self, name: str) -> Output:
        return next(o for o in self.outputs if o.name == name)

    def dtype_of(self, tensor: Input | Output, case_dtype: str) -> str:
        """The case dtype binds every type variable that allows it; others take their only type."""
        types = self.type_constraints[tensor.type].types
        return case_dtype if case_dtype in types else types[0]
