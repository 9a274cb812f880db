#pragma once
// NumPy's .npy format (versions 1.0, 2.0 and 3.0 read; 1.0 written, as numpy.save does): bool, int32, int64,
// float32 and float64, either byte order, C or Fortran order. Bad files are rejected with a kiln::error.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>

#include "elementwise.hpp"

namespace kiln {
namespace detail {

inline std::string npy_descr(dtype d) {
    switch (d) {
        case dtype::boolean: return "|b1";
        case dtype::int32: return "<i4";
        case dtype::int64: return "<i8";
        case dtype::float32: return "<f4";
        case dtype::float64: return "<f8";
    }
    return "";
}

// The header numpy.save writes: the dict, padded with spaces to a multiple of 64 bytes with the preamble, and '\n'.
inline std::string npy_header(dtype d, const dims& shape) {
    std::string dict = "{'descr': '" + npy_descr(d) + "', 'fortran_order': False, 'shape': " + to_string(shape) + ", }";
    const std::size_t total = 10 + dict.size() + 1;
    dict.append((64 - total % 64) % 64, ' ');
    return dict + '\n';
}

inline std::string npy_value(const std::string& header, const std::string& key, const std::string& path) {
    const auto k = header.find("'" + key + "'");
    if (k == std::string::npos) throw value_error("kiln::load_npy: '" + path + "': the header has no '" + key + "'");
    auto v = header.find(':', k);
    if (v == std::string::npos) throw value_error("kiln::load_npy: '" + path + "': malformed header");
    ++v;
    while (v < header.size() && header[v] == ' ') ++v;
    std::size_t end = v;
    if (header[v] == '(') end = header.find(')', v) + 1;
    else if (header[v] == '\'') end = header.find('\'', v + 1) + 1;
    else end = header.find_first_of(",}", v);
    if (end == std::string::npos || end <= v) throw value_error("kiln::load_npy: '" + path + "': malformed header");
    return header.substr(v, end - v);
}

}  // namespace detail

inline void save_npy(const std::string& path, const tensor& t) {
    std::ofstream out(path, std::ios::binary);
    if (!out) throw error("kiln::save_npy: cannot open '" + path + "' for writing");
    const std::string header = detail::npy_header(t.dtype(), t.shape());
    out.write("\x93NUMPY\x01\x00", 8);
    const auto len = static_cast<std::uint16_t>(header.size());
    const char le[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
    out.write(le, 2);
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    const tensor c = t.contiguous();
    static_assert(std::endian::native == std::endian::little, "kiln::save_npy writes little-endian data");
    out.write(static_cast<const char*>(c.raw_data()), static_cast<std::streamsize>(c.numel() * c.itemsize()));
    if (!out) throw error("kiln::save_npy: writing '" + path + "' failed");
}

inline tensor load_npy(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw error("kiln::load_npy: cannot open '" + path + "'");
    char pre[8];
    if (!in.read(pre, 8) || std::memcmp(pre, "\x93NUMPY", 6) != 0)
        throw value_error("kiln::load_npy: '" + path + "' is not a .npy file (bad magic)");
    const int major = static_cast<unsigned char>(pre[6]);
    if (major < 1 || major > 3)
        throw value_error("kiln::load_npy: '" + path + "' has format version " + std::to_string(major) +
                          ", kiln reads 1 to 3");
    std::size_t hlen = 0;
    unsigned char lenbytes[4] = {};
    const int lensize = major == 1 ? 2 : 4;
    if (!in.read(reinterpret_cast<char*>(lenbytes), lensize)) throw value_error("kiln::load_npy: '" + path + "' is truncated");
    for (int i = lensize - 1; i >= 0; --i) hlen = hlen * 256 + lenbytes[i];
    if (hlen > (1u << 20)) throw value_error("kiln::load_npy: '" + path + "' declares an implausible header length");
    std::string header(hlen, '\0');
    if (!in.read(header.data(), static_cast<std::streamsize>(hlen)))
        throw value_error("kiln::load_npy: '" + path + "' is truncated in its header");

    std::string descr = detail::npy_value(header, "descr", path);
    descr = descr.substr(1, descr.size() - 2);
    const std::string fortran = detail::npy_value(header, "fortran_order", path);
    const std::string shape_text = detail::npy_value(header, "shape", path);
    if (descr.size() != 3) throw dtype_error("kiln::load_npy: '" + path + "' has unsupported dtype '" + descr + "'");
    const char order = descr[0], kind = descr[1], size = descr[2];
    dtype d;
    if (kind == 'b' && size == '1') d = dtype::boolean;
    else if (kind == 'i' && size == '4') d = dtype::int32;
    else if (kind == 'i' && size == '8') d = dtype::int64;
    else if (kind == 'f' && size == '4') d = dtype::float32;
    else if (kind == 'f' && size == '8') d = dtype::float64;
    else throw dtype_error("kiln::load_npy: '" + path + "' has dtype '" + descr + "'; kiln reads b1, i4, i8, f4, f8");
    const bool swap = order == '>' && size != '1';
    if (order != '<' && order != '>' && order != '|' && order != '=')
        throw dtype_error("kiln::load_npy: '" + path + "' has an unknown byte order in '" + descr + "'");

    dims shape;
    shape.rank = 0;
    for (std::size_t i = 1; i < shape_text.size();) {
        while (i < shape_text.size() && (shape_text[i] == ' ' || shape_text[i] == ',')) ++i;
        if (i >= shape_text.size() || shape_text[i] == ')') break;
        std::size_t used = 0;
        long long v = 0;
        try {
            v = std::stoll(shape_text.substr(i), &used);
        } catch (const std::exception&) {
            throw value_error("kiln::load_npy: '" + path + "' has a malformed shape " + shape_text);
        }
        if (v < 0 || shape.rank == max_rank)
            throw value_error("kiln::load_npy: '" + path + "' has an unsupported shape " + shape_text);
        shape[shape.rank++] = static_cast<std::ptrdiff_t>(v);
        i += used;
    }
    const bool fortran_order = fortran == "True";
    dims stored = shape;
    if (fortran_order) std::reverse(stored.d.begin(), stored.d.begin() + stored.rank);
    tensor t(d, stored);
    const auto bytes = static_cast<std::streamsize>(t.numel() * t.itemsize());
    if (!in.read(static_cast<char*>(t.raw_data()), bytes))
        throw value_error("kiln::load_npy: '" + path + "' is truncated: its data is shorter than shape " +
                          to_string(shape) + " needs");
    if (swap) {
        auto* p = static_cast<unsigned char*>(t.raw_data());
        for (std::ptrdiff_t i = 0; i < t.numel(); ++i) std::reverse(p + i * t.itemsize(), p + (i + 1) * t.itemsize());
    }
    if (d == dtype::boolean) {
        auto* p = static_cast<unsigned char*>(t.raw_data());
        for (std::ptrdiff_t i = 0; i < t.numel(); ++i)
            if (p[i] > 1) throw value_error("kiln::load_npy: '" + path + "' has a bool that is neither 0 nor 1");
    }
    if (!fortran_order) return t;
    // Fortran order: the data is the transpose of the stored C-order array.
    std::array<int, max_rank> rev{};
    for (int i = 0; i < shape.rank; ++i) rev[i] = shape.rank - 1 - i;
    return t.permute_array(rev, shape.rank).contiguous();
}

}  // namespace kiln
