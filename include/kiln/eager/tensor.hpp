#pragma once
// kiln::tensor: a run-time typed, reference-counted, strided array on a device. Views share storage.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <cstring>
#include <array>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "../core/dtype.hpp"
#include "../core/error.hpp"
#include "../core/shape.hpp"
#include "../core/allocator.hpp"
#include "../core/device.hpp"
#include "../backend/gpu.hpp"
#include "../ops/slicing.hpp"
#include "storage.hpp"
#include "trace_seam.hpp"

namespace kiln {

class tensor;

namespace detail {

// Calls f.template operator()<T>() with T the C++ type of d.
template <class F>
decltype(auto) dispatch(dtype d, F&& f) {
    switch (d) {
        case dtype::boolean: return f.template operator()<bool>();
        case dtype::int32: return f.template operator()<std::int32_t>();
        case dtype::int64: return f.template operator()<std::int64_t>();
        case dtype::float32: return f.template operator()<float>();
        case dtype::float64: break;
    }
    return f.template operator()<double>();
}

// The C++ type a number is stored as in a rank-0 tensor: the dtype closest to it.
template <class T>
using scalar_storage_t = std::conditional_t<
    std::is_same_v<T, bool>, bool,
    std::conditional_t<std::is_floating_point_v<T>, std::conditional_t<(sizeof(T) <= 4), float, double>,
                       std::conditional_t<(sizeof(T) <= 4), std::int32_t, std::int64_t>>>;

// Out of line and cold: the check sits on every op's path, the message building must not.
[[noreturn, gnu::noinline, gnu::cold]] inline void throw_moved_from(const char* what) {
    throw value_error(std::string("kiln: value_error in '") + what +
                      "': the tensor was moved from (std::move leaves an empty tensor with no storage); assign a "
                      "tensor to it before using it again");
}

// Tensor identities for gradient tapes: unique across threads. Each thread takes a block of ids at a time, so
// a new tensor costs no locked instruction.
inline std::uint64_t next_tensor_id() {
    static std::atomic<std::uint64_t> counter{1};
    constexpr std::uint64_t block = 1 << 16;
    thread_local std::uint64_t next = 0, end = 0;
    if (next == end) {
        next = counter.fetch_add(block, std::memory_order_relaxed);
        end = next + block;
    }
    return next++;
}

// How many gradient tapes record on this thread; views consult it before building a backward function.
inline thread_local int recording_tapes = 0;

}  // namespace detail

class tensor;
namespace detail {
// Gradient helpers for views, defined with the tape.
tensor reduce_to(const tensor& g, const dims& shape);
tensor scatter_slice(const tensor& source, const tensor& g, int axis, std::ptrdiff_t start, std::ptrdiff_t stop,
                     std::ptrdiff_t step);
// t.copy_(src) (defined with the elementwise ops).
template <int N>
tensor& tensor_copy(tensor& self, const tensor& src);
// Records a view on the active tapes (defined with the tape). `backward` maps the view's gradient to the source's.
void record_view(const tensor& source, const tensor& view, std::function<tensor(const tensor&)> backward);
}  // namespace detail

class tensor {
public:
    // An empty float32 tensor of shape (0,).
    tensor() : storage_(empty_storage()), shape_(dims{0}), strides_(dims{1}) {}

    // A rank-0 tensor holding one number: kiln::tensor t = 2.0f; (float32 for float, float64 for double, int32 for
    // int, int64 for long and long long, bool for bool).
    template <class T>
        requires(std::is_arithmetic_v<T> && !std::is_same_v<T, char>)
    tensor(T value) : tensor(dtype_of<detail::scalar_storage_t<T>>(), dims{}) {
        *reinterpret_cast<detail::scalar_storage_t<T>*>(storage_->data) = static_cast<detail::scalar_storage_t<T>>(value);
    }

    // Copies share storage; a moved-from tensor is left empty, with shape (0,) and no storage, and every use of
    // its data (an op, a view, item(), printing) throws a kiln::value_error saying it was moved from. Assigning to
    // it makes it usable again.
    tensor(const tensor&) = default;
    tensor& operator=(const tensor&) & = default;
    tensor(tensor&& o) noexcept
        : storage_(std::move(o.storage_)), dtype_(o.dtype_), shape_(o.shape_), strides_(o.strides_),
          offset_(o.offset_), id_(o.id_), trainable_(o.trainable_) {
        o.become_moved_from();
    }
    tensor& operator=(tensor&& o) & noexcept {
        if (this != &o) {
            storage_ = std::move(o.storage_);
            dtype_ = o.dtype_;
            shape_ = o.shape_;
            strides_ = o.strides_;
            offset_ = o.offset_;
            id_ = o.id_;
            trainable_ = o.trainable_;
            o.become_moved_from();
        }
        return *this;
    }
    ~tensor() = default;

    // Assigning to a view writes into the elements it views, as in NumPy and PyTorch: t[0] = 5.0f, m(1, 2) = 3,
    // t.slice(0, 0, 2) = other (broadcast to the view's shape, converted to its dtype). Assigning to a named tensor
    // (an lvalue) rebinds the handle instead, as copying a shared pointer does.
    // (Templates, like copy_ below: their kernels are compiled only in the programs that use them.)
    template <int = 0>
    tensor& operator=(const tensor& value) && {
        return copy_(value);
    }

    // Writes `src` (broadcast to this shape, converted to this dtype) into this tensor's elements, in place.
    // (Defined in class, calling a function declared without default arguments: nvcc's host-code generator
    // repeats the default of an out-of-class member template definition, which g++ then rejects.)
    template <int N = 0>
    tensor& copy_(const tensor& src) {
        return detail::tensor_copy<N>(*this, src);
    }
    // Sets every element to `value`.
    template <class T>
        requires std::is_arithmetic_v<T>
    tensor& fill_(T value) {
        return copy_(tensor(value));
    }

    // t[i]: the sub-tensor at index i of the first dimension (a view; negative i counts from the end).
    tensor operator[](std::ptrdiff_t i) const { return select(0, i); }
    // t[index]: NumPy's advanced indexing on the first dimension. An integer tensor selects rows (a copy,
    // kiln::index_select(t, 0, index)); a bool tensor of t's shape selects the elements where it is true into a 1-D
    // copy (kiln::masked_select), and one of t's leading extents the sub-tensors where it is true, stacked; any other
    // mask shape is a shape_error (no broadcasting, as in NumPy). Both are recorded on gradient tapes.
    template <int = 0>
    tensor operator[](const tensor& index) const;
    // t(i, j, ...): the sub-tensor at those indices of the leading dimensions (a view; all indices give a rank-0
    // view, whose value item() reads and which assignment writes).
    template <class... I>
        requires(std::is_integral_v<I> && ...)
    tensor operator()(I... index) const {
        if (static_cast<int>(sizeof...(I)) > shape_.rank)
            throw value_error("kiln: value_error in 'index': " + std::to_string(sizeof...(I)) +
                              " indices for a tensor of shape " + to_string(shape_));
        tensor t = *this;
        ((t = t.select(0, static_cast<std::ptrdiff_t>(index))), ...);
        return t;
    }

    // False only for a tensor that was moved from.
    bool valid() const noexcept { return storage_ != nullptr; }

    // Uninitialized contiguous storage of the given dtype and shape.
    // Every extent must be non-negative and the byte count within 2^62 (a kiln::value_error otherwise).
    tensor(kiln::dtype d, const dims& shape) : dtype_(d), shape_(shape), strides_(detail::contiguous_strides(shape)) {
        const std::ptrdiff_t n = detail::checked_numel(shape, "tensor");
        storage_ = detail::allocate_storage(detail::checked_bytes(n, size_of(d), shape, "tensor"));
    }

    // Uninitialized contiguous storage on a device: kiln::cpu, or kiln::cuda where kiln's GPU device is compiled in
    // (a kiln::device_error otherwise, and when the device does not exist).
    tensor(kiln::dtype d, const dims& shape, const kiln::device& dev)
        : dtype_(d), shape_(shape), strides_(detail::contiguous_strides(shape)) {
        const std::ptrdiff_t n = detail::checked_numel(shape, "tensor");
        storage_ = detail::allocate_storage(detail::checked_bytes(n, size_of(d), shape, "tensor"), dev);
    }

    // A view of existing storage (used by views and by wrapping external memory).
    tensor(std::shared_ptr<detail::storage> s, kiln::dtype d, const dims& shape, const dims& strides,
           std::ptrdiff_t offset)
        : storage_(std::move(s)), dtype_(d), shape_(shape), strides_(strides), offset_(offset) {}

    // Identity for gradient tapes: copies of a handle share it; every op and view makes a new one.
    std::uint64_t id() const noexcept { return id_; }
    // Trainable tensors (kiln::variable) are watched by every tape without a call to watch().
    bool trainable() const noexcept { return trainable_; }

    kiln::dtype dtype() const noexcept { return dtype_; }
    const dims& shape() const noexcept { return shape_; }
    const dims& strides() const noexcept { return strides_; }
    std::ptrdiff_t offset() const noexcept { return offset_; }
    int dim() const noexcept { return shape_.rank; }
    int ndim() const noexcept { return shape_.rank; }  // NumPy's name for dim()
    std::ptrdiff_t numel() const noexcept { return shape_.numel(); }
    kiln::device device() const {
        check_valid("device");
        return storage_->dev;
    }
    std::size_t itemsize() const noexcept { return size_of(dtype_); }

    std::ptrdiff_t size(int d) const { return shape_[normalize_axis(d, "size")]; }

    bool is_contiguous() const noexcept {
        for (int i = 0; i < shape_.rank; ++i)
            if (shape_[i] == 0) return true;  // no element: any layout is the contiguous one
        std::ptrdiff_t expect = 1;
        for (int i = shape_.rank - 1; i >= 0; --i) {
            if (shape_[i] != 1 && strides_[i] != expect) return false;
            expect *= shape_[i];
        }
        return true;
    }

    // True when some element is reached from two indices (a broadcast view: a stride of 0 on an extent above 1).
    // Such a view can be read but not written in place.
    bool has_repeated_elements() const noexcept {
        for (int i = 0; i < shape_.rank; ++i)
            if (shape_[i] > 1 && strides_[i] == 0) return true;
        return false;
    }

    const std::shared_ptr<detail::storage>& storage_handle() const noexcept { return storage_; }

    // True when both tensors are views of one storage.
    bool shares_storage_with(const tensor& other) const noexcept { return storage_ == other.storage_; }

    // The first element's address, typed; the dtype must match.
    template <class T>
    T* data() const {
        check_valid("data");
        check_not_symbolic("tensor::data");
        if (dtype_of<std::remove_const_t<T>>() != dtype_)
            throw dtype_error("kiln: dtype_error in 'tensor::data': the tensor's dtype is " + std::string(name(dtype_)) +
                              ", not " + std::string(dtype_name<std::remove_const_t<T>>()));
        return reinterpret_cast<T*>(storage_->data) + offset_;
    }
    void* raw_data() const {
        check_valid("data");
        check_not_symbolic("tensor::data");
        return storage_->data + static_cast<std::size_t>(offset_) * itemsize();
    }

    // Throws the moved-from error when this tensor was moved from; `what` names the use.
    void check_valid(const char* what) const {
        if (!storage_) [[unlikely]]
            detail::throw_moved_from(what);
    }

    // True for the symbolic tensors that kiln::function traces with (a dtype and a shape, no data).
    bool is_symbolic() const noexcept { return storage_ && storage_->trace_owner; }

    // Throws kiln::trace_error when this tensor is symbolic: `what` reads its values.
    void check_not_symbolic(const char* what) const {
        if (storage_->trace_owner) [[unlikely]]
            storage_->trace_owner->refuse(what);
    }
    void check_not_symbolic(const char* what, const detail::call_site& loc) const {
        if (storage_->trace_owner) [[unlikely]]
            storage_->trace_owner->refuse(what, detail::location_text(loc));
    }

    // The value of a one-element tensor, converted to T. (While a function traces, a symbolic tensor has no value:
    // the kiln::trace_error names the line that asked.)
    template <class T>
    T item(detail::call_site loc = detail::call_site::current()) const {
        check_valid("data");
        check_not_symbolic("tensor::item", loc);
        if (numel() != 1)
            throw value_error("kiln: value_error in 'tensor::item': the tensor has " + std::to_string(numel()) +
                              " elements (shape " + to_string(shape_) + "), not one");
        return detail::dispatch(dtype_, [&]<class U>() {
            U v;
            detail::read_bytes(*storage_, static_cast<std::size_t>(offset_) * sizeof(U), &v, sizeof(U));
            return value_cast<T>(v);
        });
    }

    // `if (t)`: the value of a one-element tensor as a bool (nonzero is true). A tensor of other sizes has no one
    // truth value (reduce it with kiln::any or kiln::all first); a symbolic one has none while a function traces
    // (use kiln::cond or kiln::where).
    explicit operator bool() const {
        check_valid("operator bool");
        check_not_symbolic("tensor::operator bool");
        if (numel() != 1)
            throw value_error("kiln: value_error in 'tensor::operator bool': the tensor has " + std::to_string(numel()) +
                              " elements (shape " + to_string(shape_) + "), so it has no one truth value; reduce it "
                              "with kiln::any or kiln::all first");
        return item<bool>();
    }

    // The element at a multi-index, converted to T (bounds-checked; for tests and inspection, not loops).
    template <class T>
    T at(std::initializer_list<std::ptrdiff_t> index,
         detail::call_site loc = detail::call_site::current()) const {
        if (static_cast<int>(index.size()) != shape_.rank)
            throw value_error("kiln: value_error in 'tensor::at': " + std::to_string(index.size()) + " indices for a tensor of rank " +
                              std::to_string(shape_.rank));
        check_valid("at");
        check_not_symbolic("tensor::at", loc);
        std::ptrdiff_t off = 0;
        int d = 0;
        for (std::ptrdiff_t i : index) {
            if (i < 0) i += shape_[d];
            if (i < 0 || i >= shape_[d])
                throw value_error("kiln: value_error in 'tensor::at': index " + std::to_string(i) + " is out of range for dimension " +
                                  std::to_string(d) + " of shape " + to_string(shape_));
            off += i * strides_[d++];
        }
        return detail::dispatch(dtype_, [&]<class U>() {
            U v;
            detail::read_bytes(*storage_, static_cast<std::size_t>(offset_ + off) * sizeof(U), &v, sizeof(U));
            return value_cast<T>(v);
        });
    }

    // ---- views: no copies ----

    tensor permute(std::initializer_list<int> order) const {
        if (static_cast<int>(order.size()) != shape_.rank)
            throw value_error("kiln: value_error in 'tensor::permute': " + std::to_string(order.size()) + " axes for shape " +
                              to_string(shape_));
        dims s = shape_, st = strides_;
        std::array<int, max_rank> inverse{};
        bool seen[max_rank] = {};
        int i = 0;
        for (int a : order) {
            const int ax = normalize_axis(a, "permute");
            if (seen[ax]) throw value_error("kiln: value_error in 'tensor::permute': axis " + std::to_string(a) + " repeats");
            seen[ax] = true;
            s[i] = shape_[ax];
            st[i] = strides_[ax];
            inverse[ax] = i;
            ++i;
        }
        tensor v;
        if (detail::active_tracer) [[unlikely]] {
            std::array<int, max_rank> fwd{};
            std::string text = "dims=";
            int k = 0;
            for (int a : order) {
                fwd[k] = a < 0 ? a + shape_.rank : a;
                if (k) text += ',';
                text += std::to_string(fwd[k++]);
            }
            v = traced_view("permute", std::move(text), [fwd, r = shape_.rank](const tensor& x, auto) { return x.permute_array(fwd, r); });
        } else {
            v = view(s, st, offset_);
        }
        return recorded(std::move(v), [inverse, r = shape_.rank](const tensor& g) {
            return g.permute_array(inverse, r);
        });
    }

    tensor permute_array(const std::array<int, max_rank>& order, int rank) const {
        switch (rank) {
            case 0: return *this;
            case 1: return permute({order[0]});
            case 2: return permute({order[0], order[1]});
            case 3: return permute({order[0], order[1], order[2]});
            case 4: return permute({order[0], order[1], order[2], order[3]});
            case 5: return permute({order[0], order[1], order[2], order[3], order[4]});
            case 6: return permute({order[0], order[1], order[2], order[3], order[4], order[5]});
            case 7: return permute({order[0], order[1], order[2], order[3], order[4], order[5], order[6]});
            default: return permute({order[0], order[1], order[2], order[3], order[4], order[5], order[6], order[7]});
        }
    }

    tensor transpose(int a, int b) const {
        const int x = normalize_axis(a, "transpose"), y = normalize_axis(b, "transpose");
        dims s = shape_, st = strides_;
        std::swap(s[x], s[y]);
        std::swap(st[x], st[y]);
        tensor v = detail::active_tracer ? traced_view("transpose", "dim0=" + std::to_string(x) + " dim1=" + std::to_string(y),
                                                       [x, y](const tensor& t, auto) { return t.transpose(x, y); })
                                         : view(s, st, offset_);
        return recorded(std::move(v), [x, y](const tensor& g) { return g.transpose(x, y); });
    }

    // Elements [start, stop) with a step along one dimension, with NumPy's rules: negative start and stop count
    // from the end and are clamped to the dimension; a negative step walks backwards from start down to (not
    // including) stop, so slice(0, -1, kiln::slice_begin, -1) reverses (a view with a negative stride).
    tensor slice(int axis, std::ptrdiff_t start, std::ptrdiff_t stop, std::ptrdiff_t step = 1) const {
        const int ax = normalize_axis(axis, "slice");
        if (step == 0) throw value_error("kiln: value_error in 'tensor::slice': the step must not be 0");
        if (step == std::numeric_limits<std::ptrdiff_t>::min())
            throw value_error("kiln: value_error in 'tensor::slice': the step is out of range");
        const std::ptrdiff_t raw_start = start, raw_stop = stop;
        dims s = shape_, st = strides_;
        const ops::slice_range r = ops::slice_of(ops::slice_attrs{ax, start, stop, step, 0, 0}, shape_[ax]);
        s[ax] = r.count;
        start = r.first;
        st[ax] = s[ax] > 1 ? strides_[ax] * step : strides_[ax];  // |step| < n here, so the product fits
        const std::ptrdiff_t first = start;
        tensor v = detail::active_tracer
                       ? traced_view("slice",
                                     "axis=" + std::to_string(ax) + " start=" + std::to_string(raw_start) +
                                         " stop=" + std::to_string(raw_stop) + " step=" + std::to_string(step),
                                     [ax](const tensor& t, std::span<const std::int64_t> p) {
                                         return t.slice(ax, p[0], p[1], p[2]);
                                     },
                                     detail::op_params{.values = {raw_start, raw_stop, step}})
                       : view(s, st, offset_ + first * strides_[ax]);
        return recorded(std::move(v),
                        [src = *this, ax, raw_start, raw_stop, step](const tensor& g) {
                            return detail::scatter_slice(src, g, ax, raw_start, raw_stop, step);
                        });
    }

    // The sub-tensor at one index of a dimension (the dimension is removed).
    tensor select(int axis, std::ptrdiff_t index) const {
        const int ax = normalize_axis(axis, "select");
        if (index < 0) index += shape_[ax];
        if (index < 0 || index >= shape_[ax])
            throw value_error("kiln: value_error in 'tensor::select': index " + std::to_string(index) + " is out of range for axis " +
                              std::to_string(ax) + " of shape " + to_string(shape_));
        dims s, st;
        s.rank = st.rank = shape_.rank - 1;
        for (int i = 0, j = 0; i < shape_.rank; ++i)
            if (i != ax) s[j] = shape_[i], st[j++] = strides_[i];
        tensor v = detail::active_tracer
                       ? traced_view("select", "axis=" + std::to_string(ax) + " index=" + std::to_string(index),
                                     [ax](const tensor& t, std::span<const std::int64_t> p) { return t.select(ax, p[0]); },
                                     detail::op_params{.values = {index}})
                       : view(s, st, offset_ + index * strides_[ax]);
        return recorded(std::move(v), [src = *this, ax, index](const tensor& g) {
            return detail::scatter_slice(src, g.unsqueeze(ax), ax, index, index + 1, 1);
        });
    }

    tensor unsqueeze(int axis) const {
        if (axis < 0) axis += shape_.rank + 1;
        if (axis < 0 || axis > shape_.rank || shape_.rank == max_rank)
            throw value_error("kiln: value_error in 'tensor::unsqueeze': axis " + std::to_string(axis) + " is out of range for shape " +
                              to_string(shape_));
        dims s, st;
        s.rank = st.rank = shape_.rank + 1;
        for (int i = 0, j = 0; i < s.rank; ++i) {
            if (i == axis) s[i] = 1, st[i] = 0;
            else s[i] = shape_[j], st[i] = strides_[j++];
        }
        tensor v = detail::active_tracer ? traced_view("unsqueeze", "axis=" + std::to_string(axis),
                                                       [axis](const tensor& t, auto) { return t.unsqueeze(axis); })
                                         : view(s, st, offset_);
        return recorded(std::move(v), [axis](const tensor& g) { return g.squeeze(axis); });
    }

    // Removes one size-1 dimension, or all of them.
    tensor squeeze(int axis) const {
        const int ax = normalize_axis(axis, "squeeze");
        if (shape_[ax] != 1)
            throw value_error("kiln: value_error in 'tensor::squeeze': dimension " + std::to_string(ax) + " of shape " +
                              to_string(shape_) + " has size " + std::to_string(shape_[ax]) + ", not 1");
        return select(ax, 0);
    }
    tensor squeeze() const {
        tensor t = *this;
        for (int i = t.dim() - 1; i >= 0; --i)
            if (t.shape_[i] == 1) t = t.select(i, 0);
        return t;
    }

    // Repeats size-1 and missing leading dimensions by stride 0.
    tensor broadcast_to(const dims& target) const {
        detail::checked_numel(target, "broadcast_to");
        dims st;
        st.rank = target.rank;
        bool ok = target.rank >= shape_.rank;
        for (int i = 0; ok && i < target.rank; ++i) {
            const int j = i - (target.rank - shape_.rank);
            if (j < 0) st[i] = 0;
            else if (shape_[j] == target[i]) st[i] = shape_[j] == 1 ? 0 : strides_[j];
            else if (shape_[j] == 1) st[i] = 0;
            else ok = false;
        }
        if (!ok)
            throw shape_error("kiln: shape_error in 'broadcast_to': cannot broadcast shape " + to_string(shape_) +
                              " to " + to_string(target));
        tensor v;
        if (detail::active_tracer) [[unlikely]] {
            detail::op_params p;
            p.add_dims(target);
            v = traced_view("broadcast_to", "shape=" + detail::dims_text(target),
                            [r = target.rank](const tensor& t, std::span<const std::int64_t> q) {
                                return t.broadcast_to(detail::param_dims(q, 0, r));
                            },
                            std::move(p));
        } else {
            v = view(target, st, offset_);
        }
        return recorded(std::move(v), [s = shape_](const tensor& g) { return detail::reduce_to(g, s); });
    }

    // A view with a new shape when the layout allows it, a contiguous copy otherwise. One dimension may be -1.
    tensor reshape(dims target) const;

    // Contiguous data (this tensor itself when it already is).
    tensor contiguous() const;
    tensor clone() const;
    tensor to(kiln::dtype d) const;
    // A copy on another device (this tensor itself when it is there already), recorded on gradient tapes: the
    // gradient returns to this tensor's device. kiln::cuda needs kiln's GPU device (KILN_GPU) and a GPU.
    tensor to(const kiln::device& d) const;
    // True when the tensor's storage is in host memory (kiln::cpu).
    bool is_cpu() const { return device().type == device_type::cpu; }

private:
    // A view traced by kiln::function: `f` makes the same view of a real tensor when the function runs.
    template <class F>
    tensor traced_view(std::string_view op, std::string attrs, F f, detail::op_params params = {}) const {
        check_valid(op.data());
        return detail::active_tracer->record(
            op, std::move(attrs), std::span<const tensor>(this, 1),
            [f](std::span<const tensor> in, std::span<const std::int64_t> p) { return f(in[0], p); }, std::move(params));
    }

    tensor view(const dims& s, const dims& st, std::ptrdiff_t off) const {
        check_valid("view");
        return tensor(storage_, dtype_, s, st, off);
    }

    void become_moved_from() noexcept {
        storage_.reset();  // (a no-op after the move; kept for clarity)
        dtype_ = dtype::float32;
        shape_.rank = strides_.rank = 1;
        shape_[0] = 0;
        strides_[0] = 1;
        offset_ = 0;
        id_ = 0;
        trainable_ = false;
    }

    template <class Backward>
    tensor recorded(tensor v, Backward&& backward) const {
        if (detail::recording_tapes > 0) detail::record_view(*this, v, std::forward<Backward>(backward));
        return v;
    }

    int normalize_axis(int axis, const char* op) const {
        const int a = axis < 0 ? axis + shape_.rank : axis;
        if (a < 0 || a >= shape_.rank)
            throw value_error("kiln: value_error in 'tensor::" + std::string(op) + "': axis " + std::to_string(axis) +
                              " is out of range for shape " + to_string(shape_));
        return a;
    }

    // One shared empty storage for default-constructed tensors, so that declaring one allocates nothing.
    static const std::shared_ptr<detail::storage>& empty_storage() {
        static const std::shared_ptr<detail::storage> s = detail::allocate_storage(0);
        return s;
    }

    std::shared_ptr<detail::storage> storage_;
    kiln::dtype dtype_ = dtype::float32;
    dims shape_;
    dims strides_;
    std::ptrdiff_t offset_ = 0;
    std::uint64_t id_ = detail::next_tensor_id();

protected:
    bool trainable_ = false;
};


namespace detail {

// A tensor type that depends on a template parameter: expressions on it are compiled when the template is
// instantiated, not where it is defined (an operator on plain tensors returns `auto`, whose body, with its kernels
// for every dtype, the compiler would otherwise instantiate at the definition). Eager functions whose bodies run
// elementwise ops are templates `template <int N = 0>` computing on dependent_tensor<N>, so that a translation unit
// compiles their kernels only when it calls them (issue #13: compile time).
// (dependent<N, T>::type is T, a type that depends on N, for any T.)
template <int N, class T = tensor>
struct dependent {
    using type = T;
};
template <int N>
using dependent_tensor = typename dependent<N>::type;

}  // namespace detail

}  // namespace kiln
