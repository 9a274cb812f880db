#pragma once
// Parameter initializers, one set for every mode: a graph-mode parameter names one as its type
// (kiln::param<"w", float, kiln::shape<10, 64>, kiln::init::glorot_uniform>, made by the session on first use),
// and eager mode's layers call the same ones (nn::dense, nn::glorot_uniform). make(shape, dtype, generator) draws
// like kiln::uniform and kiln::randn, so a session and eager mode given the same generator state start from the
// same numbers.
#include <cmath>

#include "random.hpp"
#include "tensor.hpp"

namespace kiln {

namespace init {
namespace detail {
template <class F>
tensor fill(const dims& s, dtype d, F f) {
    tensor t(d, s);
    kiln::detail::dispatch(d, [&]<class T>() {
        if constexpr (std::is_floating_point_v<T>) {
            T* p = t.data<T>();
            for (std::ptrdiff_t i = 0, n = t.numel(); i < n; ++i) p[i] = static_cast<T>(f());
        } else {
            throw dtype_error("kiln: dtype_error in 'init': parameters are float32 or float64");
        }
    });
    return t;
}
inline void fans(const dims& s, double& in, double& out) {
    if (s.rank == 0) in = out = 1;
    else if (s.rank == 1) in = out = static_cast<double>(s[0]);
    else {
        double receptive = 1;
        for (int i = 2; i < s.rank; ++i) receptive *= static_cast<double>(s[i]);
        in = static_cast<double>(s[0]) * receptive;
        out = static_cast<double>(s[1]) * receptive;
    }
}
}  // namespace detail
struct zeros {
    static tensor make(const dims& s, dtype d, generator&) { return detail::fill(s, d, [] { return 0.0; }); }
};
struct ones {
    static tensor make(const dims& s, dtype d, generator&) { return detail::fill(s, d, [] { return 1.0; }); }
};
// Uniform in +-sqrt(6 / (fan_in + fan_out)); fan_in is the first dimension (a dense weight is (in, out)).
struct glorot_uniform {
    static tensor make(const dims& s, dtype d, generator& g) {
        double in, out;
        detail::fans(s, in, out);
        const double limit = std::sqrt(6.0 / (in + out)), low = -limit, high = limit;
        return detail::fill(s, d, [&] { return low + (high - low) * g.uniform(); });
    }
};
// Normal with standard deviation sqrt(2 / fan_in) (for relu layers).
struct he_normal {
    static tensor make(const dims& s, dtype d, generator& g) {
        double in, out;
        detail::fans(s, in, out);
        const double scale = std::sqrt(2.0 / in);
        return detail::fill(s, d, [&] { return scale * g.normal(); });
    }
};
}  // namespace init

}  // namespace kiln
