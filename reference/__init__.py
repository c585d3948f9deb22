"""NumPy float64 reference implementations: gradient ops in `ops/`, the forward ops they differentiate in `forward/`.

Convention (the harness relies on it): a function takes the op's inputs as keyword arguments named like
the spec's inputs (float64 arrays, or None for an omitted optional input), then the attributes as
keyword-only arguments (the harness always passes every attribute, defaults filled in; an output whose
shape the model declares comes as `<output>_shape`, e.g. MaxPoolGrad's dX_shape), and returns one
array or a tuple in the spec's output order. Nothing is rounded here; the harness rounds once.
"""
