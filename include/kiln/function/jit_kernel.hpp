#pragma once
// What a compiled kernel of kiln::function's kernel compiler includes (function/jit.hpp writes its source): the
// vocabulary's op structs and graph mode's fused loop, and nothing of eager or function mode.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <tuple>
#include <type_traits>

#include "../backend/cpu/fused_loop.hpp"
#include "../ops/ops.hpp"

namespace kiln::detail {

// Computes Roots (node types over indexed leaves and exact constants: they hold no run-time value) over elements
// [b, e): leaf K reads in[K], root J writes std::get<J>(out).
template <class... Roots, class Out>
void run_jit_group(const void* const* in, const Out& out, std::ptrdiff_t b, std::ptrdiff_t e, bool stream) {
    using list = unique_nodes_t<Roots...>;
    using loop = fused_loop<list, Roots...>;
    const auto lp = [&]<class... L>(types<L...>) {
        return std::tuple<const typename L::value_type*...>(
            static_cast<const typename L::value_type*>(in[indexed_position<L>::value])...);
    }(leaves_t<list>{});
    loop::flat_range(root_pack<Roots...>(Roots{}...), lp, out, b, e, stream);
}

}  // namespace kiln::detail
