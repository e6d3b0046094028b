"""Flax NNX modules: thin shells over :mod:`flax_posenc.block`.

Each module holds its parameters and calls the functional core; none re-implements it.
:mod:`flax_posenc.linen` has the same names and gives the same numbers.

Each module is built from its flat arguments, as ``nnx.Embed(num_embeddings, features, rngs=...)``
is: ``LearnedPositionalEmbedding(1024, 768, rngs=...)`` builds its spec inside (the same as
``from_arguments(...)``), in the order of the flat call. ``Module(spec, ...)`` keeps a spec you built
(:class:`~flax_posenc.block.InputSpec`, :class:`~flax_posenc.block.PositionSpec`,
:class:`~flax_posenc.RelativeBiasSpec`, :class:`~flax_posenc.GridSpec`, ...; RoPE and ALiBi take
their config); the other arguments are module concerns (dtypes, initializer, ``on_overflow``, ``rngs``).

>>> import jax.numpy as jnp
>>> from flax import nnx
>>> import flax_posenc as fp
>>> block = fp.nnx.TransformerInput.from_arguments(100, 16, num_positions=32, rngs=nnx.Rngs(0))
>>> block(jnp.zeros((2, 8), jnp.int32)).shape
(2, 8, 16)
"""

from __future__ import annotations

import os
from typing import Any, TypeVar

import jax
import jax.numpy as jnp
from flax import nnx
from flax.core import meta

from flax_posenc import block, shells
from flax_posenc.alibi_config import AlibiConfig
from flax_posenc.bbox import bbox_embedding
from flax_posenc.bbox_config import BboxSpec
from flax_posenc.block import AXES, InputSpec, PositionSpec
from flax_posenc.bounds import check_bound
from flax_posenc.conv_position import CONV_POSITION_AXES
from flax_posenc.conv_position_config import ConvPositionSpec
from flax_posenc.conversion.layer_rope import rope_for_layer
from flax_posenc.detr import detr_learned_embedding, detr_sine_embedding
from flax_posenc.detr_config import LEARNED_DETR_ROWS, MAX_FEATURE_SIDE, DetrSineConfig
from flax_posenc.extend import ExtendMethod, extend_input
from flax_posenc.grid_config import GridSpec
from flax_posenc.overflow import OverflowPolicy, check_policy
from flax_posenc.pretrained import device_array, load_pretrained
from flax_posenc.relative_bias import RELATIVE_BIAS_AXES, bias_of
from flax_posenc.relative_bias_config import BucketConfig, RelativeBiasSpec
from flax_posenc.rope_config import RopeConfig
from flax_posenc.sinusoid_math import Layout
from flax_posenc.vision_rope_config import VisionRopeConfig

default_embed_init = nnx.initializers.normal(stddev=0.02)  # GPT-2 and BERT's initializer_range
detr_embed_init = nnx.initializers.uniform(1.0)  # DETR's learned row/column tables: U[0, 1), as transformers


def _param(value: jax.Array, axes: tuple) -> nnx.Param:
    """A Param carrying logical axis names; sharded at creation only when a mesh is active."""
    eager = nnx.using_eager_sharding() and (
        meta.get_global_mesh() is not None or not jax.sharding.get_abstract_mesh().empty
    )
    return nnx.Param(value, out_sharding=axes, eager_sharding=eager)


_M = TypeVar("_M")


class _FlatCall:
    """``from_arguments``, the flat call by its 0.1 name: the constructor takes the flat arguments
    first-class (``LearnedPositionalEmbedding(1024, 768, rngs=...)``), so this is that call.

    >>> from flax import nnx
    >>> LearnedPositionalEmbedding.from_arguments(16, 4, rngs=nnx.Rngs(0)).spec.table_shape
    (16, 4)
    """

    @classmethod
    def from_arguments(cls: type[_M], *args: Any, **kwargs: Any) -> _M:
        """The module of flat arguments: the same as ``cls(*args, **kwargs)``."""
        return cls(*args, **kwargs)


class _PositionShell(nnx.Module):
    """Shared ``__call__`` of the two position modules."""

    spec: PositionSpec
    dtype: Any
    on_overflow: OverflowPolicy

    def _table(self):
        return None

    @property
    def dim(self) -> int:
        return self.spec.dim

    @property
    def num_positions(self) -> int | None:
        """Usable positions (the limit; ``None`` for unbounded sinusoids)."""
        return self.spec.num_positions

    def __call__(
        self,
        positions: jax.typing.ArrayLike | None = None,
        *,
        length: int | None = None,
        start: int | jax.Array = 0,
        on_overflow: OverflowPolicy | None = None,
    ) -> jax.Array:
        """Vectors for ``positions`` (any integer shape) or for ``length`` positions from ``start``.

        Returns ``positions.shape + (dim,)`` or ``(length, dim)``; raises
        :class:`~flax_posenc.PositionLimitError` for a known position past the limit (traced
        positions follow ``on_overflow``: this call's, else the module's; see :mod:`flax_posenc.overflow`).
        """
        return block.encode_positions(
            self.spec,
            self._table(),
            positions,
            length=length,
            start=start,
            dtype=self.dtype,
            on_overflow=on_overflow or self.on_overflow,
        )


class SinusoidalPositionalEncoding(_FlatCall, _PositionShell):
    """Vaswani et al.'s fixed encoding; no parameters.

    A static ``length`` is checked at trace time; its encoding is the float64 table rounded once
    (a constant, up to 64 KiB) or, longer, computed on device within 1e-7 of it from an iota, so
    the program does not grow with the length; traced positions use exact-angle arithmetic on
    device (:func:`~flax_posenc.sinusoidal_encoding`).

    Build it from its flat arguments, ``SinusoidalPositionalEncoding(dim, num_positions=..., ...)``
    (the same as :meth:`from_arguments`), or from a spec, ``SinusoidalPositionalEncoding(spec)``.

    Args:
      dim: vector width, or a :class:`~flax_posenc.block.PositionSpec` of kind ``"sinusoidal"``
        (then no other flat argument; another kind is a ``ValueError``).
      num_positions: an optional limit (``None``: none).
      base, layout, endpoint: the convention (defaults ``10000.0``, ``"interleaved"``, ``False``;
        see :mod:`flax_posenc.sinusoidal`).
      position_name: the encoding's name in error messages (default ``"sinusoidal encoding"``;
        ``name``: its deprecated former keyword).
      dtype: output dtype.
      on_overflow: policy for traced positions past ``num_positions``.

    >>> SinusoidalPositionalEncoding(512)(length=128).shape
    (128, 512)
    >>> from flax_posenc.block import PositionSpec
    >>> SinusoidalPositionalEncoding(PositionSpec("sinusoidal", dim=512))(length=128).shape
    (128, 512)
    >>> SinusoidalPositionalEncoding.from_arguments(512, num_positions=1024).num_positions
    1024
    """

    def __init__(
        self,
        dim: int | PositionSpec,
        *,
        num_positions: int | None = None,
        base: float | None = None,
        layout: Layout | None = None,
        endpoint: bool | None = None,
        position_name: str | None = None,
        name: str | None = None,
        dtype: jax.typing.DTypeLike = jnp.float32,
        on_overflow: OverflowPolicy = "error",
    ):
        module = "SinusoidalPositionalEncoding"
        spec = shells.resolve_spec(
            module,
            PositionSpec,
            "dim, ...",
            dim,
            shells.sinusoidal_spec,
            num_positions=num_positions,
            base=base,
            layout=layout,
            endpoint=endpoint,
            position_name=position_name,
            name=name,
        )
        self.spec = shells.check_kind(spec, "sinusoidal", module)
        self.dtype = dtype
        check_policy(on_overflow)  # None is no policy here (as in Linen): one line at construction
        self.on_overflow = block.policy_of(self.spec, on_overflow)


class LearnedPositionalEmbedding(_FlatCall, _PositionShell):
    """A learned absolute position table, as in GPT-2 (1024 x 768) and BERT (512 x 768).

    The table has ``offset + num_positions`` rows; position ``p`` reads row ``offset + p``. A
    known position past the table raises :class:`~flax_posenc.PositionLimitError` at trace time;
    traced positions follow ``on_overflow`` -- never JAX's silent clamp or NaN unless asked.

    Build it from its flat arguments, ``LearnedPositionalEmbedding(num_positions, dim, rngs=...)``
    (the same as :meth:`from_arguments`), or from a spec, ``LearnedPositionalEmbedding(spec, rngs=...)``.

    Args:
      num_positions: usable positions, the context limit; or a :class:`~flax_posenc.block.PositionSpec`
        of kind ``"learned"`` (then no other flat argument; another kind is a ``ValueError``).
      dim: vector width.
      offset: reserved leading rows, 2 for RoBERTa/OPT/BART tables (default 0).
      position_name: the table's name in error messages (default ``"position table"``; ``name``:
        its deprecated former keyword).
      dtype: computation/output dtype (``None``: ``param_dtype``).
      param_dtype: dtype the table is stored in.
      embedding_init: initializer ``(key, shape, dtype) -> array``.
      on_overflow: ``"error"`` (fails at run time under plain ``jit``, see :mod:`flax_posenc.overflow`), ``"clip"``
        or ``"fill"`` for traced positions.
      rngs: ``nnx.Rngs`` with a ``params`` stream.

    >>> from flax import nnx
    >>> wpe = LearnedPositionalEmbedding(1024, 768, rngs=nnx.Rngs(0))
    >>> wpe(length=128).shape
    (128, 768)
    >>> wpe(length=1025)
    Traceback (most recent call last):
    ...
    flax_posenc.errors.PositionLimitError: position table holds 1024 positions (0..1023); asked for position 1024, 1 past the end
    >>> from flax_posenc.block import PositionSpec
    >>> LearnedPositionalEmbedding(PositionSpec("learned", dim=768, num_positions=1024), rngs=nnx.Rngs(0)).spec == wpe.spec
    True
    """

    def __init__(
        self,
        num_positions: int | PositionSpec,
        dim: int | None = None,
        *,
        offset: int | None = None,
        position_name: str | None = None,
        name: str | None = None,
        dtype: jax.typing.DTypeLike | None = None,
        param_dtype: jax.typing.DTypeLike = jnp.float32,
        embedding_init: nnx.Initializer = default_embed_init,
        on_overflow: OverflowPolicy = "error",
        rngs: nnx.Rngs,
    ):
        module, flat_names = "LearnedPositionalEmbedding", "num_positions, dim, ..."
        spec = shells.resolve_spec(
            module,
            PositionSpec,
            flat_names,
            num_positions,
            shells.learned_spec,
            dim=dim,
            offset=offset,
            position_name=position_name,
            name=name,
        )
        self.spec = shells.check_kind(spec, "learned", module)
        check_policy(on_overflow)  # None is no policy here (as in Linen): one line at construction
        self.on_overflow = block.policy_of(self.spec, on_overflow)
        self.embedding = _param(
            embedding_init(rngs.params(), self.spec.table_shape, param_dtype), AXES["position_embeddings"]
        )
        self.dtype = dtype

    def _table(self):
        return self.embedding[...]


class TransformerInput(nnx.Module):
    """Token embedding + position (+ token types, LayerNorm, dropout): a transformer's input.

    ``dropout(layer_norm(embed_scale * word[ids] + position + token_type[types]))``, covering
    the original transformer (sinusoids, ``embed_scale=sqrt(dim)``), GPT-2 (learned), BERT
    (learned + token types + LayerNorm), RoBERTa/OPT (reserved rows, padding-aware positions).
    :meth:`from_pretrained` builds and loads one from a Hugging Face checkpoint.

    Build it from the spec's flat arguments, ``TransformerInput(vocab_size, dim, num_positions=...,
    rngs=...)`` (the same as :meth:`from_arguments`), or from a spec, ``TransformerInput(spec, rngs=...)``.

    Args:
      spec: ``vocab_size`` followed by ``dim`` (the flat call), or an :class:`~flax_posenc.block.InputSpec`.
      dropout_rate: dropout on the output.
      deterministic: ``True`` (the default: inference, no dropout) or ``False``; set by
        ``model.train()`` / ``model.eval()`` as for ``nnx.Dropout``, overridden per call.
      param_dtype: dtype parameters are stored in.
      embedding_init: initializer of the embedding tables.
      rngs: ``nnx.Rngs`` (``params``; ``dropout`` when ``dropout_rate > 0``).
      **spec_arguments: the flat call's other arguments (none beside a spec):

        - ``vocab_size``, ``dim``: token vocabulary size, model width.
        - ``num_positions``: usable positions of a learned table (required for ``"learned"``),
          or an optional limit for sinusoids.
        - ``position``: ``"learned"``, ``"sinusoidal"`` or ``"none"``.
        - ``position_offset``: reserved leading rows of the learned table.
        - ``positions_from``: default positions: ``"index"``, ``"non_padding_ids"`` (RoBERTa)
          or ``"attention_mask"`` (OPT); ``pad_token_id``: the padding id.
        - ``embed_scale``: multiplies token embeddings (``dim ** 0.5`` for Vaswani et al.).
        - ``type_vocab_size``: token-type (segment) rows, 0 for none (BERT: 2).
        - ``layer_norm``, ``layer_norm_eps``: LayerNorm after the sum (BERT), its epsilon.
        - ``dtype``: computation/output dtype (``None``: ``param_dtype``).
        - ``base``, ``layout``, ``endpoint``: sinusoidal convention.
        - ``position_name``: the position table's name in error messages.

      on_overflow: the policy for traced ids past a table -- word ids, positions and token types
        alike (see :mod:`flax_posenc.overflow`; a call's ``on_overflow`` overrides it). ``None``
        (the default) means ``"error"``, or the policy of a spec built with the deprecated
        ``PositionSpec(on_overflow=)``; any other value is a ``ValueError`` at construction.
        Not part of the spec: never written to files.

    Parameters carry logical axis names (``("vocab", "embed")``, ``(None, "embed")``,
    ``("embed",)``): shard them with your own rules (see ``docs/sharding.md``).

    Attributes ``vocab_size``, ``dim`` and ``num_positions`` read the static ``spec``;
    :meth:`attend` is the tied output head (as ``nnx.Embed.attend``).

    >>> from flax import nnx
    >>> from flax_posenc.block import InputSpec
    >>> spec = InputSpec.from_arguments(100, 8, num_positions=16)
    >>> block = TransformerInput(spec, dropout_rate=0.1, rngs=nnx.Rngs(0))
    >>> block.spec == TransformerInput.from_arguments(100, 8, num_positions=16, rngs=nnx.Rngs(0)).spec
    True
    >>> block.train(); block.deterministic
    False
    >>> block.eval(); block(jnp.zeros((2, 16), jnp.int32)).shape
    (2, 16, 8)
    >>> block.attend(jnp.ones((2, 16, 8))).shape        # logits over the vocabulary
    (2, 16, 100)
    """

    def __init__(
        self,
        spec: InputSpec | int | None = None,
        dim: int | None = None,
        /,
        *,
        dropout_rate: float = 0.0,
        deterministic: bool = True,
        param_dtype: jax.typing.DTypeLike = jnp.float32,
        embedding_init: nnx.Initializer = default_embed_init,
        on_overflow: OverflowPolicy | None = None,
        rngs: nnx.Rngs,
        **spec_arguments,
    ):
        self.spec = spec = InputSpec.of(spec, dim, **spec_arguments)
        self.on_overflow = block.policy_of(spec.position, on_overflow)
        shapes = spec.param_shapes()
        init = lambda name: _param(embedding_init(rngs.params(), shapes[name], param_dtype), AXES[name])  # noqa: E731
        self.word_embeddings = init("word_embeddings")
        if "position_embeddings" in shapes:
            self.position_embeddings = init("position_embeddings")
        if "token_type_embeddings" in shapes:
            self.token_type_embeddings = init("token_type_embeddings")
        if spec.layer_norm:
            self.layer_norm = nnx.Dict(
                scale=_param(jnp.ones((spec.dim,), param_dtype), AXES["layer_norm"]),
                bias=_param(jnp.zeros((spec.dim,), param_dtype), AXES["layer_norm"]),
            )
        self.deterministic = deterministic
        self.dropout = nnx.Dropout(dropout_rate, deterministic=deterministic, rngs=rngs if dropout_rate > 0 else None)

    @classmethod
    def from_arguments(
        cls,
        vocab_size: int | None = None,
        dim: int | None = None,
        /,
        *,
        dropout_rate: float = 0.0,
        deterministic: bool = True,
        param_dtype: jax.typing.DTypeLike = jnp.float32,
        embedding_init: nnx.Initializer = default_embed_init,
        on_overflow: OverflowPolicy | None = None,
        rngs: nnx.Rngs,
        **spec_arguments: Any,
    ) -> TransformerInput:
        """A block from the spec's flat arguments (``spec_arguments``, listed above) and the module's.

        The spec is :meth:`InputSpec.from_arguments <flax_posenc.block.InputSpec.from_arguments>`'s.

        >>> from flax import nnx
        >>> TransformerInput.from_arguments(100, 8, num_positions=16, rngs=nnx.Rngs(0)).num_positions
        16
        """
        return cls(
            InputSpec.of(vocab_size, dim, **spec_arguments),
            dropout_rate=dropout_rate,
            deterministic=deterministic,
            param_dtype=param_dtype,
            embedding_init=embedding_init,
            on_overflow=on_overflow,
            rngs=rngs,
        )

    @property
    def vocab_size(self) -> int:
        return self.spec.vocab_size

    @property
    def dim(self) -> int:
        return self.spec.dim

    @property
    def num_positions(self) -> int | None:
        """Usable positions (the limit; ``None`` for unbounded sinusoids or no encoding)."""
        return self.spec.position.num_positions

    def attend(self, query: jax.typing.ArrayLike) -> jax.Array:
        """Logits ``query @ word_embeddings.T``: the tied output head, ``(..., dim) -> (..., vocab)``."""
        return block.attend(self.spec, self.word_embeddings[...], query)

    def params(self) -> dict[str, Any]:
        """The parameters as a nested dict of arrays, named as in :mod:`flax_posenc.block`."""
        out = {}
        for name in ("word_embeddings", "position_embeddings", "token_type_embeddings"):
            if hasattr(self, name):
                out[name] = getattr(self, name)[...]
        if self.spec.layer_norm:
            out["layer_norm"] = {k: self.layer_norm[k][...] for k in ("scale", "bias")}
        return out

    def __call__(
        self,
        input_ids: jax.typing.ArrayLike,
        *,
        token_type_ids: jax.typing.ArrayLike | None = None,
        position_ids: jax.typing.ArrayLike | None = None,
        attention_mask: jax.typing.ArrayLike | None = None,
        start: int | jax.Array = 0,
        deterministic: bool | None = None,
        rngs: nnx.Rngs | None = None,
        on_overflow: OverflowPolicy | None = None,
    ) -> jax.Array:
        """Embed ``(..., seq_len)`` token ids into ``(..., seq_len, dim)``.

        See :func:`flax_posenc.block.transformer_input` for the arguments (``on_overflow``:
        this call's policy, default the module's). Dropout follows
        ``self.deterministic`` (``model.train()`` / ``model.eval()``) unless ``deterministic`` is
        given here; it draws from the ``dropout`` stream of ``rngs`` (given here or at construction).
        """
        x = block.transformer_input(
            self.spec,
            self.params(),
            input_ids,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            attention_mask=attention_mask,
            start=start,
            on_overflow=on_overflow or self.on_overflow,
        )
        deterministic = self.deterministic if deterministic is None else deterministic
        if self.dropout.rate > 0 and not deterministic:
            x = self.dropout(x, deterministic=False, rngs=rngs)
        return x

    def extend_positions(self, num_positions: int, *, method: ExtendMethod = "tile") -> TransformerInput:
        """A copy of this block whose learned table holds ``num_positions`` usable positions.

        A shell over :func:`flax_posenc.extend.extend_input` (``"tile"``: trained rows unchanged
        and repeated; ``"linear"``/``"cubic"``: resampled); reserved rows stay at the head;
        every other parameter is shared by value. Fine-tune the new rows before trusting them
        (``examples/finetune_extended.py``).

        >>> from flax import nnx
        >>> block = TransformerInput.from_arguments(100, 8, num_positions=16, rngs=nnx.Rngs(0))
        >>> longer = block.extend_positions(64)
        >>> longer(jnp.zeros((1, 64), jnp.int32)).shape
        (1, 64, 8)
        """
        spec, params = extend_input(self.spec, self.params(), num_positions, method=method)
        graphdef, state = nnx.split(self)
        grown = nnx.merge(graphdef, state)  # a new module; arrays are immutable, so nothing is copied
        old = self.position_embeddings[...]
        grown.position_embeddings = _param(
            jnp.asarray(params["position_embeddings"], old.dtype), AXES["position_embeddings"]
        )
        grown.spec = spec
        return grown

    @classmethod
    def from_pretrained(
        cls,
        source: str | os.PathLike,
        *,
        family: str | None = None,
        dtype: jax.typing.DTypeLike | None = None,
        param_dtype: jax.typing.DTypeLike = jnp.float32,
        rngs: nnx.Rngs | None = None,
        mesh: jax.sharding.Mesh | None = None,
        rules: Any = None,
        **overrides: Any,
    ) -> TransformerInput:
        """Build the input block of a Hugging Face checkpoint and load every weight of it.

        Args:
          source: checkpoint directory, ``.safetensors``/``.bin`` file or Hub id (see
            :mod:`flax_posenc.conversion`), or a ``.msgpack`` or orbax directory written by
            ``flax-posenc convert`` or :func:`flax_posenc.save_orbax`.
          family: force a family instead of detecting it.
          dtype, param_dtype: computation and storage dtypes.
          rngs: the ``dropout`` stream when ``dropout_rate > 0`` (default ``nnx.Rngs(0)``).
          mesh, rules: place every parameter on ``mesh``, sharded by its logical axes under
            ``rules`` (``docs/sharding.md``); an orbax checkpoint is restored straight onto it.
          overrides: module arguments (``dropout_rate``, ``deterministic``, ``embedding_init``,
            ``on_overflow``) or flat spec arguments (``position_name``, ...) replacing the
            checkpoint's (see :meth:`InputSpec.replace <flax_posenc.block.InputSpec.replace>`).

        Returns:
          A :class:`TransformerInput` whose output equals Hugging Face's embedding output for
          the same inputs (GPT-2's ``hidden_states[0]``, BERT's ``embeddings(...)``).

        Raises:
          CheckpointError: the source cannot be read (one line naming the file).

        block = TransformerInput.from_pretrained("gpt2")
        block.spec.position.num_positions
        1024
        """
        spec, params = load_pretrained(source, family=family, mesh=mesh, rules=rules)
        spec_overrides, module_overrides = block.split_spec_arguments(overrides)
        spec = spec.replace(dtype=dtype, **spec_overrides)
        module = _loaded(cls, spec, params, param_dtype=param_dtype, **module_overrides)
        if module.dropout.rate > 0:  # the abstract build left it no usable random stream
            module.dropout = nnx.Dropout(
                module.dropout.rate, deterministic=module.deterministic, rngs=rngs if rngs is not None else nnx.Rngs(0)
            )
        return module


def _assign(module: nnx.Module, params: dict, param_dtype) -> None:
    """Set every parameter of ``module`` from a nested dict of arrays (shapes checked)."""
    for name, value in params.items():
        target = getattr(module, name)
        if isinstance(value, dict):
            _assign(target, value, param_dtype)
            continue
        if tuple(target.shape) != tuple(value.shape):
            raise ValueError(f"{name}: expected shape {tuple(target.shape)}, found {tuple(value.shape)}")
        target.set_value(device_array(value, param_dtype))


def _loaded(cls: type, spec: Any, params: dict, *, param_dtype: jax.typing.DTypeLike, **module_arguments: Any) -> Any:
    """THE bridge from loaded ``(spec, params)`` to an NNX module (every ``from_pretrained`` with parameters).

    ``cls(spec, param_dtype=..., **module_arguments)`` built abstractly (``nnx.eval_shape``: no
    random initialisation of tables about to be overwritten), then every parameter set from
    ``params`` (a nested dict named as the module's; shapes checked) in ``param_dtype``.
    """
    module = nnx.eval_shape(lambda: cls(spec, param_dtype=param_dtype, rngs=nnx.Rngs(0), **module_arguments))
    _assign(module, params, param_dtype)
    return module


class RotaryEmbedding(shells.RotaryCalls, nnx.Module):
    """Rotary position embedding (RoPE) of queries or keys; no parameters.

    A thin shell over :func:`flax_posenc.rope.apply_rope`: exact-angle ``cos``/``sin`` (within
    2e-6 of float64 below ``2**24``), Hugging Face's scaling schemes, the config's layout.

    Args:
      config: a :class:`~flax_posenc.RopeConfig` (e.g. from
        :func:`flax_posenc.conversion.relative_config.read_relative_config`), a ``head_dim``, or
        ``None``: the identity (a NoPE layer, see :meth:`from_pretrained`): ``x`` (and ``q``,
        ``k``) come back unchanged, whatever the positions.
      on_overflow: policy for traced positions past ``config.limit`` (see :mod:`flax_posenc.overflow`).
      seq_axis: ``-3`` for ``(..., seq, heads, head_dim)`` (default), ``-2`` for Hugging Face's
        ``(..., heads, seq, head_dim)``.

    >>> import jax.numpy as jnp
    >>> import flax_posenc as fp
    >>> rope = fp.nnx.RotaryEmbedding(fp.RopeConfig(head_dim=8, max_position_embeddings=16))
    >>> rope(jnp.ones((2, 4, 3, 8))).shape          # (batch, seq, heads, head_dim)
    (2, 4, 3, 8)
    >>> bool((fp.nnx.RotaryEmbedding(None)(jnp.ones((2, 4, 3, 8))) == 1).all())   # NoPE: the identity
    True
    """

    def __init__(self, config: RopeConfig | int | None, *, on_overflow: OverflowPolicy = "error", seq_axis: int = -3):
        check_policy(on_overflow)
        self.config = None if config is None else RopeConfig.coerce(config)
        self.on_overflow = on_overflow
        self.seq_axis = seq_axis

    @classmethod
    def from_pretrained(
        cls, source: str | os.PathLike, *, layer: int = 0, on_overflow: OverflowPolicy = "error", seq_axis: int = -3
    ) -> RotaryEmbedding:
        """The RoPE of layer ``layer`` of a checkpoint (its ``config.json``; no weights are read).

        Each layer gets its own: Gemma 3's sliding and full attention layers their own
        ``rope_parameters``, DeepSeek's MLA its rope head (``head_dim``); a NoPE layer (SmolLM3's,
        Llama 4's ``no_rope_layers`` zeros) gives the identity (``config`` ``None``). Equals the
        model's own rotary module and ``apply_rotary_pos_emb`` for that layer (within 1e-5).

        Raises:
          CheckpointError: ``layer`` not an integer or out of range (the number of layers is
            named), a source without RoPE (its mechanisms are named), or an unreadable source;
            see :func:`~flax_posenc.conversion.layer_rope.rope_for_layer`.

        rope = RotaryEmbedding.from_pretrained("path/to/gemma-3-1b", layer=5)
        """
        return cls(rope_for_layer(source, layer), on_overflow=on_overflow, seq_axis=seq_axis)


class ALiBiBias(shells.ALiBiCalls, nnx.Module):
    """ALiBi attention bias, ``(heads, q_len, k_len)``, added to the scores; no parameters.

    A thin shell over :func:`flax_posenc.alibi.alibi_bias`; ``causal=True`` includes the causal
    mask (``finfo.min`` above the diagonal), ``causal=False`` is ``-m_h * |i - j|``.

    Args:
      config: an :class:`~flax_posenc.AlibiConfig` or a head count.
      causal: causal (decoder) or bidirectional (encoder) bias.
      dtype: output dtype.
      on_overflow: policy for traced positions past ``config.max_positions``.

    >>> import flax_posenc as fp
    >>> fp.nnx.ALiBiBias(12)(5).shape
    (12, 5, 5)
    """

    def __init__(
        self,
        config: AlibiConfig | int,
        *,
        causal: bool = True,
        dtype: jax.typing.DTypeLike = jnp.float32,
        on_overflow: OverflowPolicy = "error",
    ):
        check_policy(on_overflow)
        self.config = AlibiConfig.coerce(config)
        self.causal = causal
        self.dtype = dtype
        self.on_overflow = on_overflow


class RelativePositionBias(_FlatCall, nnx.Module):
    """T5-style learned relative position bias ``(heads, q, k)``: a thin shell over
    :func:`flax_posenc.relative_bias.relative_position_bias`.

    Parameter ``embedding`` ``(num_rows, num_heads)`` (``num_rows`` defaults to ``num_buckets``),
    logical axes ``(None, "heads")``. Add the output to the attention logits before the softmax
    (``logits = q @ k.T + bias``; T5 does not scale by ``1/sqrt(head_dim)``), broadcasting over
    the batch. Every relative position has a bucket: nothing is out of range, but distances
    from the saturation distance on share the last bucket (see :mod:`flax_posenc.relative_bias_config`).

    Build it from its flat arguments, ``RelativePositionBias(num_heads, num_buckets=..., rngs=...)``
    (the same as :meth:`from_arguments`), or from a spec, ``RelativePositionBias(RelativeBiasSpec(num_heads,
    BucketConfig(...)), rngs=...)``.

    Args:
      num_heads: heads, or a :class:`~flax_posenc.RelativeBiasSpec` (then no other flat argument).
      num_buckets, max_distance, bidirectional: the buckets (a :class:`~flax_posenc.BucketConfig`;
        defaults 32, 128, ``True``: T5/MPNet's encoder; ``False``: a causal decoder).
      num_rows: table rows if more than ``num_buckets`` (an MPNet config asking for 64).
      dtype: output dtype (``None``: ``param_dtype``); param_dtype: the table's dtype.
      embedding_init: initializer ``(key, shape, dtype)``; rngs: ``nnx.Rngs`` with ``params``.

    >>> from flax import nnx
    >>> import flax_posenc as fp
    >>> bias = RelativePositionBias(fp.RelativeBiasSpec(8, fp.BucketConfig(32, 128)), rngs=nnx.Rngs(0))
    >>> bias(5, 7).shape, bias(1, 7, query_start=6).shape      # full, and one decoding step
    ((8, 5, 7), (8, 1, 7))
    >>> RelativePositionBias.from_arguments(8, num_buckets=32, rngs=nnx.Rngs(0)).spec == bias.spec
    True
    """

    def __init__(
        self,
        num_heads: int | RelativeBiasSpec,
        *,
        num_buckets: int | None = None,
        max_distance: int | None = None,
        bidirectional: bool | None = None,
        num_rows: int | None = None,
        dtype: jax.typing.DTypeLike | None = None,
        param_dtype: jax.typing.DTypeLike = jnp.float32,
        embedding_init: nnx.Initializer = default_embed_init,
        rngs: nnx.Rngs,
    ):
        self.spec = shells.resolve_spec(
            "RelativePositionBias",
            RelativeBiasSpec,
            "num_heads, num_buckets=..., ...",
            num_heads,
            RelativeBiasSpec.from_arguments,
            num_buckets=num_buckets,
            max_distance=max_distance,
            bidirectional=bidirectional,
            num_rows=num_rows,
        )
        self.embedding = _param(embedding_init(rngs.params(), self.spec.table_shape, param_dtype), RELATIVE_BIAS_AXES)
        self.dtype = dtype

    @property
    def buckets(self) -> BucketConfig:
        return self.spec.buckets

    @property
    def num_heads(self) -> int:
        return self.spec.num_heads

    def __call__(self, query_len: int, key_len: int, *, query_start: int | jax.Array = 0) -> jax.Array:
        """``(heads, query_len, key_len)``: queries at ``query_start ..``, keys at ``0 .. key_len - 1``."""
        return bias_of(
            self.spec.buckets, self.embedding[...], query_len, key_len, query_start=query_start, dtype=self.dtype
        )

    @classmethod
    def from_pretrained(
        cls,
        source: str | os.PathLike,
        *,
        stack: str = "encoder",
        layer: int = 0,
        dtype: jax.typing.DTypeLike | None = None,
        param_dtype: jax.typing.DTypeLike = jnp.float32,
    ) -> RelativePositionBias:
        """The bias of a T5/mT5/UMT5/LongT5/MPNet checkpoint's ``stack`` and ``layer``.

        Equals transformers' ``compute_bias`` / ``compute_position_bias`` (within 1e-6 in float32).
        Raises :class:`~flax_posenc.CheckpointError` as
        :func:`~flax_posenc.conversion.load_relative_bias`.

        bias = RelativePositionBias.from_pretrained("path/to/t5-small", stack="decoder")
        """
        spec, params = shells.relative_bias_source(source, stack, layer)
        return _loaded(cls, spec, params, param_dtype=param_dtype, dtype=dtype)


class PatchPositionalEmbedding(_FlatCall, nnx.Module):
    """A vision transformer's learned 2-D position grid, added to its tokens (ViT, DeiT, CLIP, SigLIP).

    The parameter ``embedding`` has ``prefix_tokens + gh * gw`` rows (class/distillation tokens,
    then the ``grid`` row-major), logical axes ``(None, "embed")``. A call on ``(batch,
    prefix_tokens + gh * gw, dim)`` tokens adds the positions. Tokens of another grid raise
    :class:`~flax_posenc.PositionLimitError` naming the trained grid, unless the module
    (``interpolate=True``) or the call asks to interpolate; the grid is then resized as
    :func:`~flax_posenc.resize_grid` does under the spec's ``convention`` (the checkpoint's own
    with :meth:`from_pretrained`). The core is :func:`~flax_posenc.grids.add_grid_positions`.

    Build it from its flat arguments, ``PatchPositionalEmbedding(grid, dim, ..., rngs=...)`` (the
    same as :meth:`from_arguments`), or from a spec, ``PatchPositionalEmbedding(GridSpec(grid, dim,
    ...), rngs=...)``.

    Args:
      grid: ``(gh, gw)`` patches the table was trained for (an int: square), or a
        :class:`~flax_posenc.GridSpec` (then no other flat argument).
      dim: vector width.
      prefix_tokens: rows before the grid (ViT/CLIP 1, the default; DeiT 2, SigLIP 0).
      patch_size: pixels per patch (lets a call give ``image_size``; default ``None``: unknown).
      convention: how to resize (:data:`~flax_posenc.grid_config.GRID_CONVENTIONS` or a model
        type; default ``"torch_bicubic"``).
      position_name: the table's name in messages (default ``"position grid"``).
      interpolate: resize on a different grid instead of raising.
      param_dtype, embedding_init, rngs: the table's dtype, initializer and ``params`` stream.

    >>> import jax.numpy as jnp
    >>> from flax import nnx
    >>> import flax_posenc as fp
    >>> pos = PatchPositionalEmbedding(fp.GridSpec((14, 14), 8), rngs=nnx.Rngs(0))
    >>> pos(jnp.zeros((2, 197, 8))).shape
    (2, 197, 8)
    >>> pos(jnp.zeros((2, 785, 8)))
    Traceback (most recent call last):
    ...
    flax_posenc.errors.PositionLimitError: position grid holds a 14 x 14 grid of patches + 1 class token (197 positions); asked for a 28 x 28 grid (785 positions): pass interpolate=True to resize it (fp.resize_grid)
    >>> pos(jnp.zeros((2, 785, 8)), interpolate=True).shape
    (2, 785, 8)
    >>> PatchPositionalEmbedding.from_arguments(14, 8, rngs=nnx.Rngs(0)).spec == pos.spec
    True
    """

    def __init__(
        self,
        grid: Any,
        dim: int | None = None,
        *,
        prefix_tokens: int | None = None,
        patch_size: Any = None,
        convention: str | None = None,
        position_name: str | None = None,
        interpolate: bool = False,
        param_dtype: jax.typing.DTypeLike = jnp.float32,
        embedding_init: nnx.Initializer = default_embed_init,
        rngs: nnx.Rngs,
    ):
        flat = dict(dim=dim, prefix_tokens=prefix_tokens, patch_size=patch_size, convention=convention)
        build, flat_names = GridSpec.from_arguments, "grid, dim, ..."
        spec = shells.resolve_spec(
            "PatchPositionalEmbedding", GridSpec, flat_names, grid, build, **flat, position_name=position_name
        )
        self.spec = spec
        self.interpolate = interpolate
        init = embedding_init(rngs.params(), self.spec.table_shape, param_dtype)
        self.embedding = _param(init, AXES["position_embeddings"])

    grid = property(lambda self: self.spec.grid, doc="``(gh, gw)``: the trained grid.")
    dim = property(lambda self: self.spec.dim, doc="Vector width.")
    prefix_tokens = property(lambda self: self.spec.prefix_tokens, doc="Rows before the grid.")
    patch_size = property(lambda self: self.spec.patch_size, doc="Pixels per patch (``None``: unknown).")
    convention = property(lambda self: self.spec.convention, doc="The resize convention's name.")
    position_name = property(lambda self: self.spec.name, doc="The table's name in messages.")

    def __call__(self, x: jax.Array, *, grid=None, image_size=None, interpolate: bool | None = None) -> jax.Array:
        """``x + positions`` for ``x`` of shape ``(..., prefix_tokens + gh * gw, dim)``.

        ``grid`` (or ``image_size`` in pixels, with the spec's ``patch_size``) names ``x``'s
        grid when it is not the trained one nor square; ``interpolate`` overrides the module's.
        """
        interpolate = self.interpolate if interpolate is None else interpolate
        return shells.add_grid(self.spec, self.embedding[...], x, grid, image_size, interpolate)

    @classmethod
    def from_pretrained(
        cls,
        source: str | os.PathLike,
        *,
        interpolate: bool = False,
        convention: str | None = None,
        param_dtype: jax.typing.DTypeLike = jnp.float32,
    ) -> PatchPositionalEmbedding:
        """The position grid of a vision checkpoint (:func:`~flax_posenc.conversion.load_grid_table`).

        ``convention`` defaults to the checkpoint's own (its model type's
        ``interpolate_pos_encoding``); the spec's ``name`` names the checkpoint's tensor.

        Raises:
          CheckpointError: the source is not a vision checkpoint with a learned grid (one line).
        """
        spec, params = shells.grid_source(source, convention)
        return _loaded(cls, spec, params, param_dtype=param_dtype, interpolate=interpolate)


class DetrSinePositionEmbedding(nnx.Module):
    """A DETR-family 2-D sine position embedding of a feature-map mask (no parameters, no limit).

    The core is :func:`~flax_posenc.detr.detr_sine_embedding`; the variant (``normalize``,
    ``scale``, ``temperature``, the offset of deformable DETR, DAB-DETR's two temperatures) is its
    :class:`~flax_posenc.DetrSineConfig` (a checkpoint's:
    :data:`~flax_posenc.conversion.detr_positions.DETR_POSITION_FAMILIES`).

    Args:
      config: the variant.
      dtype: the output's dtype (computed in float32, within one float32 ulp of 1.0 of float64).

    >>> import jax.numpy as jnp
    >>> import flax_posenc as fp
    >>> pos = DetrSinePositionEmbedding(fp.DetrSineConfig(16))
    >>> pos(jnp.ones((2, 5, 7), bool)).shape   # (batch, 2 * num_pos_feats, H, W)
    (2, 32, 5, 7)
    """

    def __init__(self, config: DetrSineConfig, *, dtype: jax.typing.DTypeLike = jnp.float32):
        if not isinstance(config, DetrSineConfig):
            raise TypeError(f"config: expected a DetrSineConfig, got {type(config).__name__}")
        self.config = config
        self.dtype = dtype

    def __call__(self, mask: jax.typing.ArrayLike) -> jax.Array:
        """``(batch, 2 * num_pos_feats, H, W)`` for a ``(batch, H, W)`` boolean or integer mask."""
        return detr_sine_embedding(mask, self.config, dtype=self.dtype)


class DetrLearnedPositionEmbedding(nnx.Module):
    """DETR's learned 2-D position embedding (``position_embedding_type="learned"``).

    Parameters ``row_embeddings`` and ``column_embeddings``, each ``(num_rows, num_pos_feats)``
    (transformers: 50 rows, ``d_model // 2``), logical axes ``(None, "embed")``. A call on a
    ``(batch, H, W)`` mask gives ``(batch, 2 * num_pos_feats, H, W)``, channels
    ``[column_embeddings[x] | row_embeddings[y]]``; a feature map taller or wider than the tables
    raises :class:`~flax_posenc.PositionLimitError` at trace time (the core is
    :func:`~flax_posenc.detr.detr_learned_embedding`).

    >>> import jax.numpy as jnp
    >>> from flax import nnx
    >>> pos = DetrLearnedPositionEmbedding(8, rngs=nnx.Rngs(0))
    >>> pos(jnp.ones((1, 3, 4), bool)).shape
    (1, 16, 3, 4)
    >>> pos(jnp.ones((1, 51, 4), bool))
    Traceback (most recent call last):
    ...
    flax_posenc.errors.PositionLimitError: learned DETR row table holds 50 feature-map rows (0..49); asked for feature-map row 50, 1 past the end
    """

    def __init__(
        self,
        num_pos_feats: int,
        *,
        num_rows: int = LEARNED_DETR_ROWS,
        param_dtype: jax.typing.DTypeLike = jnp.float32,
        embedding_init: nnx.Initializer = detr_embed_init,
        rngs: nnx.Rngs,
    ):
        shape = (check_bound("num_rows", num_rows, MAX_FEATURE_SIDE), num_pos_feats)
        self.row_embeddings = _param(embedding_init(rngs.params(), shape, param_dtype), AXES["position_embeddings"])
        self.column_embeddings = _param(embedding_init(rngs.params(), shape, param_dtype), AXES["position_embeddings"])

    def __call__(self, mask: jax.typing.ArrayLike) -> jax.Array:
        """``(batch, 2 * num_pos_feats, H, W)`` for a ``(batch, H, W)`` mask (only its shape is used)."""
        return detr_learned_embedding(mask, self.row_embeddings[...], self.column_embeddings[...])


class ConvPositionalEmbedding(nnx.Module):
    """A wav2vec2-style convolutional position embedding (wav2vec2, HuBERT, UniSpeech(-SAT),
    Data2Vec-Audio, SEW, SEW-D, OmniASR): a thin shell over
    :func:`flax_posenc.conv_position.conv_positions`.

    Parameters ``kernel`` ``(num_layers, kernel_size, dim // groups, dim)`` (the weight norm folded)
    and ``bias`` ``(num_layers, dim)``, logical axes ``(None, None, None, "embed")`` and
    ``(None, "embed")``. A call on hidden states ``(batch, frames, dim)`` returns the position term
    (``add=True``: the hidden states with it added, as the model's encoder does; SEW: pooled by
    the stride). Nothing limits the frames; the shapes are checked while tracing.

    Args:
      spec: a :class:`~flax_posenc.ConvPositionSpec` (width, kernel, groups, stride, layers, ...).
      dtype: computation dtype (``None``: that of the inputs and parameters); param_dtype: the
        parameters'; kernel_init: initializer of ``kernel``; rngs: ``nnx.Rngs`` with ``params``.

    >>> from flax import nnx
    >>> import jax.numpy as jnp
    >>> import flax_posenc as fp
    >>> conv = ConvPositionalEmbedding(fp.ConvPositionSpec(16, 4, groups=2), rngs=nnx.Rngs(0))
    >>> conv(jnp.ones((1, 10, 16))).shape
    (1, 10, 16)
    """

    def __init__(
        self,
        spec: ConvPositionSpec,
        /,
        *,
        dtype: jax.typing.DTypeLike | None = None,
        param_dtype: jax.typing.DTypeLike = jnp.float32,
        kernel_init: nnx.Initializer = shells.conv_position_init,
        rngs: nnx.Rngs,
    ):
        if not isinstance(spec, ConvPositionSpec):
            raise TypeError(f"spec: expected a ConvPositionSpec, found {type(spec).__name__}")
        self.spec = spec
        self.kernel = _param(kernel_init(rngs.params(), spec.kernel_shape, param_dtype), CONV_POSITION_AXES["kernel"])
        self.bias = _param(jnp.zeros(spec.bias_shape, param_dtype), CONV_POSITION_AXES["bias"])
        self.dtype = dtype

    def __call__(self, hidden: jax.Array, *, add: bool = False) -> jax.Array:
        """The position term ``(batch, frames_out, dim)`` of ``hidden`` (``add=True``: added to it)."""
        return shells.call_conv_positions(self.spec, self.kernel[...], self.bias[...], hidden, add, self.dtype)

    @classmethod
    def from_pretrained(
        cls,
        source: str | os.PathLike,
        *,
        dtype: jax.typing.DTypeLike | None = None,
        param_dtype: jax.typing.DTypeLike = jnp.float32,
    ) -> ConvPositionalEmbedding:
        """The position convolution of a speech checkpoint (weight norm folded in float64).

        Equals transformers' ``pos_conv_embed`` (float32: within 1e-5 of its largest output, see
        docs/vision-audio.md). Raises :class:`~flax_posenc.CheckpointError` as
        :func:`~flax_posenc.conversion.load_conv_positions`.

        conv = ConvPositionalEmbedding.from_pretrained("path/to/wav2vec2-base")
        """
        spec, params = shells.conv_position_source(source)
        return _loaded(cls, spec, params, param_dtype=param_dtype, dtype=dtype)


__all__: list[str] = ["default_embed_init"]  # and every public module class (the last line of this file)


# ----------------------------------------------------------------------------- window bias (issue 35)
from flax_posenc.shells import window_bias_call, window_bias_source  # noqa: E402 - the block stays self-contained
from flax_posenc.window_bias_config import WindowBiasSpec  # noqa: E402
from flax_posenc.windows import WINDOW_BIAS_AXES  # noqa: E402


class WindowRelativeBias(_FlatCall, nnx.Module):
    """Swin's (and BEiT's) learned window relative position bias ``(heads, N, N)``: a thin shell
    over :func:`flax_posenc.window_bias` and :func:`flax_posenc.resize_window_table`.

    Parameter ``embedding`` ``(rows, num_heads)``, ``rows = (2h-1) * (2w-1)`` (``+ 3`` with BEiT's
    class token), logical axes ``(None, "heads")``. A call returns the bias of one window of
    ``N = h * w`` patches (``+ 1`` with the class token first), to add to that window's attention
    logits. Every pair of a window has a row; another window (``window=``) resizes the table by
    ``convention`` (``"timm"``: ``resize_rel_pos_bias_table``; ``"transformers"``: BEiT's bilinear).

    Build it from its flat arguments, ``WindowRelativeBias(num_heads, window, rngs=...)``, or from a
    spec, ``WindowRelativeBias(WindowBiasSpec(num_heads, window), rngs=...)``.

    Args:
      num_heads: heads, or a :class:`~flax_posenc.WindowBiasSpec` (then no other flat argument).
      window: ``(h, w)`` patches of a window (an int: square); class_token: BEiT's (default ``False``).
      convention: how another window resizes the table; dtype: output dtype (``None``: the table's);
      param_dtype, embedding_init, rngs: the table's dtype, initializer and ``params`` stream.

    >>> from flax import nnx
    >>> import flax_posenc as fp
    >>> bias = WindowRelativeBias(fp.WindowBiasSpec(4, (7, 7)), rngs=nnx.Rngs(0))
    >>> bias().shape, bias(window=8).shape
    ((4, 49, 49), (4, 64, 64))
    >>> WindowRelativeBias(2, 3, class_token=True, rngs=nnx.Rngs(0)).embedding.shape
    (28, 2)
    """

    def __init__(
        self,
        num_heads: int | WindowBiasSpec,
        window: Any = None,
        *,
        class_token: bool | None = None,
        convention: str = "timm",
        dtype: jax.typing.DTypeLike | None = None,
        param_dtype: jax.typing.DTypeLike = jnp.float32,
        embedding_init: nnx.Initializer = default_embed_init,
        rngs: nnx.Rngs,
    ):
        build, flat_names = WindowBiasSpec.from_arguments, "num_heads, window, class_token=False"
        flat = dict(window=window, class_token=class_token)
        self.spec = shells.resolve_spec("WindowRelativeBias", WindowBiasSpec, flat_names, num_heads, build, **flat)
        self.convention = convention
        self.dtype = dtype
        self.embedding = _param(embedding_init(rngs.params(), self.spec.table_shape, param_dtype), WINDOW_BIAS_AXES)

    def __call__(self, window: Any = None) -> jax.Array:
        """``(heads, N, N)``: the bias of ``window`` (``None``: the spec's; another resizes the table)."""
        return window_bias_call(self.spec, self.embedding[...], window, self.convention, self.dtype)

    @classmethod
    def from_pretrained(
        cls,
        source: str | os.PathLike,
        *,
        layer: int = 0,
        convention: str = "timm",
        dtype: jax.typing.DTypeLike | None = None,
        param_dtype: jax.typing.DTypeLike = jnp.float32,
    ) -> WindowRelativeBias:
        """Layer ``layer``'s table of a Swin, DonutSwin, MaskFormerSwin, BEiT or Data2Vec-Vision
        checkpoint (BEiT's shared table is layer 0 when present); equal to the model's own bias.

        Raises :class:`~flax_posenc.CheckpointError` as :func:`~flax_posenc.conversion.load_window_bias`,
        and for SwinV2 (an MLP, no table: :func:`~flax_posenc.continuous_window_bias`).

        bias = WindowRelativeBias.from_pretrained("path/to/swin-tiny", layer=3)
        """
        spec, params = window_bias_source(source, layer)
        return _loaded(cls, spec, params, param_dtype=param_dtype, convention=convention, dtype=dtype)


# ----------------------------------------------------------------------------- vision-tower RoPE (issue 35, item 2)


class VisionRotaryEmbedding(shells.VisionRotaryCalls, nnx.Module):
    """A vision tower's 2-D rotary position embedding of queries or keys; no parameters.

    A thin shell over :func:`flax_posenc.apply_vision_rope`: each rotary pair turns with its
    patch's row or column (:class:`~flax_posenc.VisionRopeConfig`: Pixtral, Qwen2/2.5-VL, DINOv3),
    equal to the model's own rotary module and apply function.

    Args:
      config: a :class:`~flax_posenc.VisionRopeConfig` (e.g. from :meth:`from_pretrained`).
      on_overflow: policy for traced rows or columns past ``config.limit`` (Pixtral's trained grid).
      seq_axis: ``-3`` for ``(..., tokens, heads, head_dim)`` (default), ``-2`` for Hugging Face's
        ``(..., heads, tokens, head_dim)``.

    >>> import jax.numpy as jnp
    >>> import flax_posenc as fp
    >>> cfg = fp.VisionRopeConfig(head_dim=8)
    >>> rope = fp.nnx.VisionRotaryEmbedding(cfg)
    >>> rope(jnp.ones((6, 2, 8)), cfg.positions([[1, 2, 3]])).shape   # (patches, heads, head_dim)
    (6, 2, 8)
    """

    def __init__(self, config: VisionRopeConfig, *, on_overflow: OverflowPolicy = "error", seq_axis: int = -3):
        check_policy(on_overflow)
        if not isinstance(config, VisionRopeConfig):
            raise TypeError(f"config: expected a VisionRopeConfig, got {type(config).__name__}")
        self.config = config
        self.on_overflow = on_overflow
        self.seq_axis = seq_axis

    @classmethod
    def from_pretrained(
        cls, source: str | os.PathLike, *, on_overflow: OverflowPolicy = "error", seq_axis: int = -3
    ) -> VisionRotaryEmbedding:
        """The vision-tower RoPE of a checkpoint (its ``config.json``; a composite's ``vision_config``).

        Raises:
          CheckpointError: the source has no vision-tower RoPE, or an unreadable source.

        rope = VisionRotaryEmbedding.from_pretrained("path/to/pixtral-12b")
        """
        return cls(shells.vision_rope_source(source), on_overflow=on_overflow, seq_axis=seq_axis)


__all__ += ["VisionRotaryEmbedding"]


class BoundingBoxEmbedding(_FlatCall, nnx.Module):
    """A document model's 2-D bounding-box tables (LayoutLM, LayoutLMv3, LiLT): boxes -> vectors.

    Four parameters, ``x_embedding``, ``y_embedding`` (``(rows, coord_dim)``) and ``h_embedding``,
    ``w_embedding`` (``(rows, shape_dim)``), logical axes ``(None, "embed")``. A call on integer
    boxes ``(..., 4)`` = ``(x0, y0, x1, y1)`` returns ``(..., spec.out_dim)``: the six rows summed
    (LayoutLM) or concatenated (LayoutLMv2/v3, LiLT), as :func:`~flax_posenc.bbox_embedding`
    computes them. A known coordinate past ``rows - 1``, or ``x1 < x0`` / ``y1 < y0``, raises
    :class:`~flax_posenc.PositionLimitError` while tracing; traced boxes follow ``on_overflow``.

    Build it from its flat arguments, ``BoundingBoxEmbedding(rows, coord_dim, shape_dim=...,
    combine=..., shape_clip=..., position_name=..., rngs=...)`` (the same as :meth:`from_arguments`;
    see :meth:`BboxSpec.from_arguments <flax_posenc.BboxSpec.from_arguments>`), or from a spec,
    ``BoundingBoxEmbedding(BboxSpec(rows, coord_dim, shape_dim), rngs=...)``.

    >>> import jax.numpy as jnp
    >>> from flax import nnx
    >>> import flax_posenc as fp
    >>> boxes = BoundingBoxEmbedding(fp.BboxSpec(1024, 8, 8), rngs=nnx.Rngs(0))
    >>> boxes(jnp.array([[[10, 20, 110, 40]]])).shape
    (1, 1, 8)
    >>> boxes(jnp.array([[[10, 20, 1024, 40]]]))
    Traceback (most recent call last):
    ...
    flax_posenc.errors.PositionLimitError: bbox: bbox tables hold 1024 coordinates (0..1023); asked for x1 1024 in box [10, 20, 1024, 40], 1 past the end
    """

    def __init__(
        self,
        rows: int | BboxSpec,
        coord_dim: int | None = None,
        *,
        shape_dim: int | None = None,
        combine: Any = None,
        shape_clip: int | None = None,
        position_name: str | None = None,
        param_dtype: jax.typing.DTypeLike = jnp.float32,
        embedding_init: nnx.Initializer = default_embed_init,
        on_overflow: OverflowPolicy = "error",
        rngs: nnx.Rngs,
    ):
        build, flat_names = BboxSpec.from_arguments, "rows, coord_dim, ..."
        flat = dict(coord_dim=coord_dim, shape_dim=shape_dim, combine=combine, shape_clip=shape_clip)
        spec = shells.resolve_spec(
            "BoundingBoxEmbedding", BboxSpec, flat_names, rows, build, **flat, position_name=position_name
        )
        self.spec = spec
        check_policy(on_overflow)
        self.on_overflow = on_overflow
        shapes, axes = self.spec.table_shapes, AXES["position_embeddings"]
        self.x_embedding = _param(embedding_init(rngs.params(), shapes["x"], param_dtype), axes)
        self.y_embedding = _param(embedding_init(rngs.params(), shapes["y"], param_dtype), axes)
        self.h_embedding = _param(embedding_init(rngs.params(), shapes["h"], param_dtype), axes)
        self.w_embedding = _param(embedding_init(rngs.params(), shapes["w"], param_dtype), axes)

    def __call__(self, bbox: jax.typing.ArrayLike) -> jax.Array:
        """``bbox.shape[:-1] + (spec.out_dim,)`` for integer boxes ``(..., 4)``."""
        tables = (self.x_embedding[...], self.y_embedding[...], self.h_embedding[...], self.w_embedding[...])
        return bbox_embedding(bbox, *tables, self.spec, on_overflow=self.on_overflow)

    @classmethod
    def from_pretrained(
        cls,
        source: str | os.PathLike,
        *,
        on_overflow: OverflowPolicy = "error",
        param_dtype: jax.typing.DTypeLike = jnp.float32,
    ) -> BoundingBoxEmbedding:
        """The bounding-box tables of a LayoutLM, LayoutLMv3 or LiLT checkpoint
        (:func:`~flax_posenc.conversion.load_bbox_tables`).

        Raises:
          CheckpointError: as :func:`~flax_posenc.conversion.load_bbox_tables` (one line).
        """
        spec, params = shells.bbox_source(source)
        return _loaded(cls, spec, params, param_dtype=param_dtype, on_overflow=on_overflow)


# ----------------------------------------------------------------------------- decomposed relative positions (issue 35 item 6)
from flax_posenc.decomposed_rel_pos import decomposed_rel_pos_bias  # noqa: E402 - the block stays self-contained
from flax_posenc.rel_pos_config import DecomposedRelPosSpec  # noqa: E402

#: Logical axes of ``rel_pos_h`` / ``rel_pos_w``: offsets, then the head's channels.
REL_POS_AXES = (None, "kv")


class DecomposedRelativePosition(nnx.Module):
    """SAM/ViTDet's decomposed relative positions of one attention layer: a thin shell over
    :func:`flax_posenc.decomposed_rel_pos_bias`.

    Parameters ``rel_pos_h`` ``(2h - 1, head_dim)`` and ``rel_pos_w`` ``(2w - 1, head_dim)`` (zeros,
    as transformers initialises them), logical axes ``(None, "kv")``. A call on the unscaled queries
    ``(..., qh * qw, head_dim)`` returns the bias ``(..., qh * qw, kh * kw)`` to add to the attention
    logits; another size than the spec's resamples the tables (``get_rel_pos``): no limit.

    Args:
      spec: a :class:`~flax_posenc.rel_pos_config.DecomposedRelPosSpec` (``size``, ``head_dim``).
      dtype: output dtype (``None``: the query's); param_dtype: the tables'; rngs: unused (zeros).

    >>> import jax.numpy as jnp
    >>> from flax_posenc.rel_pos_config import DecomposedRelPosSpec
    >>> rel = DecomposedRelativePosition(DecomposedRelPosSpec((3, 3), 8), rngs=nnx.Rngs(0))
    >>> rel(jnp.ones((2, 9, 8))).shape, rel(jnp.ones((2, 20, 8)), (4, 5)).shape
    ((2, 9, 9), (2, 20, 20))
    """

    def __init__(
        self,
        spec: DecomposedRelPosSpec,
        /,
        *,
        dtype: jax.typing.DTypeLike | None = None,
        param_dtype: jax.typing.DTypeLike = jnp.float32,
        rngs: nnx.Rngs | None = None,
    ):
        if not isinstance(spec, DecomposedRelPosSpec):
            raise TypeError(f"spec: expected a DecomposedRelPosSpec, found {type(spec).__name__}")
        self.spec = spec
        shape_h, shape_w = spec.table_shapes
        self.rel_pos_h = _param(jnp.zeros(shape_h, param_dtype), REL_POS_AXES)
        self.rel_pos_w = _param(jnp.zeros(shape_w, param_dtype), REL_POS_AXES)
        self.dtype = dtype

    def __call__(self, query: jax.Array, q_size: Any = None, k_size: Any = None) -> jax.Array:
        """``(..., qh * qw, kh * kw)``: the bias of ``query`` on a ``q_size`` grid (``None``: the spec's)
        against keys on ``k_size`` (``None``: ``q_size``)."""
        q = tuple(q_size) if q_size is not None else self.spec.size
        k = tuple(k_size) if k_size is not None else q
        bias = decomposed_rel_pos_bias(query, self.rel_pos_h[...], self.rel_pos_w[...], q, k)
        return bias if self.dtype is None else bias.astype(self.dtype)


__all__ = sorted({*__all__, *shells.public_modules(globals(), nnx.Module)})  # every public module class
