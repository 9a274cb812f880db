#pragma once
// The run-time error hierarchy. Every message names the operation and the values involved.
#include <cstdio>
#include <stdexcept>
#include <string>
#include <string_view>

namespace kiln {

class error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// Shapes that cannot be combined (broadcasting, static shapes fed with other dimensions, outputs).
class shape_error : public error {
public:
    using error::error;
};

// An element type that an operation cannot take.
class dtype_error : public error {
public:
    using error::error;
};

// A device that is missing or that cannot hold the data.
class device_error : public error {
public:
    using error::error;
};

// A value outside what an operation accepts (a rank too large, a bad argument).
class value_error : public error {
public:
    using error::error;
};

// A file that cannot be read as what it claims to be (bad magic, a header that contradicts itself, sizes that
// disagree with the bytes present). The message names the file and what is wrong.
class file_error : public error {
public:
    using error::error;
};

// Something that kiln::function cannot trace: a value read from a symbolic tensor (item(), at(), a branch on data),
// or an op that has no traced form yet. The message names the function and says what to do instead.
class trace_error : public error {
public:
    using error::error;
};

namespace detail {

// The head of every run-time message, one form in every mode: "kiln: shape_error in 'session::run': ". `where`
// may name the entry point with or without its "kiln::".
inline std::string error_prefix(std::string_view kind, std::string_view where) {
    if (where.substr(0, 6) == "kiln::") where.remove_prefix(6);
    return "kiln: " + std::string(kind) + " in '" + std::string(where) + "': ";
}

// "1 spec", "2 specs": a count and its noun, for messages.
inline std::string count_of(std::size_t n, std::string_view noun) {
    return std::to_string(n) + " " + std::string(noun) + (n == 1 ? "" : "s");
}

// A number as text that reads back as the same double (%.17g): attributes, signatures and error messages.
inline std::string number_text(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    return buf;
}

}  // namespace detail

}  // namespace kiln
