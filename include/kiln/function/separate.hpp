#pragma once
// Function mode's machinery compiled once per program with KILN_SEPARATE_KERNELS (as kiln/eager/separate.hpp does for
// eager ops; kiln/implementation.hpp defines them): the tracer, the passes, the comparison of traces made with other
// extents, and the executable (fusion, planning, running). A unit that calls a kiln::function then compiles only the
// parts that depend on the wrapped callable: under clang 14 at -O0 with AddressSanitizer, a unit that traces and
// calls one function took 13.0 s of CPU instead of 19.4 s (an empty main with kiln/kiln.hpp: 7.9 s).
#include <cstddef>
#include <string>
#include <span>
#include <utility>
#include <vector>

#include "dynamic_dims.hpp"
#include "executor.hpp"
#include "passes.hpp"
#include "tracer.hpp"

#define KILN_DETAIL_FUNCTION(P)                                                                                    \
    namespace kiln {                                                                                               \
    P passes::pass_report passes::optimize<0>(function_graph&);                                                    \
    namespace detail {                                                                                             \
    P class basic_tracer<0>;                                                                                       \
    P struct basic_executable<0>;                                                                                  \
    P void basic_executable<0>::fuse<0>();                                                                         \
    P void basic_executable<0>::prepare<0>();                                                                      \
    P std::vector<tensor> basic_executable<0>::run<0>(std::span<const tensor>, const std::vector<std::ptrdiff_t>&) \
        const;                                                                                                     \
    P std::vector<tensor> basic_executable<0>::run_graph<0>(std::span<const tensor>,                               \
                                                            const std::vector<std::ptrdiff_t>&) const;             \
    P std::string mark_dynamic<0>(function_graph&, const function_graph&,                                          \
                                  const std::vector<std::pair<std::ptrdiff_t, std::ptrdiff_t>>&);                  \
    P std::string check_dynamic<0>(const function_graph&, const function_graph&,                                   \
                                   const std::vector<std::pair<std::ptrdiff_t, std::ptrdiff_t>>&);                 \
    P std::string check_predicted<0>(const function_graph&, const function_graph&,                                 \
                                     const std::vector<std::ptrdiff_t>&);                                          \
    }                                                                                                              \
    }

#if defined(KILN_SEPARATE_KERNELS) && !defined(KILN_IMPLEMENTATION)
KILN_DETAIL_FUNCTION(extern template)
#endif
