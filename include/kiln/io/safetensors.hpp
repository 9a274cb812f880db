#pragma once
// safetensors: named tensors in the format of Hugging Face's `safetensors` package, so that other tools (PyTorch,
// JAX, NumPy through `safetensors.numpy`) read what kiln writes and kiln reads what they write.
//
//   kiln::save_safetensors("model.safetensors", {{"l1/w", w}, {"l1/b", b}}, {{"epoch", "3"}});
//   kiln::tensor_file f = kiln::load_safetensors("model.safetensors");
//   kiln::tensor w2 = f.at("l1/w");             // a kiln::value_error naming the closest names if it is not there
//
// The layout: 8 bytes (little-endian u64) giving the header's length N, N bytes of JSON
// ({"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ..., "__metadata__": {"k": "v"}}),
// then the data, every tensor little-endian in C order at its offsets from the start of the data.
//
// A file is untrusted input. Before any tensor is allocated, the loader checks: the file holds the 8 bytes and the
// header; the header is at most 100 MiB (the reference implementation's limit), valid UTF-8 JSON, an object whose
// keys appear once; each entry has exactly a known dtype, a shape of non-negative integers and two offsets; the
// offsets agree with the dtype and shape (without overflow) and lie inside the data; the entries tile the data
// exactly, with no gap, overlap or trailing byte (as the `safetensors` package requires); a bool is 0 or 1. Each
// failure is a kiln::file_error naming the file, the tensor or byte offset and what is wrong.
//
// kiln's dtypes map to BOOL, I32, I64, F32 and F64, and are written so. Reading also takes the dtypes kiln lacks,
// widened exactly (core/stored_dtype.hpp): I8, I16, U8 and U16 to int32, U32 and U64 to int64 (a U64 above int64's
// range is refused), F16 and BF16 to float32. The 8-bit and smaller floats (F8_*, F6_*, F4) are refused with a
// message naming the tensor and its dtype.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "../core/names.hpp"
#include "../core/stored_dtype.hpp"
#include "../eager/tensor.hpp"
#include "json.hpp"

namespace kiln {

// Named tensors and string metadata, as a safetensors file (or a checkpoint) holds them.
struct tensor_file {
    std::map<std::string, tensor> tensors;
    std::map<std::string, std::string> metadata;
    std::string source = "<memory>";  // the file it came from, for messages

    std::size_t size() const noexcept { return tensors.size(); }
    bool contains(std::string_view name) const { return tensors.find(std::string(name)) != tensors.end(); }
    std::vector<std::string> names() const {
        std::vector<std::string> out;
        for (const auto& [k, v] : tensors) out.push_back(k);
        return out;
    }
    // The tensor called `name`; a kiln::value_error naming the closest names when there is none.
    const tensor& at(std::string_view name) const {
        const auto it = tensors.find(std::string(name));
        if (it == tensors.end())
            throw value_error("kiln: value_error in 'tensor_file::at': '" + source + "' has no tensor named '" +
                              std::string(name) + "'" +
                              (tensors.empty() ? std::string(" (it holds none)") : "; closest: " + detail::closest_text(name, names())));
        return it->second;
    }
    const tensor& operator[](std::string_view name) const { return at(name); }
};

namespace detail {

inline constexpr std::uint64_t safetensors_max_header = std::uint64_t{100} << 20;

inline std::string_view safetensors_dtype(dtype d) {
    switch (d) {
        case dtype::boolean: return "BOOL";
        case dtype::int32: return "I32";
        case dtype::int64: return "I64";
        case dtype::float32: return "F32";
        case dtype::float64: return "F64";
    }
    return "";
}

// Byte sources: a file read at offsets, or bytes in memory.
struct st_file_source {
    std::ifstream& in;
    std::uint64_t bytes;
    const std::string& file;
    const char* entry;
    std::uint64_t size() const { return bytes; }
    void read(std::uint64_t offset, unsigned char* dst, std::size_t n) {
        in.clear();
        in.seekg(static_cast<std::streamoff>(offset));
        if (!in.read(reinterpret_cast<char*>(dst), static_cast<std::streamsize>(n)))
            throw file_error("kiln: file_error in '" + std::string(entry) + "': '" + file + "': reading " +
                             std::to_string(n) + " bytes at offset " + std::to_string(offset) + " failed");
    }
};
struct st_memory_source {
    const unsigned char* data;
    std::uint64_t bytes;
    std::uint64_t size() const { return bytes; }
    void read(std::uint64_t offset, unsigned char* dst, std::size_t n) const {
        if (n) std::memcpy(dst, data + offset, n);
    }
};

// One entry of a header, checked.
struct st_entry {
    std::string name;
    dtype d = dtype::float32;
    stored_dtype stored;  // the file's element type (widened to d where kiln has no such dtype)
    dims shape;
    std::uint64_t begin = 0, end = 0;
};

[[noreturn]] inline void st_fail(const char* entry, const std::string& file, const std::string& what) {
    throw file_error("kiln: file_error in '" + std::string(entry) + "': '" + file + "': " + what);
}

template <class Source>
tensor_file read_safetensors(Source& src, const std::string& file, const char* entry) {
    const std::uint64_t total = src.size();
    if (total < 8)
        st_fail(entry, file, "truncated: " + std::to_string(total) + " bytes, and a safetensors file begins with an 8-byte header length");
    unsigned char len8[8];
    src.read(0, len8, 8);
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | len8[i];
    if (n > safetensors_max_header)
        st_fail(entry, file, "declares a header of " + std::to_string(n) + " bytes (at most " + std::to_string(safetensors_max_header) +
             " are read)");
    if (n > total - 8)
        st_fail(entry, file, "truncated: the header needs " + std::to_string(n) + " bytes and " + std::to_string(total - 8) +
             " follow its length");
    if (n < 2) st_fail(entry, file, "the header (" + std::to_string(n) + " bytes) is too short to hold a JSON object");
    std::string header(static_cast<std::size_t>(n), '\0');
    src.read(8, reinterpret_cast<unsigned char*>(header.data()), header.size());
    if (header[0] != '{') st_fail(entry, file, "the header does not begin with '{' (byte 8)");
    const json::value root = json::reader(header, "'" + file + "': header", entry, 8).parse();
    if (root.kind != json::value::object) st_fail(entry, file, "the header is not a JSON object");

    const std::uint64_t data_start = 8 + n, data_bytes = total - data_start;
    tensor_file out;
    out.source = file;
    std::vector<st_entry> entries;
    for (std::size_t member = 0; member < root.keys.size(); ++member) {
        const std::string& key = root.keys[member];
        const json::value& v = root.items[member];
        const std::string shown = json::reader::printable(key);
        if (key == "__metadata__") {
            if (v.kind != json::value::object) st_fail(entry, file, "__metadata__ is " + std::string(json::kind_name(v.kind)) + ", not an object");
            for (std::size_t j = 0; j < v.keys.size(); ++j) {
                const std::string& mk = v.keys[j];
                const json::value& mv = v.items[j];
                if (mv.kind != json::value::string)
                    st_fail(entry, file, "__metadata__ entry '" + json::reader::printable(mk) + "' is " + std::string(json::kind_name(mv.kind)) +
                         "; metadata values are strings");
                out.metadata.emplace(mk, mv.text);
            }
            continue;
        }
        const std::string where = "tensor '" + shown + "' (header byte " + std::to_string(8 + v.offset) + ")";
        if (v.kind != json::value::object) st_fail(entry, file, where + " is " + std::string(json::kind_name(v.kind)) + ", not an object");
        st_entry e;
        e.name = key;
        const json::value *dt = nullptr, *sh = nullptr, *off = nullptr;
        for (std::size_t j = 0; j < v.keys.size(); ++j) {
            const std::string& f = v.keys[j];
            const json::value& fv = v.items[j];
            if (f == "dtype") dt = &fv;
            else if (f == "shape") sh = &fv;
            else if (f == "data_offsets") off = &fv;
            else st_fail(entry, file, where + " has an unknown field '" + json::reader::printable(f) + "' (expected dtype, shape and data_offsets)");
        }
        if (!dt || !sh || !off) st_fail(entry, file, where + " lacks '" + std::string(!dt ? "dtype" : !sh ? "shape" : "data_offsets") + "'");
        if (dt->kind != json::value::string) st_fail(entry, file, where + ": dtype is " + std::string(json::kind_name(dt->kind)) + ", not a string");
        const std::string& dn = dt->text;
        if (dn == "BOOL") e.stored = stored_dtype::same(dtype::boolean);
        else if (dn == "I32") e.stored = stored_dtype::same(dtype::int32);
        else if (dn == "I64") e.stored = stored_dtype::same(dtype::int64);
        else if (dn == "F32") e.stored = stored_dtype::same(dtype::float32);
        else if (dn == "F64") e.stored = stored_dtype::same(dtype::float64);
        else if (dn == "I8" || dn == "I16") e.stored = stored_dtype::widened(stored_dtype::signed_int, dn == "I8" ? 1 : 2);
        else if (dn == "U8" || dn == "U16" || dn == "U32" || dn == "U64")
            e.stored = stored_dtype::widened(stored_dtype::unsigned_int, dn == "U8" ? 1 : dn == "U16" ? 2 : dn == "U32" ? 4 : 8);
        else if (dn == "F16") e.stored = stored_dtype::widened(stored_dtype::float16, 2);
        else if (dn == "BF16") e.stored = stored_dtype::widened(stored_dtype::bfloat16, 2);
        else if (dn.rfind("F8_", 0) == 0 || dn == "C64" || dn == "F4" || dn.rfind("F6_", 0) == 0 || dn == "E8M0")
            st_fail(entry, file, where + " is " + dn + ", a dtype kiln does not read (kiln reads BOOL, I8, I16, I32, I64, "
                                 "U8, U16, U32, U64, F16, BF16, F32 and F64)");
        else st_fail(entry, file, where + " has an unknown dtype '" + json::reader::printable(dn) + "'");
        e.d = e.stored.d;
        if (sh->kind != json::value::array) st_fail(entry, file, where + ": shape is " + std::string(json::kind_name(sh->kind)) + ", not an array");
        if (sh->items.size() > static_cast<std::size_t>(max_rank))
            st_fail(entry, file, where + " has rank " + std::to_string(sh->items.size()) + " (kiln's tensors have at most " +
                 std::to_string(max_rank) + " dimensions)");
        e.shape.rank = static_cast<int>(sh->items.size());
        std::uint64_t numel = 1;
        bool overflow = false;
        for (std::size_t i = 0; i < sh->items.size(); ++i) {
            const json::value& x = sh->items[i];
            if (x.kind != json::value::number || !x.is_count || x.count > static_cast<std::uint64_t>(PTRDIFF_MAX))
                st_fail(entry, file, where + ": shape[" + std::to_string(i) + "] is not a non-negative integer");
            e.shape[static_cast<int>(i)] = static_cast<std::ptrdiff_t>(x.count);
            if (x.count != 0 && numel > UINT64_MAX / x.count) overflow = true;
            else numel *= x.count;
        }
        if (std::find(e.shape.d.begin(), e.shape.d.begin() + e.shape.rank, std::ptrdiff_t{0}) != e.shape.d.begin() + e.shape.rank)
            numel = 0, overflow = false;
        const std::uint64_t item = e.stored.item;
        if (overflow || numel > UINT64_MAX / item) st_fail(entry, file, where + ": shape " + to_string(e.shape) + " has more elements than can be addressed");
        const std::uint64_t need = numel * item;
        if (off->kind != json::value::array || off->items.size() != 2)
            st_fail(entry, file, where + ": data_offsets must be an array of two integers");
        for (const json::value& x : off->items)
            if (x.kind != json::value::number || !x.is_count) st_fail(entry, file, where + ": data_offsets must be non-negative integers");
        e.begin = off->items[0].count;
        e.end = off->items[1].count;
        if (e.begin > e.end)
            st_fail(entry, file, where + ": data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "] end before they begin");
        if (e.end > data_bytes)
            st_fail(entry, file, where + ": data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "] reach past the " +
                 std::to_string(data_bytes) + " bytes of data the file holds");
        if (e.end - e.begin != need)
            st_fail(entry, file, where + ": shape " + to_string(e.shape) + " of " + dt->text + " needs " + std::to_string(need) +
                 " bytes, but data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "] hold " +
                 std::to_string(e.end - e.begin));
        if (numel > static_cast<std::uint64_t>(PTRDIFF_MAX)) st_fail(entry, file, where + ": too many elements");
        entries.push_back(std::move(e));
    }
    // The entries tile the data exactly: sorted by offset, each begins where the last ended, the last ends at the
    // end of the file.
    std::vector<const st_entry*> order;
    for (const st_entry& e : entries) order.push_back(&e);
    std::sort(order.begin(), order.end(), [](const st_entry* a, const st_entry* b) {
        return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
    });
    std::uint64_t at = 0;
    for (const st_entry* e : order) {
        if (e->begin != at)
            st_fail(entry, file, "tensor '" + json::reader::printable(e->name) + "' begins at data byte " + std::to_string(e->begin) + " where " +
                 std::to_string(at) + " was expected (" + (e->begin < at ? "it overlaps another tensor" : "a gap precedes it") + ")");
        at = e->end;
    }
    if (at != data_bytes)
        st_fail(entry, file, detail::count_of(data_bytes - at, "byte") + " of data at data byte " + std::to_string(at) + (data_bytes - at == 1 ? " belongs" : " belong") + " to no tensor");

    // Every check passed: allocate and read.
    for (const st_entry& e : entries) {
        tensor t(e.d, e.shape);
        auto* p = static_cast<unsigned char*>(t.raw_data());
        auto read = [&](unsigned char* dst, std::size_t n) { src.read(data_start + e.begin, dst, n); };
        constexpr bool swap = std::endian::native == std::endian::big;  // safetensors is little-endian
        if (std::string bad = read_stored(e.stored, p, static_cast<std::size_t>(e.end - e.begin), swap, read, "U64");
            !bad.empty())
            st_fail(entry, file, "tensor '" + json::reader::printable(e.name) + "': " + bad);
        out.tensors.emplace(e.name, std::move(t));
    }
    return out;
}

// The file's bytes: header length, header (padded with spaces to a multiple of 8 bytes, as the reference writer
// does, so that the data begins aligned), data in name order.
inline std::string safetensors_header(const std::map<std::string, tensor>& tensors,
                                      const std::map<std::string, std::string>& metadata, const char* entry) {
    auto check_text = [&](const std::string& s, const char* what) {
        // Names and metadata go into JSON strings: they must be valid UTF-8.
        try {
            json::reader(json::quote(s), what, entry).parse();
        } catch (const file_error&) {
            throw value_error("kiln: value_error in '" + std::string(entry) + "': the " + what + " '" +
                              json::reader::printable(s) + "' is not valid UTF-8");
        }
    };
    std::string h = "{";
    bool first = true;
    if (!metadata.empty()) {
        h += "\"__metadata__\":{";
        for (const auto& [k, v] : metadata) {
            check_text(k, "metadata key");
            check_text(v, "metadata value");
            if (!first) h += ',';
            h += json::quote(k);
            h += ':';
            h += json::quote(v);
            first = false;
        }
        h += "}";
        first = false;
    }
    std::uint64_t at = 0;
    for (const auto& [name, t] : tensors) {
        if (name == "__metadata__")
            throw value_error("kiln: value_error in '" + std::string(entry) + "': '__metadata__' is reserved; it cannot name a tensor");
        check_text(name, "tensor name");
        t.check_valid(entry);
        if (t.device().type != device_type::cpu)
            throw device_error("kiln: device_error in '" + std::string(entry) + "': tensor '" + name + "' is on " +
                               to_string(t.device()) + "; copy it to the cpu first (t.to(kiln::cpu))");
        const std::uint64_t bytes = static_cast<std::uint64_t>(t.numel()) * t.itemsize();
        if (!first) h += ',';
        h += json::quote(name);
        h += ":{\"dtype\":\"";
        h += safetensors_dtype(t.dtype());
        h += "\",\"shape\":[";
        for (int i = 0; i < t.dim(); ++i) {
            if (i) h += ',';
            h += std::to_string(t.shape()[i]);
        }
        h += "],\"data_offsets\":[" + std::to_string(at) + "," + std::to_string(at + bytes) + "]}";
        at += bytes;
        first = false;
    }
    h += "}";
    h.append((8 - h.size() % 8) % 8, ' ');
    return h;
}

template <class Sink>
void write_safetensors(Sink&& sink, const std::map<std::string, tensor>& tensors,
                       const std::map<std::string, std::string>& metadata, const char* entry) {
    const std::string h = safetensors_header(tensors, metadata, entry);
    unsigned char len8[8];
    std::uint64_t n = h.size();
    for (int i = 0; i < 8; ++i, n >>= 8) len8[i] = static_cast<unsigned char>(n & 0xff);
    sink(len8, 8);
    sink(reinterpret_cast<const unsigned char*>(h.data()), h.size());
    for (const auto& [name, t] : tensors) {
        const tensor c = t.contiguous();
        const auto* p = static_cast<const unsigned char*>(c.raw_data());
        const std::size_t bytes = static_cast<std::size_t>(c.numel()) * c.itemsize();
        if constexpr (std::endian::native == std::endian::big) {
            std::vector<unsigned char> le(p, p + bytes);
            for (std::size_t i = 0; i < bytes; i += c.itemsize()) std::reverse(le.data() + i, le.data() + i + c.itemsize());
            sink(le.data(), bytes);
        } else if (bytes) {
            sink(p, bytes);
        }
    }
}

// Writes a file through `write(std::ofstream&)` under a temporary name and renames it, so that a failed write never
// leaves a half file under `path`.
template <class Write>
void write_file_atomically_with(const std::string& path, Write&& write, const char* entry) {
    const std::string tmp = path + ".tmp-kiln";
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        if (!out) throw file_error("kiln: file_error in '" + std::string(entry) + "': cannot open '" + path + "' for writing");
        try {
            write(out);
        } catch (...) {
            out.close();
            std::remove(tmp.c_str());
            throw;
        }
        out.flush();
        if (!out) {
            out.close();
            std::remove(tmp.c_str());
            throw file_error("kiln: file_error in '" + std::string(entry) + "': writing '" + path + "' failed");
        }
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        std::remove(tmp.c_str());
        throw file_error("kiln: file_error in '" + std::string(entry) + "': cannot replace '" + path + "'");
    }
}

inline void write_file_atomically(const std::string& path, const std::string& bytes, const char* entry) {
    write_file_atomically_with(path, [&](std::ofstream& out) { out.write(bytes.data(), static_cast<std::streamsize>(bytes.size())); },
                               entry);
}

inline void save_safetensors_as(const std::string& path, const std::map<std::string, tensor>& tensors,
                                const std::map<std::string, std::string>& metadata, const char* entry) {
    write_file_atomically_with(path, [&](std::ofstream& out) {
        write_safetensors([&](const unsigned char* p, std::size_t n) {
            out.write(reinterpret_cast<const char*>(p), static_cast<std::streamsize>(n));
        }, tensors, metadata, entry);
    }, entry);
}

inline tensor_file load_safetensors_as(const std::string& path, const char* entry) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) throw file_error("kiln: file_error in '" + std::string(entry) + "': cannot open '" + path + "'");
    const std::streamoff end = in.tellg();
    if (end < 0) throw file_error("kiln: file_error in '" + std::string(entry) + "': cannot read the size of '" + path + "'");
    st_file_source src{in, static_cast<std::uint64_t>(end), path, entry};
    return read_safetensors(src, path, entry);
}

}  // namespace detail

// Writes named tensors (any dtype kiln has; views are written as their elements) and string metadata as a
// safetensors file. Names and metadata must be valid UTF-8; "__metadata__" cannot name a tensor.
inline void save_safetensors(const std::string& path, const std::map<std::string, tensor>& tensors,
                             const std::map<std::string, std::string>& metadata = {}) {
    detail::save_safetensors_as(path, tensors, metadata, "save_safetensors");
}

// The same file's bytes in memory.
inline std::string safetensors_bytes(const std::map<std::string, tensor>& tensors,
                                     const std::map<std::string, std::string>& metadata = {}) {
    std::string out;
    detail::write_safetensors([&](const unsigned char* p, std::size_t n) { out.append(reinterpret_cast<const char*>(p), n); },
                              tensors, metadata, "safetensors_bytes");
    return out;
}

// Reads a safetensors file (validated as the header comment says before anything is allocated).
inline tensor_file load_safetensors(const std::string& path) { return detail::load_safetensors_as(path, "load_safetensors"); }

// The same from bytes in memory (`name` stands for the file in messages).
inline tensor_file load_safetensors_bytes(const void* data, std::size_t size, const std::string& name = "<memory>") {
    if (data == nullptr && size > 0) throw value_error("kiln: value_error in 'load_safetensors_bytes': null data");
    detail::st_memory_source src{static_cast<const unsigned char*>(data), size};
    return detail::read_safetensors(src, name, "load_safetensors_bytes");
}

}  // namespace kiln
