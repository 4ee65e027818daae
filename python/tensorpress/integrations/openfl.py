"""OpenFL adapter: a Transformer and TransformationPipelines built on tensorpress frames.

Written against OpenFL v1.6 (``openfl.pipelines.pipeline``) and tested against a
stand-in that copies its signatures and behaviour
(``python/tests/integrations/standins/openfl_standin.py``, see
python/INTEGRATIONS.md); it has not been run against a real OpenFL installation.

Plan (``plan/plan.yaml``)::

    compression_pipeline:
      template: tensorpress.integrations.openfl.TensorpressPipeline
      settings:
        recipe: "int8(4096) | q:huff0"      # or "fp16", "topk(0.05) | val:fp16 | *:huff0"

or, lossless everywhere (checkpoints included)::

    compression_pipeline:
      template: tensorpress.integrations.openfl.TensorpressLosslessPipeline
      settings: {}

How OpenFL uses it: collaborators send their "trained" tensors as deltas
through the configured pipeline and everything else with ``require_lossless``;
when the configured pipeline is lossy, OpenFL's ``TensorCodec`` switches those
lossless tensors to its own ``NoCompressionPipeline`` (float32 bytes), so only
the deltas are compressed by tensorpress. With a lossless tensorpress pipeline
every tensor, checkpoints included, goes through tensorpress and comes back bit
for bit, in its own dtype (NoCompression would cast to float32).

Each transformer output is one self-describing frame, and ``backward`` ignores
the metadata: OpenFL's protobuf keeps only ``int_to_float``/``int_list``/
``bool_list`` at int32/float32 precision, so nothing the decoder needs is put
there (``int_list`` carries the shape for readers that look).

No error feedback: OpenFL never tells a transformer which tensor it is
transforming, and the aggregator runs every pipeline twice (once for itself,
once per collaborator), so a transformer must be stateless and deterministic.
Use stateless stages: quantizers (``fp16``, ``int8(B)``, ``nf4(B)``), seeded
``qsgd``, and ``topk`` as a recipe stage (what it drops is lost, not carried
to the next round).
"""

from __future__ import annotations

from typing import Any

import numpy as np

import tensorpress as tp

try:
    from openfl.pipelines.pipeline import TransformationPipeline, Transformer
except ImportError as _e:  # pragma: no cover - depends on the environment
    raise ImportError("tensorpress.integrations.openfl needs OpenFL >= 1.6 "
                      "(openfl.pipelines.pipeline)") from _e

__all__ = ["TensorpressTransformer", "TensorpressPipeline", "TensorpressLosslessPipeline"]


def _with_context(msg: str, err: Exception) -> Exception:
    try:
        return type(err)(msg)
    except Exception:  # noqa: BLE001 - exception classes with other constructors
        return ValueError(msg)


class TensorpressTransformer(Transformer):
    """ndarray -> one tensorpress frame (bytes), and back.

    Args:
        recipe: the codec recipe for tensors OpenFL may compress lossily; None
            picks a lossless one per tensor.
        lossless_recipe: the recipe when OpenFL passes ``lossless=True`` in
            kwargs (the aggregator does for aggregated deltas); must be lossless;
            None picks one per tensor.
        limits: decode limits for the frames ``backward`` takes (``tp.Limits``;
            None: the defaults).

    Raises:
        tensorpress.RecipeError: a bad recipe.
        ValueError: a lossy ``lossless_recipe``.
    """

    def __init__(self, recipe: str | None = None, lossless_recipe: str | None = None,
                 limits: tp.Limits | None = None) -> None:
        self.recipe = recipe
        self.lossless_recipe = lossless_recipe
        self.limits = limits
        self.lossy = recipe is not None and tp.is_lossy(recipe)
        if lossless_recipe is not None and tp.is_lossy(lossless_recipe):
            raise ValueError(f"TensorpressTransformer: lossless_recipe {lossless_recipe!r} "
                             "is lossy")

    def forward(self, data: Any, **kwargs: Any) -> tuple[bytes, dict]:
        """Encode ``data``; ``lossless=True`` in kwargs selects the lossless recipe.

        Returns:
            ``(frame, {"int_list": shape})``; the frame alone is enough to decode.

        Raises:
            TypeError: an unsupported dtype. tensorpress errors: a recipe that
                does not fit the tensor.
        """
        arr = np.asarray(data)
        recipe = self.lossless_recipe if kwargs.get("lossless") else self.recipe
        name = str(kwargs.get("tensor_name", ""))
        try:
            frame = tp.encode(arr, recipe=recipe, name=name)
        except (tp.TensorpressError, TypeError, ValueError) as e:
            what = f"'{name}'" if name else f"{arr.dtype} {arr.shape}"
            raise _with_context(f"tensorpress: OpenFL tensor {what}: {e}", e) from e
        return bytes(frame), {"int_list": [int(d) for d in arr.shape]}

    def backward(self, data: Any, metadata: Any, **kwargs: Any) -> np.ndarray:
        """Decode one frame; ``metadata`` is ignored (frames describe themselves).

        Raises:
            tensorpress.CorruptError (and the other ``tp`` errors): a bad frame.
            TypeError: ``data`` is not bytes-like.
        """
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"tensorpress: OpenFL backward expects bytes, got "
                            f"{type(data).__name__}")
        return tp.decode(bytes(data), limits=self.limits)


class TensorpressPipeline(TransformationPipeline):
    """A TransformationPipeline of one :class:`TensorpressTransformer`.

    Args:
        recipe: the codec recipe (``"fp16"``, ``"int8(4096) | q:huff0"``,
            ``"topk(0.05) | val:fp16 | *:huff0"``); None: lossless per tensor class.
        lossless_recipe: the recipe used when ``lossless=True`` is passed.
        **kwargs: passed to ``TransformationPipeline`` (OpenFL's plan may add some).
    """

    def __init__(self, recipe: str | None = None, lossless_recipe: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(transformers=[TensorpressTransformer(recipe, lossless_recipe)],
                         **kwargs)


class TensorpressLosslessPipeline(TensorpressPipeline):
    """A lossless tensorpress pipeline: bit-exact, safe for checkpoints.

    Args:
        recipe: a lossless recipe (``"shuffle4 | plane3:huff0"``, ``"*:zstd(1)"``);
            None picks one per tensor class.

    Raises:
        ValueError: a lossy recipe.
    """

    def __init__(self, recipe: str | None = None, **kwargs: Any) -> None:
        if recipe is not None and tp.is_lossy(recipe):
            raise ValueError(f"TensorpressLosslessPipeline: recipe {recipe!r} is lossy; "
                             "use TensorpressPipeline")
        super().__init__(recipe=recipe, lossless_recipe=recipe, **kwargs)
