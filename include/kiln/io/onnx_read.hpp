#pragma once
// Reading ONNX's protobuf for kiln::load_onnx (io/onnx_import.hpp): a strict reader of the wire format over bytes in
// memory (every length checked against what is left), ONNX attributes and dtypes, and TensorProtos as kiln tensors
// with every size checked.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "function_file.hpp"

namespace kiln {
namespace detail {

// A strict reader of protobuf's wire format over bytes in memory: every length is checked against what is left.
struct pb_reader {
    const unsigned char* p;
    const unsigned char* end;
    const std::string* file;
    std::size_t base;  // the offset of p in the file, for messages

    [[noreturn]] void fail(const std::string& what) const {
        throw file_error("kiln: file_error in 'load_onnx': '" + *file + "', byte " + std::to_string(base) + ": " + what);
    }
    bool done() const { return p >= end; }
    std::uint64_t varint() {
        std::uint64_t v = 0;
        for (int shift = 0; shift < 64; shift += 7) {
            if (p >= end) fail("a varint is cut off");
            const unsigned char c = *p++;
            ++base;
            v |= static_cast<std::uint64_t>(c & 0x7f) << shift;
            if (!(c & 0x80)) return v;
        }
        fail("a varint is longer than 10 bytes");
    }
    // (field number, wire type)
    std::pair<std::uint64_t, int> key() {
        const std::uint64_t k = varint();
        return {k >> 3, static_cast<int>(k & 7)};
    }
    pb_reader sub() {
        const std::uint64_t n = varint();
        if (n > static_cast<std::uint64_t>(end - p)) fail("a field of " + std::to_string(n) + " bytes runs past its message");
        pb_reader r{p, p + n, file, base};
        p += n;
        base += n;
        return r;
    }
    std::string_view bytes() {
        pb_reader r = sub();
        return {reinterpret_cast<const char*>(r.p), static_cast<std::size_t>(r.end - r.p)};
    }
    std::uint32_t fixed32() {
        if (end - p < 4) fail("a 32-bit field is cut off");
        std::uint32_t v = 0;
        for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
        p += 4;
        base += 4;
        return v;
    }
    void skip(int wire) {
        switch (wire) {
            case 0: (void)varint(); break;
            case 1:
                if (end - p < 8) fail("a 64-bit field is cut off");
                p += 8;
                base += 8;
                break;
            case 2: (void)sub(); break;
            case 5: (void)fixed32(); break;
            default: fail("wire type " + std::to_string(wire) + " is not one protobuf writes");
        }
    }
    // A repeated int64 field: packed (wire 2) or one value (wire 0).
    void ints(int wire, std::vector<std::int64_t>& out, std::size_t limit) {
        if (wire == 0) {
            out.push_back(static_cast<std::int64_t>(varint()));
        } else if (wire == 2) {
            pb_reader r = sub();
            while (!r.done()) out.push_back(static_cast<std::int64_t>(r.varint()));
        } else {
            fail("an integer field has wire type " + std::to_string(wire));
        }
        if (out.size() > limit) fail("more than " + std::to_string(limit) + " integers in one field");
    }
    std::string text(int wire) {
        if (wire != 2) fail("a string field has wire type " + std::to_string(wire));
        return std::string(bytes());
    }
};

struct onnx_attr {
    std::string name;
    int type = 0;
    float f = 0;
    std::int64_t i = 0;
    std::string s;
    std::vector<std::int64_t> ints;
    std::vector<float> floats;
    tensor t;
    bool has_t = false;
};

inline std::optional<dtype> from_onnx_dtype(std::int64_t t) {
    switch (t) {
        case 1: return dtype::float32;
        case 6: return dtype::int32;
        case 7: return dtype::int64;
        case 9: return dtype::boolean;
        case 11: return dtype::float64;
        default: return std::nullopt;
    }
}

inline std::string onnx_dtype_name(std::int64_t t) {
    static const char* names[] = {"UNDEFINED", "FLOAT", "UINT8", "INT8", "UINT16", "INT16", "INT32", "INT64", "STRING", "BOOL",
                                  "FLOAT16", "DOUBLE", "UINT32", "UINT64", "COMPLEX64", "COMPLEX128", "BFLOAT16"};
    return t >= 0 && t <= 16 ? names[t] : "type " + std::to_string(t);
}

// A TensorProto as a kiln tensor (raw_data or the typed fields), every size checked.
inline tensor read_onnx_tensor(pb_reader r, std::string& name) {
    std::vector<std::int64_t> dims_v, i64;
    std::int64_t type = 0;
    std::string_view raw;
    bool has_raw = false;
    std::vector<float> f32;
    std::vector<double> f64;
    while (!r.done()) {
        const auto [field, wire] = r.key();
        switch (field) {
            case 1: r.ints(wire, dims_v, max_rank); break;
            case 2: type = static_cast<std::int64_t>(r.varint()); break;
            case 4:  // float_data
                if (wire == 2) {
                    pb_reader q = r.sub();
                    while (!q.done()) {
                        const std::uint32_t u = q.fixed32();
                        float v;
                        std::memcpy(&v, &u, 4);
                        f32.push_back(v);
                    }
                } else if (wire == 5) {
                    const std::uint32_t u = r.fixed32();
                    float v;
                    std::memcpy(&v, &u, 4);
                    f32.push_back(v);
                } else {
                    r.fail("float_data has wire type " + std::to_string(wire));
                }
                break;
            case 5:  // int32_data (int32, bool)
            case 7:  // int64_data
                r.ints(wire, i64, std::size_t{1} << 28);
                break;
            case 8: name = r.text(wire); break;
            case 9:
                if (wire != 2) r.fail("raw_data has wire type " + std::to_string(wire));
                raw = r.bytes();
                has_raw = true;
                break;
            case 10:  // double_data
                if (wire != 2) r.fail("double_data must be packed");
                {
                    pb_reader q = r.sub();
                    if ((q.end - q.p) % 8) q.fail("double_data is not a whole number of doubles");
                    while (!q.done()) {
                        std::uint64_t u = 0;
                        for (int i = 7; i >= 0; --i) u = (u << 8) | q.p[i];
                        q.p += 8;
                        double v;
                        std::memcpy(&v, &u, 8);
                        f64.push_back(v);
                    }
                }
                break;
            case 13:
            case 14: r.fail("tensor '" + json::reader::printable(name) + "' keeps its data in an external file, which kiln does not read");
            default: r.skip(wire);
        }
    }
    const auto d = from_onnx_dtype(type);
    if (!d) r.fail("tensor '" + json::reader::printable(name) + "' is " + onnx_dtype_name(type) + ", a dtype kiln does not have");
    dims shape;
    shape.rank = static_cast<int>(dims_v.size());
    std::uint64_t numel = 1;
    for (std::size_t i = 0; i < dims_v.size(); ++i) {
        if (dims_v[i] < 0 || dims_v[i] > (std::int64_t{1} << 40)) r.fail("tensor '" + json::reader::printable(name) + "' has a bad extent");
        shape[static_cast<int>(i)] = static_cast<std::ptrdiff_t>(dims_v[i]);
        numel = numel > 0 && static_cast<std::uint64_t>(dims_v[i]) > (std::uint64_t{1} << 40) / numel ? std::uint64_t{1} << 41
                                                                                                     : numel * static_cast<std::uint64_t>(dims_v[i]);
    }
    if (numel > (std::uint64_t{1} << 40)) r.fail("tensor '" + json::reader::printable(name) + "' has too many elements");
    const std::uint64_t bytes = numel * size_of(*d);
    std::uint64_t given = has_raw ? raw.size() : *d == dtype::float32 ? f32.size() * 4 : *d == dtype::float64 ? f64.size() * 8
                                                                     : i64.size() * size_of(*d);
    if (given != bytes)
        r.fail("tensor '" + json::reader::printable(name) + "' of shape " + to_string(shape) + " needs " + std::to_string(bytes) +
               " bytes of data and has " + std::to_string(given));
    tensor t(*d, shape);
    auto* out = static_cast<unsigned char*>(t.raw_data());
    if (has_raw) {
        if (bytes) std::memcpy(out, raw.data(), static_cast<std::size_t>(bytes));
        if (*d == dtype::boolean)
            for (std::uint64_t k = 0; k < bytes; ++k) out[k] = out[k] != 0;
    } else if (*d == dtype::float32) {
        if (bytes) std::memcpy(out, f32.data(), static_cast<std::size_t>(bytes));
    } else if (*d == dtype::float64) {
        if (bytes) std::memcpy(out, f64.data(), static_cast<std::size_t>(bytes));
    } else {
        dispatch(*d, [&]<class T>() {
            T* q = t.data<T>();
            for (std::size_t k = 0; k < i64.size(); ++k) {
                if constexpr (std::is_same_v<T, bool>) q[k] = i64[k] != 0;
                else q[k] = static_cast<T>(i64[k]);
            }
        });
    }
    return t;
}

// An int64 (or int32) tensor's values, for the inputs ONNX gives as tensors (shapes, axes, starts).
inline std::vector<std::int64_t> int_values(const tensor& t, const char* what) {
    if (t.dtype() != dtype::int64 && t.dtype() != dtype::int32)
        throw value_error(std::string("kiln: value_error in 'load_onnx': ") + what + " must be int64, not " + std::string(name(t.dtype())));
    if (t.numel() > 64) throw value_error(std::string("kiln: value_error in 'load_onnx': ") + what + " has more than 64 entries");
    read_exact(t, what);  // (in the loader's check run: a value it computed)
    const tensor c = t.contiguous().to(dtype::int64);
    const std::int64_t* p = c.data<std::int64_t>();
    return std::vector<std::int64_t>(p, p + c.numel());
}

inline dims dims_of(const std::vector<std::int64_t>& v, const char* what) {
    if (v.size() > static_cast<std::size_t>(max_rank))
        throw value_error(std::string("kiln: value_error in 'load_onnx': ") + what + " has more than " + std::to_string(max_rank) + " entries");
    dims d;
    d.rank = static_cast<int>(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) d[static_cast<int>(i)] = static_cast<std::ptrdiff_t>(v[i]);
    return d;
}

}  // namespace detail
}  // namespace kiln
