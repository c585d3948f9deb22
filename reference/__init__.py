"""NumPy float64 reference implementations: gradient ops in `ops/`, the forward ops they differentiate in `forward/`.

Convention (the harness relies on it): a function takes the op's inputs as keyword arguments named like
the spec's inputs (float64 arrays, or None for an omitted optional input), then the attributes as
keyword-only arguments (the harness always passes every attribute, defaults filled in; an output whose
shape the model declares comes as `<output>_shape`, e.g. MaxPoolGrad's dX_shape), and returns one
array or a tuple in the spec's output order. Nothing is rounded here; the harness rounds once.

An op's Python lives in its module pair, reference/ops/<op>.py and reference/forward/<forward op>.py: the
references, and every other hook its spec names (valid_if, shape rules, accuracy hooks, alternative
semantics, bench hooks), in the ops module; in the forward module when the forward reference needs it too
(conv_check) or the op is a forward op itself (GRUTraining's gru_case_shapes). Helpers shared by several
ops go to _math.py (tests/test_op_modules.py holds specs to this).
"""
