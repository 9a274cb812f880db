#pragma once
// kiln/io.hpp's readers and writers compiled once per program with KILN_SEPARATE_KERNELS (as kiln/eager/separate.hpp
// does for eager ops; kiln/implementation.hpp defines them, and so includes kiln/io.hpp): loading a saved function
// or an ONNX model (which rebuilds every op it may meet), and writing either file. Under clang 14 at -O0 with
// AddressSanitizer a unit that calls kiln::load and kiln::load_onnx took 37.7 s of CPU where one that calls neither
// took 8.9 s.
#include <cstddef>
#include <ostream>
#include <string>
#include <vector>

#include "function_file.hpp"
#include "function_write.hpp"
#include "onnx_export.hpp"
#include "onnx_import.hpp"

#define KILN_DETAIL_IO(P)                                                                                          \
    namespace kiln {                                                                                               \
    P loaded_function load<0>(const std::string&, const load_options&);                                            \
    P loaded_function load_bytes<0>(const void*, std::size_t, const std::string&, const load_options&);            \
    P loaded_function load_onnx<0>(const std::string&, const load_options&);                                       \
    P loaded_function load_onnx_bytes<0>(const void*, std::size_t, const std::string&, const load_options&);       \
    P std::vector<spec> loaded_function::output_signature<0>() const;                                              \
    namespace detail {                                                                                             \
    P void write_function_stream<0>(std::ostream&, const executable&, const std::vector<spec>&, const std::string&, \
                                    const char*);                                                                  \
    P std::string onnx_model_bytes<0>(const executable&, const std::vector<spec>&, const std::string&,             \
                                      const char*);                                                                \
    }                                                                                                              \
    }

#if defined(KILN_SEPARATE_KERNELS) && !defined(KILN_IMPLEMENTATION)
KILN_DETAIL_IO(extern template)
#endif
