#!/usr/bin/env python3
"""kiln's ONNX export against the onnx package and ONNX Runtime (issue #16).

usage: onnx_check.py IO_TOOL WORKDIR

IO_TOOL onnx export WORKDIR (test/onnx_tool.cpp) writes models and kiln's results on their inputs; each model must pass
onnx.checker.check_model(full_check=True), and ONNX Runtime's outputs on the same inputs must match kiln's to 1e-5
relative (exactly for integers and bools). Exit 77 (a skip, which CTest reports as such) when onnx or onnxruntime
cannot be imported, saying so.
"""
import glob
import os
import shutil
import subprocess
import sys

try:
    import numpy as np
    import onnx
    import onnxruntime as ort
    from safetensors.numpy import load_file
except ImportError as e:  # the test command installs them where PyPI can be reached
    print("onnx_check: SKIPPED: the onnx, onnxruntime or safetensors package cannot be imported (%s)" % e)
    sys.exit(77)

tool, work = sys.argv[1], sys.argv[2]
shutil.rmtree(work, ignore_errors=True)
subprocess.run([tool, "onnx", "export", work], check=True)
failures = []


def check(ok, what):
    print(("ok: " if ok else "FAILED: ") + what)
    if not ok:
        failures.append(what)


models = sorted(glob.glob(os.path.join(work, "*.onnx")))
check(len(models) >= 9, "the tool wrote %d models" % len(models))
for path in models:
    name = os.path.basename(path)[:-5]
    model = onnx.load(path)
    try:
        onnx.checker.check_model(model, full_check=True)
        check(True, "%s: onnx.checker accepts it (full check)" % name)
    except Exception as e:  # noqa: BLE001 - the checker's own exception types vary by version
        check(False, "%s: onnx.checker: %s" % (name, e))
        continue
    check(model.ir_version == 8 and [o.version for o in model.opset_import if o.domain == ""] == [17],
          "%s: IR version 8, opset 17" % name)
    # The patterns ONNX has one operator for are written as that operator, and nothing the outputs do not need.
    ops = [n.op_type for n in model.graph.node]
    want_ops = {"reference": {"Gemm", "Relu"}, "graph_mode": {"Gemm", "Relu"}, "classifier": {"Softmax", "LogSoftmax", "Gemm", "Tanh"},
                "composites": {"Gemm", "Squeeze", "Mod", "Atan"}, "many_ops": {"ReduceMean", "ReduceProd", "ArgMin"},
                "layout_ops": {"Tile", "Pad", "Einsum", "Gather", "GatherElements", "ScatterElements"},
                "cnn": {"Conv", "MaxPool", "AveragePool", "Gemm"}, "cnn2": {"Conv", "MaxPool", "AveragePool"},
                "embedding": {"Gather", "ReduceMean", "Gemm"}, "layer_norm": {"LayerNormalization"},
                "batch_norm": {"Conv", "BatchNormalization", "Relu"}, "decoder": {"ConvTranspose", "Relu"},
                "recurrent": {"MatMul", "Sigmoid", "Tanh", "Concat"}, "norms": {"ReduceMean", "Sqrt", "Gather"}}.get(name, set())
    check(want_ops <= set(ops), "%s: written with %s (operators: %s)" % (name, sorted(want_ops), sorted(set(ops))))
    if name == "classifier":
        check("Exp" not in ops and "Sub" not in ops and "MatMul" not in ops,
              "classifier: softmax's parts and the products under Gemm are not written as well")
        dims = [[d.dim_value if d.HasField("dim_value") else d.dim_param for d in o.type.tensor_type.shape.dim]
                for o in model.graph.output]
        check(dims == [["dim0", 4], ["dim0"], ["dim0", 4]],
              "classifier: outputs have their static extents fixed and the batch named as the input's (%s)" % dims)
    if name == "attention":
        dims = [d.dim_value if d.HasField("dim_value") else d.dim_param for d in model.graph.input[0].type.tensor_type.shape.dim]
        check(dims == ["batch", "length", 8], "attention: the input's dimensions carry the spec's names (%s)" % dims)
        dims = [d.dim_value if d.HasField("dim_value") else d.dim_param for d in model.graph.output[0].type.tensor_type.shape.dim]
        check(dims == ["batch", "length", 8], "attention: the output's dimensions are the input's (%s)" % dims)
    if name == "cnn":
        check(not {"Slice", "MatMul", "Pad", "ReduceMax", "ReduceSum"} & set(ops),
              "cnn: the convolution and the pools are one operator each, their parts not written (operators: %s)" % sorted(set(ops)))
        conv = [n for n in model.graph.node if n.op_type == "Conv"]
        attrs = {a.name: list(a.ints) if a.ints else a.i for a in conv[0].attribute} if conv else {}
        check(len(conv) == 1 and attrs.get("strides") == [1, 2] and attrs.get("pads") == [1, 1, 1, 1] and
              attrs.get("kernel_shape") == [3, 3] and len(conv[0].input) == 3,
              "cnn: Conv with its strides, pads, kernel and bias (%s)" % attrs)
    if name == "cnn2":
        pools = [n for n in model.graph.node if n.op_type == "MaxPool"]
        check(len(pools) == 1 and any(a.name == "ceil_mode" and a.i == 1 for a in pools[0].attribute),
              "cnn2: the max pool whose extent ONNX's ceil_mode formula gives is a MaxPool; the other is written as its parts")
        conv = [n for n in model.graph.node if n.op_type == "Conv"]
        check(len(conv) == 1 and len(conv[0].input) == 2 and
              {(a.name, a.i) for a in conv[0].attribute if a.type == onnx.AttributeProto.INT} == {("group", 2)},
              "cnn2: Conv without a bias, with its groups")
    if name == "decoder":
        convs = [n for n in model.graph.node if n.op_type == "ConvTranspose"]
        attrs = [{a.name: list(a.ints) if a.ints else a.i for a in n.attribute} for n in convs]
        check(len(convs) == 2 and [len(n.input) for n in convs] == [3, 2] and attrs[0].get("output_padding") == [1, 0] and
              attrs[0].get("strides") == [2, 2] and attrs[1].get("group") == 2 and attrs[1].get("dilations") == [2, 1] and
              attrs[1].get("pads") == [0, 1, 0, 1] and not {"MatMul", "Slice", "Pad"} & set(ops),
              "decoder: two ConvTransposes with their attributes, none of their parts (%s)" % attrs)
    if name == "layer_norm":
        norms = [n for n in model.graph.node if n.op_type == "LayerNormalization"]
        eps = sorted(round(a.f, 9) for n in norms for a in n.attribute if a.name == "epsilon")
        axes = sorted(a.i for n in norms for a in n.attribute if a.name == "axis")
        check(len(norms) == 3 and [len(n.input) for n in norms] == [3, 3, 2] and eps == [1e-05, 1e-05, 0.001] and axes == [1, 2, 2],
              "layer_norm: three LayerNormalizations (with weight and bias, bias only over two axes, neither): %s" %
              [(list(n.input), [(a.name, a.i or a.f) for a in n.attribute]) for n in norms])
        check(not {"ReduceMean", "ReduceSum", "Sqrt", "Div"} & set(ops),
              "layer_norm: the normalizations' parts are not written (operators: %s)" % sorted(set(ops)))
    if name == "batch_norm":
        norms = [n for n in model.graph.node if n.op_type == "BatchNormalization"]
        check(len(norms) == 2 and not {"ReduceMean", "Sqrt", "Div"} & set(ops),
              "batch_norm: two BatchNormalizations and none of their parts (operators: %s)" % sorted(set(ops)))
    if name == "composites":
        gemm = [n for n in model.graph.node if n.op_type == "Gemm"]
        check(len(gemm) == 1 and any(a.name == "transB" and a.i == 1 for a in gemm[0].attribute),
              "composites: a matmul with a transposed weight plus a bias is one Gemm with transB=1")
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    ref = load_file(path[:-5] + ".safetensors")
    cases = sorted({k.split("/")[1] for k in ref})
    for c in cases:
        feeds = {}
        k = 0
        while "input_%d/%s" % (k, c) in ref:
            feeds["input_%d" % k] = ref["input_%d/%s" % (k, c)]
            k += 1
        outs = session.run(None, feeds)
        # An output's dimension named as an input's is that input's extent in every case, and a fixed one is fixed.
        extent_of = {}
        for inp in model.graph.input:
            for a, d in enumerate(inp.type.tensor_type.shape.dim):
                if d.dim_param and inp.name in feeds:
                    extent_of.setdefault(d.dim_param, feeds[inp.name].shape[a])
        for j, o in enumerate(model.graph.output):
            for a, d in enumerate(o.type.tensor_type.shape.dim):
                if d.dim_param in extent_of and j < len(outs):
                    check(outs[j].shape[a] == extent_of[d.dim_param],
                          "%s case %s output %d axis %d, named '%s' like an input's: %d, the input's %d" %
                          (name, c, j, a, d.dim_param, outs[j].shape[a], extent_of[d.dim_param]))
                elif d.HasField("dim_value") and j < len(outs):
                    check(outs[j].shape[a] == d.dim_value, "%s case %s output %d axis %d: %d, as declared (%d)" %
                          (name, c, j, a, outs[j].shape[a], d.dim_value))
        for j, got in enumerate(outs):
            want = ref.get("output_%d/%s" % (j, c))
            if want is None:
                check(False, "%s case %s: kiln has no output %d" % (name, c, j))
                continue
            ok = got.dtype == want.dtype and got.shape == want.shape
            if ok and want.dtype.kind == "f":
                ok = bool(np.allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True))
                # (equal values, infinities and NaN included, differ by 0; the subtraction of equal infinities is not warned of)
                with np.errstate(invalid="ignore"):
                    rel = np.where((got == want) | (np.isnan(got) & np.isnan(want)), 0.0,
                                   np.abs(got - want) / np.maximum(np.abs(want), 1e-6))
                err = float(np.max(rel)) if want.size else 0.0
            else:
                ok = ok and bool(np.array_equal(got, want))
                err = 0.0
            check(ok, "%s case %s output %d: %s %s, ONNX Runtime agrees (largest relative difference %.2e)" %
                  (name, c, j, want.dtype, want.shape, err))

# ---- import: a model written with the onnx package's helpers (ONNX Runtime's outputs expected), and kiln's own ----
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

rng = np.random.default_rng(7)
w1 = rng.standard_normal((16, 10)).astype(np.float32)  # Gemm with transB, as PyTorch exports Linear
b1 = rng.standard_normal(16).astype(np.float32)
w2 = rng.standard_normal((16, 4)).astype(np.float32)
init = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(b1, "b1"), numpy_helper.from_array(w2, "w2"),
        numpy_helper.from_array(np.array([0, 2], dtype=np.int64), "starts"),
        numpy_helper.from_array(np.array([2, 4], dtype=np.int64), "ends"),
        numpy_helper.from_array(np.array([1], dtype=np.int64), "axis1"),
        numpy_helper.from_array(np.array([-1, 2], dtype=np.int64), "shape")]
nodes = [
    helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1),
    helper.make_node("Relu", ["h"], ["r"]),
    helper.make_node("MatMul", ["r", "w2"], ["logits"]),
    helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
    helper.make_node("ArgMax", ["probs"], ["cls"], axis=1, keepdims=0),
    helper.make_node("ReduceMean", ["logits"], ["m"], axes=[1], keepdims=1),
    helper.make_node("Sub", ["logits", "m"], ["centred"]),
    helper.make_node("Slice", ["centred", "starts", "ends"], ["corner"]),
    helper.make_node("Reshape", ["corner", "shape"], ["flat"]),
    helper.make_node("Transpose", ["flat"], ["ft"], perm=[1, 0]),
    helper.make_node("Unsqueeze", ["ft", "axis1"], ["u"]),
    helper.make_node("Squeeze", ["u", "axis1"], ["sq"]),
    helper.make_node("Constant", [], ["half"], value=numpy_helper.from_array(np.array(0.5, dtype=np.float32))),
    helper.make_node("Greater", ["sq", "half"], ["big"]),
    helper.make_node("Where", ["big", "sq", "half"], ["clipped"]),
    helper.make_node("Cast", ["cls"], ["cls32"], to=TensorProto.INT32),
    helper.make_node("Shape", ["x"], ["xs"]),
    helper.make_node("Gather", ["xs", "zero"], ["batch"], axis=0),
    helper.make_node("Concat", ["probs", "logits"], ["both"], axis=1),
    helper.make_node("ReduceSum", ["both", "axis1"], ["rs"], keepdims=0),
    # A shape computed from constants (kiln's check run must keep its values exact and readable).
    helper.make_node("ConstantOfShape", ["two_dims"], ["cs"], value=numpy_helper.from_array(np.array([3], dtype=np.int64))),
    helper.make_node("Mul", ["cs", "one64"], ["cs1"]),
    helper.make_node("Expand", ["half", "cs1"], ["ex"]),
]
init.append(numpy_helper.from_array(np.array(0, dtype=np.int64), "zero"))
init.append(numpy_helper.from_array(np.array([2], dtype=np.int64), "two_dims"))
init.append(numpy_helper.from_array(np.array(1, dtype=np.int64), "one64"))
graph = helper.make_graph(nodes, "helper_mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 10])],
                          [helper.make_tensor_value_info(n, t, sh) for n, t, sh in
                           [("probs", TensorProto.FLOAT, ["batch", 4]), ("cls32", TensorProto.INT32, ["batch"]),
                            ("clipped", TensorProto.FLOAT, [2, 2]), ("batch", TensorProto.INT64, []),
                            ("rs", TensorProto.FLOAT, ["batch"]), ("ex", TensorProto.FLOAT, [3, 3])]], init)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
onnx.checker.check_model(model, full_check=True)
path = os.path.join(work, "helper_mlp.onnx")
onnx.save(model, path)
session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
cases = {}
for c, n in enumerate([5, 2]):
    x = rng.standard_normal((n, 10)).astype(np.float32)
    cases["input_0/%d" % c] = x
    for j, o in enumerate(session.run(None, {"x": x})):
        cases["output_%d/%d" % (j, c)] = np.array(o, copy=True, order="C")  # (ascontiguousarray makes 0-d 1-d)
from safetensors.numpy import save_file  # noqa: E402
save_file(cases, os.path.join(work, "helper_mlp.safetensors"))
# The output signature kiln reads from the declared outputs (names of the input's dimensions kept).
with open(os.path.join(work, "helper_mlp.outputs"), "w") as f:
    f.write("{(batch, 4) float32, (batch,) int32, (2, 2) float32, () int64, (batch,) float32, (3, 3) float32}\n")

def save_signature_model(graph, name, first_line, suffix):
    """Saves `graph` (opset 17, IR 8) as <name>.onnx with <name><suffix> holding first_line: the output signature
    kiln must read (".outputs"), or the refusal it must give (".refusal")."""
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, os.path.join(work, name + ".onnx"))
    with open(os.path.join(work, name + suffix), "w") as f:
        f.write(first_line + "\n")


# Declared outputs that the model's own runs contradict (a wrong extent, a name of no input, a name the run does not
# bear out, another rank) are dynamic and unnamed in kiln's output signature; ONNX Runtime is not asked. The last
# two agree with the first check run by coincidence (its batch is 2), and the second run, at batch 3, tells.
graph = helper.make_graph([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["x"], ["b"]),
                           helper.make_node("Transpose", ["x"], ["c"], perm=[1, 0]), helper.make_node("Abs", ["x"], ["d"]),
                           helper.make_node("Sigmoid", ["x"], ["e"]),
                           helper.make_node("Slice", ["x", "zero", "two", "one"], ["g"])],
                          "declared", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["batch", 4]),
                           helper.make_tensor_value_info("b", TensorProto.FLOAT, ["rows", 3]),
                           helper.make_tensor_value_info("c", TensorProto.FLOAT, ["batch", "batch"]),
                           helper.make_tensor_value_info("d", TensorProto.FLOAT, ["batch"]),
                           helper.make_tensor_value_info("e", TensorProto.FLOAT, [2, 3]),
                           helper.make_tensor_value_info("g", TensorProto.FLOAT, ["batch", "batch"])],
                          [numpy_helper.from_array(np.array([0], dtype=np.int64), "zero"),
                           numpy_helper.from_array(np.array([2], dtype=np.int64), "two"),
                           numpy_helper.from_array(np.array([1], dtype=np.int64), "one")])
save_signature_model(graph, "declared_wrong", "{(batch, ?) float32, (?, 3) float32, (?, batch) float32, (?, ?) float32, "
                     "(?, 3) float32, (batch, ?) float32}", ".outputs")


# Models of the newer opsets, as the onnx package writes them by default and as newer exporters do: opset 18 made the
# axes of ReduceMean/Max/Min/Prod an input and gave Pad an axes input; 19 gave Cast 'saturate'; 28 defined Mod with
# fmod=0 on floating numbers; Gelu came in opset 20. Each is built at its opset and IR version and compared with ONNX Runtime.
def newer_opset_model(opset, ir):
    from onnx import TensorProto as T
    c = [numpy_helper.from_array(np.array([1], dtype=np.int64), "ax1"),
         numpy_helper.from_array(np.array([0], dtype=np.int64), "ax0"),
         numpy_helper.from_array(np.array([-1], dtype=np.int64), "axm1"),
         numpy_helper.from_array(np.array([1, 2], dtype=np.int64), "pads_ax1"),
         numpy_helper.from_array(np.array([1, 0, 0, 1], dtype=np.int64), "pads_all"),
         numpy_helper.from_array(np.array(0.5, dtype=np.float32), "half"),
         numpy_helper.from_array(np.array([-1, 2], dtype=np.int64), "shape2")]
    n = [helper.make_node("ReduceMean", ["x", "ax1"], ["mean1"], keepdims=1),
         helper.make_node("ReduceMax", ["x", "ax0"], ["max0"], keepdims=0),
         helper.make_node("ReduceMin", ["x", "axm1"], ["min_last"], keepdims=1),
         helper.make_node("ReduceProd", ["x"], ["prod_all"], keepdims=0),
         helper.make_node("Pad", ["x", "pads_ax1", "half", "ax1"], ["pad_ax1"]),
         helper.make_node("Pad", ["x", "pads_all"], ["pad_all"]),
         helper.make_node("Cast", ["x"], ["as_int"], to=T.INT32, **({"saturate": 1} if opset >= 19 else {})),
         helper.make_node("Elu", ["x"], ["elu"], alpha=0.7),
         helper.make_node("Softplus", ["x"], ["softplus"]),
         helper.make_node("Round", ["x"], ["round"]),
         helper.make_node("Sin", ["x"], ["sin"]),
         helper.make_node("IsInf", ["x"], ["isinf"]),
         helper.make_node("Reshape", ["x", "shape2"], ["pairs"]),
         helper.make_node("Transpose", ["pairs"], ["pairs_t"], perm=[1, 0]),
         helper.make_node("Flatten", ["x"], ["flat"], axis=0)]
    outs = [("mean1", T.FLOAT, ["b", 1]), ("max0", T.FLOAT, [4]), ("min_last", T.FLOAT, ["b", 1]), ("prod_all", T.FLOAT, []),
            ("pad_ax1", T.FLOAT, ["b", 7]), ("pad_all", T.FLOAT, ["b1", 5]), ("as_int", T.INT32, ["b", 4]),
            ("elu", T.FLOAT, ["b", 4]), ("softplus", T.FLOAT, ["b", 4]), ("round", T.FLOAT, ["b", 4]), ("sin", T.FLOAT, ["b", 4]),
            ("isinf", T.BOOL, ["b", 4]), ("pairs_t", T.FLOAT, [2, "b2"]), ("flat", T.FLOAT, [1, "b4"])]
    if opset >= 20:
        n.append(helper.make_node("Gelu", ["x"], ["gelu"]))
        n.append(helper.make_node("Gelu", ["x"], ["gelu_tanh"], approximate="tanh"))
        outs += [("gelu", T.FLOAT, ["b", 4]), ("gelu_tanh", T.FLOAT, ["b", 4])]
    if opset >= 28:
        c.append(numpy_helper.from_array(np.array([1.5, -2.0, 0.75, -0.5], dtype=np.float32), "divisor"))
        n.append(helper.make_node("Mod", ["x", "divisor"], ["floor_mod"], fmod=0))
        outs.append(("floor_mod", T.FLOAT, ["b", 4]))
    graph = helper.make_graph(n, "opset%d" % opset, [helper.make_tensor_value_info("x", T.FLOAT, ["b", 4])],
                              [helper.make_tensor_value_info(nm, t, sh) for nm, t, sh in outs], c)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = ir
    return m


newer = {}
for opset, ir in [(18, 8), (21, 10), (25, 13), (28, 14)]:
    m = newer_opset_model(opset, ir)
    name = "helper_opset%d" % opset
    try:
        onnx.checker.check_model(m, full_check=True)
    except Exception as e:  # noqa: BLE001
        check(False, "%s: onnx.checker: %s" % (name, e))
        continue
    path = os.path.join(work, name + ".onnx")
    onnx.save(m, path)
    try:
        session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - an ONNX Runtime without this opset's kernels
        print("note: ONNX Runtime %s cannot run opset %d (%s); kiln's reading of it is not compared" % (ort.__version__, opset, str(e)[:120]))
        os.remove(path)
        continue
    cases = {}
    for k, rows in enumerate([3, 6]):
        x = (rng.standard_normal((rows, 4)) * 3).astype(np.float32)
        x[0, 0], x[-1, 1] = 2.5, -0.0  # a tie that Round takes to even, and a negative zero
        if opset >= 28:
            x[1, 2] = -0.75  # a multiple of the divisor: Mod gives a zero of the divisor's sign
        cases["input_0/%d" % k] = x
        for j, o in enumerate(session.run(None, {"x": x})):
            cases["output_%d/%d" % (j, k)] = np.array(o, copy=True, order="C")
    save_file(cases, os.path.join(work, name + ".safetensors"))
    newer[opset] = True
check(18 in newer and 28 in newer, "models of opsets 18 and 28 were written and run by ONNX Runtime (%s)" % sorted(newer))


# Ops that PyTorch and Keras export for their layers (Clip for ReLU6 and clamp, HardSigmoid and HardSwish, PRelu,
# Selu, Celu, Softsign, ThresholdedRelu, Mish, LayerNormalization, BatchNormalization in inference, CumSum, Size) and
# the norms among the reductions, at opset 17 (reduction axes as attributes) and 18 (axes as inputs), against ONNX
# Runtime on values that include infinities; LayerNormalization's and Dropout's other outputs are named but unread.
def layer_ops_model(opset):
    from onnx import TensorProto as T
    c = [numpy_helper.from_array(np.array(-1.0, dtype=np.float32), "lo"),
         numpy_helper.from_array(np.array(6.0, dtype=np.float32), "hi"),
         numpy_helper.from_array(np.array([0.25, -0.5, 1.0, 0.1], dtype=np.float32), "slope"),
         numpy_helper.from_array(np.array([1.5, 0.5, -1.0, 2.0], dtype=np.float32), "gamma"),
         numpy_helper.from_array(np.array([0.1, 0.2, 0.3, -0.4], dtype=np.float32), "beta"),
         numpy_helper.from_array(np.array([0.5, -0.25, 0.0, 1.0], dtype=np.float32), "run_mean"),
         numpy_helper.from_array(np.array([1.0, 4.0, 0.25, 2.0], dtype=np.float32), "run_var"),
         numpy_helper.from_array(np.array(1, dtype=np.int64), "axis1"),
         numpy_helper.from_array(np.array([1], dtype=np.int64), "ax1")]
    reduce_axes = (lambda op, out, **kw: helper.make_node(op, ["finite", "ax1"], [out], **kw)) if opset >= 18 else \
        (lambda op, out, **kw: helper.make_node(op, ["finite"], [out], axes=[1], **kw))
    n = [helper.make_node("Clip", ["x", "lo", "hi"], ["clip"]),
         helper.make_node("Clip", ["x", "", "hi"], ["clip_high"]),
         helper.make_node("Clip", ["x"], ["clip_none"]),
         helper.make_node("HardSigmoid", ["x"], ["hard_sigmoid"], alpha=0.3, beta=0.4),
         helper.make_node("HardSwish", ["x"], ["hard_swish"]),
         helper.make_node("PRelu", ["x", "slope"], ["prelu"]),
         helper.make_node("Selu", ["x"], ["selu"]),
         helper.make_node("Celu", ["x"], ["celu"], alpha=0.7),
         helper.make_node("Softsign", ["x"], ["softsign"]),
         helper.make_node("ThresholdedRelu", ["x"], ["thresholded"], alpha=0.5),
         helper.make_node("IsInf", ["x"], ["inf"]),
         helper.make_node("Where", ["inf", "lo", "x"], ["finite"]),
         helper.make_node("LayerNormalization", ["finite", "gamma", "beta"], ["layer_norm", "ln_mean", "ln_inv_std"], epsilon=1e-3),
         helper.make_node("LayerNormalization", ["finite", "gamma"], ["layer_norm_nobias"], axis=1),
         helper.make_node("BatchNormalization", ["finite", "gamma", "beta", "run_mean", "run_var"], ["batch_norm"]),
         helper.make_node("Dropout", ["finite"], ["dropped", "dropout_mask"]),
         helper.make_node("CumSum", ["dropped", "axis1"], ["cumsum"]),
         helper.make_node("CumSum", ["dropped", "axis1"], ["cumsum_excl_rev"], exclusive=1, reverse=1),
         helper.make_node("Size", ["x"], ["size"]),
         reduce_axes("ReduceL1", "l1", keepdims=1),
         reduce_axes("ReduceL2", "l2", keepdims=0),
         reduce_axes("ReduceSumSquare", "sum_square", keepdims=0),
         reduce_axes("ReduceLogSumExp", "log_sum_exp", keepdims=0),
         helper.make_node("Abs", ["finite"], ["abs"]),
         reduce_axes("ReduceLogSum", "log_sum", keepdims=1) if opset < 18 else helper.make_node("ReduceLogSum", ["abs", "ax1"], ["log_sum"], keepdims=1)]
    if opset < 18:  # (ReduceLogSum of |x| at opset 17 too)
        n[-1] = helper.make_node("ReduceLogSum", ["abs"], ["log_sum"], axes=[1], keepdims=1)
    outs = [("clip", T.FLOAT, ["b", 4]), ("clip_high", T.FLOAT, ["b", 4]), ("clip_none", T.FLOAT, ["b", 4]),
            ("hard_sigmoid", T.FLOAT, ["b", 4]), ("hard_swish", T.FLOAT, ["b", 4]), ("prelu", T.FLOAT, ["b", 4]),
            ("selu", T.FLOAT, ["b", 4]), ("celu", T.FLOAT, ["b", 4]), ("softsign", T.FLOAT, ["b", 4]),
            ("thresholded", T.FLOAT, ["b", 4]), ("layer_norm", T.FLOAT, ["b", 4]), ("layer_norm_nobias", T.FLOAT, ["b", 4]),
            ("batch_norm", T.FLOAT, ["b", 4]), ("cumsum", T.FLOAT, ["b", 4]), ("cumsum_excl_rev", T.FLOAT, ["b", 4]),
            ("size", T.INT64, []), ("l1", T.FLOAT, ["b", 1]), ("l2", T.FLOAT, ["b"]), ("sum_square", T.FLOAT, ["b"]),
            ("log_sum_exp", T.FLOAT, ["b"]), ("log_sum", T.FLOAT, ["b", 1])]
    # Split: sizes from an input, equal parts, and (opset 18) num_outputs with a smaller last part.
    c.append(numpy_helper.from_array(np.array([1, 3], dtype=np.int64), "sizes13"))
    n += [helper.make_node("Split", ["finite", "sizes13"], ["split_a", "split_b"], axis=1),
          helper.make_node("Split", ["finite"], ["split_c", "split_d"], axis=-1, **({"num_outputs": 2} if opset >= 18 else {}))]
    outs += [("split_a", T.FLOAT, ["b", 1]), ("split_b", T.FLOAT, ["b", 3]), ("split_c", T.FLOAT, ["b", 2]),
             ("split_d", T.FLOAT, ["b", 2])]
    # TopK: the largest 2 of each row with their indices, and the smallest 3 along the batch's other axis.
    c += [numpy_helper.from_array(np.array([2], dtype=np.int64), "k2"), numpy_helper.from_array(np.array([1], dtype=np.int64), "k1")]
    n += [helper.make_node("TopK", ["finite", "k2"], ["top_values", "top_indices"], axis=1),
          helper.make_node("TopK", ["finite", "k1"], ["low_values", "low_indices"], axis=0, largest=0)]
    outs += [("top_values", T.FLOAT, ["b", 2]), ("top_indices", T.INT64, ["b", 2]), ("low_values", T.FLOAT, [1, 4]),
             ("low_indices", T.INT64, [1, 4])]
    if opset >= 18:
        n.append(helper.make_node("Mish", ["finite"], ["mish"]))
        outs.append(("mish", T.FLOAT, ["b", 4]))
        n += [helper.make_node("Concat", ["finite", "finite"], ["twice"], axis=1),
              helper.make_node("Split", ["twice"], ["third_a", "third_b", "third_c"], axis=1, num_outputs=3)]
        outs += [("third_a", T.FLOAT, ["b", 3]), ("third_c", T.FLOAT, ["b", 2])]  # (third_b named, unread)
    graph = helper.make_graph(n, "layers%d" % opset, [helper.make_tensor_value_info("x", T.FLOAT, ["b", 4])],
                              [helper.make_tensor_value_info(nm, t, sh) for nm, t, sh in outs], c)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def write_with_runtime_outputs(name, m, inputs):
    """Checks and saves model m as WORK/name.onnx, and ONNX Runtime's outputs on each input x as WORK/name.safetensors."""
    onnx.checker.check_model(m, full_check=True)
    path = os.path.join(work, name + ".onnx")
    onnx.save(m, path)
    session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    cases = {}
    for k, x in enumerate(inputs):
        cases["input_0/%d" % k] = x
        for j, o in enumerate(session.run(None, {"x": x})):
            cases["output_%d/%d" % (j, k)] = np.array(o, copy=True, order="C")
    save_file(cases, os.path.join(work, name + ".safetensors"))


def layer_input(rows):
    x = (rng.standard_normal((rows, 4)) * 3).astype(np.float32)
    x[0, 1], x[1, 2], x[-1, 3] = np.inf, -np.inf, 0.5  # infinities (made finite before the norms); alpha's own value
    return x


for opset in (17, 18):
    write_with_runtime_outputs("helper_layers%d" % opset, layer_ops_model(opset), [layer_input(3), layer_input(5)])


# Convolutional models as PyTorch exports them: Conv (padding, strides, dilations, groups, auto_pad SAME_UPPER and
# SAME_LOWER), ConvTranspose (pads, output_padding, groups, dilations, output_shape), BatchNormalization, Relu, MaxPool, AveragePool (with and without padding in the count),
# GlobalAveragePool, GlobalMaxPool, Flatten and Gemm, on a dynamic batch; and a 1-d one over (N, C, L).
def cnn_model():
    from onnx import TensorProto as T
    r = np.random.default_rng(21)
    f = lambda *shape: r.standard_normal(shape).astype(np.float32)  # noqa: E731
    c = [numpy_helper.from_array(f(4, 2, 3, 3), "w1"), numpy_helper.from_array(f(4), "b1"),
         numpy_helper.from_array(f(4), "bn_scale"), numpy_helper.from_array(f(4), "bn_bias"),
         numpy_helper.from_array(f(4), "bn_mean"), numpy_helper.from_array(np.abs(f(4)) + 0.5, "bn_var"),
         numpy_helper.from_array(f(6, 2, 2, 3), "w2"),
         numpy_helper.from_array(f(4, 4, 3, 3), "w3"), numpy_helper.from_array(f(4, 4, 2, 2), "w4"),
         numpy_helper.from_array(f(3, 4), "wf"), numpy_helper.from_array(f(3), "bf"),
         numpy_helper.from_array(f(4, 3, 3, 2), "wt1"), numpy_helper.from_array(f(3), "bt1"),
         numpy_helper.from_array(f(4, 1, 2, 2), "wt2"), numpy_helper.from_array(f(4, 2, 3, 3), "wt3")]
    n = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
         helper.make_node("BatchNormalization", ["c1", "bn_scale", "bn_bias", "bn_mean", "bn_var"], ["bn"], epsilon=1e-3),
         helper.make_node("Relu", ["bn"], ["r1"]),
         helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
         helper.make_node("Conv", ["r1", "w2"], ["c2"], group=2, strides=[2, 1], dilations=[1, 2], pads=[0, 1, 1, 2]),
         helper.make_node("Conv", ["r1", "w3"], ["c3"], auto_pad="SAME_UPPER", strides=[2, 2]),
         helper.make_node("Conv", ["r1", "w4"], ["c4"], auto_pad="SAME_LOWER"),
         helper.make_node("AveragePool", ["r1"], ["a_excl"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
         helper.make_node("AveragePool", ["r1"], ["a_incl"], kernel_shape=[3, 2], pads=[1, 0, 1, 1], count_include_pad=1),
         helper.make_node("MaxPool", ["c1"], ["p_pad"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], dilations=[1, 1]),
         helper.make_node("MaxPool", ["r1"], ["p_ceil"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
         helper.make_node("MaxPool", ["c1"], ["p_ceil_pad"], kernel_shape=[2, 3], strides=[3, 2], pads=[1, 1, 0, 1], ceil_mode=1),
         helper.make_node("ConvTranspose", ["r1", "wt1", "bt1"], ["ct1"], strides=[2, 2], pads=[1, 0, 0, 1], output_padding=[1, 0]),
         helper.make_node("ConvTranspose", ["r1", "wt2"], ["ct2"], group=2, dilations=[2, 1], strides=[1, 2]),
         helper.make_node("ConvTranspose", ["r1", "wt3"], ["ct3"], strides=[2, 2], output_shape=[12, 16]),
         helper.make_node("GlobalAveragePool", ["p1"], ["gap"]),
         helper.make_node("GlobalMaxPool", ["c2"], ["gmp"]),
         helper.make_node("Flatten", ["gap"], ["flat"]),
         helper.make_node("Gemm", ["flat", "wf", "bf"], ["logits"], transB=1)]
    outs = [(nm, ["b", nm + "_c", nm + "_h", nm + "_w"]) for nm in ("p1", "c2", "c3", "c4", "a_excl", "a_incl", "p_pad", "gmp", "p_ceil", "p_ceil_pad",
                                                                   "ct1", "ct2", "ct3")]
    outs.append(("logits", ["b", 3]))
    graph = helper.make_graph(n, "cnn", [helper.make_tensor_value_info("x", T.FLOAT, ["b", 2, 6, 8])],
                              [helper.make_tensor_value_info(nm, T.FLOAT, sh) for nm, sh in outs], c)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m, (2, 6, 8)


def cnn1d_model():
    from onnx import TensorProto as T
    r = np.random.default_rng(22)
    c = [numpy_helper.from_array(r.standard_normal((5, 3, 3)).astype(np.float32), "w"),
         numpy_helper.from_array(r.standard_normal(5).astype(np.float32), "b")]
    n = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[2, 1], strides=[2], dilations=[2]),
         helper.make_node("MaxPool", ["c"], ["p"], kernel_shape=[2], strides=[1]),
         helper.make_node("AveragePool", ["c"], ["a"], kernel_shape=[3], strides=[2], pads=[1, 1]),
         helper.make_node("ConvTranspose", ["c", "wt"], ["ct"], strides=[3], pads=[1, 2], output_padding=[1])]
    c.append(numpy_helper.from_array(r.standard_normal((5, 2, 4)).astype(np.float32), "wt"))
    graph = helper.make_graph(n, "cnn1d", [helper.make_tensor_value_info("x", T.FLOAT, ["b", 3, 11])],
                              [helper.make_tensor_value_info(nm, T.FLOAT, ["b", nm + "_c", nm + "_l"]) for nm in ("c", "p", "a", "ct")], c)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m, (3, 11)


for name, (m, sample) in (("helper_cnn", cnn_model()), ("helper_cnn1d", cnn1d_model())):
    write_with_runtime_outputs(name, m, [rng.standard_normal((batch,) + sample).astype(np.float32) for batch in (2, 3)])

# Models kiln refuses, with the words of its kiln::file_error: a graph output or a node that reads an output kiln does
# not compute (Dropout's mask), and BatchNormalization in training mode.
def refused(name, nodes, outputs, words, checked=True):
    from onnx import TensorProto as T
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", T.FLOAT, ["b", 4])],
                              [helper.make_tensor_value_info(nm, t, ["b", 4]) for nm, t in outputs],
                              [numpy_helper.from_array(np.ones(4, dtype=np.float32), "ones"),
                               numpy_helper.from_array(np.zeros(4, dtype=np.float32), "zeros")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    if checked:
        onnx.checker.check_model(m, full_check=True)
    onnx.save(m, os.path.join(work, "refused_%s.onnx" % name))
    with open(os.path.join(work, "refused_%s.refusal" % name), "w") as f:
        f.write(words + "\n")


# An output declared with another element type than its node computes: the checker's shape inference and ONNX
# Runtime refuse it, and so does kiln (it would otherwise return float32 where the model promises float64).
refused("output_dtype", [helper.make_node("Relu", ["x"], ["y"])], [("y", TensorProto.DOUBLE)],
        "output 'y' is declared DOUBLE, but the model computes FLOAT (float32) for it", checked=False)
try:
    ort.InferenceSession(os.path.join(work, "refused_output_dtype.onnx"), opts, providers=["CPUExecutionProvider"])
    check(False, "output_dtype: ONNX Runtime loads a model whose output's declared type differs from its node's")
except Exception as e:  # noqa: BLE001 (ONNX Runtime's own exception types)
    check("type" in str(e).lower(), "output_dtype: ONNX Runtime refuses it too (%s)" % str(e).splitlines()[0][:120])

refused("mask_output", [helper.make_node("Dropout", ["x"], ["y", "mask"])], [("y", TensorProto.FLOAT), ("mask", TensorProto.BOOL)],
        "graph output 'mask' is output 1 of node 0 ('Dropout'), which kiln does not compute")
refused("mask_read", [helper.make_node("Dropout", ["x"], ["y", "mask"]), helper.make_node("Not", ["mask"], ["keep"]),
                      helper.make_node("Where", ["keep", "y", "x"], ["z"])], [("z", TensorProto.FLOAT)],
        "node 1 ('Not') takes 'mask', output 1 of node 0 ('Dropout'), which kiln does not compute")
refused("batch_norm_training", [helper.make_node("BatchNormalization", ["x", "ones", "zeros", "zeros", "ones"], ["y", "run_mean", "run_var"], training_mode=1)],
        [("y", TensorProto.FLOAT)], "training_mode=1 is training")

# Convolutions and pools with attributes kiln refuses, at import or on the declared shapes (not given to the checker,
# which refuses some of them itself).
def refused_window(name, op, attrs, xshape, wshape, words):
    from onnx import TensorProto as T
    inputs, inits = ["x"], []
    if wshape is not None:
        inputs.append("w")
        inits.append(numpy_helper.from_array(np.ones(wshape, dtype=np.float32), "w"))
    graph = helper.make_graph([helper.make_node(op, inputs, ["y"], **attrs)], name,
                              [helper.make_tensor_value_info("x", T.FLOAT, xshape)], [helper.make_tensor_value_info("y", T.FLOAT, None)],
                              inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, os.path.join(work, "refused_%s.onnx" % name))
    with open(os.path.join(work, "refused_%s.refusal" % name), "w") as f:
        f.write(words + "\n")


refused_window("conv_auto_pad", "Conv", dict(auto_pad="MIDDLE"), [2, 3, 8, 8], [4, 3, 3, 3],
               "auto_pad 'MIDDLE' is none of NOTSET, VALID, SAME_UPPER and SAME_LOWER")
refused_window("conv_pads_and_auto_pad", "Conv", dict(auto_pad="SAME_UPPER", pads=[1, 1, 1, 1]), [2, 3, 8, 8], [4, 3, 3, 3],
               "pads are given with auto_pad SAME_UPPER")
refused_window("conv_kernel_shape", "Conv", dict(kernel_shape=[2, 2]), [2, 3, 8, 8], [4, 3, 3, 3],
               "shape_error in 'Conv': kernel_shape disagrees with the weight")
refused_window("conv_weight_rank", "Conv", {}, [2, 3, 8, 8], [4, 3, 3], "shape_error in 'Conv': the weight (4, 3, 3) does not match the input (2, 3, 8, 8)")
refused_window("max_pool_3d", "MaxPool", dict(kernel_shape=[2, 2, 2]), [2, 3, 4, 4, 4], None,
               "shape_error in 'MaxPool': kiln reads 1-d and 2-d inputs ((N, C, L) or (N, C, H, W)), got (2, 3, 4, 4, 4)")
refused_window("avg_pool_strides", "AveragePool", dict(kernel_shape=[2], strides=[1, 1]), [2, 3, 8], None,
               "value_error in 'AveragePool': strides has 2 values for 1 spatial axes")
refused_window("conv_transpose_strides", "ConvTranspose", dict(strides=[1, 1, 1]), [2, 3, 8, 8], [3, 4, 3, 3],
               "value_error in 'ConvTranspose': strides has 3 values for 2 spatial axes")
refused_window("conv_transpose_pads_and_shape", "ConvTranspose", dict(output_shape=[10, 10], pads=[0, 0, 0, 0]), [2, 3, 8, 8],
               [3, 4, 3, 3], "pads are given with output_shape")
refused_window("conv_transpose_output_shape", "ConvTranspose", dict(output_shape=[12, 10]), [2, 3, 8, 8], [3, 4, 3, 3],
               "value_error in 'ConvTranspose': output_shape 12 is larger than the full result's 10 (kiln does not pad it)")
refused_window("conv_transpose_kernel_shape", "ConvTranspose", dict(kernel_shape=[2, 2]), [2, 3, 8], [3, 4, 3],
               "shape_error in 'ConvTranspose': kernel_shape disagrees with the weight")

# An input whose declared extents multiply past what kiln indexes (2^40 x 2^40 elements): refused before anything
# is allocated (the check runs' inputs take no memory, and their element counts must fit).
graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "huge_input",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1 << 40, 1 << 40])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1 << 40, 1 << 40])])
save_signature_model(graph, "refused_huge_input", "input 'x' declares more than 2^56 elements", ".refusal")
# A model whose input is declared huge (2^20 x 2^20 float32, 4 TiB) but only a slice of it is computed: it loads in a
# few megabytes (the check runs' inputs are placeholders of stride 0; they were allocated whole before).
graph = helper.make_graph([helper.make_node("Slice", ["x", "zero", "three", "zero"], ["s"]),
                           helper.make_node("Relu", ["s"], ["y"])], "huge_slice",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1 << 20, 1 << 20])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 1 << 20])],
                          [numpy_helper.from_array(np.array([0], dtype=np.int64), "zero"),
                           numpy_helper.from_array(np.array([3], dtype=np.int64), "three")])
save_signature_model(graph, "huge_slice", "{(3, 1048576) float32}", ".outputs")
# Reductions of the same declared input: load_onnx's check takes their results from their shape rules (run on the
# placeholder, the sum alone took 2^40 additions: the load did not finish).
graph = helper.make_graph([helper.make_node("ReduceSum", ["x", "one"], ["s"], keepdims=0),
                           helper.make_node("ArgMax", ["x"], ["am"], axis=0, keepdims=0),
                           helper.make_node("ReduceMax", ["x"], ["mx"], keepdims=0)], "huge_reductions",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1 << 20, 1 << 20])],
                          [helper.make_tensor_value_info("s", TensorProto.FLOAT, None),
                           helper.make_tensor_value_info("am", TensorProto.INT64, None),
                           helper.make_tensor_value_info("mx", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(np.array([1], dtype=np.int64), "one")])
save_signature_model(graph, "huge_reductions", "{(1048576,) float32, (1048576,) int64, () float32}", ".outputs")
# Shapes computed from values over 2^16 elements or more, which the first check run does not compute: the check
# runs again computing them. A reduction: the count of x's 131072 elements as a sum of ones.
graph = helper.make_graph([helper.make_node("Shape", ["x"], ["xs"]),
                           helper.make_node("ConstantOfShape", ["xs"], ["ones"],
                                            value=numpy_helper.from_array(np.array([1], dtype=np.int64))),
                           helper.make_node("ReduceSum", ["ones"], ["n"], keepdims=0),
                           helper.make_node("Unsqueeze", ["n", "zero"], ["n1"]),
                           helper.make_node("Reshape", ["x", "n1"], ["y"])], "shape_from_reduction",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [512, 256])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(np.array([0], dtype=np.int64), "zero")])
save_signature_model(graph, "shape_from_reduction", "{(131072,) float32}", ".outputs")
# A matrix product: (1, 65536) ones times (65536, 1) ones is 65536, z's element count (a 0 would keep z's first
# extent, 2, and fail).
def product_shape_graph(name, a_shape, inputs):
    return helper.make_graph([helper.make_node("ConstantOfShape", ["b_shape"], ["b"],
                                               value=numpy_helper.from_array(np.array([1], dtype=np.float32))),
                              helper.make_node("MatMul", ["a", "b"], ["p"]),
                              helper.make_node("ReduceSum", ["p"], ["ps"], keepdims=0),
                              helper.make_node("Cast", ["ps"], ["pi"], to=TensorProto.INT64),
                              helper.make_node("Reshape", ["pi", "one"], ["n"]),
                              helper.make_node("Reshape", ["z", "n"], ["y"])], name,
                             inputs + [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 32768])],
                             [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                             [numpy_helper.from_array(np.array([a_shape[1], 1], dtype=np.int64), "b_shape"),
                              numpy_helper.from_array(np.array([1], dtype=np.int64), "one")])
graph = product_shape_graph("shape_from_product", [1, 65536], [])
graph.node.insert(0, helper.make_node("ConstantOfShape", ["a_shape"], ["a"],
                                      value=numpy_helper.from_array(np.array([1], dtype=np.float32))))
graph.initializer.append(numpy_helper.from_array(np.array([1, 65536], dtype=np.int64), "a_shape"))
save_signature_model(graph, "shape_from_product", "{(65536,) float32}", ".outputs")
# A product of 2^31 multiply-adds on an input of 2^31 elements, beyond the 2^32 elements and multiply-adds that the
# check computes in all: refused, saying why.
graph = product_shape_graph("refused_shape_from_product", [32768, 65536],
                            [helper.make_tensor_value_info("a", TensorProto.FLOAT, [32768, 65536])])
save_signature_model(graph, "refused_shape_from_product", "reads Reshape's shape from a matrix product's values", ".refusal")

try:
    run = subprocess.run([tool, "onnx", "import", work], capture_output=True, text=True, timeout=900)
except subprocess.TimeoutExpired:
    check(False, "kiln::load_onnx loads every model in 15 minutes (a check run that computes at declared shapes hangs)")
    print("onnx_check: %d failures" % len(failures))
    sys.exit(1)
print(run.stdout.strip())
check(run.returncode == 0, "kiln::load_onnx runs kiln's exports and the helper-built model as ONNX Runtime does")

if failures:
    print("onnx_check: %d failures" % len(failures))
    sys.exit(1)
print("onnx_check: every model passes the checker and ONNX Runtime agrees with kiln")
