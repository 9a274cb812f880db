#pragma once
// Python's slice rules on one axis, as every mode applies them: eager mode's tensor::slice (a view) and the
// mode-neutral ops::slice of ops/layout.hpp (graph mode's kiln::slice and kiln::split).
#include <algorithm>
#include <cstddef>
#include <limits>

#include "../core/shape.hpp"

namespace kiln {
namespace ops {

// One axis sliced as Python slices it (start, stop, step; kiln::slice_begin and kiln::slice_end run to either end;
// negative indices count from the end), or, when parts > 0, part `part` of `parts` equal parts (kiln::split).
struct slice_attrs {
    int axis = 0;
    std::ptrdiff_t start = 0, stop = slice_end, step = 1;
    int parts = 0, part = 0;
    friend constexpr bool operator==(const slice_attrs&, const slice_attrs&) = default;
};

// Where a slice of an extent-n axis begins, how many elements it has, and its step.
struct slice_range {
    std::ptrdiff_t first = 0, count = 0, step = 1;
    const char* why = nullptr;
};
constexpr slice_range slice_of(const slice_attrs& a, std::ptrdiff_t n) {
    slice_range r;
    if (a.parts > 0) {
        if (n % a.parts != 0) return {0, 0, 1, "the parts do not divide the extent"};
        if (a.part < 0 || a.part >= a.parts) return {0, 0, 1, "the part is out of range"};
        r.count = n / a.parts;
        r.first = a.part * r.count;
        return r;
    }
    if (a.step == 0) return {0, 0, 1, "the step must not be 0"};
    if (a.step == std::numeric_limits<std::ptrdiff_t>::min()) return {0, 0, 1, "the step is out of range"};
    std::ptrdiff_t start = a.start, stop = a.stop;
    r.step = a.step;
    if (a.step > 0) {
        auto clamp = [n](std::ptrdiff_t i) { return i < 0 ? std::max<std::ptrdiff_t>(i + n, 0) : std::min(i, n); };
        start = clamp(start);
        stop = clamp(stop);
        r.count = stop > start ? (stop - start - 1) / a.step + 1 : 0;
    } else {
        auto clamp = [n](std::ptrdiff_t i) {
            if (i < 0) i = i < -n ? -1 : i + n;
            return std::min(i, n - 1);
        };
        start = clamp(start);
        stop = clamp(stop);
        r.count = start > stop ? (start - stop - 1) / -a.step + 1 : 0;
    }
    r.first = r.count > 0 ? start : 0;
    return r;
}

}  // namespace ops
}  // namespace kiln
