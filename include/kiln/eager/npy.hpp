#pragma once
// NumPy's .npy format (versions 1.0, 2.0 and 3.0 read; 1.0 written, as numpy.save does): bool, int32, int64,
// float32 and float64, either byte order, C or Fortran order; narrower integers and float16 are read widened to
// int32, int64 or float32. Bad files are rejected with a kiln::file_error.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "../core/stored_dtype.hpp"
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

// ---- reading: every size is checked against the bytes present before anything is allocated ----

[[noreturn]] inline void npy_fail(const std::string& file, const std::string& what) {
    throw file_error("kiln: file_error in 'load_npy': '" + file + "': " + what);
}

// What a header describes.
struct npy_layout {
    dtype d = dtype::float32;
    dims shape;
    bool fortran = false;
    bool swap = false;           // big-endian data
    stored_dtype stored;         // the file's element type (widened to d where kiln has no such dtype)
    std::size_t data_offset = 0;  // where the data begins
    std::size_t data_bytes = 0;   // what the shape and the stored dtype need
};

// A strict reader of the header's Python literal: {'descr': <str>, 'fortran_order': <True|False>, 'shape': <tuple of
// ints>} in any order, each key once, nothing else, then spaces and a newline up to the header's length.
class npy_header_parser {
public:
    npy_header_parser(std::string_view text, const std::string& file) : s_(text), file_(file) {}

    npy_layout parse() {
        npy_layout out;
        bool have_descr = false, have_fortran = false, have_shape = false;
        std::string descr;
        space();
        expect('{');
        for (;;) {
            space();
            if (peek() == '}') break;
            const std::string key = string_literal("a key");
            space();
            expect(':');
            space();
            auto once = [&](bool& seen) {
                if (seen) fail("the key '" + key + "' appears twice");
                seen = true;
            };
            if (key == "descr") {
                once(have_descr);
                descr = string_literal("the descr");
            } else if (key == "fortran_order") {
                once(have_fortran);
                out.fortran = boolean_literal();
            } else if (key == "shape") {
                once(have_shape);
                out.shape = tuple_literal();
            } else {
                fail("unexpected key '" + key + "' (a .npy header has descr, fortran_order and shape)");
            }
            space();
            if (peek() == ',') {
                ++i_;
                continue;
            }
            if (peek() != '}') fail("expected ',' or '}' at byte " + std::to_string(i_) + " of the header");
        }
        ++i_;  // '}'
        while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
        if (i_ != s_.size()) fail("unexpected bytes after the header's dict at byte " + std::to_string(i_));
        if (!have_descr) fail("the header has no 'descr'");
        if (!have_fortran) fail("the header has no 'fortran_order'");
        if (!have_shape) fail("the header has no 'shape'");
        descr_to_dtype(descr, out);
        return out;
    }

private:
    [[noreturn]] void fail(const std::string& what) const { npy_fail(file_, "malformed header: " + what); }
    char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
    void space() {
        while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t')) ++i_;
    }
    void expect(char c) {
        if (peek() != c) fail(std::string("expected '") + c + "' at byte " + std::to_string(i_) + " of the header");
        ++i_;
    }
    std::string string_literal(const char* what) {
        const char q = peek();
        if (q != '\'' && q != '"') fail(std::string("expected a quoted string for ") + what);
        const std::size_t b = ++i_;
        while (i_ < s_.size() && s_[i_] != q) {
            if (s_[i_] == '\\' || s_[i_] == '\n') fail(std::string("unsupported character in ") + what);
            ++i_;
        }
        if (i_ >= s_.size()) fail(std::string("unterminated string in ") + what);
        return std::string(s_.substr(b, i_++ - b));
    }
    bool boolean_literal() {
        if (s_.substr(i_, 4) == "True") return i_ += 4, true;
        if (s_.substr(i_, 5) == "False") return i_ += 5, false;
        fail("fortran_order must be True or False");
    }
    // "()", "(3,)", "(2, 3)", "(2, 3,)"; not "(3)" (an int, not a tuple), "(2,,)" or "(1  3)".
    dims tuple_literal() {
        dims d;
        d.rank = 0;
        expect('(');
        space();
        bool need_comma = false;  // a one-element tuple needs its comma
        while (peek() != ')') {
            if (d.rank == max_rank) fail("the shape has more than " + std::to_string(max_rank) + " dimensions");
            d.d[d.rank++] = integer_literal();
            space();
            if (peek() == ',') {
                ++i_;
                space();
                need_comma = false;
            } else if (peek() == ')') {
                need_comma = d.rank == 1;
            } else {
                fail("expected ',' or ')' in the shape at byte " + std::to_string(i_));
            }
        }
        if (need_comma) fail("the shape '(n)' is not a tuple; a one-dimensional shape is '(n,)'");
        ++i_;
        return d;
    }
    std::ptrdiff_t integer_literal() {
        if (peek() < '0' || peek() > '9') fail("expected a non-negative integer in the shape at byte " + std::to_string(i_));
        std::ptrdiff_t v = 0;
        while (peek() >= '0' && peek() <= '9') {
            if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, peek() - '0', &v) || v > max_bytes)
                fail("a dimension of the shape is too large");
            ++i_;
        }
        if (peek() == 'L') ++i_;  // Python 2's long literal, as old numpy.save wrote it
        return v;
    }
    // kiln's own dtypes are read as they are; narrower integers and float16, which kiln has no dtype for, are
    // widened on load, as NumPy's arrays of them convert (int8, int16, uint8 and uint16 to int32; uint32 and
    // uint64 to int64, a uint64 above int64's range refused; float16 to float32, exactly).
    void descr_to_dtype(const std::string& descr, npy_layout& out) const {
        const char* readable = "; kiln reads b1, i1, i2, i4, i8, u1, u2, u4, u8, f2, f4 and f8";
        if (descr.size() != 3)
            throw file_error("kiln: file_error in 'load_npy': '" + file_ + "': unsupported dtype '" + descr + "'" + readable);
        const char order = descr[0], kind = descr[1], size = descr[2];
        if (order != '<' && order != '>' && order != '|' && order != '=')
            npy_fail(file_, "unknown byte order in dtype '" + descr + "'");
        const std::size_t item = size >= '1' && size <= '8' ? static_cast<std::size_t>(size - '0') : 0;
        if (kind == 'b' && item == 1) out.stored = stored_dtype::same(dtype::boolean);
        else if (kind == 'i' && (item == 1 || item == 2)) out.stored = stored_dtype::widened(stored_dtype::signed_int, item);
        else if (kind == 'i' && item == 4) out.stored = stored_dtype::same(dtype::int32);
        else if (kind == 'i' && item == 8) out.stored = stored_dtype::same(dtype::int64);
        else if (kind == 'u' && (item == 1 || item == 2 || item == 4 || item == 8))
            out.stored = stored_dtype::widened(stored_dtype::unsigned_int, item);
        else if (kind == 'f' && item == 2) out.stored = stored_dtype::widened(stored_dtype::float16, item);
        else if (kind == 'f' && item == 4) out.stored = stored_dtype::same(dtype::float32);
        else if (kind == 'f' && item == 8) out.stored = stored_dtype::same(dtype::float64);
        else npy_fail(file_, "unsupported dtype '" + descr + "'" + readable);
        out.d = out.stored.d;
        out.swap = order == '>' && item != 1;
    }

    std::string_view s_;
    const std::string& file_;
    std::size_t i_ = 0;
};

// Reads a .npy image from a source with `size()` and `read(offset, dst, n)` (a file or memory).
template <class Source>
tensor read_npy(Source& src, const std::string& file) {
    const std::size_t total = src.size();
    unsigned char pre[12] = {};
    src.read(0, pre, std::min<std::size_t>(total, 10));
    if (std::memcmp(pre, "\x93NUMPY", std::min<std::size_t>(total, 6)) != 0) npy_fail(file, "not a .npy file (bad magic)");
    if (total < 10) npy_fail(file, "truncated: " + std::to_string(total) + " bytes is shorter than the preamble");
    const int major = pre[6];
    if (major < 1 || major > 3)
        npy_fail(file, "format version " + std::to_string(major) + "." + std::to_string(pre[7]) +
                           " is not one kiln reads (1.0, 2.0, 3.0)");
    const std::size_t lensize = major == 1 ? 2 : 4, prefix = 8 + lensize;
    if (total < prefix) npy_fail(file, "truncated in its preamble");
    src.read(8, pre + 8, lensize);
    std::size_t hlen = 0;
    for (std::size_t i = lensize; i-- > 0;) hlen = hlen * 256 + pre[8 + i];
    constexpr std::size_t max_header = std::size_t{1} << 20;
    if (hlen > max_header)
        npy_fail(file, "declares a header of " + std::to_string(hlen) + " bytes (kiln reads at most 1 MiB)");
    if (hlen > total - prefix)
        npy_fail(file, "truncated: the header needs " + std::to_string(hlen) + " bytes and " +
                           std::to_string(total - prefix) + " follow the preamble");
    std::string header(hlen, '\0');
    src.read(prefix, reinterpret_cast<unsigned char*>(header.data()), hlen);
    npy_layout layout = npy_header_parser(header, file).parse();
    layout.data_offset = prefix + hlen;
    std::ptrdiff_t n = 0;
    try {
        n = checked_numel(layout.shape, "load_npy");
        layout.data_bytes = checked_bytes(n, layout.stored.item, layout.shape, "load_npy");
        (void)checked_bytes(n, size_of(layout.d), layout.shape, "load_npy");
    } catch (const value_error&) {
        npy_fail(file, "shape " + to_string(layout.shape) + " has more elements than kiln can address");
    }
    const std::size_t present = total - layout.data_offset;
    if (present < layout.data_bytes)
        npy_fail(file, "truncated: shape " + to_string(layout.shape) + " of " + layout.stored.name() +
                           " needs " + std::to_string(layout.data_bytes) + " bytes of data and the file has " +
                           std::to_string(present));
    if (present > layout.data_bytes)
        npy_fail(file, std::to_string(present - layout.data_bytes) + " bytes follow the data that shape " +
                           to_string(layout.shape) + " of " + layout.stored.name() + " needs");

    dims stored = layout.shape;
    if (layout.fortran) std::reverse(stored.d.begin(), stored.d.begin() + stored.rank);
    tensor t(layout.d, stored);
    auto* p = static_cast<unsigned char*>(t.raw_data());
    auto read = [&](unsigned char* dst, std::size_t n) { src.read(layout.data_offset, dst, n); };
    if (std::string bad = read_stored(layout.stored, p, layout.data_bytes, layout.swap, read, "uint64"); !bad.empty())
        npy_fail(file, bad);
    if (!layout.fortran) return t;
    // Fortran order: the data is the transpose of the stored C-order array.
    std::array<int, max_rank> rev{};
    for (int i = 0; i < layout.shape.rank; ++i) rev[i] = layout.shape.rank - 1 - i;
    return t.permute_array(rev, layout.shape.rank).contiguous();
}

struct npy_file_source {
    std::ifstream& in;
    std::size_t bytes;
    const std::string& file;
    std::size_t size() const { return bytes; }
    void read(std::size_t offset, unsigned char* dst, std::size_t n) {
        in.seekg(static_cast<std::streamoff>(offset));
        if (!in.read(reinterpret_cast<char*>(dst), static_cast<std::streamsize>(n)))
            npy_fail(file, "reading " + std::to_string(n) + " bytes at offset " + std::to_string(offset) + " failed");
    }
};

struct npy_memory_source {
    const unsigned char* data;
    std::size_t bytes;
    std::size_t size() const { return bytes; }
    void read(std::size_t offset, unsigned char* dst, std::size_t n) const { std::memcpy(dst, data + offset, n); }
};

}  // namespace detail

inline void save_npy(const std::string& path, const tensor& t) {
    std::ofstream out(path, std::ios::binary);
    if (!out) throw file_error("kiln: file_error in 'save_npy': cannot open '" + path + "' for writing");
    const std::string header = detail::npy_header(t.dtype(), t.shape());
    out.write("\x93NUMPY\x01\x00", 8);
    const auto len = static_cast<std::uint16_t>(header.size());
    const char le[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
    out.write(le, 2);
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    const tensor c = t.is_cpu() ? t.contiguous() : t.to(kiln::cpu);
    static_assert(std::endian::native == std::endian::little, "kiln::save_npy writes little-endian data");
    out.write(static_cast<const char*>(c.raw_data()), static_cast<std::streamsize>(c.numel() * c.itemsize()));
    if (!out) throw file_error("kiln: file_error in 'save_npy': writing '" + path + "' failed");
}

// Reads a .npy file. The file is untrusted: its header is parsed strictly, every size is checked against the
// bytes actually present before anything is allocated, and every failure is a kiln::file_error naming the file.
inline tensor load_npy(const std::string& path) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) throw file_error("kiln: file_error in 'load_npy': cannot open '" + path + "'");
    const std::streamoff end = in.tellg();
    if (end < 0) throw file_error("kiln: file_error in 'load_npy': cannot read the size of '" + path + "'");
    detail::npy_file_source src{in, static_cast<std::size_t>(end), path};
    return detail::read_npy(src, path);
}

// The same from bytes in memory (`name` stands for the file in messages).
inline tensor load_npy_bytes(const void* data, std::size_t size, const std::string& name = "<memory>") {
    if (data == nullptr && size > 0) throw value_error("kiln: value_error in 'load_npy_bytes': null data");
    detail::npy_memory_source src{static_cast<const unsigned char*>(data), size};
    return detail::read_npy(src, name);
}

}  // namespace kiln
