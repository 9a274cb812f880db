#pragma once
// A strict JSON reader for the headers of kiln's file formats (safetensors): RFC 8259 values, UTF-8 checked,
// escapes decoded, nesting at most 64 deep, and every error a kiln::file_error that names the file and the byte
// offset. Objects keep their members in file order and refuse a key given twice (a parser that kept the first or
// the last would let two readers of one file see different tensors). Written for untrusted input: no recursion
// deeper than the limit, no number conversion that can overflow, nothing read past the text.
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "../core/error.hpp"

namespace kiln::json {

struct value {
    enum kind_t : std::uint8_t { null, boolean, number, string, array, object } kind = null;
    bool b = false;
    // A number: its text as written, and its value when it is a non-negative integer that fits 64 bits.
    std::string text;
    bool is_count = false;
    std::uint64_t count = 0;
    std::vector<value> items;        // an array's elements, or an object's values (in file order)
    std::vector<std::string> keys;   // an object's keys, one per item
    std::size_t offset = 0;          // where it begins in the text

    const value* find(std::string_view key) const;
};

inline const value* value::find(std::string_view key) const {
    for (std::size_t i = 0; i < keys.size(); ++i)
        if (keys[i] == key) return &items[i];
    return nullptr;
}

inline std::string_view kind_name(value::kind_t k) {
    switch (k) {
        case value::null: return "null";
        case value::boolean: return "a boolean";
        case value::number: return "a number";
        case value::string: return "a string";
        case value::array: return "an array";
        case value::object: return "an object";
    }
    return "unknown";
}

class reader {
public:
    // `what` names the text in errors ("header of 'model.safetensors'"); `base` is the text's offset in its file.
    reader(std::string_view text, std::string what, std::string entry, std::size_t base = 0)
        : s_(text), what_(std::move(what)), entry_(std::move(entry)), base_(base) {}

    // The one value the text holds; trailing white space (and nothing else) is allowed.
    value parse() {
        value v = parse_value(0);
        skip_space();
        if (i_ != s_.size()) fail("unexpected text after the JSON value");
        return v;
    }

    [[noreturn]] void fail(const std::string& msg) const { fail_at(i_, msg); }
    [[noreturn]] void fail_at(std::size_t at, const std::string& msg) const {
        throw file_error("kiln: file_error in '" + entry_ + "': " + what_ + ", byte " + std::to_string(base_ + at) + ": " + msg);
    }

private:
    static constexpr int max_depth = 64;

    void skip_space() {
        while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
    }

    value parse_value(int depth) {
        if (depth > max_depth) fail("JSON nested more than " + std::to_string(max_depth) + " deep");
        skip_space();
        if (i_ >= s_.size()) fail("the JSON text ends where a value was expected");
        value v;
        v.offset = i_;
        const char c = s_[i_];
        if (c == '{') {
            v.kind = value::object;
            std::unordered_set<std::string> seen;
            ++i_;
            skip_space();
            if (i_ < s_.size() && s_[i_] == '}') {
                ++i_;
                return v;
            }
            for (;;) {
                skip_space();
                if (i_ >= s_.size() || s_[i_] != '"') fail("expected a string as an object's key");
                const std::size_t key_at = i_;
                std::string key = parse_string();
                if (!seen.insert(key).second)  // (a set: a header of a million keys must not take a million squared)
                    fail_at(key_at, "the key \"" + printable(key) + "\" appears twice in one object");
                skip_space();
                if (i_ >= s_.size() || s_[i_] != ':') fail("expected ':' after an object's key");
                ++i_;
                value item = parse_value(depth + 1);
                v.keys.push_back(std::move(key));
                v.items.push_back(std::move(item));
                skip_space();
                if (i_ < s_.size() && s_[i_] == ',') {
                    ++i_;
                    continue;
                }
                if (i_ < s_.size() && s_[i_] == '}') {
                    ++i_;
                    return v;
                }
                fail("expected ',' or '}' in an object");
            }
        }
        if (c == '[') {
            v.kind = value::array;
            ++i_;
            skip_space();
            if (i_ < s_.size() && s_[i_] == ']') {
                ++i_;
                return v;
            }
            for (;;) {
                v.items.push_back(parse_value(depth + 1));
                skip_space();
                if (i_ < s_.size() && s_[i_] == ',') {
                    ++i_;
                    continue;
                }
                if (i_ < s_.size() && s_[i_] == ']') {
                    ++i_;
                    return v;
                }
                fail("expected ',' or ']' in an array");
            }
        }
        if (c == '"') {
            v.kind = value::string;
            v.text = parse_string();
            return v;
        }
        if (c == '-' || (c >= '0' && c <= '9')) {
            v.kind = value::number;
            parse_number(v);
            return v;
        }
        if (literal("true")) {
            v.kind = value::boolean;
            v.b = true;
            return v;
        }
        if (literal("false")) {
            v.kind = value::boolean;
            return v;
        }
        if (literal("null")) return v;
        fail("expected a JSON value");
    }

    bool literal(std::string_view word) {
        if (s_.substr(i_, word.size()) != word) return false;
        i_ += word.size();
        return true;
    }

    void parse_number(value& v) {
        const std::size_t start = i_;
        bool negative = false, integer = true;
        if (s_[i_] == '-') {
            negative = true;
            ++i_;
        }
        auto digits = [&] {
            const std::size_t from = i_;
            while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
            if (i_ == from) fail("a number needs digits");
        };
        if (i_ < s_.size() && s_[i_] == '0') {
            ++i_;
            if (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') fail("a number has a leading zero");
        } else {
            digits();
        }
        if (i_ < s_.size() && s_[i_] == '.') {
            integer = false;
            ++i_;
            digits();
        }
        if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
            integer = false;
            ++i_;
            if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
            digits();
        }
        v.text = std::string(s_.substr(start, i_ - start));
        if (integer && !negative) {
            std::uint64_t n = 0;
            bool fits = true;
            for (char d : v.text) {
                const auto digit = static_cast<std::uint64_t>(d - '0');
                if (n > (UINT64_MAX - digit) / 10) {
                    fits = false;
                    break;
                }
                n = n * 10 + digit;
            }
            v.is_count = fits;
            v.count = fits ? n : 0;
        }
    }

    // Four hex digits of a \u escape.
    unsigned hex4() {
        if (s_.size() - i_ < 4) fail("a \\u escape needs four hex digits");
        unsigned u = 0;
        for (int k = 0; k < 4; ++k) {
            const char h = s_[i_++];
            u <<= 4;
            if (h >= '0' && h <= '9') u |= static_cast<unsigned>(h - '0');
            else if (h >= 'a' && h <= 'f') u |= static_cast<unsigned>(h - 'a' + 10);
            else if (h >= 'A' && h <= 'F') u |= static_cast<unsigned>(h - 'A' + 10);
            else fail("a \\u escape needs four hex digits");
        }
        return u;
    }

    static void put_utf8(std::string& out, unsigned cp) {
        if (cp < 0x80) {
            out += static_cast<char>(cp);
        } else if (cp < 0x800) {
            out += static_cast<char>(0xC0 | (cp >> 6));
            out += static_cast<char>(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            out += static_cast<char>(0xE0 | (cp >> 12));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (cp & 0x3F));
        } else {
            out += static_cast<char>(0xF0 | (cp >> 18));
            out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (cp & 0x3F));
        }
    }

    // One UTF-8 sequence at i_ (checked: no overlong forms, no surrogates, at most U+10FFFF), copied to out.
    void utf8(std::string& out) {
        const auto b0 = static_cast<unsigned char>(s_[i_]);
        int len;
        unsigned cp, min;
        if (b0 < 0x80) {
            out += static_cast<char>(b0);
            ++i_;
            return;
        } else if ((b0 & 0xE0) == 0xC0) {
            len = 2, cp = b0 & 0x1Fu, min = 0x80;
        } else if ((b0 & 0xF0) == 0xE0) {
            len = 3, cp = b0 & 0x0Fu, min = 0x800;
        } else if ((b0 & 0xF8) == 0xF0) {
            len = 4, cp = b0 & 0x07u, min = 0x10000;
        } else {
            fail("the text is not valid UTF-8");
        }
        if (s_.size() - i_ < static_cast<std::size_t>(len)) fail("the text is not valid UTF-8 (a sequence is cut off)");
        for (int k = 1; k < len; ++k) {
            const auto b = static_cast<unsigned char>(s_[i_ + static_cast<std::size_t>(k)]);
            if ((b & 0xC0) != 0x80) fail("the text is not valid UTF-8");
            cp = (cp << 6) | (b & 0x3Fu);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) fail("the text is not valid UTF-8");
        out.append(s_.substr(i_, static_cast<std::size_t>(len)));
        i_ += static_cast<std::size_t>(len);
    }

    std::string parse_string() {
        ++i_;  // the opening quote
        std::string out;
        for (;;) {
            if (i_ >= s_.size()) fail("a string is not closed");
            const char c = s_[i_];
            if (c == '"') {
                ++i_;
                return out;
            }
            if (static_cast<unsigned char>(c) < 0x20) fail("a string holds a control character (it must be escaped)");
            if (c != '\\') {
                utf8(out);
                continue;
            }
            ++i_;
            if (i_ >= s_.size()) fail("a string is not closed");
            const char e = s_[i_++];
            switch (e) {
                case '"': out += '"'; break;
                case '\\': out += '\\'; break;
                case '/': out += '/'; break;
                case 'b': out += '\b'; break;
                case 'f': out += '\f'; break;
                case 'n': out += '\n'; break;
                case 'r': out += '\r'; break;
                case 't': out += '\t'; break;
                case 'u': {
                    unsigned cp = hex4();
                    if (cp >= 0xDC00 && cp <= 0xDFFF) fail("a \\u escape is a lone low surrogate");
                    if (cp >= 0xD800 && cp <= 0xDBFF) {
                        if (s_.substr(i_, 2) != "\\u") fail("a \\u escape is a high surrogate without its pair");
                        i_ += 2;
                        const unsigned lo = hex4();
                        if (lo < 0xDC00 || lo > 0xDFFF) fail("a \\u escape is a high surrogate without its pair");
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    }
                    put_utf8(out, cp);
                    break;
                }
                default: fail(std::string("unknown escape '\\") + printable(std::string(1, e)) + "' in a string");
            }
        }
    }

public:
    // A string as it may appear in a message: control bytes and non-ASCII bytes as \xNN, cut at 80 bytes.
    static std::string printable(std::string_view s) {
        std::string out;
        for (std::size_t k = 0; k < s.size() && k < 80; ++k) {
            const auto c = static_cast<unsigned char>(s[k]);
            if (c >= 0x20 && c < 0x7F) {
                out += static_cast<char>(c);
            } else {
                static constexpr char hex[] = "0123456789abcdef";
                out += "\\x";
                out += hex[c >> 4];
                out += hex[c & 15];
            }
        }
        if (s.size() > 80) out += "...";
        return out;
    }

private:
    std::string_view s_;
    std::string what_, entry_;
    std::size_t base_;
    std::size_t i_ = 0;
};

// A string as a JSON string literal (quotes included; control characters escaped, UTF-8 kept as it is).
inline std::string quote(std::string_view s) {
    std::string out = "\"";
    for (char ch : s) {
        const auto c = static_cast<unsigned char>(ch);
        switch (ch) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            default:
                if (c < 0x20) {
                    static constexpr char hex[] = "0123456789abcdef";
                    out += "\\u00";
                    out += hex[c >> 4];
                    out += hex[c & 15];
                } else {
                    out += ch;
                }
        }
    }
    return out + "\"";
}

}  // namespace kiln::json
