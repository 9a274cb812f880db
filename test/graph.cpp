// Graph construction: folding and exact identities visible in types, planning (unique nodes, CSE), run-time
// scalars, printing.
#include <kiln/kiln.hpp>

#include <atomic>
#include <vector>

#include "check.hpp"

using namespace kiln::literals;

namespace {

const auto x = "x"_in;
const auto y = "y"_in;
using X = std::remove_const_t<decltype(x)>;

// An instrumented op: squares its operand and counts how many times its kernel runs (once per batch or element).
std::atomic<long> counted_calls{0};
struct counted_square {
    static constexpr std::string_view name = "counted_square";
    static constexpr int arity = 1;
    template <class A>
    static A apply(const A& a) {
        ++counted_calls;
        return a * a;
    }
};
template <class A>
auto counted(const A& a) {
    return kiln::detail::make<counted_square>(a);
}

template <class E>
long calls_for(const E& e, const std::vector<float>& data) {
    counted_calls = 0;
    (void)kiln::run(e, "x"_in = data);
    return counted_calls.load();
}

}  // namespace

TEST_CASE("constants fold exactly at compile time") {
    static_assert(std::is_same_v<decltype(2_c * 3_c), decltype(6_c)>);
    static_assert(std::is_same_v<decltype(0.5_c), kiln::constant<1, 2>>);
    static_assert(std::is_same_v<decltype(1e-3_c), kiln::constant<1, 1000>>);
    static_assert(std::is_same_v<decltype(0.1_c + 0.2_c), decltype(0.3_c)>, "rational folding is exact");
    static_assert(std::is_same_v<decltype(-2_c), kiln::constant<-2>>);
    static_assert(std::is_same_v<decltype(1_c / 3_c * 3_c), decltype(1_c)>);
    static_assert(std::is_same_v<decltype(kiln::c<3, 2>), const kiln::constant<3, 2>>);
    static_assert(std::is_same_v<decltype(kiln::maximum(2_c, 5_c)), decltype(5_c)>);
    static_assert(std::is_same_v<decltype(kiln::abs(-4_c) - kiln::square(2_c)), decltype(0_c)>);
    static_assert(std::is_same_v<decltype(kiln::relu(-3_c)), decltype(0_c)>);
    // 1/0 is infinity at run time, not a compile-time constant.
    static_assert(kiln::is_node_v<decltype(1_c / 0_c)>);
    CHECK(kiln::run(1_c / 0_c)() == std::numeric_limits<double>::infinity());
    // Transcendental functions of constants stay nodes and are evaluated in the type of what they meet.
    auto e = kiln::exp(1_c) * x;
    CHECK(kiln::run(e, x = std::vector<float>{2.f})(0) == doctest::Approx(2 * 2.718281828f));
}

TEST_CASE("exact identities simplify types; inexact ones are not applied") {
    static_assert(std::is_same_v<decltype(x * 1_c), X>);
    static_assert(std::is_same_v<decltype(1_c * x), X>);
    static_assert(std::is_same_v<decltype(x + 0_c), X>);
    static_assert(std::is_same_v<decltype(0_c + x), X>);
    static_assert(std::is_same_v<decltype(x - 0_c), X>);
    static_assert(std::is_same_v<decltype(x / 1_c), X>);
    static_assert(std::is_same_v<decltype(-(-x)), X>);
    static_assert(std::is_same_v<decltype(x * -1_c), decltype(-x)>);
    static_assert(std::is_same_v<decltype(kiln::pow(x, 1_c)), X>);
    static_assert(std::is_same_v<decltype(kiln::abs(kiln::abs(x))), decltype(kiln::abs(x))>);
    static_assert(std::is_same_v<decltype((x + 0_c) * 1_c - 0_c), X>);
    // x * 0 and x - x are NaN for infinite x, so they stay.
    static_assert(kiln::is_node_v<decltype(x * 0_c)>);
    static_assert(kiln::is_node_v<decltype(x - x)>);
    const std::vector<float> v{std::numeric_limits<float>::infinity(), 1.f};
    const auto r = kiln::run(x * 0_c, x = v);
    CHECK(std::isnan(r(0)));
    CHECK(r(1) == 0.f);
    CHECK(std::isnan(kiln::run(x - x, x = v)(0)));
}

TEST_CASE("the planner lists each unique node once, in topological order") {
    auto e = kiln::relu(x * y + 0.5_c * x - y) * 2_c + y;
    using list = kiln::detail::unique_nodes_t<decltype(e)>;
    // x, y, x*y, 0.5*x, add, sub, relu, *2, +y
    static_assert(list::size == 9);
    static_assert(std::is_same_v<kiln::detail::at<0, list>::type, X>);
    static_assert(std::is_same_v<kiln::detail::at<list::size - 1, list>::type, decltype(e)>);
    static_assert(kiln::detail::leaves_t<list>::size == 2);
    // Children come before their users.
    using xy = decltype(x * y);
    static_assert(kiln::detail::index_of<xy, list>::value < kiln::detail::index_of<decltype(x * y + 0.5_c * x), list>::value);

    // A repeated subexpression is one node.
    auto twice = (x * y) * (x * y) + (x * y);
    static_assert(kiln::detail::unique_nodes_t<decltype(twice)>::size == 5);
}

TEST_CASE("common subexpressions are evaluated once per element") {
    std::vector<float> data(1000);
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = 0.001f * static_cast<float>(i);
    const long once = calls_for(counted(x), data);
    CHECK(once > 0);
    CHECK(once <= 1000);
    // Used three times, evaluated once per position.
    CHECK(calls_for(counted(x) + counted(x) * counted(x), data) == once);
    const auto r = kiln::run(counted(x) + counted(x) * counted(x), x = data);
    CHECK(r(500) == doctest::Approx(0.25f + 0.0625f));
    // Two different nodes: twice.
    CHECK(calls_for(counted(x) + counted(x + 1_c), data) == 2 * once);
}

TEST_CASE("run-time scalars are never merged by type") {
    static_assert(std::is_same_v<decltype(0.5f * x), decltype(0.7f * x)>);
    const std::vector<float> v{1.f, 2.f, -3.f};
    kiln_test::check_all_close(kiln::run(0.5f * x + 0.7f * x, x = v), std::vector<double>{1.2, 2.4, -3.6}, 1e-6);
    // The same with a shared pure subexpression under the scalars, and scalars in several roles.
    auto e = 0.5f * kiln::square(x) + 0.7f * kiln::square(x) - 2.0 * x / 4;
    kiln_test::check_all_close(kiln::run(e, x = v), std::vector<double>{1.2 - 0.5, 4.8 - 1, 10.8 + 1.5}, 1e-6);
    // A C++ double does not promote a float graph.
    static_assert(std::is_same_v<kiln::detail::value_type_t<decltype(2.0 * x)>, float>);
    // Counted nodes holding scalars are evaluated once per occurrence: two occurrences, two evaluations.
    std::vector<float> data(64, 1.f);
    const long once = calls_for(counted(x), data);
    CHECK(calls_for(counted(0.5f * x) + counted(0.7f * x), data) == 2 * once);
}

TEST_CASE("element types and static shapes are inferred") {
    const auto a = kiln::input<"a", double, kiln::shape<kiln::dyn, 3>>{};
    const auto b = kiln::input<"b", double, kiln::shape<3>>{};
    using S = kiln::detail::shape_of_t<decltype(a * b + 1_c)>;
    static_assert(std::is_same_v<S, kiln::shape<kiln::dyn, 3>>);
    static_assert(std::is_same_v<kiln::detail::shape_of_t<decltype(kiln::input<"d", double>{} + a)>, kiln::dynamic>);
    static_assert(std::is_same_v<kiln::detail::value_type_t<decltype(a < b)>, bool>);
    static_assert(std::is_same_v<kiln::detail::value_type_t<decltype(kiln::where(a < b, a, 0_c))>, double>);
    static_assert(std::is_same_v<kiln::detail::value_type_t<decltype(kiln::cast<float>(a))>, float>);
    static_assert(std::is_trivially_copyable_v<decltype(kiln::relu(a * b + 0.5 * a))>);
}

TEST_CASE("to_string prints infix with the fewest parentheses") {
    CHECK(kiln::to_string(kiln::relu(x * y + 0.5_c * x - y) * 2_c + y) == "relu(x * y + 0.5 * x - y) * 2 + y");
    CHECK(kiln::to_string(x - (y - x)) == "x - (y - x)");
    CHECK(kiln::to_string((x - y) - x) == "x - y - x");
    CHECK(kiln::to_string(x / (x * y)) == "x / (x * y)");
    CHECK(kiln::to_string(-(x + y)) == "-(x + y)");
    CHECK(kiln::to_string(kiln::c<1, 3> * x) == "1/3 * x");
    CHECK(kiln::to_string(0.25f * x) == "0.25 * x");
    CHECK(kiln::to_string(kiln::where(x < y, x, 0_c)) == "where(x < y, x, 0)");
    CHECK(kiln::to_string(kiln::cast<double>(x)) == "cast<float64>(x)");
    CHECK(kiln::to_string(kiln::pow(x, 2_c)) == "pow(x, 2)");
}

TEST_CASE("to_dot draws each unique node once") {
    const std::string dot = kiln::to_dot((x * y) * (x * y) + y);
    CHECK(dot.rfind("digraph kiln {", 0) == 0);
    auto count = [&](const std::string& s) {
        std::size_t n = 0;
        for (auto p = dot.find(s); p != std::string::npos; p = dot.find(s, p + 1)) ++n;
        return n;
    };
    CHECK(count("[label=\"mul\"]") == 2);  // x*y once, and the product of it with itself
    CHECK(count("[label=\"add\"]") == 1);
    CHECK(count("label=\"x\\ninput float32\"") == 1);
    CHECK(count("n2 -> n3;") == 2);  // the shared x*y feeds its square twice
    CHECK(dot.back() == '\n');
}

TEST_CASE("to_string and to_dot print several roots: a tuple (a step's gradients()) or a kiln::fetch") {
    CHECK(kiln::to_string(std::make_tuple(x * y, -y)) == "(x * y, -y)");
    CHECK(kiln::to_string(kiln::fetch(x + y, kiln::exp(x))) == "(x + y, exp(x))");
    // A tuple prints each element as it prints alone.
    const auto loss = kiln::sum(x * y + kiln::exp(x));
    CHECK(kiln::to_string(kiln::grad(loss, x, y)) ==
          "(" + kiln::to_string(kiln::grad(loss, x)) + ", " + kiln::to_string(kiln::grad(loss, y)) + ")");
    // Both roots share x * y: drawn once, with an edge to each root's node and each root marked.
    const std::string dot = kiln::to_dot(kiln::fetch((x * y) + y, (x * y) * x));
    auto count = [&](const std::string& s) {
        std::size_t n = 0;
        for (auto p = dot.find(s); p != std::string::npos; p = dot.find(s, p + 1)) ++n;
        return n;
    };
    CHECK(dot.rfind("digraph kiln {", 0) == 0);
    CHECK(count("[label=\"mul\"]") == 2);
    CHECK(count("[label=\"add\"]") == 1);
    CHECK(count("label=\"x\\ninput float32\"") == 1);
    CHECK(count("[label=\"root 0\", shape=plaintext]") == 1);
    CHECK(count("[label=\"root 1\", shape=plaintext]") == 1);
    CHECK(count(" -> r0;") == 1);
    CHECK(count(" -> r1;") == 1);
    CHECK(kiln::to_dot(std::make_tuple(x * y)) == kiln::to_dot(kiln::fetch(x * y)));
}
