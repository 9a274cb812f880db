#pragma once
// Element types that files hold and kiln has no dtype for (int8, int16, the unsigned integers, float16 and
// bfloat16), and their exact conversion to the kiln dtype that holds every value: the .npy and safetensors loaders
// read them widened, as PyTorch users expect a uint8 image or a bfloat16 checkpoint to load.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "dtype.hpp"

namespace kiln::detail {

// A stored element type: its kind and its size in bytes.
struct stored_dtype {
    enum kind_t : std::uint8_t { native, signed_int, unsigned_int, float16, bfloat16 } kind = native;
    std::size_t item = 0;  // bytes per stored element
    dtype d = dtype::float32;  // what kiln loads it as

    // int8, int16, uint8 and uint16 load as int32; uint32 and uint64 as int64; float16 and bfloat16 as float32.
    static stored_dtype widened(kind_t k, std::size_t bytes) {
        stored_dtype s;
        s.kind = k;
        s.item = bytes;
        if (k == float16 || k == bfloat16) s.d = dtype::float32;
        else if (k == unsigned_int && bytes >= 4) s.d = dtype::int64;
        else s.d = dtype::int32;
        return s;
    }
    static stored_dtype same(dtype d) {
        stored_dtype s;
        s.d = d;
        s.item = size_of(d);
        return s;
    }
    bool widens() const noexcept { return kind != native; }
    std::string name() const {
        switch (kind) {
            case signed_int: return "int" + std::to_string(8 * item);
            case unsigned_int: return "uint" + std::to_string(8 * item);
            case float16: return "float16";
            case bfloat16: return "bfloat16";
            default: return std::string(kiln::name(d));
        }
    }
};

// IEEE binary16 to binary32, exactly (subnormals, infinities and NaN payloads included).
inline float half_to_float(std::uint16_t h) noexcept {
    const std::uint32_t sign = static_cast<std::uint32_t>(h >> 15) << 31;
    std::uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0x1f) bits = sign | 0x7f800000u | (man << 13);  // infinity or NaN
    else if (exp != 0) bits = sign | ((exp + 112) << 23) | (man << 13);
    else if (man == 0) bits = sign;  // signed zero
    else {                           // a subnormal half is a normal float: shift its leading 1 into place
        int shift = 0;
        while ((man & 0x400) == 0) man <<= 1, ++shift;
        bits = sign | (static_cast<std::uint32_t>(113 - shift) << 23) | ((man & 0x3ff) << 13);
    }
    return std::bit_cast<float>(bits);
}

// bfloat16 is the upper half of a binary32.
inline float bfloat16_to_float(std::uint16_t b) noexcept { return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16); }

// Converts `n` stored elements at `q` (native byte order by now) into `s.d` at `p`. Returns the index of the first
// uint64 beyond int64's range (nothing is written from it on), or n when every value fits.
inline std::size_t widen_stored(const stored_dtype& s, const unsigned char* q, unsigned char* p, std::size_t n) noexcept {
    auto load = [&]<class S>(std::size_t i) {
        S v;
        std::memcpy(&v, q + i * sizeof(S), sizeof(S));
        return v;
    };
    auto put = [&]<class T>(std::size_t i, T v) { std::memcpy(p + i * sizeof(T), &v, sizeof(T)); };
    for (std::size_t i = 0; i < n; ++i) {
        switch (s.kind) {
            case stored_dtype::float16: put(i, half_to_float(load.template operator()<std::uint16_t>(i))); break;
            case stored_dtype::bfloat16: put(i, bfloat16_to_float(load.template operator()<std::uint16_t>(i))); break;
            case stored_dtype::signed_int:
                if (s.item == 1) put(i, std::int32_t{load.template operator()<std::int8_t>(i)});
                else put(i, std::int32_t{load.template operator()<std::int16_t>(i)});
                break;
            case stored_dtype::unsigned_int:
                if (s.item == 1) put(i, std::int32_t{load.template operator()<std::uint8_t>(i)});
                else if (s.item == 2) put(i, std::int32_t{load.template operator()<std::uint16_t>(i)});
                else if (s.item == 4) put(i, std::int64_t{load.template operator()<std::uint32_t>(i)});
                else {
                    const std::uint64_t v = load.template operator()<std::uint64_t>(i);
                    if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return i;
                    put(i, static_cast<std::int64_t>(v));
                }
                break;
            default: break;
        }
    }
    return n;
}


// Reads the `bytes` stored bytes of one array into the storage `p` of its kiln dtype `s.d`: through `read(dst, n)`
// into `p` itself, or into a buffer of the stored size (checked against the file by the caller) when the array
// widens; then puts the bytes in native order (`swap`), checks that every bool is 0 or 1, and widens. Returns an
// empty string, or what is wrong with the first bad element ("the bool at element 2 is neither 0 nor 1"); the .npy
// and safetensors loaders name the file and the array around it. `type_name` names a uint64 as the format does.
template <class Read>
std::string read_stored(const stored_dtype& s, unsigned char* p, std::size_t bytes, bool swap, Read&& read,
                        const char* type_name) {
    std::vector<unsigned char> narrow(s.widens() ? bytes : 0);
    unsigned char* q = s.widens() ? narrow.data() : p;
    if (bytes > 0) read(q, bytes);
    if (swap && s.item > 1)
        for (std::size_t i = 0; i < bytes; i += s.item)
            for (std::size_t a = i, b = i + s.item - 1; a < b; ++a, --b) std::swap(q[a], q[b]);
    if (s.d == dtype::boolean)
        for (std::size_t i = 0; i < bytes; ++i)
            if (p[i] > 1) return "the bool at element " + std::to_string(i) + " is neither 0 nor 1";
    if (!s.widens()) return {};
    const std::size_t count = bytes / s.item;
    if (const std::size_t bad = widen_stored(s, q, p, count); bad != count) {
        std::uint64_t v;
        std::memcpy(&v, q + bad * 8, 8);
        return "the " + std::string(type_name) + " at element " + std::to_string(bad) + " (" + std::to_string(v) +
               ") is beyond int64, kiln's widest integer";
    }
    return {};
}

}  // namespace kiln::detail
