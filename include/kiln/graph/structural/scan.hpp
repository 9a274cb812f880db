#pragma once
// Graph mode's running sums and products: kiln::cumsum<Axis>(x), kiln::cumprod<Axis>(x) (and kiln::reverse as a
// second argument scans from the end). The op (shape rule, kernel, gradient) is ops::scan in ops/scan.hpp.
#include "../../ops/scan.hpp"
#include "common.hpp"

namespace kiln {

// kiln::cumsum<0>(x, kiln::reverse): scan from the end of the axis.
struct reverse_t {};
inline constexpr reverse_t reverse{};

namespace detail {
template <ops::scan_kind K, int Axis, bool Reverse, class E>
constexpr auto make_scan(const E& e) {
    static_assert(!std::is_same_v<value_type_t<E>, weak>,
                  "kiln: scan an expression with an element type (a constant alone has no axis to scan).");
    return structural<ops::with_attrs<ops::scan<K>, ops::scan_attrs{Axis, Reverse}>>(e);
}
}  // namespace detail

#define KILN_GRAPH_SCAN(fn, kind)                                                                                  \
    template <int Axis, class E>                                                                                    \
        requires is_graph_v<E>                                                                                      \
    constexpr auto fn(const E& e) {                                                                                 \
        return detail::make_scan<ops::scan_kind::kind, Axis, false>(e);                                             \
    }                                                                                                               \
    template <int Axis, class E>                                                                                    \
        requires is_graph_v<E>                                                                                      \
    constexpr auto fn(const E& e, reverse_t) {                                                                      \
        return detail::make_scan<ops::scan_kind::kind, Axis, true>(e);                                              \
    }
KILN_GRAPH_SCAN(cumsum, sum)
KILN_GRAPH_SCAN(cumprod, prod)
#undef KILN_GRAPH_SCAN

}  // namespace kiln
