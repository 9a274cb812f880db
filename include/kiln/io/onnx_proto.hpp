#pragma once
// Writing ONNX's messages (io/onnx_export.hpp's half that knows protobuf, not kiln's ops): the wire format's fields
// (field numbers from onnx.proto), TensorProto and ValueInfoProto, and onnx_builder, which collects a GraphProto's
// nodes, initializers and names. kiln stays header-only: no libprotobuf.
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "../eager/tensor.hpp"

namespace kiln {
namespace detail {

// ---- the protobuf wire format (what ONNX's messages need of it) ----
namespace proto {

inline void varint(std::string& s, std::uint64_t v) {
    while (v >= 0x80) {
        s += static_cast<char>((v & 0x7f) | 0x80);
        v >>= 7;
    }
    s += static_cast<char>(v);
}
inline void key(std::string& s, int field, int wire) { varint(s, (static_cast<std::uint64_t>(field) << 3) | static_cast<unsigned>(wire)); }
inline void int_field(std::string& s, int field, std::int64_t v) {
    key(s, field, 0);
    varint(s, static_cast<std::uint64_t>(v));  // (negative int64: ten bytes, two's complement, as protobuf does)
}
inline void bytes_field(std::string& s, int field, std::string_view b) {
    key(s, field, 2);
    varint(s, b.size());
    s.append(b.data(), b.size());
}
inline void float_field(std::string& s, int field, float f) {
    key(s, field, 5);
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    for (int i = 0; i < 4; ++i, u >>= 8) s += static_cast<char>(u & 0xff);
}

}  // namespace proto

inline int onnx_dtype(dtype d) {
    switch (d) {
        case dtype::boolean: return 9;
        case dtype::int32: return 6;
        case dtype::int64: return 7;
        case dtype::float32: return 1;
        case dtype::float64: return 11;
    }
    return 0;
}

// A TensorProto: dims, data_type, name, raw_data.
inline std::string onnx_tensor(const std::string& name, const tensor& t) {
    std::string s;
    const tensor c = t.to(kiln::cpu).contiguous();  // (a traced function's values may live on the GPU)
    for (int i = 0; i < c.dim(); ++i) proto::int_field(s, 1, c.shape()[i]);
    proto::int_field(s, 2, onnx_dtype(c.dtype()));
    proto::bytes_field(s, 8, name);
    proto::bytes_field(s, 9, std::string_view(static_cast<const char*>(c.raw_data()), static_cast<std::size_t>(c.numel()) * c.itemsize()));
    return s;
}

// Builds the GraphProto's parts.
class onnx_builder {
public:
    std::string nodes, initializers;
    int counter = 0;

    std::string fresh(const std::string& hint) { return hint + "_" + std::to_string(counter++); }

    struct attr {
        std::string name;
        enum { integer, integers, real, tensor_value, text } kind;
        std::int64_t i = 0;
        std::vector<std::int64_t> ints;
        float f = 0;
        std::string t;  // a TensorProto
    };
    static attr int_attr(std::string n, std::int64_t v) { return {std::move(n), attr::integer, v, {}, 0, {}}; }
    static attr ints_attr(std::string n, std::vector<std::int64_t> v) { return {std::move(n), attr::integers, 0, std::move(v), 0, {}}; }
    static attr float_attr(std::string n, float v) { return {std::move(n), attr::real, 0, {}, v, {}}; }
    static attr tensor_attr(std::string n, std::string t) { return {std::move(n), attr::tensor_value, 0, {}, 0, std::move(t)}; }
    static attr string_attr(std::string n, std::string t) { return {std::move(n), attr::text, 0, {}, 0, std::move(t)}; }

    // A NodeProto: inputs, outputs, name, op_type, attributes.
    void node(const std::string& op, const std::vector<std::string>& in, const std::vector<std::string>& out,
              const std::vector<attr>& attrs = {}) {
        std::string n;
        for (const std::string& i : in) proto::bytes_field(n, 1, i);
        for (const std::string& o : out) proto::bytes_field(n, 2, o);
        proto::bytes_field(n, 3, fresh(op));
        proto::bytes_field(n, 4, op);
        for (const attr& a : attrs) {
            std::string p;
            proto::bytes_field(p, 1, a.name);
            switch (a.kind) {
                case attr::integer:
                    proto::int_field(p, 3, a.i);
                    proto::int_field(p, 20, 2);
                    break;
                case attr::integers:
                    for (std::int64_t v : a.ints) proto::int_field(p, 8, v);
                    proto::int_field(p, 20, 7);
                    break;
                case attr::real:
                    proto::float_field(p, 2, a.f);
                    proto::int_field(p, 20, 1);
                    break;
                case attr::tensor_value:
                    proto::bytes_field(p, 5, a.t);
                    proto::int_field(p, 20, 4);
                    break;
                case attr::text:  // AttributeProto.s, type STRING
                    proto::bytes_field(p, 4, a.t);
                    proto::int_field(p, 20, 3);
                    break;
            }
            proto::bytes_field(n, 5, p);
        }
        proto::bytes_field(nodes, 1, n);
    }
    // One output: its name.
    std::string op1(const std::string& op, const std::vector<std::string>& in, const std::vector<attr>& attrs = {}) {
        const std::string out = fresh("t");
        node(op, in, {out}, attrs);
        return out;
    }
    std::string initializer(const tensor& t, const std::string& hint = "c") {
        const std::string name = fresh(hint);
        proto::bytes_field(initializers, 5, onnx_tensor(name, t));
        return name;
    }
    std::string int64s(const std::vector<std::int64_t>& v) {
        tensor t(dtype::int64, dims{static_cast<std::ptrdiff_t>(v.size())});
        for (std::size_t i = 0; i < v.size(); ++i) t.data<std::int64_t>()[i] = v[i];
        return initializer(t, "i64");
    }
    std::string cast(const std::string& v, dtype from, dtype to) {
        if (from == to) return v;
        return op1("Cast", {v}, {int_attr("to", onnx_dtype(to))});
    }
};

inline std::string onnx_value_info(const std::string& name, dtype d, const std::vector<std::string>& dim_names,
                                   const std::vector<std::ptrdiff_t>* dims_or_null) {
    std::string shape;
    if (dims_or_null) {
        for (std::size_t i = 0; i < dims_or_null->size(); ++i) {
            std::string dim;
            if ((*dims_or_null)[i] == dyn) proto::bytes_field(dim, 2, dim_names[i]);
            else proto::int_field(dim, 1, (*dims_or_null)[i]);
            proto::bytes_field(shape, 1, dim);
        }
    }
    std::string tensor_type;
    proto::int_field(tensor_type, 1, onnx_dtype(d));
    if (dims_or_null) proto::bytes_field(tensor_type, 2, shape);
    std::string type;
    proto::bytes_field(type, 1, tensor_type);
    std::string vi;
    proto::bytes_field(vi, 1, name);
    proto::bytes_field(vi, 2, type);
    return vi;
}

}  // namespace detail
}  // namespace kiln
