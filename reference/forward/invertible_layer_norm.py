"""Forward LayerNormalization with its bias named as InvertibleLayerNormalizationGrad names it (`bias`): the same
math as reference.forward.layer_norm:layer_normalization, Y = (X - mean) * inv_std_var * scale + bias."""
from reference.forward.layer_norm import layer_normalization as _layer_normalization


def layer_normalization(X, scale, bias, *, axis=-1, epsilon=1e-5):
    """(Y, mean, inv_std_var) in float64."""
    return _layer_normalization(X, scale, bias, axis=axis, epsilon=epsilon)
