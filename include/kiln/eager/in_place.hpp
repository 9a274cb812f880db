#pragma once
// In-place eager ops: a += b, -=, *=, /= on a tensor or on a temporary view (which writes into the tensor it views),
// and copying values into an existing tensor. Like PyTorch, the broadcast shape must be a's shape and the result's
// dtype must not leave a's kind. Included at the end of eager/elementwise.hpp, whose eager_apply they run.
#include <utility>

#include "elementwise.hpp"

namespace kiln {

namespace detail {

// a op= b: the result is written into a's storage. Like PyTorch, the broadcast shape must be a's shape and the
// promoted dtype must convert to a's without leaving its kind (an int32 tensor cannot take float results).
bool watched_by_a_tape(const tensor& t);

template <class Op, class B>
tensor& eager_in_place(tensor& a, const B& b) {
    if (recording_tapes > 0 && watched_by_a_tape(a))
        throw value_error("kiln: value_error in '" + std::string(Op::name) + "_' (in place): a gradient tape watches the "
                          "tensor, and writing into it would corrupt its gradient; use the out-of-place form");
    if (a.has_repeated_elements())
        throw value_error("kiln: value_error in '" + std::string(Op::name) + "_' (in place): the output " +
                          to_string(a.shape()) + " is a broadcast view whose elements repeat (stride 0); "
                          "write into a copy (.clone()) instead");
    dtype d;
    dims shape = a.shape();
    if constexpr (std::is_same_v<B, tensor>) {
        check_same_device(Op::name, {&a, &b});
        if (a.is_cpu() && !b.is_cpu()) throw_device_mismatch(std::string(Op::name) + "_", a.device(), b.device());
        shape = broadcast_named(Op::name, {&a, &b});
        d = promote(a.dtype(), b.dtype());
    } else {
        d = promote_with_scalar<B>(a.dtype());
    }
    d = compute_dtype<Op>(d);
    if (!(shape == a.shape()))
        throw shape_error("kiln: shape_error in '" + std::string(Op::name) + "_' (in place): the result's shape " +
                          to_string(shape) + " is not the output's " + to_string(a.shape()));
    if (kind_rank(d) > kind_rank(a.dtype()))
        throw dtype_error("kiln: dtype_error in '" + std::string(Op::name) + "_' (in place): the result's dtype " +
                          std::string(name(d)) + " cannot be stored in the output's dtype " +
                          std::string(name(a.dtype())) + " (a result may not move from floating to integer or "
                          "from a number to bool)");
    if (active_tracer) [[unlikely]] {
        std::vector<tensor> ins{a};
        std::string attrs;
        op_params params;
        params.pure_effect = true;
        if constexpr (std::is_same_v<B, tensor>) {
            ins.push_back(b);
        } else {
            attrs = "operand1=" + op_builder<operand_mode::eager>::number_text(b);
            if constexpr (std::is_floating_point_v<B>) params.add_number(static_cast<double>(b));
            else params.add(static_cast<std::int64_t>(b));
        }
        active_tracer->record_effect(std::string(Op::name) + "_", std::move(attrs), ins,
                                     [](std::span<const tensor> in, std::span<const std::int64_t> p) {
                                         tensor t = in[0];
                                         if constexpr (std::is_same_v<B, tensor>) eager_in_place<Op>(t, in[1]);
                                         else if constexpr (std::is_floating_point_v<B>)
                                             eager_in_place<Op>(t, static_cast<B>(param_number(p[0])));
                                         else eager_in_place<Op>(t, static_cast<B>(p[0]));
                                     }, 1, std::move(params));
        return a;
    }
    dispatch(a.dtype(), [&]<class T>() {
        if constexpr (std::is_same_v<B, tensor>) {
            tensor y = as_dtype(b, a.dtype());
            // A source that overlaps the output in another layout is read first, as if copied (NumPy's rule):
            // the fused loop would otherwise read elements it has already written.
            if (y.shares_storage_with(a) &&
                !(y.offset() == a.offset() && y.shape() == a.shape() && y.strides() == a.strides()))
                y = convert<T>(y);
            run_eager_into(a, make_node<Op>(indexed_leaf<0, T>{}, indexed_leaf<1, T>{}), a, y);
        } else {
            run_eager_into(a, make_node<Op>(indexed_leaf<0, T>{}, scalar<T>{value_cast<T>(b)}), a);
        }
    });
    return a;
}

}  // namespace detail

namespace detail {
template <int N>
tensor& tensor_copy(tensor& self, const tensor& src) {
    if (recording_tapes > 0 && watched_by_a_tape(self))
        throw value_error("kiln: value_error in 'copy_': writing into a tensor that a gradient tape watches would "
                          "corrupt its gradient; build a new tensor instead");
    if (self.has_repeated_elements())
        throw value_error("kiln: value_error in 'copy_': the output " + to_string(self.shape()) +
                          " is a broadcast view whose elements repeat (stride 0); write into a copy (.clone()) instead");
    check_same_device("copy_", {&self, &src});
    const dims shape = broadcast_named("copy_", {&self, &src});
    if (!(shape == self.shape()))
        throw shape_error("kiln: shape_error in 'copy_': a value of shape " + to_string(src.shape()) +
                          " cannot be written into a tensor of shape " + to_string(self.shape()));
    dispatch(self.dtype(), [&]<class T>() {
        tensor y = as_dtype(src, self.dtype());
        if (y.shares_storage_with(self) &&
            !(y.offset() == self.offset() && y.shape() == self.shape() && y.strides() == self.strides()))
            y = convert<T>(y);
        copy_into(self, y);
    });
    return self;
}
}  // namespace detail

template <class B>
tensor& operator+=(tensor& a, const B& b) { return detail::eager_in_place<ops::add>(a, detail::eager_operand(b)); }
template <class B>
tensor& operator-=(tensor& a, const B& b) { return detail::eager_in_place<ops::sub>(a, detail::eager_operand(b)); }
template <class B>
tensor& operator*=(tensor& a, const B& b) { return detail::eager_in_place<ops::mul>(a, detail::eager_operand(b)); }
template <class B>
tensor& operator/=(tensor& a, const B& b) { return detail::eager_in_place<ops::div>(a, detail::eager_operand(b)); }
// The same on a temporary view, which writes into the tensor it views: `m.slice(1, 1, 2) *= 100`, `x[0] += 1`.
template <class A, class B>
    requires std::is_same_v<A, tensor>  // a tensor prvalue or xvalue only, never a number converted to one
tensor operator+=(A&& a, const B& b) { detail::eager_in_place<ops::add>(a, detail::eager_operand(b)); return std::move(a); }
template <class A, class B>
    requires std::is_same_v<A, tensor>  // a tensor prvalue or xvalue only, never a number converted to one
tensor operator-=(A&& a, const B& b) { detail::eager_in_place<ops::sub>(a, detail::eager_operand(b)); return std::move(a); }
template <class A, class B>
    requires std::is_same_v<A, tensor>  // a tensor prvalue or xvalue only, never a number converted to one
tensor operator*=(A&& a, const B& b) { detail::eager_in_place<ops::mul>(a, detail::eager_operand(b)); return std::move(a); }
template <class A, class B>
    requires std::is_same_v<A, tensor>  // a tensor prvalue or xvalue only, never a number converted to one
tensor operator/=(A&& a, const B& b) { detail::eager_in_place<ops::div>(a, detail::eager_operand(b)); return std::move(a); }

}  // namespace kiln
