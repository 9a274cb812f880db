#pragma once
// Feeds: binding data to an expression's leaves by name, checked at compile time, and the strided views that the
// loops read. A feed holds a pointer to the caller's data for the duration of one run.
#include <ranges>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "../core/device.hpp"
#include "../core/strided.hpp"
#include "unique_nodes.hpp"

namespace kiln {

namespace detail {
template <class Leaf, class Container, bool Held>
struct feed {
    using leaf_type = Leaf;
    using container_type = Container;
    const Container* data;
    constexpr const Container& get() const noexcept { return *data; }
};
template <class Leaf, class Container>
struct feed<Leaf, Container, true> {
    using leaf_type = Leaf;
    using container_type = Container;
    Container value;
    constexpr const Container& get() const noexcept { return value; }
};
}  // namespace detail

// A strided view of external memory: kiln::view(ptr, {rows, cols}) or with explicit strides (in elements). With a
// device (kiln::view(ptr, shape, kiln::cuda)) the pointer is that device's memory (a cudaMalloc'd buffer), and graph
// mode runs there (docs/gpu.md).
template <class T>
struct view_t {
    using value_type = std::remove_const_t<T>;
    T* data = nullptr;
    dims shape;
    dims strides;
    kiln::device device = kiln::cpu;
};

template <class T>
view_t<T> view(T* data, dims shape, kiln::device where = kiln::cpu) {
    view_t<T> v{data, shape, {}, where};
    v.strides.rank = shape.rank;
    std::ptrdiff_t s = 1;
    for (int i = shape.rank - 1; i >= 0; --i) {
        v.strides[i] = s;
        s *= shape[i];
    }
    return v;
}

template <class T>
view_t<T> view(T* data, dims shape, dims strides, kiln::device where = kiln::cpu) {
    if (strides.rank != shape.rank)
        throw shape_error("kiln: shape_error in 'view': shape " + to_string(shape) + " and strides " + to_string(strides) +
                          " have different ranks");
    return view_t<T>{data, shape, strides, where};
}

// A view of a contiguous host range held by the caller (a std::vector, std::array or std::span):
// kiln::view(xb, {32, 10}). Its length must be the shape's element count (a shape_error otherwise), so a batch
// buffer of the wrong size is caught before a run reads past it. Only lvalues: the range must outlive the feed.
template <std::ranges::contiguous_range R>
    requires std::ranges::sized_range<R> && (!std::is_pointer_v<std::remove_cvref_t<R>>)
view_t<std::remove_reference_t<std::ranges::range_reference_t<R>>> view(R& range, dims shape) {
    const auto n = static_cast<std::ptrdiff_t>(std::ranges::size(range));
    if (n != shape.numel())
        throw shape_error("kiln: shape_error in 'view': the range holds " + std::to_string(n) + " elements, and shape " +
                          to_string(shape) + " needs " + std::to_string(shape.numel()));
    return view(std::ranges::data(range), shape);
}

namespace detail {


template <class C>
struct container_element {
    using type = std::remove_cvref_t<decltype(*std::declval<C&>().data())>;
};
template <class C>
    requires requires { typename C::value_type; }
struct container_element<C> {
    using type = typename C::value_type;
};
// A container whose element type is known only at run time (kiln::tensor): checked when it is bound.
struct runtime_element {};
template <class C>
    requires requires(const C& c) { c.dtype(); c.raw_data(); }
struct container_element<C> {
    using type = runtime_element;
};

template <class C>
using container_element_t = typename container_element<C>::type;

template <class C>
inline constexpr bool is_vector_bool_v = false;
template <class A>
inline constexpr bool is_vector_bool_v<std::vector<bool, A>> = true;

// The device whose memory a container holds: a kiln::tensor's, a kiln::view's; every other container is the CPU's.
template <class C>
kiln::device device_of_container(const C& c) {
    if constexpr (requires { c.dtype(); c.raw_data(); c.device(); }) return c.device();
    else if constexpr (requires { c.strides; c.shape; c.data; c.device; } && !requires { c.size(); }) return c.device;
    else return (void)c, kiln::cpu;
}

// The device that a run's feeds live on: the first one off the CPU, or the CPU. (Feeds on other devices than this
// one are refused when they are bound, by fill_leaf, with the leaf named.)
template <class... Feeds>
kiln::device device_of_feeds(const Feeds&... feeds) {
    kiln::device d = kiln::cpu;
    ((d.type == device_type::cpu ? (void)(d = device_of_container(feeds.get())) : void()), ...);
    return d;
}

// Any container kiln accepts, as a strided view. P is `const T` for feeds and `T` for outputs. The container must
// live on device `on` (the CPU unless a caller runs on a device); `where` names the entry point in the error.
template <class P, class C>
void fill_strided(strided<P>& s, C& c, kiln::device on = kiln::cpu, const char* where = "run") {
    {
        const kiln::device d = device_of_container(c);
        if (d != on) [[unlikely]] {
#if !defined(KILN_GPU) || !KILN_GPU
            if (d.type != device_type::cpu)
                throw device_error(error_prefix("device_error", where) + "memory on " + to_string(d) + " was given, but this " +
                                   "program was built without kiln's GPU device (KILN_GPU; docs/gpu.md)");
#endif
            throw device_error(error_prefix("device_error", where) + "memory on " + to_string(d) + " was given to a run on " +
                               to_string(on) + " (where its feeds live; move tensors with .to(device); docs/gpu.md)");
        }
    }
    if constexpr (requires { c.dtype(); c.raw_data(); }) {  // kiln::tensor: its dtype is checked here
        s.data = c.template data<P>();
        s.shape = c.shape();
        s.strides = c.strides();
    } else if constexpr (requires { c.strides; c.shape; c.data; } && !requires { c.size(); }) {  // kiln::view_t
        s.data = c.data;
        s.shape = c.shape;
        s.strides = c.strides;
    } else if constexpr (requires { c.shape(); c.strides(); c.data(); }) {  // xtensor containers and adaptors
        const auto& shp = c.shape();
        const auto& str = c.strides();
        s.shape.assign(shp.begin(), shp.size());
        s.strides.assign(str.begin(), str.size());
        if constexpr (requires { c.data_offset(); }) s.data = c.data() + c.data_offset();
        else s.data = c.data();
    } else if constexpr (requires { c.data(); c.size(); }) {  // std::vector, std::span, std::array
        s.data = c.data();
        s.shape.rank = s.strides.rank = 1;
        s.shape[0] = static_cast<std::ptrdiff_t>(c.size());
        s.strides[0] = 1;
    } else if constexpr (is_vector_bool_v<std::remove_cv_t<C>>) {
        static_assert(sizeof(C) == 0,
                      "kiln: std::vector<bool> stores bits, not bools, and cannot be a feed or an output; use "
                      "xt::xtensor<bool, N> or kiln::view over an array of bool.");
    } else {
        static_assert(sizeof(C) == 0,
                      "kiln: feeds and outputs are xtensor containers, std::vector, std::span or kiln::view(ptr, "
                      "shape); evaluate other expressions into a container first.");
    }
}

template <class P, class C>
strided<P> as_strided(C& c) {
    strided<P> s;
    fill_strided(s, c);
    return s;
}

// The diagnostics of mistaken feeds. Each is instantiated only by report_leaf_feed and its kind (below), where a check
// has failed and outside any constant expression: clang treats a failed static_assert met while evaluating a
// constant as making that evaluation fail as well, and would print follow-up errors. `Spelled` is the name as
// characters, which clang prints readably (see detail::spelled).
template <fixed_string Name, class Spelled = spelled_t<Name>>
struct no_feed_for_input {
    static_assert(never<Spelled>,
                  "kiln: an input of the expression has no feed; its name is the argument of "
                  "'no_feed_for_input' above. Pass \"name\"_in = data.");
};
template <fixed_string Name, class Spelled = spelled_t<Name>>
struct feed_names_no_input_of_the_expression {
    static_assert(never<Spelled>,
                  "kiln: a feed names no input of the expression; its name is the argument of "
                  "'feed_names_no_input_of_the_expression' above.");
};
template <fixed_string Name, class Spelled = spelled_t<Name>>
struct input_fed_twice {
    static_assert(never<Spelled>,
                  "kiln: an input is fed twice; its name is the argument of 'input_fed_twice' above.");
};
template <fixed_string Name, class Declared, class Fed, class Spelled = spelled_t<Name>>
struct feed_has_wrong_element_type {
    static_assert(never<Spelled>,
                  "kiln: the feed for an input has another element type than the input declares; see the "
                  "input's name, its declared type and the fed type in 'feed_has_wrong_element_type' above.");
};
template <fixed_string Name, class Spelled = spelled_t<Name>>
struct two_leaves_share_a_name {
    static_assert(never<Spelled>,
                  "kiln: two leaves of different types share a name (the argument of 'two_leaves_share_a_name' "
                  "above); a name means one input.");
};

template <class Leaf, class Feed>
inline constexpr bool names_match = (Leaf::name == Feed::leaf_type::name);

template <class Leaf, class... Feeds>
constexpr std::size_t feed_index() {
    constexpr bool match[] = {names_match<Leaf, Feeds>..., false};
    std::size_t i = 0;
    while (i < sizeof...(Feeds) && !match[i]) ++i;
    return i;
}

// The compile-time checks of a set of feeds against the leaves: plain values, with no diagnostic in them. An entry
// point tests them and, when one fails, calls the matching report_* function, which instantiates the diagnostic.
enum class leaf_feed_state { ok, missing, twice, wrong_type };
// The element type of the one feed for Leaf.
template <class Leaf, class... Feeds>
using fed_element_t = std::remove_const_t<container_element_t<
    const typename std::tuple_element_t<feed_index<Leaf, Feeds...>(), std::tuple<Feeds...>>::container_type>>;
template <class Leaf, class... Feeds>
constexpr leaf_feed_state leaf_feed_check() {
    constexpr std::size_t count = (std::size_t{names_match<Leaf, Feeds>} + ... + 0);
    if constexpr (count == 0) {
        return leaf_feed_state::missing;
    } else if constexpr (count > 1) {
        return leaf_feed_state::twice;
    } else {
        using fed = fed_element_t<Leaf, Feeds...>;
        if constexpr (!std::is_same_v<fed, typename Leaf::value_type> && !std::is_same_v<fed, runtime_element>)
            return leaf_feed_state::wrong_type;
        else return leaf_feed_state::ok;
    }
}
template <class Leaf, class... Feeds>
constexpr bool check_leaf_feed() {
    return leaf_feed_check<Leaf, Feeds...>() == leaf_feed_state::ok;
}
template <class Feed, class... Leaves>
constexpr bool check_feed_used() {
    return (names_match<Leaves, Feed> || ...);
}
template <class Leaf, class... Leaves>
constexpr bool check_name_unique() {
    return (std::size_t{Leaves::name == Leaf::name} + ... + 0) <= 1;
}

template <class Leaf, class... Feeds>
void report_leaf_feed() {
    constexpr leaf_feed_state state = leaf_feed_check<Leaf, Feeds...>();
    if constexpr (state == leaf_feed_state::missing) {
        (void)sizeof(no_feed_for_input<Leaf::name>);
    } else if constexpr (state == leaf_feed_state::twice) {
        (void)sizeof(input_fed_twice<Leaf::name>);
    } else if constexpr (state == leaf_feed_state::wrong_type) {
        (void)sizeof(feed_has_wrong_element_type<Leaf::name, typename Leaf::value_type, fed_element_t<Leaf, Feeds...>>);
    }
}
template <class Feed, class... Leaves>
void report_feed_used() {
    if constexpr (!check_feed_used<Feed, Leaves...>())
        (void)sizeof(feed_names_no_input_of_the_expression<Feed::leaf_type::name>);
}
template <class Leaf, class... Leaves>
void report_name_unique() {
    if constexpr (!check_name_unique<Leaf, Leaves...>()) (void)sizeof(two_leaves_share_a_name<Leaf::name>);
}

// `where` names the entry point that was called (kiln::run, kiln::run_into, kiln::session::run).
template <class Leaf>
void check_static_shape(const dims& fed, const char* where) {
    using S = typename Leaf::shape_type;
    if constexpr (!std::is_same_v<S, dynamic>) {
        bool ok = fed.rank == S::rank;
        for (int i = 0; ok && i < S::rank; ++i) ok = S::dims[i] == dyn || S::dims[i] == fed[i];
        if (!ok)
            throw shape_error(error_prefix("shape_error", where) + (is_param_v<Leaf> ? "parameter '" : "input '") +
                              std::string(Leaf::name.view()) + "' is declared with shape " +
                              static_shape_text<S>::get() + " but was fed shape " + to_string(fed));
    }
}

// A kiln::tensor fed to a leaf has its dtype checked at run time; the error names the entry point and the leaf. Every
// feed must live on device `on`, the run's.
template <class Leaf, class P, class C>
void fill_leaf(strided<P>& s, C& c, const char* where, kiln::device on) {
    const kiln::device d = device_of_container(c);
    if (d != on) [[unlikely]] {
        std::string why = on.type == device_type::cpu
                              ? "this run is on the CPU, where its other feeds live"
                              : "this run is on " + to_string(on) + ", where its other feeds live";
#if !defined(KILN_GPU) || !KILN_GPU
        if (d.type != device_type::cpu) why = "this program was built without kiln's GPU device (KILN_GPU)";
#endif
        throw device_error(error_prefix("device_error", where) + (is_param_v<Leaf> ? "parameter '" : "input '") +
                           std::string(Leaf::name.view()) + "' was fed memory on " + to_string(d) + ", but " + why +
                           " (move tensors with .to(device); docs/gpu.md)");
    }
    if constexpr (requires { c.dtype(); c.raw_data(); }) {
        using T = typename Leaf::value_type;
        if (c.dtype() != dtype_of<T>()) [[unlikely]]
            throw dtype_error(error_prefix("dtype_error", where) + (is_param_v<Leaf> ? "parameter '" : "input '") +
                              std::string(Leaf::name.view()) + "' is declared " + std::string(dtype_name<T>()) +
                              " but was fed a tensor of dtype " + std::string(name(c.dtype())) +
                              " (convert it with .to(kiln::" + std::string(dtype_name<T>()) + "))");
    }
    fill_strided(s, c, on, where);
}

// The leaves' views, in the order of the plan's leaves.
template <class LeafList>
struct bound_leaves;
template <class... Leaves>
struct bound_leaves<types<Leaves...>> {
    using type = std::tuple<strided<const typename Leaves::value_type>...>;

    // The compile-time checks of a set of feeds: names, types and use. Where check() is false, report() gives the
    // static_assert that names the mistake.
    template <class... Feeds>
    static constexpr bool check() {
        return (check_name_unique<Leaves, Leaves...>() && ...) && (check_leaf_feed<Leaves, Feeds...>() && ...) &&
               (check_feed_used<Feeds, Leaves...>() && ...);
    }
    template <class... Feeds>
    static void report() {
        (report_name_unique<Leaves, Leaves...>(), ...);
        (report_leaf_feed<Leaves, Feeds...>(), ...);
        (report_feed_used<Feeds, Leaves...>(), ...);
    }

    // `where` names the entry point in run-time errors.
    template <class... Feeds>
    static type bind(const char* where, const Feeds&... feeds) {
        if constexpr (check<Feeds...>()) {
            return bind_checked(where, feeds...);
        } else {
            report<Feeds...>();
            return type{};
        }
    }

    // Every feed must live on device `on` (the CPU unless the caller runs on a device).
    template <class... Feeds>
    static type bind_checked(const char* where, const Feeds&... feeds) {
        return bind_on(kiln::cpu, where, feeds...);
    }
    template <class... Feeds>
    static type bind_on(kiln::device on, const char* where, const Feeds&... feeds) {
        [[maybe_unused]] const auto all = std::forward_as_tuple(feeds...);
        type out;  // filled in place: the views are large enough that copying them shows at small sizes
        [&]<std::size_t... K>(std::index_sequence<K...>) {
            (fill_leaf<Leaves>(std::get<K>(out), std::get<feed_index<Leaves, Feeds...>()>(all).get(), where, on), ...);
            (check_static_shape<Leaves>(std::get<K>(out).shape, where), ...);
        }(std::index_sequence_for<Leaves...>{});
        return out;
    }
};

}  // namespace detail
}  // namespace kiln
